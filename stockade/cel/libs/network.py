"""Kubernetes' URL, IP and CIDR libraries.

The opaque ``URL``, ``net.IP`` and ``net.CIDR`` types are tagged maps (see stockade.cel.functions) holding the
original URL text, the canonical address, or ``address/prefix``; ``string(ip)``/``string(cidr)`` print them.
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse
from typing import Any

from stockade.cel.functions import Library, tag_of, tagged, untag

URL_TYPE = "kubernetes.URL"
IP_TYPE = "net.IP"
CIDR_TYPE = "net.CIDR"

_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):(.*)$", re.DOTALL)
_PORT_RE = re.compile(r"^[0-9]*$")


def _split_url(text: str) -> dict[str, str]:
    """Parse like Go's ``url.ParseRequestURI``: absolute URIs or absolute paths only."""
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in text):
        raise ValueError(f'parse "{text}": net/url: invalid control character in URL')
    scheme, rest = "", text
    match = _SCHEME_RE.match(text)
    if match:
        scheme, rest = match.group(1), match.group(2)
    elif not text.startswith("/"):
        raise ValueError(f'parse "{text}": invalid URI for request')
    query = ""
    if "?" in rest:
        rest, query = rest.split("?", 1)
    host = ""
    if scheme and rest.startswith("//"):
        authority, slash, path = rest[2:].partition("/")
        path = slash + path
        if "@" in authority:
            authority = authority.rsplit("@", 1)[1]
        host = authority
        _validate_host(text, host)
    elif scheme and not rest.startswith("/"):
        # "mailto:x" style opaque URLs are accepted by Go; the path stays empty.
        path = ""
    else:
        path = rest
    return {"scheme": scheme, "host": host, "path": path, "query": query}


def _validate_host(text: str, host: str) -> None:
    if host.startswith("["):
        closing = host.find("]")
        if closing < 0:
            raise ValueError(f'parse "{text}": missing \']\' in host')
        port_part = host[closing + 1:]
        if port_part and (not port_part.startswith(":") or not _PORT_RE.match(port_part[1:])):
            raise ValueError(f'parse "{text}": invalid port "{port_part}" after host')
        return
    if ":" in host:
        port = host.rsplit(":", 1)[1]
        if not _PORT_RE.match(port):
            raise ValueError(f'parse "{text}": invalid port ":{port}" after host')
    if any(char in host for char in " <>\"{}|\\^`"):
        raise ValueError(f'parse "{text}": invalid character in host name')


def _url(text: str) -> dict[str, Any]:
    try:
        _split_url(text)
    except ValueError as error:
        raise ValueError(f"URL parse error during conversion from string: {error}") from None
    return tagged(URL_TYPE, text)


def _is_url(text: str) -> bool:
    try:
        _split_url(text)
    except ValueError:
        return False
    return True


def _url_part(url: dict[str, Any]) -> dict[str, str]:
    return _split_url(untag(url, URL_TYPE))


def _hostname(url: dict[str, Any]) -> str:
    host = _url_part(url)["host"]
    if host.startswith("["):
        return host[1:host.index("]")]
    return host.rsplit(":", 1)[0] if ":" in host else host


def _port(url: dict[str, Any]) -> str:
    host = _url_part(url)["host"]
    if host.startswith("["):
        tail = host[host.index("]") + 1:]
        return tail[1:] if tail.startswith(":") else ""
    return host.rsplit(":", 1)[1] if ":" in host else ""


def _escaped_path(url: dict[str, Any]) -> str:
    raw = _url_part(url)["path"]
    return urllib.parse.quote(urllib.parse.unquote(raw), safe="/!$&'()*+,;=:@-._~")


def _query(url: dict[str, Any]) -> dict[str, list[str]]:
    parsed: dict[str, list[str]] = {}
    for key, value in urllib.parse.parse_qsl(_url_part(url)["query"], keep_blank_values=True):
        parsed.setdefault(key, []).append(value)
    return parsed


def _parse_ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    if "%" in text:
        raise ValueError(f"IP address with zone value is not allowed: {text}")
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        raise ValueError(f"IP Address {text!r} parse error during conversion from string") from None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        raise ValueError(f"IPv4-mapped IPv6 address is not allowed: {text}")
    return address


def _ip(text: str) -> dict[str, Any]:
    return tagged(IP_TYPE, str(_parse_ip(text)))


def _is_ip(text: str) -> bool:
    try:
        _parse_ip(text)
    except ValueError:
        return False
    return True


def _is_canonical(text: str) -> bool:
    return str(_parse_ip(text)) == text


def _address(value: dict[str, Any]) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_address(untag(value, IP_TYPE))


def _is_link_local_multicast(value: dict[str, Any]) -> bool:
    address = _address(value)
    if address.version == 4:
        return address in ipaddress.ip_network("224.0.0.0/24")
    return address in ipaddress.ip_network("ff02::/16")


def _is_global_unicast(value: dict[str, Any]) -> bool:
    address = _address(value)
    if address.version == 4 and address == ipaddress.IPv4Address("255.255.255.255"):
        return False
    return not (address.is_unspecified or address.is_loopback or address.is_multicast or address.is_link_local)


def _parse_cidr(text: str) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]:
    address_text, slash, length_text = text.partition("/")
    if not slash or not length_text.isdigit() or (len(length_text) > 1 and length_text.startswith("0")):
        raise ValueError(f"network address parse error during conversion from string: netip.ParsePrefix({text!r}): "
                         "bad bits after slash")
    address = _parse_ip(address_text)
    length = int(length_text)
    if length > address.max_prefixlen:
        raise ValueError(f"network address parse error during conversion from string: netip.ParsePrefix({text!r}): "
                         "prefix length out of range")
    return address, length


def _cidr(text: str) -> dict[str, Any]:
    address, length = _parse_cidr(text)
    return tagged(CIDR_TYPE, f"{address}/{length}")


def _is_cidr(text: str) -> bool:
    try:
        _parse_cidr(text)
    except ValueError:
        return False
    return True


def _network(value: dict[str, Any]) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    return ipaddress.ip_network(untag(value, CIDR_TYPE), strict=False)


def _contains_ip(cidr: dict[str, Any], candidate: Any) -> bool:
    address = _parse_ip(candidate) if isinstance(candidate, str) else _address(candidate)
    network = _network(cidr)
    return address.version == network.version and address in network


def _contains_cidr(cidr: dict[str, Any], candidate: Any) -> bool:
    other = _network(_cidr(candidate) if isinstance(candidate, str) else candidate)
    network = _network(cidr)
    if other.prefixlen < network.prefixlen:
        return False
    if isinstance(other, ipaddress.IPv4Network) and isinstance(network, ipaddress.IPv4Network):
        return other.subnet_of(network)
    if isinstance(other, ipaddress.IPv6Network) and isinstance(network, ipaddress.IPv6Network):
        return other.subnet_of(network)
    return False  # different IP versions


def _cidr_ip(cidr: dict[str, Any]) -> dict[str, Any]:
    return tagged(IP_TYPE, untag(cidr, CIDR_TYPE).split("/")[0])


def _masked(cidr: dict[str, Any]) -> dict[str, Any]:
    return tagged(CIDR_TYPE, str(_network(cidr)))


def _to_string(value: dict[str, Any]) -> str:
    if tag_of(value) in (IP_TYPE, CIDR_TYPE, URL_TYPE):
        return str(value["value"])
    raise TypeError("no such overload: string() of a map")


def _family(value: dict[str, Any]) -> int:
    return _address(value).version


def build_urls() -> Library:
    library = Library("k8s.urls")
    library.add("url", ("string",), "opaque", _url)
    library.add("isURL", ("string",), "bool", _is_url)
    library.add("getScheme", ("map",), "string", lambda url: _url_part(url)["scheme"], member=True)
    library.add("getHost", ("map",), "string", lambda url: _url_part(url)["host"], member=True)
    library.add("getHostname", ("map",), "string", _hostname, member=True)
    library.add("getPort", ("map",), "string", _port, member=True)
    library.add("getEscapedPath", ("map",), "string", _escaped_path, member=True)
    library.add("getQuery", ("map",), "map", _query, member=True)
    return library


def build_ip() -> Library:
    library = Library("k8s.ip")
    library.add("ip", ("string",), "opaque", _ip)
    library.add("isIP", ("string",), "bool", _is_ip)
    library.add("ip.isCanonical", ("string",), "bool", _is_canonical)
    library.add("family", ("map",), "int", _family, member=True)
    library.add("isUnspecified", ("map",), "bool", lambda ip: _address(ip).is_unspecified, member=True)
    library.add("isLoopback", ("map",), "bool", lambda ip: _address(ip).is_loopback, member=True)
    library.add("isLinkLocalMulticast", ("map",), "bool", _is_link_local_multicast, member=True)
    library.add("isLinkLocalUnicast", ("map",), "bool",
                lambda ip: _address(ip).is_link_local and not _address(ip).is_multicast, member=True)
    library.add("isGlobalUnicast", ("map",), "bool", _is_global_unicast, member=True)
    library.add("string", ("map",), "string", _to_string, overload_id="k8s.net:string_of_tagged")
    return library


def build_cidr() -> Library:
    library = Library("k8s.cidr")
    library.add("cidr", ("string",), "opaque", _cidr)
    library.add("isCIDR", ("string",), "bool", _is_cidr)
    library.add("containsIP", ("map", "string"), "bool", _contains_ip, member=True)
    library.add("containsIP", ("map", "map"), "bool", _contains_ip, member=True)
    library.add("containsCIDR", ("map", "string"), "bool", _contains_cidr, member=True)
    library.add("containsCIDR", ("map", "map"), "bool", _contains_cidr, member=True)
    library.add("ip", ("map",), "opaque", _cidr_ip, member=True)
    library.add("masked", ("map",), "opaque", _masked, member=True)
    library.add("prefixLength", ("map",), "int", lambda cidr: _network(cidr).prefixlen, member=True)
    return library

"""Functions whose answers come from the caller: Kyverno's cluster, HTTP, global-context, image-metadata and
generator libraries, and the Kubernetes authorizer.

The engine answers them per activation (``CelActivation(values, providers={...})``), which lets ``kyverno test``
serve them from mocks and the admission path from real clients, without the CEL layer doing any I/O itself.
Namespaced policies use the shorter overloads (no namespace argument); the provider then receives
``namespace=None`` and must fill in the policy's own namespace.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Mapping, Protocol, runtime_checkable

from stockade.cel.functions import ANY_KINDS, Library, tagged, untag
from stockade.cel.values import to_json


@runtime_checkable
class ResourceProvider(Protocol):
    """Answers ``resource.Get/List/Post`` (Kyverno ``resource`` library)."""

    def get(self, api_version: str, resource: str, namespace: str | None, name: str) -> Mapping[str, Any]: ...

    def list(
        self, api_version: str, resource: str, namespace: str | None, label_selector: Mapping[str, str] | None
    ) -> Mapping[str, Any]: ...

    def post(self, api_version: str, resource: str, namespace: str | None, payload: Mapping[str, Any]) -> Any: ...

    def to_gvr(self, api_version: str, kind: str) -> str:
        """The REST resource (plural) serving ``kind`` in ``api_version``, as a RESTMapper would name it."""
        ...


@runtime_checkable
class HttpProvider(Protocol):
    """Answers ``http.Get/Post``; the result is what the policy sees (usually the decoded JSON body)."""

    def get(self, url: str, headers: Mapping[str, str]) -> Any: ...

    def post(self, url: str, body: Any, headers: Mapping[str, str]) -> Any: ...


@runtime_checkable
class HttpCaBundleProvider(Protocol):
    """An HTTP provider that can trust a given CA bundle (``http.Client(caBundle)``); one without this method
    answers ``http.Client(...)`` calls itself (offline mocks have no TLS)."""

    def with_ca_bundle(self, ca_bundle: str) -> HttpProvider: ...


@runtime_checkable
class GlobalContextProvider(Protocol):
    """Answers ``globalContext.Get(entry, projection)``; projection is "" when the policy omits it."""

    def get(self, name: str, projection: str) -> Any: ...


@runtime_checkable
class ImageDataProvider(Protocol):
    """Answers ``image.GetMetadata(ref)`` with the image's manifest/config metadata."""

    def get_metadata(self, image: str) -> Mapping[str, Any]: ...


@runtime_checkable
class GeneratorProvider(Protocol):
    """Receives ``generator.Apply(namespace, resources)`` calls of GeneratingPolicies."""

    def apply(self, namespace: str, resources: list[Mapping[str, Any]]) -> None: ...


@runtime_checkable
class AuthorizerProvider(Protocol):
    """Answers Kubernetes ``authorizer...check(verb)``; returns ``(decision, reason)`` with decision
    ``"allow"``, ``"deny"`` or ``"noOpinion"``."""

    def check(self, attributes: Mapping[str, Any]) -> tuple[str, str]: ...


@runtime_checkable
class ImageVerificationProvider(Protocol):
    """Answers ImageValidatingPolicy's ``verifyImageSignatures``, ``verifyAttestationSignatures``,
    ``extractPayload`` and ``getImageData`` (declared only for that policy kind, see ``cel.libs.imageverify``)."""

    def verify_image_signatures(self, image: str, attestors: list[Any]) -> int: ...

    def verify_attestation_signatures(self, image: str, attestation: str, attestors: list[Any]) -> int: ...

    def extract_payload(self, image: str, attestation: str) -> Any: ...

    def get_image_data(self, image: str) -> Mapping[str, Any]: ...


# Provider key -> list of (function name, parameter types, result type, adapter building the implementation).
ProviderAdapter = Callable[[Any], Callable[..., Any]]
_PROVIDER_FUNCTIONS: dict[str, list[tuple[str, tuple[str, ...], str, bool, ProviderAdapter]]] = {}


def _register(key: str, names: tuple[str, ...], params: tuple[str, ...], result: str, adapter: ProviderAdapter, *, member: bool = False) -> None:
    for name in names:
        _PROVIDER_FUNCTIONS.setdefault(key, []).append((name, params, result, member, adapter))


def _plain(value: Any) -> Any:
    """A request body as JSON: bytes stay bytes (sent as they are), CEL durations/timestamps become their strings."""
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    return to_json(value)


_S = "string"
_register("resource", ("resource.Get", "resource.get"), (_S, _S, _S, _S), "map",
          lambda p: lambda v, r, ns, n: p.get(v, r, ns, n))
_register("resource", ("resource.Get", "resource.get"), (_S, _S, _S), "map",
          lambda p: lambda v, r, n: p.get(v, r, None, n))
_register("resource", ("resource.List", "resource.list"), (_S, _S, _S), "map",
          lambda p: lambda v, r, ns: p.list(v, r, ns, None))
_register("resource", ("resource.List", "resource.list"), (_S, _S, _S, "map"), "map",
          lambda p: lambda v, r, ns, sel: p.list(v, r, ns, dict(sel)))
_register("resource", ("resource.List", "resource.list"), (_S, _S), "map",
          lambda p: lambda v, r: p.list(v, r, None, None))
_register("resource", ("resource.List", "resource.list"), (_S, _S, "map"), "map",
          lambda p: lambda v, r, sel: p.list(v, r, None, dict(sel)))
_register("resource", ("resource.Post", "resource.post"), (_S, _S, _S, "map"), "map",
          lambda p: lambda v, r, ns, body: p.post(v, r, ns, body))
_register("resource", ("resource.Post", "resource.post"), (_S, _S, "map"), "map",
          lambda p: lambda v, r, body: p.post(v, r, None, body))
# resource.ToGVR(apiVersion, kind) gives an opaque GroupVersionResource the Get/List overloads below accept in place
# of (apiVersion, resource).
GVR_TYPE = "schema.GroupVersionResource"


def _to_gvr(provider: ResourceProvider) -> Callable[[str, str], dict[str, Any]]:
    def to_gvr(api_version: str, kind: str) -> dict[str, Any]:
        group, _, version = api_version.rpartition("/")
        if not version or api_version.count("/") > 1:
            raise ValueError(f"failed to map kind to resource: unexpected GroupVersion string: {api_version}")
        return tagged(GVR_TYPE, {"group": group, "version": version, "resource": provider.to_gvr(api_version, kind)})

    return to_gvr


def _gvr(value: Any) -> tuple[str, str]:
    """(apiVersion, resource) of a ToGVR value."""
    gvr = untag(value, GVR_TYPE)
    return (f"{gvr['group']}/{gvr['version']}" if gvr["group"] else gvr["version"]), gvr["resource"]


_register("resource", ("resource.ToGVR", "resource.toGVR"), (_S, _S), "opaque", _to_gvr)
_register("resource", ("resource.Get", "resource.get"), ("map", _S, _S), "map",
          lambda p: lambda gvr, ns, n: p.get(*_gvr(gvr), ns, n))
_register("resource", ("resource.Get", "resource.get"), ("map", _S), "map",
          lambda p: lambda gvr, n: p.get(*_gvr(gvr), None, n))
_register("resource", ("resource.List", "resource.list"), ("map", _S), "map",
          lambda p: lambda gvr, ns: p.list(*_gvr(gvr), ns, None))
_register("resource", ("resource.List", "resource.list"), ("map", _S, "map"), "map",
          lambda p: lambda gvr, ns, sel: p.list(*_gvr(gvr), ns, dict(sel)))
_register("resource", ("resource.List", "resource.list"), ("map",), "map",
          lambda p: lambda gvr: p.list(*_gvr(gvr), None, None))
_register("resource", ("resource.List", "resource.list"), ("map", "map"), "map",
          lambda p: lambda gvr, sel: p.list(*_gvr(gvr), None, dict(sel)))
_register("http", ("http.Get", "http.get"), (_S,), "dyn", lambda p: lambda url: p.get(url, {}))
_register("http", ("http.Get", "http.get"), (_S, "map"), "dyn", lambda p: lambda url, h: p.get(url, dict(h)))
for _kind in ANY_KINDS:
    _register("http", ("http.Post", "http.post"), (_S, _kind), "dyn",
              lambda p: lambda url, body: p.post(url, _plain(body), {}))
    _register("http", ("http.Post", "http.post"), (_S, _kind, "map"), "dyn",
              lambda p: lambda url, body, h: p.post(url, _plain(body), dict(h)))
# http.Client(caBundle) gives a client trusting that bundle; Get/Post are then called on it as members.
HTTP_CLIENT_TYPE = "kyverno.http.Client"
_PEM_CERTIFICATE = re.compile(r"-----BEGIN CERTIFICATE-----\s*(.*?)\s*-----END CERTIFICATE-----", re.S)


def _http_client(ca_bundle: str) -> dict[str, Any]:
    """Kyverno accepts an empty bundle (the default client) or one holding at least one parseable certificate."""
    if ca_bundle:
        from cryptography import x509

        parsed = 0
        for match in _PEM_CERTIFICATE.finditer(ca_bundle):
            try:
                x509.load_pem_x509_certificate(match.group(0).encode())
                parsed += 1
            except ValueError:
                continue
        if not parsed:
            raise ValueError("request failed: failed to parse PEM CA bundle for APICall")
    return tagged(HTTP_CLIENT_TYPE, ca_bundle)


def _client_provider(provider: HttpProvider, client: Any) -> HttpProvider:
    ca_bundle = str(untag(client, HTTP_CLIENT_TYPE))
    if ca_bundle and isinstance(provider, HttpCaBundleProvider):
        return provider.with_ca_bundle(ca_bundle)
    return provider


_register("http", ("http.Client", "http.client"), (_S,), "opaque", lambda p: _http_client)
_register("http", ("Get", "get"), ("map", _S), "dyn", lambda p: lambda c, url: _client_provider(p, c).get(url, {}), member=True)
_register("http", ("Get", "get"), ("map", _S, "map"), "dyn",
          lambda p: lambda c, url, h: _client_provider(p, c).get(url, dict(h)), member=True)
for _kind in ANY_KINDS:
    _register("http", ("Post", "post"), ("map", _S, _kind), "dyn",
              lambda p: lambda c, url, body: _client_provider(p, c).post(url, _plain(body), {}), member=True)
    _register("http", ("Post", "post"), ("map", _S, _kind, "map"), "dyn",
              lambda p: lambda c, url, body, h: _client_provider(p, c).post(url, _plain(body), dict(h)), member=True)
_register("globalContext", ("globalContext.Get", "globalContext.get"), (_S,), "dyn", lambda p: lambda n: p.get(n, ""))
_register("globalContext", ("globalContext.Get", "globalContext.get"), (_S, _S), "dyn",
          lambda p: lambda n, proj: p.get(n, proj))
_register("image", ("image.GetMetadata", "image.getMetadata"), (_S,), "dyn", lambda p: lambda ref: p.get_metadata(ref))


def _apply(provider: GeneratorProvider) -> Callable[..., Any]:
    def apply(namespace: str, resources: list[Any]) -> bool:
        if not all(isinstance(item, dict) for item in resources):
            raise ValueError("failed to generate resources: every resource must be a map")
        provider.apply(namespace, to_json(resources))
        return True

    return apply


_register("generator", ("generator.Apply", "generator.apply"), (_S, "list"), "bool", _apply)


def _apply_in_own_namespace(provider: GeneratorProvider) -> Callable[..., Any]:
    """``generator.Apply(resources)``: Kyverno's overload for NamespacedGeneratingPolicies, which generate into the
    policy's own namespace (the provider's ``namespace``; cluster-wide policies have none and name one)."""
    def apply(resources: list[Any]) -> bool:
        namespace = str(getattr(provider, "namespace", "") or "")
        if not namespace:
            raise ValueError("generator.Apply(resources) is for namespaced policies; name the target namespace")
        return bool(_apply(provider)(namespace, resources))

    return apply


_register("generator", ("generator.Apply", "generator.apply"), ("list",), "bool", _apply_in_own_namespace)


_register("imageVerify", ("verifyImageSignatures",), (_S, "list"), "int",
          lambda p: lambda image, attestors: p.verify_image_signatures(image, list(attestors)))
_register("imageVerify", ("verifyAttestationSignatures",), (_S, _S, "list"), "int",
          lambda p: lambda image, attestation, attestors: p.verify_attestation_signatures(image, attestation, list(attestors)))
_register("imageVerify", ("extractPayload",), (_S, _S), "dyn", lambda p: lambda image, name: p.extract_payload(image, name))
_register("imageVerify", ("getImageData",), (_S,), "dyn", lambda p: lambda image: p.get_image_data(image))

# Providers whose functions a library of their own declares (only in the environments that include it).
_SELF_DECLARED: frozenset[str] = frozenset({"imageVerify"})


# Kyverno declares generator.Apply per policy scope: a GeneratingPolicy names the target namespace
# (``apply(namespace, resources)``), a NamespacedGeneratingPolicy generates into its own (``apply(resources)``); the
# other overload does not exist there, so calling it does not compile.  "providers" declares both (evaluation serves
# every kind from one environment); the policy check compiles each kind against its own.
PROVIDER_LIBRARY_VARIANTS = {"providers": None, "providers-cluster": 2, "providers-namespaced": 1}


def provider_library(variant: str = "providers") -> Library:
    """Declarations (without implementations) of every provider-answered function (``variant``: see
    PROVIDER_LIBRARY_VARIANTS)."""
    apply_arity = PROVIDER_LIBRARY_VARIANTS[variant]
    library = Library(variant)
    for key, entries in _PROVIDER_FUNCTIONS.items():
        if key in _SELF_DECLARED:
            continue
        for name, params, result, member, _ in entries:
            if key == "generator" and apply_arity is not None and len(params) != apply_arity:
                continue
            library.add(name, params, result, None, member=member, overload_id=f"provider:{key}:{name}:{'member' if member else 'global'}:{'_'.join(params)}")
    return library


def provider_implementations(
    providers: Mapping[str, Any],
) -> list[tuple[str, tuple[str, ...], str, bool, Callable[..., Any]]]:
    """Bind provider objects to the late-bound functions: (name, params, result, is_member, impl)."""
    bound: list[tuple[str, tuple[str, ...], str, bool, Callable[..., Any]]] = []
    for key, provider in providers.items():
        entries = _PROVIDER_FUNCTIONS.get(key)
        if entries is None:
            if key == "authorizer":
                continue  # the authorizer library binds it itself
            raise ValueError(f"unknown CEL provider {key!r}; known: {sorted(_PROVIDER_FUNCTIONS)} and 'authorizer'")
        for name, params, result, member, adapter in entries:
            bound.append((name, params, result, member, adapter(provider)))
    return bound


PROVIDER_KEYS: tuple[str, ...] = tuple(_PROVIDER_FUNCTIONS) + ("authorizer",)


# The identifiers through which an expression reaches a provider (a namespace such as ``resource`` of
# ``resource.Get``, or a global function name): an expression mentioning none of them makes no provider call.
PROVIDER_IDENTIFIERS: frozenset[str] = frozenset(
    {name.split(".")[0] for entries in _PROVIDER_FUNCTIONS.values() for name, _, _, member, _ in entries if not member}
    | {"authorizer"}
)

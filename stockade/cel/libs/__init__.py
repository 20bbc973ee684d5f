"""Registry of the CEL libraries implemented in Python (see ``stockade.cel.DEFAULT_LIBRARIES``)."""

from __future__ import annotations

from typing import Callable

from stockade.cel.functions import Library
from stockade.cel.libs.authz import authorizer_check_impl, build_authz, request_resource_check
from stockade.cel.libs.authz_envoy import build_authz_envoy
from stockade.cel.libs.authz_http import build_authz_http
from stockade.cel.libs.compare import build_compare
from stockade.cel.libs.compat import build_compat
from stockade.cel.libs.format import build_format
from stockade.cel.libs.jwt import build_jwt
from stockade.cel.libs.image import build_image
from stockade.cel.libs.imageverify import IMAGE_VERIFY_LIBRARY, build_imageverify
from stockade.cel.libs.kyverno import build_kyverno
from stockade.cel.libs.lists import build_jsonpatch, build_lists, build_sets
from stockade.cel.libs.network import build_cidr, build_ip, build_urls
from stockade.cel.libs.quantity import build_quantity
from stockade.cel.libs.regex import build_regex
from stockade.cel.libs.semver import build_semver
from stockade.cel.libs.x509 import build_x509

LIBRARY_BUILDERS: dict[str, Callable[[], Library]] = {
    "k8s.lists": build_lists,
    "k8s.sets": build_sets,
    "k8s.jsonpatch": build_jsonpatch,
    "k8s.regex": build_regex,
    "k8s.urls": build_urls,
    "k8s.ip": build_ip,
    "k8s.cidr": build_cidr,
    "k8s.quantity": build_quantity,
    "k8s.semver": build_semver,
    "k8s.compare": build_compare,
    "k8s.format": build_format,
    "k8s.authz": build_authz,
    "kyverno": build_kyverno,
    "kyverno.image": build_image,
    "kyverno.x509": build_x509,
    "compat": build_compat,
}

# Libraries only some environments include (not in DEFAULT_LIBRARIES): the authorization ValidatingPolicy modes
# (HTTP, Envoy) add their request/response functions and JWT decoding; ImageValidatingPolicy its image verification.
OPTIONAL_LIBRARY_BUILDERS: dict[str, Callable[[], Library]] = {
    IMAGE_VERIFY_LIBRARY: build_imageverify,
    "kyverno.authz.http": build_authz_http,
    "kyverno.authz.envoy": build_authz_envoy,
    "kyverno.jwt": build_jwt,
}

__all__ = ["IMAGE_VERIFY_LIBRARY", "LIBRARY_BUILDERS", "OPTIONAL_LIBRARY_BUILDERS", "authorizer_check_impl", "request_resource_check"]

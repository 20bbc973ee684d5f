"""Kyverno's `validate.podSecurity`: Pod Security Standards checks with Kyverno's exclusions.

The caller extracts the pod metadata and spec (a Pod's own, or a controller's pod template) and
passes them as decoded YAML/JSON; nothing is copied deeply, so evaluation stays cheap.

Behaviour follows Kyverno rather than the pod-security-admission webhook where they differ:
- every check of the level runs, including baseline checks that a restricted check supersedes
  upstream (so a restricted failure may be reported twice, e.g. capabilities);
- `privileged` is not special-cased: Kyverno runs the full check set for it too;
- a check whose first revision is newer than the requested version still runs that revision.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any, Callable

from ._checks import BASELINE, CHECKS, RESTRICTED, CheckFn, PodView
from ._decode import PodDecodeError, check_pod_decodes
from ._exclusions import (
    CHECK_ID_TO_CONTROL,
    CONTROL_TO_CHECK_IDS,
    apply_exclusions,
    validate_excludes,
    wildcard_match,
)
from ._model import CheckFailure, CheckOutcome, FieldError, PodSecurityResult
from stockade.errors import StockadeError

__all__ = [
    "CHECK_ID_TO_CONTROL",
    "CONTROL_TO_CHECK_IDS",
    "CheckFailure",
    "FieldError",
    "PodDecodeError",
    "PodSecurityResult",
    "PodSecurityVersionError",
    "apply_pod_security_exclusions",
    "check_pod_decodes",
    "evaluate_pod_security",
    "parse_version",
    "validate_excludes",
    "wildcard_match",
]

PRIVILEGED = "privileged"
_LEVELS = (PRIVILEGED, BASELINE, RESTRICTED)
# An omitted level is not rejected by Kyverno; like `privileged`, it runs every check.
_ACCEPTED_LEVELS = frozenset((*_LEVELS, ""))
_VERSION = re.compile(r"v1\.([0-9]|[1-9][0-9]*)")
# Container names listed in a check's detail; Kyverno reports their images with the failure.
_DETAIL_CONTAINERS = re.compile(r"containers?\s*(.*?)\s*must")


class PodSecurityVersionError(StockadeError, ValueError):
    """The policy names a level or version Kyverno cannot parse."""


def parse_version(version: str | None) -> tuple[int, int] | None:
    """`latest` (or empty) gives None; otherwise `v1.<minor>` as (1, minor)."""
    if not version or version == "latest":
        return None
    match = _VERSION.fullmatch(version)
    if match is None:
        raise PodSecurityVersionError('must be "latest" or "v1.x"')
    return (1, int(match.group(1)))


_selected_checks_cache: dict[tuple[str, tuple[int, int] | None], tuple[CheckFn, ...]] = {}


def _selected_checks(level: str, version: tuple[int, int] | None) -> tuple[CheckFn, ...]:
    key = (level, version)
    checks = _selected_checks_cache.get(key)
    if checks is None:
        checks = tuple(
            definition.for_version(version)
            for definition in CHECKS
            if level != BASELINE or definition.level == BASELINE
        )
        _selected_checks_cache[key] = checks
    return checks


def _runner(checks: tuple[CheckFn, ...]) -> Callable[[PodView], list[CheckOutcome]]:
    def run(pod: PodView) -> list[CheckOutcome]:
        outcomes = []
        for check in checks:
            outcome = check(pod)
            if outcome is not None:
                outcomes.append(outcome)
        return outcomes

    return run


def _images_by_container(spec: dict[str, Any]) -> dict[str, str]:
    """Container name to image, regular containers winning over init and ephemeral ones like in Kyverno."""
    images: dict[str, str] = {}
    for kind in ("ephemeralContainers", "initContainers", "containers"):
        items = spec.get(kind)
        if isinstance(items, list):
            for container in items:
                if isinstance(container, dict):
                    image = container.get("image")
                    if isinstance(image, str):
                        images[container.get("name") or ""] = image
    return images


def _images_for(
    detail: str, images_by_name: dict[str, str], normalize_image: Callable[[str], str] | None
) -> tuple[str, ...]:
    """Images of the containers named in the first sentence of a check's detail, as Kyverno reports them."""
    match = _DETAIL_CONTAINERS.search(detail)
    if match is None:
        return ()
    images = []
    for name in match.group(1).replace('"', "").replace(" ", "").split(","):
        image = images_by_name.get(name)
        if image is None:
            images.append(name)
        else:
            images.append(normalize_image(image) if normalize_image else image)
    return tuple(images)


def evaluate_pod_security(
    pod_metadata: dict[str, Any],
    pod_spec: dict[str, Any],
    level: str,
    version: str = "latest",
    exclude: list[dict[str, Any]] | None = None,
    *,
    resource_kind: str = "Pod",
    normalize_image: Callable[[str], str] | None = None,
) -> PodSecurityResult:
    """Run the checks of `level`/`version` and drop the failures `exclude` covers.

    `resource_kind` only changes how field paths are printed (Kyverno prefixes template paths for
    controllers). `normalize_image` turns a container image into the reference reported with a
    failure. PolicyException `podSecurity` entries are applied by passing them after the rule's own
    excludes: Kyverno applies both lists one entry after the other.
    """
    if level not in _ACCEPTED_LEVELS:
        raise PodSecurityVersionError(f"must be one of {', '.join(_LEVELS)}")
    parsed_version = parse_version(version)
    metadata = pod_metadata if isinstance(pod_metadata, dict) else {}
    spec = pod_spec if isinstance(pod_spec, dict) else {}
    run = _runner(_selected_checks(level, parsed_version))
    outcomes = run(PodView(metadata, spec))
    if outcomes and exclude:
        outcomes = apply_exclusions(outcomes, exclude, metadata, spec, run)
    printed_version = version if isinstance(version, str) else ""
    if not outcomes:
        return PodSecurityResult(True, (), level, printed_version, resource_kind)
    images_by_name = _images_by_container(spec)
    failures = tuple(
        CheckFailure(
            check_id=outcome.check_id,
            control_name=CHECK_ID_TO_CONTROL.get(outcome.check_id, ""),
            reason=outcome.reason,
            detail=outcome.detail,
            images=_images_for(outcome.detail, images_by_name, normalize_image),
            field_errors=tuple(outcome.errors or ()),
        )
        for outcome in outcomes
    )
    return PodSecurityResult(
        allowed=not failures,
        failures=failures,
        level=level,
        version=printed_version,
        resource_kind=resource_kind,
    )


def apply_pod_security_exclusions(
    result: PodSecurityResult, pod_metadata: dict[str, Any], pod_spec: dict[str, Any], exclude: list[dict[str, Any]]
) -> PodSecurityResult:
    """Drop further failures of an earlier evaluation, e.g. PolicyException `podSecurity` entries.

    Kyverno applies exceptions only after the rule failed with its own excludes; when everything is
    excluded here the rule is skipped rather than passed, which is why this is a separate step.
    """
    if result.allowed or not exclude:
        return result
    metadata = pod_metadata if isinstance(pod_metadata, dict) else {}
    spec = pod_spec if isinstance(pod_spec, dict) else {}
    by_id = {failure.check_id: failure for failure in result.failures}
    outcomes = [
        CheckOutcome(
            failure.check_id,
            failure.reason,
            failure.detail,
            list(failure.field_errors) if failure.field_errors else None,
        )
        for failure in result.failures
    ]
    run = _runner(_selected_checks(result.level, parse_version(result.version)))
    remaining = apply_exclusions(outcomes, exclude, metadata, spec, run)
    failures = tuple(
        replace(by_id[outcome.check_id], field_errors=tuple(outcome.errors or ()))
        for outcome in remaining
    )
    return replace(result, allowed=not failures, failures=failures)


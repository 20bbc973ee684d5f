"""Kyverno's `podSecurity.exclude` semantics.

An exclusion is matched by re-running the checks on a reduced pod: without images, the pod keeps
its pod-level fields but gets one anonymous container; with images, only the containers whose image
matches (and none of the pod-level fields) are kept. Every field error the reduced pod produces for
the excluded control, filtered by `restrictedField` and `values`, cancels one equal field error of
the full evaluation (for container fields, only one of a container with the same name).
"""

from __future__ import annotations

import re
from typing import Any, Callable, Iterable

from stockade.wildcard import match as match_wildcard

from ._checks import PodView
from ._model import CheckOutcome

# PSS control names (as written in policies) to upstream check IDs.
CONTROL_TO_CHECK_IDS: dict[str, tuple[str, ...]] = {
    "Capabilities": ("capabilities_baseline", "capabilities_restricted"),
    "Seccomp": ("seccompProfile_baseline", "seccompProfile_restricted"),
    "Privileged Containers": ("privileged",),
    "Host Ports": ("hostPorts",),
    "/proc Mount Type": ("procMount",),
    "HostProcess": ("windowsHostProcess",),
    "SELinux": ("seLinuxOptions",),
    "Host Namespaces": ("hostNamespaces",),
    "HostPath Volumes": ("hostPathVolumes",),
    "Sysctls": ("sysctls",),
    "AppArmor": ("appArmorProfile",),
    "Privilege Escalation": ("allowPrivilegeEscalation",),
    "Running as Non-root": ("runAsNonRoot",),
    "Running as Non-root user": ("runAsUser",),
    "Volume Types": ("restrictedVolumes",),
}
CHECK_ID_TO_CONTROL: dict[str, str] = {
    check_id: control for control, ids in CONTROL_TO_CHECK_IDS.items() for check_id in ids
}

RESTRICTED_CONTROL_NAMES = frozenset(
    {"Volume Types", "Privilege Escalation", "Running as Non-root", "Running as Non-root user", "Seccomp", "Capabilities"}
)
POD_LEVEL_CONTROLS = frozenset({"Host Namespaces", "HostPath Volumes", "Sysctls", "Volume Types"})
CONTAINER_LEVEL_CONTROLS = frozenset(
    {"Capabilities", "Privileged Containers", "Host Ports", "/proc Mount Type", "Privilege Escalation"}
)

_DIGITS = re.compile(r"[0-9]+")
_WORDS = re.compile(r"[a-zA-Z]+")
_CONTAINER_KINDS = frozenset({"containers", "initContainers", "ephemeralContainers"})


def wildcard_match(pattern: str, text: str) -> bool:
    """Kyverno's wildcard: `*` is any run of characters, `?` exactly one."""
    return match_wildcard(pattern, text)


def matches_any(patterns: Iterable[str], text: str) -> bool:
    return any(wildcard_match(pattern, text) for pattern in patterns)


def _string_list(value: Any) -> list[str]:
    if not isinstance(value, list):
        return []
    return [item if isinstance(item, str) else str(item) for item in value]


def _pod_level_view(metadata: dict[str, Any], spec: dict[str, Any]) -> PodView:
    reduced = dict(spec)
    reduced["containers"] = [{"name": "fake"}]
    reduced.pop("initContainers", None)
    reduced.pop("ephemeralContainers", None)
    return PodView(metadata, reduced)


def _matching_containers_view(metadata: dict[str, Any], spec: dict[str, Any], images: list[str]) -> PodView:
    reduced: dict[str, list[Any]] = {}
    for kind in ("containers", "initContainers", "ephemeralContainers"):
        items = spec.get(kind)
        if not isinstance(items, list):
            continue
        kept = [
            container
            for container in items
            if isinstance(container, dict) and matches_any(images, _image_of(container))
        ]
        if kept:
            reduced[kind] = kept
    reduced_metadata: dict[str, Any] = {key: metadata[key] for key in ("name", "namespace") if key in metadata}
    return PodView(reduced_metadata, reduced)


def _image_of(container: dict[str, Any]) -> str:
    image = container.get("image")
    return image if isinstance(image, str) else ""


def _container_name(spec: dict[str, Any], kind: str, index: int) -> str:
    items = spec.get(kind)
    if isinstance(items, list) and 0 <= index < len(items) and isinstance(items[index], dict):
        name = items[index].get("name")
        return name if isinstance(name, str) else ""
    return ""


def _parse_field(path: str, spec: dict[str, Any], container_level: bool) -> tuple[str, str | None]:
    """Index-free field pattern and, for container fields of a container-level exclusion, the container name."""
    wildcarded = _DIGITS.sub("*", path)
    if not container_level:
        return wildcarded, None
    words = _WORDS.findall(path)
    kind = words[1] if len(words) > 1 else ""
    if kind not in _CONTAINER_KINDS:
        return wildcarded, None
    index_match = _DIGITS.search(path)
    index = int(index_match.group()) if index_match else 0
    return wildcarded, _container_name(spec, kind, index)


EvaluateFn = Callable[[PodView], list[CheckOutcome]]


def apply_exclusions(
    outcomes: list[CheckOutcome],
    excludes: Iterable[dict[str, Any]],
    metadata: dict[str, Any],
    spec: dict[str, Any],
    evaluate: EvaluateFn,
) -> list[CheckOutcome]:
    """Remove failures covered by `excludes`, in order; `outcomes` (and their error lists) are mutated."""
    remaining: dict[str, CheckOutcome] = {outcome.check_id: outcome for outcome in outcomes}
    for exclude in excludes:
        if not isinstance(exclude, dict) or not remaining:
            continue
        check_ids = CONTROL_TO_CHECK_IDS.get(exclude.get("controlName") or "", ())
        if not check_ids:
            continue
        images = _string_list(exclude.get("images"))
        restricted_field = exclude.get("restrictedField") or ""
        values = _string_list(exclude.get("values"))
        container_level = bool(images)
        if container_level:
            reduced = _matching_containers_view(metadata, spec, images)
        else:
            reduced = _pod_level_view(metadata, spec)
        reduced_spec = reduced.spec
        for excluded in evaluate(reduced):
            if excluded.check_id not in check_ids or not excluded.errors:
                continue
            for excluded_error in excluded.errors:
                field, container = _parse_field(excluded_error.field, reduced_spec, container_level)
                if restricted_field and field != restricted_field:
                    continue
                if values and not all(matches_any(values, bad) for bad in excluded_error.bad_value_strings()):
                    continue
                target = remaining.get(excluded.check_id)
                if target is None or target.errors is None:
                    continue
                _remove_first_equal(target.errors, field, container, spec, container_level)
                if not target.errors:
                    del remaining[excluded.check_id]
    return list(remaining.values())


def _remove_first_equal(
    errors: list[Any], field: str, container: str | None, spec: dict[str, Any], container_level: bool
) -> None:
    for index, error in enumerate(errors):
        candidate_field, candidate_container = _parse_field(error.field, spec, container_level)
        if candidate_field != field:
            continue
        if candidate_container is not None and candidate_container != container:
            continue
        # Kyverno removes by swapping in the last element, which reorders the remaining errors.
        errors[index] = errors[-1]
        errors.pop()
        return


def validate_excludes(level: str, excludes: Iterable[Any], where: str = "podSecurity.exclude") -> list[tuple[str, str]]:
    """Kyverno's admission-time checks of ``podSecurity.exclude`` entries (a rule's) or of a PolicyException's
    ``spec.podSecurity`` (``where``; no ``level`` there), as (field path, message) pairs."""
    problems: list[tuple[str, str]] = []
    for index, exclude in enumerate(excludes):
        path = f"{where}[{index}]"
        if not isinstance(exclude, dict):
            problems.append((path, "must be a mapping with a controlName"))
            continue
        control = exclude.get("controlName") or ""
        images = _string_list(exclude.get("images"))
        if control not in CONTROL_TO_CHECK_IDS:
            problems.append((f"{path}.controlName", f"unsupported control name {control!r}"))
        if control in CONTAINER_LEVEL_CONTROLS and not images:
            problems.append((f"{path}.controlName", "exclude.images must be specified for the container level control"))
        elif control in POD_LEVEL_CONTROLS and images:
            problems.append((f"{path}.controlName", "exclude.images must not be specified for the pod level control"))
        has_field = bool(exclude.get("restrictedField"))
        has_values = bool(_string_list(exclude.get("values")))
        if has_field and not has_values:
            problems.append((f"{path}.values", "values is required"))
        if not has_field and has_values:
            problems.append((f"{path}.restrictedField", "restrictedField is required"))
        if (
            level == "baseline"
            and control in RESTRICTED_CONTROL_NAMES
            and control not in ("Seccomp", "Capabilities")
        ):
            problems.append((f"{path}.controlName", "Invalid control name defined at the given level"))
    return problems

"""Result types of a Pod Security Standards evaluation and Kyverno's wording of them."""

from __future__ import annotations

import json

from dataclasses import dataclass, field
from typing import Any
from stockade.gofmt import go_sprint

FORBIDDEN = "Forbidden"
REQUIRED = "Required"

# Kinds whose pod template lives at spec.template; Kyverno rewrites field paths for them.
_TEMPLATE_KINDS = frozenset(
    {"DaemonSet", "Deployment", "Job", "StatefulSet", "ReplicaSet", "ReplicationController"}
)


@dataclass(frozen=True, slots=True)
class FieldError:
    """One restricted field that made a check fail.

    `bad_value` keeps the Go type the upstream check records (str, bool, int or a tuple of str),
    because both exclusion matching and the printed message depend on it. An empty string means
    "no value recorded".
    """

    field: str
    type: str = FORBIDDEN
    bad_value: Any = ""

    def error_text(self) -> str:
        """The `<field>: <type>` text Kubernetes prints for a field error without detail."""
        return f"{self.field}: {'Required value' if self.type == REQUIRED else 'Forbidden'}"

    def bad_value_strings(self) -> tuple[str, ...]:
        """Bad values as strings, the way Kyverno compares them with `exclude.values`."""
        value = self.bad_value
        if isinstance(value, str):
            return (value,) if value else ()
        if isinstance(value, bool):
            return ("true" if value else "false",)
        if isinstance(value, int):
            return (str(value),)
        if isinstance(value, tuple):
            return value
        return ()


@dataclass(frozen=True)
class CheckFailure:
    check_id: str
    control_name: str
    reason: str
    detail: str
    images: tuple[str, ...] = ()
    field_errors: tuple[FieldError, ...] = ()


@dataclass(frozen=True)
class PodSecurityResult:
    allowed: bool
    failures: tuple[CheckFailure, ...] = ()
    level: str = ""
    version: str = ""
    resource_kind: str = "Pod"

    def message(self, rule_name: str = "") -> str:
        """Kyverno's rule message: the pass sentence, or the failure with every remaining field error."""
        if self.allowed:
            return f"Validation rule '{rule_name}' passed."
        return (
            f"Validation rule '{rule_name}' failed. It violates PodSecurity "
            f'"{self.level}:{self.version}": {self.checks_text()}'
        )

    def report_properties(self) -> dict[str, str]:
        """The properties Kyverno gives a failed podSecurity result in reports: the standard, its version and the
        failed controls (their IDs, and as JSON with each control's name and the images that failed it)."""
        controls = [{"ID": f.check_id, "Name": f.control_name, "Images": list(f.images) or None} for f in self.failures]
        return {
            "standard": self.level,
            "version": self.version,
            "controls": ",".join(f.check_id for f in self.failures),
            "controlsJSON": json.dumps(controls, separators=(",", ":")),
        }

    def checks_text(self) -> str:
        """The `(Forbidden reason: ..., field error list: [...])` part, one group per failed check."""
        return "".join(
            _format_failure(failure, self.resource_kind) for failure in self.failures
        )


def _format_value(value: Any) -> str:
    """Render a bad value the way Go's `%+v` does for the types the checks record."""
    return go_sprint(value)


def _template_path(path: str, kind: str) -> str:
    """Kyverno reports controller fields relative to the controller, by blind text replacement."""
    if kind in _TEMPLATE_KINDS:
        path = path.replace("spec", "spec.template.spec")
    elif kind == "CronJob":
        path = path.replace("spec", "spec.jobTemplate.spec.template.spec")
    return path.replace("metadata", "spec.template.metadata")


def _format_failure(failure: CheckFailure, kind: str) -> str:
    parts = []
    for error in failure.field_errors:
        path = _template_path(error.field, kind)
        has_value = not (isinstance(error.bad_value, str) and error.bad_value == "")
        if error.type == FORBIDDEN and has_value:
            parts.append(
                f"{path} is forbidden, forbidden values found: {_format_value(error.bad_value)}"
            )
        else:
            parts.append(f"{path}: {'Required value' if error.type == REQUIRED else 'Forbidden'}")
    return f"(Forbidden reason: {failure.reason}, field error list: [{', '.join(parts)}])"


@dataclass(slots=True)
class CheckOutcome:
    """Mutable per-evaluation failure record; exclusions remove entries from `errors`."""

    check_id: str
    reason: str
    detail: str
    errors: list[FieldError] | None = field(default_factory=list)

"""The Go text/template subset used for Flux commit messages: outputs follow Go's for the constructs it supports,
and everything else is a clear TemplateError."""

from __future__ import annotations

import pytest

from stockade.reflector.automation import (
    DEFAULT_MESSAGE_TEMPLATE,
    ObjectIdentifier,
    TemplateChange,
    TemplateData,
    UpdateResult,
)
from stockade.reflector.gotemplate import MAX_OUTPUT, TemplateError, render
from stockade.reflector.models import ObjectKey


def data() -> TemplateData:
    deploy = ObjectIdentifier("apps/v1", "Deployment", "web", "prod")
    job = ObjectIdentifier("batch/v1", "Job", "migrate", "prod")
    change = TemplateChange("app:1", "app:2", "prod:app")
    result = UpdateResult(
        FileChanges={"b.yaml": {job: [change]}, "a.yaml": {deploy: [change]}},
        Objects={job: [change], deploy: [change]},
        Changes=[change, change],
    )
    return TemplateData(ObjectKey("flux-system", "fleet"), result, {"env": "prod"})


@pytest.mark.parametrize(
    "template, expected",
    [
        (DEFAULT_MESSAGE_TEMPLATE, "Update from image update automation"),
        ("by {{ .AutomationObject }}", "by flux-system/fleet"),
        ("{{ range $f, $_ := .Changed.FileChanges }}[{{ $f }}]{{ end }}", "[a.yaml][b.yaml]"),  # Go ranges maps sorted
        ("{{ range $o, $c := .Changed.Objects }}{{ $o.Kind }} {{ len $c }};{{ end }}", "Deployment 1;Job 1;"),
        ("{{ range .Changed.Changes }}{{ .NewValue }} {{ end }}", "app:2 app:2 "),
        ("{{ len .Changed.Changes }} change(s)", "2 change(s)"),
        ("{{ if .Values.env }}env={{ .Values.env }}{{ else }}none{{ end }}", "env=prod"),
        ("{{ if .Values.missing }}x{{ else }}none{{ end }}", "none"),
        ("{{ index .Values \"env\" }}", "prod"),
        ("a\n  {{- .Values.env -}}  \nb", "aprodb"),
        ("{{/* a comment */}}x", "x"),
        ("{{ range .Changed.FileChanges.none }}x{{ else }}empty{{ end }}", "empty"),
    ],
)
def test_supported_constructs_render_like_go(template: str, expected: str) -> None:
    assert render(template, data()) == expected


@pytest.mark.parametrize(
    "template",
    ["{{ .Nope }}", "{{ printf \"%s\" .Values }}", "{{ with .Values }}x{{ end }}", "{{ range .Changed.Changes }}", "{{ end }}", "{{ .Values"],
)
def test_unsupported_or_broken_templates_are_template_errors(template: str) -> None:
    with pytest.raises(TemplateError):
        render(template, data())


def test_output_is_bounded() -> None:
    many = {"Items": list(range(100_000))}
    with pytest.raises(TemplateError):
        render("{{ range .Items }}" + "x" * 100 + "{{ end }}", many)
    assert MAX_OUTPUT < 100 * 100_000

"""The Flux kinds Stockade's image automation serves, as ``deploy/flux/crds.yaml`` defines them.

Those CRDs are Stockade's own minimal schemas (written from Flux's documented API, not Flux's generated ones): each
spec names the fields Stockade's controllers read and keeps every other field, so Flux's own objects apply
unchanged.  image.toolkit.fluxcd.io ImageRepository and ImagePolicy v1, ImageUpdateAutomation v1beta2, and a minimal
source.toolkit.fluxcd.io GitRepository v1 for clusters without Flux's source-controller.
"""

from __future__ import annotations

from stockade.policy.schema.types import (
    KindSchema,
    Node,
    boolean,
    defaulted,
    free_object,
    obj,
    string,
    string_list,
    validated,
)

IMAGE_GROUP = "image.toolkit.fluxcd.io"
SOURCE_GROUP = "source.toolkit.fluxcd.io"

# a Go duration as Flux writes it: 1m, 1h30m, 500ms
DURATION = string(pattern=r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$")
# meta.LocalObjectReference: a Secret (or other object) in the object's own namespace
LOCAL_REFERENCE = obj({"name": string()}, required=["name"])
# meta.NamespacedObjectReference
NAMESPACED_REFERENCE = obj({"name": string(), "namespace": string()}, required=["name"])
# status stays open; Flux's controllers default observedGeneration to -1 (not yet reconciled)
STATUS = defaulted(free_object(), {"observedGeneration": -1})


def _open_spec(properties: dict[str, Node], *, required: list[str]) -> Node:
    """A spec that checks the fields Stockade reads and keeps any other field Flux defines."""
    return obj(properties, required=required, preserve_unknown=True)


def _columns(*leading: tuple[str, str]) -> tuple[dict[str, str], ...]:
    """Printer columns: the kind's own, then Flux's Ready, Status and Age."""
    return (
        *({"name": name, "type": "string", "jsonPath": path} for name, path in leading),
        {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
        {"name": "Status", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].message'},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    )


IMAGE_REPOSITORY_SPEC = _open_spec(
    {
        "image": string(),
        "interval": DURATION,
        "timeout": DURATION,
        "exclusionList": string_list(max_items=25),
        "insecure": boolean(),
        "suspend": boolean(),
        "serviceAccountName": string(max_length=253),
        "secretRef": LOCAL_REFERENCE,
        "certSecretRef": LOCAL_REFERENCE,
        "proxySecretRef": LOCAL_REFERENCE,
        "provider": string(enum=["generic", "aws", "azure", "gcp"], default="generic"),
    },
    required=["image", "interval"],
)

IMAGE_POLICY_SPEC = validated(
    _open_spec(
        {
            "imageRepositoryRef": NAMESPACED_REFERENCE,
            # semver / alphabetical / numerical: Flux's policy choices, checked by the controller
            "policy": free_object(),
            "filterTags": obj({"pattern": string(), "extract": string()}),
            "digestReflectionPolicy": string(enum=["Always", "IfNotPresent", "Never"], default="Never"),
            "interval": DURATION,
            "suspend": boolean(),
        },
        required=["imageRepositoryRef", "policy"],
    ),
    (
        "!has(self.interval) || (has(self.digestReflectionPolicy) && self.digestReflectionPolicy == 'Always')",
        "spec.interval is only accepted when spec.digestReflectionPolicy is set to 'Always'",
    ),
    (
        "has(self.interval) || !has(self.digestReflectionPolicy) || self.digestReflectionPolicy != 'Always'",
        "spec.interval must be set when spec.digestReflectionPolicy is set to 'Always'",
    ),
)

IMAGE_UPDATE_AUTOMATION_SPEC = _open_spec(
    {
        "interval": DURATION,
        "suspend": boolean(),
        "sourceRef": obj(
            {
                "kind": string(enum=["GitRepository"]),
                "name": string(),
                "namespace": string(),
                "apiVersion": string(),
            },
            required=["kind", "name"],
        ),
        "git": free_object(),
        "update": defaulted(free_object(), {"strategy": "Setters"}),
        "policySelector": free_object(),
    },
    required=["interval", "sourceRef"],
)

GIT_REPOSITORY_SPEC = _open_spec(
    {
        "url": string(pattern=r"^(http|https|ssh|file|git)://.*$"),
        "interval": DURATION,
        "ref": free_object(),
        "secretRef": LOCAL_REFERENCE,
        "timeout": DURATION,
        "suspend": boolean(),
    },
    required=["url", "interval"],
)

KINDS: tuple[KindSchema, ...] = (
    KindSchema(
        group=IMAGE_GROUP,
        kind="ImageRepository",
        plural="imagerepositories",
        scope="Namespaced",
        versions={"v1": IMAGE_REPOSITORY_SPEC},
        also_read=("v1beta2",),
        short_names=("imgrepo", "imagerepo"),
        status=STATUS,
        printer_columns=_columns(
            ("Last scan", ".status.lastScanResult.scanTime"), ("Tags", ".status.lastScanResult.tagCount")
        ),
    ),
    KindSchema(
        group=IMAGE_GROUP,
        kind="ImagePolicy",
        plural="imagepolicies",
        scope="Namespaced",
        versions={"v1": IMAGE_POLICY_SPEC},
        also_read=("v1beta2",),
        short_names=("imgpol", "imagepol"),
        status=STATUS,
        printer_columns=_columns(("Image", ".status.latestRef.name"), ("Tag", ".status.latestRef.tag")),
    ),
    KindSchema(
        group=IMAGE_GROUP,
        kind="ImageUpdateAutomation",
        plural="imageupdateautomations",
        scope="Namespaced",
        versions={"v1beta2": IMAGE_UPDATE_AUTOMATION_SPEC},
        short_names=("iua", "imgupd", "imgauto"),
        status=STATUS,
        printer_columns=_columns(("Last run", ".status.lastAutomationRunTime")),
    ),
    KindSchema(
        group=SOURCE_GROUP,
        kind="GitRepository",
        plural="gitrepositories",
        scope="Namespaced",
        versions={"v1": GIT_REPOSITORY_SPEC},
        short_names=("gitrepo",),
        status=STATUS,
        printer_columns=_columns(("URL", ".spec.url")),
    ),
)

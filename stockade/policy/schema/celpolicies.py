"""The policies.kyverno.io kinds (CEL policies and their exceptions), written from Kyverno's Go API types.

Every served version of a kind shares one spec type upstream (v1 and v1beta1 alias the v1alpha1 structs), so each
kind has one spec schema, served under each of its versions.  The Kubernetes admission shapes they embed come from
``stockade.policy.schema.admission``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stockade.policy.schema.admission import (
    AUDIT_ANNOTATION,
    FAILURE_POLICY,
    LOCAL_OBJECT_REFERENCE,
    MATCH_CONDITION,
    MATCH_CONDITIONS,
    MATCH_RESOURCES,
    MUTATION,
    VALIDATION,
    VALIDATION_ACTIONS,
    VARIABLE,
    VARIABLES,
)
from stockade.policy.schema.types import (
    KindSchema,
    Node,
    Scope,
    array,
    atomic,
    boolean,
    defaulted,
    extend,
    integer,
    obj,
    one_of,
    string,
    string_list,
    string_map,
    validated,
)

GROUP = "policies.kyverno.io"


def _enabled(default: bool | None = None) -> Node:
    """The ``{enabled: bool}`` switch the configuration blocks are made of."""
    return obj({"enabled": boolean(default=default)})


# --- shared by several policy kinds -------------------------------------------------------------------------------

WEBHOOK_CONFIGURATION = obj({"timeoutSeconds": integer()})
POD_CONTROLLERS = obj({"controllers": string_list()})
# EvaluationConfiguration: where the policy runs (admission, background) and in which mode
ADMISSION = _enabled(default=True)
BACKGROUND = _enabled(default=True)
EVALUATION = obj({"admission": ADMISSION, "background": BACKGROUND, "mode": string()})
ATOMIC_VALIDATIONS = array(VALIDATION, list_type="atomic")
ATOMIC_AUDIT_ANNOTATIONS = array(AUDIT_ANNOTATION, list_type="atomic")
# where a kind's matchConditions / variables carry no list markers (ImageValidatingPolicy, PolicyException)
PLAIN_MATCH_CONDITIONS = array(MATCH_CONDITION)
PLAIN_VARIABLES = array(VARIABLE)

# --- ValidatingPolicy ---------------------------------------------------------------------------------------------

VALIDATING_POLICY_SPEC = obj(
    {
        "auditAnnotations": ATOMIC_AUDIT_ANNOTATIONS,
        "autogen": obj({"podControllers": POD_CONTROLLERS, "validatingAdmissionPolicy": _enabled()}),
        "evaluation": EVALUATION,
        "failurePolicy": FAILURE_POLICY,
        "matchConditions": MATCH_CONDITIONS,
        "matchConstraints": MATCH_RESOURCES,
        "validationActions": VALIDATION_ACTIONS,
        "validations": ATOMIC_VALIDATIONS,
        "variables": VARIABLES,
        "webhookConfiguration": WEBHOOK_CONFIGURATION,
    }
)

# --- MutatingPolicy -----------------------------------------------------------------------------------------------

MUTATING_POLICY_SPEC = obj(
    {
        "auditAnnotations": array(AUDIT_ANNOTATION),
        "autogen": obj({"mutatingAdmissionPolicy": _enabled(), "podControllers": POD_CONTROLLERS}),
        "evaluation": extend(
            EVALUATION,
            {
                "mutateExisting": _enabled(default=False),
                "skipBackgroundRequests": boolean(default=True),
                "useServerSideApply": boolean(),
            },
        ),
        "failurePolicy": FAILURE_POLICY,
        "matchConditions": MATCH_CONDITIONS,
        "matchConstraints": MATCH_RESOURCES,
        "mutations": array(MUTATION, list_type="atomic"),
        "reinvocationPolicy": string(),
        "targetMatchConditions": MATCH_CONDITIONS,
        # TargetMatchConstraints: MatchResources inlined (atomic, like it), plus a CEL expression
        "targetMatchConstraints": atomic(extend(MATCH_RESOURCES, {"expression": string()})),
        "variables": VARIABLES,
        "webhookConfiguration": WEBHOOK_CONFIGURATION,
    }
)

# --- GeneratingPolicy ---------------------------------------------------------------------------------------------

GENERATION_TEMPLATE = obj(
    {"interpolate": string(enum=["none", "cel"], default="none"), "value": string(min_length=1)},
    required=["value"],
)
GENERATION = validated(
    obj({"expression": string(), "template": GENERATION_TEMPLATE}),
    (
        "(has(self.expression) && !has(self.template)) || (!has(self.expression) && has(self.template))",
        "exactly one of expression or template must be set",
    ),
)
GENERATING_POLICY_SPEC = obj(
    {
        "auditAnnotations": array(AUDIT_ANNOTATION),
        "evaluation": obj(
            {
                "admission": ADMISSION,
                "generateExisting": _enabled(default=False),
                "orphanDownstreamOnPolicyDelete": _enabled(default=False),
                "skipBackgroundRequests": boolean(default=True),
                "synchronize": _enabled(default=False),
            }
        ),
        "generate": array(GENERATION, min_items=1),
        "matchConditions": MATCH_CONDITIONS,
        "matchConstraints": MATCH_RESOURCES,
        "useServerSideApply": boolean(),
        "variables": VARIABLES,
        "webhookConfiguration": WEBHOOK_CONFIGURATION,
    },
    required=["generate"],
)

# --- DeletingPolicy -----------------------------------------------------------------------------------------------

DELETING_POLICY_SPEC = obj(
    {
        "conditions": MATCH_CONDITIONS,
        "deletionPropagationPolicy": string(enum=["Foreground", "Background", "Orphan"]),
        "matchConstraints": MATCH_RESOURCES,
        "schedule": string(),
        "variables": VARIABLES,
    },
    required=["schedule"],
)

# --- ImageValidatingPolicy ----------------------------------------------------------------------------------------

# a literal value or a CEL expression that yields it, never both
STRING_OR_EXPRESSION = one_of(obj({"expression": string(), "value": string()}), ["value"], ["expression"])
IDENTITY = obj(
    {
        "issuer": string(),
        "issuerRegExp": string(),
        "subject": string(),
        "subjectExpression": string(),
        "subjectRegExp": string(),
    }
)
COSIGN = obj(
    {
        "annotations": string_map(),
        "certificate": obj({"cert": STRING_OR_EXPRESSION, "certChain": STRING_OR_EXPRESSION}),
        "ctlog": obj(
            {
                "ctLogPubKey": string(),
                "insecureIgnoreSCT": boolean(),
                "insecureIgnoreTlog": boolean(),
                "rekorPubKey": string(),
                "tsaCertChain": string(),
                "url": string(),
            }
        ),
        "key": obj({"data": string(), "expression": string(), "hashAlgorithm": string(), "kms": string()}),
        "keyless": obj(
            {"additionalExtensions": string_map(), "identities": array(IDENTITY), "roots": string()},
            required=["identities"],
        ),
        # the Go field is SignaturePullSecrets, serialized as "PullSecrets"
        "source": obj({"PullSecrets": array(LOCAL_OBJECT_REFERENCE), "repository": string(), "tagPrefix": string()}),
        "trustedRoot": STRING_OR_EXPRESSION,
        "tuf": obj({"mirror": string(), "root": obj({"data": string(), "path": string()})}),
    }
)
NOTARY = obj({"certs": STRING_OR_EXPRESSION, "tsaCerts": STRING_OR_EXPRESSION})
ATTESTOR = one_of(obj({"cosign": COSIGN, "name": string(), "notary": NOTARY}, required=["name"]), ["cosign"], ["notary"])
TYPED = obj({"type": string()}, required=["type"])
ATTESTATION = obj({"intoto": TYPED, "name": string(), "referrer": TYPED}, required=["name"])
CREDENTIALS = obj(
    {
        "allowInsecureRegistry": boolean(),
        "providers": array(string(enum=["default", "amazon", "azure", "google", "github"])),
        "secrets": string_list(),
    }
)
IMAGE_EXTRACTOR = obj({"expression": string(), "name": string()}, required=["expression", "name"])
MATCH_IMAGE_REFERENCE = one_of(obj({"expression": string(), "glob": string()}), ["glob"], ["expression"])
VALIDATION_CONFIGURATION = defaulted(
    obj(
        {
            "mutateDigest": boolean(default=True),
            "required": boolean(default=True),
            "verifyDigest": boolean(default=True),
        }
    ),
    {},
)
IMAGE_VALIDATING_POLICY_SPEC = obj(
    {
        "attestations": array(ATTESTATION),
        "attestors": array(ATTESTOR),
        "auditAnnotations": ATOMIC_AUDIT_ANNOTATIONS,
        "autogen": obj({"podControllers": POD_CONTROLLERS}),
        "credentials": CREDENTIALS,
        "evaluation": EVALUATION,
        "failurePolicy": FAILURE_POLICY,
        "images": array(IMAGE_EXTRACTOR),
        "matchConditions": PLAIN_MATCH_CONDITIONS,
        "matchConstraints": MATCH_RESOURCES,
        "matchImageReferences": array(MATCH_IMAGE_REFERENCE),
        "validationActions": VALIDATION_ACTIONS,
        "validationConfigurations": VALIDATION_CONFIGURATION,
        "validations": ATOMIC_VALIDATIONS,
        "variables": PLAIN_VARIABLES,
        "webhookConfiguration": WEBHOOK_CONFIGURATION,
    },
    required=["attestors", "validations"],
)

# --- PolicyException ----------------------------------------------------------------------------------------------

POLICY_REF = obj({"kind": string(), "name": string()}, required=["kind", "name"])
POLICY_EXCEPTION_SPEC = obj(
    {
        "allowedValues": string_list(),
        "evaluationMode": string(),
        "expiresAt": string(fmt="date-time"),
        "images": string_list(),
        "matchConditions": PLAIN_MATCH_CONDITIONS,
        "policyRefs": array(POLICY_REF),
        "properties": string_map(),
        "reportResult": string(enum=["skip", "pass"], default="skip"),
    },
    required=["policyRefs"],
)

# --- the kinds ----------------------------------------------------------------------------------------------------

AGE = {"name": "AGE", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
READY = {"name": "READY", "type": "boolean", "jsonPath": ".status.conditionStatus.ready"}
# v1beta1 stores every kind; the cluster-scoped kinds (and PolicyException) still serve v1alpha1
CLUSTER_VERSIONS = ("v1", "v1beta1", "v1alpha1")
NAMESPACED_VERSIONS = ("v1", "v1beta1")
STORAGE = "v1beta1"


def _policy(
    kind: str,
    scope: Scope,
    short_name: str,
    spec: Node,
    *,
    ready_column: bool = True,
) -> KindSchema:
    versions = CLUSTER_VERSIONS if scope == "Cluster" else NAMESPACED_VERSIONS
    columns: tuple[Mapping[str, Any], ...] = (AGE, READY) if ready_column else (AGE,)
    return KindSchema(
        group=GROUP,
        kind=kind,
        plural=kind.lower().removesuffix("policy") + "policies",
        scope=scope,
        versions={version: spec for version in versions},
        storage=STORAGE,
        short_names=(short_name,),
        categories=("kyverno",),
        printer_columns=columns,
        spec_required=True,
    )


KINDS: tuple[KindSchema, ...] = (
    _policy("ValidatingPolicy", "Cluster", "vpol", VALIDATING_POLICY_SPEC),
    _policy("NamespacedValidatingPolicy", "Namespaced", "nvpol", VALIDATING_POLICY_SPEC),
    _policy("MutatingPolicy", "Cluster", "mpol", MUTATING_POLICY_SPEC),
    _policy("NamespacedMutatingPolicy", "Namespaced", "nmpol", MUTATING_POLICY_SPEC),
    _policy("GeneratingPolicy", "Cluster", "gpol", GENERATING_POLICY_SPEC, ready_column=False),
    _policy("NamespacedGeneratingPolicy", "Namespaced", "ngpol", GENERATING_POLICY_SPEC, ready_column=False),
    _policy("DeletingPolicy", "Cluster", "dpol", DELETING_POLICY_SPEC),
    _policy("NamespacedDeletingPolicy", "Namespaced", "ndpol", DELETING_POLICY_SPEC),
    _policy("ImageValidatingPolicy", "Cluster", "ivpol", IMAGE_VALIDATING_POLICY_SPEC),
    _policy("NamespacedImageValidatingPolicy", "Namespaced", "nivpol", IMAGE_VALIDATING_POLICY_SPEC),
    KindSchema(
        group=GROUP,
        kind="PolicyException",
        plural="policyexceptions",
        scope="Namespaced",
        versions={version: POLICY_EXCEPTION_SPEC for version in CLUSTER_VERSIONS},
        storage=STORAGE,
        spec_required=True,
        status_subresource=False,
    ),
)

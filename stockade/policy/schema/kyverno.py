"""The kyverno.io policy kinds: ClusterPolicy, Policy, PolicyException, CleanupPolicy, ClusterCleanupPolicy,
GlobalContextEntry and UpdateRequest, written from Kyverno's Go API types (api/kyverno/v1, v2beta1, v2, v2alpha1).

Each Go struct is one module constant, named after it; a Go struct embedded inline is ``extend``-ed.  v2beta1
ClusterPolicy reuses most v1 shapes (it embeds them in Go too) and differs in its rule, validation, conditions,
match and image verification.  Kubernetes shapes only these kinds embed (admissionregistration/v1, rbac/v1,
authentication/v1, admission/v1) are written here too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stockade.policy.schema.common import LABEL_SELECTOR
from stockade.policy.schema.types import (
    KindSchema,
    Node,
    any_value,
    array,
    atomic,
    boolean,
    defaulted,
    extend,
    free_object,
    integer,
    map_of,
    not_together,
    obj,
    one_of,
    string,
    string_list,
    string_map,
)

GROUP = "kyverno.io"

# --- Kubernetes shapes --------------------------------------------------------------------------------------------

# admissionregistration/v1
MATCH_CONDITION = obj({"expression": string(), "name": string()}, required=["expression", "name"])
CEL_VALIDATION = obj(
    {"expression": string(), "message": string(), "messageExpression": string(), "reason": string()},
    required=["expression"],
)
PARAM_KIND = atomic(obj({"apiVersion": string(), "kind": string()}))
PARAM_REF = atomic(
    obj({"name": string(), "namespace": string(), "parameterNotFoundAction": string(), "selector": LABEL_SELECTOR})
)
AUDIT_ANNOTATION = obj({"key": string(), "valueExpression": string()}, required=["key", "valueExpression"])
CEL_VARIABLE = atomic(obj({"expression": string(), "name": string()}, required=["expression", "name"]))

# rbac/v1
SUBJECT = atomic(
    obj({"apiGroup": string(), "kind": string(), "name": string(), "namespace": string()}, required=["kind", "name"])
)

# authentication/v1
AUTHENTICATION_USER_INFO = obj(
    {
        "extra": map_of(string_list()),
        "groups": string_list(list_type="atomic"),
        "uid": string(),
        "username": string(),
    }
)

# admission/v1
GROUP_VERSION_KIND = obj({"group": string(), "kind": string(), "version": string()}, required=["group", "kind", "version"])
GROUP_VERSION_RESOURCE = obj(
    {"group": string(), "resource": string(), "version": string()}, required=["group", "resource", "version"]
)
EMBEDDED_OBJECT = free_object()
# Kyverno's CRD declares none of admission/v1's required fields here (uid, kind, resource, operation, userInfo)
ADMISSION_REQUEST = obj(
    {
        "dryRun": boolean(),
        "kind": GROUP_VERSION_KIND,
        "name": string(),
        "namespace": string(),
        "object": EMBEDDED_OBJECT,
        "oldObject": EMBEDDED_OBJECT,
        "operation": string(),
        "options": EMBEDDED_OBJECT,
        "requestKind": GROUP_VERSION_KIND,
        "requestResource": GROUP_VERSION_RESOURCE,
        "requestSubResource": string(),
        "resource": GROUP_VERSION_RESOURCE,
        "subResource": string(),
        "uid": string(),
        "userInfo": AUTHENTICATION_USER_INFO,
    }
)

# --- enums --------------------------------------------------------------------------------------------------------

FAILURE_POLICY = string(enum=["Ignore", "Fail"])
APPLY_RULES = string(enum=["All", "One"])
FOREACH_ORDER = string(enum=["Ascending", "Descending"])
# the spec-level action still takes the deprecated lower-case spellings; a rule's failureAction does not
POLICY_FAILURE_ACTION = ["audit", "enforce", "Audit", "Enforce"]
RULE_FAILURE_ACTION = string(enum=["Audit", "Enforce"])
ADMISSION_OPERATIONS = array(string(enum=["CREATE", "CONNECT", "UPDATE", "DELETE"]))
V1_CONDITION_OPERATOR = string(
    enum=[
        "Equals", "NotEquals", "In", "AnyIn", "AllIn", "NotIn", "AnyNotIn", "AllNotIn",
        "GreaterThanOrEquals", "GreaterThan", "LessThanOrEquals", "LessThan",
        "DurationGreaterThanOrEquals", "DurationGreaterThan", "DurationLessThanOrEquals", "DurationLessThan",
    ]
)
# v2beta1 and v2 dropped the deprecated In and NotIn
V2_CONDITION_OPERATOR = string(
    enum=[
        "Equals", "NotEquals", "AnyIn", "AllIn", "AnyNotIn", "AllNotIn",
        "GreaterThanOrEquals", "GreaterThan", "LessThanOrEquals", "LessThan",
        "DurationGreaterThanOrEquals", "DurationGreaterThan", "DurationLessThanOrEquals", "DurationLessThan",
    ]
)
POD_SECURITY_LEVEL = string(enum=["privileged", "baseline", "restricted"])
POD_SECURITY_VERSION = string(
    enum=[
        "v1.19", "v1.20", "v1.21", "v1.22", "v1.23", "v1.24", "v1.25", "v1.26",
        "v1.27", "v1.28", "v1.29", "v1.30", "v1.31", "v1.32", "latest",
    ]
)
POD_SECURITY_CONTROL = string(
    enum=[
        "HostProcess", "Host Namespaces", "Privileged Containers", "Capabilities", "HostPath Volumes", "Host Ports",
        "AppArmor", "SELinux", "/proc Mount Type", "Seccomp", "Sysctls", "Volume Types", "Privilege Escalation",
        "Running as Non-root", "Running as Non-root user",
    ]
)
# the type-level default (Cosign) does not reach the CRD: the field is optional without a default
IMAGE_VERIFICATION_TYPE = string(enum=["Cosign", "SigstoreBundle", "Notary"])
CREDENTIALS_PROVIDER = string(enum=["default", "amazon", "azure", "google", "github"])

# --- conditions ---------------------------------------------------------------------------------------------------

V1_CONDITION = obj({"key": any_value(), "message": string(), "operator": V1_CONDITION_OPERATOR, "value": any_value()})
V1_ANY_ALL_CONDITIONS = obj({"all": array(V1_CONDITION), "any": array(V1_CONDITION)})
# foreach preconditions keep fields they do not know (XPreserveUnknownFields)
V1_FOREACH_PRECONDITIONS = obj(V1_ANY_ALL_CONDITIONS["properties"], preserve_unknown=True)
V2_CONDITION = obj({"key": any_value(), "message": string(), "operator": V2_CONDITION_OPERATOR, "value": any_value()})
V2_ANY_ALL_CONDITIONS = obj({"all": array(V2_CONDITION), "any": array(V2_CONDITION)})

# --- context entries ----------------------------------------------------------------------------------------------

IMAGE_REGISTRY_CREDENTIALS = obj(
    {"allowInsecureRegistry": boolean(), "providers": array(CREDENTIALS_PROVIDER), "secrets": string_list()}
)
HTTP_HEADER = obj({"key": string(), "value": string()}, required=["key", "value"])
SERVICE_CALL = obj({"caBundle": string(), "headers": array(HTTP_HEADER), "url": string()}, required=["url"])
REQUEST_DATA = obj({"key": string(), "value": any_value()}, required=["key", "value"])
API_CALL = obj(
    {
        "data": array(REQUEST_DATA),
        "method": string(enum=["GET", "POST"], default="GET"),
        "service": SERVICE_CALL,
        "urlPath": string(),
    }
)
CONTEXT_API_CALL = extend(API_CALL, {"default": any_value(), "jmesPath": string()})
CONFIG_MAP_REFERENCE = obj({"name": string(), "namespace": string()}, required=["name"])
IMAGE_REGISTRY = obj(
    {"imageRegistryCredentials": IMAGE_REGISTRY_CREDENTIALS, "jmesPath": string(), "reference": string()},
    required=["reference"],
)
VARIABLE = obj({"default": any_value(), "jmesPath": string(), "value": any_value()})
GLOBAL_CONTEXT_ENTRY_REFERENCE = obj({"jmesPath": string(), "name": string()}, required=["name"])
CONTEXT_ENTRY = one_of(
    obj(
        {
            "apiCall": CONTEXT_API_CALL,
            "configMap": CONFIG_MAP_REFERENCE,
            "globalReference": GLOBAL_CONTEXT_ENTRY_REFERENCE,
            "imageRegistry": IMAGE_REGISTRY,
            "name": string(),
            "variable": VARIABLE,
        },
        required=["name"],
    ),
    ["configMap"], ["apiCall"], ["imageRegistry"], ["variable"], ["globalReference"],
)
CONTEXT = array(CONTEXT_ENTRY)

# --- match and exclude --------------------------------------------------------------------------------------------

USER_INFO = obj({"clusterRoles": string_list(), "roles": string_list(), "subjects": array(SUBJECT)})
RESOURCE_DESCRIPTION = not_together(
    obj(
        {
            "annotations": string_map(),
            "kinds": string_list(),
            "name": string(),
            "names": string_list(),
            "namespaceSelector": LABEL_SELECTOR,
            "namespaces": string_list(),
            "operations": ADMISSION_OPERATIONS,
            "selector": LABEL_SELECTOR,
        }
    ),
    "name", "names",
)
RESOURCE_FILTER = extend(USER_INFO, {"resources": RESOURCE_DESCRIPTION})
RESOURCE_FILTERS = array(RESOURCE_FILTER)
# v1: any/all filters, or (deprecated) one filter written inline, never both any and all
V1_MATCH_RESOURCES = not_together(extend(RESOURCE_FILTER, {"all": RESOURCE_FILTERS, "any": RESOURCE_FILTERS}), "any", "all")
# v2beta1 and later: only any/all
V2_MATCH_RESOURCES = not_together(obj({"all": RESOURCE_FILTERS, "any": RESOURCE_FILTERS}), "any", "all")

# --- rule pieces shared by v1 and v2beta1 -------------------------------------------------------------------------

WEBHOOK_CONFIGURATION = obj(
    {"failurePolicy": FAILURE_POLICY, "matchConditions": array(MATCH_CONDITION), "timeoutSeconds": integer()}
)
VALIDATION_FAILURE_ACTION_OVERRIDE = obj(
    {"action": string(enum=POLICY_FAILURE_ACTION), "namespaceSelector": LABEL_SELECTOR, "namespaces": string_list()}
)
FAILURE_ACTION_OVERRIDES = array(VALIDATION_FAILURE_ACTION_OVERRIDE)
IMAGE_EXTRACTOR_CONFIG = obj(
    {"jmesPath": string(), "key": string(), "name": string(), "path": string(), "value": string()}, required=["path"]
)
IMAGE_EXTRACTORS = map_of(array(IMAGE_EXTRACTOR_CONFIG))
RESOURCE_SPEC = obj({"apiVersion": string(), "kind": string(), "name": string(), "namespace": string(), "uid": string()})

# mutate
TARGET_RESOURCE_SPEC = extend(
    RESOURCE_SPEC, {"context": CONTEXT, "preconditions": any_value(), "selector": LABEL_SELECTOR}
)
FOREACH_MUTATION = obj(
    {
        "context": CONTEXT,
        "foreach": any_value(),
        "list": string(),
        "order": FOREACH_ORDER,
        "patchStrategicMerge": any_value(),
        "patchesJson6902": string(),
        "preconditions": V1_FOREACH_PRECONDITIONS,
    }
)
MUTATION = obj(
    {
        "foreach": array(FOREACH_MUTATION),
        "mutateExistingOnPolicyUpdate": boolean(),
        "patchStrategicMerge": any_value(),
        "patchesJson6902": string(),
        "targets": array(TARGET_RESOURCE_SPEC),
    }
)

# generate
GENERATE_PATTERN = extend(
    RESOURCE_SPEC,
    {
        "clone": obj({"name": string(), "namespace": string()}),
        "cloneList": obj({"kinds": string_list(), "namespace": string(), "selector": LABEL_SELECTOR}),
        "data": any_value(),
    },
)
FOREACH_GENERATION = extend(
    GENERATE_PATTERN, {"context": CONTEXT, "list": string(), "preconditions": V1_FOREACH_PRECONDITIONS}
)
GENERATION = extend(
    GENERATE_PATTERN,
    {
        "foreach": array(FOREACH_GENERATION),
        "generateExisting": boolean(),
        "orphanDownstreamOnPolicyDelete": boolean(),
        "synchronize": boolean(),
    },
)

# image verification and manifest attestors
SECRET_REFERENCE = obj({"name": string(), "namespace": string()}, required=["name", "namespace"])
REKOR = obj({"ignoreTlog": boolean(), "pubkey": string(), "url": string()})
CT_LOG = obj({"ignoreSCT": boolean(), "pubkey": string(), "tsaCertChain": string()})
SIGNATURE_ALGORITHM = string(default="sha256")
STATIC_KEY_ATTESTOR = obj(
    {
        "ctlog": CT_LOG,
        "kms": string(),
        "publicKeys": string(),
        "rekor": REKOR,
        "secret": SECRET_REFERENCE,
        "signatureAlgorithm": SIGNATURE_ALGORITHM,
    }
)
CERTIFICATE_ATTESTOR = obj({"cert": string(), "certChain": string(), "ctlog": CT_LOG, "rekor": REKOR})
KEYLESS_ATTESTOR = obj(
    {
        "additionalExtensions": string_map(),
        "ctlog": CT_LOG,
        "issuer": string(),
        "issuerRegExp": string(),
        "rekor": REKOR,
        "roots": string(),
        "subject": string(),
        "subjectRegExp": string(),
    }
)
ATTESTOR = obj(
    {
        "annotations": string_map(),
        "attestor": any_value(),
        "certificates": CERTIFICATE_ATTESTOR,
        "keyless": KEYLESS_ATTESTOR,
        "keys": STATIC_KEY_ATTESTOR,
        "repository": string(),
        "signatureAlgorithm": SIGNATURE_ALGORITHM,
    }
)
ATTESTOR_SET = obj({"count": integer(fmt=None, minimum=1), "entries": array(ATTESTOR)})
ATTESTORS = array(ATTESTOR_SET)
ATTESTATION = obj(
    {
        "attestors": ATTESTORS,
        "conditions": array(V1_ANY_ALL_CONDITIONS),
        "name": string(),
        "predicateType": string(),
        "type": string(),
    }
)
V1_DENY = obj({"conditions": any_value()})
IMAGE_VERIFICATION_VALIDATE = obj({"deny": V1_DENY, "message": string()})
# the fields v2beta1 kept; v1 adds the deprecated single-attestor spellings
V2_IMAGE_VERIFICATION = obj(
    {
        "attestations": array(ATTESTATION),
        "attestors": ATTESTORS,
        "failureAction": RULE_FAILURE_ACTION,
        "imageReferences": string_list(),
        "imageRegistryCredentials": IMAGE_REGISTRY_CREDENTIALS,
        "mutateDigest": boolean(default=True),
        "repository": string(),
        "required": boolean(default=True),
        "skipImageReferences": string_list(),
        "type": IMAGE_VERIFICATION_TYPE,
        "useCache": boolean(default=True),
        "validate": IMAGE_VERIFICATION_VALIDATE,
        "verifyDigest": boolean(default=True),
    }
)
V1_IMAGE_VERIFICATION = extend(
    V2_IMAGE_VERIFICATION,
    {
        "additionalExtensions": string_map(),
        "annotations": string_map(),
        "cosignOCI11": boolean(),
        "image": string(),
        "issuer": string(),
        "key": string(),
        "roots": string(),
        "subject": string(),
    },
)

# validate
OBJECT_FIELD_BINDING = obj(
    {
        "fields": string_list(),
        "objects": array(
            obj({"group": string(), "kind": string(), "name": string(), "namespace": string(), "version": string()})
        ),
    }
)
MANIFESTS = obj(
    {
        "annotationDomain": string(),
        "attestors": ATTESTORS,
        "dryRun": obj({"enable": boolean(), "namespace": string()}),
        "ignoreFields": array(OBJECT_FIELD_BINDING),
        "repository": string(),
    }
)
POD_SECURITY_STANDARD = obj(
    {"controlName": POD_SECURITY_CONTROL, "images": string_list(), "restrictedField": string(), "values": string_list()},
    required=["controlName"],
)
POD_SECURITY = obj({"exclude": array(POD_SECURITY_STANDARD), "level": POD_SECURITY_LEVEL, "version": POD_SECURITY_VERSION})
CEL = obj(
    {
        "auditAnnotations": array(AUDIT_ANNOTATION),
        "expressions": array(CEL_VALIDATION),
        "generate": boolean(default=False),
        "paramKind": PARAM_KIND,
        "paramRef": PARAM_REF,
        "variables": array(CEL_VARIABLE),
    }
)
FOREACH_VALIDATION = obj(
    {
        "anyPattern": any_value(),
        "context": CONTEXT,
        "deny": V1_DENY,
        "elementScope": boolean(),
        "foreach": any_value(),
        "list": string(),
        "pattern": any_value(),
        "preconditions": V1_FOREACH_PRECONDITIONS,
    }
)
# the fields v2beta1 kept; v1's deny takes free-form conditions and v1 adds allowExistingViolations
VALIDATION_COMMON: Mapping[str, Node] = {
    "anyPattern": any_value(),
    "assert": any_value(),
    "cel": CEL,
    "failureAction": RULE_FAILURE_ACTION,
    "failureActionOverrides": FAILURE_ACTION_OVERRIDES,
    "foreach": array(FOREACH_VALIDATION),
    "manifests": MANIFESTS,
    "message": string(),
    "pattern": any_value(),
    "podSecurity": POD_SECURITY,
}
V1_VALIDATION = obj({**VALIDATION_COMMON, "allowExistingViolations": boolean(default=True), "deny": V1_DENY})
V2_VALIDATION = obj({**VALIDATION_COMMON, "deny": obj({"conditions": V2_ANY_ALL_CONDITIONS})})

# --- ClusterPolicy / Policy ---------------------------------------------------------------------------------------

RULE_COMMON: Mapping[str, Node] = {
    "celPreconditions": array(MATCH_CONDITION),
    "context": CONTEXT,
    "generate": GENERATION,
    "imageExtractors": IMAGE_EXTRACTORS,
    "mutate": MUTATION,
    "name": string(max_length=63),
    "reportProperties": string_map(),
    "skipBackgroundRequests": boolean(default=True),
}
V1_RULE = obj(
    {
        **RULE_COMMON,
        "exclude": V1_MATCH_RESOURCES,
        "match": V1_MATCH_RESOURCES,
        "preconditions": any_value(),
        "validate": V1_VALIDATION,
        "verifyImages": array(V1_IMAGE_VERIFICATION),
    },
    required=["match", "name"],
)
V2BETA1_RULE = obj(
    {
        **RULE_COMMON,
        "exclude": V2_MATCH_RESOURCES,
        "match": V2_MATCH_RESOURCES,
        "preconditions": V2_ANY_ALL_CONDITIONS,
        "validate": V2_VALIDATION,
        "verifyImages": array(V2_IMAGE_VERIFICATION),
    },
    required=["match", "name"],
)


def policy_spec(rule: Node) -> Node:
    """A ClusterPolicy's or Policy's spec: the same in v1 and v2beta1 but for the rules."""
    return obj(
        {
            "admission": boolean(default=True),
            "applyRules": APPLY_RULES,
            "background": boolean(default=True),
            "emitWarning": boolean(default=False),
            "failurePolicy": FAILURE_POLICY,
            "generateExisting": boolean(),
            "generateExistingOnPolicyUpdate": boolean(),
            "mutateExistingOnPolicyUpdate": boolean(),
            "rules": array(rule),
            "schemaValidation": boolean(),
            "useServerSideApply": boolean(),
            "validationFailureAction": string(enum=POLICY_FAILURE_ACTION, default="Audit"),
            "validationFailureActionOverrides": FAILURE_ACTION_OVERRIDES,
            "webhookConfiguration": WEBHOOK_CONFIGURATION,
            "webhookTimeoutSeconds": integer(),
        }
    )


V1_POLICY_SPEC = policy_spec(V1_RULE)
V2BETA1_POLICY_SPEC = policy_spec(V2BETA1_RULE)

# --- PolicyException, CleanupPolicy, GlobalContextEntry -----------------------------------------------------------

POLICY_EXCEPTION_SPEC = obj(
    {
        "background": boolean(),
        "conditions": V2_ANY_ALL_CONDITIONS,
        "exceptions": array(
            obj({"policyName": string(), "ruleNames": string_list()}, required=["policyName", "ruleNames"])
        ),
        "match": V2_MATCH_RESOURCES,
        "podSecurity": array(POD_SECURITY_STANDARD),
    },
    required=["exceptions", "match"],
)
CLEANUP_POLICY_SPEC = obj(
    {
        "conditions": V2_ANY_ALL_CONDITIONS,
        "context": CONTEXT,
        "deletionPropagationPolicy": string(enum=["Foreground", "Background", "Orphan"]),
        "exclude": V2_MATCH_RESOURCES,
        "match": V2_MATCH_RESOURCES,
        "schedule": string(),
    },
    required=["match", "schedule"],
)
EXTERNAL_API_CALL = extend(
    API_CALL,
    {
        "refreshInterval": string(fmt="duration", default="10m"),
        "retryLimit": integer(fmt=None, minimum=1, default=3),
    },
)
GLOBAL_CONTEXT_ENTRY_SPEC = one_of(
    obj(
        {
            "apiCall": EXTERNAL_API_CALL,
            "kubernetesResource": obj(
                {"group": string(), "namespace": string(), "resource": string(), "version": string()},
                required=["resource", "version"],
            ),
            "projections": array(obj({"jmesPath": string(), "name": string()}, required=["jmesPath", "name"])),
        }
    ),
    ["kubernetesResource"], ["apiCall"],
)

# --- UpdateRequest ------------------------------------------------------------------------------------------------

UPDATE_REQUEST_SPEC = obj(
    {
        "context": obj(
            {
                "admissionRequestInfo": obj({"admissionRequest": ADMISSION_REQUEST, "operation": string()}),
                "userInfo": obj(
                    {
                        "clusterRoles": {**string_list(), "nullable": True},
                        "roles": {**string_list(), "nullable": True},
                        "synchronize": boolean(),
                        "userInfo": AUTHENTICATION_USER_INFO,
                    }
                ),
            }
        ),
        # Deprecated, and a hand-written or older request may omit it: defaulting it to false keeps the field
        # required (as in Kyverno's CRD) without refusing such a request (Kyverno's CRD refuses it).
        "deleteDownstream": defaulted(boolean(), False),
        "policy": string(),
        "requestType": string(enum=["mutate", "generate", "cel-generate", "cel-mutate"]),
        "resource": RESOURCE_SPEC,
        "rule": string(),
        "ruleContext": array(
            obj(
                {
                    "cacheRestore": boolean(),
                    "deleteDownstream": defaulted(boolean(), False),
                    "rule": string(),
                    "synchronize": boolean(),
                    "trigger": RESOURCE_SPEC,
                },
                required=["deleteDownstream", "rule", "trigger"],
            )
        ),
        "synchronize": boolean(),
    },
    required=["context", "deleteDownstream", "policy", "resource", "rule"],
)

# --- kinds --------------------------------------------------------------------------------------------------------


def column(name: str, type_: str, json_path: str, priority: int | None = None) -> Mapping[str, Any]:
    found: dict[str, Any] = {"name": name, "type": type_, "jsonPath": json_path}
    if priority is not None:
        found["priority"] = priority
    return found


AGE = column("AGE", "date", ".metadata.creationTimestamp")
POLICY_COLUMNS = (
    column("ADMISSION", "boolean", ".spec.admission"),
    column("BACKGROUND", "boolean", ".spec.background"),
    column("READY", "string", '.status.conditions[?(@.type == "Ready")].status'),
    AGE,
    column("FAILURE POLICY", "string", ".spec.failurePolicy", 1),
    column("VALIDATE", "integer", ".status.rulecount.validate", 1),
    column("MUTATE", "integer", ".status.rulecount.mutate", 1),
    column("GENERATE", "integer", ".status.rulecount.generate", 1),
    column("VERIFY IMAGES", "integer", ".status.rulecount.verifyimages", 1),
    column("MESSAGE", "string", '.status.conditions[?(@.type == "Ready")].message'),
)
CLEANUP_COLUMNS = (column("SCHEDULE", "string", ".spec.schedule"), AGE)
GLOBAL_CONTEXT_ENTRY_COLUMNS = (
    AGE,
    column("REFRESH INTERVAL", "string", ".spec.apiCall.refreshInterval"),
    column("LAST REFRESH", "date", ".status.lastRefreshTime"),
)
UPDATE_REQUEST_COLUMNS = (
    column("Policy", "string", ".spec.policy"),
    column("RuleType", "string", ".spec.requestType"),
    column("ResourceKind", "string", ".spec.resource.kind"),
    column("ResourceName", "string", ".spec.resource.name"),
    column("ResourceNamespace", "string", ".spec.resource.namespace"),
    column("status", "string", ".status.state"),
    column("Age", "date", ".metadata.creationTimestamp"),
)

CLUSTER_POLICY = KindSchema(
    group=GROUP,
    kind="ClusterPolicy",
    plural="clusterpolicies",
    scope="Cluster",
    versions={"v1": V1_POLICY_SPEC, "v2beta1": V2BETA1_POLICY_SPEC},
    short_names=("cpol",),
    categories=("kyverno",),
    printer_columns=POLICY_COLUMNS,
    spec_required=True,
)
POLICY = KindSchema(
    group=GROUP,
    kind="Policy",
    plural="policies",
    scope="Namespaced",
    versions={"v1": V1_POLICY_SPEC, "v2beta1": V2BETA1_POLICY_SPEC},
    short_names=("pol",),
    categories=("kyverno",),
    printer_columns=POLICY_COLUMNS,
    spec_required=True,
)
POLICY_EXCEPTION = KindSchema(
    group=GROUP,
    kind="PolicyException",
    plural="policyexceptions",
    scope="Namespaced",
    versions={"v2": POLICY_EXCEPTION_SPEC, "v2beta1": POLICY_EXCEPTION_SPEC},
    short_names=("polex",),
    categories=("kyverno",),
    spec_required=True,
    status_subresource=False,
)
CLEANUP_POLICY = KindSchema(
    group=GROUP,
    kind="CleanupPolicy",
    plural="cleanuppolicies",
    scope="Namespaced",
    versions={"v2": CLEANUP_POLICY_SPEC, "v2beta1": CLEANUP_POLICY_SPEC},
    short_names=("cleanpol",),
    categories=("kyverno",),
    printer_columns=CLEANUP_COLUMNS,
    spec_required=True,
)
CLUSTER_CLEANUP_POLICY = KindSchema(
    group=GROUP,
    kind="ClusterCleanupPolicy",
    plural="clustercleanuppolicies",
    scope="Cluster",
    versions={"v2": CLEANUP_POLICY_SPEC, "v2beta1": CLEANUP_POLICY_SPEC},
    short_names=("ccleanpol",),
    categories=("kyverno",),
    printer_columns=CLEANUP_COLUMNS,
    spec_required=True,
)
GLOBAL_CONTEXT_ENTRY = KindSchema(
    group=GROUP,
    kind="GlobalContextEntry",
    plural="globalcontextentries",
    scope="Cluster",
    versions={"v2": GLOBAL_CONTEXT_ENTRY_SPEC, "v2alpha1": GLOBAL_CONTEXT_ENTRY_SPEC, "v2beta1": GLOBAL_CONTEXT_ENTRY_SPEC},
    storage="v2beta1",
    short_names=("gctxentry",),
    categories=("kyverno",),
    printer_columns=GLOBAL_CONTEXT_ENTRY_COLUMNS,
    spec_required=True,
)
UPDATE_REQUEST = KindSchema(
    group=GROUP,
    kind="UpdateRequest",
    plural="updaterequests",
    scope="Namespaced",
    versions={"v2": UPDATE_REQUEST_SPEC},
    short_names=("ur",),
    categories=("kyverno",),
    printer_columns=UPDATE_REQUEST_COLUMNS,
    # v1beta1 is kept in the CRD for stored objects but no longer served
    unserved=("v1beta1",),
)

KINDS: tuple[KindSchema, ...] = (
    CLUSTER_POLICY,
    POLICY,
    POLICY_EXCEPTION,
    CLEANUP_POLICY,
    CLUSTER_CLEANUP_POLICY,
    GLOBAL_CONTEXT_ENTRY,
    UPDATE_REQUEST,
)

"""Running CEL policy kinds the way ``kyverno test``/``kyverno apply`` do, from data the caller already loaded."""

from __future__ import annotations

from typing import Any

from stockade.celpolicy.authz import AUTHZ_MODES, AuthzEvaluator, evaluation_mode, request_for_mode
from stockade.celpolicy.evaluator import CelPolicyEvaluator, GeneratedPlacement
from stockade.celpolicy.imagevalidating import ImageValidatingEvaluator, RequestVerifications
from stockade.celpolicy.model import CelPolicy
from stockade.celpolicy.providers import MockHttp, StaticGlobalContext, StaticImageData, StaticResources
from stockade.celpolicy.request import AdmissionInput
from stockade.engine.match import RequestInfo
from stockade.engine.response import EngineResponse

_VALIDATING = ("ValidatingPolicy", "NamespacedValidatingPolicy")
_MUTATING = ("MutatingPolicy", "NamespacedMutatingPolicy")
_GENERATING = ("GeneratingPolicy", "NamespacedGeneratingPolicy")
_DELETING = ("DeletingPolicy", "NamespacedDeletingPolicy")
_IMAGE_VALIDATING = ("ImageValidatingPolicy", "NamespacedImageValidatingPolicy")


def _user_info(info: RequestInfo) -> dict[str, Any]:
    return info.user_info_dict()


class CelPolicyRun:
    """All CEL policies of one test/apply invocation; :meth:`responses` evaluates them for one resource."""

    def __init__(
        self,
        *,
        documents: list[dict[str, Any]],
        exception_documents: list[dict[str, Any]] | None = None,
        context_resources: list[dict[str, Any]] | None = None,
        context_images: list[dict[str, Any]] | None = None,
        cluster_objects: list[dict[str, Any]] | None = None,
        params: list[dict[str, Any]] | None = None,
        api_call_responses: list[dict[str, Any]] | None = None,
        global_context_entries: list[dict[str, Any]] | None = None,
        namespaces: dict[str, dict[str, Any]] | None = None,
        json_payloads: dict[str, Any] | None = None,
        subresources: list[dict[str, Any]] | None = None,
        image_verifier: Any = None,
        targets: list[dict[str, Any]] | None = None,
        generate_placement: GeneratedPlacement | None = None,
        live_providers: dict[str, Any] | None = None,
    ) -> None:
        """``generate_placement``: what becomes of ``generator.Apply``'s objects; Kyverno's offline CLI by default
        (the CLI with clusterResources stands for a cluster: see :class:`GeneratedPlacement`).  ``live_providers``
        replaces the CEL libraries answered from the given data (``resource``, ``http``, ``globalContext``...) with
        live ones, as ``apply --cluster`` has them."""
        self.targets = list(targets or [])
        self.generate_placement = generate_placement or GeneratedPlacement()
        self.subresources = list(subresources or [])
        policies = [CelPolicy(d) for d in documents]
        exceptions = [p for p in policies if p.kind == "PolicyException"]
        exceptions += [CelPolicy(d) for d in exception_documents or [] if d.get("kind") == "PolicyException"]
        self.validating = [p for p in policies if p.kind in _VALIDATING and evaluation_mode(p.raw) not in AUTHZ_MODES]
        # HTTP / Envoy authorization policies judge httpPayloads / envoyPayloads, never Kubernetes resources.
        self.authz = [p for p in policies if p.kind in _VALIDATING and evaluation_mode(p.raw) in AUTHZ_MODES]
        self.mutating = [p for p in policies if p.kind in _MUTATING]
        self.generating = [p for p in policies if p.kind in _GENERATING]
        self.deleting = [p for p in policies if p.kind in _DELETING]
        self.image_validating = [p for p in policies if p.kind in _IMAGE_VALIDATING]
        self.vaps = [p for p in policies if p.kind == "ValidatingAdmissionPolicy"]
        self.vap_bindings = [p for p in policies if p.kind == "ValidatingAdmissionPolicyBinding"]
        self.maps = [p for p in policies if p.kind == "MutatingAdmissionPolicy"]
        self.map_bindings = [p for p in policies if p.kind == "MutatingAdmissionPolicyBinding"]
        self.namespaces = dict(namespaces or {})
        self.json_payloads = dict(json_payloads or {})
        resources = StaticResources(list(context_resources or []) + list(cluster_objects or []))
        providers: dict[str, Any] = {"resource": resources}
        if api_call_responses:
            providers["http"] = MockHttp(api_call_responses)
        # Kyverno's offline CLI always answers these two: an unknown global context entry is null, image data
        # missing from the context file is an error naming the image.
        providers["globalContext"] = StaticGlobalContext(list(global_context_entries or []))
        providers["image"] = StaticImageData(list(context_images or []))
        providers.update(live_providers or {})
        self.live = live_providers is not None
        self.evaluator = CelPolicyEvaluator(providers=providers, exceptions=exceptions, params=params)
        self.authz_evaluator = AuthzEvaluator(providers)
        self.image_evaluator = ImageValidatingEvaluator(self.evaluator, image_verifier) if self.image_validating else None

    def _parent_of(self, resource: dict[str, Any]) -> tuple[str, str, str, str, str] | None:
        """Values-file ``subresources``: an object of a subresource kind is admitted as its parent's subresource."""
        api_version = str(resource.get("apiVersion", ""))
        for entry in self.subresources:
            sub = entry.get("subresource") or {}
            parent = entry.get("parentResource") or {}
            group, version = str(sub.get("group") or ""), str(sub.get("version") or "")
            if sub.get("kind") == resource.get("kind") and (f"{group}/{version}" if group else version) == api_version:
                name = str(sub.get("name") or "")
                return (
                    str(parent.get("group") or ""),
                    str(parent.get("version") or ""),
                    str(parent.get("kind") or ""),
                    str(parent.get("name") or ""),
                    name.split("/", 1)[1] if "/" in name else "",
                )
        return None

    def _bindings(self, bindings: list[CelPolicy], policy: CelPolicy) -> list[CelPolicy]:
        return [b for b in bindings if str(b.spec.get("policyName", "")) == policy.name]

    def responses(
        self,
        resource: dict[str, Any],
        operation: str,
        info: RequestInfo,
        namespace_labels: dict[str, str],
        *,
        default_run: bool = True,
    ) -> list[EngineResponse]:
        """Kyverno's order: MAP, MutatingPolicy (chained), VAP, ValidatingPolicy, ImageValidatingPolicy,
        GeneratingPolicy, DeletingPolicy."""
        operation = (operation or "CREATE").upper()
        namespace = str((resource.get("metadata") or {}).get("namespace") or "")
        namespace_object = self.namespaces.get(namespace)

        parent = self._parent_of(resource)

        def request_for(current: dict[str, Any]) -> AdmissionInput:
            old = current if operation in ("UPDATE", "DELETE") else None
            new = None if operation == "DELETE" else current
            return AdmissionInput(
                object=new,
                old_object=old,
                operation=operation,
                user_info=_user_info(info),
                namespace_object=namespace_object,
                namespace_labels=dict(namespace_labels),
                subresource=parent[4] if parent else "",
                parent=parent[:4] if parent else None,
            )

        out: list[EngineResponse] = []
        current = resource
        for policy in self.maps:
            response = self.evaluator.mutate_admission(policy, self._bindings(self.map_bindings, policy), request_for(current))
            if response is None:
                continue
            out.append(response)
            current = response.patched_resource or current
        for policy in self.mutating:
            response = self.evaluator.mutate(policy, request_for(current))
            if response is None:
                continue
            out.append(response)
            current = response.patched_resource or current
        if self.targets:
            trigger = request_for(current)
            for policy in self.mutating:
                if not self.evaluator.mutates_existing(policy):
                    continue
                selected = self.evaluator.selected_targets(policy, trigger)
                for target in self.targets:
                    response = self.evaluator.mutate_target(policy, target, trigger, selected)
                    if response is not None and response.rules:
                        out.append(response)
        for policy in self.vaps:
            vap_request = AdmissionInput(object=current, user_info=_user_info(info), namespace_labels=dict(namespace_labels))
            out.append(self.evaluator.validate_admission(policy, self._bindings(self.vap_bindings, policy), vap_request, live=self.live))
        for policy in self.validating:
            if (policy.spec.get("evaluation") or {}).get("mode") == "JSON":
                out.append(self.evaluator.validate_json(policy, current))
                continue
            response = self.evaluator.validate(policy, request_for(current))
            if response is not None:
                out.append(response)
        if self.image_evaluator is not None:
            verifications = RequestVerifications()
            for policy in self.image_validating:
                response = self.image_evaluator.validate(policy, request_for(current), verifications)
                if response is not None:
                    out.append(response)
            verifications.enforce_required()
        for policy in self.generating:
            response = self.evaluator.generate(policy, request_for(current), placement=self.generate_placement)
            if response is not None:
                out.append(response)
        if default_run:
            for policy in self.deleting:
                response = self.evaluator.delete(policy, resource, namespace_object)
                if response is not None:
                    out.append(response)
        return out

    def json_payload_responses(self) -> dict[str, list[EngineResponse]]:
        """JSON-mode ValidatingPolicies (with their PolicyExceptions) and DeletingPolicies applied to each JSON
        payload, keyed by payload path; Kubernetes-mode ValidatingPolicies do not apply to payloads."""
        results: dict[str, list[EngineResponse]] = {}
        for name, payload in self.json_payloads.items():
            responses = [
                self.evaluator.validate_json(policy, payload)
                for policy in self.validating
                if evaluation_mode(policy.raw) == "JSON"
            ]
            if isinstance(payload, dict):
                for policy in self.deleting:
                    response = self.evaluator.delete(policy, payload)
                    if response is not None:
                        responses.append(response)
            results[name] = responses
        return results

    def authz_responses(self, mode: str, payload: Any) -> list[EngineResponse]:
        """Every ``mode`` (HTTP or Envoy) authorization policy applied to one payload, as Kyverno's authz processor
        does for ``httpPayloads`` / ``envoyPayloads``; raises AuthzPayloadError for a malformed payload and
        PolicyCompileError for a policy that does not compile."""
        policies = [p for p in self.authz if evaluation_mode(p.raw) == mode]
        if not policies:
            return []
        request = request_for_mode(mode, payload)
        return [self.authz_evaluator.authorize(policy, request) for policy in policies]

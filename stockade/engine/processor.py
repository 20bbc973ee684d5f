"""Applying a set of policies to one resource in Kyverno's order: all mutations, then validation, then generation.

Each mutating policy sees the output of the previous one and validation sees the fully mutated resource, the way
an admission chain would present it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from stockade.engine.engine import Engine, Request
from stockade.engine.handlers.verify_images import VerificationRecord, apply_record
from stockade.engine.response import EngineResponse
from stockade.policy.model import KyvernoPolicy


@dataclass
class ProcessorResult:
    responses: list[EngineResponse] = field(default_factory=list)
    patched_resource: dict[str, Any] = field(default_factory=dict)


def apply_policies(
    engine: Engine,
    policies: list[KyvernoPolicy],
    request: Request,
    *,
    values_for: Any = None,
    mutate_existing: bool = True,
) -> ProcessorResult:
    """Run mutate → validate → generate for every policy; ``values_for(policy)`` supplies per-policy values.

    ``mutate_existing`` also computes ``mutate.targets`` patches (from the engine's resource lookup)."""
    result = ProcessorResult()
    resource = request.resource

    def request_for(policy: KyvernoPolicy) -> Request:
        values = values_for(policy) if values_for is not None else request.values
        operation = request.operation
        if values and "request.operation" in values and not request.operation_forced:
            operation = str(values["request.operation"]).upper()
        return Request(
            resource=resource,
            operation=operation,
            old_resource=request.old_resource,
            info=request.info,
            namespace_labels=request.namespace_labels,
            subresource=request.subresource,
            values=values or {},
            gvk=request.gvk,
        )

    for policy in policies:
        if not policy.has_mutate():
            continue
        response = engine.mutate(engine.policy_context(policy, request_for(policy)), include_existing=mutate_existing)
        result.responses.append(response)
        if response.patched_resource:
            resource = response.patched_resource
    records: dict[str, VerificationRecord] = {}
    if engine.image_verifier is not None:
        record = VerificationRecord()
        for policy in policies:
            if not policy.has_verify_images():
                continue
            response, record = engine.verify_images(engine.policy_context(policy, request_for(policy)), record)
            records[policy.key] = record
            result.responses.append(response)
            if response.patched_resource:
                resource = response.patched_resource
        # the record annotations hold only what was verified above: whatever the object carried is replaced
        resource, _ = apply_record(resource, record)
    for policy in policies:
        if not (policy.has_validate() or policy.has_verify_images()):
            continue
        response = engine.validate(engine.policy_context(policy, request_for(policy)), records.get(policy.key))
        result.responses.append(response)
    for policy in policies:
        if not policy.has_generate():
            continue
        response = engine.generate(engine.policy_context(policy, request_for(policy)))
        if not response.is_empty():
            result.responses.append(response)
    result.patched_resource = resource
    return result

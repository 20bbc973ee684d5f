"""CEL for stockade: one small backend-independent interface plus the Kubernetes and Kyverno CEL libraries.

    env = CelEnvironment(["object", "oldObject", "request"])
    program = env.compile("object.spec.replicas <= 5")        # once per policy
    activation = CelActivation({"object": pod, ...})           # once per resource
    program.evaluate(activation)                               # plain Python result
"""

from stockade.cel.environment import (
    DEFAULT_EVAL_TIME_LIMIT_SECONDS,
    DEFAULT_LIBRARIES,
    IMAGE_VALIDATING_LIBRARIES,
    CelActivation,
    CelEnvironment,
    CelProgram,
)
from stockade.cel.errors import CelCompileError, CelCostLimitError, CelError, CelEvalError
from stockade.cel.libs.authz import request_resource_check
from stockade.cel.values import to_json
from stockade.cel.providers import (
    AuthorizerProvider,
    GeneratorProvider,
    GlobalContextProvider,
    HttpProvider,
    ImageDataProvider,
    ResourceProvider,
)

__all__ = [
    "DEFAULT_EVAL_TIME_LIMIT_SECONDS",
    "DEFAULT_LIBRARIES",
    "IMAGE_VALIDATING_LIBRARIES",
    "AuthorizerProvider",
    "CelActivation",
    "CelCompileError",
    "CelCostLimitError",
    "CelEnvironment",
    "CelError",
    "CelEvalError",
    "CelProgram",
    "GeneratorProvider",
    "GlobalContextProvider",
    "HttpProvider",
    "ImageDataProvider",
    "ResourceProvider",
    "request_resource_check",
    "to_json",
]

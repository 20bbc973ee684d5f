"""Kyverno's JMESPath dialect: the reference grammar, go-jmespath's missing-key errors, and Kyverno's functions.

Usage::

    from stockade.jmespath import search, compile_expression, JMESPathError, UnknownKeyError

    search("request.object.metadata.labels.app || 'none'", context)
    compile_expression("add('1Gi', '512Mi')").search({})  # -> "1536Mi"
"""

from __future__ import annotations

# Function modules register themselves on import; the order matters only for ``sum``, which Kyverno overrides.
from stockade.jmespath import builtins as _builtins  # noqa: F401
from stockade.jmespath import functions as _functions  # noqa: F401
from stockade.jmespath import functions_math as _functions_math  # noqa: F401
from stockade.jmespath import functions_time as _functions_time  # noqa: F401
from stockade.jmespath.errors import JMESPathError, UnknownKeyError
from stockade.jmespath.functions import set_hostname_resolver
from stockade.jmespath.functions_time import set_clock
from stockade.jmespath.interpreter import CompiledExpression, compile_expression, search
from stockade.jmespath.registry import FUNCTIONS, FunctionSpec, function_names


def function_signatures() -> list[str]:
    """One line per function, ``name(arg types) return (note)``, for a ``jp function`` listing."""
    return [FUNCTIONS[name].signature() for name in function_names()]


__all__ = [
    "CompiledExpression",
    "FunctionSpec",
    "JMESPathError",
    "UnknownKeyError",
    "compile_expression",
    "function_names",
    "function_signatures",
    "search",
    "set_clock",
    "set_hostname_resolver",
]

"""Kyverno's JMESPath dialect: the reference grammar, go-jmespath's missing-key errors, and Kyverno's functions.

Usage::

    from stockade.jmespath import search, compile_expression, JMESPathError, UnknownKeyError

    search("request.object.metadata.labels.app || 'none'", context)
    compile_expression("add('1Gi', '512Mi')").search({})  # -> "1536Mi"

Known differences from Kyverno (Go):

* Numbers stay Python ints where Go holds a float64; arithmetic results that Go would print without a fraction
  come back as ints (``divide(`6`, `3`)`` is ``2``). Floats parsed from backtick literals (``1.0``) stay floats:
  whoever renders results should print integral floats without ``.0`` as Go does.
* The missing-key rules follow the kyverno/go-jmespath interpreter (see ``interpreter``); Kyverno pins a 2023
  revision of the fork whose source was not available here, so they were taken from its 2021 interpreter.
* ``'30m'`` is a quantity (30 milli), exactly as in Kyverno, so ``add('1h', '30m')`` is a type mismatch.
* ``is_external_url`` does no DNS lookup (the engine does no I/O): install a resolver with
  ``set_hostname_resolver``; without one, host names other than ``localhost`` count as external.
* ``base64_decode`` replaces invalid UTF-8 with U+FFFD (Go keeps raw bytes in its string).
* ``random`` is a small regex-driven generator, not goregen; ``x509_decode`` mirrors the fields of Go's
  ``x509.Certificate`` JSON that cryptography exposes (constraint fields are always null).
* Regular expressions are Go RE2 syntax translated to Python ``re``; Unicode classes (``\\p{L}``) are rejected.
* Error texts follow Go where Kyverno users see them; JSON/YAML parse errors are reworded only for the common cases.
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

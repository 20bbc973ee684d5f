"""The public CEL interface, backed by cel-expr-python (Google's cel-cpp).

Usage pattern that keeps evaluation cheap: build one :class:`CelEnvironment` per policy kind, compile each policy
expression once, build one :class:`CelActivation` per admission request / resource, then evaluate every compiled
program against that activation.  The activation converts the Python data to CEL values once; each evaluation
then costs a few microseconds.
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any, Callable, Iterable, Mapping

from google.protobuf import wrappers_pb2

from stockade.cel.errors import CelCompileError, CelCostLimitError, CelError, CelEvalError
from stockade.cel.functions import ANY_KINDS, Library
from stockade.cel.libs import IMAGE_VERIFY_LIBRARY, LIBRARY_BUILDERS, OPTIONAL_LIBRARY_BUILDERS, authorizer_check_impl
from stockade.cel.providers import PROVIDER_KEYS, PROVIDER_LIBRARY_VARIANTS, provider_implementations, provider_library
from stockade.cel.rewrite import rewrite_bindings, rewrite_null_safety, rewrite_struct_literals
from stockade.cel.values import PLAIN_SCALARS, to_backend

# cel-cpp itself aborts an evaluation after 10,000 comprehension iterations (reported as a cost-limit error).
# Kubernetes' PerCallLimit (1,000,000 cost units) is documented as roughly 0.1 s of CPU.  cel-cpp cannot be
# interrupted from Python, so the guard checks wall time after evaluation and fails the call; the default is
# generous because Python-implemented library functions are slower than Go's.
DEFAULT_EVAL_TIME_LIMIT_SECONDS = 1.0

# cel-cpp's own extensions, by the library name policies use
_EXTENSIONS: tuple[str, ...] = ("ext.strings", "ext.optional", "ext.math", "ext.encoders", "ext.bindings")

DEFAULT_LIBRARIES: tuple[str, ...] = (*_EXTENSIONS, *LIBRARY_BUILDERS, "providers")
# ImageValidatingPolicy expressions also see Kyverno's image-verification functions (verifyImageSignatures, ...)
IMAGE_VALIDATING_LIBRARIES: tuple[str, ...] = (*DEFAULT_LIBRARIES, IMAGE_VERIFY_LIBRARY)


class _Backend:
    """cel-expr-python, loaded the first time an expression is compiled or an activation built.  Its native
    libraries keep about 30 MiB resident in every process that imports them; a server, worker or CLI run whose
    policies hold no CEL never needs them (`backend_loaded` tells whether this process has them)."""

    def __init__(self) -> None:
        from cel_expr_python import cel
        from cel_expr_python.ext import ext_bindings, ext_encoders, ext_math, ext_optional, ext_strings

        self.cel: Any = cel
        kind = cel.Type
        self.extensions: dict[str, Callable[[], Any]] = {
            "ext.strings": ext_strings.ExtStrings,
            "ext.optional": ext_optional.ExtOptional,
            "ext.math": ext_math.ExtMath,
            "ext.encoders": ext_encoders.ExtEncoders,
            "ext.bindings": ext_bindings.ExtBindings,
        }
        self.scalar_types: dict[str, Any] = {
            "string": kind.STRING,
            "int": kind.INT,
            "uint": kind.UINT,
            "double": kind.DOUBLE,
            "bool": kind.BOOL,
            "bytes": kind.BYTES,
            "null": kind.NULL,
            "dyn": kind.DYN,
            "opaque": kind.DYN,  # see stockade.cel.functions
            "timestamp": kind.TIMESTAMP,
            "duration": kind.DURATION,
            "list": kind.List(kind.DYN),
            "map": kind.Map(kind.DYN, kind.DYN),
        }
        # results that are already plain Python (checked per evaluation, so kept as one tuple)
        self.plain_kinds = (kind.BOOL, kind.STRING, kind.INT, kind.DOUBLE)
        # Activations are portable across cel-expr-python environments (variables are looked up by name), so a
        # single bare environment creates them all.
        self.activation_env = cel.NewEnv(variables={})


_BACKEND: _Backend | None = None
_BACKEND_LOCK = threading.Lock()


def _backend() -> _Backend:
    global _BACKEND
    loaded = _BACKEND
    if loaded is not None:
        return loaded
    with _BACKEND_LOCK:
        if _BACKEND is None:
            _BACKEND = _Backend()
        return _BACKEND


def native_module() -> Any:
    """cel-expr-python's ``cel`` module, loaded on first use (for the schema checker's typed declarations)."""
    return _backend().cel


def backend_loaded() -> bool:
    """Whether this process has loaded the CEL backend (compiled an expression or built an activation)."""
    return _BACKEND is not None

# Results the backend converts without help (no duration/timestamp can hide inside them).
_SCALAR_RESULTS = frozenset({"string", "int", "uint", "double", "bool", "bytes", "null"})

_POSITION_RE = re.compile(r"<input>:(\d+):(\d+):\s*(.*)")


def _cel_type(name: str) -> Any:
    try:
        return _backend().scalar_types[name]
    except KeyError:
        raise ValueError(f"unknown CEL type name {name!r}") from None


def _expand_any(params: tuple[str, ...]) -> list[tuple[str, ...]]:
    """Expand ``any`` parameters into concrete kinds (see stockade.cel.functions)."""
    expanded: list[tuple[str, ...]] = [()]
    for param in params:
        choices = ANY_KINDS if param == "any" else (param,)
        expanded = [prefix + (choice,) for prefix in expanded for choice in choices]
    return expanded


def _returning_backend_values(impl: Callable[..., Any] | None) -> Callable[..., Any] | None:
    """Wrap a library implementation whose result may hold durations/timestamps (see :func:`to_backend`)."""
    if impl is None:
        return None
    function = impl

    def wrapped(*args: Any) -> Any:
        result = function(*args)
        return result if isinstance(result, PLAIN_SCALARS) else to_backend(result)

    return wrapped


def _to_extension(library: Library) -> Any:
    cel = _backend().cel
    declarations = []
    for function in library.functions:
        overloads = []
        for overload in function.overloads:
            for params in _expand_any(overload.params):
                suffix = "" if params == overload.params else "/" + "_".join(params)
                overloads.append(
                    cel.Overload(
                        overload.overload_id + suffix,
                        _cel_type(overload.result),
                        [_cel_type(param) for param in params],
                        is_member=overload.member,
                        impl=overload.impl if overload.result in _SCALAR_RESULTS else _returning_backend_values(overload.impl),
                    )
                )
        declarations.append(cel.FunctionDecl(function.name, overloads))
    return cel.CelExtension(library.name, declarations)


_ENV_CACHE: dict[tuple[frozenset[str], tuple[str, ...]], Any] = {}
_ENV_LOCK = threading.Lock()


def _known_library(name: str) -> bool:
    return name in _EXTENSIONS or name in LIBRARY_BUILDERS or name in OPTIONAL_LIBRARY_BUILDERS or name in PROVIDER_LIBRARY_VARIANTS


def _extensions(libraries: tuple[str, ...]) -> list[Any]:
    native = _backend().extensions
    extensions = []
    for name in libraries:
        if name in native:
            extensions.append(native[name]())
        elif name in LIBRARY_BUILDERS:
            extensions.append(_to_extension(LIBRARY_BUILDERS[name]()))
        elif name in OPTIONAL_LIBRARY_BUILDERS:
            extensions.append(_to_extension(OPTIONAL_LIBRARY_BUILDERS[name]()))
        elif name in PROVIDER_LIBRARY_VARIANTS:
            extensions.append(_to_extension(provider_library(name)))
        else:
            raise ValueError(f"unknown CEL library {name!r}; known: {sorted(DEFAULT_LIBRARIES)}")
    return extensions


def _native_env(variables: frozenset[str], libraries: tuple[str, ...]) -> Any:
    """Build (or reuse) the cel-expr-python environment; building one costs milliseconds, so share them."""
    key = (variables, libraries)
    with _ENV_LOCK:
        cached = _ENV_CACHE.get(key)
        if cached is not None:
            return cached
        cel = _backend().cel
        env = cel.NewEnv(variables={name: cel.Type.DYN for name in variables}, extensions=_extensions(libraries))
        _ENV_CACHE[key] = env
        return env


def native_env_with_types(pool: Any, variables: Mapping[str, Any], libraries: tuple[str, ...]) -> Any:
    """A checking environment whose variables have declared types (messages of ``pool``); not cached: schema
    checks run when a policy is stored, not per request."""
    return _backend().cel.NewEnv(pool, variables=dict(variables), extensions=_extensions(libraries))


def prepare_source(expression: str, libraries: tuple[str, ...]) -> str:
    """The source cel-cpp compiles for ``expression``: struct literals, cel-go's null safety (with optionals and the
    compat library) and bindings rewritten (see stockade.cel.rewrite)."""
    source = rewrite_struct_literals(expression)
    if {"ext.optional", "compat"} <= set(libraries):
        source = rewrite_null_safety(source)
    return rewrite_bindings(source, bindings="ext.bindings" in libraries, optionals="ext.optional" in libraries)


def _compile_error(expression: str, source: str, message: str) -> CelCompileError:
    """Turn a backend message into an error with a 1-based line/column into ``expression``.

    cel-cpp already reports 1-based columns.  When the struct-literal rewrite changed the text, a position after
    the first change would point into the rewritten source, so it is dropped rather than reported wrongly.
    """
    match = _POSITION_RE.search(message)
    if match:
        line, column, detail = int(match.group(1)), int(match.group(2)), match.group(3)
        detail = detail.split(" | ")[0].strip()
        if source != expression:
            offset = sum(len(text) + 1 for text in source.split("\n")[: line - 1]) + column - 1
            unchanged = next((i for i, (a, b) in enumerate(zip(source, expression)) if a != b), min(len(source), len(expression)))
            if offset >= unchanged:
                return CelCompileError(f"compilation failed: {detail}", expression)
        return CelCompileError(f"compilation failed: {detail}", expression, line, column)
    return CelCompileError(f"compilation failed: {message.strip()}", expression)


COST_LIMIT_MESSAGE = "operation cancelled: actual cost limit exceeded"
_ITERATION_BUDGET_MARK = "Iteration budget exceeded"  # cel-cpp's own status text; the backend has no error codes
_MISSING_KEY = re.compile(r"Key not found in map : \"([^\"]*)\"")  # likewise cel-cpp's text, read once here


def _runtime_error(message: str, expression: str) -> CelEvalError:
    """The typed error for a backend failure: budget exhaustion is a CelCostLimitError, the rest CelEvalError."""
    if _ITERATION_BUDGET_MARK in message:
        # cel-cpp stops comprehensions after 10,000 iterations per evaluation (not configurable from Python).
        return CelCostLimitError(f"{COST_LIMIT_MESSAGE} (iteration budget)", expression)
    error = CelEvalError(_clean_runtime_message(message), expression)
    missing = _MISSING_KEY.search(message)
    if missing is not None:
        error.missing_key = missing.group(1)
    return error


def _clean_runtime_message(message: str) -> str:
    # Backend messages look like "OUT_OF_RANGE: text" or "INVALID_ARGUMENT: text"; the status code is noise.
    message = message.replace(" [INTERNAL]", "").replace(" [INVALID_ARGUMENT]", "")
    head, separator, rest = message.partition(": ")
    if separator and re.fullmatch(r"[A-Z_]+", head):
        return rest
    return message


class CelActivation:
    """Variable values (plain Python) and provider objects for one resource/request.

    Build it once and evaluate many programs against it: the conversion to CEL values happens here, not per
    evaluation.  ``providers`` maps ``resource``, ``http``, ``globalContext``, ``image``, ``generator`` and
    ``authorizer`` to objects implementing the protocols in :mod:`stockade.cel.providers`.
    """

    __slots__ = ("values", "providers", "_native")

    def __init__(self, values: Mapping[str, Any], providers: Mapping[str, Any] | None = None) -> None:
        self.values = dict(values)
        self.providers = dict(providers or {})
        unknown = set(self.providers) - set(PROVIDER_KEYS)
        if unknown:
            raise ValueError(f"unknown CEL providers {sorted(unknown)}; known: {list(PROVIDER_KEYS)}")
        backend = _backend()
        cel = backend.cel
        functions = [
            cel.Function(name, [_cel_type(param) for param in params], member, impl, _cel_type(result))
            for name, params, result, member, impl in provider_implementations(self.providers)
        ]
        authorizer = self.providers.get("authorizer")
        if authorizer is not None:
            functions.append(
                cel.Function(
                    "check", [_cel_type("map"), cel.Type.STRING], True, authorizer_check_impl(authorizer), _cel_type("opaque")
                )
            )
        try:
            self._native = backend.activation_env.Activation(self.values, functions)
        except Exception:  # noqa: BLE001 - backend raises bare RuntimeError/TypeError
            # Values holding durations/timestamps (rare: they come from CEL results) need converting first; doing
            # it only on refusal keeps the common activation free of a walk over the whole object.
            try:
                self._native = backend.activation_env.Activation(to_backend(self.values), functions)
            except Exception as error:  # noqa: BLE001 - backend raises bare RuntimeError/TypeError
                raise CelEvalError(f"cannot convert activation values to CEL: {error}") from error


def _to_python(value: Any, expression: str, reusable: bool = False) -> Any:
    """Convert a backend value to plain Python without touching optionals (the backend crashes on those).

    ``reusable``: the value goes back into an activation later (a policy variable), so it keeps its CEL type where
    plain Python would lose it: uint as ``google.protobuf.UInt64Value``, durations and timestamps as their
    well-known protobuf types.  A type value has no such form and is refused.
    """
    try:
        type_name = value.type().name()
    except TypeError:
        raise CelEvalError("result is an optional value; use .orValue() or .value()", expression) from None
    if type_name.startswith("MAP"):
        return {key: _to_python(item, expression, reusable) for key, item in value.value().items()}
    if type_name.startswith("LIST"):
        return [_to_python(item, expression, reusable) for item in value.value()]
    if type_name == "ERROR":
        raise _runtime_error(str(value.value()), expression)
    plain = value.value()
    if isinstance(plain, bytearray):
        return bytes(plain)
    if reusable:
        if type_name == "UINT":
            return wrappers_pb2.UInt64Value(value=plain)
        if isinstance(plain, _backend().cel.Type):
            raise CelEvalError("a type value cannot be kept for later expressions", expression)
        return to_backend(plain)
    return plain


class CelProgram:
    """A compiled expression; immutable and safe to share between threads."""

    __slots__ = ("expression", "_program", "_time_limit", "optional", "type_valued", "_plain_kinds")

    def __init__(self, expression: str, program: Any, time_limit: float | None, optional: bool = False) -> None:
        self.expression = expression
        self._program = program
        self._time_limit = time_limit
        # The expression's static type is an optional (the result then crosses as its value or None) or a type
        # value: neither can go back into an activation, so a caller reusing the result (a variable) must reuse
        # the expression instead.
        self.optional = optional
        self.type_valued = program.return_type().name().startswith("TYPE")
        self._plain_kinds = _backend().plain_kinds

    def evaluate(self, activation: CelActivation, *, reusable: bool = False) -> Any:
        """Evaluate against ``activation`` and return plain Python; raise :class:`CelEvalError` on failure.

        ``reusable``: the result will be put back into an activation (see :func:`_to_python`)."""
        started = time.perf_counter()
        try:
            result = self._program.eval(activation._native)
            kind = result.type()
        except CelError:
            raise
        except TypeError:
            raise CelEvalError("result is an optional value; use .orValue() or .value()", self.expression) from None
        except Exception as error:  # noqa: BLE001 - backend raises bare RuntimeError
            raise _runtime_error(str(error), self.expression) from error
        if self._time_limit is not None and time.perf_counter() - started > self._time_limit:
            raise CelCostLimitError(COST_LIMIT_MESSAGE, self.expression)
        if kind in self._plain_kinds:
            return result.value()
        return _to_python(result, self.expression, reusable)

    def __repr__(self) -> str:
        return f"CelProgram({self.expression!r})"


class CelEnvironment:
    """Declares variable names (all dynamically typed) and the libraries available to expressions."""

    def __init__(
        self,
        variables: Iterable[str],
        libraries: Iterable[str] = DEFAULT_LIBRARIES,
        *,
        time_limit_seconds: float | None = DEFAULT_EVAL_TIME_LIMIT_SECONDS,
    ) -> None:
        self.variables = frozenset(variables)
        self.libraries = tuple(libraries)
        unknown = [name for name in self.libraries if not _known_library(name)]
        if unknown:  # refused here, not at the first compile, which may come much later
            raise ValueError(f"unknown CEL library {unknown[0]!r}; known: {sorted(DEFAULT_LIBRARIES)}")
        self._time_limit = time_limit_seconds
        self._native_env: Any = None  # built by the first compile (see _Backend)
        self._cache: dict[str, CelProgram] = {}
        self._prepared_cache: dict[str, CelProgram] = {}
        self._optional_wrapping = "ext.optional" in self.libraries

    @property
    def _env(self) -> Any:
        env = self._native_env
        if env is None:
            env = self._native_env = _native_env(self.variables, self.libraries)
        return env

    def compile(self, expression: str) -> CelProgram:
        """Parse and type-check ``expression``; raise :class:`CelCompileError` naming the position on failure."""
        cached = self._cache.get(expression)
        if cached is not None:
            return cached
        if not isinstance(expression, str) or not expression.strip():
            raise CelCompileError("compilation failed: empty expression", str(expression))
        # cel.bind / optMap / optFlatMap without cel-cpp's stale bind slot (see stockade.cel.rewrite)
        source = prepare_source(expression, self.libraries)
        try:
            program = self._env.compile(source)
            return_type = program.return_type().name()
            optional = return_type.startswith("optional_type") and self._optional_wrapping
            if optional:
                # A top-level optional cannot cross into Python; like a JSON null, absence becomes None.
                program = self._env.compile(f"({source}).orValue(dyn(null))")
        except Exception as error:  # noqa: BLE001 - backend raises bare RuntimeError
            raise _compile_error(expression, source, str(error)) from error
        compiled = CelProgram(expression, program, self._time_limit, optional)
        if len(self._cache) < 10_000:
            self._cache[expression] = compiled
        return compiled

    def prepare(self, expression: str) -> str:
        """The source :meth:`compile` hands the backend for ``expression`` (see :func:`prepare_source`)."""
        return prepare_source(expression, self.libraries)

    def compile_prepared(self, source: str, expression: str) -> CelProgram:
        """Compile ``source`` exactly as given: text built from :meth:`prepare` output, which must not be rewritten
        again.  ``expression`` names the program in errors and ``repr``; no optional wrapping (a caller building
        such text decides its result type)."""
        cached = self._prepared_cache.get(source)
        if cached is not None:
            return cached
        try:
            program = self._env.compile(source)
        except Exception as error:  # noqa: BLE001 - backend raises bare RuntimeError
            raise _compile_error(expression, source, str(error)) from error
        compiled = CelProgram(expression, program, self._time_limit)
        if len(self._prepared_cache) < 10_000:
            self._prepared_cache[source] = compiled
        return compiled

    def evaluate(self, expression: str, values: Mapping[str, Any]) -> Any:
        """Convenience for tests and one-off checks: compile (cached), build an activation, evaluate."""
        return self.compile(expression).evaluate(CelActivation(values))

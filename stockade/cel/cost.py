"""Static worst-case cost estimation of CEL expressions, in the spirit of Kubernetes' CEL cost estimator.

cel-expr-python exposes neither the parsed AST nor a cost API, so this module parses expressions itself (on the
tokenizer of :mod:`stockade.cel.rewrite`) and walks the tree once, like cel-go's ``checker/cost.go``:

* every value has a worst-case *size* (characters of a string, elements plus content of a list or map);
  request data (``object``, ``oldObject``, ``request``, ...) is bounded by the maximum request size (3 MiB);
* traversing or building a string/list costs in proportion to its size (0.1 per character, like Kubernetes);
* a comprehension costs its body once per iteration; nested comprehensions multiply.

Sizes and costs are linear forms over the request variables and the comprehension variables in scope.  That keeps
ordinary policies cheap without giving up the worst case: across the iterations of ``list.all(x, f(x))`` the
elements ``x`` add up to at most the size of ``list``, so the part of the body cost that is linear in the size of
``x`` is charged once for the whole list, while the rest is charged per iteration.  The number of iterations is
capped by cel-cpp's hard runtime limit of 10,000 comprehension iterations per evaluation, which bounds nested
comprehensions too.

The estimate is a bound for rejecting hostile policies at load time (a few nested ``s + s`` double a string to
gigabytes without a single iteration), not a prediction; expressions that cannot be parsed here are estimated as
unknown (0) and left to the compiler, which reports them.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from stockade.cel.rewrite import rewrite_struct_literals, tokenize
from stockade.errors import StockadeError

# Kubernetes' limits: StaticEstimatedCostLimit (CRD validation rules) and PerCallLimit (runtime, per expression).
STATIC_ESTIMATED_COST_LIMIT = 10_000_000
PER_CALL_COST_LIMIT = 1_000_000
# Kubernetes' default maximum request body; any string or list read from a request is at most this large.
MAX_REQUEST_BYTES = 3 * 1024 * 1024
# cel-cpp aborts an evaluation after this many comprehension iterations in total (nested ones included).
RUNTIME_ITERATION_BUDGET = 10_000

# cel-go's cost constants.
STRING_TRAVERSAL_COST_FACTOR = 0.1
REGEX_STRING_LENGTH_COST_FACTOR = 0.25
LIST_CREATE_BASE_COST = 10
MAP_CREATE_BASE_COST = 30
SELECT_AND_IDENT_COST = 1
COMMON_CALL_COST = 1

_CONSTANT = ""
# Cost terms for *reading* request data carry this prefix: reading the same request again on every iteration costs
# CPU (bounded at run time by the iteration budget) but allocates nothing, so a comprehension charges such a read
# once, not once per iteration.  Building values (concatenation, joins, results) is always charged per iteration.
_READ = "~"


class CelCostParseError(StockadeError, ValueError):
    """The estimator's parser does not understand the expression (the compiler decides whether it is valid)."""


# -- linear forms ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Form:
    """``constant + sum(coefficient * size(variable))`` with non-negative coefficients."""

    terms: Mapping[str, float] = field(default_factory=dict)

    @staticmethod
    def of(constant: float) -> Form:
        return Form({_CONSTANT: float(constant)}) if constant else Form()

    @staticmethod
    def variable(name: str) -> Form:
        return Form({name: 1.0})

    def __add__(self, other: Form) -> Form:
        terms = dict(self.terms)
        for key, value in other.terms.items():
            terms[key] = terms.get(key, 0.0) + value
        return Form(terms)

    def scale(self, factor: float) -> Form:
        if factor == 0:
            return Form()
        return Form({key: value * factor for key, value in self.terms.items()})

    def plus(self, constant: float) -> Form:
        return self + Form.of(constant)

    def maximum(self, other: Form) -> Form:
        """A componentwise maximum: an upper bound of both forms for every variable size."""
        keys = set(self.terms) | set(other.terms)
        return Form({key: max(self.terms.get(key, 0.0), other.terms.get(key, 0.0)) for key in keys})

    def as_read(self) -> Form:
        return Form({key if key == _CONSTANT or key.startswith(_READ) else _READ + key: value
                     for key, value in self.terms.items()})

    def without(self, name: str) -> tuple[float, Form]:
        terms = dict(self.terms)
        return terms.pop(name, 0.0), Form(terms)

    @property
    def is_constant(self) -> bool:
        return all(key == _CONSTANT for key in self.terms)

    def value(self) -> float:
        """The bound once every remaining variable is as large as a whole request."""
        return sum(coefficient * (1.0 if key == _CONSTANT else MAX_REQUEST_BYTES) for key, coefficient in self.terms.items())

    def times(self, other: Form) -> Form:
        """A product stays linear when one side is constant; otherwise it is evaluated (an upper bound)."""
        if other.is_constant:
            return self.scale(other.value())
        if self.is_constant:
            return other.scale(self.value())
        return Form.of(self.value() * other.value())


@dataclass(frozen=True)
class _Estimate:
    cost: Form
    size: Form  # characters of a string; elements plus their content for lists and maps
    count: Form  # elements of a list/map, characters of a string
    int_bound: Form | None = None  # an upper bound of an integer value, when known

    @staticmethod
    def scalar(cost: Form) -> _Estimate:
        return _Estimate(cost, Form.of(1), Form.of(1))


# -- parsing ---------------------------------------------------------------------------------------------------------

_TWO_CHAR_OPERATORS = frozenset({"||", "&&", "==", "!=", "<=", ">="})
_BINARY_PRECEDENCE = {"||": 1, "&&": 2, "==": 3, "!=": 3, "<": 3, "<=": 3, ">": 3, ">=": 3, "in": 3,
                      "+": 4, "-": 4, "*": 5, "/": 5, "%": 5}

Node = tuple[Any, ...]  # ("kind", ...) tuples; see _Parser


def _lex(expression: str) -> list[tuple[str, str]]:
    tokens = [(t.kind, t.text) for t in tokenize(expression) if t.kind not in ("space", "comment")]
    merged: list[tuple[str, str]] = []
    for kind, text in tokens:
        if merged and kind == "punct" and merged[-1][0] == "punct" and merged[-1][1] + text in _TWO_CHAR_OPERATORS:
            merged[-1] = ("punct", merged[-1][1] + text)
        else:
            merged.append((kind, text))
    return merged


def _quoted_body(text: str) -> str | None:
    """The characters between the quotes of a string literal token (escapes left as written)."""
    body = text.lstrip("rRbB")
    quote = 3 if body[:3] in ('"""', "'''") else 1
    return body[quote:-quote] if len(body) >= 2 * quote else None


def _string_length(text: str) -> int:
    return len(_quoted_body(text) or "")


def _literal_body(node: Node) -> str | None:
    """The body of a string literal node, or None for other nodes."""
    if node[0] != "literal" or len(node) < 4:
        return None
    return _quoted_body(str(node[3]))


def _anchored_pattern(node: Node) -> bool:
    """A literal regular expression that can only match at the start of the subject: it begins with ``^`` and has
    no alternation or flag group (``(?m)`` would let ``^`` match after every newline)."""
    body = _literal_body(node)
    return body is not None and body.startswith("^") and "|" not in body and "(?" not in body


def _group_references(node: Node) -> int | None:
    """How many capture-group references a literal replacement holds (``\\1``, ``$1``, ``${name}``), or None when
    the replacement is not a literal."""
    body = _literal_body(node)
    if body is None:
        return None
    return body.count("$") + sum(1 for index, char in enumerate(body[:-1]) if char == "\\" and body[index + 1] not in "\\'\"")


class _Parser:
    """A recursive-descent parser for the CEL grammar, producing small tuples; spacing is not checked."""

    def __init__(self, expression: str) -> None:
        self.tokens = _lex(expression)
        self.position = 0
        self.depth = 0

    def peek(self, offset: int = 0) -> tuple[str, str]:
        index = self.position + offset
        return self.tokens[index] if index < len(self.tokens) else ("end", "")

    def take(self, text: str | None = None) -> tuple[str, str]:
        token = self.peek()
        if token[0] == "end" or (text is not None and token[1] != text):
            raise CelCostParseError(f"expected {text or 'a token'}, found {token[1] or 'end of expression'}")
        self.position += 1
        return token

    def accept(self, text: str) -> bool:
        if self.peek()[1] == text and self.peek()[0] != "string":
            self.position += 1
            return True
        return False

    def parse(self) -> Node:
        node = self.expression()
        if self.peek()[0] != "end":
            raise CelCostParseError(f"unexpected {self.peek()[1]!r}")
        return node

    def expression(self) -> Node:
        self.depth += 1
        if self.depth > 250:
            raise CelCostParseError("expression nested too deeply")
        condition = self.binary(1)
        if self.accept("?"):
            then = self.binary(1)
            self.take(":")
            otherwise = self.expression()
            condition = ("cond", condition, then, otherwise)
        self.depth -= 1
        return condition

    def binary(self, level: int) -> Node:
        left = self.unary()
        while True:
            kind, text = self.peek()
            precedence = _BINARY_PRECEDENCE.get(text) if kind in ("punct", "ident") else None
            if precedence is None or precedence < level:
                return left
            self.position += 1
            right = self.binary(precedence + 1)
            left = ("op", text, [left, right])

    def unary(self) -> Node:
        if self.accept("!") or self.accept("-"):
            return ("op", "unary", [self.unary()])
        return self.member(self.primary())

    def arguments(self, closing: str) -> list[Node]:
        items: list[Node] = []
        while not self.accept(closing):
            self.accept("?")  # optional list element / map entry
            items.append(self.expression())
            if not self.accept(","):
                self.take(closing)
                break
        return items

    def member(self, node: Node) -> Node:
        while True:
            if self.accept("."):
                self.accept("?")
                kind, name = self.take()
                if kind != "ident":
                    raise CelCostParseError(f"expected a field name, found {name!r}")
                if self.accept("("):
                    node = ("call", name, node, self.arguments(")"))
                else:
                    node = ("select", node, name)
            elif self.accept("["):
                self.accept("?")
                index = self.expression()
                self.take("]")
                node = ("index", node, index)
            else:
                return node

    def primary(self) -> Node:
        kind, text = self.take()
        if kind == "string":
            return ("literal", _string_length(text), None, text)
        if kind == "number":
            digits = text.rstrip("uU")
            try:
                value: int | None = int(digits, 16) if digits.lower().startswith("0x") else int(digits)
            except ValueError:
                value = None
            return ("literal", 1, value)
        if text == ".":
            return self.primary()
        if kind == "ident":
            if self.accept("("):
                return ("call", text, None, self.arguments(")"))
            return ("ident", text)
        if text == "(":
            inner = self.expression()
            self.take(")")
            return inner
        if text == "[":
            return ("list", self.arguments("]"))
        if text == "{":
            entries: list[tuple[Node, Node]] = []
            while not self.accept("}"):
                self.accept("?")
                key = self.expression()
                self.take(":")
                entries.append((key, self.expression()))
                if not self.accept(","):
                    self.take("}")
                    break
            return ("map", entries)
        raise CelCostParseError(f"unexpected {text!r}")


# -- estimation ------------------------------------------------------------------------------------------------------

# Macros: name -> number of leading identifier arguments (bound variables).
_ITERATION_MACROS = {"all", "exists", "exists_one", "existsOne", "map", "filter", "transformList", "transformMap",
                     "transformMapEntry", "sortBy"}
_BOOLEAN_MACROS = {"all", "exists", "exists_one", "existsOne"}
# Functions whose cost and result do not depend on the size of their arguments.
_CONSTANT_FUNCTIONS = {"size", "has", "int", "uint", "double", "bool", "type", "duration", "timestamp",
                       "hasValue", "isSorted", "getHours", "getMinutes", "getSeconds", "getDayOfWeek",
                       "getDayOfMonth", "getDayOfYear", "getMonth", "getFullYear", "getMilliseconds", "none",
                       "abs", "sign", "ceil", "floor", "round", "trunc", "isNaN", "isInf", "isFinite"}
# Functions returning (part of) their first argument unchanged.
_PASSTHROUGH_FUNCTIONS = {"dyn", "orValue", "value", "of", "ofNonZeroValue", "or"}
# Built-in (cel-cpp) functions that only read their arguments and return a scalar.
_SCALAR_RESULT_FUNCTIONS = {"verifyImageSignatures", "verifyAttestationSignatures", "contains", "startsWith", "endsWith", "indexOf", "lastIndexOf", "exists", "all",
                            "isURL", "isIP", "isCIDR", "isQuantity", "isSemver", "compareTo", "greatest", "least"}
_SCALAR_TYPES = frozenset({"bool", "int", "uint", "double", "null", "timestamp", "duration"})
_REGEX_FUNCTIONS = {"matches", "find", "findAll", "replaceAll", "split"}


class _Estimator:
    def __init__(self, inputs: Iterable[str], variable_sizes: Mapping[str, Form]) -> None:
        self.inputs = frozenset(inputs)
        self.variable_sizes = variable_sizes
        self.scopes: list[dict[str, _Estimate]] = []
        self.iterations = 1.0  # product of the iteration counts of the enclosing comprehensions
        self.counter = 0

    def is_request_term(self, key: str) -> bool:
        return key.removeprefix(_READ) in self.inputs

    def lookup(self, name: str) -> _Estimate | None:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        if name in self.inputs:
            bound = Form.variable(name)
            return _Estimate(Form.of(SELECT_AND_IDENT_COST), bound, bound)
        return None

    def estimate(self, node: Node) -> _Estimate:
        kind = node[0]
        if kind == "literal":
            size = Form.of(node[1])
            return _Estimate(Form(), size, size, Form.of(node[2]) if node[2] is not None else None)
        if kind == "ident":
            found = self.lookup(node[1])
            return found if found is not None else _Estimate.scalar(Form.of(SELECT_AND_IDENT_COST))
        if kind == "select":
            operand = node[1]
            if operand == ("ident", "variables") and node[2] in self.variable_sizes and self.lookup("variables"):
                size = self.variable_sizes[node[2]]
                return _Estimate(Form.of(2 * SELECT_AND_IDENT_COST), size, size)
            inner = self.estimate(operand)
            return _Estimate(inner.cost.plus(SELECT_AND_IDENT_COST), inner.size, inner.size)
        if kind == "index":
            inner, index = self.estimate(node[1]), self.estimate(node[2])
            return _Estimate(inner.cost + index.cost.plus(SELECT_AND_IDENT_COST), inner.size, inner.size)
        if kind == "list":
            items = [self.estimate(item) for item in node[1]]
            cost, size = Form.of(LIST_CREATE_BASE_COST), Form.of(len(items))
            for item in items:
                cost, size = cost + item.cost, size + item.size
            return _Estimate(cost, size, Form.of(len(items)))
        if kind == "map":
            cost, size = Form.of(MAP_CREATE_BASE_COST), Form.of(len(node[1]))
            for key, value in node[1]:
                for part in (self.estimate(key), self.estimate(value)):
                    cost, size = cost + part.cost, size + part.size
            return _Estimate(cost, size, Form.of(len(node[1])))
        if kind == "cond":
            condition, then, otherwise = (self.estimate(part) for part in node[1:])
            return _Estimate(condition.cost + then.cost.maximum(otherwise.cost), then.size.maximum(otherwise.size),
                             then.count.maximum(otherwise.count))
        if kind == "op":
            return self.operator(node[1], [self.estimate(argument) for argument in node[2]])
        if kind == "call":
            return self.call(node[1], node[2], node[3])
        raise CelCostParseError(f"unknown node {kind}")

    def operator(self, operator: str, arguments: list[_Estimate]) -> _Estimate:
        cost = Form.of(COMMON_CALL_COST)
        for argument in arguments:
            cost = cost + argument.cost
        if operator == "+":
            left, right = arguments
            size = left.size + right.size
            return _Estimate(cost + size.scale(STRING_TRAVERSAL_COST_FACTOR), size, left.count + right.count)
        if operator in ("==", "!=", "<", "<=", ">", ">="):
            left, right = arguments
            smaller = left.size if left.size.value() <= right.size.value() else right.size
            return _Estimate.scalar(cost + smaller.scale(STRING_TRAVERSAL_COST_FACTOR).as_read())
        if operator == "in":
            reads = arguments[1].count + arguments[0].size.scale(STRING_TRAVERSAL_COST_FACTOR)
            return _Estimate.scalar(cost + reads.as_read())
        return _Estimate.scalar(cost)

    def bound_names(self, arguments: list[Node], count: int) -> list[str] | None:
        names = [argument[1] for argument in arguments[:count] if argument[0] == "ident"]
        return names if len(names) == count else None

    def call(self, name: str, receiver: Node | None, arguments: list[Node]) -> _Estimate:
        # Namespaced global functions (lists.range, math.greatest, base64.encode, optional.of): the receiver is a
        # namespace, not a value.
        if receiver is not None and receiver[0] == "ident" and self.lookup(receiver[1]) is None:
            name, receiver = f"{receiver[1]}.{name}", None
        if receiver is None and name == "cel.bind" and len(arguments) == 3 and arguments[0][0] == "ident":
            initial = self.estimate(arguments[1])
            self.scopes.append({arguments[0][1]: _Estimate(Form(), initial.size, initial.count, initial.int_bound)})
            try:
                body = self.estimate(arguments[2])
            finally:
                self.scopes.pop()
            return _Estimate(initial.cost + body.cost, body.size, body.count, body.int_bound)
        if receiver is not None and name in _ITERATION_MACROS | {"optMap", "optFlatMap"}:
            bound_count = 2 if (name in _ITERATION_MACROS and len(arguments) >= 3 and name not in ("map", "filter")
                                or name.startswith("transform") and len(arguments) >= 3) else 1
            names = self.bound_names(arguments, bound_count)
            if names is not None and len(arguments) > bound_count:
                return self.comprehension(name, self.estimate(receiver), names, arguments[bound_count:])
        if receiver is None and name == "has":
            return _Estimate.scalar(Form.of(SELECT_AND_IDENT_COST))
        values = ([self.estimate(receiver)] if receiver is not None else []) + [self.estimate(a) for a in arguments]
        if receiver is None and name == "regex.replace" and len(arguments) == 3 and _anchored_pattern(arguments[1]):
            return self.anchored_replace(values, arguments[2])
        return self.function(name, values)

    def anchored_replace(self, values: list[_Estimate], replacement: Node) -> _Estimate:
        """``regex.replace(s, "^...", r)``: a pattern anchored at the start matches at most once, so the result is
        the subject plus one replacement, whose group references each expand to at most the subject."""
        subject, pattern, with_text = values
        references = _group_references(replacement)
        added = with_text.size + subject.size.scale(references) if references is not None else with_text.size + subject.size.times(with_text.size)
        size = subject.size + added
        regex_cost = pattern.size.scale(REGEX_STRING_LENGTH_COST_FACTOR).plus(1)
        cost = Form.of(COMMON_CALL_COST) + subject.cost + pattern.cost + with_text.cost
        cost = cost + subject.size.scale(STRING_TRAVERSAL_COST_FACTOR).plus(1).times(regex_cost).as_read()
        return _Estimate(cost + size.scale(STRING_TRAVERSAL_COST_FACTOR), size, size)

    def comprehension(self, macro: str, source: _Estimate, names: list[str], bodies: list[Node]) -> _Estimate:
        """``source.macro(names..., bodies...)``: the bodies run once per element of ``source``."""
        if macro in ("optMap", "optFlatMap"):
            iterations = 1.0
        else:
            iterations = max(1.0, min(source.count.value(), RUNTIME_ITERATION_BUDGET / self.iterations))
        self.counter += 1
        element_key = f"#{self.counter}"
        scope = {names[-1]: _Estimate(Form(), Form.variable(element_key), Form.variable(element_key))}
        if len(names) == 2:  # index or key: a map key is an element's part, an index is a number
            scope[names[0]] = _Estimate(Form(), Form.variable(element_key), Form.variable(element_key))
        self.scopes.append(scope)
        outer_iterations = self.iterations
        self.iterations *= iterations
        try:
            estimates = [self.estimate(body) for body in bodies]
        finally:
            self.iterations = outer_iterations
            self.scopes.pop()

        def over_all_iterations(form: Form, *, cost: bool) -> Form:
            # The elements add up to the source's size.  A cost over request data that does not depend on the
            # element is paid once (the same bytes again: CPU, bounded at run time by the iteration budget); a size
            # and everything else grows with every iteration.
            per_element, rest = form.without(element_key)
            per_element_read, rest = rest.without(_READ + element_key)
            once = Form({k: v for k, v in rest.terms.items() if cost and self.is_request_term(k)})
            repeated = Form({k: v for k, v in rest.terms.items() if not (cost and self.is_request_term(k))})
            return (once + repeated.scale(iterations) + source.size.scale(per_element)
                    + source.size.scale(per_element_read).as_read())

        body_cost = Form.of(COMMON_CALL_COST)
        for estimate in estimates:
            body_cost = body_cost + estimate.cost
        cost = source.cost + over_all_iterations(body_cost, cost=True)
        result = estimates[-1]
        if macro in _BOOLEAN_MACROS:
            return _Estimate.scalar(cost)
        if macro == "filter":
            return _Estimate(cost, source.size, source.count)
        if macro == "sortBy":
            return _Estimate(cost + source.count.scale(math.log2(max(2.0, iterations))), source.size, source.count)
        if macro in ("optMap", "optFlatMap"):
            per_element, rest = result.size.without(element_key)
            return _Estimate(cost, rest + source.size.scale(per_element), result.count)
        # map/transform*: the results of all iterations are kept, so building them is paid in full.
        count = Form.of(min(source.count.value(), RUNTIME_ITERATION_BUDGET))
        size = over_all_iterations(result.size, cost=False) + count
        return _Estimate(cost + size.scale(STRING_TRAVERSAL_COST_FACTOR), size, count)

    def function(self, name: str, values: list[_Estimate]) -> _Estimate:
        cost = Form.of(COMMON_CALL_COST)
        for value in values:
            cost = cost + value.cost
        base = name.rsplit(".", 1)[-1]
        if base == "size" and values:
            return _Estimate(cost, Form.of(1), Form.of(1), values[-1].count)
        if base in _CONSTANT_FUNCTIONS:
            return _Estimate.scalar(cost)
        if base in _PASSTHROUGH_FUNCTIONS and values:
            size = values[0].size
            count = values[0].count
            for other in values[1:]:
                size, count = size.maximum(other.size), count.maximum(other.count)
            return _Estimate(cost, size, count, values[0].int_bound)
        total = Form()
        for value in values:
            total = total + value.size
        traversal = total.scale(STRING_TRAVERSAL_COST_FACTOR)
        if name in ("lists.range", "range") and values:
            bound = values[0].int_bound
            count = bound if bound is not None else Form.of(math.inf)
            return _Estimate(cost + count, count.scale(2), count)
        if base in _REGEX_FUNCTIONS and len(values) >= 2:
            subject, pattern = values[0], values[1]
            regex_cost = pattern.size.scale(REGEX_STRING_LENGTH_COST_FACTOR).plus(1)
            cost = cost + subject.size.scale(STRING_TRAVERSAL_COST_FACTOR).plus(1).times(regex_cost).as_read()
            if base == "replaceAll" and len(values) >= 3:
                size = subject.size + subject.size.plus(1).times(values[2].size)
                return _Estimate(cost + size.scale(STRING_TRAVERSAL_COST_FACTOR), size, size)
            if base in ("matches", "find"):
                return _Estimate.scalar(cost) if base == "matches" else _Estimate(cost, subject.size, subject.size)
            return _Estimate(cost + subject.size.scale(STRING_TRAVERSAL_COST_FACTOR), subject.size, subject.size)
        if base == "replace" and len(values) >= 3:
            # Every position may be replaced (an empty pattern matches between all characters).
            subject, replacement = values[0], values[2]
            size = subject.size + subject.size.plus(1).times(replacement.size)
            return _Estimate(cost + traversal + size.scale(STRING_TRAVERSAL_COST_FACTOR), size, size)
        if base == "join" and values:
            items = values[0]
            separator = values[1].size if len(values) > 1 else Form()
            size = items.size + items.count.times(separator)
            return _Estimate(cost + size.scale(STRING_TRAVERSAL_COST_FACTOR), size, size)
        if base in _SCALAR_RESULT_FUNCTIONS or name in _scalar_library_functions():
            return _Estimate.scalar(cost + traversal.as_read())
        # Anything else (string functions, encoders, library calls): linear in what it reads, and its result, no
        # larger than its inputs together, is built.
        return _Estimate(cost + traversal, total, total)


@functools.cache
def _scalar_library_functions() -> frozenset[str]:
    """Names of the Kubernetes/Kyverno library functions whose every overload returns a scalar."""
    from stockade.cel.libs import LIBRARY_BUILDERS
    from stockade.cel.providers import provider_library

    names: set[str] = set()
    for library in [builder() for builder in LIBRARY_BUILDERS.values()] + [provider_library()]:
        for function in library.functions:
            if all(overload.result in _SCALAR_TYPES for overload in function.overloads):
                names.add(function.name)
    return frozenset(names)


def estimate_cost(
    expression: str,
    inputs: Iterable[str],
    variable_sizes: Mapping[str, Form] | None = None,
) -> tuple[float, Form]:
    """(worst-case cost, worst-case result size) of ``expression``; ``inputs`` are the request-bound variables.

    ``variable_sizes`` bounds policy variables (``variables.name``) by their own expressions' result size; any
    other ``variables.x`` counts as request data.  Raises :class:`CelCostParseError` when the text does not parse.
    """
    tree = _Parser(rewrite_struct_literals(expression)).parse()
    estimator = _Estimator(inputs, variable_sizes or {})
    result = estimator.estimate(tree)
    return result.cost.value(), result.size


def format_budget_error(estimate: float, limit: float) -> str:
    """Kubernetes' wording for a static estimate over the limit."""
    factor = estimate / limit
    shown = "more than 100x" if factor > 100 else f"{factor:.2f}x" if factor < 10 else f"{factor:.1f}x"
    return (f"estimated CEL expression cost exceeds budget by factor of {shown} "
            f"(estimated cost {_human(estimate)}, limit {limit:,.0f}); the expression can build values far larger "
            f"than any request (e.g. repeated string concatenation or nested comprehensions)")


def _human(number: float) -> str:
    if math.isinf(number):
        return "unbounded"
    return f"{number:,.0f}"

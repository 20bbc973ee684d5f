"""Static cost estimates (stockade.cel.cost) and the runtime cost-limit error."""

from __future__ import annotations

import pytest

from stockade.cel import CelCostLimitError, CelEnvironment, CelEvalError
from stockade.cel.cost import (
    MAX_REQUEST_BYTES,
    STATIC_ESTIMATED_COST_LIMIT,
    CelCostParseError,
    estimate_cost,
    format_budget_error,
)

INPUTS = ("object", "oldObject", "request", "params", "namespaceObject", "variables", "exceptions")


def doubling_binds(levels: int, seed: str) -> str:
    """``cel.bind(s0, seed, cel.bind(s1, s0 + s0, ...))``: a string 2**levels times the seed, no iteration at all."""
    body = f"s{levels}.size() > 0"
    for level in range(levels, 0, -1):
        body = f"cel.bind(s{level}, s{level - 1} + s{level - 1}, {body})"
    return f"cel.bind(s0, {seed}, {body})"


NESTED_MAP_DOUBLING = (
    "[0,1,2,3,4,5,6,7,8,9].map(a, [0,1,2,3,4,5,6,7,8,9].map(b, [0,1,2,3,4,5,6,7,8,9].map(c, "
    "object.metadata.name + object.metadata.name + object.metadata.name + object.metadata.name))).size() > 0"
)

SIXTEEN = "[" + ", ".join(str(i) for i in range(16)) + "]"


def sixteenfold_binds(levels: int) -> str:
    """Each level binds the previous string joined sixteen times: 16**levels copies in 16 iterations per level."""
    body = f"size(s{levels}) > 0"
    for level in range(levels, 0, -1):
        previous = f"s{level - 1}" if level > 1 else "'xxxxxxxx'"
        body = f"cel.bind(s{level}, {SIXTEEN}.map(i, {previous}).join(), {body})"
    return body


def sixteenfold_nested_maps(levels: int) -> str:
    """The same string built by nesting the maps: 16**levels iterations, so cel-cpp's budget stops it early."""
    expression = "'xxxxxxxx'"
    for level in range(levels):
        expression = f"{SIXTEEN}.map(i{level}, {expression}).join()"
    return f"size({expression}) > 0"


ORDINARY = [
    "object.spec.replicas <= 5",
    "has(object.metadata.labels) && 'app' in object.metadata.labels",
    "object.spec.containers.all(c, c.image.matches('^[a-z./-]+:[0-9.]+$'))",
    "object.spec.containers.all(c, !has(c.securityContext) || c.securityContext.?privileged.orValue(false) == false)",
    "object.spec.containers.all(c, c.ports.all(p, p.containerPort > 1024 && c.name.startsWith('app-')))",
    "object.spec.containers.map(c, c.image.split(':')[0]).all(i, i in params.allowed)",
    "'image ' + object.spec.containers[0].image + ' is not allowed in ' + namespaceObject.metadata.name",
    "Object{spec: Object.spec{replicas: 3}}",
    "[JSONPatch{op: 'add', path: '/metadata/labels/x', value: 'y'}]",
    "object.spec.containers.exists(c, c.name == 'x') ? 'yes' : string(object.metadata.?name.orValue(''))",
]


@pytest.mark.parametrize("expression", ORDINARY)
def test_ordinary_expressions_estimate_under_the_limit(expression: str) -> None:
    cost, _ = estimate_cost(expression, INPUTS)
    assert 0 < cost < STATIC_ESTIMATED_COST_LIMIT


@pytest.mark.parametrize("expression", [doubling_binds(30, "'0123456789'"), doubling_binds(12, "object.metadata.name"),
                                        NESTED_MAP_DOUBLING, sixteenfold_binds(7), sixteenfold_binds(6)])
def test_expressions_building_huge_values_estimate_over_the_limit(expression: str) -> None:
    cost, _ = estimate_cost(expression, INPUTS)
    assert cost > STATIC_ESTIMATED_COST_LIMIT


def test_string_size_follows_concatenation() -> None:
    _, size = estimate_cost("object.metadata.name + object.metadata.name + 'x'", INPUTS)
    assert size.value() == 2 * MAX_REQUEST_BYTES + 1


def test_elements_of_a_comprehension_share_the_size_of_their_list() -> None:
    """Reading each element once costs about as much as reading the list once, not once per iteration."""
    once, _ = estimate_cost("object.spec.containers[0].image.startsWith('a')", INPUTS)
    per_element, _ = estimate_cost("object.spec.containers.all(c, c.image.startsWith('a'))", INPUTS)
    assert per_element < once + 100_000
    mapped, _ = estimate_cost("object.spec.containers.map(c, object.metadata.name + 'x').size() > 0", INPUTS)
    assert mapped > STATIC_ESTIMATED_COST_LIMIT  # every iteration builds a new string of the whole name


def test_policy_variables_are_bounded_by_their_own_estimates() -> None:
    _, small = estimate_cost("['a', 'b']", INPUTS)
    cost_known, _ = estimate_cost("object.spec.containers.all(c, c.name + variables.suffix != '')", INPUTS, {"suffix": small})
    cost_unknown, _ = estimate_cost("object.spec.containers.all(c, c.name + variables.suffix != '')", INPUTS)
    assert cost_known < cost_unknown


def test_lists_range_counts_its_argument() -> None:
    small, _ = estimate_cost("lists.range(10).map(i, 'x').join().size() > 0", INPUTS)
    unbounded, _ = estimate_cost("lists.range(object.spec.replicas).size() > 0", INPUTS)
    assert small < 1_000 and unbounded > STATIC_ESTIMATED_COST_LIMIT


def test_unparseable_text_raises_a_typed_error() -> None:
    with pytest.raises(CelCostParseError):
        estimate_cost("object.spec.(", INPUTS)


def test_budget_message_uses_kubernetes_wording() -> None:
    message = format_budget_error(25_000_000, STATIC_ESTIMATED_COST_LIMIT)
    assert "estimated CEL expression cost exceeds budget by factor of 2.50x" in message
    assert "25,000,000" in message and "10,000,000" in message


def test_runtime_iteration_budget_is_a_typed_cost_limit_error() -> None:
    numbers = "[" + ",".join(str(n) for n in range(200)) + "]"
    program = CelEnvironment(["object"]).compile(f"{numbers}.all(x, {numbers}.all(y, x + y >= 0))")
    from stockade.cel import CelActivation

    with pytest.raises(CelCostLimitError) as caught:
        program.evaluate(CelActivation({"object": {}}))
    assert isinstance(caught.value, CelEvalError)
    assert caught.value.message.startswith("operation cancelled: actual cost limit exceeded")


def test_runtime_time_limit_is_a_typed_cost_limit_error() -> None:
    numbers = "[" + ",".join(str(n) for n in range(90)) + "]"
    environment = CelEnvironment(["object"], time_limit_seconds=0.0)
    with pytest.raises(CelCostLimitError, match="operation cancelled: actual cost limit exceeded"):
        environment.evaluate(f"{numbers}.map(x, {numbers}.map(y, string(x) + string(y))).size() > 0", {"object": {}})


def test_nested_maps_are_bounded_by_the_runtime_iteration_budget_not_the_static_estimate() -> None:
    """16**7 copies through nested maps would be 2 GiB, but need 16**7 iterations: the estimate is capped by the
    runtime budget (honestly under the limit) and the evaluation stops at the budget, long before the memory grows."""
    expression = sixteenfold_nested_maps(7)
    cost, _ = estimate_cost(expression, INPUTS)
    assert cost < STATIC_ESTIMATED_COST_LIMIT
    with pytest.raises(CelCostLimitError, match="iteration budget"):
        CelEnvironment(["object"]).evaluate(expression, {"object": {}})


REWRITE_IMAGES = """Object{spec: Object.spec{containers: object.spec.containers.map(c, Object.spec.containers{
  name: c.name, image: regex.replace(c.image, %s, %s)})}}"""


def test_a_pattern_anchored_at_the_start_replaces_at_most_once() -> None:
    """Kyverno's e2e mpol-cel-regex-replace: rewriting every image's registry is an ordinary policy.  An anchored
    pattern matches once, so the result grows by one replacement (its group reference at most the subject); an
    unanchored one may match at every position and stays over the limit."""
    anchored = REWRITE_IMAGES % ('"^docker\\\\.io/(.*)"', "r'myregistry.io/\\1'")
    assert estimate_cost(anchored, INPUTS)[0] < STATIC_ESTIMATED_COST_LIMIT
    for pattern in ('"docker"', '"^a|b"', '"(?m)^x"'):
        unanchored = REWRITE_IMAGES % (pattern, "r'myregistry.io/\\1'")
        assert estimate_cost(unanchored, INPUTS)[0] > estimate_cost(anchored, INPUTS)[0]

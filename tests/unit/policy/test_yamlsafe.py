"""The one YAML loader: alias expansion, recursive anchors and nesting depth are bounded; ordinary YAML is unchanged."""

from __future__ import annotations

import yaml
import pytest

from stockade import yamlsafe
from stockade.policy.loader import LoadError, documents_from_text

BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{name}: &{name} [{', '.join([f'*{previous}'] * 9)}]\n" for previous, name in zip("abcdefgh", "bcdefghi")
)


def test_alias_bomb_is_refused_with_the_document_index() -> None:
    with pytest.raises(yamlsafe.YamlAliasError, match="document 2: aliases expand to more than") as caught:
        yamlsafe.load_all("a: 1\n---\n" + BOMB)
    assert caught.value.index == 1


@pytest.mark.parametrize("loader", [yamlsafe.SAFE_LOADER, yaml.SafeLoader])
def test_recursive_anchor_is_refused(loader: type) -> None:
    with pytest.raises(yamlsafe.YamlAliasError, match="anchor refers to itself"):
        yamlsafe.load("a: &a {b: *a}\n", loader)


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000, "k:\n" + "".join(" " * i + "k:\n" for i in range(1, 700))])
def test_deep_nesting_is_refused_without_crashing(text: str) -> None:
    with pytest.raises(yamlsafe.YamlAliasError, match="nest deeper than 512 levels"):
        yamlsafe.load(text)


def test_ordinary_aliases_and_merge_keys_still_load() -> None:
    text = "base: &base {a: 1}\nuse: *base\nmerged: {<<: *base, b: 2}\n---\n---\n[1]\n"
    assert yamlsafe.load_all(text) == [{"base": {"a": 1}, "use": {"a": 1}, "merged": {"a": 1, "b": 2}}, None, [1]]
    wide = "x: &x [" + ", ".join(["1"] * 5000) + "]\ny: [*x]\n"
    assert len(yamlsafe.load(wide)["y"][0]) == 5000


def test_policy_loader_names_file_and_document() -> None:
    with pytest.raises(LoadError, match=r"^policies/p\.yaml \(document 1\): aliases expand"):
        documents_from_text(BOMB, "policies/p.yaml")


def test_a_syntax_error_in_bracket_heavy_text_is_reported_as_itself() -> None:
    text = "k: " + "[x, " * 300 + '{a: "unterminated'
    with pytest.raises(yaml.YAMLError) as caught:
        yamlsafe.load(text)
    assert not isinstance(caught.value, yamlsafe.YamlAliasError)
    assert "quoted scalar" in str(caught.value)

"""`$imagepolicy` marker rewriting: exact line splices, Flux marker forms, errors, files."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from stockade.reflector.markers import Change, MarkerError, update_path, update_text

DIGEST = "sha256:6745aaad46d795c9836632e1fb62f24b7e7f4c843144da8e47a5465c411a14be"
POLICIES: dict[tuple[str, str], dict[str, object]] = {
    ("automation-ns", "policy"): {"image": "index.repo.fake/updated", "tag": "v1.0.1", "digest": None},
    ("automation-ns", "with-digest"): {"image": "image", "tag": "v1.0.0", "digest": DIGEST},
    ("automation-ns", "numeric-tag"): {"image": "app", "tag": "1.10", "digest": ""},
}


def resolve(namespace: str, name: str) -> dict[str, object] | None:
    return POLICIES.get((namespace, name))


def rewrite(text: str) -> tuple[str, list[Change]]:
    return update_text(textwrap.dedent(text), resolve, "deploy.yaml")


def changed_lines(before: str, after: str) -> list[tuple[str, str]]:
    old, new = before.splitlines(), after.splitlines()
    assert len(old) == len(new)
    return [(a, b) for a, b in zip(old, new) if a != b]


def test_full_setter_replaces_only_the_marked_scalar() -> None:
    source = textwrap.dedent(
        """\
        apiVersion: batch/v1
        kind: CronJob
        metadata:
          name: foo   # keep this comment
          namespace: bar
        spec:
          schedule: "*/1 * * * *"
          jobTemplate:
            spec:
              template:
                spec:
                  containers:
                  - name: c
                    image: image:v1.0.0 # {"$imagepolicy": "automation-ns:policy"}
                  - name: d
                    image: image:v1.0.0 # {"$imagepolicy": "automation-ns:unknown"}
                  - name: e
                    image: image:v1.0.0
        """
    )
    result, changes = update_text(source, resolve, "cron.yaml")
    assert changed_lines(source, result) == [
        (
            '            image: image:v1.0.0 # {"$imagepolicy": "automation-ns:policy"}',
            '            image: index.repo.fake/updated:v1.0.1 # {"$imagepolicy": "automation-ns:policy"}',
        )
    ]
    assert changes == [Change("cron.yaml", 14, "image:v1.0.0", "index.repo.fake/updated:v1.0.1", "automation-ns:policy")]


def test_kustomization_name_tag_digest_and_full_with_digest() -> None:
    source = textwrap.dedent(
        """\
        # not a working kustomization
        images:
          - name: container
            newName: replaced # {"$imagepolicy": "automation-ns:policy:name"}
            newTag: v1 # {"$imagepolicy": "automation-ns:policy:tag"}
            newDigest: sha256:1234567890abcdef # {"$imagepolicy": "automation-ns:with-digest:digest"}
        patches:
          - patch: |
              - op: replace
                path: /spec/template/spec/containers/0/volumeMounts
            target:
              kind: Deployment
              image: image # {"$imagepolicy": "automation-ns:with-digest"}
        """
    )
    result, changes = update_text(source, resolve, "kustomization.yml")
    assert [(c.line, c.new) for c in changes] == [
        (4, "index.repo.fake/updated"),
        (5, "v1.0.1"),
        (6, DIGEST),
        (13, f"image:v1.0.0@{DIGEST}"),
    ]
    assert f"      image: image:v1.0.0@{DIGEST} # " in result
    assert "  - patch: |\n      - op: replace\n        path: /spec" in result  # block scalar untouched


def test_second_run_is_a_no_op() -> None:
    source = 'image: a:1 # {"$imagepolicy": "automation-ns:with-digest"}\ntag: "x" # {"$imagepolicy": "automation-ns:policy:tag"}\n'
    first, changes = update_text(source, resolve)
    assert len(changes) == 2
    second, again = update_text(first, resolve)
    assert second == first and again == []


def test_quoting_style_is_kept() -> None:
    result, _ = rewrite(
        """\
        a: "old" # {"$imagepolicy": "automation-ns:policy:tag"}
        b: 'old' # {"$imagepolicy": "automation-ns:policy:tag"}
        c: old # {"$imagepolicy": "automation-ns:policy:tag"}
        """
    )
    assert result.splitlines()[:3] == [
        'a: "v1.0.1" # {"$imagepolicy": "automation-ns:policy:tag"}',
        "b: 'v1.0.1' # {\"$imagepolicy\": \"automation-ns:policy:tag\"}",
        'c: v1.0.1 # {"$imagepolicy": "automation-ns:policy:tag"}',
    ]


def test_plain_values_that_would_change_type_get_quoted() -> None:
    result, changes = rewrite('newTag: v1 # {"$imagepolicy": "automation-ns:numeric-tag:tag"}\n')
    assert result == 'newTag: "1.10" # {"$imagepolicy": "automation-ns:numeric-tag:tag"}\n'
    assert changes[0].new == "1.10"
    again, none = update_text(result, resolve)
    assert again == result and none == []


def test_digest_marker_without_reflected_digest_is_an_error_naming_file_and_line() -> None:
    source = 'a: 1\nnewDigest: sha256:aaa # {"$imagepolicy": "automation-ns:policy:digest"}\n'
    with pytest.raises(MarkerError, match=r"^kustomization\.yaml:2: .*automation-ns:policy:digest.*digest"):
        update_text(source, resolve, "kustomization.yaml")


def test_unknown_and_foreign_policies_are_left_alone() -> None:
    source = 'image: user:v1.0.0 # {"$imagepolicy": "other-namespace:policy"}\n'
    assert update_text(source, resolve) == (source, [])


@pytest.mark.parametrize("marker", ["justname", "ns:name:bogus", "ns:", ":name", "a:b:c:d", ""])
def test_malformed_marker_is_an_error(marker: str) -> None:
    source = f'x: 1\nimage: foo # {{"$imagepolicy": "{marker}"}}\n'
    with pytest.raises(MarkerError, match=r"^f\.yaml:2: malformed"):
        update_text(source, resolve, "f.yaml")


@pytest.mark.parametrize(
    "comment",
    ['# {"$imagepolicy": "automation-ns:policy"} trailing words', '# {"$imagepolicy": 1}', "# $imagepolicy",
     '# {"$imagepolicy": "automation-ns:policy"', '# {"other": "automation-ns:policy"}'],
)
def test_comments_that_are_not_json_markers_are_ignored(comment: str) -> None:
    source = f"image: foo:1 {comment}\n"
    assert update_text(source, resolve)[1] == []


def test_markers_in_lists_flow_and_multiple_documents() -> None:
    source = textwrap.dedent(
        """\
        ---
        images:
          - foo:1 # {"$imagepolicy": "automation-ns:policy"}
          - "bar:2"   # {"$imagepolicy": "automation-ns:policy:tag"}
        ---
        spec: {image: "a:1"} # {"$imagepolicy": "automation-ns:policy"}
        other:
          - image: x # {"$imagepolicy": "automation-ns:policy:name"}
        ...
        """
    )
    result, changes = update_text(source, resolve, "multi.yaml")
    assert [(c.line, c.old, c.new) for c in changes] == [
        (3, "foo:1", "index.repo.fake/updated:v1.0.1"),
        (4, "bar:2", "v1.0.1"),
        (8, "x", "index.repo.fake/updated"),
    ]
    assert '  - "v1.0.1"   # {' in result
    assert 'spec: {image: "a:1"}' in result  # comment after a flow collection belongs to the collection


def test_helm_values_style_file() -> None:
    source = textwrap.dedent(
        """\
        # values.yaml
        image:
          repository: ghcr.io/org/app # {"$imagepolicy": "automation-ns:with-digest:name"}
          tag: "v0.9.0" # {"$imagepolicy": "automation-ns:with-digest:tag"}
          digest: "" # {"$imagepolicy": "automation-ns:with-digest:digest"}
          pullPolicy: IfNotPresent
        """
    )
    result, changes = update_text(source, resolve, "values.yaml")
    assert len(changes) == 3
    assert '  repository: image # {' in result
    assert '  tag: "v1.0.0" # {' in result
    assert f'  digest: "{DIGEST}" # {{' in result
    assert result.endswith("  pullPolicy: IfNotPresent\n")


def test_empty_value_gets_filled_with_a_separating_space() -> None:
    result, changes = rewrite('newDigest: # {"$imagepolicy": "automation-ns:with-digest:digest"}\n')
    assert result == f'newDigest: {DIGEST} # {{"$imagepolicy": "automation-ns:with-digest:digest"}}\n'
    assert changes[0].old == ""


def test_anchor_and_alias_are_rewritten_once() -> None:
    source = 'a: &img foo:1 # {"$imagepolicy": "automation-ns:policy"}\nb: *img\n'
    result, changes = update_text(source, resolve)
    assert result == 'a: &img index.repo.fake/updated:v1.0.1 # {"$imagepolicy": "automation-ns:policy"}\nb: *img\n'
    assert len(changes) == 1


def test_head_comment_on_a_sequence_item() -> None:
    source = 'images:\n  # {"$imagepolicy": "automation-ns:policy"}\n  - foo:1\n  - foo:2\n'
    result, changes = update_text(source, resolve)
    assert result == 'images:\n  # {"$imagepolicy": "automation-ns:policy"}\n  - index.repo.fake/updated:v1.0.1\n  - foo:2\n'
    assert [c.line for c in changes] == [3]


def test_head_comment_above_a_mapping_key_is_not_a_marker() -> None:
    source = '# {"$imagepolicy": "automation-ns:policy"}\nimage: foo:1\n'
    assert update_text(source, resolve) == (source, [])


def test_crlf_line_endings_and_indentation_survive() -> None:
    source = 'kind: X\r\nspec:\r\n    image: foo:1   # {"$imagepolicy": "automation-ns:policy"}\r\n    other: 1\r\n'
    result, changes = update_text(source, resolve, "win.yaml")
    assert result == (
        'kind: X\r\nspec:\r\n    image: index.repo.fake/updated:v1.0.1   # {"$imagepolicy": "automation-ns:policy"}\r\n'
        "    other: 1\r\n"
    )
    assert changes[0].line == 3


def test_text_without_marker_token_is_not_parsed() -> None:
    broken = "key: [unclosed\n"
    assert update_text(broken, resolve) == (broken, [])


def test_unparsable_yaml_with_a_marker_is_an_error() -> None:
    source = 'image: foo # {"$imagepolicy": "automation-ns:policy"}\nbad: [unclosed\n'
    with pytest.raises(MarkerError, match=r"^bad\.yaml:\d+: cannot parse YAML"):
        update_text(source, resolve, "bad.yaml")


# --- update_path -----------------------------------------------------------------------------


def make_tree(root: Path) -> None:
    (root / "apps").mkdir()
    (root / "apps" / "deploy.yaml").write_text('image: foo:1 # {"$imagepolicy": "automation-ns:policy"}\n')
    (root / "apps" / "values.yml").write_text('tag: v0 # {"$imagepolicy": "automation-ns:policy:tag"}\n')
    (root / "Kustomization").write_text('images:\n- newTag: v0 # {"$imagepolicy": "automation-ns:policy:tag"}\n')
    (root / "notes.txt").write_text('image: foo:1 # {"$imagepolicy": "automation-ns:policy"}\n')
    (root / "plain.yaml").write_text("image: foo:1\n")
    (root / ".git").mkdir()
    (root / ".git" / "x.yaml").write_text('image: foo:1 # {"$imagepolicy": "automation-ns:policy"}\n')


def test_update_path_rewrites_matching_files_only(tmp_path: Path) -> None:
    make_tree(tmp_path)
    changes = update_path(str(tmp_path), resolve)
    assert sorted((c.file, c.line, c.new) for c in changes) == [
        ("Kustomization", 2, "v1.0.1"),
        ("apps/deploy.yaml", 1, "index.repo.fake/updated:v1.0.1"),
        ("apps/values.yml", 1, "v1.0.1"),
    ]
    assert (tmp_path / "apps" / "deploy.yaml").read_text().startswith("image: index.repo.fake/updated:v1.0.1 #")
    assert (tmp_path / "notes.txt").read_text().startswith("image: foo:1")
    assert (tmp_path / ".git" / "x.yaml").read_text().startswith("image: foo:1")
    assert update_path(str(tmp_path), resolve) == []
    assert not [p for p in tmp_path.rglob(".stockade-*")]


def test_update_path_dry_run_writes_nothing(tmp_path: Path) -> None:
    make_tree(tmp_path)
    before = (tmp_path / "apps" / "deploy.yaml").read_bytes()
    changes = update_path(str(tmp_path), resolve, dry_run=True)
    assert len(changes) == 3
    assert (tmp_path / "apps" / "deploy.yaml").read_bytes() == before


def test_update_path_single_file_keeps_mode(tmp_path: Path) -> None:
    target = tmp_path / "one.yaml"
    target.write_text('image: foo:1 # {"$imagepolicy": "automation-ns:policy"}\n')
    os.chmod(target, 0o640)
    changes = update_path(str(target), resolve)
    assert [c.file for c in changes] == [str(target)]
    assert os.stat(target).st_mode & 0o777 == 0o640


def test_update_path_is_all_or_nothing_on_errors(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text('image: foo:1 # {"$imagepolicy": "automation-ns:policy"}\n')
    (tmp_path / "b.yaml").write_text('d: x # {"$imagepolicy": "automation-ns:policy:digest"}\n')
    with pytest.raises(MarkerError, match=r"^b\.yaml:1:"):
        update_path(str(tmp_path), resolve)
    assert (tmp_path / "a.yaml").read_text().startswith("image: foo:1")


def test_update_path_skips_symlinks(tmp_path: Path) -> None:
    outside = tmp_path / "outside.yaml"
    outside.write_text('image: foo:1 # {"$imagepolicy": "automation-ns:policy"}\n')
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "link.yaml").symlink_to(outside)
    assert update_path(str(repo), resolve) == []
    assert outside.read_text().startswith("image: foo:1")


def test_tagged_multiline_and_tab_separated_scalars() -> None:
    source = (
        'a: !!str "x:1" # {"$imagepolicy": "automation-ns:policy:tag"}\n'
        'b: this is\n  folded # {"$imagepolicy": "automation-ns:policy:tag"}\n'
        'c: x\t# {"$imagepolicy": "automation-ns:policy:tag"}\n'
    )
    result, changes = update_text(source, resolve)
    assert result == (
        'a: !!str "v1.0.1" # {"$imagepolicy": "automation-ns:policy:tag"}\n'
        'b: v1.0.1 # {"$imagepolicy": "automation-ns:policy:tag"}\n'
        'c: v1.0.1\t# {"$imagepolicy": "automation-ns:policy:tag"}\n'
    )
    assert [(c.line, c.old) for c in changes] == [(1, "x:1"), (2, "this is folded"), (4, "x")]

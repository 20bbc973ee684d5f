"""The e2e runner's pure parts: exclusion file, unit discovery, chainsaw's Go-test skip pattern."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from stockade.testing import e2erun
from stockade.testing.e2erun import ExclusionError, Unit, discover_units, exclude_regex, is_excluded, load_exclusions

REPO_ROOT = Path(__file__).resolve().parents[3]


def _make_suite(root: Path, tests: list[str], configs: list[str]) -> Path:
    for test in tests:
        (root / test).mkdir(parents=True, exist_ok=True)
        (root / test / "chainsaw-test.yaml").write_text("kind: Test\n")
    for config in configs:
        (root / config).mkdir(parents=True, exist_ok=True)
        (root / config / ".chainsaw.yaml").write_text("kind: Configuration\n")
    return root


def test_units_follow_the_nearest_configuration(tmp_path: Path) -> None:
    suite = _make_suite(
        tmp_path,
        ["validate/a/t1", "validate/b/t2", "tls/x/t3", "tls/y/t4", "flags/t5"],
        ["validate", "tls/x", "tls/y"],
    )
    units = {u.path: (u.config, u.tests) for u in discover_units(suite)}
    assert units == {
        "validate": (suite / "validate" / ".chainsaw.yaml", ["validate/a/t1", "validate/b/t2"]),
        "tls/x": (suite / "tls/x/.chainsaw.yaml", ["tls/x/t3"]),
        "tls/y": (suite / "tls/y/.chainsaw.yaml", ["tls/y/t4"]),
        "flags": (None, ["flags/t5"]),
    }


def test_folder_entries_exclude_everything_below_them() -> None:
    exclusions = {"verify-images": "internet", "validate/a/t1": "differs"}
    assert is_excluded("verify-images/x/y", exclusions) == "internet"
    assert is_excluded("validate/a/t1", exclusions) == "differs"
    assert is_excluded("validate/a/t10", exclusions) is None
    assert is_excluded("verify-images-2/x", exclusions) is None


def _go_skip_matches(pattern: str, name: str) -> bool:
    """Go's testing matcher for -test.skip: alternatives split on '|', elements on '/', each element a regex
    matched (unanchored) against the same element of the test name; a partial match does not skip."""
    elements = name.split("/")
    for alternative in pattern.split("|"):
        parts = alternative.split("/")
        if len(elements) >= len(parts) and all(re.search(p, e) for p, e in zip(parts, elements)):
            return True
    return False


def test_exclude_regex_hits_exactly_the_excluded_tests() -> None:
    unit = Unit("validate", None, ["validate/a/t1", "validate/a/t10", "validate/b/t1"])
    pattern = exclude_regex(unit, ["validate/a/t1", "validate/b/t1"])
    assert _go_skip_matches(pattern, "chainsaw/a/t1[my-test]")
    assert _go_skip_matches(pattern, "chainsaw/b/t1[other]")
    assert not _go_skip_matches(pattern, "chainsaw/a/t10[my-test]")
    assert not _go_skip_matches(pattern, "chainsaw")  # the parent test must still run


def test_exclusions_need_a_reason(tmp_path: Path) -> None:
    path = tmp_path / "excluded.yaml"
    path.write_text("excluded:\n  validate/a: ''\n")
    with pytest.raises(ExclusionError, match=r"excluded\.validate/a: the reason must be a non-empty string"):
        load_exclusions(path)
    path.write_text("- just a list\n")
    with pytest.raises(ExclusionError, match="expected a mapping under 'excluded'"):
        load_exclusions(path)


def test_checked_in_exclusions_load_and_each_has_a_reason() -> None:
    exclusions = load_exclusions(REPO_ROOT / "tests" / "e2e" / "excluded.yaml")
    raw = yaml.safe_load((REPO_ROOT / "tests" / "e2e" / "excluded.yaml").read_text())["excluded"]
    assert len(exclusions) == len(raw) > 0
    assert all(len(reason) > 10 for reason in exclusions.values())


def test_failure_causes_group_errors_that_differ_only_in_names() -> None:
    from stockade.testing.e2erun import UnitResult, failure_causes

    result = UnitResult("validate")
    result.failures = [
        {"test": "validate/a", "operation": "apply", "error": "admission webhook \"v.kyverno.svc\" denied pod-1\nmore"},
        {"test": "validate/b", "operation": "apply", "error": "admission webhook \"x.y\" denied pod-22"},
        {"test": "validate/c", "operation": "assert", "error": "actual resource not found"},
    ]
    causes = failure_causes([result])
    assert causes[0] == {"cause": "apply: admission webhook <q> denied <n>", "count": 2, "examples": ["validate/a", "validate/b"]}
    assert causes[1]["count"] == 1


def test_go_test_outcomes_win_over_the_json_report() -> None:
    from stockade.testing.e2erun import parse_go_test_log

    log = "\n".join(
        [
            "=== RUN   chainsaw/a/t1[one]",
            "    sink.go:61: | 18:00:44 | one | @chainsaw | CREATE | OK | v1/Namespace @ ns",
            "        === ERROR",
            "        admission webhook denied the request",
            "        second line",
            "    sink.go:61: | 18:00:44 | one | @chainsaw | INTERNAL | ERROR |",
            "=== CONT  chainsaw/b/t2[two]",
            "--- FAIL: chainsaw (3.00s)",
            "    --- FAIL: chainsaw/a/t1[one] (0.01s)",
            "    --- PASS: chainsaw/b/t2[two] (2.50s)",
            "    --- SKIP: chainsaw/c/t3[three] (0.00s)",
        ]
    )
    outcomes, errors = parse_go_test_log(log)
    assert outcomes == {"a/t1[one]": "FAIL", "b/t2[two]": "PASS", "c/t3[three]": "SKIP"}
    assert errors == {"a/t1[one]": "admission webhook denied the request\nsecond line"}


def _fake_chainsaw(tmp_path: Path, passing: list[str], then_sleep: float) -> str:
    """A stand-in for chainsaw that reports some tests in Go test format and then hangs, like a slow suite."""
    script = tmp_path / "chainsaw"
    lines = "".join(f"echo '    --- PASS: chainsaw/{name} (1.00s)'\n" for name in passing)
    script.write_text(f"#!/bin/sh\n{lines}exec sleep {then_sleep}\n")
    script.chmod(0o755)
    return str(script)


def test_a_unit_still_running_at_the_deadline_is_stopped_and_its_unfinished_tests_counted_as_not_run(tmp_path: Path) -> None:
    import time

    from stockade.testing.e2erun import run_unit

    suite = _make_suite(tmp_path / "suite", ["validate/t1", "validate/t2", "validate/t3"], ["validate"])
    unit = discover_units(suite)[0]
    chainsaw = _fake_chainsaw(tmp_path, ["t1[t1]"], then_sleep=60)
    results = tmp_path / "results"
    results.mkdir()
    started = time.monotonic()
    result = run_unit(unit, unit.tests, suite, {}, results, 1, {"PATH": "/usr/bin:/bin"}, chainsaw, [], deadline=started + 1.0)
    assert result.stopped and time.monotonic() - started < 30
    assert (result.passed, result.failed, result.not_run) == (1, 0, 2)


def test_units_beyond_the_budget_are_reported_not_run_and_a_run_with_no_test_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from stockade.testing.e2erun import main

    monkeypatch.setenv("STOCKADE_CHAINSAW", _fake_chainsaw(tmp_path, [], then_sleep=0))
    suite = _make_suite(tmp_path / "suite", ["validate/t1", "mutate/t2"], ["validate", "mutate"])
    exclusions = tmp_path / "excluded.yaml"
    exclusions.write_text("excluded: {}\n")
    code = main([
        "--suite", str(suite), "--exclusions", str(exclusions), "--results", str(tmp_path / "results"),
        "--no-cluster", "--state-dir", str(tmp_path / "state"), "--budget", "0",
    ])
    out = capsys.readouterr().out
    assert code == 1
    assert "NOT RUN for lack of time: mutate (1), validate (1)" in out
    summary = json.loads((tmp_path / "results" / "summary.json").read_text())
    assert summary["totals"]["not_run"] == 2 and summary["totals"]["passed"] == 0


def test_rotation_starts_at_a_key_dependent_unit_and_keeps_every_unit(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from stockade.testing.e2erun import main

    monkeypatch.setenv("STOCKADE_CHAINSAW", _fake_chainsaw(tmp_path, [], then_sleep=0))
    folders = [f"f{i}" for i in range(6)]
    suite = _make_suite(tmp_path / "suite", [f"{f}/t" for f in folders], folders)
    exclusions = tmp_path / "excluded.yaml"
    exclusions.write_text("excluded: {}\n")
    orders = []
    for key in ("a", "b", "c", "d"):
        main(["--suite", str(suite), "--exclusions", str(exclusions), "--results", str(tmp_path / key), "--no-cluster",
              "--state-dir", str(tmp_path / "state"), "--budget", "0", "--rotate", key])
        order = [line.split(":")[1].strip() for line in capsys.readouterr().out.splitlines() if line.startswith("e2e-run: f")]
        assert sorted(order) == folders
        orders.append(tuple(order))
    assert len(set(orders)) > 1


def test_units_are_started_only_when_their_estimate_fits_the_budget() -> None:
    from stockade.testing.e2erun import SECONDS_PER_TEST_ROUND, estimated_seconds

    assert estimated_seconds(1, 6) == SECONDS_PER_TEST_ROUND
    assert estimated_seconds(6, 6) == SECONDS_PER_TEST_ROUND
    assert estimated_seconds(107, 6) == 18 * SECONDS_PER_TEST_ROUND


def test_a_stopped_run_counts_the_tests_its_progress_log_shows_finished() -> None:
    """chainsaw prints no Go test summary when it is stopped; its progress lines (with the backspaces Go's test log
    puts before them) still tell which tests ended and which hit an error."""
    from stockade.testing.e2erun import finished_tests

    bs = "\b" * 12
    log = "\n".join([
        f"    sink.go:61: {bs}| 19:00:01 | good | @chainsaw | CREATE | OK | v1/Namespace @ chainsaw-a",
        f"    sink.go:61: {bs}| 19:00:09 | good | step-01   | ASSERT | DONE | v1/Pod @ chainsaw-a/p",
        f"    sink.go:61: {bs}| 19:00:10 | good | @chainsaw | CLEANUP | END |",
        f"    sink.go:61: {bs}| 19:00:02 | bad | step-02 | ASSERT | ERROR | v1/Pod @ chainsaw-b/p",
        f"    sink.go:61: {bs}| 19:00:12 | bad | @chainsaw | CLEANUP | END |",
        f"    sink.go:61: {bs}| 19:00:03 | running | step-01 | APPLY | RUN | v1/Pod @ chainsaw-c/p",
    ])
    assert finished_tests(log) == {"bad": "FAIL", "good": "PASS"}


def test_install_profiles_follow_kyverno_ci_values_folders() -> None:
    """A profile exists for each kyverno-config folder named after a suite folder (Kyverno's CI installs Kyverno with
    those values for that folder), and only folders under it get the profile's serve flags.  Profiles for suite
    folders whose values ../shared does not carry (Kyverno's scripts/config/exceptions-disabled) are allowed."""
    config = e2erun.DEFAULT_SUITE.parent / "kyverno-config"
    assert config.is_dir(), f"{config} missing: ../shared/e2e is needed by the e2e runner"
    per_folder = {p.name for p in config.iterdir() if p.is_dir() and (e2erun.DEFAULT_SUITE / p.name).is_dir()}
    assert per_folder <= set(e2erun.INSTALL_PROFILES)
    assert all(
        (e2erun.DEFAULT_SUITE / folder).is_dir() or folder.split("/")[0] in e2erun.FOLDERS_BEYOND_SHARED for folder in e2erun.INSTALL_PROFILES
    )
    # a profile for one test folder covers that unit only, not its siblings
    assert e2erun.install_profile("tls-certificates/ed25519-self-signed") == ("--tls-key-algorithm", "Ed25519")
    assert e2erun.install_profile("tls-certificates/ecdsa-cert-manager") == ()
    assert e2erun.install_profile("policy-exceptions-disabled/validating-policies") == ("--no-policy-exceptions",)
    assert e2erun.install_profile("force-failure-policy-ignore/validating-policy/fail") == ("--force-failure-policy-ignore",)
    assert e2erun.install_profile("validate/clusterpolicy") == ()
    # Kyverno's CI installs with mutatingAdmissionPolicyReports for each MutatingAdmissionPolicy API version's folder
    for folder in ("mutating-admission-policy-reports-alpha", "mutating-admission-policy-reports", "mutating-admission-policy-reports-v1"):
        assert e2erun.install_profile(f"{folder}/background") == ("--mutating-admission-policy-reports",)


def test_kwok_pod_stages_are_required_beside_the_binary(tmp_path: Path) -> None:
    """Without the stage file KWOK would complete Jobs' Pods at once (its default pod-complete stage): refuse to start."""
    from stockade.testing.e2ecluster import ClusterError, kwok_pod_stages

    kwok = tmp_path / "kwok"
    with pytest.raises(ClusterError, match="build-kwok"):
        kwok_pod_stages(str(kwok))
    (tmp_path / "kwok-pod-stages.yaml").write_text("kind: Stage\n")
    assert kwok_pod_stages(str(kwok)) == tmp_path / "kwok-pod-stages.yaml"


def test_scripts_run_as_programs_without_the_executable_bit_are_staged_executable(tmp_path: Path) -> None:
    """A suite copied without file modes (Kyverno's git has its step scripts at 100755) makes chainsaw's
    ``sh -c ./script.sh`` fail with 126 before the script runs; the runner finds exactly the scripts a step runs as a
    program and runs a copy of the suite in which they are executable, leaving the original as it was."""
    suite = tmp_path / "suite"
    test = suite / "validate" / "t1"
    test.mkdir(parents=True)
    steps = [
        {"name": "s1", "try": [{"script": {"content": "./check.sh", "timeout": "30s"}}]},
        {"name": "s2", "try": [{"script": {"content": "./ready.sh\n"}}], "cleanup": [{"script": {"content": "./undo.sh arg"}}]},
        {"name": "s3", "try": [{"script": {"content": "kubectl get pods\n./not-first.sh"}}, {"script": {"content": "./absent.sh"}}]},
    ]
    (test / "chainsaw-test.yaml").write_text(yaml.safe_dump({"kind": "Test", "spec": {"steps": steps}}))
    for name, mode in {"check.sh": 0o644, "ready.sh": 0o755, "undo.sh": 0o644, "not-first.sh": 0o644, "other.sh": 0o644}.items():
        (test / name).write_text("echo ran\n")
        (test / name).chmod(mode)
    assert e2erun.unexecutable_scripts(suite) == ["validate/t1/check.sh", "validate/t1/undo.sh"]

    def run_step(root: Path) -> int:
        return subprocess.run(["/bin/sh", "-c", "./check.sh"], cwd=root / "validate" / "t1", capture_output=True).returncode

    assert run_step(suite) == 126
    staged = e2erun.stage_suite(suite, e2erun.unexecutable_scripts(suite), tmp_path / "results" / "staged-suite")
    assert run_step(staged) == 0
    assert e2erun.unexecutable_scripts(staged) == []
    assert (staged / "validate/t1/other.sh").stat().st_mode & 0o111 == 0
    assert e2erun.unexecutable_scripts(suite) == ["validate/t1/check.sh", "validate/t1/undo.sh"]
    (suite / "validate/t1/new.yaml").write_text("kind: Pod\n")  # a later staging starts from the suite again
    assert (e2erun.stage_suite(suite, [], staged) / "validate/t1/new.yaml").is_file()


def test_folders_kyverno_ci_shards_run_as_shards_of_contiguous_slices_like_chainsaw() -> None:
    """Kyverno's CI runs e.g. `generate` in 12 shards, each on a fresh cluster; chainsaw's --shard-index/--shard-count
    take contiguous slices of the tests in walk order (sorted by name at each level), the last one the remainder.
    The runner isolates each shard as a unit of its own, so what one shard's tests leave never meets another's."""
    tests = ["f/a-b/t1", "f/a/t2", "f/a/t3", "f/b/t4", "f/c/t5"]  # walk order puts f/a before f/a-b
    units = e2erun.shard_units([e2erun.Unit("f", None, list(tests)), e2erun.Unit("g", None, ["g/x"])], {"f": 2, "g": 3})
    assert [(u.path, u.shard, u.tests) for u in units] == [
        ("f", (0, 2), ["f/a/t2", "f/a/t3"]),
        ("f", (1, 2), ["f/a-b/t1", "f/b/t4", "f/c/t5"]),
        ("g", None, ["g/x"]),  # one test: nothing to shard
    ]
    assert units[1].label == "f#shard-2-of-2" and units[2].label == "g"
    assert units[0].elsewhere == ["f/a-b/t1", "f/b/t4", "f/c/t5"]  # chainsaw sees the whole folder: those are skipped
    assert sorted(t for u in units for t in u.tests) == sorted([*tests, "g/x"])  # every test runs exactly once

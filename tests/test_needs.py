"""tests/needs.py: a test missing an installed thing skips saying the install step, and under CI fails
naming it; a real site (the Gazette bench-peer smoke test, its peers hidden) does both in a pytest run
of its own; the header names each service's version, or the step that installs a missing one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import needs
import pytest

REPO = Path(__file__).resolve().parents[1]
SMOKE_TEST = (
    "tests/test_bench_gazette_peer.py::test_gazette_peer_measures_every_figure_and_pairs_it_with_ours"
)
RUN_TIMEOUT_S = 120


@pytest.mark.parametrize(
    ("value", "ci"),
    [("true", True), ("1", True), ("TRUE", True), ("", False), ("0", False), ("false", False)],
)
def test_ci_is_on_for_true_or_1(monkeypatch, value: str, ci: bool) -> None:
    monkeypatch.setenv("CI", value)
    assert needs.under_ci() is ci


def test_outside_ci_a_missing_thing_skips_naming_its_install_step(monkeypatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception) as info:
        needs.missing("/usr/bin/chromium is absent", needs.CHROMIUM_STEP)
    assert str(info.value) == (
        "/usr/bin/chromium is absent; install: make services (.ci/services: apt-get install chromium)"
    )


def test_under_ci_a_missing_thing_fails_naming_its_install_step(monkeypatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception) as info:
        needs.missing("PostgreSQL server binaries not found", needs.POSTGRES_STEP)
    assert str(info.value) == (
        "PostgreSQL server binaries not found: under CI a failure, not a skip; the install step is "
        "make services (.ci/services: apt-get install postgresql)"
    )


def test_a_module_that_cannot_be_imported_is_missing_and_names_the_venv(monkeypatch) -> None:
    monkeypatch.setenv("CI", "1")
    with pytest.raises(pytest.fail.Exception, match=r"no_such_module_here .*the install step is make venv"):
        needs.import_or_missing("no_such_module_here")
    monkeypatch.setenv("CI", "")
    with pytest.raises(pytest.skip.Exception, match=r"no_such_module_here .*; install: make venv"):
        needs.import_or_missing("no_such_module_here")
    assert needs.import_or_missing("json").dumps([]) == "[]"


def test_root_is_needed_only_where_it_is_missing(monkeypatch) -> None:
    monkeypatch.setenv("CI", "true")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(pytest.fail.Exception, match=r"not running as root, which mounting a tmpfs needs"):
        needs.require_root("mounting a tmpfs")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    needs.require_root("mounting a tmpfs")


def _run_smoke_test(tmp_path: Path, ci: str) -> subprocess.CompletedProcess[str]:
    """The bench-peer smoke test in a pytest of its own, with no Gazette peers to find anywhere."""
    env = dict(os.environ, CI=ci, GAZETTE_PEERS_BIN=str(tmp_path), PATH=str(tmp_path))
    argv = [sys.executable, "-m", "pytest", SMOKE_TEST, "-p", "no:cacheprovider", "-rsf", "--no-header"]
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)


def test_a_real_site_skips_outside_ci_and_fails_under_ci_without_the_peers(tmp_path: Path) -> None:
    skipped = _run_smoke_test(tmp_path, ci="")
    assert skipped.returncode == 0 and "1 skipped" in skipped.stdout, skipped.stdout + skipped.stderr
    assert "install: make peers" in skipped.stdout, skipped.stdout

    failed = _run_smoke_test(tmp_path, ci="true")
    assert failed.returncode == 1 and "1 failed" in failed.stdout, failed.stdout + failed.stderr
    assert "real Gazette not built: run `make peers`" in failed.stdout, failed.stdout
    assert "under CI a failure, not a skip; the install step is make peers" in failed.stdout, failed.stdout


def test_the_header_names_each_version_or_the_step_that_installs_it(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setattr(needs, "CHROMIUM", tmp_path / "chromium")
    monkeypatch.setenv("GAZETTE_PEERS_BIN", str(tmp_path))
    monkeypatch.setenv("CI", "true")
    lines = needs.report_lines()
    assert lines[0] == "CI set: a missing one fails its tests"
    by_name = {line.split(":", 1)[0]: line.split(":", 1)[1].strip() for line in lines[1:]}
    assert set(by_name) == {"etcd", "postgres", "chromium", "java", "kafka", "delta", "gazette peers"}
    assert by_name["etcd"].startswith("etcd Version: "), by_name["etcd"]  # etcd --version's own output
    assert by_name["chromium"] == f"not installed; install: {needs.CHROMIUM_STEP}"
    assert by_name["gazette peers"] == f"not built in {tmp_path}; install: {needs.PEERS_STEP}"

"""bench/allocator_scale.py at its smallest: 10 members with 10 items each (not Gazette's 200), both
deploy modes, ours and Gazette's Go allocator against one embedded etcd. A smoke test of the harness
(driver, Go build, history counting, figures), not a measurement: timing decides nothing here.

Without Go it skips, saying how to install it, except under CI, where that is a failure (tests/needs.py).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from needs import GO_STEP, missing

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # bench/ is a top-level directory of the checkout, not an installed package
    sys.path.insert(0, str(ROOT))

from bench import allocator_scale  # noqa: E402
from bench.report import rows_of  # noqa: E402

SMOKE = allocator_scale.Settings("smoke", members=(10,), timeout_s=120.0, items_per_member=10)
STEPS = 11  # five blocks of one member, each cycled up and down, then the leader's exit


@pytest.fixture(scope="module")
def runs() -> list[allocator_scale.Run]:
    if shutil.which("go") is None:
        missing("Go is not installed, so Gazette's allocator (bench/allocator-go) cannot be built", GO_STEP)
    return allocator_scale.measure(SMOKE, lambda _: None)


def test_both_allocators_run_the_whole_deploy(runs: list[allocator_scale.Run]) -> None:
    assert sorted((r.allocator, r.mode) for r in runs) == sorted(
        (a, m) for a in ("ours", "gazette") for m in allocator_scale.MODES
    )
    for run in runs:
        assert (run.members, run.items, run.steps) == (10, 100, STEPS), run
        assert run.seconds > 0 and run.end_revision > run.start_revision, run


def test_changes_counted_from_history_add_up(runs: list[allocator_scale.Run]) -> None:
    # From no assignment to three per item: whatever moved in between, adds less removes is what is left.
    # Every old member left, so each of their assignments was removed (or moved away) along the way.
    for run in runs:
        assert run.adds - run.removes == 3 * run.items, run
        assert run.removes > 0 and run.changes == run.adds + run.removes + run.moves, run


def test_figures_pair_ours_with_gazettes(runs: list[allocator_scale.Run]) -> None:
    figures = allocator_scale.figures_of(SMOKE, runs)
    rows = rows_of(figures, allocator_scale.peer_of(SMOKE), peer_figures=allocator_scale.peer_keys(SMOKE))
    ours = [r for r in rows if r.role == "ours"]
    assert len(ours) == 4 and all(r.value is not None and r.peer_ratio is not None for r in ours)
    assert "ours/Gz" in allocator_scale.table(runs, SMOKE)


def test_settings_reject_what_the_scenario_cannot_run() -> None:
    with pytest.raises(ValueError, match="multiples of 10"):
        allocator_scale.Settings("bad", members=(15,))
    with pytest.raises(ValueError, match="modes must be among"):
        allocator_scale.Settings("bad", members=(10,), modes=("sideways",))


def test_without_go_the_suite_skips_the_part_saying_how_to_install_it(monkeypatch) -> None:
    import importlib
    import io

    from rich.console import Console

    monkeypatch.setattr(allocator_scale.shutil, "which", lambda _name: None)
    with pytest.raises(allocator_scale.GoUnavailable, match="Go is not installed"):
        allocator_scale.build_gazette_harness(ROOT)

    suite_module = importlib.import_module("bench.__main__")
    part = suite_module.Part(
        "allocator scale",
        lambda: allocator_scale.scale_figures(SMOKE),
        lambda _s, log: allocator_scale.run_part(SMOKE, log),
    )
    figures, notes, status = suite_module.run_parts([part], None, Console(file=io.StringIO(), width=200))
    assert list(figures) == list(allocator_scale.scale_figures(SMOKE))
    assert status["allocator scale"]["status"] == "skipped"
    assert set(notes) == set(figures) and all(allocator_scale.GO_STEP in n for n in notes.values())


def test_command_line_rejects_bad_sizes(capsys) -> None:
    with pytest.raises(SystemExit):
        allocator_scale.main(["--members", "15"])
    assert "multiples of 10" in capsys.readouterr().err


def test_command_line_parses_every_option_into_settings(capsys) -> None:
    # Both "only" flags: an error that comes after the settings are built from every other option.
    argv = ["--members", "10", "--modes", "up-first", "--timeout", "5", "--ours-max", "0"]
    with pytest.raises(SystemExit):
        allocator_scale.main([*argv, "--ours-only", "--gazette-only"])
    assert "leave nothing to run" in capsys.readouterr().err

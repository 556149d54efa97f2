"""gazctl's muscle memory in `gazette`: -l selectors on journals read and append, journals edit and
suspend, --version; and bad input (a wrong selector, journal or option) ends with one line naming it,
a non-zero exit, and nothing stored changed. Each command runs as a subprocess (tests/cli_run.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import cli_run
import pytest
from cli_run import ok, one_error_line

import gazette
from gazette.local.cluster import LocalCluster
from gazette.protocol.spec import JournalSpec, SuspendLevel


@pytest.fixture(scope="module")
def cluster(etcd, module_etcd_root, tmp_path_factory) -> Iterator[LocalCluster]:
    data = tmp_path_factory.mktemp("cli-parity")
    with LocalCluster(
        brokers=1, mode="inprocess", etcd=etcd.endpoint, root=module_etcd_root, data_dir=str(data)
    ) as c:
        yield c


def gz(
    cluster: LocalCluster, *args: str, input: bytes | str = b"", env: dict | None = None
) -> subprocess.CompletedProcess:
    return cli_run.gazette(
        *args, env={"GAZETTE_BROKER": cluster.broker_endpoints[0], **(env or {})}, input=input
    )


def _journals(cluster: LocalCluster, prefix: str, names: list[str], **labels: str) -> list[str]:
    client = cluster.client()
    full = [f"{prefix}/{n}" for n in names]
    client.apply_journals([JournalSpec(name=n, replication=1, labels=labels) for n in full])
    cluster.wait_for_routes(full)
    return full


def _heads(cluster: LocalCluster, names: list[str]) -> dict[str, int]:
    client = cluster.client()
    return {n: client.read_head(n) for n in names}


def test_version_prints_the_package_version() -> None:
    assert ok(cli_run.gazette("--version")).strip() == f"gazette {gazette.__version__}"


@pytest.mark.parametrize(
    "args, named",
    [
        (["journals", "list", "--bogus"], "--bogus"),
        (["journals", "list", "-o", "xml"], "'xml' is not one of"),
        (["--log-format", "xml", "journals", "list"], "--log-format"),
        (["journals", "suspend"], "-l"),
    ],
)
def test_usage_errors_are_one_line_naming_the_option(args: list[str], named: str) -> None:
    proc = cli_run.gazette(*args)
    err = proc.stderr.decode()
    assert proc.returncode == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and named in lines[0], err


def test_append_and_read_by_selector(cluster: LocalCluster, tmp_path: Path) -> None:
    a, b = _journals(cluster, "parity/sel", ["a", "b"], team="sel")
    # gazctl's idiom for one journal: a name selector, the whole input as one append.
    assert f"appended {a} [0, 6)" in ok(
        gz(cluster, "journals", "append", "-l", f"name={a}", "--data", "first\n")
    )
    # Records, each to the journal named before it (--mapping direct).
    records = f"{a}\nto-a\n{b}\nto-b\n{b}\nmore-b\n"
    ok(
        gz(
            cluster,
            "journals",
            "append",
            "-l",
            "team=sel",
            "--framing",
            "lines",
            "--mapping",
            "direct",
            input=records,
        )
    )
    client = cluster.client()
    assert client.read_all(a) == b"first\nto-a\n"
    assert client.read_all(b) == b"to-b\nmore-b\n"
    # Keyed records: modulo hashing spreads them over the selector's journals, each record exactly once.
    keyed = "".join(f"key-{i}\nrec-{i}\n" for i in range(20))
    ok(gz(cluster, "journals", "append", "-l", "team=sel", "-f", "lines", "-m", "modulo", input=keyed))
    got = (client.read_all(a) + client.read_all(b)).decode().split()
    assert sorted(r for r in got if r.startswith("rec-")) == sorted(f"rec-{i}" for i in range(20))

    # Read every journal of the selector, multiplexed in whole chunks, and record where each ended.
    offsets = tmp_path / "offsets.json"
    out = ok(gz(cluster, "journals", "read", "-l", "team=sel", "--offsets-out", str(offsets)))
    assert sorted(out.split()) == sorted(got)
    heads = _heads(cluster, [a, b])
    assert json.loads(offsets.read_text()) == heads
    # Resume from those offsets: only what came since; the input offsets are kept as .previous.
    ok(gz(cluster, "journals", "append", b, "--data", "later\n"))
    again = ok(
        gz(
            cluster,
            "journals",
            "read",
            "-l",
            "team=sel",
            "--offsets",
            str(offsets),
            "--offsets-out",
            str(offsets),
        )
    )
    assert again == "later\n"
    assert json.loads(Path(f"{offsets}.previous").read_text()) == heads
    assert json.loads(offsets.read_text()) == {a: heads[a], b: heads[b] + 6}
    # --tail starts at the write head: nothing to read without --block.
    assert ok(gz(cluster, "journals", "read", "-l", "team=sel", "--tail")) == ""


def test_bad_selector_journal_or_record_is_one_line_and_appends_nothing(cluster: LocalCluster) -> None:
    a, b = _journals(cluster, "parity/bad", ["a", "b"], team="bad")
    ok(gz(cluster, "journals", "append", a, "--data", "kept\n"))
    before = _heads(cluster, [a, b])
    # A record for a journal the selector does not hold: named, and no record of the input appended.
    line = one_error_line(
        gz(
            cluster,
            "journals",
            "append",
            "-l",
            "team=bad",
            "-f",
            "lines",
            "-m",
            "direct",
            input=f"{a}\nx\nparity/other\ny\n",
        )
    )
    assert '"parity/other"' in line and "nothing appended" in line
    line = one_error_line(
        gz(cluster, "journals", "append", "-l", "team=bad", "-f", "lines", input="x\npartial")
    )
    assert "partial line" in line
    line = one_error_line(gz(cluster, "journals", "append", "-l", "team=bad", "-m", "modulo", input="x\n"))
    assert "--framing none" in line
    line = one_error_line(gz(cluster, "journals", "append", "-l", "team=nobody", "--data", "x"))
    assert 'no journals match selector "team=nobody"' in line
    line = one_error_line(gz(cluster, "journals", "read", "-l", "team in (bad", "--timeout", "5"))
    assert "label selector" in line and "team in (bad" in line
    line = one_error_line(gz(cluster, "journals", "read", a, "-l", "team=bad"))
    assert "exactly one of the two" in line
    assert _heads(cluster, [a, b]) == before


def _editor(tmp_path: Path, old: str, new: str) -> dict[str, str]:
    """An $EDITOR that replaces `old` by `new` in the file it is given."""
    script = tmp_path / f"edit-{abs(hash((old, new)))}.py"
    script.write_text(
        f"import sys\np = sys.argv[1]\nt = open(p).read().replace({old!r}, {new!r})\nopen(p, 'w').write(t)\n"
    )
    return {"EDITOR": f"{sys.executable} {script}", "GAZ_EDITOR": ""}


def test_journals_edit_applies_the_edited_yaml(cluster: LocalCluster, tmp_path: Path) -> None:
    a, b = _journals(cluster, "parity/edit", ["a", "b"], team="edit")
    out = ok(
        gz(
            cluster,
            "journals",
            "edit",
            "-l",
            "team=edit",
            env=_editor(tmp_path, "value: edit", "value: edited"),
        )
    )
    assert "applied 2 change(s)" in out
    listed = cluster.client().list_journals("team=edited")
    assert sorted(i.spec.name for i in listed) == [a, b]

    # An edit that does not parse is opened again with the error; saved unchanged, nothing is applied.
    revisions = {i.spec.name: i.mod_revision for i in listed}
    out = ok(
        gz(
            cluster,
            "journals",
            "edit",
            "-l",
            "team=edited",
            env=_editor(tmp_path, "replication: 1", "replication: many"),
        )
    )
    assert "Cancelled; no changes to invalid file." in out
    assert {i.spec.name: i.mod_revision for i in cluster.client().list_journals("team=edited")} == revisions
    # An editor left unchanged applies nothing; a selector of nothing is one line.
    assert "Cancelled; nothing to do." in ok(
        gz(cluster, "journals", "edit", "-l", "team=edited", env={"EDITOR": "true"})
    )
    assert "no journals match" in one_error_line(
        gz(cluster, "journals", "edit", "-l", "team=none", env={"EDITOR": "true"})
    )


def test_journals_suspend_then_an_append_resumes(cluster: LocalCluster) -> None:
    (idle,) = _journals(cluster, "parity/suspend", ["idle"], team="suspend")
    assert f"{idle}: suspended (full)" in ok(gz(cluster, "journals", "suspend", "-l", "team=suspend"))
    client = cluster.client()
    assert client.list_journals(f"name={idle}")[0].spec.suspend_level == SuspendLevel.FULL
    # Again: already suspended, nothing to do, still success.
    assert f"{idle}: suspended (full)" in ok(gz(cluster, "journals", "suspend", "-l", "team=suspend"))
    assert ok(gz(cluster, "journals", "read", "-l", "team=suspend")) == ""  # suspended journals are skipped
    ok(gz(cluster, "journals", "append", idle, "--data", "wake\n"))
    assert client.list_journals(f"name={idle}")[0].spec.suspend_level == SuspendLevel.NONE
    assert "no journals match" in one_error_line(gz(cluster, "journals", "suspend", "-l", "team=nobody"))

"""The `gazette` command against a real broker: YAML apply, listings in every format, append, read,
flush and fragments; and bad input ends with exit code 1 and one line naming the problem.

Each command runs as `python -m gazette.cli.main` in a subprocess with GAZETTE_BROKER set.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import cli_run
import pytest
import yaml
from cli_run import ok, one_error_line

from gazette.local.cluster import LocalCluster
from gazette.protocol.spec import load_specs_yaml


@pytest.fixture(scope="module")
def cluster(etcd, module_etcd_root, tmp_path_factory) -> Iterator[LocalCluster]:
    data = tmp_path_factory.mktemp("cli")
    with LocalCluster(
        brokers=1, mode="inprocess", etcd=etcd.endpoint, root=module_etcd_root, data_dir=str(data)
    ) as c:
        yield c


def gazette(cluster: LocalCluster, *args: str, input: bytes | None = None) -> subprocess.CompletedProcess:
    return cli_run.gazette(*args, env={"GAZETTE_BROKER": cluster.broker_endpoints[0]}, input=input or b"")


def _specs_yaml(store: str, prefix: str) -> str:
    return textwrap.dedent(
        f"""\
        name: {prefix}/
        labels:
          - {{name: team, value: streams}}
          - {{name: content-type, value: application/x-ndjson}}
        fragment:
          stores: ["{store}"]
          compression_codec: gzip
          retention: 48h
        children:
          - name: {prefix}/one
          - name: {prefix}/two
            replication: 1
            labels: [{{name: team, value: batch}}]
            fragment: {{compression_codec: zstandard}}
        """
    )


def test_apply_yaml_then_list_in_every_format(cluster: LocalCluster, tmp_path: Path) -> None:
    prefix = "cli/apply"
    specs = tmp_path / "specs.yaml"
    specs.write_text(_specs_yaml(cluster.store, prefix))
    out = ok(gazette(cluster, "journals", "apply", "--specs", str(specs)))
    assert "applied 2 change(s)" in out

    # JSON: one row per journal, with the hierarchy's fields pushed down to each.
    rows = json.loads(ok(gazette(cluster, "journals", "list", "-l", f"prefix={prefix}/", "-o", "json")))
    by_name = {r["name"]: r for r in rows}
    assert set(by_name) == {f"{prefix}/one", f"{prefix}/two"}
    one, two = by_name[f"{prefix}/one"]["spec"], by_name[f"{prefix}/two"]["spec"]
    assert {(lb["name"], lb["value"]) for lb in one["labels"]} == {
        ("team", "streams"),
        ("content-type", "application/x-ndjson"),
    }
    assert {(lb["name"], lb["value"]) for lb in two["labels"]} == {
        ("team", "batch"),
        ("content-type", "application/x-ndjson"),
    }
    assert (
        one["fragment"]["compression_codec"] == "GZIP" and two["fragment"]["compression_codec"] == "ZSTANDARD"
    )
    assert one["fragment"]["stores"] == [cluster.store] == two["fragment"]["stores"]
    assert one["fragment"]["retention"] == "48h"
    assert all(r["primary"] and r["revision"] > 0 for r in rows)

    # Selectors filter on labels, including inherited ones.
    rows = json.loads(ok(gazette(cluster, "journals", "list", "-l", "team=batch", "-o", "json")))
    assert [r["name"] for r in rows] == [f"{prefix}/two"]

    # YAML: gazctl's hoisted hierarchy, which round-trips through the loader with revisions.
    text = ok(gazette(cluster, "journals", "list", "-l", f"prefix={prefix}/", "-o", "yaml"))
    yaml.safe_load(text)
    changes = {ch.spec.name: ch for ch in load_specs_yaml(text)}
    assert set(changes) == {f"{prefix}/one", f"{prefix}/two"}
    assert all(ch.expect_mod_revision == by_name[n]["revision"] for n, ch in changes.items())
    assert changes[f"{prefix}/two"].spec.labels.value_of("team") == "batch"
    assert changes[f"{prefix}/one"].spec.retention == 48 * 3600

    # Table (rich): every journal name appears.
    table = ok(gazette(cluster, "journals", "list", "-l", f"prefix={prefix}/"))
    assert f"{prefix}/one" in table and f"{prefix}/two" in table

    # Re-applying the listed YAML is a compare-and-swap at the listed revisions: it succeeds once...
    listed = tmp_path / "listed.yaml"
    listed.write_text(text)
    ok(gazette(cluster, "journals", "apply", "--specs", str(listed)))
    # ...and the same revisions are stale the second time.
    line = one_error_line(gazette(cluster, "journals", "apply", "--specs", str(listed)))
    assert "revision" in line


def test_append_from_data_and_stdin_then_read(cluster: LocalCluster) -> None:
    journal = "cli/rw/one"
    cluster.client().apply_journals([cluster.journal_spec(journal)])
    out = ok(gazette(cluster, "journals", "append", journal, "--data", "first line\n"))
    assert "appended [0, 11)" in out
    payload = b'{"n": 2}\n' + bytes(range(1, 256)) + b"\n"
    out = ok(gazette(cluster, "journals", "append", journal, input=payload))
    assert f"appended [11, {11 + len(payload)})" in out

    read = gazette(cluster, "journals", "read", journal)
    assert read.returncode == 0, read.stderr.decode()
    assert read.stdout == b"first line\n" + payload  # byte for byte
    read = gazette(cluster, "journals", "read", journal, "--offset", "11")
    assert read.stdout == payload


def test_flush_then_fragments_show_persisted_files(cluster: LocalCluster) -> None:
    journal = "cli/frag/one"
    cluster.client().apply_journals([cluster.journal_spec(journal, compression="gzip")])
    for i in range(3):
        ok(gazette(cluster, "journals", "append", journal, "--data", f"line {i}\n"))
    out = ok(gazette(cluster, "journals", "flush", "-l", f"name={journal}"))
    assert out.startswith(f"{journal}: [") and cluster.store in out
    assert len(out.strip().splitlines()) == 1  # a long store path is not wrapped onto a new line

    rows = json.loads(ok(gazette(cluster, "journals", "fragments", journal, "-o", "json")))
    assert rows and all(r["journal"] == journal for r in rows)
    assert all(r["store"] == cluster.store and r["path"] and r["codec"] == "GZIP" for r in rows), rows
    assert min(r["begin"] for r in rows) == 0 and max(r["end"] for r in rows) == 3 * len("line 0\n")
    store_dir = Path(cluster.store[len("file://") :])
    for r in rows:
        assert (store_dir / r["path"]).is_file(), r["path"]
        assert r["path"].endswith(f"-{r['sha1']}.gz")

    ok(gazette(cluster, "journals", "append", journal, "--data", "more\n"))
    out = ok(gazette(cluster, "journals", "flush", journal))  # a journal by name, as append and read take
    assert out.startswith(f"{journal}: [21, 26) -> {cluster.store}")
    both = gazette(cluster, "journals", "flush", journal, "-l", f"name={journal}")
    assert "not both" in one_error_line(both)

    table = ok(gazette(cluster, "journals", "fragments", journal))
    assert "GZIP" in table


def test_invalid_journal_name_in_yaml_is_one_line_and_applies_nothing(
    cluster: LocalCluster, tmp_path
) -> None:
    specs = tmp_path / "bad.yaml"
    specs.write_text(
        textwrap.dedent(
            f"""\
            name: cli/bad/
            fragment: {{stores: ["{cluster.store}"]}}
            children:
              - name: cli/bad//doubled
              - name: cli/bad/fine
            """
        )
    )
    line = one_error_line(gazette(cluster, "journals", "apply", "--specs", str(specs)))
    assert '"cli/bad//doubled"' in line and "not clean" in line
    assert cluster.client().list_journals("prefix=cli/bad/") == []  # not even the valid sibling


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("name: cli/x\nbogus: 1\n", 'unknown key "bogus"'),
        ("name: [cli/x\n  - : :\n", "does not parse"),
        ("name: cli/x\nreplication: many\n", "replication"),
    ],
)
def test_bad_yaml_from_stdin_is_one_line(cluster: LocalCluster, text: str, expected: str) -> None:
    line = one_error_line(gazette(cluster, "journals", "apply", "--specs", "-", input=text.encode()))
    assert expected in line


def test_append_to_a_missing_journal_is_journal_not_found(cluster: LocalCluster) -> None:
    line = one_error_line(gazette(cluster, "journals", "append", "cli/missing/one", "--data", "x"))
    assert "JOURNAL_NOT_FOUND" in line and "cli/missing/one" in line
    line = one_error_line(gazette(cluster, "journals", "read", "cli/missing/one"))
    assert "JOURNAL_NOT_FOUND" in line and "cli/missing/one" in line


def test_brackets_in_errors_are_shown_not_parsed_as_markup(cluster: LocalCluster) -> None:
    # A rich-markup closing tag in the message once raised MarkupError (a traceback), and an
    # opening one silently vanished from the message.
    line = one_error_line(gazette(cluster, "journals", "append", "cli/[/x]", "--data", "x"))
    assert '"cli/[/x]"' in line
    line = one_error_line(gazette(cluster, "journals", "append", "cli/[bold]", "--data", "x"))
    assert '"cli/[bold]"' in line


def test_unreadable_specs_path_is_one_line(cluster: LocalCluster, tmp_path: Path) -> None:
    line = one_error_line(gazette(cluster, "journals", "apply", "--specs", str(tmp_path)))
    assert str(tmp_path) in line
    line = one_error_line(gazette(cluster, "journals", "apply", "--specs", str(tmp_path / "absent.yaml")))
    assert "absent.yaml" in line


def test_unreachable_broker_is_one_line(cluster: LocalCluster) -> None:
    env = {**os.environ, "GAZETTE_BROKER": "http://127.0.0.1:1"}
    proc = subprocess.run(
        [sys.executable, "-m", "gazette.cli.main", "journals", "list"],
        env=env,
        capture_output=True,
        timeout=cli_run.CLI_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )
    assert "UNAVAILABLE" in one_error_line(proc)


def test_reset_head_clears_index_has_greater_offset(cluster: LocalCluster) -> None:
    """Reference 4.5: a single-replica restart loses the write position; appends are refused until
    `journals reset-head` re-syncs at the indexed head, and nothing persisted is overwritten."""
    journal = "cli/reset/one"
    client = cluster.client()
    client.apply_journals([cluster.journal_spec(journal)])
    client.append(journal, b"persisted\n")
    cluster.stop_broker(0)  # graceful: the spool is persisted
    cluster.restart_broker(0)
    refused = gazette(cluster, "journals", "append", journal, "--data", "refused\n")
    assert refused.returncode != 0 and b"INDEX_HAS_GREATER_OFFSET" in refused.stderr
    assert b"reset-head" in refused.stderr  # the error names the fix
    out = ok(gazette(cluster, "journals", "reset-head", "-l", f"name={journal}"))
    assert f"{journal}: head at 10" in out  # len(b"persisted\n")
    ok(gazette(cluster, "journals", "append", journal, "--data", "accepted\n"))
    assert client.read_all(journal) == b"persisted\naccepted\n"

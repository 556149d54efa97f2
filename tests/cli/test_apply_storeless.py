"""`gazette journals apply` warns of each journal it applies without fragment stores (its content
lives only in its brokers' spools), on stderr after its usual output; journals with stores are quiet."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path

import cli_run
import pytest
from cli_run import ok

from gazette.local.cluster import LocalCluster

SPECS = """\
name: warn/
children:
  - name: warn/kept
    fragment: {{stores: ["{store}"]}}
  - name: warn/spooled
"""


@pytest.fixture
def cluster(etcd, etcd_root, tmp_path) -> Iterator[LocalCluster]:
    with LocalCluster(
        brokers=1, mode="inprocess", etcd=etcd.endpoint, root=etcd_root, data_dir=str(tmp_path / "d")
    ) as c:
        yield c


def _specs(tmp_path: Path, store: str) -> str:
    path = tmp_path / "specs.yaml"
    path.write_text(textwrap.dedent(SPECS.format(store=store)))
    return str(path)


@pytest.mark.parametrize("dry_run", [True, False])
def test_apply_warns_of_journals_without_stores(cluster: LocalCluster, tmp_path: Path, dry_run: bool) -> None:
    args = [
        "journals",
        "apply",
        "--specs",
        _specs(tmp_path, cluster.store),
        *(["--dry-run"] if dry_run else []),
    ]
    proc = cli_run.gazette(*args, env={"GAZETTE_BROKER": cluster.broker_endpoints[0]})
    out = ok(proc)
    assert ("upsert warn/spooled" in out) if dry_run else ("applied 2 change(s)" in out)
    warnings = proc.stderr.decode().strip().splitlines()
    assert warnings == [
        "warning: journal warn/spooled has no fragment stores: its content lives only in its brokers' spools, "
        "and is lost once no replica holding it is left"
    ]

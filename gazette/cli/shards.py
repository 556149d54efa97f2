"""`gazette shards list|apply|stat|unassign|inspect` and `gazette consumer run` (reference 8.3).

Shard commands reach a consumer application's Shard service through `--consumer` (a member's
address) or through `--etcd` and `--root` (its members, as announced). Shard YAML is Gazette's
shardspace: a `common:` map inherited by each entry of `shards:`; an entry's `revision` makes its
apply a compare-and-swap (0 or omitted: must not exist, -1: any) and `delete: true` removes it.
`shards list -o yaml` prints that format, so list, edit, apply round-trips.
"""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
import yaml
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from gazette.protocol.errors import ValidationError

if TYPE_CHECKING:
    from gazette.consumer.client import ShardChange, ShardClient
    from gazette.consumer.consumer import ShardInfo

shards_app = typer.Typer(no_args_is_help=True, help="List, apply, stat, unassign and inspect shards.")
consumer_app = typer.Typer(no_args_is_help=True, help="Run a consumer application member.")

console = Console()

ConsumerOpt = typer.Option(
    None, "--consumer", envvar="GAZETTE_CONSUMER", help="A consumer member's address (its Shard service)."
)
EtcdOpt = typer.Option(None, "--etcd", envvar="GAZETTE_ETCD", help="etcd endpoint (with --root).")
RootOpt = typer.Option(
    None, "--root", envvar="GAZETTE_CONSUMER_ROOT", help="The consumer application's etcd root (with --etcd)."
)
SHARD_KEYS = ("revision", "delete")


class Output(StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"


def _client(consumer: str | None, etcd: str | None, root: str | None) -> ShardClient:
    from gazette.consumer.client import ShardClient

    if consumer is None and not (etcd and root):
        raise ValidationError(
            "no consumer to ask: pass --consumer http://host:port (or GAZETTE_CONSUMER), "
            "or --etcd and --root (the consumer application's etcd root)"
        )
    if consumer is not None:
        return ShardClient(consumer)
    return ShardClient(etcd=etcd, root=root)


def _table(rows: list[dict[str, Any]], columns: list[str]) -> None:
    table = Table()
    for c in columns:
        table.add_column(c)
    for r in rows:
        table.add_row(*(str(r.get(c, "")) for c in columns))
    if console.is_terminal:
        console.print(table)
    else:  # piped: whole cells at the table's natural width
        natural = Measurement.get(console, console.options.update(width=1 << 16), table).maximum
        Console(width=max(natural, console.width)).print(table)


# ---- the shardspace YAML


def shard_entry(info: ShardInfo) -> dict[str, Any]:
    """A listed shard as a `shards:` entry (its spec, labels as a map, and its revision)."""
    d = info.spec.to_dict()
    d["labels"] = dict(info.spec.labels)
    d["revision"] = info.mod_revision
    return d


def dump_shards_yaml(infos: list[ShardInfo]) -> str:
    return yaml.safe_dump({"shards": [shard_entry(i) for i in infos]}, sort_keys=False)


def load_shards_yaml(text: str) -> list[ShardChange]:
    """Parses shardspace YAML into changes; every error names the entry and the rule."""
    from gazette.consumer.client import ShardChange
    from gazette.consumer.spec import ShardSpec

    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValidationError(f"shard specs are not valid YAML: {' '.join(str(exc).split())}") from None
    if not isinstance(doc, dict) or set(doc) - {"common", "shards"} or "shards" not in doc:
        raise ValidationError(
            'shard specs must be a map with "shards" (a list) and optionally "common" (a map)'
        )
    common = doc.get("common") or {}
    entries = doc["shards"] or []
    if not isinstance(common, dict):
        raise ValidationError(f'"common" is a {type(common).__name__}, expected a map of ShardSpec fields')
    if not isinstance(entries, list):
        raise ValidationError(f'"shards" is a {type(entries).__name__}, expected a list')
    for key in SHARD_KEYS + ("id",):
        if key in common:
            raise ValidationError(f'"common" may not set "{key}" (it belongs to each shard)')
    changes = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or "id" not in entry:
            raise ValidationError(f"shards[{i}] is not a map with an id")
        fields = {**common, **entry}
        if isinstance(common.get("labels"), dict) and isinstance(entry.get("labels"), dict):
            fields["labels"] = {**common["labels"], **entry["labels"]}
        revision = fields.pop("revision", 0)
        delete = fields.pop("delete", False)
        if isinstance(revision, bool) or not isinstance(revision, int) or revision < -1:
            raise ValidationError(
                f'shard "{entry["id"]}" has revision {revision!r} (expected -1, 0 or a revision)'
            )
        if not isinstance(delete, bool):
            raise ValidationError(f'shard "{entry["id"]}" has delete {delete!r} (expected true or false)')
        if delete:
            changes.append(ShardChange(delete=str(entry["id"]), expect_mod_revision=revision or -1))
        else:
            changes.append(ShardChange(upsert=ShardSpec.from_dict(fields), expect_mod_revision=revision))
    return changes


# ---- commands


@shards_app.command("list")
def shards_list(
    selector: str = typer.Option("", "-l", "--selector", help='Label selector, e.g. "id=count-000".'),
    output: Output = typer.Option(Output.table, "-o", "--output"),
    consumer: str | None = ConsumerOpt,
    etcd: str | None = EtcdOpt,
    root: str | None = RootOpt,
) -> None:
    """List shards with their replicas' statuses (and the errors of FAILED ones)."""
    with _client(consumer, etcd, root) as c:
        infos = c.list_shards(selector)
    if output == Output.yaml:
        print(dump_shards_yaml(infos), end="")
        return
    rows = []
    for info in infos:
        primary = info.primary
        rows.append(
            {
                "id": info.spec.id,
                "status": primary.status.code.name if primary else "",
                "primary": f"{primary.zone}#{primary.suffix}" if primary else "",
                "replicas": ", ".join(f"{r.zone}#{r.suffix}:{r.status.code.name}" for r in info.replicas),
                "revision": info.mod_revision,
                "sources": ", ".join(s.journal for s in info.spec.sources),
                "errors": "; ".join(e for r in info.replicas for e in r.status.errors),
                "spec": info.spec.to_dict(),
                "replica_list": [
                    {
                        "zone": r.zone,
                        "suffix": r.suffix,
                        "slot": r.slot,
                        "status": r.status.code.name,
                        "errors": list(r.status.errors),
                        "endpoint": r.endpoint,
                    }
                    for r in info.replicas
                ],
            }
        )
    if output == Output.json:
        for r in rows:
            r["replicas"] = r.pop("replica_list")
        print(json.dumps(rows, indent=2))
    else:
        _table(rows, ["id", "status", "primary", "replicas", "revision", "sources", "errors"])


@shards_app.command("apply")
def shards_apply(
    specs: Path = typer.Option(Path("-"), "--specs", help="Shardspace YAML ('-' = stdin)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Validate and print, apply nothing."),
    consumer: str | None = ConsumerOpt,
    etcd: str | None = EtcdOpt,
    root: str | None = RootOpt,
) -> None:
    """Create, update or delete shards (source journals must exist with a registered framing)."""
    text = sys.stdin.read() if str(specs) == "-" else specs.read_text()
    changes = load_shards_yaml(text)
    if dry_run:
        for ch in changes:
            what = "delete" if ch.delete else "upsert"
            console.print(f"{what} {ch.shard} (expect revision {ch.expect_mod_revision})", soft_wrap=True)
        return
    with _client(consumer, etcd, root) as c:
        revision = c.apply_shards(changes)
    console.print(f"applied {len(changes)} change(s) at etcd revision {revision}")


def _offsets(pairs: list[str]) -> dict[str, int]:
    out = {}
    for pair in pairs:
        journal, sep, offset = pair.rpartition("=")
        if not sep or not journal or not offset.isdigit():
            raise ValidationError(f'--read-through "{pair}" is not of the form journal=offset')
        out[journal] = int(offset)
    return out


@shards_app.command("stat")
def shards_stat(
    shard: str = typer.Argument(..., help="Shard id."),
    read_through: list[str] = typer.Option(
        [], "-r", "--read-through", help="journal=offset: wait until the shard has read through it."
    ),
    timeout: float | None = typer.Option(None, "--timeout", help="Give up after this many seconds."),
    output: Output = typer.Option(Output.table, "-o", "--output"),
    consumer: str | None = ConsumerOpt,
    etcd: str | None = EtcdOpt,
    root: str | None = RootOpt,
) -> None:
    """Read-your-writes: wait until the shard's primary read through the offsets; print its progress."""
    offsets = _offsets(read_through)
    with _client(consumer, etcd, root) as c:
        stat = c.stat_shard(shard, offsets, timeout=timeout)
    doc = {
        "shard": stat.shard,
        "primary": f"{stat.member[0]}#{stat.member[1]}",
        "read_through": stat.read_through,
        "publish_at": stat.publish_at,
    }
    if output == Output.json:
        print(json.dumps(doc, indent=2))
    elif output == Output.yaml:
        print(yaml.safe_dump(doc, sort_keys=False), end="")
    else:
        journals = sorted(set(stat.read_through) | set(stat.publish_at))
        rows = [
            {
                "journal": j,
                "read_through": stat.read_through.get(j, ""),
                "publish_at": stat.publish_at.get(j, ""),
            }
            for j in journals
        ]
        console.print(f"shard {stat.shard} (primary {doc['primary']})", soft_wrap=True)
        _table(rows, ["journal", "read_through", "publish_at"])


@shards_app.command("unassign")
def shards_unassign(
    shards: list[str] = typer.Argument(None, help="Shard ids (or select them with -l)."),
    selector: str = typer.Option("", "-l", "--selector", help="Unassign the shards this selects."),
    failed: bool = typer.Option(False, "--failed", help="Only remove FAILED assignments."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print what would be removed."),
    consumer: str | None = ConsumerOpt,
    etcd: str | None = EtcdOpt,
    root: str | None = RootOpt,
) -> None:
    """Remove shards' primary assignments (--failed: their FAILED ones) so they are placed again."""
    ids = list(shards or [])
    if bool(ids) == bool(selector):
        raise ValidationError("unassign takes shard ids or a selector (-l), exactly one of the two")
    with _client(consumer, etcd, root) as c:
        if selector:
            ids = [i.spec.id for i in c.list_shards(selector)]
        acted = c.unassign(ids, only_failed=failed, dry_run=dry_run) if ids else []
    for shard in acted:
        console.print(f"{'would unassign' if dry_run else 'unassigned'} {shard}", soft_wrap=True)
    console.print(f"{len(acted)} shard(s) {'to unassign' if dry_run else 'unassigned'}")


@shards_app.command("inspect")
def shards_inspect(
    shard: str = typer.Argument(..., help="Shard id."),
    consumer: str | None = ConsumerOpt,
    etcd: str | None = EtcdOpt,
    root: str | None = RootOpt,
) -> None:
    """Print the primary's last committed checkpoint, sequencer state and recent transactions (JSON)."""
    import dataclasses

    with _client(consumer, etcd, root) as c:
        ins = c.inspect(shard)
    doc = {
        "shard": ins.shard,
        "primary": f"{ins.member[0]}#{ins.member[1]}",
        "checkpoint": ins.checkpoint.to_dict(),
        "sequencer": ins.sequencer,
        "queued": ins.queued,
        "transactions_completed": ins.transactions_completed,
        "transactions": [dataclasses.asdict(t) for t in ins.transactions],
        "read_through": ins.read_through,
        "publish_at": ins.publish_at,
    }
    print(json.dumps(doc, indent=2))


@consumer_app.command("run")
def consumer_run(
    application: str | None = typer.Argument(None, help="module:Class of the Application."),
    app_args: str = typer.Option("{}", "--app-args", help="JSON object of keyword arguments for Class."),
    app_pickle: str | None = typer.Option(None, "--app-pickle", help="A cloudpickled Application instead."),
    etcd: str = typer.Option(..., "--etcd", envvar="GAZETTE_ETCD"),
    broker: str = typer.Option("http://127.0.0.1:8080", "--broker", envvar="GAZETTE_BROKER"),
    root: str = typer.Option(
        ..., "--root", envvar="GAZETTE_CONSUMER_ROOT", help="The application's etcd root."
    ),
    zone: str = typer.Option("local", "--zone"),
    suffix: str | None = typer.Option(None, "--suffix"),
    host: str = typer.Option("127.0.0.1", "--host"),
    port: int = typer.Option(
        0, "--port", help="Shard service port; 0 picks a free one (reported on stdout)."
    ),
    shard_limit: int = typer.Option(1024, "--shard-limit"),
    lease_ttl: int = typer.Option(20, "--lease-ttl"),
    max_hot_standbys: int = typer.Option(3, "--max-hot-standbys"),
    exit_drain: float = typer.Option(30.0, "--exit-drain", help="seconds a SIGTERM waits for shards to move"),
    log_level: str = typer.Option("WARNING", "--log-level"),
) -> None:
    """Run one member of a consumer application until SIGTERM (graceful: its shards move first)."""
    from gazette.consumer.consumer import Consumer
    from gazette.consumer.serve import load_application, run

    try:
        kwargs = json.loads(app_args)
    except ValueError as exc:
        raise ValidationError(f"--app-args {app_args!r} is not JSON: {exc}") from None
    if not isinstance(kwargs, dict):
        raise ValidationError(f"--app-args {app_args!r} is not a JSON object")
    app = load_application(application, pickle_path=app_pickle, kwargs=kwargs)
    consumer = Consumer(
        app, etcd, broker, root=root, zone=zone, suffix=suffix, shard_limit=shard_limit, lease_ttl_s=lease_ttl,
        max_hot_standbys=max_hot_standbys, exit_drain_s=exit_drain, host=host, port=port,
    )  # fmt: skip
    run(consumer, log_level)

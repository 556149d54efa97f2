"""`gazette shards list|apply|edit|stat|unassign|inspect|recover|prune` and `gazette consumer run`
(docs/semantics.md#shard-commands).

Shard commands reach a consumer application's Shard service, Gazette's consumer.Shard, through
`--consumer` (a member's address; a Gazette consumer's too) or through `--etcd` and `--root` (its
members, as announced). They take gazctl's files and flags where gazctl has them: shard YAML is
Gazette's shardspace (consumer/shardspace), a `common:` ShardSpec whose fields each entry of
`shards:` inherits where its own are zero (labels: per label name, the entry's win), entries with
gazctl's field names (labels as name/value lists; mappings are accepted too), an optional `comment`,
`revision` making the apply a compare-and-swap (0 or omitted: must not exist, -1: any) and
`delete: true` removing the shard. `shards list -o yaml` prints that format hoisted as gazctl prints
it (fields shared by every shard in `common:`), so list, edit, apply round-trips, with gazctl too.
`recover` and `prune` read shard specs and hints straight from etcd (`--etcd`, `--root`; no member
needs to run) and the log through `--broker`.
"""

from __future__ import annotations

import dataclasses
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

from gazette.protocol.errors import PeerError, ValidationError

if TYPE_CHECKING:
    from gazette.client.aio import AsyncClient
    from gazette.consumer.client import ShardChange, ShardClient
    from gazette.consumer.consumer import ShardInfo
    from gazette.consumer.spec import ShardSpec

shards_app = typer.Typer(no_args_is_help=True, help="List, apply, edit, stat, unassign and inspect shards.")
consumer_app = typer.Typer(no_args_is_help=True, help="Run a consumer application member.")

console = Console()

ConsumerOpt = typer.Option(
    None, "--consumer", envvar="GAZETTE_CONSUMER", help="A consumer member's address (its Shard service)."
)
EtcdOpt = typer.Option(None, "--etcd", envvar="GAZETTE_ETCD", help="etcd endpoint (with --root).")
RootOpt = typer.Option(
    None, "--root", envvar="GAZETTE_CONSUMER_ROOT", help="The consumer application's etcd root (with --etcd)."
)
BrokerOpt = typer.Option(
    "http://127.0.0.1:8080", "--broker", envvar="GAZETTE_BROKER", help="Broker address (for the journals)."
)
TimeoutOpt = typer.Option(
    None,
    "--timeout",
    envvar="GAZETTE_TIMEOUT",
    help="Give up on each call after this many seconds (default 60; 0: never).",
)
MaxTxnSizeOpt = typer.Option(
    0, "--max-txn-size", help="Apply at most this many changes per etcd transaction (0: all in one)."
)
# A client's security, as gazctl's --consumer.* flags (and their CONSUMER_* environment); the same
# keys and TLS config serve the brokers these commands read journals from.
AuthKeysOpt = typer.Option(
    None, "--auth-keys", envvar=["CONSUMER_AUTH_KEYS", "AUTH_KEYS"], show_envvar=True,
    help="Base64 keys separated by whitespace or commas; the first signs each call's authorization token.",
)  # fmt: skip
CertFileOpt = typer.Option(
    None,
    "--cert-file",
    envvar="CONSUMER_CERT_FILE",
    help="Client TLS certificate (PEM) for https:// members.",
)
CertKeyFileOpt = typer.Option(
    None, "--cert-key-file", envvar="CONSUMER_CERT_KEY_FILE", help="Its private key."
)
TrustedCAFileOpt = typer.Option(
    None, "--trusted-ca-file", envvar="CONSUMER_TRUSTED_CA_FILE",
    help="CA (PEM) that https:// members' certificates must chain to (default: the system's roots).",
)  # fmt: skip
LogFormatOpt = typer.Option(
    None, "--log-format", "--log.format", envvar="LOG_FORMAT",
    help="How to log to stderr: text (the default), json (one object per line) or color.",
)  # fmt: skip
LogLevelOpt = typer.Option(
    None, "--log-level", "--log.level", envvar="LOG_LEVEL",
    help="Least level logged: trace, debug, info, warn(ing), error, fatal (default warning).",
)  # fmt: skip
LAG_STAT_TIMEOUT_S = 10.0  # `list --lag` gives up on a primary's Stat after this long


class Output(StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"


class LogFormat(StrEnum):
    """Gazette's --log.format choices (gazette.logsetup)."""

    text = "text"
    json = "json"
    color = "color"


def client_timeout(seconds: float | None) -> float | None:
    """`--timeout` as a client's default timeout: not given, the clients' default; 0, no bound."""
    from gazette.client.timeouts import DEFAULT_TIMEOUT_S

    if seconds is None:
        return DEFAULT_TIMEOUT_S
    return None if seconds == 0 else seconds


def _client(
    consumer: str | None,
    etcd: str | None,
    root: str | None,
    timeout: float | None = None,
    auth_keys: str | None = None,
    cert_file: str | None = None,
    cert_key_file: str | None = None,
    trusted_ca_file: str | None = None,
) -> ShardClient:
    from gazette.auth.tls import TLSConfig
    from gazette.consumer.client import ShardClient

    tls = TLSConfig.of(cert_file, cert_key_file, trusted_ca_file)

    if consumer is None and not (etcd and root):
        raise ValidationError(
            "no consumer to ask: pass --consumer http://host:port (or GAZETTE_CONSUMER), "
            "or --etcd and --root (the consumer application's etcd root)"
        )
    if consumer is not None:
        return ShardClient(consumer, timeout=client_timeout(timeout), auth_keys=auth_keys, tls=tls)
    return ShardClient(etcd=etcd, root=root, timeout=client_timeout(timeout), auth_keys=auth_keys, tls=tls)


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


# ---- the shardspace YAML (gazette.consumer.shardspace)


def dump_shards_yaml(infos: list[ShardInfo]) -> str:
    """Listed shards as gazctl prints them: hoisted shardspace YAML with each shard's revision."""
    from gazette.consumer.shardspace import dump_shardspace

    return dump_shardspace((i.spec, i.mod_revision) for i in infos)


def load_shards_yaml(text: str) -> list[ShardChange]:
    """Parses shardspace YAML (gazctl's) into changes; every error names the entry and the rule."""
    from gazette.consumer.shardspace import load_shardspace

    return load_shardspace(text)


def apply_changes(client: ShardClient, changes: list[ShardChange], max_txn_size: int = 0) -> int:
    """Applies `changes` in one transaction, or (`max_txn_size` > 0) in batches of at most that many,
    as gazctl's --max-txn-size does (earlier batches stay applied if a later one fails); returns the
    etcd revision of the last."""
    if max_txn_size < 0:
        raise ValidationError(f"--max-txn-size {max_txn_size} is negative (0: one transaction)")
    size = max_txn_size or max(len(changes), 1)
    revision = 0
    for begin in range(0, len(changes), size):
        revision = client.apply_shards(changes[begin : begin + size])
    return revision


# ---- commands


@shards_app.command("list")
def shards_list(
    selector: str = typer.Option("", "-l", "--selector", help='Label selector, e.g. "id=count-000".'),
    output: Output = typer.Option(Output.table, "-o", "--output"),
    lag: bool = typer.Option(
        False, "--lag", help="Add each shard's read lag: source write heads minus its checkpoint's offsets."
    ),
    verbose: bool = typer.Option(False, "-v", "--verbose", help="With --lag: the lag of each source too."),
    label_columns: list[str] = typer.Option(
        [], "-L", "--label-columns", help="Labels to add as table columns (repeatable), as gazctl's -L."
    ),
    rf: bool = typer.Option(
        False, "--rf", help="Add the replication factor column (1 + hot_standbys, 0 if disabled)."
    ),
    _primary: bool = typer.Option(
        False, "-p", "--primary", help="Accepted for gazctl's sake: the table always shows the primary."
    ),
    _replicas: bool = typer.Option(
        False, "-r", "--replicas", help="Accepted for gazctl's sake: the table always shows the replicas."
    ),
    consumer: str | None = ConsumerOpt,
    auth_keys: str | None = AuthKeysOpt,
    cert_file: str | None = CertFileOpt,
    cert_key_file: str | None = CertKeyFileOpt,
    trusted_ca_file: str | None = TrustedCAFileOpt,
    etcd: str | None = EtcdOpt,
    root: str | None = RootOpt,
    broker: str = BrokerOpt,
    timeout: float | None = TimeoutOpt,
) -> None:
    """List shards with their replicas' statuses (and the errors of FAILED ones).

    The meta-label `id` selects shards by id, e.g. -l "id in (count-000, count-001)". -o yaml prints
    the shardspace gazctl prints (and `shards apply` reads)."""
    with _client(consumer, etcd, root, timeout, auth_keys, cert_file, cert_key_file, trusted_ca_file) as c:
        infos = c.list_shards(selector)
        lags = shard_lags(c, infos, broker) if lag and output != Output.yaml else {}
    if output == Output.yaml:
        print(dump_shards_yaml(infos), end="")
        return
    rows = []
    for info in infos:
        primary = info.primary
        lagged = lags.get(info.spec.id)
        rows.append(
            {
                "id": info.spec.id,
                "status": primary.status.code.name if primary else "",
                "primary": f"{primary.zone}#{primary.suffix}" if primary else "",
                "replicas": ", ".join(f"{r.zone}#{r.suffix}:{r.status.code.name}" for r in info.replicas),
                "revision": info.mod_revision,
                "sources": ", ".join(s.journal for s in info.spec.sources),
                "errors": "; ".join(e for r in info.replicas for e in r.status.errors),
                "rf": 0 if info.spec.disable else 1 + info.spec.hot_standbys,
                **{f"label {n}": ",".join(info.spec.labels.values_of(n)) or "<none>" for n in label_columns},
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
        if lag:
            rows[-1]["lag"] = "" if lagged is None else sum(lagged.values())
            rows[-1]["source_lag"] = lagged
            rows[-1]["source lag"] = ", ".join(f"{j}={n}" for j, n in (lagged or {}).items())
    if output == Output.json:
        for r in rows:
            r["replicas"] = r.pop("replica_list")
            r.pop("source lag", None)
            for n in label_columns:
                r.pop(f"label {n}", None)
        print(json.dumps(rows, indent=2))
    else:
        columns = ["id", "status", "primary", "replicas", "revision", "sources", "errors"]
        columns += (["rf"] if rf else []) + [f"label {n}" for n in label_columns]
        columns += (["lag"] + (["source lag"] if verbose else [])) if lag else []
        _table(rows, columns)


def shard_lags(client: ShardClient, infos: list[ShardInfo], broker: str) -> dict[str, dict[str, int] | None]:
    """Per shard: bytes of each source not yet read, i.e. the source's write head minus where the
    shard's last completed transaction read through (Stat's read_through, as gazctl's --lag; at least
    the source's min_offset), so it works with Gazette consumers too. None for a shard without a
    PRIMARY to ask. Journal calls share the shard client's timeout."""
    from gazette.client.sync import Client
    from gazette.consumer.status import ReplicaCode
    from gazette.protocol.validate import split_journal_meta

    out: dict[str, dict[str, int] | None] = {}
    heads: dict[str, int] = {}
    with Client(broker, timeout=client.timeout, auth_keys=client.aio.auth, tls=client.aio.tls) as journals:
        for info in infos:
            primary = info.primary
            if primary is None or primary.status.code != ReplicaCode.PRIMARY:
                out[info.spec.id] = None
                continue
            read_through = client.stat_shard(info.spec.id, timeout=LAG_STAT_TIMEOUT_S).read_through
            per_source = {}
            for source in info.spec.sources:
                if source.journal not in heads:
                    heads[source.journal] = journals.read_head(split_journal_meta(source.journal)[0])
                start = max(read_through.get(source.journal, 0), source.min_offset)
                per_source[source.journal] = max(heads[source.journal] - start, 0)
            out[info.spec.id] = per_source
    return out


@shards_app.command("apply")
def shards_apply(
    specs: Path = typer.Option(Path("-"), "--specs", help="Shardspace YAML ('-' = stdin)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Validate and print, apply nothing."),
    max_txn_size: int = MaxTxnSizeOpt,
    consumer: str | None = ConsumerOpt,
    auth_keys: str | None = AuthKeysOpt,
    cert_file: str | None = CertFileOpt,
    cert_key_file: str | None = CertKeyFileOpt,
    trusted_ca_file: str | None = TrustedCAFileOpt,
    etcd: str | None = EtcdOpt,
    root: str | None = RootOpt,
    timeout: float | None = TimeoutOpt,
) -> None:
    """Create, update or delete shards from shardspace YAML, gazctl's (source journals must exist
    with a registered framing). An entry's revision makes it a compare-and-swap: 0 or omitted, the
    shard must not exist; -1, any revision; `delete: true` removes the shard."""
    text = sys.stdin.read() if str(specs) == "-" else specs.read_text()
    changes = load_shards_yaml(text)
    if dry_run:
        for ch in changes:
            what = "delete" if ch.delete else "upsert"
            console.print(f"{what} {ch.shard} (expect revision {ch.expect_mod_revision})", soft_wrap=True)
        return
    with _client(consumer, etcd, root, timeout, auth_keys, cert_file, cert_key_file, trusted_ca_file) as c:
        revision = apply_changes(c, changes, max_txn_size)
    console.print(f"applied {len(changes)} change(s) at etcd revision {revision}")


@shards_app.command("edit")
def shards_edit(
    selector: str = typer.Option(
        ..., "-l", "--selector", help='Label selector of the shards to edit, e.g. "id=count-000".'
    ),
    max_txn_size: int = MaxTxnSizeOpt,
    consumer: str | None = ConsumerOpt,
    auth_keys: str | None = AuthKeysOpt,
    cert_file: str | None = CertFileOpt,
    cert_key_file: str | None = CertKeyFileOpt,
    trusted_ca_file: str | None = TrustedCAFileOpt,
    etcd: str | None = EtcdOpt,
    root: str | None = RootOpt,
    timeout: float | None = TimeoutOpt,
) -> None:
    """Edit shards in $EDITOR (as gazctl shards edit): the selected shards' shardspace YAML with
    revisions is opened, and what is saved is applied. A failed apply opens the edits again with the
    error on top; saving them unchanged (or empty) gives up."""
    from gazette.cli.edit import edit_and_apply

    with _client(consumer, etcd, root, timeout, auth_keys, cert_file, cert_key_file, trusted_ca_file) as c:
        infos = c.list_shards(selector)
        if not infos:
            raise ValidationError(f'no shards match selector "{selector}"')

        def apply(edited: str) -> str:
            changes = load_shards_yaml(edited)
            revision = apply_changes(c, changes, max_txn_size)
            return f"applied {len(changes)} change(s) at etcd revision {revision}"

        edit_and_apply(dump_shards_yaml(infos), "shards", "a shard", apply, console)


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
    timeout: float | None = typer.Option(
        None,
        "--timeout",
        envvar="GAZETTE_TIMEOUT",
        help="Give up after this many seconds (default 60; 0: never).",
    ),
    output: Output = typer.Option(Output.table, "-o", "--output"),
    consumer: str | None = ConsumerOpt,
    auth_keys: str | None = AuthKeysOpt,
    cert_file: str | None = CertFileOpt,
    cert_key_file: str | None = CertKeyFileOpt,
    trusted_ca_file: str | None = TrustedCAFileOpt,
    etcd: str | None = EtcdOpt,
    root: str | None = RootOpt,
) -> None:
    """Read-your-writes: wait until the shard's primary read through the offsets; print its progress."""
    offsets = _offsets(read_through)
    with _client(consumer, etcd, root, timeout, auth_keys, cert_file, cert_key_file, trusted_ca_file) as c:
        stat = c.stat_shard(shard, offsets)
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
    auth_keys: str | None = AuthKeysOpt,
    cert_file: str | None = CertFileOpt,
    cert_key_file: str | None = CertKeyFileOpt,
    trusted_ca_file: str | None = TrustedCAFileOpt,
    etcd: str | None = EtcdOpt,
    root: str | None = RootOpt,
    timeout: float | None = TimeoutOpt,
) -> None:
    """Remove shards' FAILED assignments and their primaries' (--failed: the FAILED ones only), as
    gazctl shards unassign does, so they are placed again."""
    from gazette.protocol.selector import LabelSelector

    ids = list(shards or [])
    if bool(ids) == bool(selector):
        raise ValidationError("unassign takes shard ids or a selector (-l), exactly one of the two")
    with _client(consumer, etcd, root, timeout, auth_keys, cert_file, cert_key_file, trusted_ca_file) as c:
        if selector:
            ids = [i.spec.id for i in c.list_shards(selector)]
        else:  # named shards must exist (the Shard service passes over unknown ones)
            known = {i.spec.id for i in c.list_shards(LabelSelector([("id", s, False) for s in ids]))}
            missing = [s for s in ids if s not in known]
            if missing:
                raise ValidationError(f'shard "{missing[0]}" is not a shard of this consumer application')
        acted = c.unassign(ids, only_failed=failed, dry_run=dry_run) if ids else []
    for shard in acted:
        console.print(f"{'would unassign' if dry_run else 'unassigned'} {shard}", soft_wrap=True)
    console.print(f"{len(acted)} shard(s) {'to unassign' if dry_run else 'unassigned'}")


@shards_app.command("inspect")
def shards_inspect(
    shard: str = typer.Argument(..., help="Shard id."),
    consumer: str | None = ConsumerOpt,
    auth_keys: str | None = AuthKeysOpt,
    cert_file: str | None = CertFileOpt,
    cert_key_file: str | None = CertKeyFileOpt,
    trusted_ca_file: str | None = TrustedCAFileOpt,
    etcd: str | None = EtcdOpt,
    root: str | None = RootOpt,
    timeout: float | None = TimeoutOpt,
) -> None:
    """Print the primary's last committed checkpoint, sequencer state, recent transactions and side
    effects (committing, committed but unpublished, published, pending cleanup; null without any) as JSON."""
    with _client(consumer, etcd, root, timeout, auth_keys, cert_file, cert_key_file, trusted_ca_file) as c:
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
        "side_effects": ins.side_effects.to_dict() if ins.side_effects is not None else None,
    }
    print(json.dumps(doc, indent=2))


# ---- recovery logs


def _shard_specs(
    etcd: str | None, root: str | None, shards: list[str], selector: str, what: str
) -> list[ShardSpec]:
    """The specs of the named shards (or of those `selector` picks), read from etcd."""
    from gazette.client.loop import default_loop
    from gazette.consumer.consumer import list_shards
    from gazette.consumer.service import shard_labels
    from gazette.keyspace.etcd import connect
    from gazette.protocol.selector import LabelSelector

    if not (etcd and root):
        raise ValidationError(
            f"shards {what} reads shard specs and hints from etcd: pass --etcd and --root "
            "(or GAZETTE_ETCD and GAZETTE_CONSUMER_ROOT)"
        )
    parsed = LabelSelector.parse(selector) if selector else None

    async def run() -> list[ShardSpec]:
        client = connect(etcd)
        try:
            return [i.spec for i in await list_shards(client, root)]
        finally:
            await client.close()

    specs = {s.id: s for s in _etcd_errors(etcd, lambda: default_loop().run(run()))}
    if parsed is not None:
        return [s for s in specs.values() if parsed.matches(shard_labels(s))]
    missing = [s for s in shards if s not in specs]
    if missing:
        raise ValidationError(f'shard "{missing[0]}" is not a shard under consumer root "{root}"')
    return [specs[s] for s in shards]


def _run_with_journals(broker: str, etcd: str, fn: Any, timeout: float | None = None) -> Any:
    """Runs `await fn(async journal client, etcd client)` on the facade loop, closing both; `timeout`
    is `--timeout` (the journal client's default for each call)."""
    from gazette.client.aio import AsyncClient
    from gazette.client.loop import default_loop
    from gazette.keyspace.etcd import connect

    async def run() -> Any:
        journals, etcd_client = AsyncClient(broker, timeout=client_timeout(timeout)), connect(etcd)
        try:
            return await fn(journals, etcd_client)
        finally:
            await journals.close()
            await etcd_client.close()

    return _etcd_errors(etcd, lambda: default_loop().run(run()))


def _etcd_errors(etcd: str, fn: Any) -> Any:
    """`fn()`, with etcd client failures turned into one-line PeerErrors naming the endpoint."""
    import aetcd

    try:
        return fn()
    except aetcd.ClientError as exc:
        raise PeerError(f"etcd at {etcd}: {exc}") from None


@shards_app.command("recover")
def shards_recover(
    shard: str = typer.Option(..., "--shard", "--id", help="Shard id."),
    directory: Path = typer.Option(..., "--dir", "-d", help="A new or empty directory to play the log into."),
    etcd: str | None = EtcdOpt,
    root: str | None = RootOpt,
    broker: str = BrokerOpt,
    output: Output = typer.Option(Output.table, "-o", "--output"),
    timeout: float | None = TimeoutOpt,
) -> None:
    """Play a shard's recovery log into a directory (from its stored hints) to inspect its store offline."""
    from gazette.consumer.recoverylog.offline import check_empty_directory, recover_directory

    (spec,) = _shard_specs(etcd, root, [shard], "", "recover")
    check_empty_directory(str(directory))  # before any network call
    assert etcd is not None

    async def run(journals: AsyncClient, etcd_client: Any) -> Any:
        return await recover_directory(journals, etcd_client, spec, str(directory))

    got = _run_with_journals(broker, etcd, run, timeout)
    if output != Output.table:
        doc = {**dataclasses.asdict(got), "files": [{"path": p, "bytes": n} for p, n in got.files]}
        print(
            json.dumps(doc, indent=2) if output == Output.json else yaml.safe_dump(doc, sort_keys=False),
            end="\n" if output == Output.json else "",
        )
        return
    hints = f"hints {got.hints_key}" if got.hints_key else "no stored hints"
    console.print(
        f"recovered shard {got.shard} from {got.log} [{got.start_offset}, {got.end_offset}) ({hints}): "
        f"{got.applied} operations applied, {got.skipped} skipped, {len(got.files)} file(s) in {got.directory}",
        soft_wrap=True, markup=False,
    )  # fmt: skip
    _table([{"file": p, "bytes": n} for p, n in got.files], ["file", "bytes"])


@shards_app.command("prune")
def shards_prune(
    shards: list[str] = typer.Option([], "--shard", "--id", help="Shard id (repeatable; or select with -l)."),
    selector: str = typer.Option(
        "", "-l", "--selector", help="Prune the recovery logs of the shards this selects."
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print what would be removed, remove nothing."),
    etcd: str | None = EtcdOpt,
    root: str | None = RootOpt,
    broker: str = BrokerOpt,
    timeout: float | None = TimeoutOpt,
) -> None:
    """Delete recovery-log fragments that no stored hints (primary or backup) need any more."""
    from gazette.consumer.recoverylog.prune import LogPrune, prune_recovery_log

    if bool(shards) == bool(selector):
        raise ValidationError("prune takes --shard ids or a selector (-l), exactly one of the two")
    specs = _shard_specs(etcd, root, shards, selector, "prune")
    if selector:
        specs = [s for s in specs if s.recovery_log_prefix]
    assert etcd is not None

    async def run(journals: AsyncClient, etcd_client: Any) -> list[LogPrune]:
        return [await prune_recovery_log(journals, etcd_client, s, dry_run=dry_run) for s in specs]

    total = 0
    for result in _run_with_journals(broker, etcd, run, timeout):
        needed = result.needed
        if needed.offset is None or needed.offset == 0:
            console.print(f"{result.log}: nothing to prune: {needed.reason}", soft_wrap=True, markup=False)
            continue
        console.print(
            f"{result.log}: hints need offset {needed.offset} onward ({needed.hints_key})",
            soft_wrap=True, markup=False,
        )  # fmt: skip
        for f in result.removed:
            console.print(
                f"  {'would remove' if dry_run else 'removed'} [{f.begin}, {f.end}) {f.backing_store}{f.content_path}",
                soft_wrap=True, markup=False,
            )  # fmt: skip
        total += len(result.removed)
    console.print(f"{total} fragment(s) {'to prune' if dry_run else 'pruned'}")


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
    host: str = typer.Option("127.0.0.1", "--host", help="The address to bind (0.0.0.0: every interface)."),
    advertise: str | None = typer.Option(
        None, "--advertise", help="The host clients reach this member's Shard service at (default: --host)."
    ),
    port: int = typer.Option(
        0, "--port", help="Shard service port; 0 picks a free one (reported on stdout)."
    ),
    metrics_port: int = typer.Option(
        0,
        "--metrics-port",
        help="Serve Prometheus /metrics over HTTP here; 0 picks a free one (reported on stdout).",
    ),
    shard_limit: int = typer.Option(1024, "--shard-limit"),
    lease_ttl: int = typer.Option(20, "--lease-ttl"),
    max_hot_standbys: int = typer.Option(3, "--max-hot-standbys"),
    exit_drain: float = typer.Option(30.0, "--exit-drain", help="seconds a SIGTERM waits for shards to move"),
    log_level: str | None = LogLevelOpt,
    log_format: LogFormat | None = LogFormatOpt,
    auth_keys: str | None = typer.Option(
        None,
        "--auth-keys",
        envvar="CONSUMER_AUTH_KEYS",
        help="Base64 keys (whitespace or comma separated): every Shard RPC must carry a token signed by one.",
    ),
    server_cert_file: str | None = typer.Option(
        None, "--server-cert-file", envvar="CONSUMER_SERVER_CERT_FILE", help="Serve over TLS (https://)."
    ),
    server_cert_key_file: str | None = typer.Option(
        None, "--server-cert-key-file", envvar="CONSUMER_SERVER_CERT_KEY_FILE"
    ),
    server_ca_file: str | None = typer.Option(
        None,
        "--server-ca-file",
        envvar="CONSUMER_SERVER_CA_FILE",
        help="Require client certificates of this CA.",
    ),
    peer_cert_file: str | None = typer.Option(None, "--peer-cert-file", envvar="CONSUMER_PEER_CERT_FILE"),
    peer_cert_key_file: str | None = typer.Option(
        None, "--peer-cert-key-file", envvar="CONSUMER_PEER_CERT_KEY_FILE"
    ),
    peer_ca_file: str | None = typer.Option(None, "--peer-ca-file", envvar="CONSUMER_PEER_CA_FILE"),
    broker_auth_keys: str | None = typer.Option(
        None,
        "--broker-auth-keys",
        envvar="BROKER_AUTH_KEYS",
        help="Keys signing this member's journal calls.",
    ),
    broker_cert_file: str | None = typer.Option(None, "--broker-cert-file", envvar="BROKER_CERT_FILE"),
    broker_cert_key_file: str | None = typer.Option(
        None, "--broker-cert-key-file", envvar="BROKER_CERT_KEY_FILE"
    ),
    broker_trusted_ca_file: str | None = typer.Option(
        None, "--broker-trusted-ca-file", envvar="BROKER_TRUSTED_CA_FILE"
    ),
    broker_keepalive: float | None = typer.Option(
        None,
        "--broker-keepalive",
        envvar="BROKER_KEEPALIVE",
        help="Ping the brokers every SECONDS (>= 1), so journal calls on a connection a partition cut fail "
        "over within twice that. Only for gazette-py brokers: Gazette's refuse frequent pings.",
    ),
) -> None:
    """Run one member of a consumer application until SIGTERM (graceful: its shards move first).

    Security flags are those of Gazette's consumers (--consumer.* and --broker.*, CONSUMER_* and
    BROKER_* environment)."""
    from gazette.auth.tls import TLSConfig
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
        max_hot_standbys=max_hot_standbys, exit_drain_s=exit_drain, host=host, port=port, advertise=advertise,
        metrics_port=metrics_port,
        auth_keys=auth_keys, server_tls=TLSConfig.of(server_cert_file, server_cert_key_file, server_ca_file),
        peer_tls=TLSConfig.of(peer_cert_file, peer_cert_key_file, peer_ca_file), broker_auth_keys=broker_auth_keys,
        broker_tls=TLSConfig.of(broker_cert_file, broker_cert_key_file, broker_trusted_ca_file),
        broker_keepalive=broker_keepalive,
    )  # fmt: skip
    run(consumer, log_level, log_format.value if log_format else None)

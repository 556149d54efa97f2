"""The `gazette` command (this project's gazctl): journals, brokers, the local cluster and the demo.

Listings print rich tables by default and `-o json|yaml` for machines. Errors print one line naming
what was wrong and exit 1 (a usage error, such as an unknown option, exits 2), never a traceback.
`--log-format text|json|color` and `--log-level` (Gazette's `--log.format`, `--log.level` too, and
LOG_FORMAT, LOG_LEVEL) set how processes log to stderr (gazette.logsetup).
"""

from __future__ import annotations

import json
import sys
import time
from enum import StrEnum
from pathlib import Path
from typing import Any, NoReturn

import typer
import yaml
from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table

from gazette import tunables
from gazette.cli.shards import (
    LogFormat,
    LogFormatOpt,
    LogLevelOpt,
    TimeoutOpt,
    client_timeout,
    consumer_app,
    shards_app,
)
from gazette.protocol.errors import GazetteError, ValidationError

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    help="gazette-py: journals, brokers, local clusters.",
)
journals_app = typer.Typer(
    no_args_is_help=True, help="List, apply, edit, read, append, suspend, flush and prune journals."
)
broker_app = typer.Typer(no_args_is_help=True, help="Run a broker.")
local_app = typer.Typer(no_args_is_help=True, help="A local cluster: etcd plus brokers.")
app.add_typer(journals_app, name="journals")
app.add_typer(broker_app, name="broker")
app.add_typer(local_app, name="local")
app.add_typer(shards_app, name="shards")
app.add_typer(consumer_app, name="consumer")

console = Console()
err_console = Console(stderr=True)

BrokerOpt = typer.Option(
    "http://127.0.0.1:8080",
    "--broker",
    envvar="GAZETTE_BROKER",
    help="Broker address; several comma-separated ones fail over in turn.",
)
EtcdOpt = typer.Option(None, "--etcd", envvar="GAZETTE_ETCD", help="etcd endpoint (optional).")
# A client's security, as gazctl's --broker.* flags (and their BROKER_* environment).
AuthKeysOpt = typer.Option(
    None, "--auth-keys", envvar=["BROKER_AUTH_KEYS", "AUTH_KEYS"], show_envvar=True,
    help="Base64 keys separated by whitespace or commas; the first signs each call's authorization token.",
)  # fmt: skip
CertFileOpt = typer.Option(
    None, "--cert-file", envvar="BROKER_CERT_FILE", help="Client TLS certificate (PEM) for https:// brokers."
)
CertKeyFileOpt = typer.Option(None, "--cert-key-file", envvar="BROKER_CERT_KEY_FILE", help="Its private key.")
TrustedCAFileOpt = typer.Option(
    None, "--trusted-ca-file", envvar="BROKER_TRUSTED_CA_FILE",
    help="CA (PEM) that https:// brokers' certificates must chain to (default: the system's roots).",
)  # fmt: skip


class Output(StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"


def _version_callback(value: bool) -> None:
    if value:
        from gazette import __version__

        print(f"gazette {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    _version: bool = typer.Option(
        False, "--version", callback=_version_callback, is_eager=True, help="Print the version and exit."
    ),
    log_format: LogFormat | None = LogFormatOpt,
    log_level: str | None = LogLevelOpt,
) -> None:
    """gazette-py: journals, brokers, local clusters."""
    if log_format is not None or log_level is not None:  # else commands keep Python's default (warnings)
        from gazette.logsetup import configure

        configure(log_level, log_format.value if log_format else None)


def _client(
    broker: str,
    etcd: str | None,
    timeout: float | None = None,
    auth_keys: str | None = None,
    cert_file: str | None = None,
    cert_key_file: str | None = None,
    trusted_ca_file: str | None = None,
):
    """A journal client; `timeout` is `--timeout` (each call's bound: not given 60 s, 0 none), the
    rest `--auth-keys` and the client TLS flags."""
    from gazette.auth.tls import TLSConfig
    from gazette.client.sync import Client

    tls = TLSConfig.of(cert_file, cert_key_file, trusted_ca_file)
    return Client(broker, etcd, timeout=client_timeout(timeout), auth_keys=auth_keys, tls=tls)


def _emit(rows: list[dict[str, Any]], columns: list[str], output: Output, title: str = "") -> None:
    if output == Output.json:
        print(json.dumps(rows, indent=2, default=str))
    elif output == Output.yaml:
        print(yaml.safe_dump(rows, sort_keys=False), end="")
    else:
        table = Table(title=title or None)
        for c in columns:
            table.add_column(c)
        for r in rows:
            table.add_row(*(str(r.get(c, "")) for c in columns))
        if console.is_terminal:
            console.print(table)
        else:
            # Piped or redirected: whole cells at the table's natural width, not cut to 80 columns.
            natural = Measurement.get(console, console.options.update(width=1 << 16), table).maximum
            Console(width=max(natural, console.width)).print(table)


# --- journals ------------------------------------------------------------------------------------
@journals_app.command("list")
def journals_list(
    selector: str = typer.Option("", "-l", "--selector", help='Label selector, e.g. "prefix=examples/".'),
    output: Output = typer.Option(Output.table, "-o", "--output"),
    broker: str = BrokerOpt,
    etcd: str | None = EtcdOpt,
    auth_keys: str | None = AuthKeysOpt,
    cert_file: str | None = CertFileOpt,
    cert_key_file: str | None = CertKeyFileOpt,
    trusted_ca_file: str | None = TrustedCAFileOpt,
    timeout: float | None = TimeoutOpt,
) -> None:
    """List journals matching a selector, with their routes."""
    with _client(broker, etcd, timeout, auth_keys, cert_file, cert_key_file, trusted_ca_file) as c:
        infos = c.list_journals(selector)
    rows = []
    for info in infos:
        d = info.spec.to_dict()
        primary = info.route.primary_id
        rows.append(
            {
                "name": info.spec.name,
                "replication": info.spec.replication,
                "primary": f"{primary[0]}#{primary[1]}" if primary else "",
                "members": ",".join(f"{z}#{s}" for z, s in info.route.members),
                "revision": info.mod_revision,
                "labels": ",".join(f"{n}={v}" for n, v in info.spec.labels),
                "stores": ",".join(info.spec.stores),
                "spec": d,
            }
        )
    if output == Output.table:
        _emit(rows, ["name", "replication", "primary", "members", "revision", "labels", "stores"], output)
    elif output == Output.yaml:
        from gazette.protocol.spec import dump_specs_yaml

        print(dump_specs_yaml([(i.spec, i.mod_revision) for i in infos]), end="")
    else:
        _emit(rows, [], output)


@journals_app.command("apply")
def journals_apply(
    specs: Path = typer.Option(Path("-"), "--specs", help="YAML file of journal specs ('-' = stdin)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Validate and print, apply nothing."),
    broker: str = BrokerOpt,
    etcd: str | None = EtcdOpt,
    auth_keys: str | None = AuthKeysOpt,
    cert_file: str | None = CertFileOpt,
    cert_key_file: str | None = CertKeyFileOpt,
    trusted_ca_file: str | None = TrustedCAFileOpt,
    timeout: float | None = TimeoutOpt,
) -> None:
    """Create, update or delete journals from YAML (gazctl's hierarchy; `revision` for CAS)."""
    from gazette.protocol.spec import load_specs_yaml

    text = sys.stdin.read() if str(specs) == "-" else specs.read_text()
    changes = load_specs_yaml(text)
    for ch in changes:
        if not ch.delete:
            ch.spec.validate()
    storeless = [ch.spec.name for ch in changes if not ch.delete and not ch.spec.stores]
    if dry_run:
        for ch in changes:
            console.print(
                f"{'delete' if ch.delete else 'upsert'} {ch.spec.name} (expect revision {ch.expect_mod_revision})"
            )
        _warn_storeless(storeless)
        return
    with _client(broker, etcd, timeout, auth_keys, cert_file, cert_key_file, trusted_ca_file) as c:
        revision = c.apply_journals(changes)
    console.print(f"applied {len(changes)} change(s) at etcd revision {revision}")
    _warn_storeless(storeless)


def _warn_storeless(names: list[str]) -> None:
    for name in names:
        err_console.print(
            f"warning: journal {name} has no fragment stores: its content lives only in its brokers' "
            "spools, and is lost once no replica holding it is left",
            soft_wrap=True, markup=False,
        )  # fmt: skip


@journals_app.command("append")
def journals_append(
    journal: str | None = typer.Argument(None, help="Journal name (or select journals with -l)."),
    selector: str = typer.Option(
        "", "-l", "--selector", help='Append to journals of this selector (gazctl\'s -l), e.g. "name=a/b".'
    ),
    data: str | None = typer.Option(None, "--data", "-d", help="Content to append (default: the input)."),
    input_file: str = typer.Option("-", "-i", "--input", help="Input file ('-' = stdin)."),
    framing: str = typer.Option(
        "none", "-f", "--framing", help="With -l: none (the whole input, one append), lines or fixed records."
    ),
    mapping: str = typer.Option(
        "random",
        "-m",
        "--mapping",
        help="With -l and records: random, or modulo|rendezvous of a partition key before each record, "
        "or direct (a journal name before each record).",
    ),  # fmt: skip
    b64: bool = typer.Option(False, "--base64", help="Partition keys of lines framing are base64."),
    broker: str = BrokerOpt,
    etcd: str | None = EtcdOpt,
    auth_keys: str | None = AuthKeysOpt,
    cert_file: str | None = CertFileOpt,
    cert_key_file: str | None = CertKeyFileOpt,
    trusted_ca_file: str | None = TrustedCAFileOpt,
    timeout: float | None = TimeoutOpt,
) -> None:
    """Append content atomically: to JOURNAL, or as gazctl's `journals append -l` to a journal of a
    selector (records mapped to its journals with --framing and --mapping; see gazette.cli.journal_io).
    Input is read and mapped in full before anything is appended."""
    from gazette.cli.journal_io import plan_appends

    if bool(journal) == bool(selector):
        raise ValidationError("append takes a journal or a selector (-l), exactly one of the two")
    if journal and (framing != "none" or mapping != "random" or b64):
        raise ValidationError("--framing, --mapping and --base64 go with a selector (-l), not a journal name")
    if data is not None:
        content = data.encode()
    elif input_file != "-":
        content = Path(input_file).read_bytes()
    else:
        content = sys.stdin.buffer.read()
    with _client(broker, etcd, timeout, auth_keys, cert_file, cert_key_file, trusted_ca_file) as c:
        plan = {journal: [content]} if journal else plan_appends(c, selector, content, framing, mapping, b64)
        for name, records in plan.items():
            res = c.append(name, records)
            where = f"{name} " if selector else ""
            console.print(
                f"appended {where}[{res.begin}, {res.end}) sha1 {res.sha1}", soft_wrap=True, markup=False
            )


@journals_app.command("read")
def journals_read(
    journal: str | None = typer.Argument(None, help="Journal name (or select journals with -l)."),
    selector: str = typer.Option(
        "", "-l", "--selector", help="Read every journal of this selector, multiplexed (gazctl's -l)."
    ),
    offset: int = typer.Option(0, "--offset", help="Start offset (-1 = write head)."),
    tail: bool = typer.Option(
        False, "--tail", help="Start at the write head (what --offsets does not give)."
    ),
    block: bool = typer.Option(False, "--block", "-b", help="Keep waiting for new content."),
    end_offset: int | None = typer.Option(None, "--end-offset"),
    output: str = typer.Option("-", "-o", "--output", help="Output file ('-' = stdout)."),
    offsets_in: str | None = typer.Option(
        None, "--offsets", help="JSON file of journal -> start offset (it must exist), as gazctl's."
    ),
    offsets_out: str | None = typer.Option(
        None, "--offsets-out", help="Write each journal's final offset here (JSON) on exit, Ctrl-C included."
    ),
    broker: str = BrokerOpt,
    etcd: str | None = EtcdOpt,
    auth_keys: str | None = AuthKeysOpt,
    cert_file: str | None = CertFileOpt,
    cert_key_file: str | None = CertKeyFileOpt,
    trusted_ca_file: str | None = TrustedCAFileOpt,
    timeout: float | None = typer.Option(
        None,
        "--timeout",
        envvar="GAZETTE_TIMEOUT",
        help="Give up when no content came for this many seconds (default 60; with --block never; 0: never).",
    ),  # fmt: skip
) -> None:
    """Copy committed content to stdout (or -o): of JOURNAL, or as gazctl's `journals read -l` of every
    journal of a selector (fully suspended ones skipped), concurrently, in whole chunks."""
    from gazette.cli.journal_io import load_offsets, read_journals, save_offsets, stdout_or
    from gazette.client.loop import default_loop
    from gazette.client.timeouts import USE_CLIENT_DEFAULT
    from gazette.protocol.spec import SuspendLevel

    if bool(journal) == bool(selector):
        raise ValidationError("read takes a journal or a selector (-l), exactly one of the two")
    # A blocking read waits for ever unless --timeout is given (the client's default does not apply).
    read_timeout = USE_CLIENT_DEFAULT if timeout is None else client_timeout(timeout)
    with _client(broker, etcd, timeout, auth_keys, cert_file, cert_key_file, trusted_ca_file) as c:
        if journal:
            names = [journal]
        else:
            infos = c.list_journals(selector)
            names = [i.spec.name for i in infos if i.spec.suspend_level != SuspendLevel.FULL]
            if not infos:
                err_console.print(
                    f'warning: no journals match selector "{selector}"', soft_wrap=True, markup=False
                )
        given = load_offsets(offsets_in, offsets_out)
        starts = {n: given.get(n, -1 if tail else offset) for n in names}
        ended: dict[str, int] = {n: o for n, o in starts.items() if o >= 0}
        out = stdout_or(output)
        try:
            default_loop().run(
                read_journals(
                    c.aio, starts, out, ended, block=block, end_offset=end_offset, timeout=read_timeout
                )
            )
        finally:
            if out is not sys.stdout.buffer:
                out.close()
            if offsets_out is not None:
                save_offsets(offsets_out, {**given, **ended})


@journals_app.command("edit")
def journals_edit(
    selector: str = typer.Option(..., "-l", "--selector", help='Journals to edit, e.g. "prefix=examples/".'),
    broker: str = BrokerOpt,
    etcd: str | None = EtcdOpt,
    auth_keys: str | None = AuthKeysOpt,
    cert_file: str | None = CertFileOpt,
    cert_key_file: str | None = CertKeyFileOpt,
    trusted_ca_file: str | None = TrustedCAFileOpt,
    timeout: float | None = TimeoutOpt,
) -> None:
    """Edit journals in $EDITOR (as gazctl journals edit): the selected journals' YAML with revisions
    is opened, and what is saved is applied. A failed apply opens the edits again with the error on
    top; saving them unchanged (or empty) gives up."""
    from gazette.cli.edit import edit_and_apply
    from gazette.protocol.spec import dump_specs_yaml, load_specs_yaml

    with _client(broker, etcd, timeout, auth_keys, cert_file, cert_key_file, trusted_ca_file) as c:
        infos = c.list_journals(selector)
        if not infos:
            raise ValidationError(f'no journals match selector "{selector}"')

        def apply(edited: str) -> str:
            changes = load_specs_yaml(edited)
            revision = c.apply_journals(changes)
            _warn_storeless([ch.spec.name for ch in changes if not ch.delete and not ch.spec.stores])
            return f"applied {len(changes)} change(s) at etcd revision {revision}"

        edit_and_apply(
            dump_specs_yaml([(i.spec, i.mod_revision) for i in infos]),
            "journals",
            "a journal",
            apply,
            console,
        )


@journals_app.command("suspend")
def journals_suspend(
    selector: str = typer.Option(..., "-l", "--selector", help="Journals to suspend."),
    force: bool = typer.Option(
        False, "-f", "--force", help="Suspend journals even if they have local fragments."
    ),
    broker: str = BrokerOpt,
    etcd: str | None = EtcdOpt,
    auth_keys: str | None = AuthKeysOpt,
    cert_file: str | None = CertFileOpt,
    cert_key_file: str | None = CertKeyFileOpt,
    trusted_ca_file: str | None = TrustedCAFileOpt,
    timeout: float | None = TimeoutOpt,
) -> None:
    """Suspend idle journals so they use fewer or no broker replicas (as gazctl journals suspend); an
    append resumes them. Without --force, a journal whose content is not all persisted stays as it is."""
    from gazette.cli.journal_io import suspend_journals
    from gazette.client.loop import default_loop
    from gazette.protocol.spec import SuspendLevel

    with _client(broker, etcd, timeout, auth_keys, cert_file, cert_key_file, trusted_ca_file) as c:
        infos = c.list_journals(selector)
        if not infos:
            raise ValidationError(f'no journals match selector "{selector}"')
        names = [i.spec.name for i in infos if i.spec.suspend_level != SuspendLevel.FULL]
        default_loop().run(suspend_journals(c.aio, names, force))
        for info in c.list_journals(selector):
            level = info.spec.suspend_level
            state = "not suspended" if level == SuspendLevel.NONE else f"suspended ({level.name.lower()})"
            console.print(f"{info.spec.name}: {state}", soft_wrap=True, markup=False)


@journals_app.command("fragments")
def journals_fragments(
    journal: str = typer.Argument(...),
    from_: int = typer.Option(0, "--from", help="Only fragments persisted at or after this unix time."),
    to: int = typer.Option(0, "--to", help="Only fragments persisted before this unix time."),
    url_ttl: float = typer.Option(0.0, "--url-ttl", help="Include signed URLs valid this many seconds."),
    output: Output = typer.Option(Output.table, "-o", "--output"),
    broker: str = BrokerOpt,
    etcd: str | None = EtcdOpt,
    auth_keys: str | None = AuthKeysOpt,
    cert_file: str | None = CertFileOpt,
    cert_key_file: str | None = CertKeyFileOpt,
    trusted_ca_file: str | None = TrustedCAFileOpt,
    timeout: float | None = TimeoutOpt,
) -> None:
    """List a journal's fragments (persisted and spooled)."""
    with _client(broker, etcd, timeout, auth_keys, cert_file, cert_key_file, trusted_ca_file) as c:
        listed = c.fragments_with_urls(journal, from_, to, url_ttl)
    rows = [
        {
            "journal": f.journal,
            "begin": f.begin,
            "end": f.end,
            "sha1": f.sha1,
            "codec": f.codec.name,
            "store": f.backing_store or "(spooled)",
            "mod_time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(f.mod_time)) if f.mod_time else "",
            "path": f.content_path if f.backing_store else "",
            "url": url,
        }
        for f, url in listed
    ]
    _emit(rows, ["begin", "end", "codec", "store", "mod_time", "path"], output, title=journal)


@journals_app.command("flush")
def journals_flush(
    journal: str | None = typer.Argument(None, help="Journal name (or select journals with -l)."),
    selector: str = typer.Option(
        "", "-l", "--selector", help="Flush the journals of this selector (default: all)."
    ),
    broker: str = BrokerOpt,
    etcd: str | None = EtcdOpt,
    auth_keys: str | None = AuthKeysOpt,
    cert_file: str | None = CertFileOpt,
    cert_key_file: str | None = CertKeyFileOpt,
    trusted_ca_file: str | None = TrustedCAFileOpt,
    timeout: float | None = TimeoutOpt,
) -> None:
    """Roll the spool of JOURNAL, or of each selected journal, and wait until it is persisted."""
    if journal and selector:
        raise ValidationError("flush takes a journal or a selector (-l), not both")
    with _client(broker, etcd, timeout, auth_keys, cert_file, cert_key_file, trusted_ca_file) as c:
        for name in [journal] if journal else [i.spec.name for i in c.list_journals(selector)]:
            frag = c.flush(name)
            what = (
                f"[{frag.begin}, {frag.end}) -> {frag.backing_store}{frag.content_path}"
                if frag
                else "nothing to flush"
            )
            console.print(f"{name}: {what}", soft_wrap=True)


@journals_app.command("reset-head")
def journals_reset_head(
    selector: str = typer.Option(..., "-l", "--selector", help="which journals, e.g. prefix=examples/"),
    broker: str = BrokerOpt,
    etcd: str | None = EtcdOpt,
    auth_keys: str | None = AuthKeysOpt,
    cert_file: str | None = CertFileOpt,
    cert_key_file: str | None = CertKeyFileOpt,
    trusted_ca_file: str | None = TrustedCAFileOpt,
    timeout: float | None = TimeoutOpt,
) -> None:
    """Re-sync each selected journal at its indexed head, clearing INDEX_HAS_GREATER_OFFSET.

    Run it only once every broker that might still hold unpersisted writes has exited or failed:
    the brokers refuse to guess the head themselves so as never to write an offset twice.
    """
    from gazette.protocol.spec import SuspendLevel

    with _client(broker, etcd, timeout, auth_keys, cert_file, cert_key_file, trusted_ca_file) as c:
        for info in c.list_journals(selector):
            if info.spec.suspend_level == SuspendLevel.FULL:
                console.print(f"{info.spec.name}: fully suspended, skipped", soft_wrap=True)
                continue
            head = c.reset_head(info.spec.name)
            console.print(f"{info.spec.name}: head at {head}", soft_wrap=True)


@journals_app.command("prune")
def journals_prune(
    selector: str = typer.Option("", "-l", "--selector"),
    dry_run: bool = typer.Option(False, "--dry-run"),
    broker: str = BrokerOpt,
    etcd: str | None = EtcdOpt,
    auth_keys: str | None = AuthKeysOpt,
    cert_file: str | None = CertFileOpt,
    cert_key_file: str | None = CertKeyFileOpt,
    trusted_ca_file: str | None = TrustedCAFileOpt,
    timeout: float | None = TimeoutOpt,
) -> None:
    """Delete persisted fragments older than their journal's retention (never when retention <= 0)."""
    from gazette.client.prune import prune_journals

    with _client(broker, etcd, timeout, auth_keys, cert_file, cert_key_file, trusted_ca_file) as c:
        removed = prune_journals(c, selector, dry_run=dry_run)
    for f in removed:
        console.print(
            f"{'would remove' if dry_run else 'removed'} {f.backing_store}{f.content_path}", soft_wrap=True
        )
    console.print(f"{len(removed)} fragment(s) {'to prune' if dry_run else 'pruned'}")


# --- broker ----------------------------------------------------------------------------------------
@broker_app.command("serve")
def broker_serve(
    etcd: str = typer.Option(..., "--etcd", envvar="GAZETTE_ETCD"),
    root: str = typer.Option("/gazette/cluster", "--root"),
    zone: str = typer.Option("local", "--zone"),
    suffix: str | None = typer.Option(None, "--suffix"),
    host: str = typer.Option("127.0.0.1", "--host", help="The address to bind (0.0.0.0: every interface)."),
    advertise: str | None = typer.Option(
        None, "--advertise", help="The host peers and clients reach this broker at (default: --host)."
    ),
    port: int = typer.Option(8080, "--port", help="0 picks a free port (reported on stdout)."),
    metrics_port: int = typer.Option(0, "--metrics-port"),
    lease_ttl: int = typer.Option(20, "--lease-ttl"),
    max_replication: int = typer.Option(9, "--max-replication"),
    journal_limit: int = typer.Option(
        tunables.BROKER_JOURNAL_LIMIT,
        "--limit",
        "--broker.limit",
        envvar="BROKER_LIMIT",
        min=0,
        help="The most journals this broker holds (announced to the allocator; Gazette's --broker.limit).",
    ),
    exit_drain: float = typer.Option(
        60.0, "--exit-drain", help="seconds a SIGTERM waits for journals to move away"
    ),
    spool_dir: str | None = typer.Option(None, "--spool-dir"),
    max_append_rate: int = typer.Option(
        0,
        "--max-append-rate",
        envvar="BROKER_MAX_APPEND_RATE",
        min=0,
        help="Bytes/s that lowers every journal's non-zero max_append_rate (0: no broker-wide cap).",
    ),
    min_append_rate: int = typer.Option(
        0,
        "--min-append-rate",
        envvar="BROKER_MIN_APPEND_RATE",
        min=0,
        help="Abort an append whose client streams slower than this many bytes/s (0: never; Gazette: 65536).",
    ),
    log_level: str | None = LogLevelOpt,
    log_format: LogFormat | None = LogFormatOpt,
    auth_keys: str | None = typer.Option(
        None,
        "--auth-keys",
        envvar="BROKER_AUTH_KEYS",
        help="Base64 keys (whitespace or comma separated): every RPC must carry a token signed by one; "
        "the first signs this broker's own calls to its peers. AA== also lets calls without a token in.",
    ),
    server_cert_file: str | None = typer.Option(
        None,
        "--server-cert-file",
        envvar="BROKER_SERVER_CERT_FILE",
        help="Serve over TLS with this certificate (PEM); the endpoint becomes https://.",
    ),
    server_cert_key_file: str | None = typer.Option(
        None,
        "--server-cert-key-file",
        envvar="BROKER_SERVER_CERT_KEY_FILE",
        help="The server certificate's key.",
    ),
    server_ca_file: str | None = typer.Option(
        None,
        "--server-ca-file",
        envvar="BROKER_SERVER_CA_FILE",
        help="Require client certificates signed by this CA (mutual TLS).",
    ),
    peer_cert_file: str | None = typer.Option(
        None,
        "--peer-cert-file",
        envvar="BROKER_PEER_CERT_FILE",
        help="Client certificate this broker presents to https:// peers.",
    ),
    peer_cert_key_file: str | None = typer.Option(
        None, "--peer-cert-key-file", envvar="BROKER_PEER_CERT_KEY_FILE", help="The peer certificate's key."
    ),
    peer_ca_file: str | None = typer.Option(
        None,
        "--peer-ca-file",
        envvar="BROKER_PEER_CA_FILE",
        help="CA that https:// peers' certificates must chain to (default: the system's roots).",
    ),
) -> None:
    """Serve the journal service until SIGTERM (graceful: spools are persisted first).

    Security flags are Gazette's `gazette serve --broker.*` ones (and their BROKER_* environment)."""
    from gazette.auth.tls import TLSConfig
    from gazette.broker import flow
    from gazette.broker.broker import Broker
    from gazette.broker.serve import run

    flow.MAX_APPEND_BYTES_PER_S = max_append_rate  # this process's broker-wide rates
    flow.MIN_APPEND_BYTES_PER_S = min_append_rate
    run(
        Broker(
            etcd,
            root=root,
            zone=zone,
            suffix=suffix,
            host=host,
            advertise=advertise,
            port=port,
            metrics_port=metrics_port,
            lease_ttl_s=lease_ttl,
            max_replication=max_replication,
            journal_limit=journal_limit,
            exit_drain_s=exit_drain,
            spool_dir=spool_dir,
            auth_keys=auth_keys,
            server_tls=TLSConfig.of(server_cert_file, server_cert_key_file, server_ca_file),
            peer_tls=TLSConfig.of(peer_cert_file, peer_cert_key_file, peer_ca_file),
        ),
        log_level,
        log_format.value if log_format else None,
    )


# --- local -----------------------------------------------------------------------------------------
@local_app.command("up")
def local_up(
    brokers: int = typer.Option(1, "--brokers"),
    mode: str = typer.Option("subprocess", "--mode"),
    store: str | None = typer.Option(None, "--store"),
    data_dir: str | None = typer.Option(None, "--data-dir"),
    auth_keys: str | None = typer.Option(
        None, "--auth-keys", envvar="BROKER_AUTH_KEYS", help="Require tokens signed with these base64 keys."
    ),
    tls: bool = typer.Option(
        False, "--tls", help="Serve over mutual TLS with a throwaway CA (in --data-dir/tls)."
    ),
) -> None:
    """Start a LocalCluster and keep it up until Ctrl-C."""
    from gazette.local.cluster import LocalCluster

    with LocalCluster(
        brokers=brokers, mode=mode, store=store, data_dir=data_dir, auth_keys=auth_keys, tls=tls
    ) as cluster:
        console.print(f"etcd:    {cluster.etcd_endpoint}")
        for i, ep in enumerate(cluster.broker_endpoints):
            console.print(f"broker {i}: {ep}")
        console.print(f"store:   {cluster.store}")
        client_tls = cluster.security.client_tls
        flags = (
            f" --trusted-ca-file {client_tls.ca_file} --cert-file {client_tls.cert_file}"
            f" --cert-key-file {client_tls.key_file}"
            if client_tls is not None
            else ""
        )
        keys = "BROKER_AUTH_KEYS=... " if auth_keys else ""
        console.print(
            f"try:     {keys}GAZETTE_BROKER={cluster.broker_endpoints[0]} gazette journals list{flags}",
            soft_wrap=True,
        )
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            console.print("stopping")


# --- demo ------------------------------------------------------------------------------------------
@app.command("demo")
def demo(
    small: bool = typer.Option(False, "--small", help="A small corpus (what make test runs)."),
    keep: bool = typer.Option(False, "--keep", help="Leave the cluster up for exploration."),
    data_dir: str = typer.Option("demo-data", "--data-dir"),
    columnar: bool = typer.Option(
        False, "--columnar", help="Count with the columnar word count (BatchApplication; needs pyarrow)."
    ),
) -> None:
    """Run the main job end to end and check its results; exit non-zero on any mismatch."""
    from gazette.cli.demo import run_demo

    ok = run_demo(small=small, keep=keep, data_dir=data_dir, console=console, columnar=columnar)
    raise typer.Exit(0 if ok else 1)


# click's exceptions, or those of the copy of click that newer typers carry: whichever typer raises.
_CLICK: Any = sys.modules[typer.BadParameter.__module__]
_NO_ARGS_IS_HELP: Any = getattr(_CLICK, "NoArgsIsHelpError", ())


def _error(message: str, status: int) -> NoReturn:
    """One line on stderr, whatever the message holds (newlines folded, and brackets, as in a journal
    name "a/[/b]", shown as text rather than parsed as rich markup); then exits with `status`."""
    err_console.print(f"[red]error:[/red] {escape(' '.join(message.split()))}", soft_wrap=True)
    sys.exit(status)


def main() -> None:
    try:
        status = app(standalone_mode=False)
    except _NO_ARGS_IS_HELP as exc:  # a bare group: typer printed its help already
        sys.exit(exc.exit_code)
    except _CLICK.UsageError as exc:  # an unknown option, a bad value, a missing argument
        where = f"{exc.ctx.command_path}: " if exc.ctx else ""
        hint = f" (see {exc.ctx.command_path} --help)" if exc.ctx else ""
        _error(f"{where}{exc.format_message().replace('Value error, ', '')}{hint}", exc.exit_code)
    except _CLICK.ClickException as exc:
        _error(exc.format_message(), exc.exit_code)
    except typer.Abort:
        _error("aborted", 1)
    except (GazetteError, OSError, ValueError) as exc:
        _error(str(exc), 1)
    except KeyboardInterrupt:  # Ctrl-C ends a blocking read or a served process: no traceback
        sys.exit(130)
    sys.exit(status if isinstance(status, int) else 0)


if __name__ == "__main__":
    main()

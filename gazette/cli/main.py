"""The `gazette` command (this project's gazctl): journals, brokers, the local cluster and the demo.

Listings print rich tables by default and `-o json|yaml` for machines. Errors print one line naming
what was wrong and exit 1, never a traceback.
"""

from __future__ import annotations

import json
import sys
import time
from enum import StrEnum
from pathlib import Path
from typing import Any

import typer
import yaml
from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table

from gazette.cli.shards import TimeoutOpt, client_timeout, consumer_app, shards_app
from gazette.protocol.errors import GazetteError

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False, help="gazette-py: journals, brokers, local clusters.")
journals_app = typer.Typer(no_args_is_help=True, help="List, apply, read, append, flush and prune journals.")
broker_app = typer.Typer(no_args_is_help=True, help="Run a broker.")
local_app = typer.Typer(no_args_is_help=True, help="A local cluster: etcd plus brokers.")
app.add_typer(journals_app, name="journals")
app.add_typer(broker_app, name="broker")
app.add_typer(local_app, name="local")
app.add_typer(shards_app, name="shards")
app.add_typer(consumer_app, name="consumer")

console = Console()
err_console = Console(stderr=True)

BrokerOpt = typer.Option("http://127.0.0.1:8080", "--broker", envvar="GAZETTE_BROKER", help="Broker address; several comma-separated ones fail over in turn.")
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
            console.print(f"{'delete' if ch.delete else 'upsert'} {ch.spec.name} (expect revision {ch.expect_mod_revision})")
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
    journal: str = typer.Argument(..., help="Journal name."),
    data: str | None = typer.Option(None, "--data", "-d", help="Content to append (default: stdin)."),
    input_file: Path | None = typer.Option(None, "-i", "--input", help="File to append."),
    broker: str = BrokerOpt,
    etcd: str | None = EtcdOpt,
    auth_keys: str | None = AuthKeysOpt,
    cert_file: str | None = CertFileOpt,
    cert_key_file: str | None = CertKeyFileOpt,
    trusted_ca_file: str | None = TrustedCAFileOpt,
    timeout: float | None = TimeoutOpt,
) -> None:
    """Append content atomically (the whole input as one append)."""
    if data is not None:
        content = data.encode()
    elif input_file is not None:
        content = input_file.read_bytes()
    else:
        content = sys.stdin.buffer.read()
    with _client(broker, etcd, timeout, auth_keys, cert_file, cert_key_file, trusted_ca_file) as c:
        res = c.append(journal, content)
    console.print(f"appended [{res.begin}, {res.end}) sha1 {res.sha1}")


@journals_app.command("read")
def journals_read(
    journal: str = typer.Argument(...),
    offset: int = typer.Option(0, "--offset", help="Start offset (-1 = write head)."),
    block: bool = typer.Option(False, "--block", "-b", help="Keep waiting for new content."),
    end_offset: int | None = typer.Option(None, "--end-offset"),
    broker: str = BrokerOpt,
    etcd: str | None = EtcdOpt,
    auth_keys: str | None = AuthKeysOpt,
    cert_file: str | None = CertFileOpt,
    cert_key_file: str | None = CertKeyFileOpt,
    trusted_ca_file: str | None = TrustedCAFileOpt,
    timeout: float | None = typer.Option(
        None, "--timeout", envvar="GAZETTE_TIMEOUT",
        help="Give up when no content came for this many seconds (default 60; with --block never; 0: never).",
    ),  # fmt: skip
) -> None:
    """Copy a journal's committed content to stdout."""
    from gazette.client.timeouts import USE_CLIENT_DEFAULT

    # A blocking read waits for ever unless --timeout is given (the client's default does not apply).
    read_timeout = USE_CLIENT_DEFAULT if timeout is None else client_timeout(timeout)
    with _client(broker, etcd, timeout, auth_keys, cert_file, cert_key_file, trusted_ca_file) as c:
        for chunk in c.read(journal, offset, block=block, end_offset=end_offset, timeout=read_timeout):
            sys.stdout.buffer.write(chunk.content)
            sys.stdout.buffer.flush()


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
    selector: str = typer.Option("", "-l", "--selector"),
    broker: str = BrokerOpt,
    etcd: str | None = EtcdOpt,
    auth_keys: str | None = AuthKeysOpt,
    cert_file: str | None = CertFileOpt,
    cert_key_file: str | None = CertKeyFileOpt,
    trusted_ca_file: str | None = TrustedCAFileOpt,
    timeout: float | None = TimeoutOpt,
) -> None:
    """Roll each selected journal's spool and wait until it is persisted."""
    with _client(broker, etcd, timeout, auth_keys, cert_file, cert_key_file, trusted_ca_file) as c:
        for info in c.list_journals(selector):
            frag = c.flush(info.spec.name)
            what = f"[{frag.begin}, {frag.end}) -> {frag.backing_store}{frag.content_path}" if frag else "nothing to flush"
            console.print(f"{info.spec.name}: {what}", soft_wrap=True)


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
        console.print(f"{'would remove' if dry_run else 'removed'} {f.backing_store}{f.content_path}", soft_wrap=True)
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
    exit_drain: float = typer.Option(60.0, "--exit-drain", help="seconds a SIGTERM waits for journals to move away"),
    spool_dir: str | None = typer.Option(None, "--spool-dir"),
    log_level: str = typer.Option("WARNING", "--log-level"),
    auth_keys: str | None = typer.Option(
        None, "--auth-keys", envvar="BROKER_AUTH_KEYS",
        help="Base64 keys (whitespace or comma separated): every RPC must carry a token signed by one; "
        "the first signs this broker's own calls to its peers. AA== also lets calls without a token in.",
    ),
    server_cert_file: str | None = typer.Option(
        None, "--server-cert-file", envvar="BROKER_SERVER_CERT_FILE",
        help="Serve over TLS with this certificate (PEM); the endpoint becomes https://.",
    ),
    server_cert_key_file: str | None = typer.Option(
        None, "--server-cert-key-file", envvar="BROKER_SERVER_CERT_KEY_FILE", help="The server certificate's key."
    ),
    server_ca_file: str | None = typer.Option(
        None, "--server-ca-file", envvar="BROKER_SERVER_CA_FILE",
        help="Require client certificates signed by this CA (mutual TLS).",
    ),
    peer_cert_file: str | None = typer.Option(
        None, "--peer-cert-file", envvar="BROKER_PEER_CERT_FILE",
        help="Client certificate this broker presents to https:// peers.",
    ),
    peer_cert_key_file: str | None = typer.Option(
        None, "--peer-cert-key-file", envvar="BROKER_PEER_CERT_KEY_FILE", help="The peer certificate's key."
    ),
    peer_ca_file: str | None = typer.Option(
        None, "--peer-ca-file", envvar="BROKER_PEER_CA_FILE",
        help="CA that https:// peers' certificates must chain to (default: the system's roots).",
    ),
) -> None:
    """Serve the journal service until SIGTERM (graceful: spools are persisted first).

    Security flags are Gazette's `gazette serve --broker.*` ones (and their BROKER_* environment)."""
    from gazette.auth.tls import TLSConfig
    from gazette.broker.broker import Broker
    from gazette.broker.serve import run

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
            exit_drain_s=exit_drain,
            spool_dir=spool_dir,
            auth_keys=auth_keys,
            server_tls=TLSConfig.of(server_cert_file, server_cert_key_file, server_ca_file),
            peer_tls=TLSConfig.of(peer_cert_file, peer_cert_key_file, peer_ca_file),
        ),
        log_level,
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
    tls: bool = typer.Option(False, "--tls", help="Serve over mutual TLS with a throwaway CA (in --data-dir/tls)."),
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
            f"try:     {keys}GAZETTE_BROKER={cluster.broker_endpoints[0]} gazette journals list{flags}", soft_wrap=True
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
) -> None:
    """Run the main job end to end and check its results; exit non-zero on any mismatch."""
    from gazette.cli.demo import run_demo

    ok = run_demo(small=small, keep=keep, data_dir=data_dir, console=console)
    raise typer.Exit(0 if ok else 1)


def main() -> None:
    try:
        app()
    except (GazetteError, OSError, ValueError) as exc:
        # One line, whatever the message holds: newlines folded, and brackets (a journal name such
        # as "a/[/b]") shown as text rather than parsed as rich markup.
        err_console.print(f"[red]error:[/red] {escape(' '.join(str(exc).split()))}", soft_wrap=True)
        sys.exit(1)


if __name__ == "__main__":
    main()

"""The CLI's security flags: `--auth-keys` (or BROKER_AUTH_KEYS) and the client TLS files, against
brokers that require tokens and client certificates; a refused command is one line and changes nothing."""

from __future__ import annotations

import base64
import os

import cli_run
import pytest
from cli_run import ok, one_error_line

from gazette.local.cluster import LocalCluster

KEYS = base64.b64encode(b"cli-auth-test-key").decode()


@pytest.fixture
def secured(etcd, etcd_root, tmp_path):
    os.makedirs(tmp_path / "store", exist_ok=True)
    with LocalCluster(
        brokers=1, mode="inprocess", store=f"file://{tmp_path}/store/", etcd=etcd.endpoint, root=etcd_root,
        data_dir=str(tmp_path / "data"), auth_keys=KEYS, tls=True,
    ) as c:  # fmt: skip
        yield c


def test_auth_keys_and_client_tls_flags(secured: LocalCluster, tmp_path) -> None:
    tls = secured.security.client_tls
    assert tls is not None
    files = ["--trusted-ca-file", tls.ca_file, "--cert-file", tls.cert_file, "--cert-key-file", tls.key_file]
    env = {"GAZETTE_BROKER": secured.broker_endpoints[0]}
    specs = tmp_path / "specs.yaml"
    specs.write_text(f"name: cliauth/a\nreplication: 1\nfragment:\n  stores: [{secured.store}]\n")

    refused = one_error_line(cli_run.gazette("journals", "apply", "--specs", str(specs), *files, env=env))
    assert refused == (  # the call policy's final error: the code and details, then what failed where
        "error: UNAUTHENTICATED: missing or empty Authorization token "
        f"(apply of cliauth/a at broker {secured.broker_endpoints[0]})"
    )
    assert secured.client().list_journals("prefix=cliauth/") == []  # the refused apply changed nothing

    ok(cli_run.gazette("journals", "apply", "--specs", str(specs), "--auth-keys", KEYS, *files, env=env))
    secured.wait_for_routes(["cliauth/a"])
    with_env = {**env, "BROKER_AUTH_KEYS": KEYS}  # gazctl's variable
    ok(cli_run.gazette("journals", "append", "cliauth/a", "-d", "hello\n", *files, env=with_env))
    assert ok(cli_run.gazette("journals", "read", "cliauth/a", *files, env=with_env)) == "hello\n"

    no_cert = one_error_line(
        cli_run.gazette("journals", "list", "--trusted-ca-file", tls.ca_file, env=with_env)
    )
    assert no_cert.startswith("error: UNAVAILABLE")
    assert secured.client().read_all("cliauth/a") == b"hello\n"

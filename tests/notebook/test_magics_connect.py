"""`%gazette connect`: magics attached to a cluster started elsewhere (here, by another magics
instance's `%gazette up`; tests/interop/test_py_on_gazette.py attaches to real Gazette brokers)."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError

from gazette.notebook import GazetteMagics, NotebookError
from gazette.protocol.errors import GazetteError


@pytest.fixture
def attached(shell, magics):
    """A second magics instance, connected to the cluster `magics` started."""
    m = GazetteMagics(shell)
    yield m
    if m.connected is not None:
        m.run("down")


def test_connect_then_commands_use_that_cluster(attached, magics, journal) -> None:
    endpoint, etcd = magics.cluster.broker_endpoints[0], magics.cluster.etcd_endpoint
    table = attached.run(f"connect {endpoint} --etcd {etcd}")
    assert table.column("endpoint") == [endpoint] and etcd in table.title
    assert attached.run("status").column("state") == ["connected"]
    assert attached.run(f"journals -l name={journal}").column("primary") == ["broker-0"]
    assert attached.run(f"append {journal} -d 'from elsewhere'").column("end") == [15]
    assert magics.client.read_all(journal) == b"from elsewhere\n"  # the same cluster
    assert attached.run(f"read {journal}").column("content") == ["from elsewhere"]
    assert attached.cluster is None  # nothing was started here...
    assert attached.run("down") == f"disconnected from {endpoint}"  # ...and nothing is stopped
    assert magics.run("status").column("state") == ["running"]
    with pytest.raises(NotebookError, match="connect BROKER"):
        attached.run("journals")


def test_connect_applies_and_waits_for_a_primary(attached, magics) -> None:
    attached.run(f"connect {magics.cluster.broker_endpoints[0]}")
    name = "tests/notebook/connected/applied"
    yaml = f"name: {name}\nreplication: 1\nfragment: {{stores: ['{magics.cluster.store}']}}\n"
    assert attached.run("apply", yaml).column("journal") == [name]
    (info,) = magics.client.list_journals(f"name={name}")
    assert info.route.primary == 0  # apply returned once the journal had a primary
    assert attached.run(f"append {name} -d x").column("begin") == [0]


def test_connect_refusals_leave_the_state_alone(attached, magics) -> None:
    with pytest.raises(GazetteError, match="UNAVAILABLE"):
        attached.run("connect http://127.0.0.1:1")  # nothing answers: not connected
    assert attached.connected is None
    with pytest.raises(UsageError) as info:  # as a magic: the cell fails with one line
        attached.gazette("connect http://127.0.0.1:1")
    assert type(info.value) is UsageError and "\n" not in str(info.value)
    assert str(info.value).startswith("%gazette connect: ") and "UNAVAILABLE" in str(info.value)
    assert attached.connected is None
    with pytest.raises(NotebookError, match="Missing argument 'BROKER'"):
        attached.run("connect")
    with pytest.raises(NotebookError, match="a cluster is up here"):
        magics.run(f"connect {magics.cluster.broker_endpoints[0]}")
    attached.run(f"connect {magics.cluster.broker_endpoints[0]}")
    with pytest.raises(NotebookError, match="connected to"):
        attached.run("up")
    with pytest.raises(NotebookError, match="--etcd URL"):
        attached.run("shards --root /consumers/none")  # no etcd was given to connect

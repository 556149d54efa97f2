"""The error model: protocol statuses are GazetteError(status); every other failure is a named class
under GazetteError whose status is Status.OK, and real call sites raise the named class."""

from __future__ import annotations

import asyncio
import concurrent.futures
from types import SimpleNamespace

import grpc
import pytest

import gazette
from gazette.client.timeouts import CallTimeout
from gazette.protocol import errors
from gazette.protocol.errors import (
    AppendError,
    ConfigurationError,
    FencedError,
    GazetteError,
    PeerError,
    StateError,
    StoreError,
    ValidationError,
)
from gazette.protocol.status import ShardStatus, Status

NAMED = [
    ValidationError,
    ConfigurationError,
    StateError,
    FencedError,
    StoreError,
    PeerError,
    AppendError,
    CallTimeout,
]


@pytest.mark.parametrize("cls", NAMED, ids=lambda c: c.__name__)
def test_named_classes_are_gazette_errors_with_status_ok(cls: type[GazetteError]) -> None:
    assert issubclass(cls, GazetteError)
    assert cls.__doc__ and cls.__doc__.strip()  # says when it is raised
    err = cls("the thing broke the rule", detail=7)
    assert err.status == Status.OK and err.status.name == "OK"
    assert err.message == "the thing broke the rule" and str(err) == "the thing broke the rule"
    assert err.detail == 7 and err.context["detail"] == 7  # type: ignore[attr-defined]
    with pytest.raises(GazetteError) as caught:
        raise err
    assert caught.value is err


def test_named_classes_are_exported_beside_gazette_error() -> None:
    for cls in NAMED:
        assert getattr(gazette, cls.__name__) is cls
        assert cls.__name__ in gazette.__all__
    assert gazette.GazetteError is GazetteError
    # Builtin bases kept for callers that catch them.
    assert issubclass(ValidationError, ValueError) and issubclass(CallTimeout, TimeoutError)


def test_protocol_statuses_stay_gazette_error() -> None:
    err = GazetteError(Status.JOURNAL_NOT_FOUND, "journal a/b")
    assert type(err) is GazetteError and err.status == Status.JOURNAL_NOT_FOUND
    assert str(err) == "JOURNAL_NOT_FOUND: journal a/b"
    shard = GazetteError(ShardStatus.SHARD_NOT_FOUND, "shard s")
    assert shard.status == ShardStatus.SHARD_NOT_FOUND
    # No named class is used for a protocol status: they all take a message, not a status.
    assert not any(isinstance(err, cls) for cls in NAMED)


def test_existing_subclasses_derive_from_the_fitting_named_class() -> None:
    from gazette.auth.tokens import AuthError
    from gazette.consumer.client import ShardTimeoutError
    from gazette.consumer.recoverylog.ops import RecoveryLogError
    from gazette.consumer.serve import ApplicationLoadError
    from gazette.consumer.spec import ShardSpecError
    from gazette.consumer.sql_store import SQLStoreError
    from gazette.consumer.store import FencingError
    from gazette.fragment import stores
    from gazette.fragment.content import CorruptFragmentError
    from gazette.message.mapping import EmptyListingError

    assert stores.StoreError is StoreError  # still importable where it was
    assert issubclass(stores.ObjectNotFoundError, StoreError)
    assert issubclass(stores.ObjectNotFoundError, FileNotFoundError)
    for sub, named in [
        (SQLStoreError, StoreError),
        (RecoveryLogError, StoreError),
        (CorruptFragmentError, StoreError),
        (FencingError, FencedError),
        (EmptyListingError, ConfigurationError),
        (ShardSpecError, ValidationError),
        (ApplicationLoadError, ValidationError),
        (ShardTimeoutError, CallTimeout),
        (AuthError, GazetteError),
    ]:
        assert issubclass(sub, named), (sub, named)
    assert FencingError("fenced").status == Status.OK
    assert errors.GazetteError is GazetteError


# ---- real call sites raise the named class


def test_consumer_group_with_a_bad_argument_raises_validation_error() -> None:
    from gazette.consumer.application import Application
    from gazette.consumer.runner import ConsumerGroup

    with pytest.raises(ValidationError, match=r"processes >= 1 \(got 0\)") as err:
        ConsumerGroup(Application(), etcd="http://127.0.0.1:1", broker="127.0.0.1:1", root="/r", processes=0)
    assert err.value.status == Status.OK
    with pytest.raises(ValidationError, match='consumer mode "thread" is not known'):
        ConsumerGroup(
            Application(), etcd="http://127.0.0.1:1", broker="127.0.0.1:1", root="/r", mode="thread"
        )
    with pytest.raises(ConfigurationError, match="entry_module='tests.zombie' .* needs mode='subprocess'"):
        ConsumerGroup(
            Application(),
            etcd="http://127.0.0.1:1",
            broker="127.0.0.1:1",
            root="/r",
            entry_module="tests.zombie",
        )


def test_a_fenced_sql_store_raises_fenced_error(tmp_path) -> None:
    from gazette.consumer.sql_store import SQLStore
    from gazette.consumer.store import ConsumerCheckpoint, FencingError

    shard = SimpleNamespace(fqn="/root/items/fenced-000")
    url = f"sqlite://{tmp_path}/checkpoints.db"
    old, new = SQLStore(shard, url), SQLStore(shard, url)
    try:
        old.restore_checkpoint(shard)
        new.restore_checkpoint(shard)  # a newer primary: the fence moves on
        with pytest.raises(FencedError, match="fence is no longer 1") as err:
            old.start_commit(shard, ConsumerCheckpoint(), []).result()
        assert isinstance(err.value, FencingError) and err.value.status == Status.OK
        new.start_commit(shard, ConsumerCheckpoint(), []).result()  # the new primary commits
    finally:
        old.destroy()
        new.destroy()


def test_a_missing_fragment_object_raises_store_error(tmp_path) -> None:
    from gazette.fragment.stores import get_store

    store = get_store(f"file://{tmp_path}/")
    with pytest.raises(StoreError) as err:
        store.get("journal/none-such")
    assert isinstance(err.value, FileNotFoundError) and err.value.status == Status.OK


async def test_persister_misuse_raises_state_error() -> None:
    from gazette.fragment.fragment import Fragment
    from gazette.fragment.persister import Persister

    p = Persister()
    await p.start()
    try:
        with pytest.raises(StateError, match="Persister.start called twice"):
            await p.start()
        fragment = Fragment(journal="a/b", begin=0, end=0)
        with pytest.raises(StateError, match="is not pending here"):
            await p.flush(fragment)
    finally:
        await p.stop(drain=False)


async def test_append_service_raises_state_and_append_errors() -> None:
    from gazette.client.aio import AsyncClient
    from gazette.client.append_service import AsyncAppendService

    client = AsyncClient("127.0.0.1:1")
    try:
        service = AsyncAppendService(client)
        failed: concurrent.futures.Future = concurrent.futures.Future()
        failed.set_exception(RuntimeError("the dependency broke"))
        future = service.append("tests/errors", b"x\n", dependencies=[failed])
        with pytest.raises(
            AppendError, match="append to tests/errors: a dependency failed: the dependency broke"
        ):
            await asyncio.wrap_future(future)
        await service.close()
        with pytest.raises(StateError, match="append service is closed: cannot append to tests/errors"):
            service.append("tests/errors", b"y\n")
    finally:
        await client.close()


def test_store_wait_all_raises_append_error() -> None:
    from gazette.consumer.store import wait_all

    cancelled: concurrent.futures.Future = concurrent.futures.Future()
    cancelled.cancel()
    cancelled.set_running_or_notify_cancel()  # as an executor does: now done for wait()
    with pytest.raises(AppendError, match="the commit: an append it depends on was cancelled"):
        wait_all([cancelled], "the commit")


def test_a_grpc_error_becomes_peer_error() -> None:
    from gazette.client.policy import rpc_failure
    from gazette.client.timeouts import CallTrace

    rpc = grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), "gone")
    err = rpc_failure(rpc)
    assert isinstance(err, PeerError) and err.status == Status.OK
    assert str(err) == "UNAVAILABLE: gone" and err.grpc_code == "UNAVAILABLE"  # type: ignore[attr-defined]
    named = rpc_failure(rpc, CallTrace("append to", "a/b", endpoint="http://127.0.0.1:9"))
    assert str(named) == "UNAVAILABLE: gone (append to a/b at broker http://127.0.0.1:9)"


def test_a_shard_listing_that_breaks_the_protocol_raises_peer_error() -> None:
    from gazette.consumer.client import shard_info_from_pb
    from gazette.protocol import shard_pb2

    listed = shard_pb2.ListResponse.Shard(spec=shard_pb2.ShardSpec(id="s-000"))
    listed.route.members.add(zone="a", suffix="m")  # a route member without its status
    with pytest.raises(PeerError, match='listed shard "s-000" has 1 route members but 0 statuses') as err:
        shard_info_from_pb(listed)
    assert err.value.status == Status.OK


def test_a_bad_frame_raises_framing_error_in_the_family() -> None:
    from gazette.message.framing import FramingError, JSONFraming

    decoder = JSONFraming().decoder("a/journal", 0)
    with pytest.raises(FramingError, match="invalid JSON") as err:
        decoder.feed(b"{nope\n")
    assert isinstance(err.value, GazetteError) and isinstance(err.value, ValueError)
    assert err.value.status == Status.OK and err.value.journal == "a/journal"


def test_public_argument_checks_raise_validation_error() -> None:
    from gazette.message.uuid import build_uuid
    from gazette.protocol.endpoints import check_keepalive

    with pytest.raises(ValidationError, match="is not 6 bytes"):
        build_uuid(b"x", 1, 0)
    with pytest.raises(ValidationError, match="keepalive 0.1 is not a number of seconds"):
        check_keepalive(0.1)


def test_local_cluster_bad_arguments_and_state_raise_named_classes(tmp_path) -> None:
    from gazette.local.cluster import LocalCluster

    with pytest.raises(ValidationError, match="LocalCluster needs at least one broker"):
        LocalCluster(brokers=0)
    with pytest.raises(ValidationError, match='LocalCluster mode "thread" is not known'):
        LocalCluster(mode="thread")
    with pytest.raises(StateError, match="has no embedded etcd"):
        _ = LocalCluster(data_dir=str(tmp_path)).embedded_etcd  # not started

"""Journal registers under an append's union_registers / subtract_registers, as Gazette's broker
applies them (broker/append_fsm.go): registers = SubtractLabelSet(registers, subtract), then
UnionLabelSets(union, registers) -- the request's values win for a name both sides have, and a
subtraction drops a name only when it names exactly that name's values."""

from __future__ import annotations

import grpc
import pytest

from gazette.client.loop import default_loop
from gazette.protocol import broker_pb2 as pb
from gazette.protocol import broker_pb2_grpc as pb_grpc
from gazette.protocol.labels import LabelSet

J = "examples/registers/part-000"


@pytest.fixture
def journal(cluster, client):
    client.apply_journals([cluster.journal_spec(J, fragment_length=1 << 16, refresh_interval="1s")])
    return J


def _registers(client, **kw) -> LabelSet:
    return client.append(J, b"x", **kw).registers


def test_union_replaces_the_values_of_a_name_both_sides_have(client, journal):
    assert _registers(client, union_registers={"author": "A", "epoch": "1"}) == LabelSet(
        {"author": "A", "epoch": "1"}
    )
    # {author: A} with union {author: B} is {author: B}, not {author: [A, B]}.
    assert _registers(client, union_registers={"author": "B"}) == LabelSet({"author": "B", "epoch": "1"})
    # All of a name's values are replaced by the union's (possibly several) values.
    multi = LabelSet([("author", "C"), ("author", "D")])
    assert _registers(client, union_registers=multi) == LabelSet([*multi, ("epoch", "1")])
    assert _registers(client, union_registers={"author": "E"}) == LabelSet({"author": "E", "epoch": "1"})


def test_subtract_drops_a_name_only_on_exactly_its_values(client, journal):
    start = LabelSet([("owner", "a"), ("owner", "b"), ("epoch", "1")])
    assert _registers(client, union_registers=start) == start
    # One of two values: no change (Gazette compares the name's whole value list).
    assert _registers(client, subtract_registers={"owner": "a"}) == start
    # An empty value is an ordinary value, not "any": no change.
    assert _registers(client, subtract_registers={"owner": ""}) == start
    # A different value, and an absent name: no change.
    assert _registers(client, subtract_registers={"epoch": "2", "other": "x"}) == start
    # Exactly the values: the name goes.
    both = LabelSet([("owner", "a"), ("owner", "b")])
    assert _registers(client, subtract_registers=both) == LabelSet({"epoch": "1"})


def test_subtract_applies_before_union(client, journal):
    _registers(client, union_registers={"owner": "a"})
    # Subtract {owner: a} then union {owner: b}: as Gazette, the hand-over of a lock in one append.
    res = client.append(J, b"x", check_registers="owner=a", subtract_registers={"owner": "a"},
                        union_registers={"owner": "b"})  # fmt: skip
    assert res.registers == LabelSet({"owner": "b"})
    # Subtract and union of the same label: the union is applied last, so it stays.
    assert _registers(client, subtract_registers={"owner": "c"}, union_registers={"owner": "c"}) == LabelSet(
        {"owner": "c"}
    )


def test_a_present_but_empty_register_update_needs_bytes(cluster, client, journal):
    """As Gazette (`UnionRegisters != nil`): an empty union_registers set on an empty append is refused."""
    loop = default_loop()

    async def append_empty_with(field: str) -> pb.AppendResponse | grpc.aio.AioRpcError:
        async with grpc.aio.insecure_channel(cluster.broker_endpoints[0].removeprefix("http://")) as ch:
            first = pb.AppendRequest(journal=J)
            getattr(first, field).SetInParent()  # present, with no labels

            async def requests():
                yield first
                yield pb.AppendRequest()  # commit, no content

            try:
                return await pb_grpc.JournalStub(ch).Append(requests())
            except grpc.aio.AioRpcError as exc:
                return exc

    client.append(J, b"x")  # the journal has its primary by now
    for field in ("union_registers", "subtract_registers"):
        got = loop.run(append_empty_with(field))
        assert isinstance(got, grpc.aio.AioRpcError), got
        assert "register modification requires a non-empty append" in (got.details() or "")
    res = client.append(J, b"")  # without a register update, an empty append is fine
    assert res.begin == res.end


@pytest.mark.parametrize(
    "field, labels, message",
    [
        ("union_registers", [("bad name", "x")], 'union_registers.labels[0]: label name "bad name"'),
        (
            "union_registers",
            [("bb", "1"), ("aa", "1")],
            "union_registers.labels[1]: labels are not in unique",
        ),
        ("union_registers", [("aa", "1"), ("aa", "1")], "labels are not in unique, sorted order"),
        (
            "subtract_registers",
            [("aa", ""), ("aa", "1")],
            'label "aa" has both an empty and a non-empty value',
        ),
        ("subtract_registers", [("aa", "x|y")], "invalid character '|'"),
        (
            "check_registers",
            [("aa", ""), ("aa", "1")],
            'check_registers: selector include label "aa" has both',
        ),
    ],
)
def test_malformed_registers_are_refused(cluster, client, journal, field, labels, message):
    """As Gazette's AppendRequest.Validate: register sets as sent must be valid, sorted and unique."""
    loop = default_loop()
    client.append(J, b"x")

    async def append() -> grpc.aio.AioRpcError | pb.AppendResponse:
        async with grpc.aio.insecure_channel(cluster.broker_endpoints[0].removeprefix("http://")) as ch:
            first = pb.AppendRequest(journal=J)
            target = first.check_registers.include if field == "check_registers" else getattr(first, field)
            target.labels.extend(pb.Label(name=n, value=v) for n, v in labels)

            async def requests():
                yield first
                yield pb.AppendRequest(content=b"y")
                yield pb.AppendRequest()

            try:
                return await pb_grpc.JournalStub(ch).Append(requests())
            except grpc.aio.AioRpcError as exc:
                return exc

    got = loop.run(append())
    assert isinstance(got, grpc.aio.AioRpcError), got
    assert got.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in (got.details() or "")
    assert client.read_all(J) == b"x"

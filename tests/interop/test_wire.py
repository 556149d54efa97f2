"""gazette-py's broker protocol against Gazette's own protocol.proto, descriptor by descriptor.

Gazette's .proto comes from the Go module cache that `make peers` filled (the pinned version), is
compiled here with grpc_tools' protoc, and compared with the descriptor our generated module carries:
the package, every message (nested ones too) with each field's name, number, type, label and message
or enum type, reserved numbers, every enum value, and the Journal service's methods with their
streaming shapes. Ours may carry only the listed later additions of Gazette's master on top.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2
from interop.conftest import gazette_source

from gazette.local.gazette_peer import peer_version
from gazette.protocol import broker_pb2, gazette_py_pb2, recoverylog_pb2, shard_pb2

# Fields and values gazette-py speaks that Gazette added on master after the pinned tag.
LATER_ADDITIONS = {
    "protocol.ReadRequest.min_etcd_revision",
    "protocol.AppendRequest.min_etcd_revision",
    "protocol.AppendRequest.SUSPEND_KEEP",  # enum values are scoped beside their enum
    "protocol.FragmentStoreHealthRequest.check_delete",
    "protocol.FragmentStoreHealthRequest.check_delete_prefix",
}


def _gazette_descriptor(
    tmp_path: Path, proto: str = "broker/protocol/protocol.proto"
) -> descriptor_pb2.FileDescriptorProto:
    from grpc_tools import protoc

    core = gazette_source()
    gogo = next(iter(sorted((core.parent.parent / "github.com" / "gogo").glob("protobuf@*"))), None)
    assert gogo is not None, f"gogo/protobuf is not in the module cache beside {core}"
    out = tmp_path / "gazette.pb"
    well_known = str(resources.files("grpc_tools") / "_proto")
    args = ["protoc", f"-I{core}", f"-I{gogo}", f"-I{well_known}", f"--descriptor_set_out={out}",
            proto]  # fmt: skip
    assert protoc.main(args) == 0, f"protoc could not compile Gazette's {proto}"
    files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file
    return files[-1]


def _ours(module=broker_pb2) -> descriptor_pb2.FileDescriptorProto:
    fdp = descriptor_pb2.FileDescriptorProto()
    module.DESCRIPTOR.CopyToProto(fdp)
    return fdp


def _shape(fdp: descriptor_pb2.FileDescriptorProto) -> dict[str, object]:
    """Every wire-relevant fact of the file, keyed by full name."""
    out: dict[str, object] = {}

    def enum(prefix: str, e: descriptor_pb2.EnumDescriptorProto) -> None:
        for v in e.value:
            out[f"{prefix}.{v.name}"] = ("enum value", v.number)

    def message(prefix: str, m: descriptor_pb2.DescriptorProto) -> None:
        name = f"{prefix}.{m.name}"
        out[name] = ("message", sorted((r.start, r.end) for r in m.reserved_range), sorted(m.reserved_name))
        for f in m.field:
            out[f"{name}.{f.name}"] = ("field", f.number, f.type, f.label, f.type_name)
        for nested in m.nested_type:
            message(name, nested)
        for e in m.enum_type:
            out[f"{name}.{e.name}"] = ("enum",)
            enum(name, e)

    for m in fdp.message_type:
        message(fdp.package, m)
    for e in fdp.enum_type:
        out[f"{fdp.package}.{e.name}"] = ("enum",)
        enum(fdp.package, e)
    for s in fdp.service:
        for m in s.method:
            out[f"{fdp.package}.{s.name}/{m.name}"] = (
                "method",
                m.input_type,
                m.output_type,
                m.client_streaming,
                m.server_streaming,
            )
    return out


def test_our_broker_protocol_is_gazettes_on_the_wire(tmp_path: Path) -> None:
    theirs, ours = _shape(_gazette_descriptor(tmp_path)), _shape(_ours())
    assert _gazette_descriptor(tmp_path).package == _ours().package == "protocol"
    missing = sorted(set(theirs) - set(ours))
    differing = sorted(k for k in set(theirs) & set(ours) if theirs[k] != ours[k])
    extra = sorted(set(ours) - set(theirs) - LATER_ADDITIONS)
    assert not missing, f"Gazette {peer_version()} has these and ours does not: {missing}"
    assert not differing, "these differ: " + "; ".join(
        f"{k}: Gazette {theirs[k]}, ours {ours[k]}" for k in differing
    )
    assert not extra, (
        f"ours has these beyond Gazette's protocol.Journal (put them in gazette_py.proto): {extra}"
    )


@pytest.mark.parametrize(
    "theirs, ours",
    [
        ("consumer/protocol/protocol.proto", shard_pb2),
        ("consumer/recoverylog/recorded_op.proto", recoverylog_pb2),
    ],
)
def test_our_shard_and_recoverylog_protocols_are_gazettes_on_the_wire(
    tmp_path: Path, theirs: str, ours
) -> None:
    gazette_fdp, our_fdp = _gazette_descriptor(tmp_path, theirs), _ours(ours)
    assert gazette_fdp.package == our_fdp.package
    a, b = _shape(gazette_fdp), _shape(our_fdp)
    assert a == b, (
        f"missing {sorted(set(a) - set(b))}, extra {sorted(set(b) - set(a))}, differing "
        + "; ".join(f"{k}: Gazette {a[k]}, ours {b[k]}" for k in sorted(set(a) & set(b)) if a[k] != b[k])
    )


def test_method_paths_are_gazettes_and_ours_live_apart() -> None:
    """Runs without Go: the gRPC paths clients and peers dial."""
    journal = broker_pb2.DESCRIPTOR.services_by_name["Journal"]
    assert {m.name for m in journal.methods} == {
        "List", "Apply", "Read", "Append", "Replicate", "ListFragments", "FragmentStoreHealth"
    }  # fmt: skip
    assert journal.full_name == "protocol.Journal"  # so /protocol.Journal/Append, as Gazette serves it
    flusher = gazette_py_pb2.DESCRIPTOR.services_by_name["Flusher"]
    assert flusher.full_name == "gazette_py.Flusher"
    assert gazette_py_pb2.DESCRIPTOR.package != broker_pb2.DESCRIPTOR.package

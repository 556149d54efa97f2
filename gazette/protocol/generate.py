"""Regenerates the committed *_pb2 modules from the .proto files beside this module.

`make protos` runs it in place; tests/protocol/test_generated.py runs it into a temp directory
and fails when the committed output differs (stale generated code).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from importlib import resources
from pathlib import Path

PROTO_DIR = Path(__file__).resolve().parent
REPO_ROOT = PROTO_DIR.parent.parent
PROTO_FILES = ("broker.proto", "recoverylog.proto", "shard.proto", "gazette_py.proto")


def generated_names(proto: str) -> list[str]:
    stem = proto.removesuffix(".proto")
    return [f"{stem}_pb2.py", f"{stem}_pb2.pyi", f"{stem}_pb2_grpc.py"]


def generate(out_root: Path) -> list[Path]:
    """Runs protoc into `out_root`/gazette/protocol and returns the files it wrote."""
    from grpc_tools import protoc

    well_known = str(resources.files("grpc_tools") / "_proto")
    out_root.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for proto in PROTO_FILES:
        rel = f"gazette/protocol/{proto}"
        args = [
            "protoc",
            f"-I{REPO_ROOT}",
            f"-I{well_known}",
            f"--python_out={out_root}",
            f"--pyi_out={out_root}",
            f"--grpc_python_out={out_root}",
            rel,
        ]
        if protoc.main(args) != 0:
            raise RuntimeError(f"protoc failed on {rel}")
        written += [out_root / "gazette" / "protocol" / name for name in generated_names(proto)]
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if committed modules are stale")
    ns = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        files = generate(Path(tmp))
        stale = [
            f.name
            for f in files
            if not (PROTO_DIR / f.name).exists() or (PROTO_DIR / f.name).read_bytes() != f.read_bytes()
        ]
        if ns.check:
            if stale:
                print("stale generated protocol modules: " + ", ".join(stale) + " (run `make protos`)")
                return 1
            return 0
        for f in files:
            shutil.copyfile(f, PROTO_DIR / f.name)
        print("regenerated: " + ", ".join(f.name for f in files))
    return 0


if __name__ == "__main__":
    sys.exit(main())

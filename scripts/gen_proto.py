"""Regenerate the Python stubs from proto/ (one command), or check that the committed ones are current.

python scripts/gen_proto.py           # write stubs next to the .proto files
python scripts/gen_proto.py --check   # exit 1 if the committed stubs differ from a fresh generation
"""

from __future__ import annotations

import filecmp
import shutil
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
PACKAGE = Path("connect/coordinator/v1")
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")


def generate(out_dir: Path) -> list[Path]:
    sources = sorted((PROTO_ROOT / PACKAGE).glob("*.proto"))
    include = str(Path(protoc.__file__).parent / "_proto")
    args = [
        "protoc",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *[str(s.relative_to(PROTO_ROOT)) for s in sources],
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    return sorted(p.relative_to(out_dir) for p in (out_dir / PACKAGE).iterdir() if p.name.endswith(GENERATED_SUFFIXES))


def main() -> int:
    check = "--check" in sys.argv[1:]
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate(Path(tmp))
        if check:
            committed = sorted(
                p.relative_to(PROTO_ROOT)
                for p in (PROTO_ROOT / PACKAGE).iterdir()
                if p.name.endswith(GENERATED_SUFFIXES)
            )
            stale = [
                str(p)
                for p in fresh
                if not (PROTO_ROOT / p).exists() or not filecmp.cmp(Path(tmp) / p, PROTO_ROOT / p, shallow=False)
            ]
            stale += [str(p) for p in committed if p not in fresh]
            if stale:
                print("generated stubs are stale; run `python scripts/gen_proto.py`:", *stale, sep="\n  ")
                return 1
            print(f"{len(fresh)} generated files are current")
            return 0
        for p in (PROTO_ROOT / PACKAGE).iterdir():
            if p.name.endswith(GENERATED_SUFFIXES):
                p.unlink()
        for p in fresh:
            shutil.copyfile(Path(tmp) / p, PROTO_ROOT / p)
        print(f"wrote {len(fresh)} files under {PROTO_ROOT / PACKAGE}")
        return 0


if __name__ == "__main__":
    sys.exit(main())

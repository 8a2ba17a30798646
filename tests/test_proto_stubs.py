"""The wire contract's checks: committed stubs are current, and proto/ passes buf lint and buf format.

`make lint` runs the same checks; they are tests too so that a plain `pytest` catches a stale stub.
buf comes from `make setup` (.tools/node_modules/.bin/buf); a missing buf is a failure, not a skip.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)


def find_buf() -> str:
    """$BUF if set, else the copy `make setup` installs in .tools, else buf on PATH."""
    candidates = [os.environ.get("BUF"), str(ROOT / ".tools" / "node_modules" / ".bin" / "buf"), shutil.which("buf")]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    pytest.fail("buf CLI not found (looked at $BUF, .tools/node_modules/.bin/buf, PATH): run `make setup`")


def test_committed_stubs_are_current() -> None:
    result = run(sys.executable, "scripts/gen_proto.py", "--check")
    assert result.returncode == 0, (
        f"stubs under proto/ are stale; run `make proto` and commit them\n{result.stdout}{result.stderr}"
    )


@pytest.mark.parametrize(
    "command",
    [["lint"], ["format", "--diff", "--exit-code"]],
    ids=["buf-lint", "buf-format"],
)
def test_buf(command: list[str]) -> None:
    result = run(find_buf(), *command)
    assert result.returncode == 0, f"buf {' '.join(command)} failed:\n{result.stdout}{result.stderr}"

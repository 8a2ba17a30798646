"""The simulator's command line: a console script, a bad --repro token is a one-line usage error
(exit 2) naming the flag, and a run with an interpreter that lacks the project's dependencies says
how to run it instead of a ModuleNotFoundError traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.coordinator import REPO

SCRIPT = Path(sys.executable).parent / "connect-simulator"


def run(*cmd: str | Path) -> tuple[int, list[str], str]:
    out = subprocess.run([str(c) for c in cmd], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert "Traceback" not in out.stderr, out.stderr
    return out.returncode, [line for line in out.stderr.splitlines() if line.strip()], out.stdout


@pytest.mark.parametrize("token", ["abc", "not-base64!!", "eJzLSM3JyQcABiwCFQ"])
def test_bad_repro_token_is_a_usage_error(token: str) -> None:
    rc, errors, stdout = run(sys.executable, "-m", "simulator", "replay", "--repro", token)
    assert rc == 2, errors
    assert len(errors) == 1 and "--repro" in errors[0] and "token" in errors[0], errors
    assert stdout == ""


def test_console_script() -> None:
    rc, _, stdout = run(SCRIPT, "--help")
    assert rc == 0 and "replay" in stdout
    rc, errors, _ = run(SCRIPT, "replay", "--repro", "abc")
    assert rc == 2 and len(errors) == 1 and "--repro" in errors[0]


def test_wrong_interpreter_says_how() -> None:
    # -S: no site-packages, as with a system python outside the project's virtualenv
    rc, errors, _ = run(sys.executable, "-S", "-m", "simulator", "run", "--seed", "1")
    assert rc == 1
    assert len(errors) == 1, errors
    assert "connect-simulator" in errors[0] and ".venv/bin/python -m simulator" in errors[0], errors

"""Every `connect-groups ...` command in the fenced code blocks of README.md and docs/operations.md
works as written against the stack `make up` starts (here headless, on free ports): exit 0.

The stack's address is given the documented way (CONNECT_COORDINATOR_ADDRESS, or in place of the
example's --coordinator addresses). Placeholders are filled in with the demo's real names: <GROUP> /
GROUP -> connect-demo, <CONNECTOR> -> orders-sink, <INSTANCE> -> worker-1, a member id (a <...>
placeholder or the example's UUID) -> a member the group really has. Commands that run until
stopped (--watch, --follow) must still be running, error-free, after a few seconds."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from connect.coordinator.v1 import admin_pb2, admin_pb2_grpc
from tests.e2e.test_local_stack import REPO, stack_command

pytestmark = pytest.mark.timeout(300)

DOCS = ("README.md", "docs/operations.md")
GROUP = "connect-demo"
FENCE = re.compile(r"^(\s*)(```|~~~)\s*([\w+-]*)")
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
FOREVER = ("--watch", "--follow")
CLI = Path(sys.executable).parent / "connect-groups"


def documented_commands() -> list[tuple[str, str]]:
    """(where, command) for each `connect-groups` line of a fenced block that is not text output."""
    found = []
    for doc in DOCS:
        path = REPO / doc
        lines = path.read_text().splitlines()
        in_block, lang, pending, start = False, "", "", 0
        for n, raw in enumerate(lines, 1):
            fence = FENCE.match(raw)
            if fence:
                in_block, lang = (not in_block), fence.group(3).lower()
                continue
            if not in_block or lang in ("text", "json", "yaml", "proto", "python", "console-output"):
                continue
            line = raw.strip()
            if pending:
                line, pending = pending + " " + line, ""
            else:
                start = n
            if line.endswith("\\"):
                pending = line[:-1].rstrip()
                continue
            line = line.removeprefix("$ ")
            if line.startswith("connect-groups ") or line.startswith(".venv/bin/connect-groups "):
                found.append((f"{doc}:{start}", line))
    return found


COMMANDS = documented_commands()


def test_the_docs_document_connect_groups_commands() -> None:
    assert len(COMMANDS) >= 5, COMMANDS


class Stack:
    def __init__(self, proc: subprocess.Popen[str], address: str) -> None:
        self.proc = proc
        self.address = address
        self.channel = grpc.insecure_channel(address)
        self.admin = admin_pb2_grpc.ConnectGroupAdminStub(self.channel)

    def describe(self) -> admin_pb2.DescribedGroup:
        return self.admin.DescribeGroups(admin_pb2.DescribeGroupsRequest(group_ids=[GROUP]), timeout=10).groups[0]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    data = tmp_path_factory.mktemp("stack")
    cmd = [*stack_command(data), "--no-view"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        address = ""
        for line in proc.stdout:
            if line.startswith("coordinator "):
                address = line.split()[1]
                break
        assert address, f"the stack did not start; see {data}/stack"
        s = Stack(proc, address)
        deadline = time.monotonic() + 60
        while not (len(s.describe().members) == 3 and s.describe().group_state == "Stable"):
            assert time.monotonic() < deadline, s.describe()
            time.sleep(0.2)
        yield s
        s.channel.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def fill_in(argv: list[str], stack: Stack) -> list[str]:
    """The documented command, aimed at the stack, its placeholders replaced by real names."""
    out = [str(CLI)]
    prev = ""
    for token in argv[1:]:
        bare = token.strip("<>{}[]")
        is_placeholder = (token.startswith("<") and token.endswith(">")) or (bare.isupper() and bare.isalpha())
        if prev == "--coordinator":
            token = stack.address
        elif prev == "--member-id" and (is_placeholder or UUID.match(token)):
            members = sorted(stack.describe().members, key=lambda m: m.instance_id)
            token = members[-1].member_id if members else "no-member"
        elif is_placeholder:
            name = bare.upper()
            if "CONNECTOR" in name:
                token = "orders-sink"
            elif "INSTANCE" in name:
                token = "worker-2"
            elif "GROUP" in name:
                token = GROUP
        out.append(token)
        prev = token if token.startswith("--") else ""
    return out


@pytest.mark.parametrize(("where", "command"), COMMANDS, ids=[w for w, _ in COMMANDS])
def test_a_documented_command_works_on_the_make_up_stack(stack: Stack, where: str, command: str) -> None:
    argv = fill_in(shlex.split(command, comments=True), stack)
    env = {**os.environ, "CONNECT_COORDINATOR_ADDRESS": stack.address}
    if any(flag in argv for flag in FOREVER):
        proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(3)
        still = proc.poll() is None
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=20)
        assert still, f"{where}: `{command}` ended ({proc.returncode}): {err.strip()[-2000:]}"
        assert "Traceback" not in err, f"{where}: `{command}`:\n{err[-2000:]}"
        return
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, (
        f"{where}: `{command}` exited {done.returncode}: {(done.stderr or done.stdout).strip()[-2000:]}"
    )

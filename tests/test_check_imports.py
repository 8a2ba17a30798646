"""scripts/check_imports.py (run by `make lint`): no imports of another package's private modules or names."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from scripts import check_imports
from scripts.check_imports import Violation, check

REPO = Path(__file__).resolve().parents[1]

TREE = {
    "worker_sdk/__init__.py": "from worker_sdk._member import Member\n__version__ = '1'\n",
    "worker_sdk/_member.py": "class Member: ...\n",
    "worker_sdk/_assign.py": "def run() -> None: ...\n",
    # Inside its own package a private module is fine, absolute or relative.
    "worker_sdk/cli.py": "from worker_sdk._member import Member\nfrom ._assign import run\nfrom . import _assign\n",
    "services/__init__.py": "",
    "services/coordinator/__init__.py": "",
    "services/coordinator/core.py": "def _helper() -> None: ...\n",
    "services/coordinator/server.py": "from services.coordinator.core import _helper\n",
    "services/assignor/__init__.py": "",
    "services/assignor/_proto.py": "",
    "services/assignor/server.py": "from services.assignor import _proto\n",
    "simulator/__init__.py": "",
    "simulator/ok.py": (
        "from worker_sdk import Member, __version__\n"
        "from grpc_health.v1 import _async\n"  # not first-party: not this check's business
        "import worker_sdk\n"
    ),
    "simulator/bad.py": (
        "from worker_sdk._member import Member\n"  # 1
        "import worker_sdk._assign\n"  # 2
        "from worker_sdk import _member, Member as M\n"  # 3
        "from services.coordinator.core import _helper\n"  # 4
        "def f() -> None:\n"
        "    from services.assignor._proto import x\n"  # 6: function-level imports count too
    ),
    "simulator/allowed.py": "from worker_sdk._assign import run\n",
    "simulator/fixed.py": "from worker_sdk import Member\n",
    # A sibling subpackage of the same top-level package is another package.
    "services/coordinator/assign.py": "from services.assignor._proto import x\n",
    "bench/some_bench.py": "from services.assignor import _proto\n",
    "jobs/__init__.py": "",
}


def make_tree(root: Path) -> Path:
    for rel, text in TREE.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_private_imports_across_packages_are_reported_with_file_line_and_owner(tmp_path: Path) -> None:
    violations, stale = check(make_tree(tmp_path), frozenset())
    assert sorted(violations, key=lambda v: (v.path, v.line)) == [
        Violation("bench/some_bench.py", 1, "services.assignor._proto", "services.assignor"),
        Violation("services/coordinator/assign.py", 1, "services.assignor._proto", "services.assignor"),
        Violation("simulator/allowed.py", 1, "worker_sdk._assign", "worker_sdk"),
        Violation("simulator/bad.py", 1, "worker_sdk._member", "worker_sdk"),
        Violation("simulator/bad.py", 2, "worker_sdk._assign", "worker_sdk"),
        Violation("simulator/bad.py", 3, "worker_sdk._member", "worker_sdk"),
        Violation("simulator/bad.py", 4, "services.coordinator.core._helper", "services.coordinator"),
        Violation("simulator/bad.py", 6, "services.assignor._proto", "services.assignor"),
    ]
    assert stale == []


def test_allowed_files_are_skipped_and_an_entry_no_longer_needed_is_reported(tmp_path: Path) -> None:
    root = make_tree(tmp_path)
    violations, stale = check(root, frozenset({"simulator/allowed.py", "simulator/fixed.py", "simulator/gone.py"}))
    assert "simulator/allowed.py" not in {v.path for v in violations}
    assert stale == ["simulator/fixed.py", "simulator/gone.py"]


def test_the_repository_is_clean_and_its_allow_list_is_current() -> None:
    violations, stale = check(REPO)
    assert violations == [] and stale == [], (violations, stale)


def test_the_command_prints_one_line_per_problem_and_exits_1_then_0_once_fixed(tmp_path: Path) -> None:
    root = make_tree(tmp_path)
    for rel in ("simulator/allowed.py", "services/coordinator/assign.py", "bench/some_bench.py"):
        (root / rel).unlink()
    (root / "simulator" / "bad.py").write_text("from worker_sdk._member import Member\n")

    def run() -> subprocess.CompletedProcess[str]:
        command = [sys.executable, str(REPO / "scripts" / "check_imports.py"), str(root)]
        return subprocess.run(command, capture_output=True, text=True, check=False)

    out = run()
    assert (out.returncode, out.stderr) == (1, "")
    assert out.stdout.splitlines() == [
        "simulator/bad.py:1: imports worker_sdk._member, private to package worker_sdk; "
        "import it from worker_sdk's public modules (export it there if needed)",
        *(
            f"scripts/check_imports.py: {path} imports no private part of another package any more; "
            "remove it from ALLOWED"
            for path in sorted(check_imports.ALLOWED)
        ),
        f"1 private import(s) across packages; {len(check_imports.ALLOWED)} stale ALLOWED file(s)",
    ]
    (root / "simulator" / "bad.py").write_text("from worker_sdk import Member\n")
    for path in check_imports.ALLOWED:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text("from worker_sdk._assign import run\n")
    out = run()
    assert (out.returncode, out.stdout, out.stderr) == (0, "", "")


LAYERED = {
    "services/__init__.py": "",
    "services/coordinator/__init__.py": "",
    "services/coordinator/core/__init__.py": "",
    "services/coordinator/core/state.py": (
        "from services.coordinator.core import records\n"  # fine: inside the core
        "import grpc\n"  # 2
        "def f() -> None:\n"
        "    from services.coordinator.runtime.machine import Machine\n"  # 4: function-level counts
        "from services.storage import Storage\n"  # 5
        "import time\n"  # 6: no clock in the core
    ),
    "services/coordinator/runtime/__init__.py": "",
    "services/coordinator/runtime/server.py": (
        "from services.coordinator.core.state import X\nfrom services.coordinator.cli import groups\n"
    ),
    "services/coordinator/cli/__init__.py": "",
    "services/coordinator/cli/groups.py": "from services.coordinator.runtime import server\nimport grpc\n",
    "services/storage/__init__.py": "from services.coordinator.core.records import Record\n",
}


def test_the_coordinators_layers_are_enforced_in_one_direction(tmp_path: Path) -> None:
    for rel, text in LAYERED.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    found = [(v.path, v.line, v.target, v.layer) for v in check_imports.check_layers(tmp_path)]
    assert found == [
        ("services/coordinator/core/state.py", 2, "grpc", "services.coordinator.core"),
        (
            "services/coordinator/core/state.py",
            4,
            "services.coordinator.runtime.machine.Machine",
            "services.coordinator.core",
        ),
        ("services/coordinator/core/state.py", 5, "services.storage.Storage", "services.coordinator.core"),
        ("services/coordinator/core/state.py", 6, "time", "services.coordinator.core"),
        (
            "services/coordinator/runtime/server.py",
            2,
            "services.coordinator.cli.groups",
            "services.coordinator.runtime",
        ),
    ]
    out = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "check_imports.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 1
    assert out.stdout.splitlines()[-1].startswith("5 import(s) against the coordinator's layers")


def test_the_repository_keeps_its_layers() -> None:
    assert check_imports.check_layers(REPO) == []

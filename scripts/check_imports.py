"""No imports of private modules or names across packages (run by `make lint`).

A name or module whose last dotted part starts with one underscore (`_member`, `_apply`; not
dunders) is private to the package that holds it: `worker_sdk._member` and `worker_sdk._member.X`
belong to `worker_sdk`, `services.coordinator.core._helper` to `services.coordinator`. A module may
import it only from inside that package (subpackages included). Everything else goes through the
package's public surface, e.g. `from worker_sdk import Member`, not `from worker_sdk._member import
Member`.

Checked: every module under the project's packages below (function-level imports included).
tests/ are white-box and may import anything, so they are not checked; nor is scripts/.

Also checked: the direction of the coordinator's layers (LAYERS below). Its pure core imports
nothing of the runtime, security, the CLIs, gRPC, SQL, metrics, the clock or the event loop; storage
knows the core's records and lease rows but not what drives them; the runtime does not know the CLIs.

    python scripts/check_imports.py [ROOT]     # exit 0 clean, 1 with one line per offending import
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PACKAGES = ("services", "worker_sdk", "simulator", "jobs", "bench")
# Imports that may name another package's private parts: the first-party roots plus the proto stubs.
FIRST_PARTY = (*PACKAGES, "connect")
SOURCE_ROOTS = (".", "proto")  # where first-party packages live (as [tool.ruff] src)

# Files that may still import other packages' private parts, each to be removed when it is fixed. An
# entry that no longer needs it is reported too, so the list only shrinks.
ALLOWED: frozenset[str] = frozenset()


# (importing package, what it may not import, why): a module of the package (or under it) importing a
# module at or under one of those names, at any level (function-level and TYPE_CHECKING imports too).
LAYERS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    (
        "services.coordinator.core",
        (
            "services.coordinator.runtime",
            "services.coordinator.security",
            "services.coordinator.cli",
            "services.storage",
            "grpc",
            "grpc_health",
            "sqlalchemy",
            "alembic",
            "prometheus_client",
            "asyncio",
            "socket",
            "threading",
            "time",
            "random",
        ),
        "the core is pure: state, request and time in; records, response and effects out",
    ),
    (
        "services.coordinator.security",
        ("services.coordinator.runtime", "services.coordinator.cli", "services.storage"),
        "security is policy the runtime consults",
    ),
    ("services.coordinator.runtime", ("services.coordinator.cli",), "the CLIs wire the runtime, not the reverse"),
    (
        "services.classic",
        (
            "services.coordinator",
            "services.storage",
            "worker_sdk",
            "grpc",
            "sqlalchemy",
            "asyncio",
            "socket",
            "threading",
            "time",
        ),
        "Connect's codec and assignors are pure libraries the coordinator and the SDK both use",
    ),
    (
        "services.storage",
        (
            "services.coordinator.runtime.asyncio_runtime",
            "services.coordinator.runtime.server",
            "services.coordinator.runtime.machine",
            "services.coordinator.security",
            "services.coordinator.cli",
        ),
        "storage knows the core's records and the partitions' lease rows, not what drives them",
    ),
)


@dataclass(frozen=True)
class LayerViolation:
    path: str
    line: int
    target: str  # the imported module (or module.name)
    layer: str  # the importing package of LAYERS
    why: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.layer} may not import {self.target} ({self.why})"


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def check_layers(root: Path) -> list[LayerViolation]:
    """Imports that go against LAYERS, in file and line order."""
    found: list[LayerViolation] = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            module, is_package = module_name(root, path)
            rules = [(layer, banned, why) for layer, banned, why in LAYERS if _under(module, layer)]
            if not rules:
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            rel = path.relative_to(root).as_posix()
            seen: set[tuple[int, str]] = set()
            for line, target in imported(module, is_package, tree):
                for layer, banned, why in rules:
                    hit = next((b for b in banned if _under(target, b)), None)
                    if hit is not None and (line, hit) not in seen:
                        seen.add((line, hit))
                        found.append(LayerViolation(rel, line, target, layer, why))
    return sorted(found, key=lambda v: (v.path, v.line))


@dataclass(frozen=True)
class Violation:
    path: str  # relative to the root, with /
    line: int
    target: str  # the private module or name, dotted (a module's private part for `from M import ...`)
    owner: str  # the package it is private to

    def __str__(self) -> str:
        return (
            f"{self.path}:{self.line}: imports {self.target}, private to package {self.owner}; "
            f"import it from {self.owner}'s public modules (export it there if needed)"
        )


def is_private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def module_name(root: Path, path: Path) -> tuple[str, bool]:
    """The dotted name of the module at `path` and whether it is a package (`__init__.py`)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def _is_package(root: Path, dotted: str) -> bool:
    return any((root / src / Path(*dotted.split("."))).is_dir() for src in SOURCE_ROOTS)


def owner_of(root: Path, target: str) -> str | None:
    """The package `target` is private to, or None when no part of it is private."""
    parts = target.split(".")
    for i, part in enumerate(parts):
        if i > 0 and is_private(part):
            container = ".".join(parts[:i])
            # A private name inside a module belongs to the module's package.
            return container if _is_package(root, container) else ".".join(parts[: i - 1]) or container
    return None


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def imported(module: str, is_package: bool, tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, dotted target) for every import in `tree`: modules, and module.name for `from` imports."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            source = _resolve(module, is_package, node)
            for alias in node.names:
                yield node.lineno, source if alias.name == "*" else f"{source}.{alias.name}"


def check_file(root: Path, path: Path) -> list[Violation]:
    module, is_package = module_name(root, path)
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    rel = path.relative_to(root).as_posix()
    found: dict[tuple[int, str], Violation] = {}
    for line, target in imported(module, is_package, tree):
        if target.split(".")[0] not in FIRST_PARTY:
            continue
        owner = owner_of(root, target)
        if owner is None or module == owner or module.startswith(owner + "."):
            continue
        # Report the private part itself: `worker_sdk._member`, not `worker_sdk._member.Member`.
        parts = target.split(".")
        first = next(i for i, p in enumerate(parts) if i > 0 and is_private(p))
        private = ".".join(parts[: first + 1])
        found.setdefault((line, private), Violation(rel, line, private, owner))
    return list(found.values())


def check(root: Path, allowed: frozenset[str] = ALLOWED) -> tuple[list[Violation], list[str]]:
    """The violations outside the allowed files, and the allowed files that need it no more."""
    violations: list[Violation] = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            violations.extend(check_file(root, path))
    used = {v.path for v in violations}
    return [v for v in violations if v.path not in allowed], sorted(allowed - used)


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else Path(__file__).resolve().parents[1]
    violations, stale = check(root)
    layered = check_layers(root)
    for v in violations:
        print(v)
    for lv in layered:
        print(lv)
    for path in stale:
        print(
            f"scripts/check_imports.py: {path} imports no private part of another package any more; remove it from ALLOWED"
        )
    if violations or stale:
        print(f"{len(violations)} private import(s) across packages; {len(stale)} stale ALLOWED file(s)")
    if layered:
        print(f"{len(layered)} import(s) against the coordinator's layers (LAYERS in scripts/check_imports.py)")
    if violations or stale or layered:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

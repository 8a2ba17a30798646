"""`make up` installs only what the local stack needs; `make test` installs everything the tests
need. Checked on what make would run (`make -n -B`: every recipe, as if nothing were installed) and
on the Debian packages each profile of scripts/setup_system.sh asks for."""

from __future__ import annotations

import subprocess

from tests.fixtures.coordinator import REPO


def would_run(target: str) -> str:
    out = subprocess.run(["make", "-n", "-B", target], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def packages(profile: str) -> set[str]:
    out = subprocess.run(
        ["bash", "scripts/setup_system.sh", profile, "--list"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return set(out.stdout.split())


def test_make_up_sets_up_only_the_local_stack() -> None:
    up = would_run("up")
    assert "scripts/setup_system.sh stack" in up
    assert "pip install --quiet -e ." in up and ".[dev]" not in up
    for other in ("npm", "checkov", "setup_system.sh test", "gen_proto", "pytest"):
        assert other not in up, f"make up would run {other!r}:\n{up}"
    assert "scripts/up.sh" in up


def test_make_test_sets_up_everything_then_lints_and_runs_pytest() -> None:
    test = would_run("test")
    for step in (
        "scripts/setup_system.sh test",
        "-e '.[dev,metrics]'",
        "npm install",
        "npm ci",
        "checkov",
        "ruff",
        "pytest",
    ):
        assert step in test, f"make test would not run {step!r}:\n{test}"
    assert test.index("setup_system.sh test") < test.index("ruff") < test.index("bin/pytest")


def test_the_stack_profile_asks_for_python_only_and_the_test_profile_for_the_rest() -> None:
    stack, test = packages("stack"), packages("test")
    assert stack == {"python3.11", "python3.11-venv"}
    assert stack <= test
    for needed in ("postgresql", "nodejs", "npm", "prometheus", "podman", "buildah", "debootstrap", "chromium"):
        assert needed in test, needed


def test_an_unknown_profile_is_one_line() -> None:
    out = subprocess.run(["bash", "scripts/setup_system.sh", "everything"], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "stack" in out.stderr and "test" in out.stderr, out.stderr

"""scripts/check_docs.py (run by `make lint`): links and anchors resolve, CLI commands in the docs
parse, and docs/operations.md documents exactly the server's configuration keys."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from scripts import check_docs
from scripts.check_docs import check, slug
from services.coordinator.core.config import GROUP_CONFIG_NAMES, ServerConfig

REPO = Path(__file__).resolve().parents[1]
KEYS = sorted(ServerConfig.KEYS)


def operations(keys: list[str] = KEYS, extra: str = "") -> str:
    rows = "".join(f"| `{key}` | 1 |\n" for key in keys)
    return (
        f"# Operations\n\nIntro.\n\n## Configuration keys\n\n| key | default |\n| --- | --- |\n{rows}{extra}\n## Next\n"
    )


def report(root: Path, files: dict[str, str]) -> list[str]:
    """The check's lines for a tree of these files (plus a docs/operations.md that is clean)."""
    files = {"docs/operations.md": operations(), **files}
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return [str(p) for p in check(root)]


def sh(*lines: str, language: str = "sh") -> str:
    return f"```{language}\n" + "\n".join(lines) + "\n```\n"


# --- links ----------------------------------------------------------------------------------------


def test_a_link_to_a_missing_file_is_reported(tmp_path: Path) -> None:
    readme = "# Project\n\nSee [the guide](docs/guide.md) and [ops](docs/operations.md).\n"
    assert report(tmp_path, {"README.md": readme}) == ["README.md:3: link 'docs/guide.md': no such file docs/guide.md"]


def test_a_link_to_a_missing_anchor_is_reported(tmp_path: Path) -> None:
    guide = "# Guide\n\n## Getting started\n\ntext\n"
    readme = "# Project\n\n[ok](docs/guide.md#getting-started)\n[broken](docs/guide.md#installing)\n"
    assert report(tmp_path, {"README.md": readme, "docs/guide.md": guide}) == [
        "README.md:4: link 'docs/guide.md#installing': no anchor 'installing' in docs/guide.md"
    ]


def test_duplicate_headings_get_numbered_anchors(tmp_path: Path) -> None:
    guide = "# Guide\n\n## Usage\n\nx\n\n## Usage\n\ny\n\n[first](#usage) [second](#usage-1) [third](#usage-2)\n"
    assert report(tmp_path, {"docs/guide.md": guide}) == [
        "docs/guide.md:11: link '#usage-2': no anchor 'usage-2' in docs/guide.md"
    ]


def test_anchors_follow_github_slugs_and_explicit_ids(tmp_path: Path) -> None:
    guide = (
        "# The `connect-groups` CLI: flags & exit codes\n\n"
        "## Why *a* group_id waits?\n\n"
        "Setext heading\n--------------\n\n"
        '<a id="custom-anchor"></a>\n<a name="old-name"></a>\n\n'
        "[a](#the-connect-groups-cli-flags--exit-codes) [b](#why-a-group_id-waits) [c](#setext-heading)\n"
        "[d](#custom-anchor) [e](guide.md#old-name) [f](./#readme) [g](../docs/guide.md)\n"
    )
    assert report(tmp_path, {"docs/guide.md": guide}) == []
    assert slug("Ünïcode — and 1.2.3") == "ünïcode--and-123"


def test_links_in_code_and_external_links_are_not_checked(tmp_path: Path) -> None:
    guide = (
        "# Guide\n\n`[not a link](nope.md)` and [web](https://example.com/x.md) [mail](mailto:a@b.c)\n\n"
        + sh("echo '[x](missing.md)'", language="md")
        + "\n[ref]: nope-either.md\n"
        + '<img src="pic.svg">\n'
    )
    assert report(tmp_path, {"docs/guide.md": guide}) == [
        "docs/guide.md:9: link 'nope-either.md': no such file docs/nope-either.md",
        "docs/guide.md:10: link 'pic.svg': no such file docs/pic.svg",
    ]


# --- commands -------------------------------------------------------------------------------------


def test_a_bad_cli_flag_is_reported_with_the_parsers_error(tmp_path: Path) -> None:
    guide = "# Guide\n\n" + sh(
        "connect-groups configs alter GROUP --set max.size=3 --bogus 1",
        "connect-coordinator serve --listen 127.0.0.1:8470 --no-such-flag",
        "connect-groups connectors put GROUP NAME",
        "connect-simulator run --seed 1 --plant",
    )
    assert report(tmp_path, {"docs/guide.md": guide}) == [
        "docs/guide.md:4: connect-groups configs alter: unrecognized arguments: --bogus 1",
        "docs/guide.md:5: connect-coordinator serve: unrecognized arguments: --no-such-flag",
        "docs/guide.md:6: connect-groups connectors put: the following arguments are required: --tasks",
        "docs/guide.md:7: connect-simulator run: argument --plant: expected one argument",
    ]


def test_good_commands_in_every_form_parse(tmp_path: Path) -> None:
    guide = "# Guide\n\n" + sh(
        "# a comment: connect-groups --bogus",
        "export ADDR=127.0.0.1:8470",
        "connect-groups --coordinator $ADDR describe <group> --watch --interval S   # refreshing",
        "CONNECT_COORDINATOR_LOG_LEVEL=DEBUG .venv/bin/connect-coordinator serve \\",
        '    --listen "${LISTEN}" --set group.connect.max.size=10 2>&1 >/dev/null &',
        "connect-worker --coordinator 127.0.0.1:8470 --group g --simulate N --tls-ca $(pwd)/ca.crt",
        "connect-worker ... --assignors round-robin-js:0-1          # an excerpt: required flags left out",
        "python -m simulator soak --scenarios 10 --plant PLANT && .venv/bin/python -m simulator run --seed 1",
        "connect-simulator replay --seed 3 || .venv/bin/connect-simulator run --seed 3",
        "connect-groups --output json list --state Stable; connect-assignor serve --listen 127.0.0.1:8471",
        "connect-coordinator serve [--listen HOST:PORT] [--assignor-address HOST:PORT ...]",
        "                          [--tls-cert FILE --tls-key FILE [--tls-client-ca FILE]]",
        "spark-submit --master local[*] jobs/rebalance_metrics/main.py run --database URL --output DIR",
        "docker compose exec coordinator connect-groups coordinators",
        "connect-groups --help",
        "make lint ARGS=--bogus",
    )
    console = "\n" + sh(
        "$ connect-groups list", "NAME  STATE", "connect-groups output --is-not-a-command", language="console"
    )
    assert report(tmp_path, {"docs/guide.md": guide + console}) == []


def test_a_command_in_a_pipe_is_checked(tmp_path: Path) -> None:
    guide = "# Guide\n\n" + sh("echo start | FOO=1 .venv/bin/connect-groups --output xml list | grep Stable")
    assert report(tmp_path, {"docs/guide.md": guide}) == [
        "docs/guide.md:4: connect-groups list: argument --output: invalid choice: 'xml' (choose from 'table', 'json')"
    ]


def test_the_commands_env_assignments_reach_the_parser(tmp_path: Path) -> None:
    guide = "# Guide\n\n" + sh(
        "CONNECT_METRICS_DATABASE=sqlite:///c.db connect-metrics run --output out",
        "connect-metrics run --output out",
    )
    assert report(tmp_path, {"docs/guide.md": guide}) == [
        "docs/guide.md:5: connect-metrics run: the following arguments are required: --database"
    ]


def test_parsing_runs_nothing_and_prints_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # `serve` would start a server and `migrate` write a database; --help would print the usage.
    guide = "# Guide\n\n" + sh(
        f"connect-coordinator migrate --database sqlite:///{tmp_path}/made.db",
        "connect-coordinator serve --listen 127.0.0.1:1 --help",
    )
    assert report(tmp_path, {"docs/guide.md": guide}) == []
    assert not (tmp_path / "made.db").exists()
    assert capsys.readouterr() == ("", "")


# --- configuration keys ---------------------------------------------------------------------------


def test_an_undocumented_key_is_reported(tmp_path: Path) -> None:
    missing = "group.connect.max.push.streams"
    files = {"docs/operations.md": operations([k for k in KEYS if k != missing])}
    assert report(tmp_path, files) == [
        f"docs/operations.md:5: configuration key '{missing}' "
        "(ServerConfig.KEYS in services/coordinator/core/config.py) is not documented here"
    ]


def test_a_documented_key_that_does_not_exist_is_reported(tmp_path: Path) -> None:
    extra = (
        "| `group.connect.no.such.key` | 1 |\n"
        f"| `{GROUP_CONFIG_NAMES[0]}` (per group) | `45000` |\n"  # a group config may be listed; values are not keys
    )
    files = {"docs/operations.md": operations(extra=extra) + "\n| `outside.the.section` | x |\n| --- | --- |\n"}
    line = 9 + len(KEYS)
    assert report(tmp_path, files) == [
        f"docs/operations.md:{line}: configuration key 'group.connect.no.such.key' is not one of the server's "
        "(ServerConfig.KEYS in services/coordinator/core/config.py)"
    ]


def test_operations_page_without_a_configuration_section(tmp_path: Path) -> None:
    assert report(tmp_path, {"docs/operations.md": "# Operations\n\n## CLI\n"}) == [
        "docs/operations.md:1: no section whose heading contains 'Configuration' (it documents the server's keys)"
    ]


# --- the script -----------------------------------------------------------------------------------


def test_exit_status_and_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report(tmp_path, {"README.md": "# P\n\n[x](docs/operations.md#configuration-keys)\n"})
    assert check_docs.main([str(tmp_path)]) == 0
    assert capsys.readouterr().out == ""
    (tmp_path / "README.md").write_text("# P\n\n[x](docs/operations.md#nope)\n")
    assert check_docs.main([str(tmp_path)]) == 1
    assert (
        capsys.readouterr().out
        == "README.md:3: link 'docs/operations.md#nope': no anchor 'nope' in docs/operations.md\n"
    )


def test_the_repository_docs_are_clean() -> None:
    result = subprocess.run(
        [sys.executable, "scripts/check_docs.py"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")

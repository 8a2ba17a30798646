"""The docs check (run by `make lint`): README.md and docs/**/*.md say nothing the code contradicts.

1. Links: every relative link -- `[x](path)`, `[x](path#anchor)`, `[x](#anchor)`, `![x](img)`, a
   reference definition `[x]: path`, an HTML `href`/`src` -- names a file or folder that exists, and
   an anchor into a Markdown file names one of its headings (GitHub's slugs: lower case, punctuation
   other than '-' and '_' dropped, spaces to '-', a repeated heading gets -1, -2, ...) or an explicit
   `<a id="...">` / `<a name="...">`. External links (any `scheme:`) are not fetched; links inside
   code spans and fenced code blocks are not links.
2. Commands: every command in a fenced shell block (sh, bash, shell, console, zsh, or no language)
   that runs a project CLI (connect-coordinator, connect-groups, connect-worker, connect-assignor,
   connect-metrics, connect-simulator or `python -m simulator`; also as `.venv/bin/...`, as
   `python -m <module>` or as `spark-submit jobs/rebalance_metrics/main.py`) parses with that CLI's
   own argparse parser (built by its module's parser function, CLIS below), in this process and
   without running anything: argument types are not applied (`--tasks N` is fine, and no type
   function runs) and a placeholder (`$VAR`, `<name>`, an UPPER-CASE word) is any choice.
   Understood: `\\` continuations, pipes and lists (`|`, `&&`, `||`, `;`), env assignments
   (`FOO=1 cmd`, `export FOO=1`, which the parser sees, as the CLI would), `$ ` prompts (in a
   console block only prompted lines are commands), comments, redirections, wrappers (`exec`,
   `env`, `time`, `nohup`, `docker|podman|kubectl ... exec|run ...`), usage synopses
   (`[--flag VALUE]`, `...`, indented `[...]` lines continuing a command) and excerpts
   (`connect-worker ... --assignors X`: no argument is then required).
3. Configuration: the keys in backticks in the first column of the table rows of the sections of
   docs/operations.md whose heading contains "Configuration" are exactly the server's configuration
   keys (ServerConfig.KEYS in services/coordinator/core/config.py; the per-group dynamic config
   names, GROUP_CONFIG_NAMES, may be listed there too).

    python scripts/check_docs.py [ROOT]     # exit 0 silent when clean, 1 with one line per problem
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import os
import re
import shlex
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import NoReturn
from urllib.parse import unquote

REPO = Path(__file__).resolve().parents[1]
for _path in (REPO, REPO / "proto"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

OPERATIONS = "docs/operations.md"
CONFIG_SOURCE = "ServerConfig.KEYS in services/coordinator/core/config.py"

# CLI name -> (its module, the function of that module that builds its argparse parser).
CLIS: dict[str, tuple[str, str]] = {
    "connect-coordinator": ("services.coordinator.cli.coordinator", "build_parser"),
    "connect-groups": ("services.coordinator.cli.groups", "build_parser"),
    "connect-worker": ("worker_sdk.cli", "build_parser"),
    "connect-assignor": ("services.assignor.cli", "_parser"),
    "connect-metrics": ("jobs.rebalance_metrics.cli", "_parser"),
    "connect-simulator": ("simulator.cli", "build_parser"),
    "python -m simulator": ("simulator.cli", "build_parser"),
}
# `python -m MODULE` -> CLI name.
PYTHON_MODULES: dict[str, str] = {
    "simulator": "python -m simulator",
    **{module: name for name, (module, _) in CLIS.items() if name.startswith("connect-")},
}
SPARK_JOB_FILE = "jobs/rebalance_metrics/main.py"
# The CLI environment variables are those of the command shown, not of whoever runs the check.
ENV_PREFIXES = ("CONNECT_",)

SHELL_LANGUAGES = frozenset({"", "sh", "bash", "shell", "zsh", "console", "shell-session", "sh-session"})
CONSOLE_LANGUAGES = frozenset({"console", "shell-session", "sh-session"})
WRAPPERS = frozenset({"exec", "nohup", "time", "command", "sudo", "env"})
CONTAINER_TOOLS = frozenset({"docker", "podman", "kubectl", "nerdctl"})
PYTHON = re.compile(r"python(\d+(\.\d+)?)?")
ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
PLACEHOLDER = "PLACEHOLDER"
UPPER_WORD = re.compile(r"[A-Z][A-Z0-9_]*")
CONFIG_KEY = re.compile(r"[a-z][a-z0-9_-]*(\.[a-z0-9_-]+)+")

FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*([^\s`]*)")
ATX_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:\s+(.*?))?(?:\s+#+)?\s*$")
SETEXT_UNDERLINE = re.compile(r"^ {0,3}(=+|-+)\s*$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
INLINE_LINK = re.compile(
    r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)"
    r"""(?:\s+(?:"[^"]*"|'[^']*'|\([^)]*\)))?\s*\)"""
)
REFERENCE_DEFINITION = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
HTML_LINK = re.compile(r"""<(?:a|img|source)\b[^>]*?\b(?:href|src)\s*=\s*["']([^"']+)["']""", re.IGNORECASE)
HTML_ANCHOR = re.compile(r"""<a\b[^>]*?\b(?:id|name)\s*=\s*["']([^"']+)["']""", re.IGNORECASE)
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
TABLE_SEPARATOR = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")


@dataclass(frozen=True, order=True)
class Problem:
    path: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}"


# --- Markdown -------------------------------------------------------------------------------------


@dataclass
class CodeBlock:
    language: str
    first_line: int  # file line number of the block's first content line
    lines: list[str] = field(default_factory=list)


@dataclass
class Markdown:
    """A Markdown file split into prose lines (line number, text) and fenced code blocks."""

    prose: list[tuple[int, str]]
    blocks: list[CodeBlock]


def split_markdown(text: str) -> Markdown:
    prose: list[tuple[int, str]] = []
    blocks: list[CodeBlock] = []
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), 1):
        if fence is None:
            m = FENCE.match(line)
            if m:
                fence = m.group(1)
                blocks.append(CodeBlock(m.group(2).lower(), number + 1))
            else:
                prose.append((number, line))
        elif re.match(rf"^\s*{re.escape(fence[0])}{{{len(fence)},}}\s*$", line):
            fence = None
        else:
            blocks[-1].lines.append(line)
    return Markdown(prose, blocks)


def without_code_spans(line: str) -> str:
    return CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)


def headings(md: Markdown) -> Iterator[tuple[int, int, str]]:
    """(line, level, raw text) of every ATX and setext heading outside code blocks."""
    previous: tuple[int, str] | None = None
    for number, line in md.prose:
        m = ATX_HEADING.match(line)
        underline = SETEXT_UNDERLINE.match(line)
        if m:
            yield number, len(m.group(1)), m.group(2) or ""
            previous = None
            continue
        if (
            underline
            and previous is not None
            and previous[0] == number - 1
            and previous[1].strip()
            and "|" not in previous[1]
        ):
            yield previous[0], 1 if underline.group(1)[0] == "=" else 2, previous[1].strip()
            previous = None
            continue
        previous = (number, line)


def heading_text(raw: str) -> str:
    """The text GitHub renders for a heading: code spans keep their content, markup goes."""
    parts: list[str] = []
    position = 0
    for m in CODE_SPAN.finditer(raw):
        parts.append(_strip_markup(raw[position : m.start()]))
        parts.append(m.group(2).strip())
        position = m.end()
    parts.append(_strip_markup(raw[position:]))
    return "".join(parts)


def _strip_markup(text: str) -> str:
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links and images: their text
    text = re.sub(r"<[^>]+>", "", text)  # HTML tags
    text = text.replace("*", "")
    return re.sub(r"(?<![A-Za-z0-9])_+|_+(?![A-Za-z0-9])", "", text)  # _emphasis_, not snake_case


def slug(text: str) -> str:
    """GitHub's heading slug (github-slugger) before de-duplication."""
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def anchors(md: Markdown) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for _, _, raw in headings(md):
        base = slug(heading_text(raw))
        candidate = base
        if base in seen:
            while candidate in seen:
                seen[base] += 1
                candidate = f"{base}-{seen[base]}"
        seen[candidate] = 0
        found.add(candidate)
    for _, line in md.prose:
        found.update(HTML_ANCHOR.findall(line))
    return found


@cache
def read_markdown(path: Path) -> Markdown:
    return split_markdown(path.read_text(encoding="utf-8"))


# --- 1. links -------------------------------------------------------------------------------------


def links(md: Markdown) -> Iterator[tuple[int, str]]:
    for number, line in md.prose:
        plain = without_code_spans(line)
        for m in INLINE_LINK.finditer(plain):
            yield number, m.group(1).strip("<>")
        definition = REFERENCE_DEFINITION.match(plain)
        if definition:
            yield number, definition.group(1).strip("<>")
        for target in HTML_LINK.findall(plain):
            yield number, target


def check_links(root: Path, rel: str, md: Markdown) -> Iterator[Problem]:
    source = root / rel
    for number, target in links(md):
        if not target or SCHEME.match(target) or target.startswith("//"):
            continue
        path_part, _, anchor = target.partition("#")
        path_part = unquote(path_part.partition("?")[0])
        if not path_part:
            resolved = source
        elif path_part.startswith("/"):
            resolved = root / path_part.lstrip("/")
        else:
            resolved = source.parent / path_part
        resolved = Path(os.path.normpath(resolved))
        if not resolved.exists():
            yield Problem(rel, number, f"link '{target}': no such file {_relative(root, resolved)}")
            continue
        anchor = unquote(anchor)
        markdown = resolved.is_file() and resolved.suffix.lower() == ".md"
        if anchor and markdown and anchor not in anchors(read_markdown(resolved)):
            yield Problem(rel, number, f"link '{target}': no anchor '{anchor}' in {_relative(root, resolved)}")


def _relative(root: Path, path: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()


# --- 2. commands ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    line: int
    cli: str  # a key of CLIS
    argv: list[str]
    env: Mapping[str, str]
    elided: bool  # `cmd ... --flag X`: the required arguments may be among those left out


def logical_lines(block: CodeBlock) -> Iterator[tuple[int, str]]:
    """(line, text) of each command line: continuations joined, prompts and output lines dropped."""
    console = block.language in CONSOLE_LANGUAGES
    pending: tuple[int, str] | None = None
    continued = False
    for offset, raw in enumerate(block.lines):
        number = block.first_line + offset
        line = raw.rstrip()
        if continued and pending is not None:
            pending = (pending[0], pending[1] + " " + line.strip())
        elif pending is not None and raw[:1].isspace() and line.lstrip().startswith("["):
            pending = (pending[0], pending[1] + " " + line.strip())  # a synopsis continued: "    [--flag X]"
        else:
            if pending is not None:
                yield pending
                pending = None
            stripped = line.lstrip()
            if stripped.startswith("$ ") or stripped == "$":
                stripped = stripped[1:].lstrip()
            elif console:
                continued = False
                continue  # output
            pending = (number, stripped)
        continued = line.endswith("\\")
        if continued:
            pending = (pending[0], pending[1][:-1].rstrip())
    if pending is not None:
        yield pending


def tokens(line: str) -> list[str]:
    line = re.sub(r"<[^<>\s|&;]+>", PLACEHOLDER, line)  # <placeholder>
    line = re.sub(r"\$\([^()]*\)", PLACEHOLDER, line)  # $(command substitution)
    line = re.sub(r"(?<![^\s])\d+(?=[<>])", " ", line)  # the fd of 2>&1, 2>/dev/null
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    out: list[str] = []
    try:
        for token in lexer:
            if token.startswith("#"):
                break
            out.append(token)
    except ValueError:  # an unclosed quote: a fragment, not a command
        return []
    return out


def simple_commands(words: list[str]) -> Iterator[list[str]]:
    """Split at pipes and lists; drop redirections."""
    current: list[str] = []
    remaining = iter(words)
    for word in remaining:
        if word and set(word) <= set("();|&<>"):
            if "<" in word or ">" in word:
                next(remaining, None)  # the target: a file, or the fd of >&1
                continue
            if current:
                yield current
            current = []
            continue
        current.append(word)
    if current:
        yield current


def cli_of(word: str) -> str | None:
    if word in CLIS:
        return word
    path = Path(word)
    if "/" in word and path.name in CLIS and path.parent.name == "bin":
        return path.name
    return None


def find_cli(words: list[str], env: dict[str, str]) -> tuple[str, list[str]] | None:
    """The project CLI this simple command runs and its arguments, or None; env gets its assignments."""
    i = 0
    while i < len(words) and (ASSIGNMENT.match(words[i]) or words[i] in WRAPPERS or words[i] == "timeout"):
        if ASSIGNMENT.match(words[i]):
            name, _, value = words[i].partition("=")
            env[name] = value
            i += 1
        elif words[i] == "timeout":
            i += 2  # timeout DURATION cmd
        else:  # a wrapper's options
            i += 1
            while i < len(words) and words[i].startswith("-"):
                i += 1
    return cli_run_by(words[i:])


def cli_run_by(words: list[str]) -> tuple[str, list[str]] | None:
    """(CLI, its arguments) if the command words run a project CLI."""
    if not words:
        return None
    cli = cli_of(words[0])
    if cli is not None:
        return cli, words[1:]
    name = Path(words[0]).name
    if PYTHON.fullmatch(name):
        j = 1
        while j < len(words) and words[j].startswith("-") and words[j] != "-m":
            j += 2 if words[j] in ("-X", "-W") else 1
        if words[j : j + 1] == ["-m"] and j + 1 < len(words) and words[j + 1] in PYTHON_MODULES:
            return PYTHON_MODULES[words[j + 1]], words[j + 2 :]
    elif name == "spark-submit":
        for j, word in enumerate(words):
            if word.endswith(SPARK_JOB_FILE):
                return "connect-metrics", words[j + 1 :]
    elif name in CONTAINER_TOOLS and {"exec", "run"} & set(words):
        for j, word in enumerate(words):
            cli = cli_of(word)
            if cli is not None:
                return cli, words[j + 1 :]
    return None


def commands(block: CodeBlock) -> Iterator[Command]:
    if block.language not in SHELL_LANGUAGES:
        return
    env: dict[str, str] = {}  # `export X=1` lines hold for the rest of the block
    for number, line in logical_lines(block):
        for words in simple_commands(tokens(line)):
            if words[0] == "export":
                for word in words[1:]:
                    if ASSIGNMENT.match(word):
                        name, _, value = word.partition("=")
                        env[name] = value
                continue
            local = dict(env)
            found = find_cli(words, local)
            if found is not None:
                cli, argv = found
                yield Command(number, cli, synopsis_free(argv), local, argv[:1] in (["..."], ["…"]))


def synopsis_free(argv: list[str]) -> list[str]:
    """A usage synopsis as a command line: `[--flag X]` -> `--flag X`, `...` dropped."""
    out: list[str] = []
    for word in argv:
        word = word.lstrip("[")
        excess = word.count("]") - word.count("[")
        while excess > 0 and word.endswith("]"):
            word = word[:-1]
            excess -= 1
        if word and word not in ("...", "…"):
            out.append(word)
    return out


def is_placeholder(value: object) -> bool:
    return isinstance(value, str) and ("$" in value or PLACEHOLDER in value or bool(UPPER_WORD.fullmatch(value)))


class _AnyPlaceholder(list[object]):
    """An action's choices, also accepting a placeholder."""

    def __contains__(self, value: object) -> bool:
        return is_placeholder(value) or super().__contains__(value)


class _ParseError(Exception):
    pass


class _Exit(Exception):
    def __init__(self, status: int, message: str | None) -> None:
        super().__init__(message)
        self.status = status


class _CheckingParser(argparse.ArgumentParser):
    """A CLI's parser that raises instead of printing and exiting."""

    def error(self, message: str) -> NoReturn:
        raise _ParseError(message)

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        raise _Exit(status, message)


def _parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                yield from _parsers(sub)


def checking_parser(cli: str, env: Mapping[str, str], elided: bool = False) -> argparse.ArgumentParser:
    """The CLI's parser as its module builds it under env, raising errors, applying no types
    (nor requiring any argument when the command is elided)."""
    module_name, factory = CLIS[cli]
    build = getattr(importlib.import_module(module_name), factory)
    saved = dict(os.environ)
    try:
        for name in list(os.environ):
            if name.startswith(ENV_PREFIXES):
                del os.environ[name]
        os.environ.update(env)
        parser: argparse.ArgumentParser = build()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    for p in _parsers(parser):
        p.__class__ = _CheckingParser
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                continue
            action.type = None
            if action.choices is not None:
                action.choices = _AnyPlaceholder(action.choices)
            if elided:
                action.required = False
        if elided:
            for group in p._mutually_exclusive_groups:
                group.required = False
    return parser


def subcommand_path(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """The subcommands named in argv (`configs alter`), skipping options and their values."""
    path: list[str] = []
    remaining = iter(argv)
    for word in remaining:
        if word.startswith("-"):
            action = parser._option_string_actions.get(word.partition("=")[0])
            if action is not None and action.nargs != 0 and "=" not in word:
                next(remaining, None)  # its value
            continue
        subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if subparsers and word in subparsers[0].choices:
            path.append(word)
            parser = subparsers[0].choices[word]
    return path


def parse_error(command: Command) -> str | None:
    """None if the CLI's parser accepts the command's arguments, else the parser's message."""
    try:
        parser = checking_parser(command.cli, command.env, command.elided)
    except Exception as e:  # a module that does not import, an env value the parser cannot take
        return f"cannot build the parser of {command.cli}: {type(e).__name__}: {e}"
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            parser.parse_args(command.argv)
    except _ParseError as e:
        return str(e)
    except _Exit as e:
        return None if e.status == 0 else (str(e) or f"exit status {e.status}")
    return None


def check_commands(rel: str, md: Markdown) -> Iterator[Problem]:
    for block in md.blocks:
        for command in commands(block):
            error = parse_error(command)
            if error is not None:
                try:
                    sub = subcommand_path(checking_parser(command.cli, command.env), command.argv)
                except Exception:
                    sub = []
                yield Problem(rel, command.line, f"{' '.join([command.cli, *sub])}: {error}")


# --- 3. configuration keys ------------------------------------------------------------------------


def server_keys() -> tuple[frozenset[str], frozenset[str]]:
    """(the keys that must be documented, every key that may be)."""
    from services.coordinator.core.config import GROUP_CONFIG_NAMES, ServerConfig

    required = frozenset(ServerConfig.KEYS)
    return required, required | frozenset(GROUP_CONFIG_NAMES)


def table_first_cells(lines: list[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    """(line, first cell) of every body row of the GFM tables in lines."""
    in_table = False
    for i, (number, line) in enumerate(lines):
        if "|" not in line or not line.strip():
            in_table = False
            continue
        if TABLE_SEPARATOR.match(line):
            continue
        if not in_table:
            following = lines[i + 1][1] if i + 1 < len(lines) else ""
            in_table = bool(TABLE_SEPARATOR.match(following)) and "|" in following
            continue  # the header row
        cells = re.split(r"(?<!\\)\|", line.strip())
        if line.strip().startswith("|"):
            cells = cells[1:]
        if cells:
            yield number, cells[0]


def check_configuration(root: Path) -> Iterator[Problem]:
    path = root / OPERATIONS
    if not path.is_file():
        yield Problem(
            OPERATIONS, 1, f"no such file (the server's configuration keys, {CONFIG_SOURCE}, are documented there)"
        )
        return
    md = read_markdown(path)
    all_headings = list(headings(md))
    sections: list[tuple[int, int]] = []  # (heading line, end line exclusive)
    for index, (number, level, raw) in enumerate(all_headings):
        if "configuration" in heading_text(raw).lower():
            end = next((n for n, lv, _ in all_headings[index + 1 :] if lv <= level), sys.maxsize)
            sections.append((number, end))
    if not sections:
        yield Problem(
            OPERATIONS, 1, "no section whose heading contains 'Configuration' (it documents the server's keys)"
        )
        return
    required, known = server_keys()
    documented: set[str] = set()
    for start, end in sections:
        rows = [(n, line) for n, line in md.prose if start < n < end]
        for number, cell in table_first_cells(rows):
            for m in CODE_SPAN.finditer(cell):
                key = m.group(2).strip()
                if not CONFIG_KEY.fullmatch(key):
                    continue
                documented.add(key)
                if key not in known:
                    yield Problem(
                        OPERATIONS, number, f"configuration key '{key}' is not one of the server's ({CONFIG_SOURCE})"
                    )
    for key in sorted(required - documented):
        yield Problem(OPERATIONS, sections[0][0], f"configuration key '{key}' ({CONFIG_SOURCE}) is not documented here")


# --- the check ------------------------------------------------------------------------------------


def markdown_files(root: Path) -> list[str]:
    files = [root / "README.md"] if (root / "README.md").is_file() else []
    docs = root / "docs"
    if docs.is_dir():
        files += sorted(docs.rglob("*.md"))
    return [f.relative_to(root).as_posix() for f in files]


def check(root: Path) -> list[Problem]:
    read_markdown.cache_clear()
    problems: list[Problem] = []
    for rel in markdown_files(root):
        md = read_markdown(root / rel)
        problems += check_links(root, rel, md)
        problems += check_commands(rel, md)
    problems += check_configuration(root)
    return sorted(problems)


def main(argv: Iterable[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) > 1:
        print("usage: check_docs.py [ROOT]", file=sys.stderr)
        return 2
    root = Path(args[0]).resolve() if args else REPO
    problems = check(root)
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

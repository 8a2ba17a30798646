"""python -m simulator {run,soak,replay} (or connect-simulator): seeded scenarios against the real coordinator, SDK and assignors.

  run    --seed N [--steps K]              one scenario; on failure: shrink it and print a reproduction
  soak   --scenarios N [--start-seed S]    many scenarios (in parallel with --jobs); shrinks the first failure
  replay --seed N [--steps K] | --repro T  re-run exactly, printing the whole trace

Exit status: 0 if every invariant held, 1 if one did not (the reproduction is printed), 2 on usage errors.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, replace

from simulator import storage
from simulator.engine import RunResult, run_scenario
from simulator.planted import PLANTS, planted
from simulator.scenario import (
    CLASSIC_SHARE,
    DEFAULT_STEPS,
    LOAD_SHARE,
    MIGRATION_SHARE,
    PROTOCOLS,
    Scenario,
    generate,
)
from simulator.shrink import shrink


def _scenario(
    seed: int,
    steps: int,
    unordered: bool,
    duplicate_joins: bool = False,
    protocol: str | None = None,
    loads: str | None = None,
) -> Scenario:
    s = generate(seed, steps, protocol, {"on": True, "off": False}.get(loads or ""))
    if unordered or duplicate_joins:
        s = replace(s, net=replace(s.net, unordered_requests=unordered, duplicate_joins=duplicate_joins))
    return s


def _replay_command(seed: int, args: argparse.Namespace) -> str:
    extra = "".join(f" --plant {p}" for p in args.plant or ())
    if args.steps != DEFAULT_STEPS:
        extra += f" --steps {args.steps}"
    if args.unordered_requests:
        extra += " --unordered-requests"
    if args.duplicate_joins:
        extra += " --duplicate-joins"
    if getattr(args, "protocol", None):
        extra += f" --protocol {args.protocol}"
    if getattr(args, "loads", None):
        extra += f" --loads {args.loads}"
    return f"python -m simulator replay --seed {seed}{extra}"


def report_failure(result: RunResult, args: argparse.Namespace, out: list[str]) -> None:
    """Shrink a failure and print the minimal reproduction with its one-line replay commands."""
    assert result.violation is not None
    plants = list(args.plant or [])
    out.append(f"FAILED seed {result.scenario.seed}: {result.violation}")
    out.append(f"  replay the original: {_replay_command(result.scenario.seed, args)}")
    if args.no_shrink:
        return
    started = time.monotonic()
    small, runs = shrink(result, max_runs=args.shrink_runs)
    small = run_scenario(small.scenario, keep_trace=True)
    out.append(
        f"shrunk in {runs} runs ({time.monotonic() - started:.1f} s): "
        f"{len(result.scenario.events)} -> {len(small.scenario.events)} events, "
        f"{len(result.scenario.workers)} -> {len(small.scenario.workers)} workers, "
        f"{result.steps} -> {small.steps} steps"
    )
    out.append("minimal reproduction:")
    out.append(small.scenario.describe())
    out.append(f"  violation: {small.violation}")
    tail = small.trace[-args.trace_lines :]
    out.append(f"last {len(tail)} trace lines:")
    out.extend("  " + line for line in tail)
    plant = "".join(f" --plant {p}" for p in plants)
    out.append(f"replay the minimal reproduction: python -m simulator replay{plant} --repro {small.scenario.token()}")


def cmd_run(args: argparse.Namespace) -> int:
    scenario = _scenario(
        args.seed, args.steps, args.unordered_requests, args.duplicate_joins, args.protocol, args.loads
    )
    started = time.monotonic()
    result = run_scenario(scenario, keep_trace=True)
    print(
        f"seed {args.seed}: {result.steps} steps, {result.virtual_ms} virtual ms, "
        f"{time.monotonic() - started:.2f} s, trace {result.trace_hash[:16]}"
    )
    print(f"  {result.stats}")
    if result.ok:
        print("  every invariant held")
        return 0
    out: list[str] = []
    report_failure(result, args, out)
    print("\n".join(out))
    return 1


def cmd_replay(args: argparse.Namespace) -> int:
    if args.repro:
        scenario = args.scenario
    elif args.seed is not None:
        scenario = _scenario(
            args.seed, args.steps, args.unordered_requests, args.duplicate_joins, args.protocol, args.loads
        )
    else:
        print("replay needs --seed or --repro", file=sys.stderr)
        return 2
    print(scenario.describe())
    result = run_scenario(scenario, keep_trace=True)
    print("\n".join(result.trace))
    print(f"{result.steps} steps, {result.virtual_ms} virtual ms, trace {result.trace_hash}")
    if result.ok:
        print("every invariant held")
        return 0
    print(f"VIOLATION {result.violation}")
    return 1


SoakResult = tuple[int, int, str | None, str | None, dict[str, int]]


SoakJob = tuple[int, int, bool, bool, tuple[str, ...], str | None, str | None]


def _soak_one(job: SoakJob) -> SoakResult:
    seed, steps, unordered, duplicate_joins, plants, protocol, loads = job
    with planted(plants):
        result = run_scenario(_scenario(seed, steps, unordered, duplicate_joins, protocol, loads))
    v = result.violation
    counts = {k: val for k, val in asdict(result.stats).items() if isinstance(val, int) and k != "converged_ms"}
    counts["bad_requests_checked"] = sum(result.stats.bad_checked.values())
    if result.stats.converged_ms is not None:
        counts["converged_ms"] = result.stats.converged_ms
    return seed, result.steps, (v.invariant if v else None), (str(v) if v else None), counts


def _jobs(args: argparse.Namespace) -> Iterator[SoakJob]:
    for seed in range(args.start_seed, args.start_seed + args.scenarios):
        plants = tuple(args.plant or ())
        yield seed, args.steps, args.unordered_requests, args.duplicate_joins, plants, args.protocol, args.loads


def cmd_soak(args: argparse.Namespace) -> int:
    started = time.monotonic()
    steps = 0
    failures: list[tuple[int, str]] = []
    kinds: Counter[str] = Counter()
    done = 0
    coverage: Counter[str] = Counter()
    convergence: list[int] = []
    if args.jobs > 1:
        storage.base_dir()  # the workers' SQLite files go under this process's directory (removed at exit)
        pool = multiprocessing.get_context("fork").Pool(args.jobs)
        results: Iterator[SoakResult] = pool.imap_unordered(_soak_one, _jobs(args), chunksize=8)
    else:
        pool = None
        results = map(_soak_one, _jobs(args))
    try:
        for seed, n, invariant, message, counts in results:
            done += 1
            steps += n
            if "converged_ms" in counts:
                convergence.append(counts.pop("converged_ms"))
            coverage.update(counts)
            if invariant is not None:
                assert message is not None
                failures.append((seed, message))
                kinds[invariant] += 1
                print(f"seed {seed}: {message[:300]}", flush=True)
                if args.stop_on_failure:
                    break
            if args.progress and done % args.progress == 0:
                rate = steps / max(1e-9, time.monotonic() - started)
                print(f"  {done} scenarios, {steps} steps, {len(failures)} failures, {rate:.0f} steps/s", flush=True)
    finally:
        if pool is not None:
            pool.terminate()
    elapsed = time.monotonic() - started
    print(
        f"{done} scenarios (seeds {args.start_seed}..{args.start_seed + args.scenarios - 1}), {steps} steps, "
        f"{elapsed:.1f} s ({steps / max(elapsed, 1e-9):.0f} steps/s): {len(failures)} failed {dict(kinds)}"
    )
    print("  faults and outcomes: " + ", ".join(f"{k} {v}" for k, v in coverage.items()))
    if convergence:
        convergence.sort()
        p50, p99 = (
            convergence[len(convergence) // 2],
            convergence[min(len(convergence) - 1, len(convergence) * 99 // 100)],
        )
        print(f"  converged after the faults stopped in (virtual ms): p50 {p50}, p99 {p99}, max {convergence[-1]}")
    if not failures:
        return 0
    seed = min(s for s, _ in failures)
    with planted(tuple(args.plant or ())):
        result = run_scenario(
            _scenario(seed, args.steps, args.unordered_requests, args.duplicate_joins, args.protocol, args.loads),
            keep_trace=True,
        )
        out: list[str] = []
        if result.violation is not None:
            report_failure(result, args, out)
        print("\n".join(out))
    return 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m simulator", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--steps", type=int, default=DEFAULT_STEPS, help="size of the fault phase, in steps (default %(default)s)"
        )
        p.add_argument(
            "--plant", action="append", choices=sorted(PLANTS), help="run against a planted bug (repeatable)"
        )
        p.add_argument(
            "--unordered-requests",
            action="store_true",
            help="deliver a worker's requests in any order (the protocol assumes one ordered connection)",
        )
        p.add_argument(
            "--duplicate-joins",
            action="store_true",
            help="duplicate joins too (a join under a server-generated id is not idempotent)",
        )
        p.add_argument(
            "--protocol",
            choices=PROTOCOLS,
            help="the group's protocol in every scenario: connect, classic, or mixed (a migration scenario: "
            "classic and connect workers rolled from one protocol to the other); default: each seed picks -- "
            f"{int(CLASSIC_SHARE * 100)}%% of seeds run a classic group, {int(MIGRATION_SHARE * 100)}%% a migration)",
        )
        p.add_argument(
            "--loads",
            choices=("on", "off"),
            help="load scenarios (SPEC §13: per-item loads, capacities, racks): on -- every seed a `connect` "
            f"load scenario -- or off; default: {int(LOAD_SHARE * 100)}%% of the `connect` seeds",
        )
        p.add_argument("--no-shrink", action="store_true", help="print the failing seed without shrinking it")
        p.add_argument("--shrink-runs", type=int, default=300, help="at most this many runs to shrink a failure")
        p.add_argument("--trace-lines", type=int, default=80, help="trace lines of the reproduction to print")

    run = sub.add_parser("run", help="run one seeded scenario")
    run.add_argument("--seed", type=int, required=True)
    common(run)
    run.set_defaults(fn=cmd_run)

    soak = sub.add_parser("soak", help="run many seeded scenarios")
    soak.add_argument("--scenarios", type=int, default=2_000)
    soak.add_argument("--start-seed", type=int, default=0)
    soak.add_argument("--jobs", type=int, default=1, help="worker processes (default %(default)s)")
    soak.add_argument("--stop-on-failure", action="store_true")
    soak.add_argument("--progress", type=int, default=0, metavar="N", help="print progress every N scenarios")
    common(soak)
    soak.set_defaults(fn=cmd_soak)

    replay = sub.add_parser("replay", help="re-run a scenario exactly, printing its trace")
    replay.add_argument("--seed", type=int)
    replay.add_argument("--repro", help="a reproduction token printed by run/soak")
    common(replay)
    replay.set_defaults(fn=cmd_replay)
    return parser


def _decode_repro(token: str) -> Scenario | str:
    """The scenario of a reproduction token, or why it is not one."""
    try:
        return Scenario.from_token(token.strip())
    except (ValueError, TypeError, KeyError, AttributeError, zlib.error) as e:
        reason = str(e).splitlines()[0][:120] if str(e) else type(e).__name__
        return f"not a reproduction token as printed by run or soak ({reason})"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "repro", None):
        decoded = _decode_repro(args.repro)
        if isinstance(decoded, str):  # one line, exit 2: argparse's usage error without the usage text
            print(f"{parser.prog} replay: error: argument --repro: {decoded}", file=sys.stderr)
            return 2
        args.scenario = decoded
    try:
        with planted(tuple(args.plant or ())):
            code: int = args.fn(args)
    except BrokenPipeError:  # e.g. piped into `head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return code

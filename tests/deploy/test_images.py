"""The container images, built from the real docker/Dockerfile on this machine and run (SPEC §7).

No registry is reachable here: the official bases are replaced by local stand-ins built from Debian
packages (scripts/containers.py; cached across runs on one machine, built on a fresh one). Each image
is built once per session under its real name (localhost/<name>:<version>, what `make images` builds
and docker/compose.yaml runs). Containers, networks and volumes the tests start are named after this
session and removed by name; the images stay, like any build output.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from connect.coordinator.v1 import admin_pb2
from scripts import containers
from services.common.healthcheck import check
from tests.fixtures.net import free_port
from tests.worker.observe import Admin

pytestmark = [pytest.mark.containers, pytest.mark.timeout(1200)]

SESSION = f"cgc-test-{os.getpid()}"
HEAD = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
UID = "10001"


def engine(*args: str, check_: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(
        [containers.engine(), *args], env=containers.engine_env(), capture_output=True, text=True, timeout=timeout
    )
    if check_ and out.returncode != 0:
        raise AssertionError(f"{containers.engine()} {' '.join(args)}: exit {out.returncode}\n{out.stderr[-3000:]}")
    return out


@pytest.fixture(scope="session")
def images() -> dict[str, str]:
    """Stand-in bases (reused when present), then every image from docker/Dockerfile, once."""
    refs = containers.build_standins()
    os.environ.update(containers.standin_env(refs))
    return containers.build_images(refs["python"])


class Containers:
    """Containers and networks started by one test, removed by name at the end."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.names: list[str] = []
        self.networks: list[str] = []

    def network(self) -> str:
        name = f"{self.prefix}-net"
        engine("network", "create", name)
        self.networks.append(name)
        return name

    def run(self, name: str, image: str, *args: str, options: tuple[str, ...] = ()) -> str:
        full = f"{self.prefix}-{name}"
        self.names.append(full)
        # As the chart runs them: read-only root filesystem, no capabilities, no privilege escalation.
        hardened = ("--read-only", "--tmpfs", "/tmp", "--cap-drop", "ALL", "--security-opt", "no-new-privileges")
        engine("run", "-d", "--name", full, *hardened, *options, image, *args)
        return full

    def cleanup(self) -> None:
        for name in reversed(self.names):
            engine("rm", "-f", "-t", "2", name, check_=False)
        for net in self.networks:
            engine("network", "rm", "-f", net, check_=False)


@pytest.fixture
def ctrs(request: pytest.FixtureRequest) -> Iterator[Containers]:
    c = Containers(f"{SESSION}-{request.node.name.split('[')[0][-20:].strip('_')}")
    try:
        yield c
    finally:
        c.cleanup()


def inspect(ref: str, what: str = "image") -> dict[str, Any]:
    return dict(json.loads(engine(what, "inspect", ref).stdout)[0])


def wait_serving(address: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        with contextlib.suppress(Exception):
            if check(address, timeout_s=2.0) == "SERVING":
                return
        if time.monotonic() > deadline:
            raise AssertionError(f"{address} never answered SERVING")
        time.sleep(0.3)


def stop(name: str) -> int:
    """SIGTERM (what Kubernetes sends), then the exit code."""
    engine("stop", "-t", "20", name)
    return int(inspect(name, "container")["State"]["ExitCode"])


# ---- the images themselves ---------------------------------------------------------------------------


def test_images_are_labelled_non_root_and_carry_no_build_tools(images: dict[str, str]) -> None:
    assert set(images) == {"connect-coordinator", "connect-assignor", "connect-worker", "connect-metrics"}
    for name, ref in images.items():
        assert ref == f"localhost/{name}:{containers.version()}"
        config = inspect(ref)["Config"]
        assert config["User"] == f"{UID}:{UID}", name
        assert "Healthcheck" not in config or not config["Healthcheck"], "probes belong to the orchestrator"
        labels = config["Labels"]
        assert labels["org.opencontainers.image.version"] == containers.version(), name
        assert labels["org.opencontainers.image.title"] == name
        # The commit built, not that of an earlier build whose layers were reused.
        assert labels["org.opencontainers.image.revision"] == HEAD, name
        # No compiler, no pip, no wheels, no caches in the final image.
        probe = engine(
            "run", "--rm", "--entrypoint", "sh", ref, "-c",
            "id -u; command -v gcc cc pip pip3 || true; ls /wheels /wheels-spark /root/.cache 2>/dev/null || true; "
            "ls /opt/connect/bin | grep -c '^pip' || true",
        ).stdout.split()  # fmt: skip
        assert probe == [UID, "0"], (name, probe)


def test_a_rebuild_removes_the_image_it_replaced(images: dict[str, str]) -> None:
    """Every test run rebuilds the images: the ones a rebuild replaces must not pile up on the disk.
    (The tag is pointed at a throw-away image, then the image is rebuilt from the cached layers.)"""
    ref = images["connect-coordinator"]
    base = containers.build_standins()["python"]  # the fixture's base (present: reused)
    holder = f"{SESSION}-holder"

    def stand_in() -> str:
        """A throw-away image that only `ref` names (made from a container of the real one)."""
        engine("create", "--name", holder, ref)
        try:
            made = engine("commit", "--quiet", "--change", "LABEL cgc.test=stand-in", holder).stdout.strip()
        finally:
            engine("rm", "-f", holder)
        engine("tag", made, ref)
        return made

    replaced = stand_in()
    containers.build_images(base, ["connect-coordinator"])
    assert containers.image_id(ref) not in (None, replaced)
    assert not containers.image_exists(replaced), "the replaced image is still there"

    # An image a container still uses is left alone (rmi without -f), and the build still succeeds.
    in_use = stand_in()
    engine("create", "--name", holder, in_use)
    try:
        containers.build_images(base, ["connect-coordinator"])
        assert containers.image_id(ref) not in (None, in_use)
        assert containers.image_exists(in_use), "an image in use was removed"
    finally:
        engine("rm", "-f", holder, check_=False)
        engine("rmi", in_use, check_=False)


def test_the_metrics_image_has_a_jre_the_jdbc_drivers_and_pyspark(images: dict[str, str]) -> None:
    ref = images["connect-metrics"]
    assert inspect(ref)["Config"]["Entrypoint"] == ["/usr/bin/tini", "--", "connect-metrics"]
    java = engine("run", "--rm", "--read-only", "--entrypoint", "java", ref, "-version")
    assert 'openjdk version "17' in java.stderr
    out = engine(
        "run", "--rm", "--read-only", "--tmpfs", "/tmp", "--entrypoint", "python", ref, "-c",
        "import os, pyspark; print(pyspark.__version__); "
        "print(all(os.path.exists(f'/usr/share/java/{j}') for j in ('postgresql.jar', 'sqlite-jdbc.jar')))",
    ).stdout.split()  # fmt: skip
    assert out[0].startswith("4.") and out[1] == "True", out


@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_the_metrics_image_runs_the_job(
    images: dict[str, str], tmp_path: Path, request: pytest.FixtureRequest, database: str
) -> None:
    """The metrics image's entry point runs the job itself (its package was once left out of the
    wheel, and `connect-metrics` died on an import), over a coordinator's event log written by the
    real core: in SQLite, and in PostgreSQL as the chart's CronJob reads it (the test server on the
    host's loopback: the container shares the host's network). The tables land in a folder the host
    then lists."""
    from tests.fixtures.spark import QUICK_JIT
    from tests.metrics.logs import seed_case_studies, write_events

    data = tmp_path / "data"
    data.mkdir()
    if database == "sqlite":
        url, in_container = f"sqlite:///{data / 'coordinator.db'}", "sqlite:////data/coordinator.db"
    else:
        url = in_container = request.getfixturevalue("postgres_db_url")
    events = seed_case_studies()
    write_events(url, events)
    for path in (data, *data.iterdir()):
        path.chmod(0o777 if path.is_dir() else 0o666)  # the image's user (UID 10001) writes here
    done = engine(
        "run", "--rm", "--read-only", "--tmpfs", "/tmp", "--network", "host" if database != "sqlite" else "none",
        "-v", f"{data}:/data", "-e", f"JAVA_TOOL_OPTIONS={QUICK_JIT}",  # (the tests' JVM setting: C1 only)
        images["connect-metrics"], "run", "--database", in_container, "--output", "/data/out",
        timeout=300,
    )  # fmt: skip
    assert f"full run: {len(events)} events read" in done.stdout, done.stdout + done.stderr
    tables = {p.name for p in (data / "out").iterdir()}
    assert {"group_epochs", "item_downtime", "group_summary"} <= tables, tables


def test_the_server_images_leave_spark_out_and_say_so(images: dict[str, str]) -> None:
    """Spark is the `metrics` extra: the coordinator, assignor and worker images do without it, and
    `connect-metrics` there says so in one line (no traceback)."""
    for name in ("connect-coordinator", "connect-assignor", "connect-worker"):
        lacking = engine(
            "run", "--rm", "--read-only", "--network", "none", "--entrypoint", "connect-metrics",
            images[name], "run", "--database", "sqlite:////tmp/x.db", "--output", "/tmp/out",
            check_=False,
        )  # fmt: skip
        assert lacking.returncode == 2 and lacking.stdout == "", (name, lacking)
        [line] = [x for x in lacking.stderr.splitlines() if "level=warning" not in x]  # (podman's own warnings)
        assert line.startswith("connect-metrics: PySpark is not installed") and "[metrics]" in line, (name, line)


def test_coordinator_and_assignor_serve_health_as_non_root_and_stop_gracefully_on_sigterm(
    images: dict[str, str], ctrs: Containers
) -> None:
    net = ctrs.network()
    assignor_port = free_port()
    assignor = ctrs.run(
        "assignor", images["connect-assignor"],
        options=("--network", net, "--network-alias", "assignor", "-p", f"127.0.0.1:{assignor_port}:8471"),
    )  # fmt: skip
    port, metrics_port = free_port(), free_port()
    coordinator = ctrs.run(
        "coordinator", images["connect-coordinator"],
        "serve", "--database", "sqlite:////tmp/coordinator.db", "--assignor-address", "assignor:8471",
        options=("--network", net, "--network-alias", "coordinator",
                 "-p", f"127.0.0.1:{port}:8470", "-p", f"127.0.0.1:{metrics_port}:9470"),
    )  # fmt: skip
    wait_serving(f"127.0.0.1:{assignor_port}")
    wait_serving(f"127.0.0.1:{port}")
    for name, target in ((coordinator, "127.0.0.1:8470"), (assignor, "127.0.0.1:8471")):
        assert engine("exec", name, "id", "-u").stdout.strip() == UID
        # The image's own health client (what the chart's `helm test` Pod runs).
        own = engine("exec", name, "python", "-m", "services.common.healthcheck", target)
        assert own.stdout.strip() == f"{target}: SERVING"
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
        assert b"connect_coordinator_members" in r.read()

    # The worker image: a static member joins; on SIGTERM it leaves temporarily (-2).
    admin = Admin(f"127.0.0.1:{port}", "g")
    try:
        admin.put("a", 2)
        worker = ctrs.run(
            "worker", images["connect-worker"],
            "--coordinator", "coordinator:8470", "--group", "g", "--instance-id", "w1",
            options=("--network", net),
        )  # fmt: skip
        assert engine("exec", worker, "id", "-u").stdout.strip() == UID
        deadline = time.monotonic() + 60
        while not (g := admin.describe()).members or g.group_state != "Stable":
            assert time.monotonic() < deadline, f"the worker did not join: {g}"
            time.sleep(0.3)
        [member] = g.members
        assert member.instance_id == "w1"
        epoch = g.group_epoch
        assert stop(worker) == 0
        g = admin.describe()
        assert [(m.instance_id, m.member_epoch) for m in g.members] == [("w1", -2)] and g.group_epoch == epoch
    finally:
        admin.close()

    # SIGTERM: health NOT_SERVING, drain, stop -- exit 0, not killed.
    assert stop(coordinator) == 0
    assert "shutting down" in engine("logs", coordinator).stderr
    assert stop(assignor) == 0


def test_the_coordinator_image_migrates_and_serves_without_migrating(
    images: dict[str, str], ctrs: Containers, postgres_db_url: str
) -> None:
    """The Helm hook Job's `connect-coordinator migrate`, then `serve --no-migrate` (the test PostgreSQL
    listens on the host's loopback: the containers share the host's network)."""
    ref = images["connect-coordinator"]
    net = ("--network", "host")
    refused = engine(
        "run", "--rm", "--read-only", *net, ref, "serve", "--no-migrate", "--database", postgres_db_url, check_=False
    )
    assert refused.returncode == 1 and "connect-coordinator migrate" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr
    migrated = engine("run", "--rm", "--read-only", *net, ref, "migrate", "--database", postgres_db_url)
    assert "is current" in migrated.stdout
    port = free_port()
    ctrs.run(
        "serve", ref, "serve", "--no-migrate", "--database", postgres_db_url,
        "--listen", f"127.0.0.1:{port}", "--metrics-listen", "",
        options=net,
    )  # fmt: skip
    wait_serving(f"127.0.0.1:{port}")


# ---- the compose stack ---------------------------------------------------------------------------------


def prometheus_api(port: int, path: str, **params: str) -> Any:
    url = f"http://127.0.0.1:{port}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())["data"]


def test_the_compose_stack_converges_is_scraped_and_stops_cleanly(images: dict[str, str]) -> None:
    project = f"{SESSION}-compose"
    ports = {
        "CONNECT_COORDINATOR_PORT": free_port(),
        "CONNECT_COORDINATOR_METRICS_PORT": free_port(),
        "CONNECT_PROMETHEUS_PORT": free_port(),
    }
    os.environ.update({k: str(v) for k, v in ports.items()})
    os.environ["CONNECT_VERSION"] = containers.version()
    try:
        assert containers.compose(["up", "-d"], standins=True, project=project) == 0
        admin = Admin(f"127.0.0.1:{ports['CONNECT_COORDINATOR_PORT']}", "connect-demo")
        try:
            expected = 2 + 4 + 2  # connectors source-a (4 tasks) and sink-b (2 tasks)
            deadline = time.monotonic() + 180
            while True:
                with contextlib.suppress(Exception):
                    g = admin.describe()
                    running = sum(len(m.assignment.connectors) + len(m.assignment.tasks) for m in g.members)
                    if g.group_state == "Stable" and len(g.members) == 3 and running == expected:
                        break
                assert time.monotonic() < deadline, "the compose stack's group did not converge"
                time.sleep(1)
            assert sorted(m.instance_id for m in g.members) == ["worker-1", "worker-2", "worker-3"]
            assert {c.name: c.task_count for c in g.connectors} == {"source-a": 4, "sink-b": 2}
            # Nothing runs twice, nothing is missing.
            items = [
                i
                for m in g.members
                for i in (*m.assignment.connectors, *(f"{t.connector}-{t.task}" for t in m.assignment.tasks))
            ]
            assert len(items) == len(set(items)) == expected
            assert isinstance(g, admin_pb2.DescribedGroup)
        finally:
            admin.close()

        # Prometheus in the stack scrapes the coordinator and the assignor (and the workers).
        prom = ports["CONNECT_PROMETHEUS_PORT"]
        deadline = time.monotonic() + 90
        while True:
            with contextlib.suppress(Exception):
                up = {r["metric"]["job"]: r["value"][1] for r in prometheus_api(prom, "query", query="up")["result"]}
                members = prometheus_api(prom, "query", query="connect_coordinator_members")["result"]
                requests = prometheus_api(prom, "query", query="sum(connect_assignor_requests_total)")["result"]
                if (
                    up.get("connect-coordinator") == "1"
                    and up.get("connect-assignor") == "1"
                    and members and members[0]["value"][1] == "3"
                    and requests and float(requests[0]["value"][1]) > 0
                ):  # fmt: skip
                    break
            assert time.monotonic() < deadline, f"Prometheus did not scrape both services: {up}"
            time.sleep(2)

        # SIGTERM to everything: each service exits 0 by itself (nothing had to be killed).
        assert containers.compose(["stop", "-t", "30"], standins=True, project=project) == 0
        for service in ("coordinator", "assignor", "worker-1", "worker-2", "worker-3"):
            name = f"{project}_{service}_1"
            state = inspect(name, "container")["State"]
            assert state["Status"] == "exited" and state["ExitCode"] == 0, (service, state)
    finally:
        containers.compose(["down", "-v", "-t", "5"], standins=True, project=project, check=False)
        containers.remove_network(project)
    leftovers = engine("ps", "-a", "--filter", f"name={project}", "--format", "{{.Names}}").stdout.split()
    assert leftovers == []


def test_dockerfiles_are_hadolint_clean() -> None:
    hadolint = Path(sys.executable).parent / "hadolint"
    files = [containers.DOCKERFILE, *sorted((containers.DOCKER_DIR / "standins").glob("*.Dockerfile"))]
    out = subprocess.run([str(hadolint), *map(str, files)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout == "", out.stdout + out.stderr

"""A real Spark standalone cluster on loopback: a master and N workers started from the pyspark
installation (`bin/spark-class`), stopped by pid."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pyspark

from tests.fixtures.net import free_port
from tests.fixtures.spark import QUICK_JIT

REPO = Path(__file__).resolve().parents[2]
SPARK_HOME = Path(pyspark.__file__).parent
SPARK_BIN = SPARK_HOME / "bin"
START_TIMEOUT_S = 180.0


def _start(cmd: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log.open("wb") as f:
        # spark-class execs the JVM, so the pid is the JVM's.
        return subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@contextlib.contextmanager
def standalone_cluster(workdir: Path, workers: int = 2) -> Iterator[str]:
    """Yields the master URL once every worker has registered."""
    env = {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(workdir),
        "SPARK_WORKER_DIR": str(workdir / "work"),
        # The master and the workers only register and launch executors: a small heap, the quick
        # compiler and the serial collector make them start faster on a small machine.
        "SPARK_DAEMON_MEMORY": "256m",
        "SPARK_DAEMON_JAVA_OPTS": f"{QUICK_JIT} -XX:+UseSerialGC",
    }
    port, ui = free_port(), free_port()
    master_url = f"spark://127.0.0.1:{port}"
    procs: list[subprocess.Popen[bytes]] = []
    spark_class = str(SPARK_BIN / "spark-class")
    try:
        procs.append(
            _start(
                [
                    spark_class,
                    "org.apache.spark.deploy.master.Master",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--webui-port",
                    str(ui),
                ],
                workdir / "master.log",
                env,
            )
        )
        for i in range(workers):
            procs.append(
                _start(
                    [
                        spark_class,
                        "org.apache.spark.deploy.worker.Worker",
                        master_url,
                        "--host",
                        "127.0.0.1",
                        "--cores",
                        "1",
                        "--memory",
                        "1g",
                        "--webui-port",
                        str(free_port()),
                        "--work-dir",
                        str(workdir / f"work{i}"),
                    ],
                    workdir / f"worker{i}.log",
                    env,
                )
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        alive = 0
        while time.monotonic() < deadline:
            for p in procs:
                if p.poll() is not None:
                    raise RuntimeError(
                        f"a Spark daemon exited ({cast(list[str], p.args)[1]}); see the logs in {workdir}"
                    )
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=5) as r:
                    alive = int(json.load(r).get("aliveworkers", 0))
            except OSError:
                alive = 0
            if alive >= workers:
                break
            time.sleep(0.5)
        else:
            raise RuntimeError(f"{alive} of {workers} Spark workers registered in {START_TIMEOUT_S:.0f} s")
        yield master_url
    finally:
        for p in reversed(procs):
            _stop(p)

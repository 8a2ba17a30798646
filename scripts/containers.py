"""Build the images and run the compose stack with whichever engine is present (docker or podman).

    scripts/containers.py images [--standins auto|always|never]   # `make images`
    scripts/containers.py compose-up [--standins ...]              # `make compose-up`
    scripts/containers.py compose-down                             # `make compose-down`
    scripts/containers.py standins                                 # only the local stand-in bases

Where no container registry is reachable (the project's CI machines), the official bases named by
docker/Dockerfile and docker/compose.yaml (python:3.11-slim, postgres, prom/prometheus) cannot be
pulled: local stand-ins are built from Debian packages instead (debootstrap bookworm + python3.11,
then PostgreSQL and Prometheus from Debian on top; see docker/standins/ and ../shared/CONTAINERS.md)
and passed with `--build-arg BASE_IMAGE=...` and the compose override file docker/compose.standins.yaml.
A stand-in that already exists on the machine is reused.

With podman, CONTAINERS_CONF points at docker/containers.conf unless it is already set (rlimits and
runtime these machines need); nothing is written under /etc.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterator, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCKER_DIR = ROOT / "docker"
DOCKERFILE = DOCKER_DIR / "Dockerfile"
COMPOSE_FILE = DOCKER_DIR / "compose.yaml"
STANDINS_OVERRIDE = DOCKER_DIR / "compose.standins.yaml"
COMPOSE_PROJECT = "connect-group-coordinator"

# image name -> Dockerfile target
IMAGES = {
    "connect-coordinator": "coordinator",
    "connect-assignor": "assignor",
    "connect-worker": "worker",
    "connect-metrics": "metrics",
}
# Stand-in names (what docker/compose.standins.yaml and the stand-in Dockerfiles' defaults use); each
# build is also tagged with a hash of its inputs, so a changed recipe is rebuilt and an unchanged one
# is reused across runs on the same machine.
STANDIN_PYTHON = "localhost/connect-standin-python:3.11-bookworm"
STANDIN_POSTGRES = "localhost/connect-standin-postgres:15-bookworm"
STANDIN_PROMETHEUS = "localhost/connect-standin-prometheus:bookworm"
# What the stand-in base holds besides Debian's minimal base: the interpreter, venv, CA bundle, and
# what the official python:3.11-slim image has that the Dockerfile uses (useradd comes with minbase).
STANDIN_PACKAGES = ["python3.11", "python3.11-venv", "python3-venv", "ca-certificates"]
STANDIN_RECIPE_VERSION = "1"  # bump when build_standin_python changes
DEBIAN_SOURCES = Path("/etc/apt/sources.list.d/debian.sources")
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
HOST_EXTRA_CAS = Path("/usr/local/share/ca-certificates")


class Failure(Exception):
    """An operator-facing failure: one line, no traceback."""


def version() -> str:
    with (ROOT / "pyproject.toml").open("rb") as f:
        return str(tomllib.load(f)["project"]["version"])


def image_ref(name: str) -> str:
    return f"localhost/{name}:{version()}"


def engine() -> str:
    """docker when its daemon answers, else podman; CONTAINER_ENGINE overrides."""
    chosen = os.environ.get("CONTAINER_ENGINE")
    if chosen:
        return chosen
    if shutil.which("docker") and subprocess.run(["docker", "info"], capture_output=True).returncode == 0:
        return "docker"
    if shutil.which("podman"):
        return "podman"
    raise Failure("no container engine: install docker or podman (scripts/setup_system.sh installs podman)")


def engine_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("CONTAINERS_CONF", str(DOCKER_DIR / "containers.conf"))
    return env


def run(
    cmd: Sequence[str], *, check: bool = True, quiet: bool = False, **kw: object
) -> subprocess.CompletedProcess[str]:
    if not quiet:
        print("+ " + " ".join(cmd), flush=True)
    out = subprocess.run(list(cmd), env=engine_env(), text=True, **kw)  # type: ignore[call-overload]
    if check and out.returncode != 0:
        raise Failure(f"'{' '.join(cmd[:3])} ...' failed with exit status {out.returncode}")
    return out


def image_id(ref: str) -> str | None:
    out = run([engine(), "image", "inspect", "--format", "{{.Id}}", ref], check=False, quiet=True, capture_output=True)
    return (out.stdout.strip() or None) if out.returncode == 0 else None


def image_exists(ref: str) -> bool:
    return image_id(ref) is not None


def registry_reachable(ref: str) -> bool:
    """Can the official base be had? (present already, or pulled now within a minute)."""
    if image_exists(ref):
        return True
    try:
        out = run([engine(), "pull", "--quiet", ref], check=False, capture_output=True, timeout=60)
    except subprocess.TimeoutExpired:
        return False
    return out.returncode == 0


def default_base_image() -> str:
    for line in DOCKERFILE.read_text().splitlines():
        if line.startswith("ARG BASE_IMAGE="):
            return line.split("=", 1)[1]
    raise Failure(f"{DOCKERFILE}: no 'ARG BASE_IMAGE=' line")


def use_standins(mode: str) -> bool:
    if mode == "always":
        return True
    if mode == "never":
        return False
    return not registry_reachable(default_base_image())


def mirror() -> str:
    """Debian mirror of this machine, read at run time (never written into the repository)."""
    for line in DEBIAN_SOURCES.read_text().splitlines():
        if line.startswith("URIs:"):
            return line.split(":", 1)[1].strip()
    raise Failure(f"{DEBIAN_SOURCES}: no 'URIs:' line")


@contextlib.contextmanager
def _scratch() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="connect-standin-", dir="/var/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _hashed(ref: str, *inputs: bytes) -> str:
    digest = hashlib.sha256(b"\0".join(inputs)).hexdigest()[:12]
    return f"{ref}-{digest}"


def _tag(source: str, target: str) -> None:
    run([engine(), "tag", source, target], quiet=True, stdout=subprocess.DEVNULL)


def build_standin_python(force: bool = False) -> str:
    """debootstrap minbase bookworm + python3.11 + the host's CA bundle, imported as an image.
    Returns the content-addressed reference (also tagged STANDIN_PYTHON)."""
    cas = [HOST_CA_BUNDLE.read_bytes(), *(p.read_bytes() for p in sorted(HOST_EXTRA_CAS.glob("*.crt")))]
    ref = _hashed(STANDIN_PYTHON, STANDIN_RECIPE_VERSION.encode(), " ".join(STANDIN_PACKAGES).encode(), *cas)
    if not force and image_exists(ref):
        _tag(ref, STANDIN_PYTHON)
        return ref
    if not shutil.which("debootstrap"):
        raise Failure("debootstrap is missing (scripts/setup_system.sh installs it)")
    with _scratch() as tmp:
        rootfs = tmp / "rootfs"
        run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={','.join(STANDIN_PACKAGES)}",
                "bookworm",
                str(rootfs),
                mirror(),
            ],
            stdout=subprocess.DEVNULL,
        )
        sources = rootfs / "etc/apt/sources.list.d"
        sources.mkdir(parents=True, exist_ok=True)
        shutil.copy(DEBIAN_SOURCES, sources / "debian.sources")
        (rootfs / "etc/apt/sources.list").unlink(missing_ok=True)
        # Downloads pass a TLS-intercepting proxy here: the image must trust what the host trusts,
        # also after a package's postinst regenerates the bundle (hence the extra CAs as files too).
        shutil.copy(HOST_CA_BUNDLE, rootfs / "etc/ssl/certs/ca-certificates.crt")
        extra = rootfs / "usr/local/share/ca-certificates"
        extra.mkdir(parents=True, exist_ok=True)
        for crt in HOST_EXTRA_CAS.glob("*.crt"):
            shutil.copy(crt, extra / crt.name)
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for p in (rootfs / junk).glob("*"):
                if p.is_file():
                    p.unlink()
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        run(
            [
                engine(),
                "import",
                "--change",
                'CMD ["python3"]',
                "--change",
                "ENV LANG=C.UTF-8",
                "-",
                ref,
            ],
            stdin=tar.stdout,
            stdout=subprocess.DEVNULL,
        )
        assert tar.stdout is not None
        tar.stdout.close()
        if tar.wait() != 0:
            raise Failure("tar of the stand-in root filesystem failed")
    _tag(ref, STANDIN_PYTHON)
    return ref


def build_standins(force: bool = False) -> dict[str, str]:
    """Every stand-in: the Python base, and PostgreSQL and Prometheus on top of it (Debian packages).
    Returns their content-addressed references (each also tagged with its plain STANDIN_* name)."""
    base = build_standin_python(force)
    refs = {"python": base}
    standins = DOCKER_DIR / "standins"
    for key, plain in (("postgres", STANDIN_POSTGRES), ("prometheus", STANDIN_PROMETHEUS)):
        inputs = [base.encode()] + [p.read_bytes() for p in sorted(standins.glob(f"{key}*"))]
        ref = _hashed(plain, *inputs)
        if force or not image_exists(ref):
            run(
                [
                    engine(),
                    "build",
                    "--build-arg",
                    f"BASE_IMAGE={base}",
                    "-f",
                    str(standins / f"{key}.Dockerfile"),
                    "-t",
                    ref,
                    str(standins),
                ]
            )
        _tag(ref, plain)
        refs[key] = ref
    return refs


def standin_env(refs: dict[str, str]) -> dict[str, str]:
    """The variables docker/compose.standins.yaml reads."""
    return {"CONNECT_STANDIN_POSTGRES": refs["postgres"], "CONNECT_STANDIN_PROMETHEUS": refs["prometheus"]}


def _revision() -> str:
    out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else "unknown"


def build_images(base_image: str | None, names: Sequence[str] = tuple(IMAGES)) -> dict[str, str]:
    """Build the project's images from docker/Dockerfile; returns name -> reference (tagged with the version).

    Two builds per image. The first builds the Dockerfile's target with the layer cache and tags it
    `<ref>-layers`. The second, without the cache, adds only the labels that change every build
    (version, revision, created) on top of it and tags `<ref>`. Passing them to the first build
    (`--label`, or build args) is not enough: buildah 1.28 reuses a cached image with the labels of
    the build that made it, so an image rebuilt from cached layers named an older commit.

    A rebuild moves the tag to the new image; the image it leaves behind is removed, so repeated
    builds (every test run) do not pile up images. Removal is best effort: an image a container
    still uses, or that another tag names, stays."""
    built = {}
    created = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    labels = {"version": version(), "revision": _revision(), "created": created}
    for name in names:
        ref = image_ref(name)
        previous = image_id(ref)
        cmd = [engine(), "build", "-f", str(DOCKERFILE), "--target", IMAGES[name], "-t", f"{ref}-layers"]
        if base_image:
            cmd += ["--build-arg", f"BASE_IMAGE={base_image}"]
        run([*cmd, str(ROOT)])
        with tempfile.TemporaryDirectory(prefix="cgc-labels-") as context:
            (Path(context) / "Containerfile").write_text(f"FROM {ref}-layers\n")
            cmd = [engine(), "build", "--no-cache", "-t", ref, "-f", str(Path(context) / "Containerfile")]
            cmd += [f"--label=org.opencontainers.image.{key}={value}" for key, value in labels.items()]
            run([*cmd, context])
        built[name] = ref
        if previous is not None and previous != image_id(ref):
            # (no -f: refused, and left alone, while a container or another tag still uses it)
            run([engine(), "rmi", previous], check=False, quiet=True, capture_output=True)
    return built


def compose_command() -> list[str]:
    if engine() == "podman" and shutil.which("podman-compose"):
        return ["podman-compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return [engine(), "compose"]


def compose_files(standins: bool) -> list[str]:
    files = ["-f", str(COMPOSE_FILE)]
    if standins:
        files += ["-f", str(STANDINS_OVERRIDE)]
    return files


def compose(args: Sequence[str], *, standins: bool, project: str = COMPOSE_PROJECT, check: bool = True) -> int:
    env_note = {"CONNECT_VERSION": version()}
    os.environ.update({k: v for k, v in env_note.items() if k not in os.environ})
    cmd = [*compose_command(), "-p", project, *compose_files(standins), *args]
    return run(cmd, check=check).returncode


def remove_network(project: str = COMPOSE_PROJECT) -> None:
    """podman-compose 1.0.3 leaves its network behind on `down`: remove it, by name."""
    net = f"{project}_default"
    if run([engine(), "network", "exists", net], check=False, quiet=True).returncode == 0:
        run([engine(), "network", "rm", net], check=False)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/containers.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("images", "compose-up"):
        p = sub.add_parser(name)
        p.add_argument("--standins", choices=["auto", "always", "never"], default="auto")
    sub.add_parser("standins").add_argument("--force", action="store_true", help="rebuild even if present")
    sub.add_parser("compose-down")
    args = parser.parse_args(argv)
    try:
        if args.command == "standins":
            build_standins(args.force)
            return 0
        standins = False  # `down` does not depend on which images the services run
        if args.command in ("images", "compose-up"):
            standins = use_standins(args.standins)
            refs = build_standins() if standins else {}
            os.environ.update(standin_env(refs) if refs else {})
            build_images(refs.get("python"))
        if args.command == "compose-up":
            compose(["up", "-d"], standins=standins)
            print(
                f"compose stack '{COMPOSE_PROJECT}' is up: coordinator 127.0.0.1:8470, Prometheus "
                "http://127.0.0.1:9090; `connect-groups describe connect-demo`; `make compose-down` stops it"
            )
        elif args.command == "compose-down":
            compose(["down"], standins=standins, check=False)
            remove_network()
        return 0
    except Failure as e:
        print(f"containers: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

"""A Docker engine and kscheduler's image for the container tests.

The engine: ``$DOCKER_HOST`` (or the default socket) when it answers; otherwise, as
root with Debian's docker.io installed, a private dockerd started with
hack/dockerd-start.sh for the session and stopped afterwards. With neither the
tests fail (never skip), saying what to install.

The client: ``$DOCKER`` if set, else the first ``docker`` that builds with
BuildKit (a client of 23 or later needs the buildx plugin; Debian's 20.10 client
has BuildKit built in).

The image: built with ``make image`` from the base ``$PYTHON_IMAGE`` (default
kscheduler-base:bookworm, made with ``make image-base`` when missing), tagged with
a hash of everything the build reads, so that a second run finds it and builds
nothing. ``$CA_BUNDLE`` (default: ``$PIP_CERT``) is passed as the build secret.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shlex
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BASE_IMAGE = "kscheduler-base:bookworm"


class DockerUnavailable(AssertionError):
    pass


def _client_builds_with_buildkit(cli: str) -> bool:
    out = subprocess.run(
        [cli, "version", "--format", "{{.Client.Version}}"],
        capture_output=True,
        text=True,
        check=False,
    )
    major = out.stdout.strip().split(".")[0]
    if major.isdigit() and int(major) < 23:
        return True
    return (
        subprocess.run([cli, "buildx", "version"], capture_output=True, check=False).returncode == 0
    )


def docker_client() -> str:
    if os.environ.get("DOCKER"):
        return os.environ["DOCKER"]
    candidates = [shutil.which("docker"), "/usr/bin/docker"]
    for cli in candidates:
        if cli and Path(cli).exists() and _client_builds_with_buildkit(cli):
            return cli
    raise DockerUnavailable(
        "no docker client that builds with BuildKit: apt-get install docker.io "
        "(or install the buildx plugin), or set DOCKER"
    )


@dataclass
class Docker:
    cli: str
    env: dict[str, str]
    started_run_dir: str | None = None
    timings: dict[str, float] = field(default_factory=dict)

    def cmd(self, *args: str, check: bool = True, timeout: float = 120) -> str:
        out = subprocess.run(
            [self.cli, *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and out.returncode != 0:
            raise AssertionError(
                f"docker {shlex.join(args)} exited {out.returncode}:\n{out.stdout}\n{out.stderr}"
            )
        return out.stdout

    def ok(self, *args: str) -> bool:
        return (
            subprocess.run(
                [self.cli, *args], env=self.env, capture_output=True, check=False
            ).returncode
            == 0
        )

    def logs(self, name: str) -> str:
        out = subprocess.run(
            [self.cli, "logs", name],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            check=False,
        )
        return out.stdout


@contextlib.contextmanager
def docker_engine() -> Iterator[Docker]:
    """The engine the tests use (see the module docstring); a private one is stopped after."""
    cli = docker_client()
    env = dict(os.environ)
    docker = Docker(cli, env)
    if docker.ok("version"):
        yield docker
        return
    if "DOCKER_HOST" in os.environ:
        raise DockerUnavailable(f"no Docker engine answers at DOCKER_HOST={env['DOCKER_HOST']}")
    if os.geteuid() != 0 or not shutil.which("dockerd", path=f"{env.get('PATH', '')}:/usr/sbin"):
        raise DockerUnavailable(
            "no Docker engine: start one (hack/dockerd-start.sh, as root, after "
            "apt-get install docker.io) and export its DOCKER_HOST"
        )
    started = subprocess.run(
        ["bash", str(REPO / "hack" / "dockerd-start.sh")],
        capture_output=True,
        text=True,
        check=False,
    )
    if started.returncode != 0:
        raise DockerUnavailable(f"hack/dockerd-start.sh failed:\n{started.stderr}")
    # "export DOCKER_HOST=unix://... KSCHEDULER_DOCKERD_RUN=/tmp/..."
    for word in started.stdout.split()[1:]:
        key, _, value = word.partition("=")
        env[key] = value
    docker.started_run_dir = env["KSCHEDULER_DOCKERD_RUN"]
    try:
        yield docker
    finally:
        subprocess.run(
            ["bash", str(REPO / "hack" / "dockerd-stop.sh"), docker.started_run_dir],
            check=False,
        )


def _context_files() -> list[Path]:
    """What the build reads: the Dockerfile, .dockerignore and the build context."""
    files = [REPO / "Dockerfile", REPO / ".dockerignore", REPO / "pyproject.toml"]
    files.append(REPO / "README.md")
    files += sorted(
        p
        for p in (REPO / "kscheduler").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo")
    )
    return files


def image_key(base_id: str) -> str:
    h = hashlib.sha256(base_id.encode())
    for path in _context_files():
        h.update(str(path.relative_to(REPO)).encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _run_make(docker: Docker, *args: str) -> None:
    env = {**docker.env, "DOCKER": docker.cli}
    out = subprocess.run(
        ["make", "-C", str(REPO), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    if out.returncode != 0:
        raise AssertionError(f"make {shlex.join(args)} failed:\n{out.stdout[-4000:]}\n{out.stderr}")


def base_image(docker: Docker) -> str:
    """$PYTHON_IMAGE, or kscheduler-base:bookworm (built from Debian's packages if missing)."""
    name = os.environ.get("PYTHON_IMAGE") or BASE_IMAGE
    if not docker.ok("image", "inspect", name):
        if name != BASE_IMAGE:
            docker.cmd("pull", name, timeout=600)
        else:
            start = time.monotonic()
            _run_make(docker, "image-base")
            docker.timings["base image build"] = time.monotonic() - start
    return name


def kscheduler_image(docker: Docker) -> str:
    """kscheduler's image for this tree, built with `make image` unless already there."""
    base = base_image(docker)
    base_id = docker.cmd("image", "inspect", "-f", "{{.Id}}", base).strip()
    tag = f"kscheduler:test-{image_key(base_id)}"
    if docker.ok("image", "inspect", tag):
        docker.timings["image build"] = 0.0
        return tag
    ca = os.environ.get("CA_BUNDLE", os.environ.get("PIP_CERT", ""))
    start = time.monotonic()
    _run_make(
        docker,
        "image",
        f"IMAGE={tag}",
        f"PYTHON_IMAGE={base}",
        f"CA_BUNDLE={ca}",
        # the private engine has no bridge: builds use the host's network
        "DOCKER_BUILD_FLAGS=--network=host",
    )
    docker.timings["image build"] = time.monotonic() - start
    # the images of earlier trees are untagged (the layers this one shares stay)
    for other in docker.cmd("images", "--format", "{{.Repository}}:{{.Tag}}", "kscheduler").split():
        if other.startswith("kscheduler:test-") and other != tag:
            docker.cmd("rmi", other, check=False)
    return tag

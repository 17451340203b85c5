# kscheduler image: a virtualenv with the wheel and its dependencies, on python-slim.
#
#   docker build -t kscheduler:dev .        (or: make image)
#
# The final stage has no compiler, no pip in the virtualenv and no source tree; it runs
# as uid/gid 65532 and writes nothing at run time, so it works with
# readOnlyRootFilesystem: true (bytecode is compiled at build time, PYTHONDONTWRITEBYTECODE
# stops any attempt to write more). Both stages must use the same base image: the
# virtualenv's interpreter is a symlink to the base image's /usr/local/bin/python.
#
# Build arguments and secrets (BuildKit: DOCKER_BUILDKIT=1 or docker buildx):
#   --build-arg PYTHON_IMAGE=python:3.12-slim     another base image with Python and pip at
#       /usr/local/bin/python (`make image-base` makes kscheduler-base:bookworm from
#       Debian's packages where no image registry is reachable)
#   --secret id=ca-bundle,src=/etc/ssl/certs/ca-certificates.crt    a CA bundle that pip
#       trusts while the builder stage downloads from PyPI (behind a TLS-inspecting
#       proxy). It is mounted for that one RUN only: it is in no layer of either stage.
#
# No `# syntax=` line: the Dockerfile frontend built into BuildKit is enough, and a
# frontend image would have to be pulled from a registry.

ARG PYTHON_IMAGE=python:3.11-slim

# ---------------------------------------------------------------------------- builder
FROM ${PYTHON_IMAGE} AS builder

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore

WORKDIR /src

# With the ca-bundle secret, pip trusts it in the steps that download (PIP_CERT).
# 1. An empty virtualenv (no pip, no setuptools), and kscheduler's dependencies, as
#    pyproject.toml lists them, installed into it with the base image's pip: binary wheels
#    only (every dependency publishes manylinux wheels; the final stage could not build
#    anything anyway). This layer depends on pyproject.toml alone, so a change of the
#    source reuses it and downloads nothing but the wheel's build requirements.
# 2. kscheduler's wheel, installed into the virtualenv (its dependencies are there).
# Both compile bytecode now, hash-based and unchecked, so it stays valid whatever the
# file times become and nothing is compiled at run time.
COPY pyproject.toml ./
RUN --mount=type=secret,id=ca-bundle \
    if [ -s /run/secrets/ca-bundle ]; then export PIP_CERT=/run/secrets/ca-bundle; fi \
 && python -m venv --without-pip /opt/venv \
 && python -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"], sep="\n")' \
      >/tmp/requirements.txt \
 && python -m pip --python /opt/venv/bin/python install --no-compile --only-binary=:all: \
      -r /tmp/requirements.txt \
 && python -m compileall -q -j 0 --invalidation-mode unchecked-hash /opt/venv/lib

# Only what the wheel is built from (see .dockerignore): pyproject.toml names README.md
# as the long description, so the build needs it.
COPY README.md ./
COPY kscheduler ./kscheduler
RUN --mount=type=secret,id=ca-bundle \
    if [ -s /run/secrets/ca-bundle ]; then export PIP_CERT=/run/secrets/ca-bundle; fi \
 && python -m pip wheel --no-deps --wheel-dir /wheels . \
 && python -m pip --python /opt/venv/bin/python install --no-compile --only-binary=:all: \
      /wheels/kscheduler-*.whl \
 && python -m compileall -q -j 0 --invalidation-mode unchecked-hash \
      /opt/venv/lib/python3*/site-packages/kscheduler \
 && /opt/venv/bin/kscheduler --version

# ---------------------------------------------------------------------------- runtime
FROM ${PYTHON_IMAGE}

LABEL org.opencontainers.image.title="kscheduler" \
      org.opencontainers.image.description="A Kubernetes scheduler in Python asyncio, run beside kube-scheduler as a secondary scheduler" \
      org.opencontainers.image.licenses="Apache-2.0"

# A named account for uid/gid 65532 (the usual "nonroot" id), without a home directory:
# nothing reads or writes $HOME in the cluster (the service account is used in-cluster).
# The base image ships the standard library without bytecode; compile it once here
# (hash-based, about 13 MB) so that each start does not recompile it in memory.
RUN groupadd --system --gid 65532 kscheduler \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin kscheduler \
 && python -m compileall -q -j 0 --invalidation-mode unchecked-hash \
      -x '/(site-packages|test|tests|idlelib|tkinter|turtledemo|lib2to3|ensurepip|pydoc_data)/' \
      "$(python -c 'import sysconfig; print(sysconfig.get_path("stdlib"))')"

COPY --from=builder /opt/venv /opt/venv

ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

# Numeric, so that the kubelet can verify runAsNonRoot without reading /etc/passwd.
USER 65532:65532
WORKDIR /

# HTTPS: /metrics and /debug/* for identities RBAC allows, /healthz /livez /readyz open.
EXPOSE 10259

# kscheduler installs its own SIGTERM/SIGINT handlers (graceful: finish in-flight binds,
# release the Lease), so it runs as PID 1 without an init. Arguments go to `kscheduler`,
# e.g. --config /etc/kscheduler/config.yaml.
ENTRYPOINT ["kscheduler"]

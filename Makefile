# kscheduler — run `make help` for the targets.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
, := ,
# the out-of-tree plugin example: installed into the venv, its tests run by `make test`
EXAMPLE := examples/kscheduler-plugin-example

.PHONY: help venv control-plane lint fmt typecheck unit integration test demo dev-cluster bench bench-5000 bench-scale soak random-diff clean

help:
	@echo "make demo          local demo: embedded control plane + kscheduler, then a placement table"
	@echo "                   (make demo DEMO_ARGS=--keep leaves the cluster up for kubectl)"
	@echo "make test          lint + unit + integration tests against a real kube-apiserver"
	@echo "make control-plane build the pinned kube-apiserver/kube-scheduler/etcd (cached)"
	@echo "make dev-cluster   start a control plane for kubectl and print how to use it"
	@echo "make unit | integration | lint | bench | bench-5000 | bench-scale | bench-scaling | scheduler-perf | soak"
	@echo "make random-diff   the randomized differential test over many seeds (slow)"
	@echo "make image | kind-up | kind-load | deploy | e2e-kind   (need a Docker engine and kind)"

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml $(EXAMPLE)/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	$(PY) -m pip install --quiet --no-deps -e $(EXAMPLE)
	touch $@

control-plane:
	bash hack/build-control-plane.sh

lint: venv
	$(VENV)/bin/ruff check kscheduler tests $(EXAMPLE)
	$(VENV)/bin/ruff format --check kscheduler tests $(EXAMPLE)
	$(VENV)/bin/mypy
	cd $(EXAMPLE) && MYPYPATH=../.. ../../$(VENV)/bin/mypy

fmt: venv
	$(VENV)/bin/ruff check --fix kscheduler tests
	$(VENV)/bin/ruff format kscheduler tests

unit: venv
	$(PY) -m pytest tests/unit -q $(PYTEST_ARGS)

integration: venv control-plane
	$(PY) -m pytest tests $(EXAMPLE)/tests -m integration $(PYTEST_ARGS)

test: venv control-plane lint
	$(PY) -m pytest tests $(EXAMPLE)/tests -m "not slow and not kind" $(PYTEST_ARGS)

demo: venv control-plane
	$(PY) -m kscheduler demo $(DEMO_ARGS)

dev-cluster: venv control-plane
	$(PY) -m kscheduler dev-cluster

# the scheduler under test on BENCH_CPUS when pinned; control plane and driver on the rest
BENCH_CPUS ?= 1
BENCH_ARGS ?=

bench: venv control-plane
	$(VENV)/bin/pip install --quiet -e '.[bench]'
	$(PY) -m bench.run --size quick --scheduler-cpus $(BENCH_CPUS) --out bench/results $(BENCH_ARGS)

bench-5000: venv control-plane
	$(VENV)/bin/pip install --quiet -e '.[bench]'
	$(PY) -m bench.run --size 5000 --scheduler-cpus $(BENCH_CPUS) --pairs 1 --main-pairs 3 \
		--out bench/results $(BENCH_ARGS)

# 5000 nodes filled to 150,000 pods, kube-scheduler then kscheduler (hours; not in CI):
# throughput over the first and last 10% of the pods and peak RSS, bench/results/scale-*
SCALE_NODES ?= 5000
SCALE_PODS ?= 150000
SCALE_ARGS ?=

bench-scale: venv control-plane
	$(VENV)/bin/pip install --quiet -e '.[bench]'
	$(PY) -m bench.scale --nodes $(SCALE_NODES) --pods $(SCALE_PODS) --out bench/results $(SCALE_ARGS)

bench-scaling: venv control-plane
	$(VENV)/bin/pip install --quiet -e '.[bench]'
	bench/scaling.sh

scheduler-perf: control-plane
	bench/scheduler_perf.sh

# pods and nodes churned for SOAK_MINUTES against a kscheduler subprocess; its RSS over
# time goes to bench/results/soak-*.json and .png (SOAK_TRACEMALLOC=1: what grew, by site)
SOAK_MINUTES ?= 5
SOAK_TRACEMALLOC ?= 0

soak: venv control-plane
	$(VENV)/bin/pip install --quiet -e '.[bench]'
	KSCHEDULER_SOAK_SECONDS=$$(( $(SOAK_MINUTES) * 60 )) KSCHEDULER_SOAK_OUT=bench/results \
		KSCHEDULER_SOAK_TRACEMALLOC=$(SOAK_TRACEMALLOC) \
		$(PY) -m pytest tests/integration/test_faults.py -m slow -k soak $(PYTEST_ARGS)

# kscheduler against kube-scheduler on 40 generated clusters (make test plays 4);
# replay one: python -m kscheduler.randomdiff --seed N -v
random-diff: venv control-plane
	$(PY) -m pytest tests/integration/test_random_differential.py -m slow $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache

# ---- container image and kind (need a Docker engine, kind and kubectl) ----
.PHONY: image image-base container kind-up kind-load deploy e2e-kind
IMAGE ?= kscheduler:dev
KIND_CLUSTER ?= kscheduler
# a Docker client that builds with BuildKit (Debian's docker.io, or any docker with buildx)
DOCKER ?= docker
# the base of both stages: the registry's python image, or `make image-base`'s
PYTHON_IMAGE ?= python:3.11-slim
# a CA bundle pip trusts during the build only (a build secret, in no layer), e.g.
# CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt behind a TLS-inspecting proxy
CA_BUNDLE ?=
# more `docker build` flags, e.g. --network=host for an engine without a bridge
DOCKER_BUILD_FLAGS ?=

image:
	DOCKER_BUILDKIT=1 $(DOCKER) build $(DOCKER_BUILD_FLAGS) --build-arg PYTHON_IMAGE=$(PYTHON_IMAGE) \
	  $(if $(CA_BUNDLE),--secret id=ca-bundle$(,)src=$(CA_BUNDLE)) -t $(IMAGE) .

# A Python 3.11 base made from Debian's packages (debootstrap, then docker import), for
# machines without an image registry: make image-base && make image PYTHON_IMAGE=kscheduler-base:bookworm
image-base:
	bash hack/image-base.sh kscheduler-base:bookworm

# The image run as deploy/ runs it, two replicas, with Prometheus (tests/container).
container: venv control-plane
	$(PY) -m pytest tests/container -m container $(PYTEST_ARGS)

kind-up:
	kind get clusters | grep -qx '$(KIND_CLUSTER)' || kind create cluster --name $(KIND_CLUSTER)

kind-load: image
	kind load docker-image $(IMAGE) --name $(KIND_CLUSTER)

deploy:
	kubectl apply -k deploy/

# Creates its own kind cluster and deletes it afterwards; KIND_CLUSTER=name (in the
# environment or on the command line) uses that existing cluster instead.
e2e-kind: venv
	$(PY) -m pytest tests/e2e -m kind -rs $(PYTEST_ARGS)

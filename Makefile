# kscheduler — run `make help` for the targets.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
# the out-of-tree plugin example: installed into the venv, its tests run by `make test`
EXAMPLE := examples/kscheduler-plugin-example

.PHONY: help venv control-plane lint fmt typecheck unit integration test demo dev-cluster bench bench-5000 soak clean

help:
	@echo "make demo          local demo: embedded control plane + kscheduler, then a placement table"
	@echo "                   (make demo DEMO_ARGS=--keep leaves the cluster up for kubectl)"
	@echo "make test          lint + unit + integration tests against a real kube-apiserver"
	@echo "make control-plane build the pinned kube-apiserver/kube-scheduler/etcd (cached)"
	@echo "make dev-cluster   start a control plane for kubectl and print how to use it"
	@echo "make unit | integration | lint | bench | bench-5000 | soak"
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

bench: venv control-plane
	$(VENV)/bin/pip install --quiet -e '.[bench]'
	$(PY) -m bench.run --size quick

bench-5000: venv control-plane
	$(VENV)/bin/pip install --quiet -e '.[bench]'
	$(PY) -m bench.run --size 5000

soak: venv control-plane
	$(PY) -m pytest tests -m slow $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache

# ---- container image and kind (need a Docker engine, kind and kubectl) ----
.PHONY: image kind-up kind-load deploy e2e-kind
IMAGE ?= kscheduler:dev
KIND_CLUSTER ?= kscheduler

image:
	docker build -t $(IMAGE) .

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

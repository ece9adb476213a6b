# Two commands for a fresh machine: `make run` and `make test`. Each does its own installs.
VENV   := .venv
PY     := $(VENV)/bin/python
BIN    := $(VENV)/bin
# The oldest nvidia-ml-py of the pinned range, beside the venv, for the GPM binding test.
BINDINGS_LOW := $(shell sed -n 's/.*"nvidia-ml-py>=\([0-9.]*\),.*/\1/p' pyproject.toml)
# And of habana-pyhlml's (the gaudi extra), for tests/gaudi/test_bindings.py.
HLML_LOW := $(shell sed -n 's/^gaudi = \["habana-pyhlml>=\([0-9.]*\),.*/\1/p' pyproject.toml)
# Debian's python3: bcc (python3-bpfcc, not on PyPI) is built for it. The venv is plain
# (no --system-site-packages): scripts/link-bcc.sh links just bcc into it.
SYSPY  := /usr/bin/python3
ARGS   ?=
PYTEST_ARGS ?=

.PHONY: podresources-stubs run check test bench lint typecheck docs docs-check system-deps system-deps-run system-deps-demo venv clean demo image fleet-sim

system-deps:
	bash scripts/install-system-deps.sh scripts/apt-packages.txt

# `make run` writes nothing of its own to stdout (installs report on stderr), so that
# `make run ARGS=dump > f` is the exposition alone.
system-deps-run:
	@bash scripts/install-system-deps.sh scripts/apt-packages-run.txt >&2

system-deps-demo:
	@bash scripts/install-system-deps.sh scripts/apt-packages-demo.txt >&2

# What the exporter needs to run, and no more (`make run`).
$(VENV)/.installed-run: pyproject.toml
	@$(SYSPY) -m venv $(VENV) >&2
	@bash scripts/link-bcc.sh $(VENV) >&2
	@$(PY) -m pip install --quiet --upgrade pip >&2
	@$(PY) -m pip install --quiet -e . >&2
	@touch $@

# And what the tests, linters and benchmarks need (`make test`, `make bench`, ...).
$(VENV)/.installed: pyproject.toml
	$(SYSPY) -m venv $(VENV)
	bash scripts/link-bcc.sh $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	$(PY) -m pip install --quiet --no-deps --upgrade \
		--target build/bindings/nvidia-ml-py-$(BINDINGS_LOW) nvidia-ml-py==$(BINDINGS_LOW)
	$(PY) -m pip install --quiet --no-deps --upgrade \
		--target build/bindings/habana-pyhlml-$(HLML_LOW) 'habana-pyhlml>=$(HLML_LOW),<$(HLML_LOW).1'
	touch $@ $(VENV)/.installed-run

venv: $(VENV)/.installed

run: system-deps-run $(VENV)/.installed-run
	@$(BIN)/gpu-exporter $(ARGS)

lint: venv
	$(BIN)/ruff check gpu_exporter tests dashboards scripts
	$(BIN)/mypy

docs: venv
	$(PY) scripts/gen-metrics-doc.py > docs/metrics.md
	$(PY) scripts/gen-probe-table.py docs/ebpf.md
	$(PY) scripts/gen-flags-doc.py

# The kubelet PodResources messages are committed; regenerate after changing api.proto.
# No .pyi: what the exporter reads of them is typed in
# gpu_exporter/readers/kubelet/podresources_v1/messages.py.
podresources-stubs: venv
	$(PY) -m grpc_tools.protoc -I. --python_out=. gpu_exporter/readers/kubelet/podresources_v1/api.proto

# The fast lane, for contributors: lint, types and the tests that need no root, bcc,
# server, apt tool or exporter process (their markers are put on by tests/lanes.py, and a
# test of this lane that starts such a program fails). No installs beyond the venv.
check: venv
	$(BIN)/ruff check gpu_exporter tests dashboards scripts
	$(BIN)/mypy
	$(BIN)/pytest --lane=fast --ignore=tests/bench --timeout=60 $(PYTEST_ARGS)

test: system-deps venv
	bash scripts/setup-test-host.sh
	$(BIN)/ruff check gpu_exporter tests dashboards scripts
	$(BIN)/mypy
	# Benchmarks are measured by `make bench`, not run (or skipped) here.
	$(BIN)/pytest --ignore=tests/bench $(PYTEST_ARGS)

# The fleet simulation (docs/performance.md, "Fleet"): sharded vmagents, VictoriaMetrics and
# vmalert over 16 real exporters, then 64 and 128 replayed nodes; prints the cost table.
# FLEETSIM_ARGS: e.g. --rules 'my-rules/*.yml' --rules 'alerts/*.yml', --sizes 4,16.
FLEETSIM_ARGS ?=
fleet-sim: system-deps venv
	$(PY) -m tests.fleetsim $(FLEETSIM_ARGS)

bench: system-deps venv
	bash scripts/setup-test-host.sh
	mkdir -p build/bench
	$(BIN)/pytest tests/bench --benchmark-only --benchmark-columns=min,median,max,mean,rounds \
		--benchmark-json=build/bench/pytest-benchmark.json $(PYTEST_ARGS)
	# Tables of docs/performance.md from build/bench/results.json (between its bench markers).
	$(PY) -m tests.bench.report

# Simulated GPU node + VictoriaMetrics + vmalert (alerts/) + Alertmanager; Ctrl-C stops all.
# Ctrl-C is how the demo is meant to end: scripts/foreground.py hands it the terminal, so
# that the signal stops the demo alone and make ends with the demo's exit 0.
# Only the packages the demo uses (scripts/apt-packages-demo.txt) and the exporter's own
# Python packages: the simulated node needs nothing of the test toolchain.
demo: system-deps-demo $(VENV)/.installed-run
	@$(SYSPY) scripts/foreground.py bash scripts/demo.sh

# The container image, tagged with the package version (IMAGE=registry/name to name it
# for your registry); a release tag publishes it multi-arch (.github/workflows/release.yml).
IMAGE   ?= gpu-exporter
VERSION := $(shell sed -n 's/^__version__ = "\(.*\)"$$/\1/p' gpu_exporter/__init__.py)
image:
	docker build --build-arg VERSION=$(VERSION) -t $(IMAGE):$(VERSION) .

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache

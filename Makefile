# The two commands of the README's quick start. Both start from a fresh clone: nothing is
# installed by hand, everything goes into .venv.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
# torch is pinned for the local run and tests: 2.13.0 is the CPU wheel this project's machines
# hold on disk; any other spec downloads a multi-GB CUDA build.
TORCH  := torch==2.13.0
STAMP_RUN  := $(VENV)/.stamp-run
STAMP_TEST := $(VENV)/.stamp-test

.PHONY: run test lint typecheck contracts unit clean bench-check

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

# The run environment holds what every command of the README needs, `report` (matplotlib) included.
$(STAMP_RUN): pyproject.toml | $(PY)
	$(PIP) install -q $(TORCH)
	$(PIP) install -q -e '.[engine,k8s,metrics,report]'
	touch $@

$(STAMP_TEST): pyproject.toml $(STAMP_RUN)
	$(PIP) install -q -e '.[engine,k8s,metrics,report,dev]'
	touch $@

run: $(STAMP_RUN)
	$(VENV)/bin/nccl-k8s run -b 8 -e 1M -f 4

lint: $(STAMP_TEST)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks

typecheck: $(STAMP_TEST)
	$(VENV)/bin/mypy

# The layer contracts of docs/architecture.md (import-linter; see [tool.importlinter] in pyproject.toml).
contracts: $(STAMP_TEST)
	$(VENV)/bin/lint-imports

unit: $(STAMP_TEST)
	$(PY) -m pytest -q

test: lint typecheck contracts unit

# Not part of `test`: reruns the scale benchmarks at 1,024 pods (and benchmarks/badnode_sim.py
# when present) and fails when a figure is worse than BENCHMARKS.md's by more than its noise band.
bench-check: $(STAMP_TEST)
	$(PY) benchmarks/bench_check.py

clean:
	rm -rf $(VENV) build dist src/*.egg-info

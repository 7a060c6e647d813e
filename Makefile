# The two commands of the README's quick start. Both start from a fresh clone: nothing is
# installed by hand, everything goes into .venv.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
# torch is pinned for the local run and tests. From PyPI on Linux that is the CUDA build (several
# GB); `make run TORCH_INDEX=https://download.pytorch.org/whl/cpu` takes the CPU wheel instead.
TORCH  := torch==2.13.0
TORCH_INDEX ?=
STAMP_RUN  := $(VENV)/.stamp-run
STAMP_TEST := $(VENV)/.stamp-test

.PHONY: run test lint typecheck contracts unit pytest dist check-dist clean bench-check loops loops-check

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

# The run environment holds what every command of the README needs, `report` (matplotlib) included.
$(STAMP_RUN): pyproject.toml | $(PY)
	$(PIP) install -q $(TORCH) $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(PIP) install -q -e '.[engine,k8s,metrics,report]'
	touch $@

$(STAMP_TEST): pyproject.toml $(STAMP_RUN)
	$(PIP) install -q -e '.[engine,k8s,metrics,report,dev]'
	touch $@

run: $(STAMP_RUN)
	$(VENV)/bin/nccl-k8s run -b 8 -e 1M -f 4

lint: $(STAMP_TEST)
	$(VENV)/bin/ruff check src tests benchmarks tools
	$(VENV)/bin/ruff format --check src tests benchmarks tools

typecheck: $(STAMP_TEST)
	$(VENV)/bin/mypy

# The layer contracts of docs/architecture.md (import-linter; see [tool.importlinter] in pyproject.toml).
contracts: $(STAMP_TEST)
	$(VENV)/bin/lint-imports

# The fast loop: the suite without the tests marked slow (multi-process engine runs, whole
# deploys); `make pytest` is all of it, as `make test` runs it. Both end with their slowest
# tests and times (--durations), so a test that grows shows up in every run's tail: CI runs
# `make test` on 2 cores and the whole suite must stay under 15 minutes.
unit: $(STAMP_TEST)
	$(PY) -m pytest -q -m "not slow" --durations=15

# Two workers, a test file's tests on one of them (its module-scoped test cluster is made once):
# many tests wait on ranks, pods or a timeout rather than use the CPU, so two files at a time
# fit the 2 cores CI has.
pytest: $(STAMP_TEST)
	$(PY) -m pytest -q -n 2 --dist loadfile --durations=15

test: lint typecheck contracts pytest check-dist

# The wheel and sdist, ready to publish (PEP 517 `build`, from PyPI: its isolated build
# environment downloads setuptools, so this needs the network, as `make test`'s installs do;
# `make test` ends with check-dist: CI runs `make test` and nothing else).
DIST_VENV := $(VENV)/dist-check
dist: $(PY)
	$(PIP) install -q build
	rm -rf dist
	$(PY) -m build --outdir dist .

# The built wheel installs into a fresh venv (its core dependencies from PyPI) and runs; the
# metadata and contents are checked by tests/dist_check.py.
check-dist: dist
	rm -rf $(DIST_VENV)
	$(PYTHON) -m venv $(DIST_VENV)
	$(DIST_VENV)/bin/pip install -q dist/*.whl trove-classifiers
	$(DIST_VENV)/bin/python tests/dist_check.py dist $(DIST_VENV)/bin

# Not part of `test`: reruns the scale benchmarks at 1,024 pods (and benchmarks/badnode_sim.py
# when present) and fails when a figure is worse than BENCHMARKS.md's by more than its noise band.
bench-check: $(STAMP_TEST)
	$(PY) benchmarks/bench_check.py

# The engine's timed C loop, cross-built for every machine it ships for (tools/build_loops.py:
# Zig's cc from the pinned ziglang wheel, ~80 MB, in its own venv; not part of `test`, which
# checks the committed libraries against their digests and the loop's text instead).
# `loops` rewrites src/nccl_k8s/bench/loops/ and _loops.py after the loop's text changed;
# `loops-check` rebuilds and fails when the committed bytes are not what the text builds to.
ZIG_VENV := $(VENV)/zig
$(ZIG_VENV)/.stamp: | $(PY)
	$(PYTHON) -m venv $(ZIG_VENV)
	$(ZIG_VENV)/bin/pip install -q ziglang==0.13.0
	touch $@

loops: $(ZIG_VENV)/.stamp
	$(ZIG_VENV)/bin/python tools/build_loops.py

loops-check: $(ZIG_VENV)/.stamp
	$(ZIG_VENV)/bin/python tools/build_loops.py --check

clean:
	rm -rf $(VENV) build dist src/*.egg-info

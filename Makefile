# The README's commands. `make test` is what CI runs (.ci/run).
#   make test   venv + our wheel, then our tests, upstream's tests/ and NNX examples
#               (11-18 min on 2 cores with warm caches; `==` lines mark the long steps)
#   make demo   venv + our wheel, then examples/scan_over_layers.py
#   make check  the patch-queue invariants (strict apply, no-op export, ...)
#   make bench  benchmarks/: ours vs vanilla flax 0.12.12, in their own venvs
# PYTHON=/path/to/python3.12 overrides the interpreter scripts/find-python picks.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
VENV ?= .venv
PY := $(VENV)/bin/python
WORKERS ?= 2
export XLA_FLAGS ?= --xla_force_host_platform_device_count=8
export JAX_PLATFORMS ?= cpu
# A timestamped progress line: $(call step,what is happening)
step = @echo "== $$(date +%H:%M:%S) $(1)"

.PHONY: test demo bench check install venv our-tests upstream-tests upstream-tree \
	upstream-suite upstream-examples clean

test: install check our-tests upstream-tests

demo: install
	$(PY) examples/scan_over_layers.py

bench:
	python=$$(scripts/find-python); "$$python" benchmarks/run.py --python "$$python"

venv: $(VENV)/.ready
$(VENV)/.ready:
	python=$$(scripts/find-python); echo "using $$python"; "$$python" -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	touch $@

# Build our wheel once through PEP 517 (pip wheel .), then install it over
# whatever flax the venv had, with upstream's dependencies, our test tools,
# what upstream's tests and examples need, and MaxText without its dependencies.
install: venv
	rm -rf build/dist
	$(call step,building our wheel: upstream sdist + patches (under a minute))
	$(PY) -m pip wheel --quiet --no-deps --wheel-dir build/dist .
	$(call step,built $$(cd build/dist && echo flax-*.whl); installing it with its dependencies)
	$(PY) -m pip install --quiet -r requirements/test.txt -r requirements/upstream-tests.txt \
		build/dist/flax-*.whl
	$(PY) -m pip install --quiet --no-deps -r requirements/no-deps.txt
	$(PY) -m pip install --quiet --force-reinstall --no-deps build/dist/flax-*.whl
	$(PY) -c 'import flax; print("installed flax", flax.__version__)'

check: venv
	$(PY) -m flaxpq check

our-tests: install
	$(call step,our suite: tests/ on $(WORKERS) workers)
	$(PY) -m pytest -n $(WORKERS) -p no:cacheprovider tests
	$(call step,our suite done)

# Upstream's tests and examples run from the patched tree with flax/ removed,
# so that only the installed wheel can be imported, in pytest processes of
# their own (their modules set XLA_FLAGS at import time). tests/upstream/
# upstream_plugin.py skips what tests/upstream/skips.txt lists, with reasons,
# and runs each examples/nnx_toy_examples script as one test.
UPSTREAM_TREE := build/upstream-tests
UPSTREAM_PYTEST = PYTHONPATH=$(CURDIR)/tests/upstream $(abspath $(VENV))/bin/pytest \
	-p upstream_plugin -p no:cacheprovider -q -rfEsx -n $(WORKERS) --durations=15
upstream-tests: upstream-suite upstream-examples

upstream-tree: install
	$(PY) -m flaxpq tests-tree --dest $(UPSTREAM_TREE) --force

# The whole tests/ tree, in the environment of upstream's tests/run_all_tests.sh.
upstream-suite: upstream-tree
	$(call step,upstream suite: the whole tests/ of the patched tree)
	cd $(UPSTREAM_TREE) && XLA_FLAGS=--xla_force_host_platform_device_count=4 \
		JAX_NUMPY_RANK_PROMOTION=raise FLAX_PROFILE=1 $(UPSTREAM_PYTEST) tests

# The NNX examples, on one CPU device as upstream runs them (the toy examples
# that need more set XLA_FLAGS themselves).
upstream-examples: upstream-tree
	$(call step,upstream examples: examples/nnx_toy_examples and examples/gemma)
	cd $(UPSTREAM_TREE) && XLA_FLAGS= $(UPSTREAM_PYTEST) examples/nnx_toy_examples examples/gemma
	$(call step,upstream examples done)

clean:
	rm -rf build dist $(VENV)

# The README's commands. `make test` is what CI runs (.ci/run).
#   make test   venv + our wheel, then our tests and upstream's tests/nnx
#               (about 15-25 min on 2 cores; `==` lines mark the long steps)
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

.PHONY: test demo bench check install venv our-tests upstream-tests clean

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
# whatever flax the venv had, with upstream's dependencies and our test tools.
install: venv
	rm -rf build/dist
	$(call step,building our wheel: upstream sdist + patches (under a minute))
	$(PY) -m pip wheel --quiet --no-deps --wheel-dir build/dist .
	$(call step,built $$(cd build/dist && echo flax-*.whl); installing it with its dependencies)
	$(PY) -m pip install --quiet -r requirements/test.txt build/dist/flax-*.whl
	$(PY) -m pip install --quiet --force-reinstall --no-deps build/dist/flax-*.whl
	$(PY) -c 'import flax; print("installed flax", flax.__version__)'

check: venv
	$(PY) -m flaxpq check

our-tests: install
	$(call step,our suite: tests/ on $(WORKERS) workers)
	$(PY) -m pytest -n $(WORKERS) -p no:cacheprovider tests
	$(call step,our suite done)

# Upstream's tests run from the patched tree with flax/ removed, so that only
# the installed wheel can be imported: all of tests/nnx, plus the Linen and
# core metadata tests that the bridge patch touches.
UPSTREAM_TESTS := tests/nnx tests/linen/linen_meta_test.py \
	tests/linen/linen_transforms_test.py tests/core/core_meta_test.py
upstream-tests: install
	$(PY) -m flaxpq tests-tree --dest build/upstream-tests --force
	$(call step,upstream suite: tests/nnx and the Linen/core metadata tests)
	cd build/upstream-tests && ../../$(VENV)/bin/pytest -n $(WORKERS) -q -p no:cacheprovider $(UPSTREAM_TESTS)
	$(call step,upstream suite done)

clean:
	rm -rf build dist $(VENV)

# The README's commands. `make test-full` is what CI runs (.ci/run).
#   make test   venv + our wheel, then `flaxpq check` without upstream's hooks,
#               our tests but the slow ones, the oracle's self-check: the
#               loop to run often, 9 min 29 s of CPU time (the figure that
#               holds at any load; 9 min 24 s on 2 cores at load 3-8 from a
#               fresh clone with empty caches: docs/maintainers.md, Durations);
#               it prints progress, then failures and a summary
#   make test-full  make test, then upstream's pre-commit hooks, our slow tests
#               (builds, cold installs, benchmark smoke, MaxText, the demo),
#               upstream's whole tests/ and the NNX examples, then make test-1dev
#   make test-1dev  our suite but the slow tests, and upstream's spmd, optimizer
#               and transforms tests, on 1 CPU device (JAX_NUM_CPU_DEVICES=1)
#   make demo   examples/stacked_optimizer.py on vanilla flax 0.12.12 and on ours,
#               side by side (examples/compare.py), each in its own venv:
#               .venv-demo-vanilla and .venv-demo (requirements/demo.txt)
#   make check  the patch-queue invariants (strict apply, no-op export, ...)
#   make bench  benchmarks/: ours vs vanilla flax 0.12.12, in their own venvs
#   make oracle-long  the compatibility oracle on 1,000 fresh random programs
#               (ORACLE_EXAMPLES=N to change; nightly and before a release)
#   make clean  remove build/, dist/ and the venvs make made
# Make's venvs are its own: .venv-test (VENV=), .venv-demo, .venv-demo-vanilla.
# scripts/venv marks each one it makes, and never removes or reuses a
# directory without its mark (a venv of yours stays yours: make stops, saying
# so). PYTHON=/path/to/python3.12 overrides the interpreter scripts/find-python
# picks; scripts/venv makes each venv anew when the pick changes.
# Each long step runs under scripts/timed: a `== HH:MM:SS <step>` line before,
# `== HH:MM:SS <step>: done in 1 min 5 s` after, then for a pytest step
# pytest's summary line again and one line for the whole run so far (the
# counts of all its pytest steps, the wall time since make started), so
# `make test` ends with `== make: N passed, N failed, N skipped over 2 pytest
# steps; 5 min 2 s since HH:MM:SS`, also when a step fails.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
VENV ?= .venv-test
DEMO_VENV ?= .venv-demo
DEMO_VANILLA_VENV ?= .venv-demo-vanilla
PY := $(VENV)/bin/python
DEMO_PY := $(DEMO_VENV)/bin/python
WORKERS ?= 2
# One run log per make run (named by its start and make's pid), where
# scripts/timed collects the summary lines of the run's pytest steps; timed
# reads these two and keeps them from the commands it runs.
export TIMED_RUN_START := $(shell date +%s)
export TIMED_RUN_LOG := $(CURDIR)/build/timed/run-$(TIMED_RUN_START)-$(shell echo $$PPID).log
TIMED := scripts/timed
export XLA_FLAGS ?= --xla_force_host_platform_device_count=8
export JAX_PLATFORMS ?= cpu

.PHONY: test test-full test-1dev check-hooks slow-tests demo bench check install demo-install demo-vanilla-install venv demo-venv \
	our-tests upstream-tests upstream-tree upstream-suite upstream-examples \
	oracle-self-check oracle-long test-newest clean

test: install check our-tests oracle-self-check

test-full: test check-hooks slow-tests upstream-tests test-1dev

demo: demo-install demo-vanilla-install
	$(DEMO_PY) examples/compare.py --vanilla $(DEMO_VANILLA_VENV)/bin/python --ours $(DEMO_PY)

# BENCH_ARGS go to benchmarks/run.py, e.g. BENCH_ARGS='--program-timeout 3600'
# on a loaded machine (docs/benchmarks.md).
BENCH_ARGS ?=
bench:
	python=$$(scripts/find-python); "$$python" benchmarks/run.py --python "$$python" $(BENCH_ARGS)

# A venv of the Python scripts/find-python picks, with a current pip:
# $(VENV) for the tests, $(DEMO_VENV) for the demo (scripts/venv makes it
# anew when the pick changed).
venv:
	scripts/venv $(VENV)
# Both of the demo's venvs at once (the vanilla one is filled later).
demo-venv:
	scripts/venv $(DEMO_VANILLA_VENV) & vanilla=$$!; scripts/venv $(DEMO_VENV); wait $$vanilla

# Our wheel, built once per install through PEP 517 (pip wheel .) by the pip
# of venv $(1), into build/dist.
build-wheel = rm -rf build/dist && $(TIMED) 'building our wheel: upstream sdist + patches' \
	$(1)/bin/python -m pip wheel --quiet --no-deps --wheel-dir build/dist .

# Install our wheel over whatever flax the venv had, with upstream's
# dependencies, our test tools, what upstream's tests and examples need, and
# MaxText without its dependencies.
install: venv
	$(call build-wheel,$(VENV))
	$(TIMED) "installing $$(cd build/dist && echo flax-*.whl), its dependencies and the test tools" \
		$(PY) -m pip install --quiet -r requirements/test.txt \
		-r requirements/upstream-tests.txt build/dist/flax-*.whl
	$(PY) -m pip install --quiet --no-deps -r requirements/no-deps.txt
	$(PY) -m pip install --quiet --force-reinstall --no-deps build/dist/flax-*.whl
	$(PY) -c 'import flax; print("installed flax", flax.__version__)'

# The demo's venv: our wheel and what the demo imports, nothing else.
demo-install: demo-venv
	$(call build-wheel,$(DEMO_VENV))
	$(TIMED) "installing $$(cd build/dist && echo flax-*.whl) and requirements/demo.txt" \
		$(DEMO_PY) -m pip install --quiet --no-compile -r requirements/demo.txt build/dist/flax-*.whl
	$(DEMO_PY) -m pip install --quiet --no-compile --force-reinstall --no-deps build/dist/flax-*.whl
	$(DEMO_PY) -c 'import flax; print("installed flax", flax.__version__)'

# The demo's vanilla side: the registry's flax of our version (without our
# label) and requirements/demo.txt, constrained to exactly what $(DEMO_VENV)
# holds (pip freeze), so that both sides run the same jax and optax and only
# the flax wheel is new to pip's cache. Installed again only when those
# constraints change.
DEMO_PINS := $(DEMO_VANILLA_VENV)/constraints.txt
demo-vanilla-install: demo-install
	$(DEMO_PY) -m pip freeze --exclude flax > $(DEMO_PINS).new
	if ! cmp -s $(DEMO_PINS).new $(DEMO_PINS); then \
		flax=$$($(DEMO_PY) -c 'import flax; print(flax.__version__.split("+")[0])'); \
		$(TIMED) "installing vanilla flax==$$flax and requirements/demo.txt" \
			$(DEMO_VANILLA_VENV)/bin/python -m pip install --quiet --no-compile -c $(DEMO_PINS).new \
			-r requirements/demo.txt "flax==$$flax"; \
	fi
	mv $(DEMO_PINS).new $(DEMO_PINS)

# make test checks the invariants only; check-hooks (in make test-full) adds
# upstream's pre-commit hooks, about a minute.
check: venv
	$(TIMED) 'flaxpq check: the patch-queue invariants' $(PY) -m flaxpq check --no-hooks

check-hooks: venv
	$(TIMED) 'flaxpq check: the invariants and upstream pre-commit hooks' $(PY) -m flaxpq check

# -q for our suite: progress, then failures, skips and the summary (-v, one
# line per test, for the slow tests, where each takes minutes);
# --durations: the slowest tests at the end.
# -m slow: tests that build, install or run a whole program; -m registry: tests
# that ask the package registry what it serves today (make test-newest runs
# those; pyproject.toml).
# The suite keeps vanilla's oracle reports in $(ORACLE_REPORTS) for the
# self-check (tests/support/workers.py, VanillaReports).
ORACLE_REPORTS := build/oracle-reports
our-tests: install
	rm -rf $(ORACLE_REPORTS)
	ORACLE_REPORTS=$(ORACLE_REPORTS) $(TIMED) 'our suite: tests/ but the slow ones, on $(WORKERS) workers' \
		$(PY) -m pytest -n $(WORKERS) -p no:cacheprovider -q -rfEsx \
		--durations=15 -m 'not slow and not registry' tests

slow-tests: install
	$(TIMED) 'our slow tests: builds, cold installs, benchmark smoke, MaxText, the demo' \
		$(PY) -m pytest -n $(WORKERS) -p no:cacheprovider -v -rfEsx --durations=15 \
		-m 'slow and not registry' tests

# The oracle's self-check: vanilla judged as ours must fail exactly the
# checks of intended differences (tests/oracle/test_oracle.py), so the oracle
# can tell the two flaxes apart. On $(WORKERS) workers: the families its
# random programs reached go through a file to pytest's terminal summary.
# It judges the reports vanilla gave in the suite step (ORACLE_REPORTS) and
# runs vanilla afresh on any program not among them.
oracle-self-check: install
	rm -f build/oracle-families.txt
	ORACLE_OURS=vanilla ORACLE_REPORTS=$(ORACLE_REPORTS) \
		ORACLE_FAMILIES=build/oracle-families.txt $(TIMED) \
		'oracle self-check: vanilla judged as ours, on $(WORKERS) workers' \
		$(PY) -m pytest -n $(WORKERS) -p no:cacheprovider -q -rfEsx --durations=5 tests/oracle

# Fresh random programs (no derandomize), every failing one collected into
# build/oracle-findings.jsonl (docs/design.md, "The oracle").
ORACLE_EXAMPLES ?= 1000
oracle-long: install
	ORACLE_RANDOM=1 ORACLE_EXAMPLES=$(ORACLE_EXAMPLES) $(TIMED) \
		'oracle: $(ORACLE_EXAMPLES) fresh random programs, vanilla vs ours' \
		$(PY) -m pytest -p no:xdist -p no:cacheprovider -q -rfEsx \
		tests/oracle/test_oracle.py tests/oracle/test_readme.py \
		-k 'random_programs or loaded or user_reports'

# Our suite but the slow tests, then the patched upstream test files of the
# sharding transforms, on 1 CPU device: JAX_NUM_CPU_DEVICES=1 overrides the
# count XLA_FLAGS asks for (this Makefile's 8, and the 4 that upstream's
# spmd_test.py and optimizer_test.py set). Tests build their meshes from the
# devices present and skip, with the reason, what 1 device cannot express;
# a program that a test starts with 8 simulated CPU devices of its own
# (vanilla's side, the oracle's workers, the doc pages) keeps them
# (tests/support/devices.py). Both steps run; the target fails if either does.
UPSTREAM_1DEV_TESTS := tests/nnx/spmd_test.py tests/nnx/optimizer_test.py tests/nnx/transforms_test.py
test-1dev: install upstream-tree
	status=0; \
	JAX_NUM_CPU_DEVICES=1 $(TIMED) 'our suite but the slow tests, on 1 CPU device' \
		$(PY) -m pytest -n $(WORKERS) -p no:cacheprovider -q -rfEsx \
		--durations=5 -m 'not slow and not registry' tests || status=$$?; \
	cd $(UPSTREAM_TREE) && JAX_NUM_CPU_DEVICES=1 $(UPSTREAM_ENV) $(CURDIR)/$(TIMED) \
		'upstream spmd, optimizer and transforms tests, on 1 CPU device' \
		$(UPSTREAM_PYTEST) $(UPSTREAM_1DEV_TESTS) || status=$$?; \
	exit $$status

# Upstream's tests and examples run from the patched tree with flax/ removed,
# so that only the installed wheel can be imported, in pytest processes of
# their own (their modules set XLA_FLAGS at import time). tests/upstream/
# upstream_plugin.py skips what tests/upstream/skips.txt lists, with reasons,
# and runs each examples/nnx_toy_examples script as one test.
UPSTREAM_TREE := build/upstream-tests
# The pytest of venv $(1), with folder $(2) (optional) first on PYTHONPATH.
upstream-pytest = env PYTHONPATH=$(if $(2),$(abspath $(2)):)$(CURDIR)/tests/upstream \
	$(abspath $(1))/bin/pytest -p upstream_plugin -p no:cacheprovider -q -rfEsx -n $(WORKERS) --durations=15
UPSTREAM_PYTEST = $(call upstream-pytest,$(VENV))
# The environment of upstream's tests/run_all_tests.sh.
UPSTREAM_ENV := XLA_FLAGS=--xla_force_host_platform_device_count=4 \
	JAX_NUMPY_RANK_PROMOTION=raise FLAX_PROFILE=1
upstream-tests: upstream-suite upstream-examples

upstream-tree: install
	$(PY) -m flaxpq tests-tree --dest $(UPSTREAM_TREE) --force

# The whole tests/ tree, in the environment of upstream's tests/run_all_tests.sh.
upstream-suite: upstream-tree
	cd $(UPSTREAM_TREE) && $(UPSTREAM_ENV) \
		$(CURDIR)/$(TIMED) 'upstream suite: the whole tests/ of the patched tree' \
		$(UPSTREAM_PYTEST) tests

# The NNX examples, on one CPU device as upstream runs them (the toy examples
# that need more set XLA_FLAGS themselves).
upstream-examples: upstream-tree
	cd $(UPSTREAM_TREE) && XLA_FLAGS= \
		$(CURDIR)/$(TIMED) 'upstream examples: examples/nnx_toy_examples and examples/gemma' \
		$(UPSTREAM_PYTEST) examples/nnx_toy_examples examples/gemma

# The newest jax, jaxlib, optax and orbax-checkpoint the registry serves, not
# requirements/test.txt's pinned jax (CI's gate keeps the pin): in a venv of
# their own ($(NEWEST_VENV)) with our wheel and the test tools, our suite but
# the slow tests, then upstream's tests/nnx (the patched tree's) on ours and
# on vanilla flax on the same versions (the registry's wheel of our release,
# unpacked under $(NEWEST) and first on PYTHONPATH). scripts/compare-failures
# then prints what fails on both and what fails on ours only. The target
# fails where ours does worse than vanilla: a failure of our suite, or a test
# of tests/nnx failing on ours only. JAX_PACKAGES='jax==0.12.1 jaxlib==0.12.1
# optax orbax-checkpoint' runs it on the versions given instead.
NEWEST_VENV ?= .venv-newest
NEWEST := build/newest
NEWEST_PY := $(NEWEST_VENV)/bin/python
JAX_PACKAGES ?= jax jaxlib optax orbax-checkpoint
test-newest:
	scripts/venv $(NEWEST_VENV)
	$(call build-wheel,$(NEWEST_VENV))
	rm -rf $(NEWEST) && mkdir -p $(NEWEST)/vanilla
	grep -v '^jax' requirements/test.txt > $(NEWEST)/test.txt
	$(TIMED) 'installing our wheel, the test tools and the newest $(JAX_PACKAGES)' \
		$(NEWEST_PY) -m pip install --quiet --upgrade -r $(NEWEST)/test.txt \
		-r requirements/upstream-tests.txt build/dist/flax-*.whl $(JAX_PACKAGES)
	$(NEWEST_PY) -m pip install --quiet --no-deps -r requirements/no-deps.txt
	$(NEWEST_PY) -m pip install --quiet --force-reinstall --no-deps build/dist/flax-*.whl
	flax=$$($(NEWEST_PY) -c 'import flax; print(flax.__version__.split("+")[0])'); \
		$(NEWEST_PY) -m pip download --quiet --no-deps --only-binary :all: \
		"flax==$$flax" -d $(NEWEST)/vanilla
	$(NEWEST_PY) -m zipfile -e $(NEWEST)/vanilla/flax-*.whl $(NEWEST)/vanilla/site
	PYTHONPATH=$(NEWEST)/vanilla/site $(NEWEST_PY) -c 'import sys, flax; \
		print("vanilla: flax", flax.__version__); sys.exit("+" in flax.__version__)'
	$(NEWEST_PY) -m pip list | grep -E '^(flax|jax|jaxlib|optax|orbax-checkpoint|numpy) '
	$(NEWEST_PY) -m flaxpq tests-tree --dest $(NEWEST)/upstream-tests --force
	status=0; \
	$(TIMED) 'our suite but the slow tests, on the newest versions' \
		$(NEWEST_PY) -m pytest -n $(WORKERS) -p no:cacheprovider -q -rfEsx \
		--durations=5 -m 'not slow' tests || status=$$?; \
	cd $(NEWEST)/upstream-tests; \
	$(UPSTREAM_ENV) $(CURDIR)/$(TIMED) "upstream's tests/nnx on ours" \
		$(call upstream-pytest,$(NEWEST_VENV)) --junitxml=../ours.xml tests/nnx || true; \
	$(UPSTREAM_ENV) $(CURDIR)/$(TIMED) "upstream's tests/nnx on vanilla" \
		$(call upstream-pytest,$(NEWEST_VENV),$(NEWEST)/vanilla/site) \
		--junitxml=../vanilla.xml tests/nnx || true; \
	cd $(CURDIR); \
	$(NEWEST_PY) -m pip list | grep -E '^(jax|jaxlib|optax|orbax-checkpoint) '; \
	if [ $$status != 0 ]; then echo "our suite FAILED on these versions (exit $$status)"; fi; \
	scripts/compare-failures $(NEWEST)/ours.xml $(NEWEST)/vanilla.xml || status=1; \
	exit $$status

# What make and the tests made: build/ and dist/, hypothesis's database
# (.hypothesis/, from the property tests), pytest's cache and Python's
# __pycache__/ folders (outside venvs and .git), and only the venvs make made
# (scripts/venv's marks): a directory of the same name without them is left,
# saying so.
clean:
	rm -rf build dist .hypothesis .pytest_cache
	find . \( -name '.venv*' -o -name .git \) -prune -o -name __pycache__ -type d -prune \
		-exec rm -rf {} +
	for dir in $(VENV) $(DEMO_VENV) $(DEMO_VANILLA_VENV) $(NEWEST_VENV); do \
		if [ -f "$$dir/.made-by-make" ] || [ -f "$$dir/.ready" ]; then rm -rf "$$dir"; \
		elif [ -e "$$dir" ]; then echo "left $$dir: make did not make it"; fi; \
	done

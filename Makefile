# The two commands of the README: `make demo` and `make test`. Both create .venv and install first.
# Everything is installed (all extras) with the pinned versions of constraints.txt.
PY ?= python3
# Python caches compiled modules (and pytest its rewritten test modules) in __pycache__ (git-ignored): the suite
# starts hundreds of Python processes (workers, servers, CLIs), and some hosts set this to compile every one afresh.
unexport PYTHONDONTWRITEBYTECODE
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
EXTRAS := curate,audit,bench,test
SRC := veil tests bench

.PHONY: demo test test-fast install lint typecheck layers gates bench constraints clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch first: the CPU build that lies on this machine's disk (an unpinned torch pulls a CUDA build)
	$(BIN)/python -m pip install --quiet -c constraints.txt "torch==2.13.0"
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[$(EXTRAS)]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/veil demo --dir demo
	bash scripts/demo_server.sh demo

# The gates (also in .pre-commit-config.yaml) and the whole suite. `.ci/run` calls this. The gates (mypy: ~25 s of one
# core on a fresh clone) run beside the first pass, whose tests never read a clock and leave a core idle part of the
# time (servers and subprocesses starting, sleeps); their output is printed when that pass ends, and a failing gate
# fails `make test` before the timing pass starts (`make gates` alone runs just them).
# Two passes: every test that does not read a clock on $(WORKERS) pytest-xdist workers (one module per worker at a
# time; all Spark tests on one worker, so one JVM starts), then the tests that do (marked `timing` at collection,
# tests/conftest.py) alone, so no worker beside them can make a timing assertion fail. `TIMING_WORKERS=2` runs them
# on two workers of their own instead, one timing file beside another (never beside the first pass): they mostly
# wait (timeouts, backoffs, sleeps: ~50 CPU-s in ~135 s alone), so that would take ~60 s off the run, but it is not
# the default: on the shared 2-core host, niced, all 87 passed on 2 workers twice (loads 14-18 and 18-21) and 4 failed
# once (load ~19, another 2-worker pytest of ours beside it: the catalog-starvation bounds of 0.6 s, a login
# backoff's); alone they passed at 14-16. Try it on a quiet 2-core machine before making it the default. The first pass writes the files that hold timing tests
# (VEIL_TIMING_FILES), and the second collects only those (without the list: all).
# Both passes write their temporary folders (tmp_path: warehouses, ledgers, servers' files) under one fresh folder on
# tmpfs (/dev/shm) when that has $(TEST_TMP_MIN_KB) kB free, else under $$TMPDIR or /tmp: the suite writes and fsyncs
# thousands of DuckDB files and SQLite ledgers, which on a disk wait for it. A passing test's tmp_path is removed as
# it ends (tmp_path_retention_policy=failed), so the folder stays a few hundred MB; it is removed after a passing
# run, and kept (its path printed) after a failing one.
WORKERS ?= 2
TIMING_WORKERS ?= 0
TEST_TMP_MIN_KB ?= 4000000
PYTEST := $(BIN)/python -m pytest -o tmp_path_retention_policy=failed
# The gates' sub-make is named through a variable of its own: a recipe line that names $(MAKE) itself runs even under
# `make -n`, and this one would have run the whole suite.
GATES_MAKE = $(MAKE) --no-print-directory
test: $(STAMP)
	root=$$(df -Pk /dev/shm 2>/dev/null | awk -v min=$(TEST_TMP_MIN_KB) 'NR == 2 && $$4 >= min {print "/dev/shm"}'); \
	tmp=$$(mktemp -d "$${root:-$${TMPDIR:-/tmp}}/veil-test.XXXXXX") || exit 1; \
	echo "temporary folders under $$tmp; the gates run beside the first pass"; \
	$(GATES_MAKE) gates >"$$tmp/gates.log" 2>&1 & gates=$$!; \
	TMPDIR=$$tmp VEIL_TIMING_FILES=$$tmp/timing-files $(PYTEST) -q -n $(WORKERS) --dist loadgroup -m "not timing"; \
	rc=$$?; wait $$gates; gates_rc=$$?; echo "--- the gates (exit $$gates_rc):"; cat "$$tmp/gates.log"; \
	if [ $$rc -eq 0 ] && [ $$gates_rc -ne 0 ]; then rc=$$gates_rc; fi; \
	if [ $$rc -eq 0 ]; then TMPDIR=$$tmp $(PYTEST) -q -n $(TIMING_WORKERS) --dist loadgroup -m timing $$(cat "$$tmp/timing-files"); rc=$$?; fi; \
	if [ $$rc -eq 0 ]; then rm -rf "$$tmp"; else echo "kept the temporary folders of the failed run: $$tmp"; fi; \
	exit $$rc

# The inner loop: the gates' fast half and the tests not marked slow.
test-fast: lint
	$(BIN)/python -m pytest -q -m "not slow"

gates: lint typecheck layers

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

layers: $(STAMP)
	$(BIN)/lint-imports

bench: $(STAMP)
	for b in bench/*.py; do case $$b in */_*) ;; *) $(BIN)/python -m bench.$$(basename $$b .py) || exit 1;; esac; done

# Re-pin constraints.txt from the working .venv (after changing a range in pyproject.toml).
constraints: $(STAMP)
	{ sed -n 1,2p constraints.txt; $(BIN)/pip freeze --exclude-editable | grep -v '^-e\|^#\|^veil' | sed 's/^torch==\(.*\)+cpu$$/torch==\1/'; } > constraints.txt.new
	mv constraints.txt.new constraints.txt

clean:
	rm -rf $(VENV) demo .pytest_cache .mypy_cache

# SDV in its own venv (never in the main install): make bench-sdv-venv, make bench-sdv
include bench/sdv.mk

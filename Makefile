# The two commands of the README: `make demo` and `make test`. Both create .venv and install first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test install lint bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch first: the CPU build that lies on this machine's disk (an unpinned torch pulls a CUDA build)
	$(BIN)/python -m pip install --quiet "torch==2.13.0"
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/veil demo --dir demo
	bash scripts/demo_server.sh demo

test: $(STAMP)
	@command -v psql >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq postgresql-client >/dev/null) || echo "psql not available: psql tests will be skipped"
	$(BIN)/ruff check veil tests bench
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check veil tests bench
	$(BIN)/ruff format --check veil tests bench

bench: $(STAMP)
	for b in bench/*.py; do case $$b in */_*) ;; *) $(BIN)/python -m bench.$$(basename $$b .py) || exit 1;; esac; done

clean:
	rm -rf $(VENV) demo .pytest_cache

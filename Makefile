# Two commands do all set-up on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PERFSTAMP := $(VENV)/.installed-perf

.PHONY: run test lint perf perf-quick fuzz soak clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

$(PERFSTAMP): $(STAMP)
	$(BIN)/pip install -q -e '.[test,perf]'
	touch $(PERFSTAMP)

run: $(STAMP)
	$(BIN)/extender serve $(ARGS)

test: $(STAMP)
	$(BIN)/ruff check extender tests perf
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check extender tests perf

perf: $(PERFSTAMP)
	$(BIN)/python -m perf run --full

perf-quick: $(PERFSTAMP)
	$(BIN)/python -m perf run --quick

# Nightly-style hostile-input run (a 5,000-body slice runs in `make test`).
FUZZ_BODIES ?= 100000
fuzz: $(STAMP)
	$(BIN)/python tests/hardening/fuzzer.py --bodies $(FUZZ_BODIES) $(FUZZ_ARGS)

# Long run at a steady rate with state churn; not part of `make test`.
SOAK_MINUTES ?= 30
soak: $(PERFSTAMP)
	$(BIN)/python -m perf.soak --minutes $(SOAK_MINUTES) $(SOAK_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info perf/out

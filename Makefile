# Two commands: `make book` and `make test`. Everything installs into .venv from pyproject.toml.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
TARGET  ?= auto
RUN     ?=
PYTEST_ARGS ?=

.PHONY: help install book render test test-fast test-integration bench strip clean

help:
	@echo "make book                 execute target \$$TARGET (default auto) and build _build/html/index.html"
	@echo "make book TARGET=recorded render the recorded investigation only"
	@echo "make book RUN=runs/<id>   re-render an existing run without measuring"
	@echo "make test                 the whole test suite (no GPU needed)"
	@echo "make test-fast            the unit tests only (seconds), with their time"
	@echo "make test-integration     the tests that start real processes (servers, workers)"
	@echo "make bench                time executing and building the book for each target"
	@echo "make strip                clear outputs from the source notebooks"

$(BIN)/python:
	$(PY) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e .
	touch $@

install: $(VENV)/.installed

book: install
ifneq ($(strip $(RUN)),)
	$(BIN)/python -m helpers.book.runbook --render $(RUN)
else
	$(BIN)/python -m helpers.book.runbook --target $(TARGET)
endif
	@echo "open _build/html/index.html"

render: install
	$(BIN)/python -m helpers.book.runbook --render $(or $(RUN),runs/latest)

test: install
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# The tiers: unit tests (test-fast, seconds), integration tests with real processes, then notebook
# execution and the book build (slow). `make test` runs them all.
test-fast: install
	@start=$$(date +%s); $(BIN)/python -m pytest -q -m "not slow and not integration" $(PYTEST_ARGS); rc=$$?; \
	  echo "test-fast: $$(( $$(date +%s) - start )) s"; exit $$rc

test-integration: install
	$(BIN)/python -m pytest -m "integration and not slow" $(PYTEST_ARGS)

bench: install
	$(BIN)/python benchmarks/bench_book.py

strip: install
	$(BIN)/python -m helpers.book.nbtools strip notebooks/*.ipynb

clean:
	rm -rf _build

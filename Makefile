# Two commands: `make book` and `make test`. Everything installs into .venv from pyproject.toml.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
TARGET  ?= auto
RUN     ?=
# The committed run the published site shows (make site, .github/workflows/pages.yml): the best run
# committed today, the two-H200 run. Change it here to publish another one.
SITE_RUN ?= runs/h200x2-20261129f
# What rendering a run needs (no torch, no transformers): kept in step with pyproject.toml by a test.
SITE_DEPS := "jupyter-book<2" "django-static-mathjax==3.2.2.1" "pyyaml>=6" "pandas>=2.0"
PYTEST_ARGS ?=

.PHONY: help install book render site site-install browser check-site test test-fast test-integration bench strip clean

help:
	@echo "make book                 execute target \$$TARGET (default auto) and build _build/html/index.html"
	@echo "make book TARGET=recorded render the recorded investigation only"
	@echo "make book RUN=runs/<id>   re-render an existing run without measuring"
	@echo "make site                 render the published site from \$$SITE_RUN ($(SITE_RUN)) into _build/html"
	@echo "make browser              install headless Chromium (Debian's package) for the browser test"
	@echo "make check-site           open every page of _build/html in Chromium, offline; screenshots in _build/screenshots"
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

# The site: a self-contained folder (MathJax, fonts and icons inside) that works from disk or any web
# server, rendered from a committed run with execution off. Needs only the book toolchain.
$(VENV)/.site-installed: pyproject.toml Makefile | $(BIN)/python
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e . --no-deps
	$(BIN)/python -m pip install --quiet --disable-pip-version-check $(SITE_DEPS)
	touch $@

site-install: $(VENV)/.site-installed

site: site-install
	$(BIN)/python -m helpers.book.runbook --render $(SITE_RUN)
	touch _build/html/.nojekyll
	@echo "the site (from $(SITE_RUN)): _build/html; open _build/html/index.html or serve that folder"

browser:
	bash scripts/install-browser.sh

check-site: site-install
	$(BIN)/python -m helpers.book.browser _build/html

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

# Two commands: `make book` and `make test`. Everything installs into .venv from pyproject.toml
# (scripts/book-env.sh chooses the environment: over PY's own CUDA torch where PY has one and an
# NVIDIA driver answers, else a fresh venv, with torch pinned to the CPU build where no driver answers).
PY       ?= python3
VENV     ?= .venv
BIN      := $(VENV)/bin
TARGET   ?= auto
RUN      ?=
RUN_ID   ?=
PARAMS   ?=
ENV_KIND ?= auto
WHEELS   ?=
# The committed run the published site shows (make site, .github/workflows/pages.yml): the h200 target on
# the lent H200, made from a clean commit whose chapters are today's (helpers.book.publish checks it; a test
# holds it). Change it here to publish another one.
SITE_RUN ?= runs/h100-20261206d
PYTEST_ARGS ?=
export PY VENV ENV_KIND WHEELS
# Bytecode is written (beside each module, in __pycache__/, which git ignores). A machine that sets
# PYTHONDONTWRITEBYTECODE=1 (this workplace's do) otherwise has every Python process compile the package again and
# pytest rewrite every test's asserts again: collecting the unit tier took 11 s of CPU without a cache and 4 s with
# one (2-core machine). No PYTHONPYCACHEPREFIX: under one, Python ignores the bytecode pip compiled at install and
# compiles pandas, matplotlib and torch again into it, which cost a fresh clone's first `make book` about 10 s
# (66.7 s cold against 56.7 s warm, bench_book.py --chapters, 2-core machine).
unexport PYTHONDONTWRITEBYTECODE
unexport PYTHONPYCACHEPREFIX

RUNBOOK_ARGS = $(if $(strip $(RUN_ID)),--run-id $(RUN_ID)) $(foreach p,$(PARAMS),-p $(p))
ENV_INPUTS   = pyproject.toml constraints/cpu.txt scripts/book-env.sh

.PHONY: help install install-run install-site book run render site browser check-site test test-fast test-integration test-gpu bench strip clean clean-env

help:
	@echo "make book                 execute target \$$TARGET (default auto) and build _build/html/index.html"
	@echo "make book TARGET=recorded render the recorded investigation only"
	@echo "make book RUN=runs/<id>   re-render an existing run without measuring"
	@echo "make run TARGET=h200 WHEELS=.whl   execute only (no book toolchain), from a wheel folder, no registry"
	@echo "make render RUN=runs/<id> build the site from a run (the book toolchain only)"
	@echo "make site                 render the published site from \$$SITE_RUN ($(SITE_RUN)) into _build/html"
	@echo "make browser              install headless Chromium (Debian's package) for the browser test"
	@echo "make check-site           open every page of _build/html in Chromium, offline: errors, screens per page; screenshots in _build/screenshots"
	@echo "make test                 the whole test suite (no GPU needed)"
	@echo "make test-fast            the unit tier only (no process, no model; under a minute), with its time"
	@echo "make test-integration     the tests that start real processes or run the decode-step model"
	@echo "make test-gpu RUN=runs/<id>  the GPU tier (pytest -m gpu) at this commit, recorded in that run (a GPU host)"
	@echo "make bench                time executing and building the book for each target"
	@echo "make strip                clear outputs from the source notebooks"
	@echo "variables: PY=python (whose torch to use), ENV_KIND=auto|host|isolated, WHEELS=dir/,"
	@echo "           RUN_ID=name, PARAMS='[CHAPTER.]NAME=VALUE ...' (target overrides)"

# One stamp per set of extras: executing (run), building the site (site), everything (book and tests).
$(VENV)/.installed: $(ENV_INPUTS)
	bash scripts/book-env.sh run,site,test
	touch $@

$(VENV)/.installed-run: $(ENV_INPUTS)
	bash scripts/book-env.sh run
	touch $@

$(VENV)/.installed-site: $(ENV_INPUTS)
	bash scripts/book-env.sh site
	touch $@

install: $(VENV)/.installed
install-run: $(if $(wildcard $(VENV)/.installed),$(VENV)/.installed,$(VENV)/.installed-run)
install-site: $(if $(wildcard $(VENV)/.installed),$(VENV)/.installed,$(VENV)/.installed-site)

book: install
ifneq ($(strip $(RUN)),)
	$(BIN)/python -m helpers.book.runbook --render $(RUN)
else
	$(BIN)/python -m helpers.book.runbook --target $(TARGET) $(RUNBOOK_ARGS)
endif
	@echo "open _build/html/index.html"

# Execute here, render anywhere: `make run` needs no book toolchain (and with WHEELS=dir/ no registry);
# copy runs/<id>/ to any checkout and `make render RUN=runs/<id>` (or `make book RUN=...`) there.
# On a GPU host (nvidia-smi answers) the GPU test tier runs after the chapters and is recorded in the run
# (`make test-gpu`; GPU_TIER=0 leaves it out, to run it later): publish refuses a run without it.
GPU_TIER ?= 1
run: install-run
	$(BIN)/python -m helpers.book.runbook --target $(TARGET) --no-build $(RUNBOOK_ARGS)
	@if [ "$(GPU_TIER)" != 0 ] && nvidia-smi -L >/dev/null 2>&1; then \
	  $(MAKE) --no-print-directory test-gpu RUN=$(if $(strip $(RUN_ID)),runs/$(RUN_ID),runs/latest); fi

render: install-site
	$(BIN)/python -m helpers.book.runbook --render $(or $(RUN),runs/latest)

# The published site: a self-contained folder (MathJax, fonts and icons inside) that works from disk
# or any web server, rendered from a committed run with execution off (the book toolchain only).
site: install-site
	@$(BIN)/python -m helpers.book.publish $(SITE_RUN) || echo "warning: $(SITE_RUN) is not publishable as it stands (above); tests/test_site_run.py fails on it"
	$(BIN)/python -m helpers.book.runbook --render $(SITE_RUN)
	touch _build/html/.nojekyll
	@$(BIN)/python -m helpers.book.browser _build/html --measure-only
	@echo "the site (from $(SITE_RUN)): _build/html; open _build/html/index.html or serve that folder"

# Headless Chromium for the browser test (Debian's package; CI runs this before make test).
browser:
	bash scripts/install-browser.sh

check-site: install-site
	$(BIN)/python -m helpers.book.browser _build/html

# The whole suite in TEST_WORKERS processes (pytest-xdist, the `test` extra): many tests wait on processes,
# kernels, servers and sleeps, so 4 workers keep 2 cores busy, each process with one OpenMP thread
# (tests/conftest.py; before that, 4 workers put two wall-clock-limited tests over their limits under load).
# On the 2-core machine, a fresh clone after `make book` (`.ci/run`, quiet): 4 workers 538 s wall (870 s of CPU, at
# a038835); 6 workers took 625 s (1,108 s of CPU: contention), 3 workers 678-712 s before; the floor is the CPU.
# --dist loadgroup (tests/scheduler.py, through xdist's scheduler hook) runs a module with a module fixture whole in one worker and
# hands out the costliest tests first; the costly session results (the book executed per target, each committed
# run built) are made once for all workers (tests/onceper.py). TEST_WORKERS=0 runs it in this one process.
TEST_WORKERS ?= 4
test: install
	$(BIN)/python -m pytest $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadgroup) $(PYTEST_ARGS)

# The tiers by cost (CONTRIBUTING.md, "Tests"): the unit tier (test-fast: deterministic, no process, no
# model built or run, no sleep; tests/conftest.py fails a unit test that does any of these; under a minute),
# integration (real processes, the decode-step model, servers, workers), slow (notebook execution, the book
# build, the browser) and gpu (a GPU host only). `make test` runs them all in one session.
UNIT_TIER = not integration and not slow and not gpu
FAST_WORKERS ?= 2
test-fast: install
	@start=$$(date +%s); $(BIN)/python -m pytest -q $(if $(filter 0,$(FAST_WORKERS)),,-n $(FAST_WORKERS) --dist loadgroup) \
	  -m "$(UNIT_TIER)" $(PYTEST_ARGS); rc=$$?; \
	  echo "test-fast: $$(( $$(date +%s) - start )) s wall (the unit tier's budget: 60 s)"; exit $$rc

test-integration: install
	$(BIN)/python -m pytest -m "integration and not slow" $(PYTEST_ARGS)

# The GPU tier of a run (helpers.book.gputier): pytest -m gpu here, at this commit, recorded in the run's
# manifest and status page. Needs pytest (the `test` extra, or a GPU host image that has it).
test-gpu: install-run
	@$(BIN)/python -c "import pytest" 2>/dev/null || { echo "test-gpu needs pytest: $(BIN)/python -m pip install -e '.[test]' (or WHEELS=dir with pytest in it)"; exit 2; }
	$(BIN)/python -m helpers.book.gputier $(or $(RUN),runs/latest)

bench: install
	$(BIN)/python benchmarks/bench_book.py

strip: install
	$(BIN)/python -m helpers.book.nbtools strip notebooks/*.ipynb

clean:
	rm -rf _build

clean-env:
	rm -rf $(VENV)

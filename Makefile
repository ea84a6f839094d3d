# cfkit: the two commands (reproduce, test) plus lab, app and docs. Each creates .venv on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU machines this kit is built on carry these torch wheels on disk; a newer torch from PyPI
# would mean several GB of CUDA downloads. Override with `make TORCH= test` elsewhere.
TORCH ?= torch==2.14.1 torchvision==0.29.1
# Notebooks `make reproduce` runs at once (each on cores/JOBS torch threads); JOBS=1 runs them one by one.
JOBS ?= 2
# PROFILE=reference: every method at its paper's / public code's setting, into runs/reference and results/reference
PROFILE ?= default
# RESUME=1: reuse each pair's set saved by the same method, settings, code and weights (go on where a run stopped)
RESUME ?=
# pytest-xdist workers of `make test` (each on cores/TEST_JOBS torch threads, see tests/conftest.py); 0 runs in one process.
TEST_JOBS ?= logical
# `make app CLASSIFIER=model.pt` (or package.module:factory with CLASSIFIER_STATE=weights.pt) explains another
# classifier, PAIR_DIR=folder gives per-pair models trained for it; PORT picks the port (default: a free one).
CLASSIFIER ?=
CLASSIFIER_STATE ?=
PAIR_DIR ?=
PORT ?=
APP_FLAGS = $(if $(PORT),--port $(PORT)) $(if $(CLASSIFIER),--classifier $(CLASSIFIER)) \
	$(if $(CLASSIFIER_STATE),--classifier-state $(CLASSIFIER_STATE)) $(if $(PAIR_DIR),--pair-dir $(PAIR_DIR))
# Jupyter refuses to run as root without --allow-root (containers, CI).
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root)

.PHONY: reproduce test lab app docs data clean-venv

$(BIN)/activate:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: $(BIN)/activate pyproject.toml
	$(if $(TORCH),$(BIN)/python -m pip install --quiet $(TORCH))
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed
	$(BIN)/python -m pip install --quiet -e ".[dev,docs]"
	touch $@

$(VENV)/.installed-docs: $(VENV)/.installed
	$(BIN)/python -m pip install --quiet -e ".[docs]"
	touch $@

## reproduce: set up, get MNIST, verify the shipped zoo, run every notebook headless, write results/
reproduce: $(VENV)/.installed
	$(BIN)/cfkit reproduce --jobs $(JOBS) --profile $(PROFILE)$(if $(RESUME), --resume)

## test: set up with the dev extras, get MNIST once, run the test suite on TEST_JOBS pytest-xdist workers
test: $(VENV)/.installed-dev
	$(BIN)/cfkit data
	$(BIN)/python -m pytest -n $(TEST_JOBS) --dist worksteal

## docs: render the notebooks as executed by the last `make reproduce` (results/notebooks/) into a static site
docs: $(VENV)/.installed-docs
	$(BIN)/cfkit docs

## lab: open JupyterLab on the notebook series
lab: $(VENV)/.installed
	$(BIN)/jupyter lab $(ROOT_FLAG) notebooks/

## app: serve the live explorer (Voilà, no code) on 127.0.0.1 and print its address; Ctrl-C stops it
app: $(VENV)/.installed
	$(BIN)/cfkit app $(APP_FLAGS)

data: $(VENV)/.installed
	$(BIN)/cfkit data

clean-venv:
	rm -rf $(VENV)

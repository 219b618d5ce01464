# Flux developer entry points. `make up` and `make test` are the README quick start.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.flux-installed
PYTEST_ARGS ?=
# Three test workers per two cores. The tests wait on real processes about half the time, so
# more workers than cores run the suite faster on the same CPU (2 cores, fresh clone: 17.5 min
# of tests at 3 workers against 22-25 at 2; 16 at 4, where two of four runs had a test time
# out under the extra load before its waits were made robust). `make test TEST_WORKERS=2`
# runs one per core.
TEST_WORKERS ?= $(shell echo $$(( $$(nproc) * 3 / 2 > 1 ? $$(nproc) * 3 / 2 : 1 )))

.PHONY: up down status test lint bench clean install system-deps

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,spark]'
	touch $(STAMP)

install: $(STAMP)

## Start a local cluster in the background and print its bootstrap servers.
up: $(STAMP)
	$(BIN)/fluxctl cluster up

## Stop the local cluster started by `make up`.
down: $(STAMP)
	$(BIN)/fluxctl cluster down

status: $(STAMP)
	$(BIN)/fluxctl cluster status

## The Debian packages the tests need (Chromium, Node, wrk, promtool, ...), installed if missing.
system-deps:
	bash .ci/system-deps

## Run the whole test suite in parallel.
test: system-deps $(STAMP)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check protocol auth storage cluster controller sdk cli chaos spark console registry tests benchmarks examples

bench: $(STAMP)
	$(BIN)/python benchmarks/produce_consume.py

clean:
	rm -rf $(VENV) .flux build *.egg-info

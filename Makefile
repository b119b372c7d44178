# mcp-quota developer commands. `make run` and `make test` do all the set-up themselves.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 8000
STAGE ?= prod
UV := uv==0.13.9

.PHONY: run test lint typecheck unit install clean

# Feature targets (demo, bench, package, docs) live in mk/*.mk, one file per feature.
-include mk/*.mk

$(BIN)/.installed: requirements.txt requirements-dev.txt client/requirements-test.txt \
		pyproject.toml client/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	# uv installs the pinned set in about 6 s from a cold cache (pip: about 60 s); pip
	# stays in the venv, since chalice 1.34 packages with it (and needs pip < 26.3)
	$(BIN)/pip install --quiet --disable-pip-version-check $(UV)
	$(BIN)/uv pip install --quiet --python $(BIN)/python --upgrade "pip<26.3" \
		-r requirements-dev.txt -r client/requirements-test.txt
	$(BIN)/uv pip install --quiet --python $(BIN)/python --no-deps -e . -e ./client
	touch $@

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

install: $(BIN)/.installed node_modules/.installed chromium

## Start the service on http://127.0.0.1:$(PORT) over an embedded DynamoDB (moto).
run: $(BIN)/.installed
	PORT=$(PORT) $(BIN)/python scripts/serve_local.py

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(BIN)/.installed
	$(BIN)/mypy app.py chalicelib admin_cli scripts tests bench deploy examples client/src \
		docs/hooks

## The unit tests and the storage suites on the in-memory backend: no server, seconds.
unit: $(BIN)/.installed
	$(BIN)/pytest -q tests/unit tests/integration -m "not moto and not dynalite and not e2e and not browser"

## Install everything, lint, type-check, build the docs and run the whole test suite.
test: install lint typecheck docs
	# two workers: the suite waits on real servers (moto, dynalite, chalice local) a lot.
	# Bytecode is written even where the environment says not to (PYTHONDONTWRITEBYTECODE):
	# otherwise every server, CLI and proxy a test starts compiles the package again.
	PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -q -n 2

clean:
	rm -rf $(VENV) node_modules .mypy_cache .ruff_cache .pytest_cache site

# Set-up, checks and tests in one place. The README's two commands are `make up` and `make test`;
# `make help` lists every target. Everything installs into the work tree (.venv, .tools) except
# the Debian packages of scripts/setup_system.sh.

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help
# Targets run one at a time, in the order given (test = setup, then lint, then pytest).
.NOTPARALLEL:
.DELETE_ON_ERROR:
MAKEFLAGS += --no-builtin-rules

PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
TOOLS := .tools
BUF := $(TOOLS)/node_modules/.bin/buf
# Stamps live inside the folders they describe, so deleting a folder forces its reinstall.
PY_STAMP := $(VENV)/.installed
# What the local stack alone needs (`make up`): the project without its [dev] extras.
PY_STACK_STAMP := $(VENV)/.installed-stack
BUF_STAMP := $(TOOLS)/node_modules/.installed
# The Node.js example assignor (examples/assignors/node): its tests start it for real.
NODE_EXAMPLE := examples/assignors/node
NODE_EXAMPLE_STAMP := $(NODE_EXAMPLE)/node_modules/.installed
# checkov pins its dependencies tightly: its own venv, so that it never fights the project's pins.
CHECKOV_VENV := $(TOOLS)/checkov-venv
CHECKOV_STAMP := $(CHECKOV_VENV)/.installed
CHECKOV_VERSION := 3.3.30

# Extra arguments for `make up`, e.g. ARGS='--listen 0.0.0.0:8470', and for pytest (`make test`,
# `make pytest`), e.g. PYTEST_ARGS='-k heartbeat -x'.
ARGS ?=
PYTEST_ARGS ?=

export PIP_DISABLE_PIP_VERSION_CHECK := 1
export PIP_NO_INPUT := 1

# `$(STEP); step NAME COMMAND...` runs COMMAND under a "==> NAME" banner and ends with
# "<== NAME: ok|FAILED (exit N) in T s"; it returns COMMAND's status. .ci/run sums up the "<==" lines.
STEP = step() { \
  local name=$$1 t0=$$EPOCHREALTIME rc=0 dt; shift; \
  echo "==> $$name"; \
  "$$@" || rc=$$?; \
  dt=$$(awk -v a="$$t0" -v b="$$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'); \
  if [ $$rc -eq 0 ]; then echo "<== $$name: ok in $${dt}s"; \
  else echo "<== $$name: FAILED (exit $$rc) in $${dt}s"; fi; \
  return $$rc; \
}

.PHONY: help setup setup-stack system system-stack up test lint pytest proto diagrams bench clean distclean images compose-up compose-down

help: ## list the targets
	@awk 'BEGIN { FS = ":.*## " } /^[a-z-]+:.*## / { printf "  make %-13s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

setup: system $(PY_STAMP) $(BUF_STAMP) $(NODE_EXAMPLE_STAMP) $(CHECKOV_STAMP) ## install everything the other targets need (quick when done)

setup-stack: system-stack $(PY_STACK_STAMP) ## install only what the local stack (make up) needs: Python 3.11, .venv, the project's packages

system: ## Debian packages the tests need (PostgreSQL, Node.js, Prometheus, podman, Chromium, ...); apt-get only when missing
	@$(STEP); step "system packages" scripts/setup_system.sh test

system-stack: ## Debian packages the local stack needs (Python 3.11 and its venv); apt-get only when missing
	@$(STEP); step "system packages (stack)" scripts/setup_system.sh stack

$(BIN)/python: | system-stack
	@$(STEP); step "create $(VENV) with $(PYTHON)" $(PYTHON) -m venv $(VENV)

# Already there when the full set-up ran ($(PY_STAMP) installs the same packages and more).
$(PY_STACK_STAMP): pyproject.toml | $(BIN)/python
	@if [ $(PY_STAMP) -nt pyproject.toml ]; then touch $@; else \
	  $(STEP); step "pip install -e ." $(BIN)/python -m pip install --quiet -e . && touch $@; fi

$(PY_STAMP): pyproject.toml | $(BIN)/python
	@$(STEP); step "pip install -e '.[dev,metrics]'" $(BIN)/python -m pip install --quiet -e '.[dev,metrics]'
	@touch $@

$(BUF_STAMP): $(TOOLS)/package.json $(TOOLS)/package-lock.json | system
	@$(STEP); step "npm install (buf) into $(TOOLS)" \
	  npm install --prefix $(TOOLS) --no-save --no-audit --no-fund --loglevel=error
	@touch $@

$(NODE_EXAMPLE_STAMP): $(NODE_EXAMPLE)/package.json $(NODE_EXAMPLE)/package-lock.json | system
	@$(STEP); step "npm ci (example assignor) in $(NODE_EXAMPLE)" \
	  npm ci --prefix $(NODE_EXAMPLE) --no-audit --no-fund --loglevel=error
	@touch $@

$(CHECKOV_STAMP): | system
	@$(STEP); step "checkov $(CHECKOV_VERSION) into $(CHECKOV_VENV)" \
	  bash -c '$(PYTHON) -m venv $(CHECKOV_VENV) && $(CHECKOV_VENV)/bin/python -m pip install --quiet checkov==$(CHECKOV_VERSION)'
	@touch $@

images: setup ## build the four images (docker or podman; local stand-in bases where no registry is reachable)
	@$(STEP); step "images" $(BIN)/python scripts/containers.py images

compose-up: setup ## build the images, then start docker/compose.yaml (coordinator 127.0.0.1:8470, Prometheus :9090)
	@$(STEP); step "compose up" $(BIN)/python scripts/containers.py compose-up

compose-down: ## stop the compose stack and remove its containers and network
	@$(STEP); step "compose down" $(BIN)/python scripts/containers.py compose-down

up: setup-stack ## set up the local stack only, then run the system locally in the foreground (scripts/up.sh)
	@scripts/up.sh $(ARGS)

test: setup lint pytest ## set up everything, then every check and every test

lint: setup ## ruff, ruff format, mypy, no private imports across packages, generated stubs current, buf lint, buf format, docs check (links and anchors, CLI commands, config keys)
	@$(STEP); fail=0; \
	step "ruff check" $(BIN)/ruff check . || fail=1; \
	step "ruff format --check" $(BIN)/ruff format --check . || fail=1; \
	step "mypy" $(BIN)/mypy || fail=1; \
	step "no private imports across packages" $(BIN)/python scripts/check_imports.py || fail=1; \
	step "proto stubs current" $(BIN)/python scripts/gen_proto.py --check || fail=1; \
	step "buf lint" $(BUF) lint || fail=1; \
	step "buf format" $(BUF) format --diff --exit-code || fail=1; \
	step "docs check" $(BIN)/python scripts/check_docs.py || fail=1; \
	exit $$fail

pytest: setup ## the test suite (PYTEST_ARGS='...' to narrow it)
	@$(STEP); step "pytest" $(BIN)/pytest $(PYTEST_ARGS)

proto: setup ## regenerate the Python stubs from proto/ (then commit them)
	@$(STEP); step "gen_proto" $(BIN)/python scripts/gen_proto.py

diagrams: ## render docs/diagrams/*.dot to SVG (needs graphviz)
	@command -v dot >/dev/null || { echo "make diagrams: graphviz's dot is not installed (make system installs it)" >&2; exit 1; }
	@$(STEP); fail=0; \
	for src in docs/diagrams/*.dot; do \
	  step "dot -Tsvg $$src" dot -Tsvg "$$src" -o "$${src%.dot}.svg" || fail=1; \
	done; \
	exit $$fail

bench: setup ## run every bench/*.py script (not _*.py helpers); fails if any fails
	@$(STEP); shopt -s nullglob; fail=0; ran=0; \
	for script in bench/*.py; do \
	  case $${script##*/} in _*) continue ;; esac; \
	  ran=1; step "$$script" $(BIN)/python "$$script" || fail=1; \
	done; \
	[ $$ran -eq 1 ] || echo "bench: no bench/*.py scripts yet"; \
	exit $$fail

clean: ## remove caches and build leftovers (keeps .venv, .tools and data/)
	rm -rf .pytest_cache .mypy_cache .ruff_cache .hypothesis .benchmarks build dist *.egg-info bench/out
	find . -path ./.venv -prune -o -path ./$(TOOLS)/node_modules -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean ## also remove .venv, the node_modules folders and the checkov venv (the next `make setup` reinstalls them)
	rm -rf $(VENV) $(TOOLS)/node_modules $(NODE_EXAMPLE)/node_modules $(CHECKOV_VENV)

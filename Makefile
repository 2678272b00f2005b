# The two commands a new machine needs (see README):
#   make run   installs everything and starts the local scheduler with demo jobs
#   make test  installs everything and runs lint, types and the whole test suite
# And while working: make test-fast  lint, types and the tests that need no process, emulator or browser
PY ?= python3
VENV := .venv
MS_VENV := .venv-ministack
MINISTACK_VERSION := 1.5.33
CDK_CLI := aws-cdk@2.1148.1
TS_TOOLS := .tools/ts

.PHONY: install test test-suite test-fast lint run synth deploy e2e-aws bench-install bench-peers clean

$(VENV)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet -e '.[dev,infra,cli]'
	touch $@

# MiniStack pins an older botocore, so it lives in a virtual environment of its own.
$(MS_VENV)/.installed:
	$(PY) -m venv $(MS_VENV)
	$(MS_VENV)/bin/pip install --quiet 'ministack==$(MINISTACK_VERSION)'
	touch $@

# A TypeScript client generated from docs/openapi.json, as a user would (openapi-typescript for the types,
# openapi-fetch for the calls, tsc to check them): tests/local/test_generated_client.py. From npm, pinned.
$(TS_TOOLS)/.installed:
	npm install --prefix $(TS_TOOLS) --no-audit --no-fund --loglevel=error \
		openapi-typescript@7.13.0 openapi-fetch@0.17.0 typescript@5.9.3 @types/node@20.19.43
	touch $@

# Headless Chromium and its driver for the console's browser tests, from Debian's packages (as root, or
# through sudo). Skipped when both are already there.
BROWSER := /usr/bin/chromium /usr/bin/chromedriver
$(BROWSER):
	@if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	$$SUDO apt-get update -qq && \
	DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends chromium chromium-driver

install: $(VENV)/.installed $(MS_VENV)/.installed $(BROWSER) $(TS_TOOLS)/.installed

# Lint and types need only the project's environment.
lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# The suite and the deployed stack's tests side by side: the stack's tests spend most of their 8 minutes
# waiting for fire times (the suite alone took 23.5 of CI's 32 minutes on a 2-core AMD machine, one after
# the other). Their output interleaves as it comes; make fails if either does.
test: install lint
	$(MAKE) -j2 test-suite e2e-aws

test-suite: install
	$(VENV)/bin/pytest --ignore=tests/e2e_aws

# The fast tier: lint, types, then every test that needs no process, emulator, AWS double, network or
# browser, offline (`pytest --fast`: the markers and the rule are in tests/conftest.py). No MiniStack or
# Chromium install; 17-56 s on 2 cores under load, warm to cold (README, "Two commands").
test-fast: lint
	$(VENV)/bin/pytest --fast -q

# The real CDK stack deployed into a fresh MiniStack with the pinned CDK CLI, driven through its API URL.
e2e-aws: install
	$(VENV)/bin/pytest tests/e2e_aws -p no:cacheprovider -s

# The peers' benchmark (benchmarks/bench_peers.py): the `bench` extra (APScheduler, Celery + RedBeat,
# Temporal's dev server and SDK, py-spy, psutil) and Debian's redis-server, which RedBeat and Celery's broker
# use. The benchmark starts and stops every service itself. Debian's valgrind counts the instructions of a
# run (benchmarks/bench_instructions.py).
bench-install: $(VENV)/.installed
	$(VENV)/bin/pip install --quiet -e '.[dev,infra,cli,bench]'
	@{ command -v redis-server && command -v valgrind; } >/dev/null || { \
	if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	$$SUDO apt-get update -qq && \
	DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends redis-server valgrind; }

# Every scheduler, one after another, at 1,000 then 10,000 jobs due in the same second: one table per size
# and docs/burst_start_delay.png (about 25 minutes).
bench-peers: bench-install
	$(VENV)/bin/python benchmarks/bench_peers.py 1000 10000 --chart docs/burst_start_delay.png

# The default engine (SQLite) needs no emulator: only the project's own environment.
run: $(VENV)/.installed
	$(VENV)/bin/tickwork local --demo

# Synthesizes the CloudFormation template offline (no credentials, no Docker: pip bundles the Lambda code).
synth: install
	JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION=20 PATH="$(CURDIR)/$(VENV)/bin:$$PATH" npx --yes $(CDK_CLI) synth --quiet

# Checks the account's Lambda quota and the prefix first (infra/preflight.py), then deploys.
#   make deploy CDK_ARGS="-c production=true -c concurrency_cap=10000 -c prefix=tickwork"
deploy: install
	$(VENV)/bin/python -m infra.preflight $(CDK_ARGS)
	JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION=20 PATH="$(CURDIR)/$(VENV)/bin:$$PATH" npx --yes $(CDK_CLI) deploy $(CDK_ARGS)

clean:
	rm -rf $(VENV) $(MS_VENV) .tools .pytest_cache .mypy_cache .ruff_cache cdk.out

# sandlog's two entry points. Both install what they need (the pinned guest
# runtimes, verified by sha256; for the tests, what they need from the OS)
# before building or running.
#
#   make demo   build and run the quick-start walk-through on ./sandlog-data
#   make test   the full test suite (what CI runs), the Python package's too;
#               first installs what the tests need from the OS when absent
#               (scripts/install-test-deps.sh)
#   make python-test   build the Python package's wheel once, install it into
#                      a fresh virtual environment, run its tests there
#   make wheel   the abi3 wheel, release build, in dist/ (WHEEL_PROFILE=dev:
#                the dev profile's build)
#   make mcp-test   drive `sandlog mcp` with the official MCP Python client,
#                   and check `serve`'s /metrics and `log --format ocsf`
#   make compat-test   the seed system's own session tests against sandlog.compat

RUNTIMES_DIR ?= $(CURDIR)/.runtimes
export SANDLOG_RUNTIMES_DIR := $(RUNTIMES_DIR)
# Tests share one precompiled-module cache so python.wasm is compiled once.
export SANDLOG_TEST_CACHE_DIR ?= $(CURDIR)/target/sandlog-test-cache

# The Python package is built by maturin as a wheel, with cargo's target
# directory shared with the workspace (dev profile), so CI compiles the
# engine once for both. The tools (maturin, the MCP client, ...) live in
# target/venv, where the wheel is installed too (compat-test imports it
# there); the package's own tests run in a fresh environment holding only
# the wheel and the test tools, as a user's would.
VENV := $(CURDIR)/target/venv
MATURIN_VERSION := 1.16.0
PYTEST_VERSION := 9.2.0
# sandlog.aio's tests (python/tests/test_aio.py).
PYTEST_ASYNCIO_VERSION := 1.5.0
DIST := $(CURDIR)/dist
WHEEL_PROFILE ?= release
TEST_WHEELS := $(CURDIR)/target/wheels
WHEEL_VENV := $(CURDIR)/target/wheel-venv
# The official MCP client, for `make mcp-test`.
MCP_VERSION := 2.3.0
# What `make mcp-test`'s operations tests check with (server/tests/python/
# test_ops.py): Prometheus's own parser for /metrics; the official OTLP
# messages for a trace receiver; the published OCSF schema (shipped by
# ocsf-json-schema) as JSON Schema, checked by jsonschema.
PROMETHEUS_CLIENT_VERSION := 0.26.0
OCSF_JSON_SCHEMA_VERSION := 1.2.0
JSONSCHEMA_VERSION := 4.26.0
OTEL_PROTO_VERSION := 1.45.2
OPS_TEST_STAMP := $(VENV)/.ops-$(PROMETHEUS_CLIENT_VERSION)-$(OCSF_JSON_SCHEMA_VERSION)-$(JSONSCHEMA_VERSION)-$(OTEL_PROTO_VERSION)
export CARGO_TARGET_DIR ?= $(CURDIR)/target
# What maturin sets for cargo. pyo3's build script reruns when any of these
# change, so the workspace's cargo commands below run with the same values:
# otherwise each `make test` would compile pyo3 twice.
PY_SIGNATURE := $(shell python3 -c 'import platform, sys; print("%s-%d.%d-%s" % (sys.implementation.name, sys.version_info[0], sys.version_info[1], platform.architecture()[0]))')
PYO3_ENV := VIRTUAL_ENV=$(VENV) PYO3_PYTHON=$(VENV)/bin/python PYTHON_SYS_EXECUTABLE=$(VENV)/bin/python PYO3_ENVIRONMENT_SIGNATURE=$(PY_SIGNATURE)

.PHONY: demo test test-deps runtimes lint bench wheel python-build python-test python-bench mcp-test compat-test fuzz

runtimes:
	@scripts/fetch-runtimes.sh "$(RUNTIMES_DIR)"

# The walk-through needs neither the servers nor PostgreSQL, a third of
# the build: a new user's first command builds without them. CI, which
# has built everything for the tests already, passes DEMO_FLAGS= to
# reuse that build. The runtimes go where a user's would, the per-user
# directory (`sandlog runtimes install`), not the tests' .runtimes/, so
# everything after the demo works in a new shell without variables.
DEMO_FLAGS ?= --no-default-features
demo:
	env -u SANDLOG_RUNTIMES_DIR cargo run --quiet -p sandlog-cli $(DEMO_FLAGS) -- runtimes install
	env -u SANDLOG_RUNTIMES_DIR cargo run --quiet -p sandlog-cli $(DEMO_FLAGS) -- --root ./sandlog-data demo

# What the tests need from the OS (chromium, tmux, PostgreSQL, python3-venv,
# python3-pip), installed when absent, before anything is built: test-deps
# comes first.
test-deps:
	@scripts/install-test-deps.sh

test: test-deps runtimes python-test mcp-test compat-test
	$(PYO3_ENV) cargo test --workspace --no-fail-fast

# The fuzz harnesses (tests/it/fuzz.rs, server/tests/fuzz.rs) for longer
# than the bounded run `make test` gives them: FUZZ_CASES cases each.
FUZZ_CASES ?= 50000
fuzz: runtimes
	PROPTEST_CASES=$(FUZZ_CASES) $(PYO3_ENV) cargo test -p sandlog-tests --test it fuzz::
	PROPTEST_CASES=$(shell expr $(FUZZ_CASES) / 20) $(PYO3_ENV) cargo test -p sandlog-server --test fuzz

$(VENV)/bin/python:
	python3 -m venv $(VENV)

$(VENV)/.tools-$(MATURIN_VERSION)-$(PYTEST_VERSION): $(VENV)/bin/python
	$(VENV)/bin/python -m pip install --quiet --disable-pip-version-check \
		"maturin==$(MATURIN_VERSION)" "pytest==$(PYTEST_VERSION)"
	touch $@

# The abi3 wheel (one file for CPython 3.9 and later, manylinux-tagged
# by maturin) in dist/, the only sandlog wheel there.
wheel: runtimes $(VENV)/.tools-$(MATURIN_VERSION)-$(PYTEST_VERSION)
	rm -f $(DIST)/sandlog-*.whl
	cd python && $(PYO3_ENV) $(VENV)/bin/maturin build --quiet --profile $(WHEEL_PROFILE) --out $(DIST)

# The tests' wheel: the dev profile's, built once, installed into
# target/venv (for compat-test) and into a fresh WHEEL_VENV (for the
# package's tests; remade every run, so nothing stale is imported).
python-build: runtimes $(VENV)/.tools-$(MATURIN_VERSION)-$(PYTEST_VERSION)
	$(MAKE) --no-print-directory wheel WHEEL_PROFILE=dev DIST=$(TEST_WHEELS)
	$(VENV)/bin/python -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps $(TEST_WHEELS)/sandlog-*.whl

python-test: python-build
	$(PYO3_ENV) cargo build -p sandlog-tests --bin pg-server
	rm -rf $(WHEEL_VENV)
	python3 -m venv $(WHEEL_VENV)
	$(WHEEL_VENV)/bin/python -m pip install --quiet --disable-pip-version-check \
		"pytest==$(PYTEST_VERSION)" "pytest-asyncio==$(PYTEST_ASYNCIO_VERSION)" $(TEST_WHEELS)/sandlog-*.whl
	$(WHEEL_VENV)/bin/python -m pytest python/tests -q -p no:cacheprovider

# The MCP server driven by the official Python client, installed from the
# registry at a pinned version (a failed install fails the target).
$(VENV)/.mcp-$(MCP_VERSION)-$(PYTEST_VERSION): $(VENV)/.tools-$(MATURIN_VERSION)-$(PYTEST_VERSION)
	$(VENV)/bin/python -m pip install --quiet --disable-pip-version-check "mcp==$(MCP_VERSION)"
	touch $@

$(OPS_TEST_STAMP): $(VENV)/.tools-$(MATURIN_VERSION)-$(PYTEST_VERSION)
	$(VENV)/bin/python -m pip install --quiet --disable-pip-version-check \
		"prometheus-client==$(PROMETHEUS_CLIENT_VERSION)" \
		"ocsf-json-schema==$(OCSF_JSON_SCHEMA_VERSION)" "jsonschema==$(JSONSCHEMA_VERSION)" \
		"opentelemetry-proto==$(OTEL_PROTO_VERSION)"
	touch $@

mcp-test: runtimes $(VENV)/.mcp-$(MCP_VERSION)-$(PYTEST_VERSION) $(OPS_TEST_STAMP)
	$(PYO3_ENV) cargo build -p sandlog-cli
	SANDLOG_BIN=$(CARGO_TARGET_DIR)/debug/sandlog SANDLOG_CACHE_DIR=$(SANDLOG_TEST_CACHE_DIR) \
		$(VENV)/bin/python -m pytest server/tests/python -q -p no:cacheprovider

# The seed system, from PyPI, for the Python bench's side-by-side figure.
SEED_VENV := $(CURDIR)/target/seed-venv
SEED_VERSION := 0.4.4

$(SEED_VENV)/.seed-$(SEED_VERSION):
	test -x $(SEED_VENV)/bin/python || python3 -m venv $(SEED_VENV)
	$(SEED_VENV)/bin/python -m pip install --quiet --disable-pip-version-check "llm-wasm-sandbox==$(SEED_VERSION)"
	touch $@

# The seed's own session tests (its sdist from PyPI, sha256-pinned in the
# script) against sandlog.compat through python/compat_shim, and against the
# seed itself installed in SEED_VENV; prints both counts. The script's exit
# code is the verdict (docs/compat.md: the pass rate and expected failures).
$(SEED_VENV)/.pytest-$(PYTEST_VERSION): $(SEED_VENV)/.seed-$(SEED_VERSION)
	$(SEED_VENV)/bin/python -m pip install --quiet --disable-pip-version-check "pytest==$(PYTEST_VERSION)"
	touch $@

compat-test: python-build $(SEED_VENV)/.pytest-$(PYTEST_VERSION)
	SANDLOG_CACHE_DIR=$(SANDLOG_TEST_CACHE_DIR) $(VENV)/bin/python scripts/compat-test.py \
		--target $(CURDIR)/target/compat --seed-python $(SEED_VENV)/bin/python

# The release wheel (`make wheel`), installed into target/venv, and timed
# installing into a fresh environment by the bench itself.
python-bench: runtimes $(VENV)/.tools-$(MATURIN_VERSION)-$(PYTEST_VERSION) $(SEED_VENV)/.seed-$(SEED_VERSION)
	cargo build --release -p sandlog-cli
	$(MAKE) --no-print-directory wheel WHEEL_PROFILE=release
	$(VENV)/bin/python -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps $(DIST)/sandlog-*.whl
	SANDLOG_SEED_PYTHON=$(SEED_VENV)/bin/python SANDLOG_BENCH_WHEEL=$$(ls $(DIST)/sandlog-*.whl) \
		$(VENV)/bin/python python/bench.py

lint: $(VENV)/bin/python
	cargo fmt --all -- --check
	$(PYO3_ENV) cargo clippy --workspace --all-targets -- -D warnings
	$(PYO3_ENV) cargo clippy -p sandlog-cli --no-default-features -- -D warnings

# The release binary is built first: the exec bench times whole `sandlog`
# processes with it (first exec in a new root, warm and cold module cache)
# and prints its size; the sync bench times `sandlog session sync` with it.
# The postgres bench finds its server as the tests do
# (tests/support/pg.rs: $SANDLOG_TEST_PG_URL, else a throwaway cluster).
# The lifecycle bench runs the seed system's own prune beside sandlog's.
bench: runtimes $(SEED_VENV)/.seed-$(SEED_VERSION)
	cargo build --release -p sandlog-cli
	SANDLOG_SEED_PYTHON=$(SEED_VENV)/bin/python cargo bench -p sandlog-tests

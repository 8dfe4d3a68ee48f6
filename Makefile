# sandlog's two entry points. Both install what they need (the pinned guest
# runtimes, verified by sha256) before building.
#
#   make demo   build and run the quick-start walk-through on ./sandlog-data
#   make test   the full test suite (what CI runs)

RUNTIMES_DIR ?= $(CURDIR)/.runtimes
export SANDLOG_RUNTIMES_DIR := $(RUNTIMES_DIR)
# Tests share one precompiled-module cache so python.wasm is compiled once.
export SANDLOG_TEST_CACHE_DIR ?= $(CURDIR)/target/sandlog-test-cache

.PHONY: demo test runtimes lint bench

runtimes:
	@scripts/fetch-runtimes.sh "$(RUNTIMES_DIR)"

demo: runtimes
	cargo run --quiet -p sandlog-cli -- --root ./sandlog-data demo

test: runtimes
	cargo test --workspace --no-fail-fast

lint:
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings

# The release binary is built first: the exec bench times whole `sandlog`
# processes with it (first exec in a new root, warm and cold module cache)
# and prints its size.
bench: runtimes
	cargo build --release -p sandlog-cli
	cargo bench -p sandlog-tests

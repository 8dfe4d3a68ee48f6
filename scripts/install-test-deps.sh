#!/usr/bin/env bash
# Installs what sandlog's test suite needs from the OS and is absent, through
# the OS package manager (apt-get, Debian and Ubuntu). Run by `make test`
# (before it builds anything) and by `.ci/run`.
#
# Usage: scripts/install-test-deps.sh
#
# What the tests need, and why each one fails (never skips) without it:
#   chromium     tests/it/report.rs renders the HTML report in headless
#                /usr/bin/chromium (Debian's `chromium` package)
#   tmux         cli/tests/cli/terminal.rs drives a real terminal through tmux
#   postgresql   the conformance suite on PostgreSQL starts a throwaway
#                cluster with initdb and pg_ctl (found on PATH, in
#                /usr/lib/postgresql/*/bin or /usr/local/bin); not needed
#                when $SANDLOG_TEST_PG_URL names a server
#   python3-venv `make python-test` builds the package into a virtual
#                environment (python3 -m venv)
#   python3-pip  scripts/fetch-runtimes.sh downloads the pinned runtimes
#                with python3 -m pip
#
# Idempotent: what is present is left alone, and nothing is installed when
# everything is. It says what it installs. When it cannot install (not root
# and no password-less sudo, or no apt-get) it prints the exact command to
# run and exits 1, so `make test` stops before building.

set -euo pipefail

say() { echo "install-test-deps: $*"; }

# find_pg_bin: the directory holding initdb and pg_ctl, searched as the
# tests' support code does (tests/support/pg.rs); empty when none.
find_pg_bin() {
    if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
        dirname "$(command -v initdb)"
        return
    fi
    local dir
    for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r) /usr/local/bin; do
        if [[ -x "$dir/initdb" && -x "$dir/pg_ctl" ]]; then
            echo "$dir"
            return
        fi
    done
}

missing=()
reasons=()
if [[ ! -x /usr/bin/chromium ]]; then
    missing+=(chromium)
    reasons+=("chromium (/usr/bin/chromium, for the report's rendering test)")
fi
if ! command -v tmux >/dev/null 2>&1; then
    missing+=(tmux)
    reasons+=("tmux (for the terminal-output test)")
fi
if [[ -z "${SANDLOG_TEST_PG_URL:-}" && -z "$(find_pg_bin)" ]]; then
    missing+=(postgresql)
    reasons+=("postgresql (initdb and pg_ctl, for the PostgreSQL conformance suite)")
fi
if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
    missing+=(python3-venv)
    reasons+=("python3-venv (python3 -m venv, for the Python package's tests)")
fi
if ! python3 -m pip --version >/dev/null 2>&1; then
    missing+=(python3-pip)
    reasons+=("python3-pip (python3 -m pip, which fetches the pinned runtimes)")
fi

if [[ ${#missing[@]} -eq 0 ]]; then
    say "chromium, tmux, PostgreSQL, python3-venv and python3-pip are present"
    exit 0
fi

say "missing:"
for reason in "${reasons[@]}"; do
    echo "  $reason"
done

install_cmd="apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${missing[*]}"

if ! command -v apt-get >/dev/null 2>&1; then
    say "error: apt-get was not found, so they cannot be installed here." >&2
    say "install these with your package manager, then run make test again: ${missing[*]}" >&2
    say "(on Debian or Ubuntu, as root: $install_cmd)" >&2
    exit 1
fi

as_root=()
if [[ "$(id -u)" -ne 0 ]]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true >/dev/null 2>&1; then
        as_root=(sudo -n)
    else
        say "error: installing needs root, and this is neither root nor allowed sudo without a password." >&2
        say "run this, then make test again:" >&2
        echo "  sudo sh -c '$install_cmd'" >&2
        exit 1
    fi
fi

say "installing with apt-get: ${missing[*]}"
"${as_root[@]}" apt-get update
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y --no-install-recommends "${missing[@]}"

# The install must have produced what the tests look for.
failed=()
if [[ ! -x /usr/bin/chromium ]]; then failed+=("/usr/bin/chromium"); fi
if ! command -v tmux >/dev/null 2>&1; then failed+=("tmux"); fi
if [[ -z "${SANDLOG_TEST_PG_URL:-}" && -z "$(find_pg_bin)" ]]; then failed+=("initdb and pg_ctl"); fi
if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then failed+=("python3 -m venv"); fi
if ! python3 -m pip --version >/dev/null 2>&1; then failed+=("python3 -m pip"); fi
if [[ ${#failed[@]} -gt 0 ]]; then
    say "error: still missing after apt-get install: ${failed[*]}" >&2
    exit 1
fi
say "installed: ${missing[*]}"

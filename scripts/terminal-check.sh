#!/bin/sh
# Shows, in a real terminal driven by tmux, what a person sees: the
# first-run compile note, the progress bar and the notes that an old
# root's log is being upgraded (schema, read models) appear on a terminal,
# and none of them appears when the output is piped.
#
# Usage: scripts/terminal-check.sh SANDLOG_BINARY QUICKJS_WASM OLD_ROOT OLD_ROOT
# (two roots whose logs need an upgrade: one opened on the terminal, one
# piped).
# Prints the captured terminal output of both runs and exits non-zero
# naming what was missing or unexpected. cli/tests/cli/terminal.rs runs it.
set -eu

binary=$1
quickjs=$2
old_terminal=$3
old_piped=$4
command -v tmux >/dev/null || { echo "tmux is not installed (apt-get install tmux)" >&2; exit 2; }

work=$(mktemp -d)
socket="sandlog-terminal-check-$$"
cleanup() {
    tmux -L "$socket" kill-server 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

mkdir -p "$work/runtimes"
cp "$quickjs" "$work/runtimes/quickjs.wasm"
# Seed-layout workspaces to adopt: enough for the bar to draw.
make_seeds() {
    mkdir -p "$1"
    i=0
    while [ $i -lt 400 ]; do
        dir=$(printf '%s/%08x-0000-4000-8000-%012x' "$1" "$i" "$i")
        mkdir "$dir"
        echo "file $i" > "$dir/data.txt"
        i=$((i + 1))
    done
}
make_seeds "$work/seeds-terminal"
make_seeds "$work/seeds-piped"

env_line="env -u SANDLOG_ROOT -u NO_COLOR SANDLOG_RUNTIMES_DIR='$work/runtimes' SANDLOG_CACHE_DIR='$work/cache'"

tmux -L "$socket" -f /dev/null new-session -d -s check -x 160 -y 48 sh
# Waits until the log holds the marker a command prints when it ends
# (the typed command shows `$((N))`, the output the number: no false
# match on the echo of the keys).
run_in_terminal() {
    log=$1
    marker=$2
    shift 2
    tmux -L "$socket" send-keys -t check "$* ; echo DONE-\$((0+$marker))" Enter
    tries=0
    until grep -q "DONE-$marker" "$log" 2>/dev/null; do
        tries=$((tries + 1))
        if [ $tries -gt 1200 ]; then
            echo "timed out waiting for: $*" >&2
            cat "$log" >&2
            exit 1
        fi
        sleep 0.1
    done
}

terminal_log="$work/terminal.log"
tmux -L "$socket" pipe-pane -t check -o "cat >> '$terminal_log'"
run_in_terminal "$terminal_log" 1 "$env_line '$binary' --root '$work/a' init"
run_in_terminal "$terminal_log" 2 "$env_line '$binary' --root '$work/a' adopt '$work/seeds-terminal'"
run_in_terminal "$terminal_log" 5 "$env_line '$binary' --root '$old_terminal' stats"
tmux -L "$socket" pipe-pane -t check

piped_log="$work/piped.log"
# A fresh cache: a compile happens again, this time with stderr piped.
tmux -L "$socket" pipe-pane -t check -o "cat >> '$piped_log'"
run_in_terminal "$piped_log" 3 "SANDLOG_CACHE_DIR='$work/cache2' $env_line '$binary' --root '$work/b' init 2>&1 | cat"
run_in_terminal "$piped_log" 4 "$env_line '$binary' --root '$work/b' adopt '$work/seeds-piped' 2>&1 | cat"
run_in_terminal "$piped_log" 6 "$env_line '$binary' --root '$old_piped' stats 2>&1 | cat"
tmux -L "$socket" pipe-pane -t check

# The caches really were cold for the piped run too.
ls "$work/cache2" >/dev/null 2>&1 || true

echo "=== on a terminal ==="
cat "$terminal_log"
echo
echo "=== piped ==="
cat "$piped_log"
echo

failed=0
expect() {
    if ! grep -q -- "$2" "$1"; then
        echo "MISSING in $(basename "$1"): $2" >&2
        failed=1
    fi
}
refuse() {
    if grep -q -- "$2" "$1"; then
        echo "UNEXPECTED in $(basename "$1"): $2" >&2
        failed=1
    fi
}
expect "$terminal_log" "compiling quickjs.wasm"
expect "$terminal_log" "adopting"
expect "$terminal_log" "/400"
refuse "$terminal_log" " 0/0"
expect "$terminal_log" "upgrading the log"
expect "$terminal_log" "log upgraded to schema"
expect "$terminal_log" "rebuilding the read models"
expect "$terminal_log" "read models rebuilt"
refuse "$terminal_log" "version 0 to"
expect "$piped_log" "initialised"
expect "$piped_log" "adopted"
refuse "$piped_log" "compiling quickjs.wasm"
refuse "$piped_log" "adopting "
refuse "$piped_log" "/400"
expect "$piped_log" "sessions pruned"
refuse "$piped_log" "upgrading the log"
refuse "$piped_log" "log upgraded"
refuse "$piped_log" "read models"
exit $failed

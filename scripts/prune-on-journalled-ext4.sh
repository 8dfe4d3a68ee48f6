#!/usr/bin/env bash
# Runs the lifecycle benchmark (real prune, seed-style prune, removal floors)
# with every timed directory on a freshly made, loop-mounted ext4 that has a
# journal and no `discard`: the default of most Linux installs.
#
# Usage: sudo scripts/prune-on-journalled-ext4.sh [IMAGE_DIR]
#        (default: <repo>/target/prune-fs; the image is a sparse 8 GiB file)
#
# Why: what a prune costs is mostly the file system's. On ext4 without a
# journal mounted `discard` (some cloud VMs' root disk), every freed block
# is discarded synchronously by the thread that frees it, so removals wait
# on the device; with a journal the discards (if any) happen at the
# journal's commit and a removal costs its metadata work only. The bench's
# first table row names the file system it measured. Sizes as in `make
# bench` unless SANDLOG_BENCH_* are set, except that the selection and
# reconcile phases are made small here (neither removes anything).
#
# Needs root (mkfs, mount -o loop), mkfs.ext4 and a free loop device. The
# file system is unmounted and the image removed on exit.

set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
image_dir="${1:-$repo/target/prune-fs}"
if [[ $(id -u) -ne 0 ]]; then
    echo "prune-on-journalled-ext4: needs root (mkfs and a loop mount); run it with sudo" >&2
    exit 2
fi
command -v mkfs.ext4 >/dev/null || {
    echo "prune-on-journalled-ext4: mkfs.ext4 not found; install e2fsprogs" >&2
    exit 2
}

mkdir -p "$image_dir"
image="$image_dir/ext4.img"
mount_point="$image_dir/mnt"
cleanup() {
    umount "$mount_point" 2>/dev/null || true
    rm -f "$image"
}
trap cleanup EXIT

truncate -s 8G "$image"
mkfs.ext4 -q -F "$image"
mkdir -p "$mount_point"
mount -o loop "$image" "$mount_point"
chmod 1777 "$mount_point"

cd "$repo/tests"
TMPDIR="$mount_point" \
    SANDLOG_BENCH_SESSIONS="${SANDLOG_BENCH_SESSIONS:-200}" \
    SANDLOG_BENCH_RECONCILE="${SANDLOG_BENCH_RECONCILE:-10}" \
    cargo bench -p sandlog-tests --bench lifecycle

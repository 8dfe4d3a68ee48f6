"""Shared fixtures: a real root on disk, the real python.wasm guest.

The guest runtimes come from ``SANDLOG_RUNTIMES_DIR`` (the Makefile sets it
after fetching them). Missing runtimes fail the run: a test never skips.
"""

from __future__ import annotations

import json
import os
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Iterator, Optional

import pytest

import sandlog

REPO = Path(__file__).resolve().parents[2]


def pytest_configure(config: pytest.Config) -> None:
    runtimes = os.environ.get("SANDLOG_RUNTIMES_DIR")
    if not runtimes or not (Path(runtimes) / "python.wasm").is_file():
        raise pytest.UsageError(
            "SANDLOG_RUNTIMES_DIR must name a directory holding python.wasm "
            "(run `make python-test`, which fetches the runtimes and sets it)"
        )
    # Compile python.wasm once for the whole run (and across runs).
    cache = os.environ.get("SANDLOG_TEST_CACHE_DIR") or str(REPO / "target" / "sandlog-test-cache")
    os.environ.setdefault("SANDLOG_CACHE_DIR", cache)


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A fresh PostgreSQL database for this run, from ``target/*/pg-server``
    (the Rust tests' server: ``$SANDLOG_TEST_PG_URL``, else a throwaway
    cluster under ``target/``), held until the run ends. No server fails
    the tests that need it, with the reason: never a skip."""
    import subprocess

    target = Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")
    binary = target / "debug" / "pg-server"
    if not binary.is_file():
        raise RuntimeError(f"{binary} is missing: build it with `cargo build -p sandlog-tests --bin pg-server` (`make python-test` does)")
    server = subprocess.Popen([str(binary)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert server.stdout is not None and server.stdin is not None
    url = server.stdout.readline().strip()
    if not url:
        _, errors = server.communicate(timeout=120)
        raise RuntimeError(f"no PostgreSQL server for the tests: {errors.strip()}")
    try:
        yield url
    finally:
        server.stdin.close()
        server.wait(timeout=120)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "root"


@pytest.fixture
def engine(root: Path) -> Iterator[sandlog.Engine]:
    with sandlog.Engine.init(root) as opened:
        yield opened


@pytest.fixture
def sid(engine: sandlog.Engine) -> str:
    return engine.create_session()


def seed_workspace(
    parent: Path,
    updated: Optional[datetime],
    files: Optional[dict] = None,
    metadata: Optional[str] = None,
) -> str:
    """Makes a seed-format workspace ``parent/<uuid>/``: with a
    ``.metadata.json`` whose ``updated_at`` is ``updated`` (none when
    ``updated`` is None), or with the raw ``metadata`` text."""
    session_id = str(uuid.uuid4())
    workspace = parent / session_id
    workspace.mkdir(parents=True)
    for name, data in (files or {"data.txt": b"seed data"}).items():
        (workspace / name).write_bytes(data)
    if metadata is not None:
        (workspace / ".metadata.json").write_text(metadata)
    elif updated is not None:
        created = updated - timedelta(hours=1)
        (workspace / ".metadata.json").write_text(
            json.dumps(
                {
                    "session_id": session_id,
                    "created_at": created.isoformat(),
                    "updated_at": updated.isoformat(),
                    "version": 1,
                }
            )
        )
    return session_id


def hours_ago(hours: float) -> datetime:
    return datetime.now(timezone.utc) - timedelta(hours=hours)

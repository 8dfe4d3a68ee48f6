"""No Python-visible call can crash the interpreter: random bytes, text and
values of every type, passed to every function, give a result, a
``sandlog.Error`` subclass or a ``TypeError``, and nothing else."""

from __future__ import annotations

import os
import random
import string
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Dict, List

import pytest

import sandlog
from sandlog import compat

SEED = int(os.environ.get("SANDLOG_FUZZ_SEED", "20261123"))
ROUNDS = int(os.environ.get("SANDLOG_FUZZ_ROUNDS", "40"))


def random_text(rng: random.Random) -> str:
    kind = rng.randrange(6)
    if kind == 0:
        return "".join(rng.choice(string.printable) for _ in range(rng.randrange(0, 40)))
    if kind == 1:
        # Any code point, lone surrogates and NUL included.
        return "".join(chr(rng.randrange(0, 0x110000)) for _ in range(rng.randrange(0, 20)))
    if kind == 2:
        return rng.choice(["..", "../x", "a/../../b", "/etc/passwd", "", ".", "a\0b", "\\", "a//b", "*", "**/x", "["])
    if kind == 3:
        return "a/" * rng.randrange(0, 300)
    if kind == 4:
        return "x" * rng.choice([255, 256, 4096, 70000])
    return rng.choice(["00000000-0000-4000-8000-000000000000", "not-a-uuid", "python", "javascript", "js"])


def random_value(rng: random.Random, valid: List[Any]) -> Any:
    choices: List[Callable[[], Any]] = [
        lambda: None,
        lambda: rng.choice([True, False]),
        lambda: rng.choice([0, 1, -1, 2**63, 2**64, -(2**64), 2**200]),
        lambda: rng.choice([0.0, -1.5, 1e308, float("nan"), float("inf"), 0.01]),
        lambda: random_text(rng),
        lambda: bytes(rng.randrange(256) for _ in range(rng.randrange(0, 64))),
        lambda: bytearray(b"\xff\x00"),
        lambda: [random_text(rng)],
        lambda: {random_text(rng): random_text(rng)},
        lambda: {1: 2},
        lambda: object(),
        lambda: timedelta(hours=rng.uniform(-100, 100)),
        lambda: datetime(2000, 1, 1),
        lambda: rng.choice([timedelta.max, timedelta.min, timedelta(0)]),
        lambda: rng.choice([datetime.max.replace(tzinfo=timezone.utc), datetime.min.replace(tzinfo=timezone.utc)]),
        lambda: rng.choice([sandlog, compat, Path("fuzz-path"), b"\xff" * 10]),
        lambda: datetime.now(timezone.utc),
        lambda: rng.choice(valid),
    ]
    return rng.choice(choices)()


def check(call: Callable[[], Any]) -> None:
    try:
        result = call()
        if hasattr(result, "__next__"):
            for _ in result:
                pass
    except (sandlog.Error, TypeError):
        pass


def test_random_arguments_to_every_function(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    rng = random.Random(SEED)
    engine = sandlog.Engine.init(tmp_path / "root")
    sid = engine.create_session()
    engine.write_file(sid, "a.txt", b"a")
    seeds = tmp_path / "seed-layout"
    seed_sandbox = compat.create_sandbox(session_id="fuzz", workspace_root=seeds)
    valid: List[Any] = [sid, "a.txt", b"data", True, 1, timedelta(hours=1), "fuzz", compat.RuntimeType.PYTHON]

    def v() -> Any:
        return random_value(rng, valid)

    calls: Dict[str, Callable[[], Any]] = {
        "create_session": lambda: engine.create_session(v()),
        "session": lambda: engine.session(v()),
        "execute": lambda: engine.execute(v(), v(), runtime=v(), timeout=v(), fuel=v(), memory=v()),
        "execute_code": lambda: engine.execute(valid[0], random_text(rng), timeout=1.0, fuel=rng.choice([None, 10**6])),
        # A session that does not exist: the arguments are checked, and no
        # random program is ever started.
        "run": lambda: engine.run(
            "00000000-0000-4000-8000-000000000000", v(), timeout=v(), evidence_bytes=v()
        ),
        "list_files": lambda: engine.list_files(v(), v()),
        "read_file": lambda: engine.read_file(v(), v()),
        "write_file": lambda: engine.write_file(v(), v(), v(), overwrite=v()),
        "write_file_text": lambda: engine.write_file(valid[0], random_text(rng), v(), overwrite=True),
        "delete_path": lambda: engine.delete_path(v(), v(), recursive=v()),
        "delete_session": lambda: engine.delete_session(v()),
        "prune": lambda: engine.prune(
            older_than=v(), dry_run=True, max_sessions=v(), max_bytes=v(), max_deletions=v()
        ),
        "prune_real": lambda: engine.prune(older_than=rng.choice([None, timedelta(days=9999)]), max_sessions=v()),
        "log": lambda: engine.log(session_id=v(), since=v(), from_position=v()),
        "hold": lambda: engine.hold(v(), v()),
        "release": lambda: engine.release(v(), v()),
        "fork": lambda: engine.fork(v(), position=v(), at=v(), labels=v()),
        "read_file_at": lambda: engine.read_file_at(v(), v(), position=v(), at=v()),
        "executions": lambda: engine.executions(v(), excerpt=v()),
        "verify": lambda: engine.verify(),
        "reconcile": lambda: engine.reconcile(v()),
        "open": lambda: sandlog.Engine.open(safe_root(v()), store=v(), node=v()),
        "sync": lambda: engine.sync(),
        "init": lambda: sandlog.Engine.init(safe_root(v())),
        "adopt": lambda: engine.adopt(safe_root(v())),
        "generate_key": lambda: sandlog.generate_key(safe_root(v()), name=v()),
        "sign_checkpoint": lambda: engine.sign_checkpoint(safe_root(v())),
        "verify_checkpoint": lambda: engine.verify_checkpoint(v(), v()),
        "export_evidence": lambda: engine.export_evidence(v(), key=rng.choice([None, safe_root(v())])),
        "verify_evidence": lambda: sandlog.verify_evidence(v(), v()),
        "compat_create": lambda: compat.create_sandbox(
            runtime=v(), policy=v(), session_id=v(), workspace_root=seeds, allow_non_uuid=v()
        ),
        "compat_execute": lambda: seed_sandbox.execute(random_text(rng)),
        "compat_list": lambda: compat.list_session_files(v(), workspace_root=seeds, pattern=v()),
        "compat_read": lambda: compat.read_session_file(v(), v(), workspace_root=seeds),
        "compat_write": lambda: compat.write_session_file(v(), v(), v(), workspace_root=seeds, overwrite=v()),
        "compat_delete_path": lambda: compat.delete_session_path(v(), v(), workspace_root=seeds, recursive=v()),
        "compat_delete": lambda: compat.delete_session_workspace(v(), workspace_root=seeds),
        "compat_prune": lambda: compat.prune_sessions(older_than_hours=v(), workspace_root=seeds, dry_run=True),
        "compat_policy": lambda: compat.ExecutionPolicy.model_validate(v()),
    }

    def safe_root(value: Any) -> Any:
        # Roots stay inside this test's directory: relative, no `..`.
        if isinstance(value, str):
            return "fuzz-" + value.replace("..", "_").lstrip("/")
        return value

    try:
        for round_ in range(ROUNDS):
            # Keep an active session with a file among the valid values, so
            # that calls keep reaching the engine after a delete or prune.
            if engine.session(valid[0]).status != "active":
                valid[0] = engine.create_session()
                engine.write_file(valid[0], "a.txt", b"a")
            for name, call in calls.items():
                try:
                    check(call)
                except BaseException as error:  # noqa: BLE001 - the point of the test
                    pytest.fail(f"round {round_}, {name}: {type(error).__name__}: {error}")
        # The engine still works and its log is intact.
        fresh = engine.create_session()
        assert engine.execute(fresh, "print(1)").stdout == "1\n"
        assert engine.verify().ok
    finally:
        engine.close()

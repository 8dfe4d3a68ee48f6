"""The Engine API against a real root and the real python.wasm guest."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

import sandlog
from conftest import hours_ago, seed_workspace

UNKNOWN = "00000000-0000-4000-8000-000000000000"


# Opening and closing


def test_init_creates_a_root_and_open_reopens_it(root: Path) -> None:
    with sandlog.Engine.init(root) as engine:
        sid = engine.create_session()
        assert Path(engine.root) == root.resolve()
    assert (root / "sandlog.db").is_file()
    with sandlog.Engine.open(root) as engine:
        assert engine.session(sid).status == "active"


def test_open_reports_a_read_model_rebuild_to_logging(
    engine: sandlog.Engine, root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Opening a root whose read models an older sandlog made rebuilds them
    (holding other processes back), and says so through `logging`."""
    engine.create_session()
    engine.close()
    database = sqlite3.connect(root / "sandlog.db")
    with database:
        current = database.execute("SELECT model_version FROM rm_checkpoint").fetchone()[0]
        database.execute("UPDATE rm_checkpoint SET model_version = ?", (current - 1,))
    database.close()
    with caplog.at_level("INFO", logger="sandlog"):
        with sandlog.Engine.open(root) as reopened:
            assert len(reopened.sessions()) == 1
    records = [(record.levelname, record.getMessage()) for record in caplog.records if record.name == "sandlog"]
    assert len(records) == 2, records
    assert records[0][0] == "WARNING"
    assert f"(version {current - 1} to {current}) from the log (" in records[0][1]
    assert "other processes using this root wait for it" in records[0][1]
    assert records[1][0] == "INFO"
    assert records[1][1].startswith(f"read models rebuilt (version {current}) in ")
    caplog.clear()
    with caplog.at_level("INFO", logger="sandlog"):
        sandlog.Engine.open(root).close()
    assert not [record for record in caplog.records if record.name == "sandlog"]


def test_open_without_a_root_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(sandlog.NotFound) as raised:
        sandlog.Engine.open(tmp_path / "missing")
    assert raised.value.kind == "root_missing"
    # An existing directory that holds no root: opening creates nothing.
    with pytest.raises(sandlog.NotFound):
        sandlog.Engine.open(tmp_path)
    assert not (tmp_path / "sandlog.db").exists()


def test_open_with_a_correlation_id_records_it_on_every_event(root: Path) -> None:
    sandlog.Engine.init(root).close()
    with sandlog.Engine.open(root, correlation_id="task-42") as engine:
        sid = engine.create_session()
        engine.write_file(sid, "a.txt", b"a")
        events = [event for event in engine.log() if event["stream"] == f"session/{sid}"]
    # uuid5(f2aedca4-b590-5fd0-8ac0-f89f6a851145, "task-42"), as the CLI maps it.
    expected = str(uuid.uuid5(uuid.UUID("f2aedca4-b590-5fd0-8ac0-f89f6a851145"), "task-42"))
    assert [event["correlation_id"] for event in events] == [expected, expected]
    with sandlog.Engine.open(root) as engine:
        engine.create_session()
        assert list(engine.log())[-1]["correlation_id"] is None
    with pytest.raises(sandlog.InvalidInput, match="correlation id"):
        sandlog.Engine.open(root, correlation_id="bad\nid")
    with pytest.raises(TypeError):
        sandlog.Engine.open(root, correlation_id=42)  # type: ignore[arg-type]


def test_two_roots_are_nodes_of_one_shared_postgresql_log(tmp_path: Path, pg_url: str) -> None:
    with sandlog.Engine.init(tmp_path / "a", store=pg_url, node="node-a") as a, sandlog.Engine.init(
        tmp_path / "b", store=pg_url, node="node-b"
    ) as b:
        assert (a.node, b.node, a.shared, b.shared) == ("node-a", "node-b", True, True)
        sid = a.create_session()
        run = a.execute(sid, "print(6 * 7)")
        assert run.stdout == "42\n"
        a.write_file(sid, "notes.txt", b"on a")
        # The other node copies what a appended, and reads the session and
        # its log from its replica.
        assert b.sync() > 0
        assert b.sync() == 0
        seen = b.session(sid)
        assert (seen.exec_count, seen.node) == (1, "node-a")
        kinds = [event["kind"] for event in b.log(session_id=sid)]
        assert kinds[:1] == ["session.created"] and "file.written" in kinds
        # Only the session's own node changes it.
        with pytest.raises(sandlog.Error) as refused:
            b.delete_session(sid)
        assert refused.value.kind == "foreign_session"
        assert a.session(sid).status == "active"
        assert a.verify().ok and b.verify().ok
    # The root's own SQLite file stays the default.
    with sandlog.Engine.init(tmp_path / "alone") as alone, sandlog.Engine.open(tmp_path / "alone", store=None):
        assert alone.create_session()
        assert not alone.shared and alone.sync() == 0


def test_a_bad_store_is_refused_with_its_reason(tmp_path: Path) -> None:
    with pytest.raises(sandlog.InvalidInput, match="PostgreSQL URL"):
        sandlog.Engine.init(tmp_path / "r", store=" ")
    with pytest.raises(TypeError):
        sandlog.Engine.open(tmp_path / "r", store=42)  # type: ignore[arg-type]
    # A server that is not there: an error naming the failure, no root made.
    with pytest.raises(sandlog.Error):
        sandlog.Engine.init(tmp_path / "r", store="host=/nonexistent-socket-dir dbname=x")
    assert not (tmp_path / "r").exists()


def test_a_closed_engine_refuses_calls(root: Path) -> None:
    engine = sandlog.Engine.init(root)
    with engine:
        assert not engine.closed
    assert engine.closed
    with pytest.raises(sandlog.Error, match="closed"):
        engine.create_session()
    assert "closed" in repr(engine)


def test_engine_cannot_be_built_directly() -> None:
    with pytest.raises(TypeError):
        sandlog.Engine("root")  # type: ignore[arg-type]


# Sessions


def test_create_session_and_its_fields(engine: sandlog.Engine) -> None:
    before = datetime.now(timezone.utc)
    sid = engine.create_session({"user": "ada", "task": "t-1"})
    assert str(uuid.UUID(sid)) == sid
    session = engine.session(sid)
    assert isinstance(session, sandlog.Session)
    assert session.session_id == sid
    assert session.status == "active"
    assert session.created_at is not None and session.updated_at is not None
    assert session.created_at.tzinfo is not None
    assert session.created_at.utcoffset() == timedelta(0)
    assert before - timedelta(seconds=1) <= session.created_at <= datetime.now(timezone.utc)
    assert session.exec_count == 0
    assert session.bytes == 0
    assert session.labels == {"user": "ada", "task": "t-1"}
    assert sid in [listed.session_id for listed in engine.sessions()]
    with pytest.raises(Exception):
        session.status = "x"  # type: ignore[misc]  # frozen


def test_labels_are_checked(engine: sandlog.Engine) -> None:
    with pytest.raises(TypeError):
        engine.create_session(["not", "a", "mapping"])  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        engine.create_session({"key": 1})  # type: ignore[dict-item]
    with pytest.raises(sandlog.InvalidInput):
        engine.create_session({"": "empty key"})


def test_a_task_session_with_group_context_data_and_limit(engine: sandlog.Engine, tmp_path: Path) -> None:
    data = tmp_path / "task-data"
    data.mkdir()
    (data / "input.txt").write_text("42\n")
    sid = engine.create_session(
        {"agent": "a-1"},
        group="task-42",
        max_size=64 * 1024,
        context={"CLAUDE.md": b"# Task\n", ".task/spec.json": b"{}"},
        readonly={"/data/task": data},
    )
    session = engine.session(sid)
    assert session.group == "task-42"
    assert session.max_size == 64 * 1024
    assert engine.read_file(sid, "CLAUDE.md") == b"# Task\n"
    assert sorted(f.path for f in engine.list_files(sid)) == [".task/spec.json", "CLAUDE.md"]
    run = engine.execute(sid, "print(open('/data/task/input.txt').read().strip())")
    assert run.outcome == "ok" and run.stdout == "42\n"
    with pytest.raises(sandlog.LimitExceeded):
        engine.write_file(sid, "big.bin", b"x" * 100_000)
    other = engine.create_session(group="task-7")
    assert [s.session_id for s in engine.sessions(group="task-42")] == [sid]
    result = engine.prune(max_sessions=0, group="task-7")
    assert result.deleted_sessions == [other]
    assert engine.session(sid).status == "active"
    # Refused as a whole: nothing created.
    count = len(engine.sessions())
    with pytest.raises(sandlog.LimitExceeded):
        engine.create_session(max_size=4, context={"a.txt": b"too long"})
    with pytest.raises(sandlog.InvalidInput):
        engine.create_session(context={"../escape": b"x"})
    with pytest.raises(sandlog.InvalidInput):
        engine.create_session(readonly={"/data/x": tmp_path / "missing"})
    with pytest.raises(TypeError):
        engine.create_session(context={"a.txt": "not bytes"})  # type: ignore[dict-item]
    assert len(engine.sessions()) == count


def test_delete_session(engine: sandlog.Engine, sid: str) -> None:
    engine.write_file(sid, "a.txt", b"12345")
    reclaimed = engine.delete_session(sid)
    assert reclaimed == 5
    assert engine.session(sid).status == "deleted"
    assert not (Path(engine.root) / "workspaces" / sid).exists()
    with pytest.raises(sandlog.Conflict) as raised:
        engine.write_file(sid, "b.txt", b"")
    assert raised.value.kind == "session_not_active"


# Executions


def test_execute_runs_python_and_records_files(engine: sandlog.Engine, sid: str) -> None:
    result = engine.execute(sid, "print(6 * 7)\nopen('/app/out.txt', 'w').write('hi')")
    assert isinstance(result, sandlog.Execution)
    assert result.outcome == "ok" and result.ok
    assert result.exit_code == 0
    assert result.stdout == "42\n"
    assert result.stderr == ""
    assert result.files_written == ["out.txt"]
    assert result.files_deleted == []
    assert result.fuel_consumed > 0
    assert result.duration_ms >= 0
    session = engine.session(sid)
    assert session.exec_count == 1
    assert session.bytes == 2
    assert engine.read_file(sid, "out.txt") == b"hi"
    deleted = engine.execute(sid, "import os; os.remove('/app/out.txt')")
    assert deleted.files_deleted == ["out.txt"]


def test_a_guest_failure_is_a_result(engine: sandlog.Engine, sid: str) -> None:
    result = engine.execute(sid, "raise SystemExit(3)")
    assert result.outcome == "error"
    assert result.exit_code == 3
    result = engine.execute(sid, "1/0")
    assert result.outcome == "error"
    assert "ZeroDivisionError" in result.stderr


def test_metrics_count_what_the_engine_did(engine: sandlog.Engine, sid: str) -> None:
    ok = 'sandlog_executions_total{runtime="python",outcome="ok"}'
    error = 'sandlog_executions_total{runtime="python",outcome="error"}'
    durations = 'sandlog_execution_duration_seconds_count{runtime="python"}'
    before = engine.metrics()
    engine.execute(sid, "print(1)")
    engine.execute(sid, "1/0")
    after = engine.metrics()
    assert after[ok] == before.get(ok, 0) + 1
    assert after[error] == before.get(error, 0) + 1
    assert after[durations] == before.get(durations, 0) + 2
    assert after["sandlog_appends_total"] >= before["sandlog_appends_total"] + 2
    assert after["sandlog_log_head_position"] >= before["sandlog_log_head_position"] + 2
    assert after["sandlog_log_size_bytes"] > 0
    assert all(isinstance(value, float) for value in after.values())


def test_output_is_decoded_lossily(engine: sandlog.Engine, sid: str) -> None:
    result = engine.execute(sid, "import sys; sys.stdout.buffer.write(b'ok \\xff\\n')")
    assert result.stdout_bytes == b"ok \xff\n"
    assert result.stdout == "ok \ufffd\n"


def test_timeout_is_an_outcome(engine: sandlog.Engine, sid: str) -> None:
    result = engine.execute(sid, "while True: pass", timeout=0.5)
    assert result.outcome == "timeout"
    assert result.exit_code is None
    assert engine.session(sid).last_outcome == "timeout"


def test_fuel_and_memory_limits(engine: sandlog.Engine, sid: str) -> None:
    assert engine.execute(sid, "while True: pass", fuel=10_000_000).outcome == "out_of_fuel"
    result = engine.execute(sid, "x = bytearray(200 * 1024 * 1024)", memory=64 * 1024 * 1024)
    assert result.outcome in ("memory", "error"), result
    assert result.outcome != "ok"


def test_limit_arguments_are_checked(engine: sandlog.Engine, sid: str) -> None:
    for bad in (-1, 0, float("nan"), float("inf")):
        with pytest.raises(sandlog.InvalidInput):
            engine.execute(sid, "pass", timeout=bad)
    with pytest.raises(sandlog.InvalidInput):
        engine.execute(sid, "pass", fuel=-5)
    with pytest.raises(sandlog.InvalidInput):
        engine.execute(sid, "pass", memory=2**64)
    with pytest.raises(TypeError):
        engine.execute(sid, "pass", fuel="many")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        engine.execute(sid, b"print(1)")  # type: ignore[arg-type]
    assert engine.execute(sid, "pass", timeout=timedelta(seconds=5)).ok


def test_javascript_runtime(engine: sandlog.Engine, sid: str) -> None:
    result = engine.execute(sid, "console.log(6 * 7)", runtime="javascript")
    assert result.outcome == "ok", result
    assert result.stdout.strip() == "42"


def test_missing_runtime_module_is_not_found(engine: sandlog.Engine, sid: str, tmp_path: Path) -> None:
    with pytest.raises(sandlog.NotFound):
        engine.execute(sid, "", runtime=str(tmp_path / "nothing.wasm"))


def test_threads_run_executions_in_parallel_sessions(engine: sandlog.Engine) -> None:
    sessions = [engine.create_session() for _ in range(4)]
    results: dict = {}
    errors: list = []

    def work(index: int, session_id: str) -> None:
        try:
            for round_ in range(3):
                code = f"open('/app/r{round_}.txt', 'w').write('{index}')\nprint({index} * 10 + {round_})"
                results[(index, round_)] = engine.execute(session_id, code)
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(index, sid)) for index, sid in enumerate(sessions)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    for index, session_id in enumerate(sessions):
        for round_ in range(3):
            result = results[(index, round_)]
            assert result.outcome == "ok"
            assert result.stdout == f"{index * 10 + round_}\n"
        assert engine.session(session_id).exec_count == 3
        assert sorted(engine.list_files(session_id), key=lambda f: f.path)[0].path == "r0.txt"
        assert engine.read_file(session_id, "r2.txt") == str(index).encode()
    assert engine.verify().ok


def test_the_gil_is_released_during_an_execution(engine: sandlog.Engine, sid: str) -> None:
    # While one thread runs a one-second guest, this thread keeps running
    # Python: the longest pause it sees is far below the guest's run.
    done = threading.Event()
    started = threading.Event()
    outcome: list = []

    def run() -> None:
        started.set()
        outcome.append(engine.execute(sid, "while True: pass", timeout=1.0).outcome)
        done.set()

    thread = threading.Thread(target=run)
    thread.start()
    started.wait()
    longest = 0.0
    last = time.monotonic()
    while not done.is_set():
        now = time.monotonic()
        longest = max(longest, now - last)
        last = now
    thread.join()
    assert outcome == ["timeout"]
    assert longest < 0.5, f"the main thread was blocked for {longest:.2f}s"


# Files


def test_write_read_list_files(engine: sandlog.Engine, sid: str) -> None:
    info = engine.write_file(sid, "src/main.py", b"print('x')\n")
    assert isinstance(info, sandlog.FileInfo)
    assert info.path == "src/main.py" and info.size == 11 and len(info.blake3) == 64
    assert info.updated_at.tzinfo is not None
    engine.write_file(sid, "data/a.csv", bytearray(b"1,2\n"))
    engine.write_file(sid, "data/b.csv", memoryview(b"3,4\n"))
    assert engine.read_file(sid, "src/main.py") == b"print('x')\n"
    assert sorted(f.path for f in engine.list_files(sid)) == ["data/a.csv", "data/b.csv", "src/main.py"]
    assert sorted(f.path for f in engine.list_files(sid, "data/*.csv")) == ["data/a.csv", "data/b.csv"]
    assert engine.list_files(sid, "*.nothing") == []
    # The guest sees host writes.
    assert engine.execute(sid, "print(open('/app/data/a.csv').read(), end='')").stdout == "1,2\n"


def test_write_without_overwrite_is_a_conflict(engine: sandlog.Engine, sid: str) -> None:
    engine.write_file(sid, "a.txt", b"one")
    with pytest.raises(sandlog.Conflict) as raised:
        engine.write_file(sid, "a.txt", b"two")
    assert raised.value.kind == "file_exists"
    engine.write_file(sid, "a.txt", b"two", overwrite=True)
    assert engine.read_file(sid, "a.txt") == b"two"
    with pytest.raises(TypeError):
        engine.write_file(sid, "a.txt", "text", overwrite=True)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        engine.write_file(sid, "a.txt", b"x", overwrite=1)  # type: ignore[arg-type]


def test_delete_path(engine: sandlog.Engine, sid: str) -> None:
    engine.write_file(sid, "a.txt", b"a")
    engine.write_file(sid, "dir/b.txt", b"b")
    engine.write_file(sid, "dir/sub/c.txt", b"c")
    assert engine.delete_path(sid, "a.txt") == ["a.txt"]
    with pytest.raises(sandlog.InvalidInput) as raised:
        engine.delete_path(sid, "dir")
    assert raised.value.kind == "is_directory"
    assert sorted(engine.delete_path(sid, "dir", recursive=True)) == ["dir/b.txt", "dir/sub/c.txt"]
    assert engine.list_files(sid) == []
    with pytest.raises(sandlog.NotFound):
        engine.delete_path(sid, "a.txt")


def test_missing_file_is_not_found(engine: sandlog.Engine, sid: str) -> None:
    with pytest.raises(sandlog.NotFound) as raised:
        engine.read_file(sid, "nope.txt")
    assert raised.value.kind == "not_found"


def test_quota_is_limit_exceeded(engine: sandlog.Engine, sid: str) -> None:
    with pytest.raises(sandlog.LimitExceeded):
        engine.write_file(sid, "big.bin", bytes(101 * 1024 * 1024))


@pytest.mark.parametrize("path", ["../escape.txt", "a/../../escape.txt", "/etc/passwd", "", "a/\0b"])
def test_an_escaping_path_is_invalid_input(engine: sandlog.Engine, sid: str, path: str) -> None:
    calls = [
        lambda: engine.read_file(sid, path),
        lambda: engine.write_file(sid, path, b"x"),
        lambda: engine.delete_path(sid, path, recursive=True),
    ]
    for call in calls:
        with pytest.raises(sandlog.InvalidInput):
            call()
        with pytest.raises(ValueError):
            call()
    assert not (Path(engine.root) / "workspaces" / "escape.txt").exists()


def test_a_symlink_out_of_the_workspace_is_refused(engine: sandlog.Engine, sid: str, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("secret")
    os.symlink(tmp_path, Path(engine.root) / "workspaces" / sid / "link")
    with pytest.raises(sandlog.InvalidInput) as raised:
        engine.read_file(sid, "link/secret.txt")
    assert raised.value.kind == "path_escapes"
    with pytest.raises(ValueError):
        engine.write_file(sid, "link/new.txt", b"x")
    assert not (tmp_path / "new.txt").exists()


def test_unknown_session_is_not_found_everywhere(engine: sandlog.Engine) -> None:
    calls = [
        lambda: engine.session(UNKNOWN),
        lambda: engine.execute(UNKNOWN, "print(1)"),
        lambda: engine.list_files(UNKNOWN),
        lambda: engine.read_file(UNKNOWN, "a.txt"),
        lambda: engine.write_file(UNKNOWN, "a.txt", b"x"),
        lambda: engine.delete_path(UNKNOWN, "a.txt"),
        lambda: engine.delete_session(UNKNOWN),
        lambda: engine.log(session_id=UNKNOWN),
    ]
    for call in calls:
        with pytest.raises(sandlog.NotFound):
            call()


def test_malformed_session_id_is_invalid_input(engine: sandlog.Engine) -> None:
    for bad in ("not-a-uuid", "", "../../etc", "\ud800"):
        with pytest.raises(sandlog.InvalidInput):
            engine.session(bad)
        with pytest.raises(ValueError):
            engine.read_file(bad, "a.txt")


# Prune


def test_prune_dry_run_equals_the_real_run(engine: sandlog.Engine, tmp_path: Path) -> None:
    seeds = tmp_path / "seed"
    old = [seed_workspace(seeds, hours_ago(48 + index)) for index in range(3)]
    recent = seed_workspace(seeds, hours_ago(1))
    legacy = seed_workspace(seeds, None)
    adopted = engine.adopt(seeds)
    assert sorted(adopted.adopted) == sorted(old + [recent])
    assert adopted.legacy == [legacy]
    fresh = engine.create_session()

    dry = engine.prune(older_than=timedelta(hours=24), dry_run=True)
    assert dry.dry_run
    assert sorted(dry.deleted_sessions) == sorted(old)
    for session_id in old:
        assert engine.session(session_id).status == "active"  # nothing changed

    real = engine.prune(older_than=timedelta(hours=24))
    assert not real.dry_run
    assert sorted(real.deleted_sessions) == sorted(dry.deleted_sessions)
    assert real.skipped_sessions == dry.skipped_sessions == [legacy]
    assert real.reclaimed_bytes == dry.reclaimed_bytes > 0
    assert real.errors == dry.errors == {}
    assert "without valid metadata" in real.skipped_reasons[legacy]
    for session_id in old:
        assert engine.session(session_id).status == "pruned"
    for session_id in (recent, legacy, fresh):
        assert engine.session(session_id).status == "active"
    assert "3 deleted" in str(real)


def test_prune_runs_in_the_batches_open_asks_for(engine: sandlog.Engine, root: Path) -> None:
    """A prune's first two batches' intents are appended back to back, so
    the first run of consecutive intent positions is two batches long."""
    sessions = [engine.create_session() for _ in range(10)]
    with sandlog.Engine.open(root, prune_batch_sessions=4) as batched:
        result = batched.prune(older_than=timedelta(0))
    assert sorted(result.deleted_sessions) == sorted(sessions)
    intents = [event["position"] for event in engine.log() if event["kind"] == "session.prune.requested"]
    assert len(intents) == 10
    first_run = 1
    while first_run < len(intents) and intents[first_run] == intents[first_run - 1] + 1:
        first_run += 1
    assert first_run == 8
    with pytest.raises(sandlog.InvalidInput, match="prune_batch_sessions 0"):
        sandlog.Engine.open(root, prune_batch_sessions=0)
    with pytest.raises(TypeError):
        sandlog.Engine.open(root, prune_batch_sessions="4")  # type: ignore[arg-type]


def test_prune_by_count_and_bounds(engine: sandlog.Engine) -> None:
    sessions = [engine.create_session() for _ in range(4)]
    result = engine.prune(max_sessions=2, dry_run=True)
    assert sorted(result.deleted_sessions) == sorted(sessions[:2])
    result = engine.prune(older_than=timedelta(0), max_deletions=1)
    assert result.deleted_sessions == [sessions[0]]
    with pytest.raises(sandlog.InvalidInput):
        engine.prune()
    # The one rule of every front end: max_deletions alone selects nothing.
    with pytest.raises(sandlog.InvalidInput, match="max_deletions only caps a run"):
        engine.prune(max_deletions=1)
    with pytest.raises(sandlog.InvalidInput):
        engine.prune(older_than=timedelta(hours=-1))
    with pytest.raises(TypeError):
        engine.prune(older_than=24)  # type: ignore[arg-type]


# The log


def test_log_streams_events_in_order(engine: sandlog.Engine, sid: str, monkeypatch: pytest.MonkeyPatch) -> None:
    other = engine.create_session()
    for index in range(5):
        engine.write_file(sid, f"f{index}.txt", b"x")
    engine.write_file(other, "o.txt", b"y")
    events = list(engine.log())
    positions = [event["position"] for event in events]
    assert positions == list(range(1, len(events) + 1))
    assert events[0]["kind"]  # the genesis event
    kinds = [event["kind"] for event in engine.log(session_id=sid)]
    assert kinds == ["session.created"] + ["file.written"] * 5
    assert all(event["stream"] == f"session/{sid}" for event in engine.log(session_id=sid))
    written = [e for e in engine.log(session_id=sid) if e["kind"] == "file.written"]
    assert written[0]["payload"]["path"] == "f0.txt"
    tail = list(engine.log(from_position=positions[-2]))
    assert [event["position"] for event in tail] == positions[-2:]
    assert list(engine.log(since=datetime.now(timezone.utc) + timedelta(hours=1))) == []
    assert len(list(engine.log(since=datetime(2000, 1, 1, tzinfo=timezone.utc)))) == len(events)
    with pytest.raises(sandlog.InvalidInput):
        engine.log(since=datetime(2000, 1, 1))  # naive
    # Paging: with small pages the same events come out.
    monkeypatch.setattr(sandlog._sandlog, "LOG_PAGE_EVENTS_MAX", 2)
    assert [event["position"] for event in engine.log()] == positions
    # Events appended while iterating are seen.
    iterator = engine.log(session_id=other)
    assert next(iterator)["kind"] == "session.created"
    engine.write_file(other, "late.txt", b"z")
    assert [event["payload"]["path"] for event in iterator] == ["o.txt", "late.txt"]


# Verify and reconcile


def test_verify(engine: sandlog.Engine, sid: str) -> None:
    engine.write_file(sid, "a.txt", b"a")
    result = engine.verify()
    assert isinstance(result, sandlog.VerifyResult)
    assert result.ok and result.read_model_mismatches == [] and result.missing_blobs == []
    assert result.events == result.position == len(list(engine.log()))
    assert len(result.head) == 64


def test_verify_detects_a_changed_event(engine: sandlog.Engine, sid: str) -> None:
    engine.write_file(sid, "a.txt", b"a")
    database = sqlite3.connect(Path(engine.root) / "sandlog.db")
    with database:
        database.execute("DROP TRIGGER events_are_append_only_update")
        database.execute("UPDATE events SET actor = 'mallory' WHERE position = 2")
    database.close()
    with pytest.raises(sandlog.IntegrityError) as raised:
        engine.verify()
    assert raised.value.kind == "integrity"


def test_reconcile_quarantines_an_orphan(engine: sandlog.Engine) -> None:
    orphan = Path(engine.root) / "workspaces" / str(uuid.uuid4())
    orphan.mkdir()
    (orphan / "left.txt").write_text("left behind")
    old = time.time() - 3600
    os.utime(orphan, (old, old))
    dry = engine.reconcile(dry_run=True)
    assert dry.dry_run and dry.orphans == [orphan.name]
    assert orphan.exists()
    done = engine.reconcile()
    assert done.orphans == [orphan.name] and done.errors == {}
    assert not orphan.exists()
    assert engine.reconcile(dry_run=True).orphans == []


def test_adopt_keeps_seed_timestamps(engine: sandlog.Engine, tmp_path: Path) -> None:
    seeds = tmp_path / "seed"
    updated = hours_ago(30)
    session_id = seed_workspace(seeds, updated, files={"notes.md": b"# notes"})
    corrupted = seed_workspace(seeds, None, metadata="{not json")
    result = engine.adopt(seeds)
    assert result.adopted == [session_id]
    assert result.corrupted == [corrupted]
    session = engine.session(session_id)
    assert session.updated_at is not None
    assert abs(session.updated_at - updated) < timedelta(seconds=1)
    assert engine.read_file(session_id, "notes.md") == b"# notes"
    assert [f.path for f in engine.list_files(session_id)] == ["notes.md"]
    legacy = engine.session(corrupted)
    assert legacy.legacy and legacy.updated_at is None


# History and evidence


def test_hold_blocks_prune_and_delete(engine: sandlog.Engine, sid: str) -> None:
    engine.hold(sid, "litigation 42")
    assert engine.session(sid).held == "litigation 42"
    with pytest.raises(sandlog.Conflict) as raised:
        engine.delete_session(sid)
    assert raised.value.kind == "held"
    result = engine.prune(older_than=timedelta(0))
    assert sid not in result.deleted_sessions and sid in result.skipped_sessions
    engine.release(sid, "settled")
    assert engine.session(sid).held is None
    assert sid in engine.prune(older_than=timedelta(0)).deleted_sessions


def test_files_at_a_point_in_history_and_fork(engine: sandlog.Engine, sid: str) -> None:
    engine.write_file(sid, "a.txt", b"first")
    position = list(engine.log(session_id=sid))[-1]["position"]
    engine.write_file(sid, "a.txt", b"second", overwrite=True)
    assert engine.read_file_at(sid, "a.txt", position=position) == b"first"
    assert engine.read_file_at(sid, "a.txt") == b"second"
    assert engine.read_file_at(sid, "a.txt", at=datetime.now(timezone.utc)) == b"second"
    with pytest.raises(sandlog.InvalidInput):
        engine.read_file_at(sid, "a.txt", position=1, at=datetime.now(timezone.utc))
    with pytest.raises(sandlog.NotFound):
        engine.read_file_at(sid, "a.txt", position=1)
    report = engine.fork(sid, position=position, labels={"from": sid})
    forked = report["session_id"]
    assert engine.read_file(forked, "a.txt") == b"first"
    assert engine.session(forked).labels == {"from": sid}
    assert engine.read_file(sid, "a.txt") == b"second"


def test_executions_are_recorded_with_their_evidence(engine: sandlog.Engine, sid: str) -> None:
    engine.execute(sid, "print('hello')")
    engine.execute(sid, "raise SystemExit(2)")
    records = engine.executions(sid)
    assert len(records) == 2
    assert [record["outcome"] for record in records] == ["ok", "error"]
    assert "print('hello')" in str(records[0]["code"])
    assert "hello" in str(records[0]["stdout"])


def test_sync_session_records_changes_made_beside_sandlog(engine: sandlog.Engine, sid: str) -> None:
    engine.write_file(sid, "kept.txt", b"kept")
    engine.write_file(sid, "gone.txt", b"gone")
    workspace = Path(engine.root) / "workspaces" / sid
    (workspace / "made.txt").write_bytes(b"made beside")
    (workspace / "gone.txt").unlink()
    synced = engine.sync_session(sid)
    assert synced.recorded and synced.files_written == ["made.txt"] and synced.files_deleted == ["gone.txt"]
    assert sorted(file.path for file in engine.list_files(sid)) == ["kept.txt", "made.txt"]
    assert [event["kind"] for event in engine.log(session_id=sid)][-1] in ("file.written", "file.deleted")
    assert not engine.sync_session(sid).recorded  # nothing changed since
    with pytest.raises(sandlog.NotFound):
        engine.sync_session(str(uuid.uuid4()))


def test_the_package_has_a_version() -> None:
    # The workspace's version, as `sandlog --version` prints it.
    cargo = (Path(__file__).resolve().parents[2] / "Cargo.toml").read_text()
    version = cargo.split("[workspace.package]", 1)[1].split('version = "', 1)[1].split('"', 1)[0]
    assert sandlog.__version__ == version


def test_runtimes_are_found_without_environment_variables(tmp_path: Path) -> None:
    # A new shell after `make demo` (or `sandlog runtimes install`): no
    # SANDLOG_* variable, the runtimes in the per-user directory.
    import subprocess
    import sys

    home = tmp_path / "home"
    user = home / ".local" / "share" / "sandlog" / "runtimes"
    user.mkdir(parents=True)
    for name in ("python.wasm", "quickjs.wasm"):
        (user / name).symlink_to(Path(os.environ["SANDLOG_RUNTIMES_DIR"]) / name)
    # The tests' module cache, so python.wasm is not compiled again.
    (home / ".cache").mkdir()
    (home / ".cache" / "sandlog").symlink_to(os.environ["SANDLOG_CACHE_DIR"])
    script = (
        "import sandlog\n"
        "engine = sandlog.Engine.init('sandlog-data')\n"
        "print(engine.execute(engine.create_session(), 'print(6 * 7)').stdout, end='')\n"
    )
    ran = subprocess.run(
        [sys.executable, "-c", script],
        env={"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        cwd=home,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == "42\n"

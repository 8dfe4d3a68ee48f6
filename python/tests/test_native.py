"""Engine.run: a trusted native command in a session's workspace, recorded
in the log, with real processes (/bin/sh) and a real root."""

from __future__ import annotations

import time

import pytest

import sandlog


def _events(engine: sandlog.Engine, sid: str, kind: str) -> list:
    return [event for event in engine.log(session_id=sid) if event["kind"] == kind]


def test_a_command_is_recorded_with_the_files_it_changed(engine: sandlog.Engine, sid: str) -> None:
    engine.write_file(sid, "old.txt", b"old")
    run = engine.run(sid, ["/bin/sh", "-c", 'printf made > new.txt; rm old.txt; echo "in $SANDLOG_SESSION_ID"'])
    assert run.ok and run.exit_code == 0 and run.signal is None and not run.timed_out
    assert run.stdout == f"in {sid}\n"
    assert run.files_written == ["new.txt"]
    assert run.files_deleted == ["old.txt"]
    assert engine.read_file(sid, "new.txt") == b"made"
    assert [info.path for info in engine.list_files(sid)] == ["new.txt"]
    started = _events(engine, sid, "native.started")
    completed = _events(engine, sid, "native.completed")
    assert [event["position"] for event in started] == [run.started_position]
    assert [event["position"] for event in completed] == [run.position]
    assert started[0]["payload"]["argv"][0] == "/bin/sh"
    assert completed[0]["payload"]["exit_code"] == 0
    assert run.started_position < run.position


def test_a_failing_command_is_a_result(engine: sandlog.Engine, sid: str) -> None:
    run = engine.run(sid, ["/bin/sh", "-c", "echo broke >&2; exit 3"])
    assert not run.ok and run.exit_code == 3
    assert run.stderr == "broke\n" and run.stderr_bytes == b"broke\n"
    assert _events(engine, sid, "native.completed")[0]["payload"]["exit_code"] == 3


def test_a_timeout_kills_the_command_and_is_recorded(engine: sandlog.Engine, sid: str) -> None:
    started = time.monotonic()
    run = engine.run(sid, ["/bin/sh", "-c", "sleep 30"], timeout=0.5)
    assert time.monotonic() - started < 20
    assert run.timed_out and run.exit_code is None and run.signal is not None
    assert not run.ok
    assert _events(engine, sid, "native.completed")[0]["payload"]["exit_code"] is None


def test_a_missing_program_is_an_error_and_is_recorded(engine: sandlog.Engine, sid: str) -> None:
    with pytest.raises(sandlog.Error) as raised:
        engine.run(sid, ["/nonexistent/tool", "--flag"])
    assert raised.value.kind == "not_found"
    assert "/nonexistent/tool" in str(raised.value)
    # The attempt is in the log: started, then completed without an exit.
    assert len(_events(engine, sid, "native.started")) == 1
    assert _events(engine, sid, "native.completed")[0]["payload"]["exit_code"] is None


def test_bad_arguments_are_refused_before_anything_is_recorded(engine: sandlog.Engine, sid: str) -> None:
    before = len(list(engine.log()))
    with pytest.raises(sandlog.InvalidInput, match="argv is empty"):
        engine.run(sid, [])
    with pytest.raises(TypeError):
        engine.run(sid, "/bin/true")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        engine.run(sid, ["/bin/echo", 42])  # type: ignore[list-item]
    with pytest.raises(sandlog.InvalidInput, match="NUL"):
        engine.run(sid, ["/bin/echo", "a\0b"])
    with pytest.raises(sandlog.InvalidInput):
        engine.run(sid, ["/bin/true"], timeout=-1)
    with pytest.raises(sandlog.NotFound):
        engine.run("00000000-0000-4000-8000-000000000000", ["/bin/true"])
    assert len(list(engine.log())) == before


def test_bytes_arguments_reach_the_command_unchanged(engine: sandlog.Engine, sid: str) -> None:
    # A name that is not UTF-8 is passed as the same bytes.
    run = engine.run(sid, [b"/bin/sh", b"-c", b'printf x > "$1"', b"sh", b"caf\xe9.txt"])
    assert run.ok, run.stderr
    assert len(run.files_written) == 1

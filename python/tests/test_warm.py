"""Warm kernels in process, cancellation and live output, with the real
python.wasm guest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import List, Tuple

import pytest

import sandlog
from conftest import REPO


def events(engine: sandlog.Engine, sid: str, kind: str) -> List[dict]:
    return [event for event in engine.log(session_id=sid) if event["kind"] == kind]


# Warm sessions


def test_state_is_kept_across_100_warm_calls(engine: sandlog.Engine, sid: str) -> None:
    first = engine.execute(sid, "import json\ncount = 0", warm=True)
    assert first.ok and not first.warm
    for _ in range(100):
        step = engine.execute(sid, "count += 1", warm=True)
        assert step.ok and step.warm, step
    last = engine.execute(sid, "print(count, json.dumps([count]))", warm=True)
    assert last.stdout == "100 [100]\n"
    executed = events(engine, sid, "session.executed")
    assert len(executed) == 102
    assert [event["payload"]["warm"] for event in executed[:2]] == [False, True]
    stats = engine.kernel_stats()
    assert stats["stats"]["kernel_starts"] == 1
    assert stats["stats"]["warm_executions"] == 101


def test_kernel_handle_reset_and_close(engine: sandlog.Engine, sid: str) -> None:
    with engine.kernel(sid) as kernel:
        assert not kernel.alive
        kernel.execute("name = 'kept'")
        assert kernel.alive
        assert kernel.execute("print(name)").stdout == "kept\n"
        assert kernel.reset() is True
        after = kernel.execute("print(globals().get('name'))")
        assert after.stdout == "None\n"
        assert after.state_lost == "reset by the caller"
    assert not engine.kernel(sid).alive
    reasons = [event["payload"]["reason"] for event in events(engine, sid, "kernel.evicted")]
    assert reasons == ["reset by the caller", "closed by the caller"]
    with pytest.raises(sandlog.Error, match="handle is closed"):
        kernel.execute("1")


def test_a_kernel_that_hits_a_limit_restarts_and_says_so(engine: sandlog.Engine, sid: str) -> None:
    engine.execute(sid, "x = 1", warm=True)
    hit = engine.execute(sid, "while True: pass", warm=True, fuel=5_000_000)
    assert hit.outcome == "out_of_fuel"
    after = engine.execute(sid, "print(globals().get('x'))", warm=True)
    assert after.stdout == "None\n"
    assert after.state_lost is not None and "out_of_fuel" in after.state_lost
    assert len(events(engine, sid, "kernel.restarted")) == 1


def test_closing_the_engine_drops_its_kernels_with_a_record(root: Path) -> None:
    engine = sandlog.Engine.init(root)
    sid = engine.create_session()
    engine.execute(sid, "x = 1", warm=True)
    engine.close()
    with sandlog.Engine.open(root) as reopened:
        evicted = events(reopened, sid, "kernel.evicted")
        assert [event["payload"]["reason"] for event in evicted] == ["the kernel pool shut down"]


def test_the_kernel_cap_evicts_the_least_recently_used(engine: sandlog.Engine) -> None:
    cap = engine.kernel_stats()["kernels_max"]
    sids = [engine.create_session() for _ in range(cap + 1)]
    for sid in sids:
        assert engine.execute(sid, "v = 1", warm=True).ok
    assert engine.kernel_stats()["stats"]["kernels"] == cap
    # The first session's kernel made room for the last one.
    again = engine.execute(sids[0], "print(globals().get('v'))", warm=True)
    assert again.stdout == "None\n"
    assert again.state_lost is not None and "KERNELS_MAX" in again.state_lost
    assert len(events(engine, sids[0], "kernel.evicted")) == 1


def test_sessions_run_in_parallel_threads_and_one_session_in_turn(engine: sandlog.Engine) -> None:
    """Two sessions' kernels in two threads; within one session, calls
    from two threads are serialised (each sees the other's effect)."""
    sids = [engine.create_session() for _ in range(2)]
    errors: List[BaseException] = []

    def work(sid: str, times: int) -> None:
        try:
            engine.execute(sid, "n = 0", warm=True)
            for _ in range(times):
                assert engine.execute(sid, "n += 1", warm=True).ok
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(sid, 10)) for sid in sids]
    threads += [threading.Thread(target=lambda: [engine.execute(sids[0], "n += 1", warm=True) for _ in range(10)])]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    # Session 0 had 10 increments from its own worker and 10 from the
    # third thread, but the third may have run before `n = 0`: at least 10.
    first = int(engine.execute(sids[0], "print(n)", warm=True).stdout)
    assert 10 <= first <= 20
    assert engine.execute(sids[1], "print(n)", warm=True).stdout == "10\n"


# Cancellation


@pytest.mark.parametrize("warm", [False, True])
def test_cancel_stops_the_guest_and_is_recorded(engine: sandlog.Engine, sid: str, warm: bool) -> None:
    token = sandlog.CancelToken()
    started = threading.Event()

    def on_output(stream: str, chunk: bytes) -> None:
        started.set()

    canceller = threading.Thread(target=lambda: (started.wait(60), token.cancel()))
    canceller.start()
    result = engine.execute(
        sid,
        "print('running', flush=True)\nwhile True: pass",
        warm=warm,
        cancel=token,
        on_output=on_output,
        timeout=60,
    )
    canceller.join()
    assert token.cancelled
    assert result.outcome == "cancelled"
    assert result.stdout == "running\n"
    executed = events(engine, sid, "session.executed")
    assert executed[-1]["payload"]["outcome"] == "cancelled"
    if warm:
        restarted = events(engine, sid, "kernel.restarted")
        assert len(restarted) == 1 and "cancelled" in restarted[0]["payload"]["reason"]
        assert engine.execute(sid, "print(1)", warm=True).state_lost is not None


def test_a_token_cancelled_before_the_run_stops_it_at_once(engine: sandlog.Engine, sid: str) -> None:
    token = sandlog.CancelToken()
    token.cancel()
    result = engine.execute(sid, "while True: pass", cancel=token, timeout=60)
    assert result.outcome == "cancelled"


def test_bad_cancel_and_callback_arguments_are_refused(engine: sandlog.Engine, sid: str) -> None:
    with pytest.raises(TypeError, match="CancelToken"):
        engine.execute(sid, "1", cancel=object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="on_output must be callable"):
        engine.execute(sid, "1", on_output=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="warm must be a bool"):
        engine.execute(sid, "1", warm="yes")  # type: ignore[arg-type]


# Live output


@pytest.mark.parametrize("warm", [False, True])
def test_streamed_output_is_the_recorded_output_in_order(engine: sandlog.Engine, sid: str, warm: bool) -> None:
    chunks: List[Tuple[str, bytes]] = []
    code = "import sys\nfor i in range(5):\n    print('out', i, flush=True)\n    print('err', i, file=sys.stderr, flush=True)\n"
    result = engine.execute(sid, code, warm=warm, on_output=lambda stream, chunk: chunks.append((stream, chunk)))
    assert result.ok
    streamed_out = b"".join(chunk for stream, chunk in chunks if stream == "stdout")
    streamed_err = b"".join(chunk for stream, chunk in chunks if stream == "stderr")
    assert streamed_out == result.stdout_bytes
    assert streamed_err == result.stderr_bytes
    # Interleaved as written: out 0, err 0, out 1, ...
    assert [stream for stream, _ in chunks][:4] == ["stdout", "stderr", "stdout", "stderr"]
    # And what the log holds.
    payload = events(engine, sid, "session.executed")[-1]["payload"]
    assert (payload["stdout_bytes"], payload["stderr_bytes"]) == (len(streamed_out), len(streamed_err))


def test_streamed_output_is_bounded_by_the_output_limit(engine: sandlog.Engine, sid: str) -> None:
    chunks: List[bytes] = []
    result = engine.execute(
        sid,
        "import sys\nsys.stdout.write('x' * (5 * 1024 * 1024))\nsys.stdout.flush()",
        on_output=lambda stream, chunk: chunks.append(chunk),
    )
    assert result.stdout_truncated
    assert b"".join(chunks) == result.stdout_bytes
    assert 0 < len(result.stdout_bytes) < 5 * 1024 * 1024


def test_a_callback_that_raises_does_not_stop_the_guest(
    engine: sandlog.Engine, sid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: List[BaseException] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda report: seen.append(report.exc_value))

    def broken(stream: str, chunk: bytes) -> None:
        raise ValueError("callback broke")

    result = engine.execute(sid, "print(1)\nprint(2)", on_output=broken)
    assert result.ok and result.stdout == "1\n2\n"
    assert seen and all(isinstance(error, ValueError) for error in seen)


# The package


def test_version_and_runtimes_without_environment(tmp_path: Path) -> None:
    """A new process with no SANDLOG_RUNTIMES_DIR finds python.wasm in the
    per-user directory the CLI installs to (`sandlog runtimes install`)."""
    assert sandlog.__version__ and sandlog.__version__[0].isdigit()
    home = tmp_path / "home"
    user_runtimes = home / ".local" / "share" / "sandlog" / "runtimes"
    user_runtimes.mkdir(parents=True)
    (user_runtimes / "python.wasm").symlink_to(Path(os.environ["SANDLOG_RUNTIMES_DIR"]) / "python.wasm")
    env = {key: value for key, value in os.environ.items() if key not in ("SANDLOG_RUNTIMES_DIR", "XDG_DATA_HOME")}
    env["HOME"] = str(home)
    script = (
        "import sandlog, sys\n"
        "e = sandlog.Engine.init(sys.argv[1])\n"
        "print(e.execute(e.create_session(), 'print(6 * 7)').stdout, end='')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "root")], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "42\n"


def test_the_agent_loop_example_runs(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "python" / "examples" / "agent_loop.py"), str(tmp_path / "root")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "bundle verified" in done.stdout

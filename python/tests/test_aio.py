"""sandlog.aio against a real root and the real python.wasm guest."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import List, Tuple

import pytest
import pytest_asyncio

import sandlog
import sandlog.aio


@pytest_asyncio.fixture
async def aengine(root: Path):  # type: ignore[no-untyped-def]
    engine = await sandlog.aio.Engine.init(root)
    try:
        yield engine
    finally:
        await engine.close()


@pytest.mark.asyncio
async def test_awaitable_twins_round_trip(aengine: sandlog.aio.Engine) -> None:
    sid = await aengine.create_session({"agent": "a"})
    await aengine.write_file(sid, "in.txt", b"hello")
    run = await aengine.execute(sid, "print(open('/app/in.txt').read())\nopen('/app/out.txt','w').write('x')")
    assert run.ok and run.stdout == "hello\n"
    assert [f.path for f in await aengine.list_files(sid)] == ["in.txt", "out.txt"]
    assert await aengine.read_file(sid, "out.txt") == b"x"
    assert (await aengine.session(sid)).exec_count == 1
    assert (await aengine.verify()).ok
    assert len(await aengine.log(session_id=sid)) >= 3
    assert await aengine.sync() == 0  # not a node of a shared log
    assert isinstance(aengine.blocking, sandlog.Engine)


@pytest.mark.asyncio
async def test_the_loop_is_not_blocked_while_a_guest_runs(aengine: sandlog.aio.Engine) -> None:
    sid = await aengine.create_session()
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    task = asyncio.create_task(ticker())
    run = await aengine.execute(sid, "import time\ntime.sleep(1)")
    task.cancel()
    assert run.ok
    # A blocked loop would not have ticked at all during the second.
    assert ticks > 10


@pytest.mark.asyncio
async def test_warm_kernel_keeps_state(aengine: sandlog.aio.Engine) -> None:
    sid = await aengine.create_session()
    async with aengine.kernel(sid) as kernel:
        await kernel.execute("total = 0")
        for step in range(20):
            assert (await kernel.execute(f"total += {step}")).warm
        assert (await kernel.execute("print(total)")).stdout == "190\n"
    stats = await aengine.kernel_stats()
    assert stats["stats"]["kernels"] == 0


@pytest.mark.asyncio
@pytest.mark.parametrize("warm", [False, True])
async def test_cancelling_the_task_stops_the_guest_and_records_it(
    aengine: sandlog.aio.Engine, warm: bool
) -> None:
    sid = await aengine.create_session()
    started = asyncio.Event()

    def on_output(stream: str, chunk: bytes) -> None:
        started.set()

    task = asyncio.create_task(
        aengine.execute(sid, "print('go', flush=True)\nwhile True: pass", warm=warm, timeout=120, on_output=on_output)
    )
    await asyncio.wait_for(started.wait(), 60)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # Recorded before the cancellation reached the task.
    executed = [e for e in await aengine.log(session_id=sid) if e["kind"] == "session.executed"]
    assert [e["payload"]["outcome"] for e in executed] == ["cancelled"]
    assert executed[0]["payload"]["stdout_bytes"] == len(b"go\n")
    # The session is usable at once.
    assert (await aengine.execute(sid, "print(2)", warm=warm)).stdout == "2\n"


@pytest.mark.asyncio
async def test_on_output_runs_on_the_loop_in_order_before_the_result(aengine: sandlog.aio.Engine) -> None:
    sid = await aengine.create_session()
    loop = asyncio.get_running_loop()
    chunks: List[Tuple[str, bytes]] = []

    def on_output(stream: str, chunk: bytes) -> None:
        assert asyncio.get_running_loop() is loop
        chunks.append((stream, chunk))

    code = "import sys\nfor i in range(3):\n    print(i, flush=True)\n    print(-i, file=sys.stderr, flush=True)"
    run = await aengine.execute(sid, code, warm=True, on_output=on_output)
    assert b"".join(c for s, c in chunks if s == "stdout") == run.stdout_bytes == b"0\n1\n2\n"
    assert b"".join(c for s, c in chunks if s == "stderr") == run.stderr_bytes


@pytest.mark.asyncio
async def test_eight_sessions_execute_concurrently(aengine: sandlog.aio.Engine) -> None:
    """Eight warm sessions from one loop: all succeed with their own state,
    and the runs overlap in time (each guest sleeps 0.5 s; one after the
    other would take at least 4 s of guest time, so overlapping is checked
    by the guests' own clocks, not by timing the test)."""
    sids = [await aengine.create_session() for _ in range(8)]
    await asyncio.gather(*(aengine.execute(sid, f"me = {n}", warm=True) for n, sid in enumerate(sids)))
    code = "import time\nstart = time.time()\ntime.sleep(0.5)\nprint(me, start, time.time())"
    runs = await asyncio.gather(*(aengine.execute(sid, code, warm=True) for sid in sids))
    spans = []
    for n, run in enumerate(runs):
        me, start, end = run.stdout.split()
        assert int(me) == n
        spans.append((float(start), float(end)))
    latest_start = max(start for start, _ in spans)
    earliest_end = min(end for _, end in spans)
    # Some instant when at least two guests were running at once.
    overlapping = sum(1 for start, end in spans if start < earliest_end and end > latest_start)
    assert latest_start < earliest_end or overlapping >= 2

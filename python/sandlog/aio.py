"""asyncio twins of :mod:`sandlog`'s blocking calls.

Every call runs the blocking engine call on a thread of the engine's own
pool, so the event loop never blocks, and sessions executing at once run
in parallel (the engine releases the GIL while a guest runs)::

    import sandlog.aio

    async with await sandlog.aio.Engine.init(root) as engine:
        sid = await engine.create_session()
        kernel = engine.kernel(sid)
        await kernel.execute("x = 6 * 7")
        print((await kernel.execute("print(x)")).stdout)

Cancelling a task awaiting :meth:`Engine.execute` stops the guest: the
execution is recorded with outcome ``cancelled`` before the task's
:class:`asyncio.CancelledError` propagates. ``on_output`` callbacks run on
the event loop, in the order the guest wrote, all before the awaited
execution returns.
"""

from __future__ import annotations

import asyncio
import functools
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, TypeVar, Union

import sandlog
from sandlog import CancelToken, Execution, FileInfo, NativeRun, OutputCallback, PathLike, Session, VerifyResult

__all__ = ["Engine", "AsyncEngine", "Kernel"]

T = TypeVar("T")

#: Threads an engine's pool runs blocking calls on by default: enough for
#: every warm kernel (``KERNELS_MAX``, 8) to execute at once with room for
#: reads and writes beside them.
WORKERS_DEFAULT = 16


class Engine:
    """An open root for asyncio code: :class:`sandlog.Engine`'s calls as
    coroutines. Open with :meth:`open` or :meth:`init`, or wrap an open
    :class:`sandlog.Engine`."""

    __slots__ = ("_engine", "_pool")

    def __init__(self, engine: sandlog.Engine, *, workers: int = WORKERS_DEFAULT) -> None:
        if not isinstance(engine, sandlog.Engine):
            raise TypeError(f"engine must be a sandlog.Engine, not {type(engine).__name__}")
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise sandlog.InvalidInput(f"workers {workers!r}: must be a positive int (threads for blocking calls)")
        self._engine = engine
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sandlog-aio")

    @classmethod
    async def open(cls, root: PathLike, *, workers: int = WORKERS_DEFAULT, **options: Any) -> "Engine":
        """:meth:`sandlog.Engine.open` without blocking the loop."""
        engine = await asyncio.get_running_loop().run_in_executor(
            None, functools.partial(sandlog.Engine.open, root, **options)
        )
        return cls(engine, workers=workers)

    @classmethod
    async def init(cls, root: PathLike, *, workers: int = WORKERS_DEFAULT, **options: Any) -> "Engine":
        """:meth:`sandlog.Engine.init` without blocking the loop."""
        engine = await asyncio.get_running_loop().run_in_executor(
            None, functools.partial(sandlog.Engine.init, root, **options)
        )
        return cls(engine, workers=workers)

    @property
    def blocking(self) -> sandlog.Engine:
        """The blocking engine underneath (same root, same kernels)."""
        return self._engine

    async def _call(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(function, *args, **kwargs))

    async def close(self) -> None:
        """Drops the warm kernels (recorded) and closes the engine."""
        await self._call(self._engine.close)
        self._pool.shutdown(wait=False)

    @property
    def closed(self) -> bool:
        return self._engine.closed

    async def __aenter__(self) -> "Engine":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<sandlog.aio.Engine {self._engine!r}>"

    # Executions

    async def execute(
        self,
        session_id: str,
        code: str,
        *,
        runtime: str = "python",
        timeout: Union[float, timedelta, None] = None,
        fuel: Optional[int] = None,
        memory: Optional[int] = None,
        warm: bool = False,
        on_output: Optional[OutputCallback] = None,
    ) -> Execution:
        """:meth:`sandlog.Engine.execute` as a coroutine. Cancelling the
        awaiting task stops the guest; the execution is recorded (outcome
        ``cancelled``) before :class:`asyncio.CancelledError` is raised.
        ``on_output(stream, chunk)`` runs on the event loop."""
        loop = asyncio.get_running_loop()
        token = CancelToken()
        sink: Optional[OutputCallback] = None
        if on_output is not None:
            if not callable(on_output):
                raise TypeError(f"on_output must be callable, not {type(on_output).__name__}")
            callback = on_output

            def on_loop(stream: str, chunk: bytes) -> None:
                # FIFO with the executor's completion callback: every chunk
                # reaches the loop before the awaited result does.
                loop.call_soon_threadsafe(callback, stream, chunk)

            sink = on_loop

        future = loop.run_in_executor(
            self._pool,
            functools.partial(
                self._engine.execute,
                session_id,
                code,
                runtime=runtime,
                timeout=timeout,
                fuel=fuel,
                memory=memory,
                warm=warm,
                cancel=token,
                on_output=sink,
            ),
        )
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            token.cancel()
            # The guest stops within a tick; wait for its record so that a
            # cancelled task leaves a complete log behind.
            while not future.done():
                try:
                    await asyncio.shield(future)
                except asyncio.CancelledError:
                    continue
                except Exception:
                    break
            raise

    def kernel(self, session_id: str) -> "Kernel":
        """The session's warm kernel (see :meth:`sandlog.Engine.kernel`)."""
        return Kernel(self, self._engine.kernel(session_id))

    async def kernel_stats(self) -> Dict[str, Any]:
        return await self._call(self._engine.kernel_stats)

    async def reap_kernels(self) -> int:
        return await self._call(self._engine.reap_kernels)

    async def run(self, session_id: str, argv: Sequence[Union[str, bytes]], **options: Any) -> NativeRun:
        """:meth:`sandlog.Engine.run` (a trusted native command)."""
        return await self._call(self._engine.run, session_id, argv, **options)

    # Sessions

    async def create_session(self, labels: Optional[Mapping[str, str]] = None, **options: Any) -> str:
        return await self._call(self._engine.create_session, labels, **options)

    async def session(self, session_id: str) -> Session:
        return await self._call(self._engine.session, session_id)

    async def sessions(self, *, group: Optional[str] = None) -> List[Session]:
        return await self._call(self._engine.sessions, group=group)

    async def delete_session(self, session_id: str) -> int:
        return await self._call(self._engine.delete_session, session_id)

    async def hold(self, session_id: str, reason: str) -> None:
        await self._call(self._engine.hold, session_id, reason)

    async def release(self, session_id: str, reason: Optional[str] = None) -> None:
        await self._call(self._engine.release, session_id, reason)

    async def fork(self, session_id: str, **options: Any) -> Any:
        return await self._call(self._engine.fork, session_id, **options)

    async def prune(self, **options: Any) -> Any:
        return await self._call(self._engine.prune, **options)

    # Files

    async def list_files(self, session_id: str, pattern: Optional[str] = None) -> List[FileInfo]:
        return await self._call(self._engine.list_files, session_id, pattern)

    async def read_file(self, session_id: str, path: str) -> bytes:
        return await self._call(self._engine.read_file, session_id, path)

    async def write_file(self, session_id: str, path: str, data: bytes, *, overwrite: bool = False) -> FileInfo:
        return await self._call(self._engine.write_file, session_id, path, data, overwrite=overwrite)

    async def delete_path(self, session_id: str, path: str, *, recursive: bool = False) -> List[str]:
        return await self._call(self._engine.delete_path, session_id, path, recursive=recursive)

    async def read_file_at(self, session_id: str, path: str, **options: Any) -> bytes:
        return await self._call(self._engine.read_file_at, session_id, path, **options)

    async def sync_session(self, session_id: str) -> Any:
        return await self._call(self._engine.sync_session, session_id)

    # The log and its proofs

    async def log(self, **options: Any) -> List[Dict[str, Any]]:
        """The log's events (as :meth:`sandlog.Engine.log`), collected."""
        return await self._call(lambda: list(self._engine.log(**options)))

    async def executions(self, session_id: str, *, excerpt: int = 4096) -> List[Dict[str, Any]]:
        return await self._call(self._engine.executions, session_id, excerpt=excerpt)

    async def verify(self) -> VerifyResult:
        return await self._call(self._engine.verify)

    async def metrics(self) -> Dict[str, float]:
        return await self._call(self._engine.metrics)

    async def reconcile(self, dry_run: bool = False) -> Any:
        return await self._call(self._engine.reconcile, dry_run)

    async def sync(self) -> int:
        return await self._call(self._engine.sync)

    async def adopt(self, source: PathLike) -> Any:
        return await self._call(self._engine.adopt, source)

    async def sign_checkpoint(self, key: PathLike) -> str:
        return await self._call(self._engine.sign_checkpoint, key)

    async def verify_checkpoint(self, checkpoint: str, vkey: str) -> Dict[str, Any]:
        return await self._call(self._engine.verify_checkpoint, checkpoint, vkey)

    async def export_evidence(self, session_id: str, *, key: Optional[PathLike] = None) -> bytes:
        return await self._call(self._engine.export_evidence, session_id, key=key)


#: The same class under the name the issue and older code use.
AsyncEngine = Engine


class Kernel:
    """A session's warm kernel for asyncio code (see :meth:`Engine.kernel`)."""

    __slots__ = ("_engine", "_kernel")

    def __init__(self, engine: Engine, kernel: sandlog.Kernel) -> None:
        self._engine = engine
        self._kernel = kernel

    @property
    def session_id(self) -> str:
        return self._kernel.session_id

    async def execute(
        self,
        code: str,
        *,
        timeout: Union[float, timedelta, None] = None,
        fuel: Optional[int] = None,
        memory: Optional[int] = None,
        on_output: Optional[OutputCallback] = None,
    ) -> Execution:
        """:meth:`Engine.execute` with ``warm=True``; cancelling stops the
        guest (and ends the kernel: its next execution reports
        ``state_lost``)."""
        return await self._engine.execute(
            self._kernel.session_id,
            code,
            timeout=timeout,
            fuel=fuel,
            memory=memory,
            warm=True,
            on_output=on_output,
        )

    async def reset(self) -> bool:
        return await self._engine._call(self._kernel.reset)

    async def close(self) -> None:
        await self._engine._call(self._kernel.close)

    async def __aenter__(self) -> "Kernel":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

"""sandlog for Python: event-sourced storage for sandboxed code-execution
workspaces.

Every session is a workspace directory in a root; every change (a session
created, code run, a file written or deleted, a prune) is an event appended
to a hash-chained log. Guest code runs in a WebAssembly sandbox (CPython
for WASI) that sees only its session's workspace as ``/app``.

>>> import sandlog
>>> with sandlog.Engine.init(root) as engine:            # doctest: +SKIP
...     sid = engine.create_session()
...     print(engine.execute(sid, "print(6 * 7)").stdout)

An :class:`Engine` is safe to share between threads: the GIL is released
while the engine runs code, touches files or appends to the log. Errors
are :class:`Error` subclasses; a guest that fails, times out or runs out of
fuel is a result (:attr:`Execution.outcome`), not an exception.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from . import _sandlog
from ._errors import Conflict, Error, IntegrityError, InvalidInput, LimitExceeded, NotFound

__all__ = [
    "Engine",
    "Kernel",
    "CancelToken",
    "OutputCallback",
    "generate_key",
    "verify_evidence",
    "Session",
    "Execution",
    "NativeRun",
    "FileInfo",
    "PruneResult",
    "VerifyResult",
    "ReconcileResult",
    "AdoptResult",
    "SyncResult",
    "Error",
    "NotFound",
    "Conflict",
    "IntegrityError",
    "LimitExceeded",
    "InvalidInput",
]

#: The package's version, the same as ``sandlog --version`` prints.
__version__: str = _sandlog.__version__

PathLike = Union[str, "os.PathLike[str]"]

#: Cancels an execution when set: pass one as ``execute(..., cancel=token)``
#: and call ``token.cancel()`` from any thread. The guest stops within one
#: epoch tick of running code (a guest asleep when its sleep ends) and the
#: execution is recorded with outcome ``cancelled``.
CancelToken = _sandlog.CancelToken

#: ``on_output(stream, chunk)``: ``stream`` is ``"stdout"`` or ``"stderr"``,
#: ``chunk`` the bytes the guest just wrote, as kept under the output limit.
OutputCallback = Callable[[str, bytes], None]

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_U64_MAX = 2**64 - 1
_I64_MAX = 2**63 - 1


def _from_micros(micros: Optional[int]) -> Optional[datetime]:
    if micros is None:
        return None
    try:
        return _EPOCH + timedelta(microseconds=micros)
    except OverflowError:
        # Beyond what datetime holds (years past 9999): saturate, as the
        # engine does when it formats such an instant.
        return datetime.max.replace(tzinfo=timezone.utc) if micros > 0 else datetime.min.replace(tzinfo=timezone.utc)


def _text(name: str, value: object) -> str:
    """A str argument that can be encoded as UTF-8."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise InvalidInput(f"{name}: not valid Unicode text ({error.reason} at index {error.start})") from None
    return value


def _optional_text(name: str, value: object) -> Optional[str]:
    return None if value is None else _text(name, value)


def _flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, not {type(value).__name__}")
    return value


def _count(name: str, value: object) -> Optional[int]:
    """An optional non-negative integer that fits in 64 bits."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < 0 or value > _U64_MAX:
        raise InvalidInput(f"{name} {value}: must be between 0 and {_U64_MAX}")
    return value


def _argv(value: object) -> List[str]:
    """A command line: a non-empty list or tuple of str or bytes (bytes
    are passed as the same bytes, as :func:`os.fsdecode` maps them)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise TypeError(f"argv must be a list of str, not {type(value).__name__}")
    if not value:
        raise InvalidInput("argv is empty: give the program and its arguments, as in ['make', 'test']")
    argv = []
    for index, item in enumerate(value):
        if isinstance(item, bytes):
            item = os.fsdecode(item)
        if not isinstance(item, str):
            raise TypeError(f"argv[{index}] must be a str, not {type(item).__name__}")
        argv.append(item)
    return argv


def _seconds(name: str, value: object) -> Optional[float]:
    if value is None:
        return None
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be seconds (int or float) or a timedelta, not {type(value).__name__}")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds <= 0 or seconds > 365 * 86400:
        raise InvalidInput(f"{name} {value!r}: must be a positive number of seconds, at most a year")
    return seconds


def _store(store: Optional[str]) -> Optional[str]:
    """Checks a ``store`` argument: ``None`` or a non-empty connection string."""
    if store is None:
        return None
    if not isinstance(store, str):
        raise TypeError(f"store must be a str or None, not {type(store).__name__}")
    if not store.strip() or "\x00" in store:
        raise InvalidInput(f"store {store!r}: give a PostgreSQL URL (postgres://user@host/db), or None for the root's own file")
    return store


def _path(name: str, value: object) -> str:
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str or os.PathLike, not {type(value).__name__}")
    _text(name, value)
    if "\0" in value:
        raise InvalidInput(f"{name}: contains a NUL character")
    return value


def _labels(value: object) -> Dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError(f"labels must be a mapping of str to str, not {type(value).__name__}")
    labels: Dict[str, str] = {}
    for key, item in value.items():
        labels[_text("label key", key)] = _text(f"label {key!r}", item)
    return labels


def _bytes(name: str, value: object) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"{name} must be bytes (or bytearray, memoryview), not {type(value).__name__}")


def _micros(name: str, value: object) -> int:
    """An aware datetime as microseconds since the epoch (clamped to i64)."""
    if not isinstance(value, datetime):
        raise TypeError(f"{name} must be a datetime, not {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidInput(f"{name} must be an aware datetime (with a tzinfo, e.g. timezone.utc)")
    delta = value - _EPOCH
    micros = (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds
    return max(-_I64_MAX, min(_I64_MAX, micros))


def _cut(position: object, at: object) -> Tuple[Optional[int], Optional[int]]:
    if position is not None and at is not None:
        raise InvalidInput("give position or at, not both")
    return _count("position", position), None if at is None else _micros("at", at)


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


@dataclasses.dataclass(frozen=True)
class Session:
    """A session, as the log's read model knows it."""

    session_id: str
    """The session's id (a UUID)."""
    status: str
    """``active``, ``pruning``, ``pruned``, ``deleting``, ``deleted``."""
    created_at: Optional[datetime]
    """When it was created (aware, UTC); ``None`` for an adopted legacy session."""
    updated_at: Optional[datetime]
    """Last activity (aware, UTC); ``None`` for an adopted legacy session."""
    exec_count: int
    """Executions run in it."""
    bytes: int
    """Total size of its files."""
    file_count: int = 0
    """Number of files."""
    legacy: bool = False
    """Adopted without valid metadata: never pruned."""
    labels: Dict[str, str] = dataclasses.field(default_factory=dict)
    """Labels given at creation."""
    last_outcome: Optional[str] = None
    """The last execution's outcome."""
    held: Optional[str] = None
    """The reason of a legal hold in force (never pruned, deleted or erased while held)."""
    group: Optional[str] = None
    """The task group given at creation."""
    max_size: Optional[int] = None
    """The size limit given at creation, bytes (else the root's default applies)."""
    node: Optional[str] = None
    """The node (host) that created it; only that node runs code in it, changes
    its files or deletes it when the log is shared."""

    @classmethod
    def _from_native(cls, raw: Dict[str, Any]) -> "Session":
        return cls(
            session_id=raw["session_id"],
            status=raw["status"],
            created_at=_from_micros(raw["created_at_us"]),
            updated_at=_from_micros(raw["updated_at_us"]),
            exec_count=raw["exec_count"],
            bytes=raw["bytes"],
            file_count=raw["file_count"],
            legacy=raw["legacy"],
            labels=dict(raw["labels"]),
            last_outcome=raw["last_outcome"],
            held=raw["held"],
            group=raw["group"],
            max_size=raw["max_size"],
            node=raw["node"],
        )


@dataclasses.dataclass(frozen=True)
class Execution:
    """What one execution did. A guest failure is a result: check ``outcome``."""

    outcome: str
    """``ok``, ``error``, ``timeout``, ``out_of_fuel``, ``memory``, ``quota``, ``trap``, ``limit_exceeded``, ``cancelled``."""
    exit_code: Optional[int]
    """The guest's exit code, when it exited."""
    stdout: str
    """Standard output (UTF-8, undecodable bytes replaced)."""
    stderr: str
    """Standard error (UTF-8, undecodable bytes replaced)."""
    files_written: List[str]
    """Workspace paths the guest created or changed."""
    files_deleted: List[str]
    """Workspace paths the guest deleted."""
    duration_ms: int
    """Wall time of the run."""
    fuel_consumed: int
    """Fuel (the deterministic CPU measure) used."""
    stdout_bytes: bytes = b""
    """Standard output as bytes."""
    stderr_bytes: bytes = b""
    """Standard error as bytes."""
    stdout_truncated: bool = False
    """Whether stdout was cut at the output limit."""
    stderr_truncated: bool = False
    """Whether stderr was cut at the output limit."""
    message: Optional[str] = None
    """The engine's note on a non-``ok`` outcome."""
    position: int = 0
    """Log position of the ``session.executed`` event."""
    warm: bool = False
    """Whether it ran in a warm kernel that had run earlier executions."""
    state_lost: Optional[str] = None
    """For a warm execution: why the session's previous kernel (its
    variables and imports) was dropped since its last execution, if it was."""

    @property
    def ok(self) -> bool:
        """Whether the guest exited 0."""
        return self.outcome == "ok"

    @classmethod
    def _from_native(cls, raw: Dict[str, Any]) -> "Execution":
        return cls(
            outcome=raw["outcome"],
            exit_code=raw["exit_code"],
            stdout=_decode(raw["stdout"]),
            stderr=_decode(raw["stderr"]),
            files_written=list(raw["files_written"]),
            files_deleted=list(raw["files_deleted"]),
            duration_ms=raw["duration_ms"],
            fuel_consumed=raw["fuel_consumed"],
            stdout_bytes=raw["stdout"],
            stderr_bytes=raw["stderr"],
            stdout_truncated=raw["stdout_truncated"],
            stderr_truncated=raw["stderr_truncated"],
            message=raw["message"],
            position=raw["position"],
            warm=bool(raw.get("warm", False)),
            state_lost=raw.get("state_lost"),
        )


@dataclasses.dataclass(frozen=True)
class NativeRun:
    """What a native command did (see :meth:`Engine.run`). A command that
    fails is a result: check ``ok``."""

    exit_code: Optional[int]
    """Its exit code, when it exited."""
    signal: Optional[int]
    """The signal that ended it, when one did."""
    timed_out: bool
    """Whether the timeout killed it."""
    stdout: str
    """Standard output (UTF-8, undecodable bytes replaced)."""
    stderr: str
    """Standard error (UTF-8, undecodable bytes replaced)."""
    files_written: List[str]
    """Workspace paths it created or changed (recorded)."""
    files_deleted: List[str]
    """Workspace paths it deleted (recorded)."""
    duration_ms: int
    """Wall time of the run."""
    stdout_bytes: bytes = b""
    """Standard output as bytes."""
    stderr_bytes: bytes = b""
    """Standard error as bytes."""
    stdout_truncated: bool = False
    """Whether stdout was cut at the output limit."""
    stderr_truncated: bool = False
    """Whether stderr was cut at the output limit."""
    started_position: int = 0
    """Log position of the ``native.started`` event."""
    position: int = 0
    """Log position of the ``native.completed`` event."""

    @property
    def ok(self) -> bool:
        """Whether it exited 0."""
        return self.exit_code == 0

    @classmethod
    def _from_native(cls, raw: Dict[str, Any]) -> "NativeRun":
        return cls(
            exit_code=raw["exit_code"],
            signal=raw["signal"],
            timed_out=raw["timed_out"],
            stdout=_decode(raw["stdout"]),
            stderr=_decode(raw["stderr"]),
            files_written=list(raw["files_written"]),
            files_deleted=list(raw["files_deleted"]),
            duration_ms=raw["duration_ms"],
            stdout_bytes=raw["stdout"],
            stderr_bytes=raw["stderr"],
            stdout_truncated=raw["stdout_truncated"],
            stderr_truncated=raw["stderr_truncated"],
            started_position=raw["started_position"],
            position=raw["position"],
        )


@dataclasses.dataclass(frozen=True)
class FileInfo:
    """A file of a session, as recorded in the log."""

    path: str
    """Workspace-relative path."""
    size: int
    """Size in bytes."""
    blake3: str
    """blake3 of the contents, hex."""
    updated_at: datetime
    """When it was last written (aware, UTC)."""

    @classmethod
    def _from_native(cls, raw: Tuple[str, int, str, int]) -> "FileInfo":
        path, size, blake3, updated_us = raw
        return cls(path=path, size=size, blake3=blake3, updated_at=_from_micros(updated_us) or _EPOCH)


@dataclasses.dataclass(frozen=True)
class PruneResult:
    """What a prune did (the seed's field names)."""

    deleted_sessions: List[str]
    """Sessions deleted (in a dry run: that a real run would delete now)."""
    skipped_sessions: List[str]
    """Sessions not pruned: legacy ones (no metadata), held ones, ones in use."""
    reclaimed_bytes: int
    """Bytes freed (in a dry run: the sessions' recorded sizes)."""
    errors: Dict[str, str]
    """Per-session errors; the run went on past each."""
    dry_run: bool
    """Whether nothing was changed."""
    skipped_reasons: Dict[str, str] = dataclasses.field(default_factory=dict)
    """Why each skipped session was skipped."""
    duration_ms: int = 0
    """Wall time."""

    def __str__(self) -> str:
        text = f"{len(self.deleted_sessions)} deleted, {len(self.skipped_sessions)} skipped, {self.reclaimed_bytes} bytes reclaimed"
        if self.errors:
            text += f", {len(self.errors)} failed"
        if self.dry_run:
            text += " (dry run)"
        return text


@dataclasses.dataclass(frozen=True)
class VerifyResult:
    """What :meth:`Engine.verify` found (a broken chain raises :class:`IntegrityError`)."""

    ok: bool
    """Whether the read models agree with the log and every kept content is there."""
    events: int
    """Events checked."""
    head: str
    """The head event's hash, hex."""
    position: int
    """The head position."""
    read_model_mismatches: List[str]
    """Differences between the read models and a fold of the log."""
    missing_blobs: List[str] = dataclasses.field(default_factory=list)
    """Kept contents the events name whose bytes are neither stored nor erased."""


@dataclasses.dataclass(frozen=True)
class ReconcileResult:
    """What :meth:`Engine.reconcile` did (or, dry, would do)."""

    actions: List[Dict[str, Any]]
    """The planned actions, as the engine describes them."""
    orphans: List[str]
    """Directories with no session, quarantined (or to quarantine)."""
    intents_finished: int
    """Pending prune/delete intents finished."""
    drift: List[Dict[str, Any]]
    """Workspace drift recorded."""
    errors: Dict[str, str]
    """Per-action errors."""
    dry_run: bool
    """Whether nothing was changed."""
    raw: Dict[str, Any] = dataclasses.field(default_factory=dict, repr=False)
    """The whole report."""


@dataclasses.dataclass(frozen=True)
class AdoptResult:
    """What :meth:`Engine.adopt` did with a directory of seed workspaces."""

    adopted: List[str]
    """Sessions adopted with valid metadata (their timestamps kept)."""
    legacy: List[str]
    """Sessions adopted without metadata: kept, never pruned."""
    corrupted: List[str]
    """Sessions adopted with unreadable metadata (kept as evidence): legacy too."""
    skipped: List[Tuple[str, str]]
    """Entries not adopted, with the reason."""
    raw: Dict[str, Any] = dataclasses.field(default_factory=dict, repr=False)
    """The whole report."""


@dataclasses.dataclass(frozen=True)
class SyncResult:
    """What :meth:`Engine.sync_session` found and recorded."""

    recorded: bool
    """Whether anything was appended (nothing is when nothing changed)."""
    files_written: List[str]
    """Files recorded as written."""
    files_deleted: List[str]
    """Files recorded as deleted."""
    position: Optional[int] = None
    """Log position of ``session.synced``, when recorded."""
    raw: Dict[str, Any] = dataclasses.field(default_factory=dict, repr=False)
    """The whole report."""


class Engine:
    """A sandlog root, open. Share one between threads; close it (or use
    ``with``) when done.

    Open with :meth:`Engine.open` (an existing root) or :meth:`Engine.init`
    (creating it if needed).
    """

    __slots__ = ("_native", "__weakref__")

    def __init__(self, native: "_sandlog.Engine") -> None:
        if not isinstance(native, _sandlog.Engine):
            raise TypeError("use sandlog.Engine.open(root) or sandlog.Engine.init(root)")
        self._native = native

    @classmethod
    def init(cls, root: PathLike, *, store: Optional[str] = None, node: Optional[str] = None) -> "Engine":
        """Creates a root at ``root`` if there is none (its directories, the
        database, the anchor), then opens it. With ``store``, a PostgreSQL
        URL, the root is a node of that shared log (see :meth:`open`)."""
        path = _path("root", root)
        store = _store(store)
        node = _optional_text("node", node)
        if store is not None:
            return cls(_sandlog.Engine.open(path, None, store, True, node))
        _sandlog.Engine.init(path)
        return cls(_sandlog.Engine.open(path, None, None, False, node))

    @classmethod
    def open(
        cls,
        root: PathLike,
        *,
        store: Optional[str] = None,
        node: Optional[str] = None,
        correlation_id: Optional[str] = None,
        prune_batch_sessions: Optional[int] = None,
    ) -> "Engine":
        """Opens an existing root; raises :class:`NotFound` if there is none.

        ``store``: ``None`` keeps the log in the root's own SQLite file; a
        PostgreSQL URL (``postgres://user@host/db``) or ``key=value``
        connection string makes the root a node of a log shared by several
        hosts: writes commit there, and the root keeps its workspaces and a
        replica of the log that reads are served from. ``correlation_id`` (a
        task id such as ``"task-42"``, or a UUID) is recorded on every event
        this handle appends, as the CLI's ``--correlation-id`` records it;
        ``sandlog log --correlation task-42`` finds them. ``node`` names the
        host this handle acts for on a shared log (default: the root's
        ``node`` file, else the host name): sessions record the node that
        created them, and only that node runs code in them, changes their
        files, deletes, prunes or reconciles them.

        ``prune_batch_sessions``: how many sessions :meth:`prune` destroys
        per batch (one commit of intents and one of completions each).
        Each session of the batches a prune holds is an open lease file, so
        by default the batch follows the process's soft limit of open
        files: 128 at the usual 1,024, 512 (the most) from 4,096. This
        package never changes that limit; a platform that raises it, or
        sets this, gets fewer, bigger commits."""
        path = _path("root", root)
        store = _store(store)
        node = _optional_text("node", node)
        if correlation_id is not None and not isinstance(correlation_id, str):
            raise TypeError(f"correlation_id must be a str, not {type(correlation_id).__name__}")
        # Zero is refused by the native open, which takes it directly too.
        batch = _count("prune_batch_sessions", prune_batch_sessions)
        return cls(_sandlog.Engine.open(path, correlation_id, store, False, node, batch))

    def close(self) -> None:
        """Closes this handle. Calls already running in other threads finish."""
        self._native.close()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return bool(self._native.closed)

    @property
    def root(self) -> str:
        """The root directory."""
        return self._native.root()

    @property
    def node(self) -> str:
        """The node (host) this handle acts for."""
        return self._native.node()

    @property
    def shared(self) -> bool:
        """Whether the root is a node of a log shared by several hosts."""
        return bool(self._native.is_shared())

    def sync(self) -> int:
        """Copies the events other nodes appended to the shared log into this
        node's replica; returns how many (0 without a shared log). Writes do
        this themselves; call it before reads that must see other nodes'
        latest events."""
        return int(self._native.sync())

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        if self.closed:
            return "<sandlog.Engine closed>"
        return f"<sandlog.Engine root={self.root!r}>"

    # Sessions

    def create_session(
        self,
        labels: Optional[Mapping[str, str]] = None,
        *,
        group: Optional[str] = None,
        max_size: Optional[int] = None,
        context: Optional[Mapping[str, bytes]] = None,
        readonly: Optional[Mapping[str, str]] = None,
    ) -> str:
        """Creates a session; returns its id.

        ``group`` puts it in a task group (listed, deleted and pruned
        together). ``max_size`` is its size limit in bytes (else the root's
        ``session.max_size``, else the workspace quota). ``context`` maps
        workspace paths to bytes written into the new workspace and recorded
        with its creation (at most 64 files, 64 MiB). ``readonly`` maps guest
        paths (``/data/task``) to host directories its executions can read
        but not change. Nothing is created if any of them is refused."""
        files: List[Tuple[str, bytes]] = []
        if context is not None:
            if not isinstance(context, Mapping):
                raise TypeError(f"context must be a mapping of path to bytes, not {type(context).__name__}")
            for path, data in context.items():
                files.append((_text("context path", path), _bytes(f"context {path!r}", data)))
        mounts: List[Tuple[str, str]] = []
        if readonly is not None:
            if not isinstance(readonly, Mapping):
                raise TypeError(f"readonly must be a mapping of guest path to host directory, not {type(readonly).__name__}")
            for guest, host in readonly.items():
                mounts.append((_text("readonly guest path", guest), _text(f"readonly {guest!r}", os.fspath(host))))
        return self._native.create_session(
            _labels(labels),
            None if group is None else _text("group", group),
            _count("max_size", max_size),
            files,
            mounts,
        )

    def session(self, session_id: str) -> Session:
        """The session ``session_id``; :class:`NotFound` if there is none."""
        return Session._from_native(self._native.session(_text("session_id", session_id)))

    def sessions(self, *, group: Optional[str] = None) -> List[Session]:
        """Every session the log knows, in any status (with ``group``, that
        task group's)."""
        wanted = None if group is None else _text("group", group)
        return [Session._from_native(raw) for raw in self._native.sessions(wanted)]

    def delete_session(self, session_id: str) -> int:
        """Deletes a session and its workspace; returns the bytes reclaimed."""
        return self._native.delete_session(_text("session_id", session_id))

    # Executions

    def execute(
        self,
        session_id: str,
        code: str,
        *,
        runtime: str = "python",
        timeout: Union[float, timedelta, None] = None,
        fuel: Optional[int] = None,
        memory: Optional[int] = None,
        warm: bool = False,
        cancel: Optional["_sandlog.CancelToken"] = None,
        on_output: Optional[OutputCallback] = None,
    ) -> Execution:
        """Runs ``code`` in the session's workspace (seen by the guest as
        ``/app``) and records what it changed.

        ``runtime`` is ``python``, ``javascript``, or a path to a WASI
        module (the code is then its stdin). ``timeout`` (seconds),
        ``fuel`` and ``memory`` (bytes) override the engine's limits. A
        guest that fails or hits a limit is a result with that ``outcome``.

        ``warm=True`` runs Python in the session's warm kernel (started on
        first use), so variables and imports persist between executions, as
        ``sandlog serve`` keeps them; see :meth:`kernel`. ``cancel``, a
        :data:`CancelToken`, stops the guest when set (outcome
        ``cancelled``). ``on_output(stream, chunk)`` is called with the
        output while the guest runs, on the thread running it; the chunks
        are exactly the recorded output, in order. An exception it raises
        goes to :func:`sys.unraisablehook` and does not stop the guest.
        """
        sid = _text("session_id", session_id)
        source = _text("code", code).encode("utf-8")
        name = _text("runtime", runtime)
        if cancel is not None and not isinstance(cancel, _sandlog.CancelToken):
            raise TypeError(f"cancel must be a sandlog.CancelToken, not {type(cancel).__name__}")
        if on_output is not None and not callable(on_output):
            raise TypeError(f"on_output must be callable, not {type(on_output).__name__}")
        raw = self._native.execute(
            sid,
            source,
            name,
            _seconds("timeout", timeout),
            _count("fuel", fuel),
            _count("memory", memory),
            _flag("warm", warm),
            cancel,
            on_output,
        )
        return Execution._from_native(raw)

    def kernel(self, session_id: str) -> "Kernel":
        """A handle on the session's warm kernel: its executions keep
        variables, imports and open files between calls. The kernel starts
        on the first :meth:`Kernel.execute`; :meth:`Kernel.reset` drops its
        state, :meth:`Kernel.close` (or leaving a ``with`` block) drops the
        kernel. Kernels are bounded per engine as in ``sandlog serve``
        (``KERNELS_MAX``, ``KERNEL_MEMORY_TOTAL_MAX``, ``KERNEL_IDLE_TIMEOUT``):
        one dropped to make room is recorded (``kernel.evicted``) and the
        session's next execution says so in :attr:`Execution.state_lost`."""
        return Kernel(self, _text("session_id", session_id))

    def kernel_stats(self) -> Dict[str, Any]:
        """The warm kernels' figures (``stats``: kernels, busy,
        memory_bytes, warm_executions, kernel_starts, restarts, evictions,
        one_shot) and bounds (``kernels_max``, ``memory_total_max``,
        ``idle_timeout_s``)."""
        stats: Dict[str, Any] = json.loads(self._native.kernel_stats())
        return stats

    def reap_kernels(self) -> int:
        """Drops kernels idle past ``KERNEL_IDLE_TIMEOUT`` and those of
        sessions no longer active (each recorded); returns how many. A
        long-lived process calls it now and then, as ``serve`` does."""
        return int(self._native.reap_kernels())

    def run(
        self,
        session_id: str,
        argv: Sequence[Union[str, bytes]],
        *,
        timeout: Union[float, timedelta, None] = None,
        evidence_bytes: Optional[int] = None,
    ) -> NativeRun:
        """Runs a trusted native command in the session's workspace and
        records it, as ``sandlog run`` does. **Not sandboxed**: the command
        runs as this process's user, with its environment plus
        ``SANDLOG_SESSION_ID`` and ``SANDLOG_WORKSPACE``; use it for your
        own tools (a package install, a build), never for untrusted code.

        The log gets ``native.started`` before it starts and
        ``native.completed`` (exit code or signal, output, the files it
        changed) after. Its stdin is ``/dev/null``; its output is kept and
        returned. ``timeout`` kills its process group; ``evidence_bytes``
        caps the file contents kept as evidence (0: none). A command that
        cannot be started raises :class:`Error` (kind ``not_found`` for a
        missing program); one that fails is a result.
        """
        raw = self._native.run_native(
            _text("session_id", session_id),
            _argv(argv),
            _seconds("timeout", timeout),
            _count("evidence_bytes", evidence_bytes),
        )
        return NativeRun._from_native(raw)

    # Files

    def list_files(self, session_id: str, pattern: Optional[str] = None) -> List[FileInfo]:
        """The session's files, optionally matching a glob (``*.py``, ``data/**``)."""
        raw = self._native.list_files(_text("session_id", session_id), _optional_text("pattern", pattern))
        return [FileInfo._from_native(item) for item in raw]

    def read_file(self, session_id: str, path: str) -> bytes:
        """The contents of ``path`` in the session's workspace."""
        return self._native.read_file(_text("session_id", session_id), _text("path", path))

    def write_file(self, session_id: str, path: str, data: bytes, *, overwrite: bool = False) -> FileInfo:
        """Writes ``data`` to ``path`` (parents created); :class:`Conflict` if
        the file exists and ``overwrite`` is false."""
        raw = self._native.write_file(
            _text("session_id", session_id),
            _text("path", path),
            _bytes("data", data),
            _flag("overwrite", overwrite),
        )
        return FileInfo._from_native(raw)

    def delete_path(self, session_id: str, path: str, *, recursive: bool = False) -> List[str]:
        """Deletes a file, or a directory with ``recursive``; returns the
        deleted file paths."""
        return self._native.delete_path(
            _text("session_id", session_id), _text("path", path), _flag("recursive", recursive)
        )

    # Retention

    def prune(
        self,
        *,
        older_than: Optional[timedelta] = None,
        dry_run: bool = False,
        max_sessions: Optional[int] = None,
        max_bytes: Optional[int] = None,
        max_deletions: Optional[int] = None,
        group: Optional[str] = None,
    ) -> PruneResult:
        """Deletes sessions idle at least ``older_than``, and the oldest
        beyond ``max_sessions`` or ``max_bytes``, at most ``max_deletions``
        in this run; with ``group``, among that task group's sessions only.
        Legacy (adopted without metadata) and held sessions are
        skipped. With ``dry_run`` nothing changes and the result lists what
        a real run would delete now."""
        older_us: Optional[int] = None
        if older_than is not None:
            if not isinstance(older_than, timedelta):
                raise TypeError(f"older_than must be a datetime.timedelta, not {type(older_than).__name__}")
            if older_than < timedelta(0):
                raise InvalidInput(f"older_than {older_than}: must not be negative")
            older_us = (older_than.days * 86400 + older_than.seconds) * 1_000_000 + older_than.microseconds
            # Past 2**64 µs (584,000 years) every age is younger anyway.
            older_us = min(older_us, _U64_MAX)
        raw = json.loads(
            self._native.prune(
                older_us,
                _flag("dry_run", dry_run),
                _count("max_sessions", max_sessions),
                _count("max_bytes", max_bytes),
                _count("max_deletions", max_deletions),
                None if group is None else _text("group", group),
            )
        )
        return PruneResult(
            deleted_sessions=list(raw["deleted_sessions"]),
            skipped_sessions=list(raw["skipped_sessions"]),
            reclaimed_bytes=raw["reclaimed_bytes"],
            errors=dict(raw["errors"]),
            dry_run=raw["dry_run"],
            skipped_reasons=dict(raw["skipped_reasons"]),
            duration_ms=raw["duration_ms"],
        )

    # The log

    def log(
        self,
        *,
        session_id: Optional[str] = None,
        since: Optional[datetime] = None,
        from_position: Optional[int] = None,
    ) -> Iterator[Dict[str, Any]]:
        """The events of the log (or of one session's stream), in order, as
        dicts (``position``, ``stream``, ``kind``, ``recorded_at``,
        ``payload``, ``hash``, …). Read page by page as it is iterated.

        ``since`` (an aware datetime) keeps events recorded at or after it;
        ``from_position`` starts at that log position."""
        sid = _optional_text("session_id", session_id)
        since_us = None if since is None else _micros("since", since)
        start = _count("from_position", from_position) or 1
        native = self._native
        page_size = int(_sandlog.LOG_PAGE_EVENTS_MAX)
        # Checked now, not at the first next(): a bad id fails at the call.
        if sid is not None:
            native.session(sid)

        def pages(position: Optional[int]) -> Iterator[Dict[str, Any]]:
            while position is not None:
                texts, position = native.log_page(sid, since_us, position, page_size)
                for text in texts:
                    yield json.loads(text)

        return pages(start)

    # Operations

    def verify(self) -> VerifyResult:
        """Verifies the hash chain and compares the read models with the
        log; a broken chain raises :class:`IntegrityError`."""
        raw = json.loads(self._native.verify())
        return VerifyResult(
            ok=raw["ok"],
            events=raw["events"],
            head=raw["head"],
            position=raw["position"],
            read_model_mismatches=list(raw["read_model_mismatches"]),
            missing_blobs=list(raw.get("missing_blobs", [])),
        )

    def metrics(self) -> Dict[str, float]:
        """This engine's metrics since it was opened, as ``sandlog serve``
        exposes them at ``/metrics`` (docs/operations.md): each sample's
        name with its labels, as the Prometheus text format writes it, to
        its value, e.g. ``'sandlog_executions_total{runtime="python",outcome="ok"}'``;
        a histogram as its ``_bucket``, ``_count`` and ``_sum`` samples."""
        values: Dict[str, float] = {}
        for line in self._native.metrics_text().splitlines():
            if not line or line.startswith("#"):
                continue
            sample, _, value = line.rpartition(" ")
            values[sample] = float(value)
        return values

    def reconcile(self, dry_run: bool = False) -> ReconcileResult:
        """Brings the disk in line with the log: finishes interrupted
        prunes and deletes, quarantines orphan directories, records drift."""
        raw = json.loads(self._native.reconcile(_flag("dry_run", dry_run)))
        return ReconcileResult(
            actions=list(raw["actions"]),
            orphans=list(raw["orphans"]),
            intents_finished=raw["intents_finished"],
            drift=list(raw["drift"]),
            errors=dict(raw["errors"]),
            dry_run=raw["dry_run"],
            raw=raw,
        )

    # History and evidence

    def hold(self, session_id: str, reason: str) -> None:
        """Puts the session under a legal hold: it cannot be pruned,
        deleted or erased until :meth:`release`."""
        self._native.hold(_text("session_id", session_id), _text("reason", reason))

    def release(self, session_id: str, reason: Optional[str] = None) -> None:
        """Lifts the session's legal hold."""
        self._native.release(_text("session_id", session_id), _optional_text("reason", reason))

    def fork(
        self,
        session_id: str,
        *,
        position: Optional[int] = None,
        at: Optional[datetime] = None,
        labels: Optional[Mapping[str, str]] = None,
    ) -> Dict[str, Any]:
        """Makes a new session whose workspace is this one's as it was at
        log ``position`` or instant ``at`` (now if neither); returns the
        report (``session_id`` of the new session, ``at``, ``files``,
        ``missing``)."""
        cut_position, at_us = _cut(position, at)
        report: Dict[str, Any] = json.loads(
            self._native.fork(_text("session_id", session_id), cut_position, at_us, _labels(labels))
        )
        return report

    def read_file_at(
        self, session_id: str, path: str, *, position: Optional[int] = None, at: Optional[datetime] = None
    ) -> bytes:
        """A file as it was at log ``position`` or instant ``at`` (now if
        neither). :class:`Error` with ``kind`` ``not_kept`` or ``erased``
        when its bytes are not available."""
        cut_position, at_us = _cut(position, at)
        return self._native.read_file_at(_text("session_id", session_id), _text("path", path), cut_position, at_us)

    def executions(self, session_id: str, *, excerpt: int = 4096) -> List[Dict[str, Any]]:
        """Every execution of the session, in order, as the log and the
        evidence record it (code, stdout and stderr with excerpts of at
        most ``excerpt`` bytes, files, limits, outcome)."""
        size = _count("excerpt", excerpt)
        if size is None:
            raise TypeError("excerpt must be an int, not None")
        records: List[Dict[str, Any]] = json.loads(
            self._native.execution_records(_text("session_id", session_id), min(size, 2**32))
        )
        return records

    def sync_session(self, session_id: str) -> SyncResult:
        """Records the changes made in the session's workspace outside
        sandlog since the last record (as ``sandlog session sync`` does):
        ``session.synced`` and the files' events, in one append; nothing
        is appended when nothing changed."""
        raw = json.loads(self._native.sync_session(_text("session_id", session_id)))
        return SyncResult(
            recorded=bool(raw["recorded"]),
            files_written=[str(path) for path in raw["files_written"]],
            files_deleted=[str(path) for path in raw["files_deleted"]],
            position=raw.get("position"),
            raw=raw,
        )

    def adopt(self, source: PathLike) -> AdoptResult:
        """Adopts the seed system's workspaces: every UUID-named directory
        in ``source`` is moved into this root; its ``.metadata.json`` (when
        valid) gives the session's timestamps, and sessions without it are
        kept as legacy (never pruned)."""
        raw = json.loads(self._native.adopt(_path("source", source)))
        return AdoptResult(
            adopted=list(raw["adopted"]),
            legacy=list(raw["legacy"]),
            corrupted=list(raw["corrupted"]),
            skipped=[(str(name), str(reason)) for name, reason in raw["skipped"]],
            raw=raw,
        )

    def sign_checkpoint(self, key: PathLike) -> str:
        """Signs a checkpoint of the log as it is now with the signing key
        file ``key`` (see :func:`generate_key`) and stores it; returns the
        signed note (C2SP format), which anyone holding the verifier key can
        check, and which later proofs are made against."""
        return self._native.sign_checkpoint(_path("key", key))

    def verify_checkpoint(self, checkpoint: str, vkey: str) -> Dict[str, Any]:
        """Checks that this log still extends a checkpoint signed earlier:
        the note's signature by ``vkey`` (the verifier key's text, or a file
        holding it), then the log's Merkle tree against the signed root.
        Returns ``checkpoint_size``, ``log_size`` and ``log_root``;
        :class:`IntegrityError` if the log was rewritten."""
        report: Dict[str, Any] = json.loads(
            self._native.verify_checkpoint(_text("checkpoint", checkpoint), _text("vkey", vkey))
        )
        return report

    def export_evidence(self, session_id: str, *, key: Optional[PathLike] = None) -> bytes:
        """One session's offline evidence bundle (JSON bytes): its events,
        an inclusion proof for each, a signed checkpoint, and the blobs its
        events name that are kept (its code, output and files). With
        ``key``, a checkpoint is signed now; without, the newest stored one
        is used (:class:`NotFound` if there is none). Check it anywhere with
        :func:`verify_evidence` and the verifier key alone."""
        key_path = None if key is None else _path("key", key)
        return self._native.export_evidence(_text("session_id", session_id), key_path)


class Kernel:
    """A session's warm kernel (see :meth:`Engine.kernel`). Calls for one
    session run one at a time; kernels of different sessions run in
    parallel in threads (the GIL is released while the guest runs)."""

    __slots__ = ("_engine", "_session_id", "_closed")

    def __init__(self, engine: Engine, session_id: str) -> None:
        self._engine = engine
        self._session_id = session_id
        self._closed = False

    @property
    def session_id(self) -> str:
        """The session."""
        return self._session_id

    @property
    def alive(self) -> bool:
        """Whether the session has a kernel now (one starts on demand)."""
        return bool(self._engine._native.has_kernel(self._session_id))

    def execute(
        self,
        code: str,
        *,
        timeout: Union[float, timedelta, None] = None,
        fuel: Optional[int] = None,
        memory: Optional[int] = None,
        cancel: Optional["_sandlog.CancelToken"] = None,
        on_output: Optional[OutputCallback] = None,
    ) -> Execution:
        """Runs Python in the kernel, as :meth:`Engine.execute` with
        ``warm=True``."""
        if self._closed:
            raise Error("this kernel handle is closed; take a new one with engine.kernel(session_id)")
        return self._engine.execute(
            self._session_id,
            code,
            timeout=timeout,
            fuel=fuel,
            memory=memory,
            warm=True,
            cancel=cancel,
            on_output=on_output,
        )

    def reset(self) -> bool:
        """Drops the kernel's state (recorded as ``kernel.evicted``); the
        next execution starts a fresh interpreter. Returns whether there
        was a kernel."""
        return bool(self._engine._native.drop_kernel(self._session_id, "reset by the caller"))

    def close(self) -> None:
        """Drops the kernel (recorded) and closes this handle."""
        if not self._closed and not self._engine.closed:
            self._engine._native.drop_kernel(self._session_id, "closed by the caller")
        self._closed = True

    def __enter__(self) -> "Kernel":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<sandlog.Kernel session={self._session_id!r}{' closed' if self._closed else ''}>"


def generate_key(path: PathLike, *, name: str) -> str:
    """Writes a new Ed25519 signing key for checkpoints of the log called
    ``name`` to ``path`` (mode 0600; an existing file is never replaced).
    Returns the verifier key: the text to hand to auditors."""
    return _sandlog.generate_key(_text("name", name), _path("path", path))


def verify_evidence(bundle: bytes, vkey: str) -> Dict[str, Any]:
    """Verifies an evidence bundle made by :meth:`Engine.export_evidence`
    with nothing but the verifier key ``vkey`` (its text, or a file holding
    it): the checkpoint's signature, each event's hash and inclusion proof,
    that the session's stream is complete, and each carried blob's hash.
    Needs no root and no database. Returns the report (``session_id``,
    ``events``, ``blobs``, ``missing_blobs``, ``checkpoint_size``,
    ``origin``, ``state``); :class:`IntegrityError` names the first thing
    that does not hold."""
    report: Dict[str, Any] = json.loads(_sandlog.verify_evidence(_bytes("bundle", bundle), _text("vkey", vkey)))
    return report

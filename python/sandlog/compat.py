"""The seed system's session functions, over a sandlog :class:`~sandlog.Engine`.

A platform written against the seed's ``sandbox.sessions`` module migrates
by changing an import::

    from sandlog.compat import create_session_sandbox, read_session_file, prune_sessions

and adopts its existing workspaces (``workspace/<uuid>/`` with or without
``.metadata.json``) once with :func:`adopt_workspaces`.

The functions keep the seed's names, arguments and results. Each takes the
seed's ``workspace_root``, here the sandlog root: an engine is opened on it
(created if missing) and kept for later calls. Pass ``engine=`` to use an
engine you opened, or call :func:`use_engine` once. The differences, all on
the safe side:

* a path that escapes the workspace raises :class:`sandlog.InvalidInput`,
  a subclass of ``ValueError`` as the seed raised;
* an unknown session raises :class:`sandlog.NotFound` instead of creating
  an empty directory;
* sessions without metadata (adopted legacy workspaces) are never pruned
  and are listed in ``skipped_sessions``, as the seed specified;
* every call is recorded in the root's log.
"""

from __future__ import annotations

import math
import os
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

from . import Engine, Execution, InvalidInput, PruneResult, AdoptResult, _text

__all__ = [
    "DEFAULT_WORKSPACE_ROOT",
    "SessionSandbox",
    "use_engine",
    "create_session_sandbox",
    "get_session_sandbox",
    "delete_session_workspace",
    "list_session_files",
    "read_session_file",
    "write_session_file",
    "delete_session_path",
    "prune_sessions",
    "adopt_workspaces",
]

DEFAULT_WORKSPACE_ROOT = Path("workspace")
"""The seed's default ``workspace_root``."""

_lock = threading.Lock()
_engines: Dict[str, Engine] = {}
_default: Optional[Engine] = None

RootLike = Union[str, "os.PathLike[str]", None]


def use_engine(engine: Optional[Engine]) -> None:
    """Makes ``engine`` the one used by calls that pass neither ``engine``
    nor ``workspace_root`` (``None`` restores the default root)."""
    global _default
    if engine is not None and not isinstance(engine, Engine):
        raise TypeError(f"engine must be a sandlog.Engine, not {type(engine).__name__}")
    _default = engine


def _engine(workspace_root: RootLike, engine: Optional[Engine]) -> Engine:
    if engine is not None:
        if not isinstance(engine, Engine):
            raise TypeError(f"engine must be a sandlog.Engine, not {type(engine).__name__}")
        return engine
    if workspace_root is None and _default is not None:
        return _default
    root = DEFAULT_WORKSPACE_ROOT if workspace_root is None else workspace_root
    if not isinstance(root, (str, os.PathLike)):
        raise TypeError(f"workspace_root must be a str or os.PathLike, not {type(root).__name__}")
    key = os.path.abspath(os.fspath(root))
    with _lock:
        found = _engines.get(key)
        if found is None or found.closed:
            found = Engine.init(key)
            _engines[key] = found
        return found


def _policy(policy: Any) -> Dict[str, Any]:
    """Execution limits from a mapping or an object with ``timeout``,
    ``fuel`` and ``memory`` (or the seed's ``timeout_seconds``,
    ``fuel_budget``, ``memory_bytes``) attributes."""
    if policy is None:
        return {}
    names = {
        "timeout": "timeout",
        "timeout_seconds": "timeout",
        "fuel": "fuel",
        "fuel_budget": "fuel",
        "memory": "memory",
        "memory_bytes": "memory",
        "memory_limit_bytes": "memory",
    }
    found: Dict[str, Any] = {}
    if isinstance(policy, Mapping):
        items = list(policy.items())
    else:
        items = [(name, getattr(policy, name)) for name in names if hasattr(policy, name)]
    for name, value in items:
        if name in names and value is not None:
            found[names[name]] = value
    return found


class SessionSandbox:
    """The seed's per-session sandbox: ``execute`` runs code in the session."""

    def __init__(self, engine: Engine, session_id: str, runtime: str = "python", policy: Any = None) -> None:
        self.engine = engine
        self.session_id = session_id
        self.runtime = _text("runtime", runtime)
        self._limits = _policy(policy)

    def execute(self, code: str, **kwargs: Any) -> Execution:
        """Runs ``code`` in this session; ``timeout``, ``fuel`` and
        ``memory`` override the policy's."""
        limits = dict(self._limits)
        for name in ("timeout", "fuel", "memory"):
            if name in kwargs:
                limits[name] = kwargs[name]
        return self.engine.execute(self.session_id, code, runtime=self.runtime, **limits)

    def __repr__(self) -> str:
        return f"<SessionSandbox {self.session_id} runtime={self.runtime}>"


def _runtime_name(runtime: Any) -> str:
    # The seed passes an enum (RuntimeType.PYTHON); take its value or name.
    if isinstance(runtime, str):
        return runtime.lower()
    for attribute in ("value", "name"):
        value = getattr(runtime, attribute, None)
        if isinstance(value, str):
            return value.lower()
    raise TypeError(f"runtime must be a str or an enum of them, not {type(runtime).__name__}")


def create_session_sandbox(
    runtime: Any = "python",
    policy: Any = None,
    workspace_root: RootLike = None,
    logger: Any = None,
    *,
    engine: Optional[Engine] = None,
    labels: Optional[Mapping[str, str]] = None,
) -> Tuple[str, SessionSandbox]:
    """Creates a session; returns ``(session_id, sandbox)``. ``logger`` is
    accepted for compatibility: the log records the session."""
    chosen = _engine(workspace_root, engine)
    name = _runtime_name(runtime)
    session_id = chosen.create_session(labels)
    return session_id, SessionSandbox(chosen, session_id, name, policy)


def get_session_sandbox(
    session_id: str,
    runtime: Any = "python",
    policy: Any = None,
    workspace_root: RootLike = None,
    logger: Any = None,
    *,
    engine: Optional[Engine] = None,
) -> SessionSandbox:
    """The sandbox of an existing session (:class:`sandlog.NotFound` if there is none)."""
    chosen = _engine(workspace_root, engine)
    chosen.session(session_id)
    return SessionSandbox(chosen, session_id, _runtime_name(runtime), policy)


def delete_session_workspace(
    session_id: str, workspace_root: RootLike = None, *, engine: Optional[Engine] = None
) -> None:
    """Deletes the session and its workspace."""
    _engine(workspace_root, engine).delete_session(session_id)


def list_session_files(
    session_id: str,
    workspace_root: RootLike = None,
    pattern: Optional[str] = None,
    *,
    engine: Optional[Engine] = None,
) -> List[str]:
    """Workspace-relative paths of the session's files, optionally matching a glob."""
    return [file.path for file in _engine(workspace_root, engine).list_files(session_id, pattern)]


def read_session_file(
    session_id: str, relative_path: str, workspace_root: RootLike = None, *, engine: Optional[Engine] = None
) -> bytes:
    """The contents of a file of the session."""
    return _engine(workspace_root, engine).read_file(session_id, relative_path)


def write_session_file(
    session_id: str,
    relative_path: str,
    data: Union[bytes, str],
    workspace_root: RootLike = None,
    overwrite: bool = False,
    *,
    engine: Optional[Engine] = None,
) -> None:
    """Writes a file into the session (``str`` data is written as UTF-8)."""
    if isinstance(data, str):
        data = _text("data", data).encode("utf-8")
    _engine(workspace_root, engine).write_file(session_id, relative_path, data, overwrite=overwrite)


def delete_session_path(
    session_id: str,
    relative_path: str,
    workspace_root: RootLike = None,
    recursive: bool = False,
    *,
    engine: Optional[Engine] = None,
) -> None:
    """Deletes a file, or a directory with ``recursive``."""
    _engine(workspace_root, engine).delete_path(session_id, relative_path, recursive=recursive)


def prune_sessions(
    older_than_hours: float = 24.0,
    workspace_root: RootLike = None,
    dry_run: bool = False,
    logger: Any = None,
    *,
    engine: Optional[Engine] = None,
) -> PruneResult:
    """Deletes sessions idle at least ``older_than_hours`` (by their last
    activity); sessions without metadata are skipped, never deleted. With
    ``dry_run`` nothing changes and the result lists what would be."""
    if isinstance(older_than_hours, bool) or not isinstance(older_than_hours, (int, float)):
        raise TypeError(f"older_than_hours must be a number, not {type(older_than_hours).__name__}")
    hours = float(older_than_hours)
    if not math.isfinite(hours) or hours < 0 or hours > 24 * 365 * 1000:
        raise InvalidInput(f"older_than_hours {older_than_hours!r}: must be a number of hours from 0 to 8,760,000")
    return _engine(workspace_root, engine).prune(older_than=timedelta(hours=hours), dry_run=dry_run)


def adopt_workspaces(
    source: Union[str, "os.PathLike[str]"], workspace_root: RootLike = None, *, engine: Optional[Engine] = None
) -> AdoptResult:
    """Adopts the seed's workspaces in ``source`` (UUID-named directories)
    into the root: timestamps come from ``.metadata.json``; workspaces
    without it are kept as legacy sessions, never pruned."""
    return _engine(workspace_root, engine).adopt(source)

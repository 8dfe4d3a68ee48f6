"""The exception classes of sandlog (re-exported by :mod:`sandlog`).

Every error carries ``kind``: the engine's stable, machine-readable name of
what went wrong (``not_found``, ``path_escapes``, ``quota``, …), the same as
the CLI's ``{"error": {"kind": ...}}``.
"""

from __future__ import annotations


class Error(Exception):
    """Base class of every error sandlog raises."""

    kind: str = "error"


class NotFound(Error):
    """No such root, session, file, or runtime module."""

    kind = "not_found"


class Conflict(Error):
    """The state does not allow the call now: the file exists (pass
    ``overwrite``), the session is not active or is busy, under a hold, or
    changed concurrently. Retrying may succeed."""

    kind = "conflict"


class IntegrityError(Error):
    """The log, a blob or the anchor failed verification: something was
    changed outside sandlog."""

    kind = "integrity"


class LimitExceeded(Error):
    """A named limit was reached (workspace quota, code or file size)."""

    kind = "too_large"


class InvalidInput(Error, ValueError):
    """An argument was invalid (a path escaping the workspace, a malformed
    session id, a negative limit). Nothing was changed. Also a
    :class:`ValueError`, as the seed raised for escaping paths."""

    kind = "invalid"

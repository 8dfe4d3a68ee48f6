"""Signed checkpoints and offline evidence from Python: a bundle exported by
one engine is verified with nothing but the verifier key, and any change to
it, or the wrong key, is refused with the reason."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

import sandlog


def make_key(tmp_path: Path, name: str = "audit.example/log") -> tuple[Path, str]:
    key_file = tmp_path / "signing.key"
    vkey = sandlog.generate_key(key_file, name=name)
    return key_file, vkey


def test_generate_key_writes_a_private_file_and_never_replaces_one(tmp_path: Path) -> None:
    key_file, vkey = make_key(tmp_path)
    assert vkey.startswith("audit.example/log+"), vkey
    assert key_file.stat().st_mode & 0o777 == 0o600
    before = key_file.read_bytes()
    with pytest.raises(sandlog.Error):
        sandlog.generate_key(key_file, name="other")
    assert key_file.read_bytes() == before


def test_a_bundle_proves_a_session_offline(engine: sandlog.Engine, tmp_path: Path) -> None:
    key_file, vkey = make_key(tmp_path)
    sid = engine.create_session()
    run = engine.execute(sid, "open('/app/out.txt', 'w').write('evidence')\nprint('done')")
    assert run.ok, run.stderr
    engine.write_file(sid, "in.txt", b"host bytes")

    bundle = engine.export_evidence(sid, key=key_file)
    report = sandlog.verify_evidence(bundle, vkey)
    assert report["ok"] is True
    assert report["session_id"] == sid
    events = [event for event in engine.log(session_id=sid)]
    assert report["events"] == len(events)
    assert report["origin"] == "audit.example/log"
    assert report["checkpoint_size"] >= events[-1]["position"]
    # The code, and the host-written file's bytes, travel with the bundle.
    assert report["blobs"] >= 2
    carried = {base64.b64decode(data) for data in json.loads(bundle)["blobs"].values()}
    assert b"host bytes" in carried


def test_the_verifier_key_may_be_a_file(engine: sandlog.Engine, sid: str, tmp_path: Path) -> None:
    key_file, vkey = make_key(tmp_path)
    vkey_file = tmp_path / "audit.vkey"
    vkey_file.write_text(vkey + "\n")
    bundle = engine.export_evidence(sid, key=key_file)
    assert sandlog.verify_evidence(bundle, str(vkey_file))["session_id"] == sid


def test_an_altered_bundle_is_an_integrity_error(engine: sandlog.Engine, sid: str, tmp_path: Path) -> None:
    key_file, vkey = make_key(tmp_path)
    engine.write_file(sid, "a.txt", b"original")
    document = json.loads(engine.export_evidence(sid, key=key_file))
    # Change what the file held, keeping the blob's name.
    name = next(iter(document["blobs"]))
    document["blobs"][name] = base64.b64encode(b"forged").decode()
    with pytest.raises(sandlog.IntegrityError, match="altered"):
        sandlog.verify_evidence(json.dumps(document).encode(), vkey)


def test_another_key_is_refused(engine: sandlog.Engine, sid: str, tmp_path: Path) -> None:
    key_file, _ = make_key(tmp_path)
    other_dir = tmp_path / "other"
    other_dir.mkdir()
    _, other_vkey = make_key(other_dir)
    bundle = engine.export_evidence(sid, key=key_file)
    with pytest.raises(sandlog.IntegrityError):
        sandlog.verify_evidence(bundle, other_vkey)
    # A key that does not parse is the caller's mistake, not a forgery.
    with pytest.raises(sandlog.InvalidInput, match="not a valid verifier key") as mistyped:
        sandlog.verify_evidence(bundle, other_vkey + "x")
    assert mistyped.value.kind == "bad_key"


def test_not_a_bundle_is_refused(tmp_path: Path) -> None:
    _, vkey = make_key(tmp_path)
    with pytest.raises(sandlog.Error, match="not a sandlog evidence bundle"):
        sandlog.verify_evidence(b"{}", vkey)
    with pytest.raises(TypeError):
        sandlog.verify_evidence("not bytes", vkey)  # type: ignore[arg-type]


def test_export_without_a_key_needs_a_stored_checkpoint(engine: sandlog.Engine, sid: str, tmp_path: Path) -> None:
    with pytest.raises(sandlog.NotFound):
        engine.export_evidence(sid)
    key_file, vkey = make_key(tmp_path)
    note = engine.sign_checkpoint(key_file)
    assert note.startswith("audit.example/log\n")
    # Now the stored checkpoint serves.
    assert sandlog.verify_evidence(engine.export_evidence(sid), vkey)["session_id"] == sid


def test_the_log_extends_an_earlier_checkpoint(engine: sandlog.Engine, sid: str, tmp_path: Path) -> None:
    key_file, vkey = make_key(tmp_path)
    note = engine.sign_checkpoint(key_file)
    engine.write_file(sid, "later.txt", b"later")
    check = engine.verify_checkpoint(note, vkey)
    assert check["log_size"] > check["checkpoint_size"]
    # A note whose signature does not match is refused.
    forged = note.replace("audit.example/log\n", "audit.example/log\n", 1).replace("\n\n", "\n\nx", 1)
    with pytest.raises(sandlog.IntegrityError):
        engine.verify_checkpoint(forged, vkey)


def test_unknown_session_has_no_evidence(engine: sandlog.Engine, tmp_path: Path) -> None:
    key_file, _ = make_key(tmp_path)
    with pytest.raises(sandlog.NotFound):
        engine.export_evidence("00000000-0000-4000-8000-000000000000", key=key_file)

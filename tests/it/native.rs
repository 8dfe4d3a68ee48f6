//! Native work, recorded: real shell scripts run by `Engine::run_native`
//! in real workspaces, and changes made by outside processes recorded by
//! `Engine::sync_session`, checked against `reconcile --deep`.

#![cfg(test)]

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::time::{Duration, Instant};

use sandlog_core::event::{Event, NativeCompleted, SessionSynced, WrittenBy};
use sandlog_core::{Envelope, Hash, PrunePolicy, SessionId, StreamId, WorkspacePath};
use sandlog_runtime::lifecycle::BUSY_SKIP_REASON;
use sandlog_runtime::native::{STAT_CACHE_RACY_WINDOW, stat_cache_path};
use sandlog_runtime::sandbox::ReadonlyMount;
use sandlog_runtime::{
    Engine, NativeOptions, NewSession, ReconcileOptions, RuntimeError, SyncReport,
};
use sandlog_tests::engine::RawLog;
use sandlog_tests::engine::TestRoot;

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

const NO_PROGRESS: &(dyn Fn(u64, u64) + Sync) = &|_, _| {};

fn path(text: &str) -> WorkspacePath {
    WorkspacePath::parse(text).unwrap_or_else(|error| panic!("{text}: {error}"))
}

fn paths(texts: &[&str]) -> Vec<WorkspacePath> {
    texts.iter().map(|text| path(text)).collect()
}

/// `sh -c SCRIPT` and further arguments.
fn sh(script: &str, args: &[OsString]) -> Vec<OsString> {
    let mut argv = vec![OsString::from("sh"), OsString::from("-c"), script.into()];
    argv.extend(args.iter().cloned());
    argv
}

fn events(engine: &Engine, session_id: SessionId) -> Result<Vec<Envelope>, RuntimeError> {
    engine.stream_events(StreamId::Session(session_id))
}

fn decoded(envelope: &Envelope) -> Event {
    envelope
        .event()
        .unwrap_or_else(|error| panic!("{}: {error}", envelope.kind))
        .unwrap_or_else(|| panic!("{}: unknown kind", envelope.kind))
}

fn completed(envelope: &Envelope) -> NativeCompleted {
    match decoded(envelope) {
        Event::NativeCompleted(completed) => completed,
        other => panic!("expected native.completed, found {}", other.kind()),
    }
}

fn synced(envelope: &Envelope) -> SessionSynced {
    match decoded(envelope) {
        Event::SessionSynced(synced) => synced,
        other => panic!("expected session.synced, found {}", other.kind()),
    }
}

/// No drift between the workspaces and the projection, hashing every file.
fn assert_no_drift(engine: &Engine) -> TestResult {
    let report = engine.reconcile(
        &ReconcileOptions {
            deep: true,
            dry_run: true,
            ..ReconcileOptions::default()
        },
        NO_PROGRESS,
    )?;
    assert!(report.drift.is_empty(), "drift: {:?}", report.drift);
    Ok(())
}

#[test]
fn a_native_script_is_recorded_with_its_files_output_and_actor() -> TestResult {
    let root = TestRoot::new()?;
    let engine = &root.engine;
    let data = tempfile::tempdir()?;
    let session = engine.create_session_with(NewSession {
        readonly: vec![ReadonlyMount {
            host_path: data.path().to_owned(),
            guest_path: "/data/task".into(),
        }],
        ..NewSession::default()
    })?;
    let id = session.session_id;
    engine.write_file(id, &path("keep.txt"), b"before", false)?;
    engine.write_file(id, &path("old.txt"), b"old", false)?;
    let before = events(engine, id)?.len();

    let script = r#"
        echo "hello from $0"
        echo "session=$SANDLOG_SESSION_ID"
        echo "workspace=$SANDLOG_WORKSPACE"
        echo "readonly=$SANDLOG_READONLY"
        echo "cwd=$(pwd -P)"
        echo oops >&2
        printf new > new.txt
        printf changed > keep.txt
        rm old.txt
        mkdir -p sub
        printf x > sub/y
    "#;
    // A name that is not UTF-8 reaches the command as its bytes and the
    // log in the escaped text form.
    let odd = OsString::from_vec(b"agent\xff".to_vec());
    let run = engine.run_native(id, &sh(script, &[odd]), &NativeOptions::default())?;

    assert_eq!(run.exit_code, Some(0));
    assert!(!run.failed());
    assert_eq!(run.files_written, paths(&["keep.txt", "new.txt", "sub/y"]));
    assert_eq!(run.files_deleted, paths(&["old.txt"]));
    assert_eq!(run.stderr, b"oops\n");
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    let workspace = engine.session_path(id)?;
    let canonical = std::fs::canonicalize(&workspace)?;
    let readonly = std::fs::canonicalize(data.path())?;
    assert!(stdout.starts_with("hello from agent"), "{stdout}");
    assert!(stdout.contains(&format!("session={id}\n")), "{stdout}");
    assert!(
        stdout.contains(&format!("workspace={}\n", workspace.display())),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("readonly={}\n", readonly.display())),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("cwd={}\n", canonical.display())),
        "{stdout}"
    );

    let stream = events(engine, id)?;
    let new: Vec<&Envelope> = stream.iter().skip(before).collect();
    let kinds: Vec<&str> = new.iter().map(|envelope| envelope.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "native.started",
            "native.completed",
            "file.written",
            "file.written",
            "file.written",
            "file.deleted"
        ]
    );
    for envelope in &new {
        assert_eq!(envelope.actor, engine.actor());
    }
    let Event::NativeStarted(started) = decoded(new[0]) else {
        panic!("not native.started");
    };
    assert_eq!(started.argv[..2], ["sh", "-c"]);
    assert_eq!(started.argv[3], "agent\\xff");
    assert_eq!(new[0].position.0, run.started_position);
    assert_eq!(new[1].position.0, run.position);
    assert_eq!(new[1].causation_id, Some(new[0].event_id.0));
    let record = completed(new[1]);
    assert_eq!(record.exit_code, Some(0));
    assert_eq!(record.stdout_blake3, Hash::of(&run.stdout));
    assert_eq!(record.stdout_bytes, run.stdout.len() as u64);
    // The output was kept as evidence.
    assert_eq!(
        engine.raw_log()?.get_blob(&record.stdout_blake3)?,
        Some(run.stdout.clone())
    );
    assert_eq!(
        engine.raw_log()?.get_blob(&record.stderr_blake3)?,
        Some(b"oops\n".to_vec())
    );
    assert_eq!(
        record.scan.as_ref().map(|scan| scan.files_recorded),
        Some(4)
    );
    assert!(record.size_exceeded.is_none());
    for envelope in &new[2..] {
        assert_eq!(envelope.causation_id, Some(new[1].event_id.0));
        match decoded(envelope) {
            Event::FileWritten(file) => {
                assert_eq!(file.by, WrittenBy::Native);
                assert_eq!(file.content_kept, Some(true));
            }
            Event::FileDeleted(file) => assert_eq!(file.by, WrittenBy::Native),
            other => panic!("unexpected {}", other.kind()),
        }
    }
    let files = engine.list_files(id, None)?;
    let listed: Vec<&str> = files.iter().map(|file| file.path.as_str()).collect();
    assert_eq!(listed, ["keep.txt", "new.txt", "sub/y"]);
    assert_eq!(engine.read_file(id, &path("keep.txt"))?, b"changed");
    assert_no_drift(engine)?;
    assert!(engine.verify(None, &|_| {})?.ok);
    // The HTML report shows both events.
    let mut html = Vec::new();
    engine.write_report(id, &mut html)?;
    let html = String::from_utf8(html)?;
    assert!(html.contains("native command started (not sandboxed)"));
    assert!(html.contains("native command completed"));
    assert!(html.contains("native work wrote"));
    Ok(())
}

#[test]
fn a_failing_command_and_a_timeout_are_recorded() -> TestResult {
    let root = TestRoot::new()?;
    let engine = &root.engine;
    let id = engine.create_session(BTreeMap::new())?.session_id;

    let run = engine.run_native(
        id,
        &sh("printf partial > out.txt; exit 3", &[]),
        &NativeOptions::default(),
    )?;
    assert_eq!(run.exit_code, Some(3));
    assert!(run.failed());
    assert!(!run.timed_out);
    assert_eq!(run.files_written, paths(&["out.txt"]));
    let stream = events(engine, id)?;
    let record = completed(&stream[stream.len() - 2]);
    assert_eq!(record.exit_code, Some(3));
    assert!(record.message.is_none());

    // The timeout kills the whole process group: the command and what it
    // started in the background.
    let started = Instant::now();
    let run = engine.run_native(
        id,
        &sh(
            "sleep 60 & echo $! > bg.pid; printf y > late.txt; wait",
            &[],
        ),
        &NativeOptions {
            timeout: Some(Duration::from_millis(500)),
            ..NativeOptions::default()
        },
    )?;
    assert!(
        started.elapsed() < Duration::from_secs(50),
        "the run waited for the background sleep"
    );
    assert!(run.timed_out);
    assert!(run.failed());
    assert_eq!(run.exit_code, None);
    assert_eq!(run.signal, Some(9));
    assert_eq!(run.files_written, paths(&["bg.pid", "late.txt"]));
    let stream = events(engine, id)?;
    let record = completed(&stream[stream.len() - 3]);
    assert!(record.timed_out);
    assert_eq!(record.signal, Some(9));
    assert!(
        record
            .message
            .as_deref()
            .is_some_and(|message| message.contains("timeout")),
        "{:?}",
        record.message
    );
    let pid = std::fs::read_to_string(engine.session_path(id)?.join("bg.pid"))?;
    let proc_dir = std::path::PathBuf::from(format!("/proc/{}", pid.trim()));
    let deadline = Instant::now() + Duration::from_secs(10);
    // Killed and reaped (it was reparented to init), or at worst a zombie.
    while proc_dir.exists()
        && !std::fs::read_to_string(proc_dir.join("stat")).is_ok_and(|stat| stat.contains(") Z"))
    {
        assert!(
            Instant::now() < deadline,
            "the background process {} survived the timeout",
            pid.trim()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_no_drift(engine)?;
    Ok(())
}

#[test]
fn a_command_that_is_not_found_is_recorded_and_refused() -> TestResult {
    let root = TestRoot::new()?;
    let engine = &root.engine;
    let id = engine.create_session(BTreeMap::new())?.session_id;
    let error = engine
        .run_native(
            id,
            &[OsString::from("sandlog-no-such-command-here")],
            &NativeOptions::default(),
        )
        .expect_err("a missing command cannot run");
    assert_eq!(error.kind(), "not_found");
    assert!(
        error.to_string().contains("sandlog-no-such-command-here"),
        "{error}"
    );
    let stream = events(engine, id)?;
    let kinds: Vec<&str> = stream
        .iter()
        .map(|envelope| envelope.kind.as_str())
        .collect();
    assert_eq!(
        kinds,
        ["session.created", "native.started", "native.completed"]
    );
    let record = completed(&stream[2]);
    assert_eq!(record.exit_code, None);
    assert!(
        record
            .message
            .as_deref()
            .is_some_and(|message| message.contains("could not start")),
        "{:?}",
        record.message
    );
    assert_eq!(stream[2].causation_id, Some(stream[1].event_id.0));
    // An empty command line is refused before anything is recorded.
    let error = engine
        .run_native(id, &[], &NativeOptions::default())
        .expect_err("nothing to run");
    assert!(matches!(error, RuntimeError::Invalid(_)), "{error}");
    // So is an argument with a NUL byte, which no spawn could pass.
    let error = engine
        .run_native(
            id,
            &[OsString::from("echo"), OsString::from("a\0b")],
            &NativeOptions::default(),
        )
        .expect_err("a NUL byte cannot be passed");
    assert!(matches!(error, RuntimeError::Invalid(_)), "{error}");
    assert!(
        error.to_string().contains("argument 1 contains a NUL byte"),
        "{error}"
    );
    assert_eq!(events(engine, id)?.len(), 3);
    Ok(())
}

/// Waits out the racy window so a following sync may cache every file.
fn settle() {
    std::thread::sleep(STAT_CACHE_RACY_WINDOW * 3);
}

#[test]
fn sync_records_outside_changes_and_reconcile_agrees() -> TestResult {
    let root = TestRoot::new()?;
    let engine = &root.engine;
    let id = engine.create_session(BTreeMap::new())?.session_id;
    engine.write_file(id, &path("a.txt"), b"aaaa", false)?;
    engine.write_file(id, &path("b.txt"), b"bbbb", false)?;
    let workspace = engine.session_path(id)?;

    // An agent working there on its own, outside sandlog.
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg("printf AAAA > a.txt; rm b.txt; mkdir -p c; printf d > c/d.txt")
        .current_dir(&workspace)
        .status()?;
    assert!(status.success());
    std::fs::write(
        workspace.join(std::ffi::OsStr::new(&OsString::from_vec(b"n\xe9".to_vec()))),
        b"latin-1 name",
    )?;
    let before = events(engine, id)?.len();
    let report = engine.sync_session(id)?;
    assert!(report.recorded);
    assert_eq!(report.files_written, paths(&["a.txt", "c/d.txt", "n\\xe9"]));
    assert_eq!(report.files_deleted, paths(&["b.txt"]));
    assert!(report.size_exceeded.is_none());
    let stream = events(engine, id)?;
    let new = &stream[before..];
    assert_eq!(new.len(), 5);
    assert_eq!(new[0].kind, "session.synced");
    assert_eq!(Some(new[0].position.0), report.position);
    let record = synced(&new[0]);
    assert_eq!(
        record.scan.as_ref().map(|scan| scan.files_recorded),
        Some(4)
    );
    for envelope in new {
        assert_eq!(envelope.actor, engine.actor());
    }
    for envelope in &new[1..] {
        assert_eq!(envelope.causation_id, Some(new[0].event_id.0));
        match decoded(envelope) {
            Event::FileWritten(file) => assert_eq!(file.by, WrittenBy::Native),
            Event::FileDeleted(file) => assert_eq!(file.by, WrittenBy::Native),
            other => panic!("unexpected {}", other.kind()),
        }
    }
    assert_eq!(engine.read_file(id, &path("a.txt"))?, b"AAAA");
    assert_no_drift(engine)?;

    // Nothing changed: nothing appended.
    let length = events(engine, id)?.len();
    let again = engine.sync_session(id)?;
    assert!(!again.recorded);
    assert_eq!(again.position, None);
    assert!(again.files_written.is_empty() && again.files_deleted.is_empty());
    assert_eq!(events(engine, id)?.len(), length);
    Ok(())
}

fn sync_ok(engine: &Engine, id: SessionId) -> Result<SyncReport, RuntimeError> {
    engine.sync_session(id)
}

#[test]
fn the_stat_cache_skips_unchanged_files_and_is_never_trusted_blindly() -> TestResult {
    let root = TestRoot::new()?;
    let engine = &root.engine;
    let id = engine.create_session(BTreeMap::new())?.session_id;
    let workspace = engine.session_path(id)?;
    for index in 0..50 {
        std::fs::write(
            workspace.join(format!("f{index}.txt")),
            format!("{index:04}"),
        )?;
    }
    assert_eq!(sync_ok(engine, id)?.files_written.len(), 50);
    settle();
    // Fills the cache (the files were too fresh to cache the first time).
    let filling = sync_ok(engine, id)?;
    assert!(!filling.recorded);
    let cached = sync_ok(engine, id)?;
    assert!(!cached.recorded);
    assert_eq!(cached.files_seen, 50);
    assert_eq!(cached.files_hashed, 0, "the cache vouched for every file");

    // Same size, modification time put back: the change time and the
    // bytes still give it away.
    let target = workspace.join("f7.txt");
    let modified = std::fs::metadata(&target)?.modified()?;
    std::fs::write(&target, b"XXXX")?;
    std::fs::File::options()
        .write(true)
        .open(&target)?
        .set_modified(modified)?;
    let report = sync_ok(engine, id)?;
    assert_eq!(report.files_written, paths(&["f7.txt"]));
    assert_eq!(engine.read_file(id, &path("f7.txt"))?, b"XXXX");

    // A corrupt cache is not used: every file is hashed, nothing is
    // recorded wrongly.
    let cache = stat_cache_path(root.path(), id);
    assert!(cache.is_file());
    let mut bytes = std::fs::read(&cache)?;
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&cache, &bytes)?;
    let report = sync_ok(engine, id)?;
    assert!(!report.recorded);
    assert_eq!(report.files_hashed, 50);
    std::fs::write(&cache, b"garbage")?;
    let report = sync_ok(engine, id)?;
    assert!(!report.recorded);
    assert_eq!(report.files_hashed, 50);

    // A host write after the cache was written, then an outside write
    // of a same-sized file: recorded against the host write's hash.
    settle();
    sync_ok(engine, id)?;
    engine.write_file(id, &path("f3.txt"), b"host", true)?;
    std::fs::write(workspace.join("f3.txt"), b"0003")?;
    let report = sync_ok(engine, id)?;
    assert_eq!(report.files_written, paths(&["f3.txt"]));
    assert_no_drift(engine)?;

    // Deleting the session removes its cache.
    engine.delete_session(id, "done")?;
    assert!(!cache.exists());
    Ok(())
}

#[test]
fn a_size_limit_breach_is_flagged_by_run_and_sync() -> TestResult {
    let root = TestRoot::new()?;
    let engine = &root.engine;
    let id = engine
        .create_session_with(NewSession {
            max_size: Some(1000),
            ..NewSession::default()
        })?
        .session_id;
    let run = engine.run_native(
        id,
        &sh("head -c 2000 /dev/zero > big", &[]),
        &NativeOptions::default(),
    )?;
    assert_eq!(run.exit_code, Some(0));
    // Past the limit, still recorded: native work cannot be stopped.
    assert_eq!(run.files_written, paths(&["big"]));
    let exceeded = run.size_exceeded.expect("the limit was passed");
    assert_eq!((exceeded.bytes, exceeded.max_size), (2000, 1000));
    let stream = events(engine, id)?;
    let record = completed(&stream[stream.len() - 2]);
    assert_eq!(record.size_exceeded, Some(exceeded));

    std::fs::write(engine.session_path(id)?.join("more"), vec![b'm'; 500])?;
    let report = engine.sync_session(id)?;
    assert!(report.recorded);
    let exceeded = report.size_exceeded.expect("still past the limit");
    assert_eq!((exceeded.bytes, exceeded.max_size), (2500, 1000));
    let stream = events(engine, id)?;
    assert_eq!(
        synced(&stream[stream.len() - 2]).size_exceeded,
        Some(exceeded)
    );

    // Within the limit again: nothing flagged.
    std::fs::remove_file(engine.session_path(id)?.join("big"))?;
    let report = engine.sync_session(id)?;
    assert_eq!(report.files_deleted, paths(&["big"]));
    assert!(report.size_exceeded.is_none());
    assert_no_drift(engine)?;
    Ok(())
}

#[test]
fn a_prune_during_a_native_command_skips_the_session() -> TestResult {
    let root = TestRoot::new()?;
    let engine = &root.engine;
    let id = engine.create_session(BTreeMap::new())?.session_id;
    let workspace = engine.session_path(id)?;
    let release = tempfile::tempdir()?;
    let gate = release.path().join("go");
    let script = format!(
        "touch running; while [ ! -e '{}' ]; do sleep 0.05; done; printf done > finished",
        gate.display()
    );
    std::thread::scope(|scope| -> TestResult {
        let running =
            scope.spawn(|| engine.run_native(id, &sh(&script, &[]), &NativeOptions::default()));
        let deadline = Instant::now() + Duration::from_secs(30);
        while !workspace.join("running").exists() {
            assert!(Instant::now() < deadline, "the command never started");
            std::thread::sleep(Duration::from_millis(10));
        }
        let report = engine.prune(&PrunePolicy::older_than(Duration::ZERO), false, NO_PROGRESS)?;
        assert_eq!(
            report.skipped_reasons.get(&id).map(String::as_str),
            Some(BUSY_SKIP_REASON)
        );
        assert!(report.deleted_sessions.is_empty());
        std::fs::write(&gate, b"")?;
        let run = running.join().map_err(|_| "the run panicked")??;
        assert_eq!(run.exit_code, Some(0));
        assert_eq!(run.files_written, paths(&["finished", "running"]));
        Ok(())
    })?;
    // Free again: the next prune takes it.
    let report = engine.prune(&PrunePolicy::older_than(Duration::ZERO), false, NO_PROGRESS)?;
    assert_eq!(report.deleted_sessions, vec![id]);
    Ok(())
}

//! The engine end to end with the real python.wasm: sessions, execution,
//! isolation, host file operations, metadata timestamps (S1–S5, M1–M3,
//! X1, X2).

#![cfg(test)]

use std::collections::BTreeMap;
use std::time::Duration;

use sandlog_core::{Outcome, StreamId, WorkspacePath};
use sandlog_runtime::{ExecRequest, LimitOverrides, RuntimeError};
use sandlog_tests::engine::RawLog;
use sandlog_tests::engine::TestRoot;

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

fn path(text: &str) -> WorkspacePath {
    WorkspacePath::parse(text).unwrap()
}

/// S1, M1: creating a session makes a v4 id, its directory, and one
/// `session.created` event; `created_at == updated_at` at creation.
#[test]
fn create_session_makes_directory_event_and_equal_timestamps() -> TestResult {
    let root = TestRoot::new()?;
    let labels = BTreeMap::from([("user".to_owned(), "ada".to_owned())]);
    let session = root.engine.create_session(labels.clone())?;
    assert_eq!(session.session_id.as_uuid().get_version_num(), 4);
    assert!(root.engine.layout().workspace(session.session_id).is_dir());
    let events = root
        .engine
        .stream_events(StreamId::Session(session.session_id))?;
    assert_eq!(
        events.iter().map(|e| e.kind.as_str()).collect::<Vec<_>>(),
        vec!["session.created"]
    );
    assert_eq!(session.created_at, session.updated_at);
    assert_eq!(session.labels, labels);
    let metadata = serde_json::to_value(session.seed_metadata())?;
    assert_eq!(metadata["version"], 1);
    assert_eq!(metadata["session_id"], session.session_id.to_string());
    Ok(())
}

/// X1, X2: `print(1)` runs, and the execution is one `session.executed`
/// event.
#[test]
fn print_one_runs_and_is_recorded() -> TestResult {
    let root = TestRoot::new()?;
    let session = root.engine.create_session(BTreeMap::new())?;
    let run = root
        .engine
        .execute(session.session_id, &ExecRequest::python("print(1)"))?;
    assert_eq!(run.outcome, Outcome::Ok);
    assert_eq!(run.exit_code, Some(0));
    assert_eq!(run.stdout, b"1\n");
    let kinds = root.stream_kinds(session.session_id)?;
    assert_eq!(kinds, vec!["session.created", "session.executed"]);
    Ok(())
}

/// X2: an execution is recorded even when another process holds the log's
/// write lock far longer than an append does (a read-model rebuild holds it
/// throughout): the engine waits instead of failing with `busy` and leaving
/// a run that happened unrecorded. Method: a plain SQLite connection holds
/// `BEGIN IMMEDIATE` for 6 s (SQLite's usual busy timeouts are 5 s) while
/// the engine runs code that writes a file.
#[test]
fn an_execution_waits_out_a_long_write_lock_and_is_recorded() -> TestResult {
    const HELD: Duration = Duration::from_secs(6);
    let root = TestRoot::new()?;
    let session = root.engine.create_session(BTreeMap::new())?;
    let blocker = rusqlite::Connection::open(&root.engine.layout().database)?;
    blocker.execute_batch("BEGIN IMMEDIATE")?;
    let started = std::time::Instant::now();
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(HELD);
        blocker.execute_batch("COMMIT")
    });
    let run = root.engine.execute(
        session.session_id,
        &ExecRequest::python("open('out.txt', 'w').write('x')"),
    )?;
    assert!(started.elapsed() >= HELD, "{:?}", started.elapsed());
    releaser.join().map_err(|_| "the lock holder panicked")??;
    assert_eq!(run.outcome, Outcome::Ok);
    assert_eq!(run.files_written, vec![path("out.txt")]);
    assert_eq!(
        root.stream_kinds(session.session_id)?,
        vec!["session.created", "session.executed", "file.written"]
    );
    Ok(())
}

/// S3, X2: a file written in one execution is read in the next; the
/// guest's write is a `file.written` event in the same append (same
/// `recorded_at`, consecutive positions) as `session.executed`.
#[test]
fn files_persist_across_executions_and_guest_writes_are_events() -> TestResult {
    let root = TestRoot::new()?;
    let id = root.engine.create_session(BTreeMap::new())?.session_id;
    let first = root.engine.execute(
        id,
        &ExecRequest::python("import os\nos.makedirs('d')\nopen('d/x.txt','w').write('hello')"),
    )?;
    assert_eq!(
        first.outcome,
        Outcome::Ok,
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    assert_eq!(first.files_written, vec![path("d/x.txt")]);
    let second = root
        .engine
        .execute(id, &ExecRequest::python("print(open('d/x.txt').read())"))?;
    assert_eq!(second.stdout, b"hello\n");
    let events = root.engine.stream_events(StreamId::Session(id))?;
    let executed = events
        .iter()
        .find(|e| e.kind == "session.executed")
        .unwrap();
    let written = events.iter().find(|e| e.kind == "file.written").unwrap();
    assert_eq!(written.position.0, executed.position.0 + 1);
    assert_eq!(written.recorded_at, executed.recorded_at);
    let files = root.engine.list_files(id, None)?;
    assert_eq!(files.len(), 1);
    assert_eq!(files[0].size, 5);
    assert_eq!(files[0].blake3, sandlog_core::Hash::of(b"hello"));
    // A guest delete becomes file.deleted.
    let third = root
        .engine
        .execute(id, &ExecRequest::python("import os; os.remove('d/x.txt')"))?;
    assert_eq!(third.files_deleted, vec![path("d/x.txt")]);
    assert!(root.engine.list_files(id, None)?.is_empty());
    Ok(())
}

/// S2, M3: the guest sees only its own files at /app — not the metadata,
/// not the log, not /etc/passwd, not `..`, not another session.
#[test]
fn sessions_are_isolated_from_each_other_and_the_host() -> TestResult {
    let root = TestRoot::new()?;
    let alice = root.engine.create_session(BTreeMap::new())?.session_id;
    let bob = root.engine.create_session(BTreeMap::new())?.session_id;
    root.engine
        .write_file(alice, &path("secret.txt"), b"alice only", false)?;
    root.engine
        .write_file(bob, &path("mine.txt"), b"bob", false)?;
    let code = format!(
        "import os\n\
         print(sorted(os.listdir('/app')))\n\
         print(os.getcwd())\n\
         for target in ['/etc/passwd', '../{alice}/secret.txt', '/app/../{alice}/secret.txt', '/{alice}/secret.txt', '../sandlog.db', '/app/.metadata.json']:\n\
         \x20   try:\n\
         \x20       open(target).read()\n\
         \x20       print('READ', target)\n\
         \x20   except OSError as error:\n\
         \x20       print('denied', type(error).__name__)\n"
    );
    let run = root.engine.execute(bob, &ExecRequest::python(code))?;
    let stdout = String::from_utf8(run.stdout)?;
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "['mine.txt']");
    assert_eq!(lines[1], "/app");
    assert!(!stdout.contains("READ"), "{stdout}");
    assert_eq!(
        lines
            .iter()
            .filter(|line| line.starts_with("denied"))
            .count(),
        6,
        "{stdout}"
    );
    Ok(())
}

/// M2: `updated_at` moves after a successful execution and a host write,
/// not after a failed execution; `created_at` never changes.
#[test]
fn updated_at_moves_on_success_and_host_writes_only() -> TestResult {
    let root = TestRoot::new()?;
    let id = root.engine.create_session(BTreeMap::new())?.session_id;
    let created = root.engine.session(id)?;
    root.clock.advance(Duration::from_secs(60));
    root.engine
        .execute(id, &ExecRequest::python("raise SystemExit(3)"))?;
    let after_failure = root.engine.session(id)?;
    assert_eq!(after_failure.updated_at, created.updated_at);
    assert_eq!(after_failure.last_outcome, Some(Outcome::Error));
    root.clock.advance(Duration::from_secs(60));
    root.engine.execute(id, &ExecRequest::python("pass"))?;
    let after_success = root.engine.session(id)?;
    assert_eq!(after_success.updated_at, Some(root.clock_now()));
    root.clock.advance(Duration::from_secs(60));
    root.engine.write_file(id, &path("a.txt"), b"x", false)?;
    let after_write = root.engine.session(id)?;
    assert_eq!(after_write.updated_at, Some(root.clock_now()));
    assert_eq!(after_write.created_at, created.created_at);
    Ok(())
}

trait Now {
    fn clock_now(&self) -> sandlog_core::Timestamp;
}

impl Now for TestRoot {
    fn clock_now(&self) -> sandlog_core::Timestamp {
        use sandlog_core::Clock;
        self.clock.now()
    }
}

/// X1: limits are outcomes: an endless loop times out, a 4 GiB allocation
/// is `memory`, 100 MB of output is truncated at the cap.
#[test]
fn limits_end_runs_as_outcomes() -> TestResult {
    let root = TestRoot::new()?;
    let id = root.engine.create_session(BTreeMap::new())?.session_id;
    let mut request = ExecRequest::python("while True: pass");
    request.limits = LimitOverrides {
        timeout: Some(Duration::from_millis(500)),
        fuel: Some(u64::MAX / 2),
        ..LimitOverrides::default()
    };
    let started = std::time::Instant::now();
    let run = root.engine.execute(id, &request)?;
    assert_eq!(run.outcome, Outcome::Timeout);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );

    // 4 GiB in 512 MiB pieces (one 4 GiB object does not fit wasm32's
    // index size and fails before asking for memory).
    let run = root.engine.execute(
        id,
        &ExecRequest::python("chunks = [bytearray(512 * 1024**2) for _ in range(8)]"),
    )?;
    assert_eq!(run.outcome, Outcome::Memory);

    let mut request =
        ExecRequest::python("import sys\nfor _ in range(100): sys.stdout.write('x' * 1_000_000)");
    request.limits = LimitOverrides {
        output_bytes: Some(64 * 1024),
        ..LimitOverrides::default()
    };
    let run = root.engine.execute(id, &request)?;
    assert_eq!(run.outcome, Outcome::Ok);
    assert!(run.stdout_truncated);
    assert_eq!(run.stdout.len(), 64 * 1024);
    // The session is still usable, and the failures did not move updated_at.
    assert_eq!(
        root.engine
            .execute(id, &ExecRequest::python("print(2)"))?
            .stdout,
        b"2\n"
    );
    Ok(())
}

/// X1: a guest writing past the workspace quota ends as `quota`.
#[test]
fn guest_filling_the_workspace_past_quota_ends_as_quota() -> TestResult {
    let root = TestRoot::new()?;
    let id = root.engine.create_session(BTreeMap::new())?.session_id;
    let mut request = ExecRequest::python(
        "f = open('big.bin', 'wb')\nfor _ in range(64): f.write(b'x' * 1024 * 1024)\nf.close()",
    );
    request.limits = LimitOverrides {
        workspace_bytes: Some(8 * 1024 * 1024),
        ..LimitOverrides::default()
    };
    let run = root.engine.execute(id, &request)?;
    assert_eq!(run.outcome, Outcome::Quota);
    Ok(())
}

/// S4: host write (with and without overwrite), read, list with a glob and
/// as a tree, delete of a file and of a directory (recursive only).
#[test]
fn host_file_operations_record_size_and_hash() -> TestResult {
    let root = TestRoot::new()?;
    let id = root.engine.create_session(BTreeMap::new())?.session_id;
    let written = root
        .engine
        .write_file(id, &path("src/main.py"), b"print(42)\n", false)?;
    assert_eq!(written.size, 10);
    assert_eq!(written.blake3, sandlog_core::Hash::of(b"print(42)\n"));
    assert!(matches!(
        root.engine
            .write_file(id, &path("src/main.py"), b"other", false),
        Err(RuntimeError::FileExists { .. })
    ));
    root.engine
        .write_file(id, &path("src/main.py"), b"print(43)\n", true)?;
    root.engine
        .write_file(id, &path("notes.txt"), b"n", false)?;
    assert_eq!(
        root.engine.read_file(id, &path("src/main.py"))?,
        b"print(43)\n"
    );
    let listed = |pattern| -> Result<Vec<String>, sandlog_runtime::RuntimeError> {
        Ok(root
            .engine
            .list_files(id, Some(pattern))?
            .into_iter()
            .map(|f| f.path.to_string())
            .collect())
    };
    assert_eq!(listed("*.txt")?, vec!["notes.txt"]);
    assert_eq!(listed("**/*.py")?, vec!["src/main.py"]);
    // The guest runs the host-written file.
    assert_eq!(
        root.engine
            .execute(id, &ExecRequest::python("exec(open('src/main.py').read())"))?
            .stdout,
        b"43\n"
    );
    assert!(matches!(
        root.engine.delete_file(id, &path("src"), false),
        Err(RuntimeError::IsDirectory { .. })
    ));
    let deleted = root.engine.delete_file(id, &path("src"), true)?;
    assert_eq!(deleted, vec![path("src/main.py")]);
    assert!(!root.engine.layout().workspace(id).join("src").exists());
    assert!(matches!(
        root.engine.read_file(id, &path("src/main.py")),
        Err(RuntimeError::FileNotFound { .. })
    ));
    // The blob of the first write is kept for replay.
    assert_eq!(
        root.engine.raw_log()?.get_blob(&written.blake3)?,
        Some(b"print(42)\n".to_vec())
    );
    Ok(())
}

/// S5: a symlink the guest planted pointing outside the workspace is not
/// followed by host reads or writes; nothing outside is touched.
#[test]
fn guest_symlink_pointing_outside_is_refused_by_host_operations() -> TestResult {
    let root = TestRoot::new()?;
    let id = root.engine.create_session(BTreeMap::new())?.session_id;
    let outside = root.path().join("outside.txt");
    std::fs::write(&outside, "host secret")?;
    // The guest cannot make a symlink to the host (WASI refuses absolute
    // targets), so plant it as the guest would if it could, and as a
    // compromised guest runtime might: directly in the workspace.
    let workspace = root.engine.layout().workspace(id);
    std::os::unix::fs::symlink(&outside, workspace.join("link"))?;
    std::os::unix::fs::symlink("../..", workspace.join("up"))?;
    for name in ["link", "up/outside.txt"] {
        let error = root.engine.read_file(id, &path(name)).unwrap_err();
        assert!(
            matches!(error, RuntimeError::EscapesWorkspace { .. }),
            "{name}: {error}"
        );
    }
    let error = root
        .engine
        .write_file(id, &path("up/outside.txt"), b"overwritten", true)
        .unwrap_err();
    assert!(
        matches!(error, RuntimeError::EscapesWorkspace { .. }),
        "{error}"
    );
    assert_eq!(std::fs::read_to_string(&outside)?, "host secret");
    Ok(())
}

/// S2: executions in different sessions run in parallel on one engine.
#[test]
fn different_sessions_execute_concurrently() -> TestResult {
    let root = TestRoot::new()?;
    let ids: Vec<_> = (0..4)
        .map(|_| {
            root.engine
                .create_session(BTreeMap::new())
                .map(|s| s.session_id)
        })
        .collect::<Result<_, _>>()?;
    std::thread::scope(|scope| {
        let handles: Vec<_> = ids
            .iter()
            .map(|id| {
                let engine = &root.engine;
                scope.spawn(move || {
                    engine.execute(
                        *id,
                        &ExecRequest::python(format!("open('id.txt','w').write('{id}')")),
                    )
                })
            })
            .collect();
        for handle in handles {
            let run = handle.join().unwrap().unwrap();
            assert_eq!(run.outcome, Outcome::Ok);
        }
    });
    for id in &ids {
        assert_eq!(
            root.engine.read_file(*id, &path("id.txt"))?,
            id.to_string().into_bytes()
        );
    }
    root.engine.raw_log()?.verify()?;
    Ok(())
}

/// Bad input: unknown session ids are `UnknownSession`; paths are refused
/// before anything is touched.
#[test]
fn unknown_sessions_and_bad_paths_are_clear_errors() -> TestResult {
    let root = TestRoot::new()?;
    let unknown = sandlog_core::SessionId::new_v4();
    assert!(
        matches!(root.engine.execute(unknown, &ExecRequest::python("pass")), Err(RuntimeError::UnknownSession(id)) if id == unknown)
    );
    for bad in ["/etc/passwd", "../x", "a\0b", ""] {
        assert!(WorkspacePath::parse(bad).is_err(), "{bad:?}");
    }
    Ok(())
}

/// `Engine::resolve_session`: a full id is returned as is; a prefix (any
/// case) names the one session it begins, none, or several (counted, the
/// oldest listed first); text that cannot begin an id is refused. The
/// oracle is the full listing filtered by `starts_with`.
#[test]
fn session_prefixes_resolve_like_a_filtered_listing() -> TestResult {
    use sandlog_runtime::SessionMatch;
    use sandlog_runtime::engine::SESSION_PREFIX_SHOWN_MAX;
    let root = TestRoot::new()?;
    for _ in 0..40 {
        root.engine.create_session(BTreeMap::new())?;
        root.clock.advance(Duration::from_secs(1));
    }
    let listed = root.engine.sessions(None)?;
    let expected = |prefix: &str| -> SessionMatch {
        let matching: Vec<_> = listed
            .iter()
            .map(|session| session.session_id)
            .filter(|id| id.to_string().starts_with(prefix))
            .collect();
        match matching.as_slice() {
            [] => SessionMatch::None,
            [one] => SessionMatch::One(*one),
            several => SessionMatch::Several {
                count: several.len() as u64,
                first: several
                    .iter()
                    .take(SESSION_PREFIX_SHOWN_MAX)
                    .copied()
                    .collect(),
            },
        }
    };
    let mut prefixes: Vec<String> = "0123456789abcdef".chars().map(String::from).collect();
    for session in &listed {
        let text = session.session_id.to_string();
        assert_eq!(
            root.engine.resolve_session(&text)?,
            SessionMatch::One(session.session_id)
        );
        prefixes.extend([
            text[..2].to_owned(),
            text[..8].to_owned(),
            text[..35].to_owned(),
        ]);
    }
    for prefix in &prefixes {
        assert_eq!(
            root.engine.resolve_session(prefix)?,
            expected(prefix),
            "{prefix}"
        );
        assert_eq!(
            root.engine.resolve_session(&prefix.to_ascii_uppercase())?,
            expected(prefix),
            "{prefix}"
        );
    }
    assert!(
        prefixes
            .iter()
            .any(|prefix| matches!(expected(prefix), SessionMatch::Several { .. })),
        "no prefix was ambiguous: the test checks nothing about counting"
    );
    for bad in ["", "xyz", "84233c86!", &"0".repeat(36), &"0".repeat(40)] {
        assert_eq!(
            root.engine.resolve_session(bad)?,
            SessionMatch::NotAPrefix,
            "{bad:?}"
        );
    }
    Ok(())
}

/// A limit out of the sandbox's range is refused by the engine before the
/// run, naming the limit, whichever front end sent it; nothing is
/// recorded.
#[test]
fn out_of_range_limits_are_refused_before_the_run() -> TestResult {
    use sandlog_runtime::sandbox::SandboxError;
    let root = TestRoot::new()?;
    let session = root.engine.create_session(BTreeMap::new())?;
    for (limits, name) in [
        (
            LimitOverrides {
                timeout: Some(Duration::ZERO),
                ..LimitOverrides::default()
            },
            "timeout_ms",
        ),
        (
            LimitOverrides {
                fuel: Some(0),
                ..LimitOverrides::default()
            },
            "fuel",
        ),
        (
            LimitOverrides {
                memory_bytes: Some(u64::MAX),
                ..LimitOverrides::default()
            },
            "memory_bytes",
        ),
    ] {
        let mut request = ExecRequest::python("print(1)");
        request.limits = limits;
        let refused = root.engine.execute(session.session_id, &request);
        assert!(
            matches!(
                &refused,
                Err(RuntimeError::Sandbox(SandboxError::InvalidLimit { name: refused, .. }))
                    if *refused == name
            ),
            "{name}: {refused:?}"
        );
    }
    assert_eq!(
        root.stream_kinds(session.session_id)?,
        vec!["session.created"]
    );
    Ok(())
}

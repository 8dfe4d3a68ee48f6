//! Adopting hostile seed workspaces: hard links to files outside, FIFOs,
//! sockets, device nodes and escaping symlinks, and trees past the walk's
//! limits.

#![cfg(test)]

use std::collections::BTreeMap;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use sandlog_core::event::{Event, RefusedEntry};
use sandlog_core::{Clock, SessionId, StreamId, WorkspacePath};
use sandlog_runtime::adopt::{ADOPT_DEPTH_MAX, Neutralised};
use sandlog_runtime::{Engine, ExecRequest};
use sandlog_tests::engine::RawLog;
use sandlog_tests::engine::TestRoot;

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

const NO_PROGRESS: &(dyn Fn(u64, u64) + Sync) = &|_, _| {};

/// How long adopting a handful of entries may take. Far above what it
/// needs; a step that opened a FIFO would wait forever.
const ADOPT_SECONDS_MAX: u64 = 30;

/// Fails the whole test binary if `stop` is not signalled in time: a hung
/// step (opening a FIFO blocks until a writer comes) must fail, not hang.
fn watchdog(what: &'static str) -> mpsc::Sender<()> {
    let (stop, stopped) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        if let Err(mpsc::RecvTimeoutError::Timeout) =
            stopped.recv_timeout(Duration::from_secs(ADOPT_SECONDS_MAX))
        {
            eprintln!("{what} hung for more than {ADOPT_SECONDS_MAX} s");
            std::process::exit(101);
        }
    });
    stop
}

fn run(command: &mut Command) -> TestResult {
    let status = command.status()?;
    assert!(status.success(), "{command:?} failed: {status}");
    Ok(())
}

fn seed_metadata(id: SessionId) -> String {
    format!(
        r#"{{"session_id":"{id}","created_at":"2025-11-01T10:00:00Z","updated_at":"2025-11-02T10:00:00Z","version":1}}"#
    )
}

/// The root still works: another session runs Python, and `verify` finds
/// the chain and the read models sound.
fn assert_root_usable(engine: &Engine) -> TestResult {
    let session = engine.create_session(BTreeMap::new())?;
    let run = engine.execute(session.session_id, &ExecRequest::python("print(1)"))?;
    assert_eq!(run.stdout, b"1\n");
    let outcome = engine.verify(None, &|_| {})?;
    assert!(outcome.ok, "{outcome:?}");
    Ok(())
}

/// Goal: adoption takes only regular files, directories and symlinks that
/// stay inside; a hard link to a file outside becomes a private copy.
/// Method: a seed workspace holds a hard link to a file in another
/// directory, a FIFO, a unix socket, a character device (`mknod`, which
/// needs root: the suite runs as root), symlinks to `/etc/passwd`, to
/// `../../x` and to `data/..`, and a symlink to a file inside. Adopt it
/// under a watchdog (opening the FIFO would hang), then check the exact
/// report and `session.adopted` payload, where each refused entry went,
/// that the workspace keeps only what is allowed, that writes through the
/// formerly linked file — directly and by a guest — leave the outside file
/// alone, and that the root stays usable.
#[test]
fn adopt_refuses_special_files_and_escaping_links_and_copies_hard_links() -> TestResult {
    let root = TestRoot::new()?;
    let seeds = tempfile::tempdir()?;
    let outside = tempfile::tempdir()?;
    let outside_file = outside.path().join("outside.txt");
    std::fs::write(&outside_file, b"outside")?;

    let id = SessionId::new_v4();
    let workspace = seeds.path().join(id.to_string());
    std::fs::create_dir_all(workspace.join("data"))?;
    std::fs::create_dir_all(workspace.join("sub"))?;
    std::fs::write(workspace.join(".metadata.json"), seed_metadata(id))?;
    std::fs::write(workspace.join("data/inside.txt"), b"inside")?;
    std::fs::hard_link(&outside_file, workspace.join("linked.txt"))?;
    run(Command::new("mkfifo").arg(workspace.join("pipe")))?;
    let listener = std::os::unix::net::UnixListener::bind(workspace.join("sub/sock"))?;
    drop(listener);
    run(Command::new("mknod")
        .arg(workspace.join("dev"))
        .args(["c", "1", "3"]))?;
    std::os::unix::fs::symlink("/etc/passwd", workspace.join("passwd"))?;
    std::os::unix::fs::symlink("../../x", workspace.join("up"))?;
    std::os::unix::fs::symlink("data/..", workspace.join("sneaky"))?;
    std::os::unix::fs::symlink("../data/inside.txt", workspace.join("sub/back"))?;
    assert_eq!(std::fs::metadata(&outside_file)?.nlink(), 2);

    let stop = watchdog("adopting the hostile workspace");
    let started = Instant::now();
    let report = root.engine.adopt(seeds.path(), NO_PROGRESS)?;
    let _ = stop.send(());
    assert!(started.elapsed() < Duration::from_secs(ADOPT_SECONDS_MAX));

    assert_eq!(report.adopted, vec![id]);
    assert!(report.legacy.is_empty() && report.corrupted.is_empty());
    assert_eq!(report.skipped, Vec::<(String, String)>::new());
    let quarantine = format!("quarantine/adopted-{id}.{}", root.clock.now().unix_micros());
    let refused = |path: &str, kind: &str, reason: &str| RefusedEntry {
        path: path.to_owned(),
        kind: kind.to_owned(),
        reason: reason.to_owned(),
        moved_to: Some(format!("{quarantine}/{path}")),
    };
    let device = "a device node is not file contents: opening it reaches a device";
    let expected_refused = vec![
        refused("dev", "char_device", device),
        refused(
            "passwd",
            "symlink",
            "its target is absolute: it points outside the workspace",
        ),
        refused(
            "pipe",
            "fifo",
            "a FIFO is not file contents, and opening it blocks until a writer comes",
        ),
        refused(
            "sneaky",
            "symlink",
            "its target has `..` after a name: through another symlink it could climb out of the workspace",
        ),
        refused("sub/sock", "socket", "a socket is not file contents"),
        refused(
            "up",
            "symlink",
            "its target climbs out of the workspace with `..`",
        ),
    ];
    let mut neutralised = report.neutralised.clone();
    for entry in &mut neutralised {
        entry.refused.sort_by(|a, b| a.path.cmp(&b.path));
    }
    assert_eq!(
        neutralised,
        vec![Neutralised {
            session_id: id,
            refused: expected_refused.clone(),
            copied_links: vec!["linked.txt".to_owned()],
            unrecorded: 0,
        }]
    );

    // The event records the same, and the files are exactly the regular ones.
    let envelopes = root.engine.stream_events(StreamId::Session(id))?;
    let first = envelopes.first().ok_or("no events")?;
    let Some(Event::SessionAdopted(mut adopted)) =
        Event::decode(&first.kind, first.schema, &first.payload)?
    else {
        return Err(format!("first event is {}", first.kind).into());
    };
    adopted.refused.sort_by(|a, b| a.path.cmp(&b.path));
    assert_eq!(adopted.refused, expected_refused);
    assert_eq!(adopted.copied_links, vec!["linked.txt".to_owned()]);
    assert_eq!(adopted.unrecorded, 0);
    let files: Vec<String> = root
        .engine
        .list_files(id, None)?
        .into_iter()
        .map(|file| file.path.to_string())
        .collect();
    assert_eq!(files, vec!["data/inside.txt", "linked.txt"]);

    // Refused entries sit in quarantine, unopened; allowed ones stay.
    let root_path = root.path();
    let kept = root.engine.layout().workspace(id);
    for entry in &expected_refused {
        assert!(
            std::fs::symlink_metadata(kept.join(&entry.path)).is_err(),
            "{} must leave the workspace",
            entry.path
        );
    }
    let in_quarantine =
        |path: &str| std::fs::symlink_metadata(root_path.join(format!("{quarantine}/{path}")));
    assert!(in_quarantine("pipe")?.file_type().is_fifo());
    assert!(in_quarantine("dev")?.file_type().is_char_device());
    assert!(in_quarantine("sub/sock")?.file_type().is_socket());
    assert!(in_quarantine("passwd")?.file_type().is_symlink());
    assert_eq!(
        std::fs::read_link(kept.join("sub/back"))?,
        Path::new("../data/inside.txt")
    );
    assert_eq!(std::fs::read(kept.join("sub/back"))?, b"inside");

    // The link to the outside file is broken: writes in place, by the host
    // and by a guest, leave it alone.
    let linked = kept.join("linked.txt");
    assert_eq!(std::fs::metadata(&linked)?.nlink(), 1);
    assert_eq!(std::fs::metadata(&outside_file)?.nlink(), 1);
    assert_eq!(std::fs::read(&linked)?, b"outside");
    std::fs::write(&linked, b"host wrote in place")?;
    assert_eq!(std::fs::read(&outside_file)?, b"outside");
    let guest = root.engine.execute(
        id,
        &ExecRequest::python(
            "import os\nopen('linked.txt', 'w').write('guest')\nprint(sorted(os.listdir('.')), sorted(os.listdir('sub')))",
        ),
    )?;
    assert_eq!(
        String::from_utf8_lossy(&guest.stdout),
        "['data', 'linked.txt', 'sub'] ['back']\n"
    );
    assert_eq!(std::fs::read(&linked)?, b"guest");
    assert_eq!(std::fs::read(&outside_file)?, b"outside");
    root.engine
        .write_file(id, &WorkspacePath::parse("linked.txt")?, b"host api", true)?;
    assert_eq!(std::fs::read(&outside_file)?, b"outside");

    assert_root_usable(&root.engine)
}

/// Goal: a workspace nested deeper than `ADOPT_DEPTH_MAX` is not adopted
/// and nothing of it is lost. Method: a seed workspace with a file at depth
/// `ADOPT_DEPTH_MAX + 1` beside a normal one; adopt; the report skips it
/// naming the limit, the directory is still in the seed directory with its
/// file, the root has neither a workspace nor an event for it, the other
/// seed is adopted, and the root stays usable.
#[test]
fn adopt_leaves_a_workspace_past_the_depth_limit_in_place() -> TestResult {
    let root = TestRoot::new()?;
    let seeds = tempfile::tempdir()?;
    let deep = SessionId::new_v4();
    let normal = SessionId::new_v4();
    let mut nested = seeds.path().join(deep.to_string());
    for _ in 0..=ADOPT_DEPTH_MAX {
        nested.push("d");
    }
    std::fs::create_dir_all(&nested)?;
    std::fs::write(nested.join("deep.txt"), b"deep")?;
    std::fs::create_dir_all(seeds.path().join(normal.to_string()))?;
    std::fs::write(seeds.path().join(format!("{normal}/a.txt")), b"a")?;

    let report = root.engine.adopt(seeds.path(), NO_PROGRESS)?;

    assert_eq!(report.legacy, vec![normal]);
    assert_eq!(
        report.skipped,
        vec![(
            deep.to_string(),
            format!(
                "directories nested deeper than ADOPT_DEPTH_MAX = {ADOPT_DEPTH_MAX}; not adopted, left in place"
            )
        )]
    );
    assert_eq!(std::fs::read(nested.join("deep.txt"))?, b"deep");
    assert!(!root.engine.layout().workspace(deep).exists());
    assert_eq!(
        root.engine
            .raw_log()?
            .stream_version(StreamId::Session(deep))?,
        None
    );
    assert_root_usable(&root.engine)
}

/// Goal: adopting many workspaces at once (prepared on several threads,
/// recorded in several batches) gives each entry the fate it would have
/// alone, lists the report in directory order, records every adopted
/// session exactly once, and still neutralises a hostile workspace among
/// them. Method: a seed directory of more than one batch of workspaces —
/// valid metadata, none, corrupted — plus a workspace holding a FIFO and a
/// hard link to an outside file, one the root already knows, a non-UUID
/// directory and a UUID-named file. Adopt under the watchdog; compare the
/// report with the expected fate of each entry in `read_dir` order; every
/// adopted session has one `session.adopted` and its one file; the hostile
/// one is neutralised; `verify` is clean.
#[test]
fn adopting_many_workspaces_at_once_gives_each_its_own_fate() -> TestResult {
    let root = TestRoot::new()?;
    let seeds = tempfile::tempdir()?;
    let outside = tempfile::tempdir()?;
    let outside_file = outside.path().join("outside.txt");
    std::fs::write(&outside_file, b"outside")?;
    let count = sandlog_runtime::adopt::ADOPT_BATCH_SESSIONS + 40;
    let mut kinds = BTreeMap::new();
    for index in 0..count {
        let id = SessionId::new_v4();
        let workspace = seeds.path().join(id.to_string());
        std::fs::create_dir(&workspace)?;
        std::fs::write(workspace.join("data.txt"), format!("data {index}"))?;
        let kind = match index % 3 {
            0 => {
                std::fs::write(workspace.join(".metadata.json"), seed_metadata(id))?;
                "adopted"
            }
            1 => "legacy",
            _ => {
                std::fs::write(workspace.join(".metadata.json"), b"{not json")?;
                "corrupted"
            }
        };
        kinds.insert(id.to_string(), kind);
    }
    let hostile = SessionId::new_v4();
    let workspace = seeds.path().join(hostile.to_string());
    std::fs::create_dir(&workspace)?;
    std::fs::write(workspace.join(".metadata.json"), seed_metadata(hostile))?;
    std::fs::hard_link(&outside_file, workspace.join("data.txt"))?;
    run(Command::new("mkfifo").arg(workspace.join("pipe")))?;
    kinds.insert(hostile.to_string(), "adopted");
    let known = root.engine.create_session(BTreeMap::new())?.session_id;
    std::fs::create_dir(seeds.path().join(known.to_string()))?;
    kinds.insert(known.to_string(), "already known to this root");
    std::fs::create_dir(seeds.path().join("not-a-session"))?;
    kinds.insert("not-a-session".to_owned(), "not a UUID-named directory");
    let file_id = SessionId::new_v4().to_string();
    std::fs::write(seeds.path().join(&file_id), b"a file")?;
    kinds.insert(file_id, "not a directory");
    let order: Vec<String> = std::fs::read_dir(seeds.path())?
        .map(|entry| entry.map(|entry| entry.file_name().to_string_lossy().into_owned()))
        .collect::<Result<_, _>>()?;

    let stop = watchdog("adopting many workspaces");
    let report = root.engine.adopt(seeds.path(), NO_PROGRESS)?;
    let _ = stop.send(());

    let of_kind = |kind: &str| -> Vec<String> {
        order
            .iter()
            .filter(|name| kinds.get(name.as_str()) == Some(&kind))
            .cloned()
            .collect()
    };
    let names = |ids: &[SessionId]| ids.iter().map(ToString::to_string).collect::<Vec<_>>();
    assert_eq!(names(&report.adopted), of_kind("adopted"));
    assert_eq!(names(&report.legacy), of_kind("legacy"));
    assert_eq!(names(&report.corrupted), of_kind("corrupted"));
    let skipped: Vec<(String, String)> = order
        .iter()
        .filter_map(|name| {
            let kind = kinds.get(name.as_str())?;
            (!["adopted", "legacy", "corrupted"].contains(kind))
                .then(|| (name.clone(), (*kind).to_owned()))
        })
        .collect();
    assert_eq!(report.skipped, skipped);
    assert_eq!(report.neutralised.len(), 1);
    assert_eq!(report.neutralised[0].session_id, hostile);
    assert_eq!(
        report.neutralised[0].copied_links,
        vec!["data.txt".to_owned()]
    );
    assert_eq!(report.neutralised[0].refused.len(), 1);
    assert_eq!(std::fs::metadata(&outside_file)?.nlink(), 1);

    for id in report
        .adopted
        .iter()
        .chain(&report.legacy)
        .chain(&report.corrupted)
    {
        let kinds: Vec<String> = root
            .engine
            .stream_events(StreamId::Session(*id))?
            .into_iter()
            .map(|envelope| envelope.kind)
            .collect();
        assert_eq!(kinds, ["session.adopted", "file.written"], "{id}");
        let files: Vec<String> = root
            .engine
            .list_files(*id, None)?
            .into_iter()
            .map(|file| file.path.to_string())
            .collect();
        assert_eq!(files, ["data.txt"]);
    }
    let outcome = root.engine.verify(None, &|_| {})?;
    assert!(outcome.ok, "{outcome:?}");
    Ok(())
}

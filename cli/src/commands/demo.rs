//! `demo`: the quick-start walk-through, narrated. It does real work on the
//! root: creates sessions, runs Python that writes files, reads them back
//! in a second run, adopts two seed-format workspaces (one with metadata a
//! month old, one without), prunes with a dry run first, verifies the
//! chain, and replays the log to before the prune.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use sandlog_runtime::core::human::{format_duration, format_size};
use sandlog_runtime::core::{Position, PrunePolicy, SessionId, StreamId, Timestamp};
use sandlog_runtime::eventstore::LogFilter;
use sandlog_runtime::projections::SessionSummary;
use sandlog_runtime::projections::replay::Cut;
use sandlog_runtime::{Engine, ExecRequest};

use crate::exit::CliError;
use crate::output::Output;
use crate::render;

/// How old the adopted "stale" workspace's metadata says it is.
const STALE_AGE: Duration = Duration::from_secs(30 * 24 * 3600);
/// The prune threshold the demo uses.
const PRUNE_THRESHOLD: Duration = Duration::from_secs(7 * 24 * 3600);

fn step(output: &Output, number: u32, title: &str) -> Result<(), CliError> {
    output.line("")?;
    output.line(&output.bold(&format!("── {number}. {title}")))
}

fn show_events(engine: &Engine, output: &Output, from: Position) -> Result<(), CliError> {
    for envelope in engine.log(LogFilter {
        from: Some(from.next()),
        ..LogFilter::default()
    }) {
        let envelope = envelope?;
        output.line(&format!(
            "   #{:<4} {:<28} {}  hash {}",
            envelope.position.0,
            envelope.kind,
            render::describe(&envelope),
            render::short_hash(&envelope.hash.to_hex())
        ))?;
    }
    Ok(())
}

fn head(engine: &Engine) -> Result<Position, CliError> {
    Ok(engine.head()?.position)
}

fn write_seed_workspace(
    dir: &Path,
    session_id: SessionId,
    metadata: Option<String>,
    files: &[(&str, &str)],
) -> Result<(), CliError> {
    let workspace = dir.join(session_id.to_string());
    let io = |context: String| move |source| CliError::Io { context, source };
    std::fs::create_dir_all(&workspace).map_err(io(format!("creating {}", workspace.display())))?;
    if let Some(metadata) = metadata {
        std::fs::write(workspace.join(".metadata.json"), metadata)
            .map_err(io("writing seed metadata".into()))?;
    }
    for (name, contents) in files {
        std::fs::write(workspace.join(name), contents).map_err(io(format!("writing {name}")))?;
    }
    Ok(())
}

pub fn demo(root: &Path, output: &Output) -> Result<u8, CliError> {
    output.line(
        &output.bold("sandlog quick start: every action below is an event in a hash-chained log"),
    )?;
    step(output, 1, &format!("open the root {}", root.display()))?;
    let root = Engine::init(root)?;
    let engine = super::open(&root, output)?;
    let start = head(&engine)?;
    output.line(&format!(
        "   log at {} (head position {start}), workspaces in {}",
        engine.layout().database.display(),
        engine.layout().workspaces.display()
    ))?;

    step(output, 2, "create two sessions")?;
    let alice = engine.create_session(BTreeMap::from([("user".to_owned(), "alice".to_owned())]))?;
    let bob = engine.create_session(BTreeMap::from([("user".to_owned(), "bob".to_owned())]))?;
    output.line(&format!(
        "   alice: {}\n   bob:   {}",
        alice.session_id, bob.session_id
    ))?;

    step(
        output,
        3,
        "run Python in alice's session; it writes files in /app",
    )?;
    let code = "import csv, json\n\
                rows = [{'n': n, 'square': n * n} for n in range(1, 6)]\n\
                with open('squares.csv', 'w', newline='') as f:\n    w = csv.DictWriter(f, fieldnames=['n', 'square']); w.writeheader(); w.writerows(rows)\n\
                import os; os.makedirs('out', exist_ok=True)\n\
                json.dump({'total': sum(r['square'] for r in rows)}, open('out/summary.json', 'w'))\n\
                print('wrote', os.listdir('.'))";
    output.line(&format!(
        "   code:\n{}",
        code.lines()
            .map(|line| format!("     | {line}"))
            .collect::<Vec<_>>()
            .join("\n")
    ))?;
    let first = engine.execute(alice.session_id, &ExecRequest::python(code))?;
    output.line(&format!(
        "   → {} in {} ms, stdout: {}   files written: {}",
        first.outcome.as_str(),
        first.duration_ms,
        String::from_utf8_lossy(&first.stdout).trim(),
        first
            .files_written
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    ))?;

    step(
        output,
        4,
        "a second run reads what the first wrote (files persist, S3)",
    )?;
    let second = engine.execute(
        alice.session_id,
        &ExecRequest::python("import json; print(json.load(open('out/summary.json')))"),
    )?;
    output.line(&format!(
        "   → {}: {}",
        second.outcome.as_str(),
        String::from_utf8_lossy(&second.stdout).trim()
    ))?;
    let escape = engine.execute(bob.session_id, &ExecRequest::python(format!(
        "import os\nprint(os.listdir('/app'))\ntry:\n    open('/etc/passwd')\nexcept OSError as e:\n    print('no /etc/passwd:', type(e).__name__)\ntry:\n    os.listdir('../{}')\nexcept OSError as e:\n    print('no other session:', type(e).__name__)",
        alice.session_id
    )))?;
    output.line(&format!(
        "   bob's guest sees only its own /app:\n{}",
        String::from_utf8_lossy(&escape.stdout)
            .lines()
            .map(|l| format!("     {l}"))
            .collect::<Vec<_>>()
            .join("\n")
    ))?;

    step(
        output,
        5,
        "list alice's files and show her metadata (from the log, not from the workspace)",
    )?;
    let files = engine.list_files(alice.session_id, None)?;
    for file in &files {
        output.line(&format!(
            "   {:<20} {:>8}  blake3 {}",
            file.path.to_string(),
            format_size(file.size),
            render::short_hash(&file.blake3.to_hex())
        ))?;
    }
    let alice_now = engine.session(alice.session_id)?;
    let metadata = serde_json::to_string(&alice_now.seed_metadata()).unwrap_or_default();
    output.line(&format!("   metadata: {metadata}"))?;

    step(
        output,
        6,
        "adopt two workspaces left by the seed system (one idle for 30 days, one without metadata)",
    )?;
    let seed_dir = tempfile::tempdir().map_err(|source| CliError::Io {
        context: "creating a temporary directory".into(),
        source,
    })?;
    let stale = SessionId::from(uuid::Uuid::new_v4());
    let legacy = SessionId::from(uuid::Uuid::new_v4());
    let month_ago: Timestamp = engine.clock().now().saturating_sub(STALE_AGE);
    write_seed_workspace(
        seed_dir.path(),
        stale,
        Some(format!(
            r#"{{"session_id": "{stale}", "created_at": "{month_ago}", "updated_at": "{month_ago}", "version": 1}}"#
        )),
        &[
            ("notes.txt", "old analysis\n"),
            ("model.py", "print('hello from 30 days ago')\n"),
        ],
    )?;
    write_seed_workspace(
        seed_dir.path(),
        legacy,
        None,
        &[("legacy.txt", "made before metadata existed\n")],
    )?;
    let before_adopt = head(&engine)?;
    let report = engine.adopt(seed_dir.path(), &|_, _| {})?;
    output.line(&format!(
        "   adopted with metadata: {:?}; legacy: {:?}",
        report
            .adopted
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        report
            .legacy
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
    ))?;
    show_events(&engine, output, before_adopt)?;

    step(
        output,
        7,
        &format!(
            "prune sessions idle for {}: a dry run first",
            format_duration(PRUNE_THRESHOLD)
        ),
    )?;
    let policy = PrunePolicy::older_than(PRUNE_THRESHOLD);
    let dry = engine.prune(&policy, true, &|_, _| {})?;
    for candidate in &dry.candidates {
        output.line(&format!(
            "   would delete {} (idle {}, {})",
            candidate.session_id,
            format_duration(candidate.age()),
            format_size(candidate.bytes)
        ))?;
    }
    output.line(&format!("   {}", dry.summary()))?;
    let before_prune = head(&engine)?;
    let real = engine.prune(&policy, false, &|_, _| {})?;
    output.line(&format!("   real run: {}", real.summary()))?;
    show_events(&engine, output, before_prune)?;

    step(
        output,
        8,
        "verify the hash chain and the read models; print a digest to keep elsewhere",
    )?;
    let verified = engine.verify(None, &|_| {})?;
    output.line(&format!(
        "   {}: {} events, head {}:{}; read models {}",
        if verified.ok {
            output.good("ok")
        } else {
            output.bad("FAILED")
        },
        verified.events,
        verified.position,
        verified.head,
        if verified.read_model_mismatches.is_empty() {
            "match the log"
        } else {
            "DIFFER"
        }
    ))?;

    step(
        output,
        9,
        &format!("replay: the adopted session as of position {before_prune}, before the prune"),
    )?;
    let then = engine.session_at(stale, Cut::Position(before_prune))?;
    if let Some(then) = then {
        let summary = SessionSummary::from(&then);
        output.line(&format!(
            "   then: status {}, updated_at {}, files {:?}",
            summary.status.as_str(),
            render::time(summary.updated_at),
            then.files
                .keys()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
        ))?;
    }
    let now = engine.session(stale)?;
    output.line(&format!(
        "   now:  status {}, workspace present: {}",
        now.status.as_str(),
        engine.layout().workspace(stale).exists()
    ))?;
    let timeline = engine.stream_events(StreamId::Session(stale))?;
    output.line(&format!(
        "   its timeline has {} events: {}",
        timeline.len(),
        timeline
            .iter()
            .map(|e| e.kind.as_str())
            .collect::<Vec<_>>()
            .join(" → ")
    ))?;

    let stats = engine.stats()?;
    output.line("")?;
    output.line(&format!(
        "done: {} events in the log, {} sessions, {} executions. Try:",
        verified.events,
        stats.sessions.values().sum::<u64>(),
        stats.executions,
    ))?;
    let sandlog = format!(
        "{} --root {}",
        shell_word(&invoked_as()),
        shell_word(&root.to_string_lossy())
    );
    for command in ["session list", "log --limit 20", "verify"] {
        output.line(&format!("  {sandlog} {command}"))?;
    }
    Ok(0)
}

/// How a person runs this binary from a shell: `sandlog` when that name
/// on `PATH` is this very file, else this file's path (`make demo` runs it
/// from the target directory), so the closing lines run as printed.
fn invoked_as() -> String {
    let Ok(this) = std::env::current_exe().and_then(std::fs::canonicalize) else {
        return "sandlog".to_owned();
    };
    let on_path = std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("sandlog"))
            .find(|candidate| candidate.is_file())
            .and_then(|candidate| std::fs::canonicalize(candidate).ok())
            .is_some_and(|found| found == this)
    });
    if on_path {
        "sandlog".to_owned()
    } else {
        this.to_string_lossy().into_owned()
    }
}

/// `text` as one POSIX shell word: as is when it has only characters no
/// shell treats specially, else in single quotes.
fn shell_word(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
    if plain {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}

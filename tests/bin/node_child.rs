//! A worker process of one node of a shared log, for the several-nodes
//! test (`it::shared_log`).
//!
//! Usage: `node-child URL ROOT NODE ROUNDS`
//!
//! Opens the engine on ROOT with the shared log at URL as node NODE, prints
//! `ready`, and waits for one line on stdin so every worker starts at once.
//! Then, ROUNDS times: creates a session in its own group (`pid-PID`),
//! writes a file to it, runs Python in it every other round, and every
//! third round prunes one session of its own group. It prints
//! `created SESSION`, `wrote SESSION`, `executed SESSION`, `pruned SESSION`
//! once the engine returned (flushed at once: the parent's record of what
//! was acknowledged), and `done` at the end. Any error ends it with a
//! non-zero status.

use std::collections::BTreeMap;
use std::error::Error;
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::time::Duration;

use sandlog_core::{Outcome, PrunePolicy, WorkspacePath};
use sandlog_runtime::sessions::NewSession;
use sandlog_runtime::{Engine, EngineOptions, ExecRequest};

fn main() -> Result<(), Box<dyn Error + Send + Sync>> {
    let usage = "usage: node-child URL ROOT NODE ROUNDS";
    let mut args = std::env::args().skip(1);
    let url = args.next().ok_or(usage)?;
    let root = PathBuf::from(args.next().ok_or(usage)?);
    let node = args.next().ok_or(usage)?;
    let rounds: u64 = args.next().ok_or(usage)?.parse()?;
    let options = EngineOptions {
        actor: format!("api:node-child-{node}"),
        runtimes_dir: std::env::var_os("SANDLOG_RUNTIMES_DIR").map(PathBuf::from),
        cache_dir: Some(sandlog_tests::engine::cache_dir()),
        store: Some(url),
        node: Some(node.clone()),
        create: true,
        ..EngineOptions::default()
    };
    let engine = Engine::open(&root, options)?;
    let group = format!("pid-{}", std::process::id());
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    writeln!(out, "ready")?;
    out.flush()?;
    let mut go = String::new();
    std::io::stdin().lock().read_line(&mut go)?;

    let path = WorkspacePath::parse("round.txt")?;
    for round in 0..rounds {
        let session_id = engine
            .create_session_with(NewSession {
                labels: BTreeMap::from([("round".to_owned(), round.to_string())]),
                group: Some(group.clone()),
                ..NewSession::default()
            })?
            .session_id;
        writeln!(out, "created {session_id}")?;
        out.flush()?;
        engine.write_file(session_id, &path, round.to_string().as_bytes(), false)?;
        writeln!(out, "wrote {session_id}")?;
        out.flush()?;
        if round % 2 == 0 {
            let run = engine.execute(
                session_id,
                &ExecRequest::python(format!("print(open('round.txt').read(), {round})")),
            )?;
            if run.outcome != Outcome::Ok {
                return Err(format!(
                    "round {round}: {:?}: {}",
                    run.outcome,
                    String::from_utf8_lossy(&run.stderr)
                )
                .into());
            }
            writeln!(out, "executed {session_id}")?;
            out.flush()?;
        }
        if round % 3 == 2 {
            let policy = PrunePolicy {
                max_deletions: Some(1),
                group: Some(group.clone()),
                ..PrunePolicy::older_than(Duration::ZERO)
            };
            let report = engine.prune(&policy, false, &|_, _| {})?;
            if !report.errors.is_empty() {
                return Err(format!("prune errors: {:?}", report.errors).into());
            }
            for pruned in report.deleted_sessions {
                writeln!(out, "pruned {pruned}")?;
            }
            out.flush()?;
        }
    }
    writeln!(out, "done")?;
    out.flush()?;
    Ok(())
}

//! A child process for the asynchronous prune's crash tests: prunes every
//! session of a root (in batches of BATCH) with a fault injector that, at
//! the K-th call of one destructive step, prints `crash-point` and waits
//! for the parent's SIGKILL. The steps: `rename`, just before a workspace
//! is moved into `trash/`; `reclaim`, just before a directory in `trash/`
//! is removed (after the prune returned, in the background pass, which the
//! child waits for as it drops its engine). Prints `pruned <count>` when
//! the prune returns.
//!
//! Usage: `trash-child ROOT rename|reclaim K BATCH`

use std::error::Error;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sandlog_core::{PrunePolicy, SessionId};
use sandlog_runtime::fault::FaultInjector;
use sandlog_runtime::{Engine, EngineOptions};

const USAGE: &str = "usage: trash-child ROOT rename|reclaim K BATCH";

/// Stops the process at the K-th call of one step.
#[derive(Debug)]
struct StopAt {
    reclaim: bool,
    at: u64,
    calls: AtomicU64,
}

impl StopAt {
    fn step(&self) {
        if self.calls.fetch_add(1, Ordering::SeqCst) + 1 == self.at {
            let mut stdout = std::io::stdout();
            let _ = writeln!(stdout, "crash-point");
            let _ = stdout.flush();
            // The parent's SIGKILL ends the process here.
            loop {
                std::thread::sleep(Duration::from_secs(1));
            }
        }
    }
}

impl FaultInjector for StopAt {
    fn before_remove(&self, _session_id: SessionId, _path: &Path) -> std::io::Result<()> {
        if !self.reclaim {
            self.step();
        }
        Ok(())
    }

    fn before_reclaim(&self, _path: &Path) -> std::io::Result<()> {
        if self.reclaim {
            self.step();
        }
        Ok(())
    }
}

fn main() -> Result<(), Box<dyn Error + Send + Sync>> {
    let mut args = std::env::args().skip(1);
    let root = PathBuf::from(args.next().ok_or(USAGE)?);
    let reclaim = match args.next().ok_or(USAGE)?.as_str() {
        "rename" => false,
        "reclaim" => true,
        _ => return Err(USAGE.into()),
    };
    let at: u64 = args.next().ok_or(USAGE)?.parse()?;
    let batch: usize = args.next().ok_or(USAGE)?.parse()?;
    let options = EngineOptions {
        actor: "api:trash-child".to_owned(),
        prune_batch_sessions: Some(batch),
        fault: Some(Arc::new(StopAt {
            reclaim,
            at,
            calls: AtomicU64::new(0),
        })),
        ..EngineOptions::default()
    };
    let engine = Engine::open(&root, options)?;
    let report = engine.prune(&PrunePolicy::older_than(Duration::ZERO), false, &|_, _| {})?;
    let mut stdout = std::io::stdout();
    writeln!(stdout, "pruned {}", report.deleted_sessions.len())?;
    stdout.flush()?;
    drop(engine);
    Ok(())
}

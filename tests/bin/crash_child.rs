//! A child process for the crash tests: performs random engine operations
//! on a root forever (until killed), printing `ack <position> <hash>`
//! after each one the engine acknowledged. The parent SIGKILLs it at a
//! random moment and checks that everything acknowledged survived.
//!
//! With a third argument `prune` it instead prunes every session once, in
//! batches of the fourth argument's sessions (else the default),
//! printing `pruning` before and `pruned <count>` after, so the parent can
//! kill it inside a prune of several batches.
//!
//! Usage: `crash-child ROOT SEED [prune [BATCH]]`

use std::collections::BTreeMap;
use std::error::Error;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use sandlog_core::{PrunePolicy, SessionId, WorkspacePath};
use sandlog_projections::SessionStatus;
use sandlog_runtime::{Engine, EngineOptions, ExecRequest, ReconcileOptions};

const USAGE: &str = "usage: crash-child ROOT SEED [prune [BATCH]]";

/// A tiny deterministic generator (xorshift), so a seed replays a run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn main() -> Result<(), Box<dyn Error + Send + Sync>> {
    let mut args = std::env::args().skip(1);
    let root = PathBuf::from(args.next().ok_or(USAGE)?);
    let seed: u64 = args.next().ok_or(USAGE)?.parse()?;
    let prune_once = args.next().is_some_and(|mode| mode == "prune");
    let prune_batch_sessions = args.next().map(|batch| batch.parse()).transpose()?;
    let mut rng = Rng(seed | 1);
    Engine::init(&root)?;
    let options = EngineOptions {
        actor: "api:crash-child".to_owned(),
        runtimes_dir: std::env::var_os("SANDLOG_RUNTIMES_DIR").map(PathBuf::from),
        cache_dir: Some(sandlog_tests::engine::cache_dir()),
        prune_batch_sessions,
        ..EngineOptions::default()
    };
    let engine = Engine::open(&root, options)?;
    let mut stdout = std::io::stdout();
    if prune_once {
        writeln!(stdout, "pruning")?;
        stdout.flush()?;
        let report = engine.prune(&PrunePolicy::older_than(Duration::ZERO), false, &|_, _| {})?;
        writeln!(stdout, "pruned {}", report.deleted_sessions.len())?;
        stdout.flush()?;
        return Ok(());
    }
    loop {
        let active: Vec<SessionId> = engine
            .sessions(Some(SessionStatus::Active))?
            .into_iter()
            .map(|s| s.session_id)
            .collect();
        let pick = |rng: &mut Rng| active.get(rng.below(active.len() as u64) as usize).copied();
        let done = match rng.below(10) {
            0..=2 => engine.create_session(BTreeMap::new()).map(|_| ()).is_ok(),
            3..=4 => match pick(&mut rng) {
                Some(id) => {
                    let name = WorkspacePath::parse(&format!("f{}.txt", rng.below(4)))?;
                    engine
                        .write_file(id, &name, &vec![b'x'; rng.below(4096) as usize], true)
                        .is_ok()
                }
                None => false,
            },
            5 => match pick(&mut rng) {
                Some(id) => engine.delete_session(id, "crash test").is_ok(),
                None => false,
            },
            6 => {
                let policy = PrunePolicy {
                    max_deletions: Some(2),
                    ..PrunePolicy::older_than(Duration::ZERO)
                };
                engine.prune(&policy, false, &|_, _| {}).is_ok()
            }
            7 => engine
                .reconcile(&ReconcileOptions::default(), &|_, _| {})
                .is_ok(),
            _ => match pick(&mut rng) {
                Some(id) if std::env::var_os("SANDLOG_RUNTIMES_DIR").is_some() => {
                    let code =
                        format!("open('g{}.txt', 'w').write('{}')", rng.below(3), rng.next());
                    engine.execute(id, &ExecRequest::python(code)).is_ok()
                }
                _ => false,
            },
        };
        if done {
            let head = engine.head()?;
            writeln!(stdout, "ack {} {}", head.position.0, head.hash)?;
            stdout.flush()?;
        }
    }
}

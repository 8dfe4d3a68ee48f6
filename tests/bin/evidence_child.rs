//! A child process for the evidence crash test: runs Python executions
//! that write files kept as evidence (random sizes, some past the budget,
//! some sharing bytes, evidence sometimes off) and host writes on a root
//! forever (until killed), printing `ack <position>` after each operation
//! the engine acknowledged. The parent SIGKILLs it at a random moment and
//! checks every blob the log names.
//!
//! Usage: `evidence-child ROOT SEED` (with `SANDLOG_RUNTIMES_DIR` and
//! `SANDLOG_TEST_CACHE_DIR` set).

use std::collections::BTreeMap;
use std::error::Error;
use std::io::Write;
use std::path::PathBuf;

use sandlog_core::{SessionId, WorkspacePath};
use sandlog_projections::SessionStatus;
use sandlog_runtime::{Engine, EngineOptions, ExecRequest, LimitOverrides};

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

/// Budgets an execution runs under: off, small, the default.
const BUDGETS: [Option<u64>; 3] = [Some(0), Some(16 * 1024), None];

fn main() -> Result<(), Box<dyn Error + Send + Sync>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: evidence-child ROOT SEED";
    let root = PathBuf::from(args.next().ok_or(usage)?);
    let seed: u64 = args.next().ok_or(usage)?.parse()?;
    let mut rng = Rng(seed | 1);
    Engine::init(&root)?;
    let options = EngineOptions {
        actor: "api:evidence-child".to_owned(),
        runtimes_dir: Some(PathBuf::from(
            std::env::var_os("SANDLOG_RUNTIMES_DIR").ok_or("SANDLOG_RUNTIMES_DIR is not set")?,
        )),
        cache_dir: std::env::var_os("SANDLOG_TEST_CACHE_DIR").map(PathBuf::from),
        ..EngineOptions::default()
    };
    let engine = Engine::open(&root, options)?;
    let mut stdout = std::io::stdout();
    loop {
        let mut active: Vec<SessionId> = engine
            .sessions(Some(SessionStatus::Active))?
            .into_iter()
            .map(|s| s.session_id)
            .collect();
        if active.len() < 3 {
            active.push(engine.create_session(BTreeMap::new())?.session_id);
        }
        let id = active
            .get(rng.below(active.len() as u64) as usize)
            .copied()
            .ok_or("no session")?;
        let done = if rng.below(5) == 0 {
            let name = WorkspacePath::parse(&format!("host{}.bin", rng.below(3)))?;
            let fill = rng.below(4) as u8;
            let bytes = vec![fill; rng.below(40_000) as usize];
            engine.write_file(id, &name, &bytes, true).is_ok()
        } else {
            // Files of bytes from a few patterns (shared across sessions
            // and runs, so blobs are deduplicated) and sizes up to 40 KB,
            // against budgets from off to the default.
            let mut code = String::from("import sys\n");
            for _ in 0..=rng.below(4) {
                code.push_str(&format!(
                    "open('g{}.bin', 'wb').write(bytes([(i * {} + {}) % 251 for i in range({})]))\n",
                    rng.below(5),
                    1 + rng.below(3),
                    rng.below(3),
                    rng.below(40_000)
                ));
            }
            code.push_str(&format!(
                "print('run {}')\nsys.stderr.write('err {}')\n",
                rng.next(),
                rng.below(4)
            ));
            let budget = BUDGETS
                .get(rng.below(BUDGETS.len() as u64) as usize)
                .copied()
                .flatten();
            let request = ExecRequest {
                limits: LimitOverrides {
                    evidence_bytes: budget,
                    ..LimitOverrides::default()
                },
                ..ExecRequest::python(code)
            };
            engine.execute(id, &request).is_ok()
        };
        if done {
            let head = engine.head()?;
            writeln!(stdout, "ack {}", head.position.0)?;
            stdout.flush()?;
        }
    }
}

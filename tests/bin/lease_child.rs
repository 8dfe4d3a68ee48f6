//! A child process for the lease tests: runs one Python execution in an
//! existing session that writes `started.txt`, then sleeps SECONDS, then
//! writes `done.txt`; prints `executed <outcome> <position>` when the
//! engine recorded it. The parent watches for `started.txt` to know the
//! lease is held, then prunes, deletes or SIGKILLs.
//!
//! Usage: `lease-child ROOT SESSION SECONDS`

use std::error::Error;
use std::path::PathBuf;
use std::time::Duration;

use sandlog_core::SessionId;
use sandlog_runtime::{Engine, EngineOptions, ExecRequest};

fn main() -> Result<(), Box<dyn Error + Send + Sync>> {
    let usage = "usage: lease-child ROOT SESSION SECONDS";
    let mut args = std::env::args().skip(1);
    let root = PathBuf::from(args.next().ok_or(usage)?);
    let session_id = SessionId::parse(&args.next().ok_or(usage)?)?;
    let seconds: u64 = args.next().ok_or(usage)?.parse()?;
    let options = EngineOptions {
        actor: "api:lease-child".to_owned(),
        runtimes_dir: std::env::var_os("SANDLOG_RUNTIMES_DIR").map(PathBuf::from),
        cache_dir: Some(sandlog_tests::engine::cache_dir()),
        ..EngineOptions::default()
    };
    let engine = Engine::open(&root, options)?;
    let mut request = ExecRequest::python(format!(
        "import time\nopen('started.txt', 'w').write('x')\ntime.sleep({seconds})\nopen('done.txt', 'w').write('y')\nprint('slept')"
    ));
    request.limits.timeout = Some(Duration::from_secs(seconds + 60));
    let execution = engine.execute(session_id, &request)?;
    println!(
        "executed {} {}",
        execution.outcome.as_str(),
        execution.position
    );
    Ok(())
}

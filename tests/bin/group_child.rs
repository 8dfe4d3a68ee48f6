//! A writer process for the group-commit SIGKILL test
//! (`it::eventstore::group_commit_*`): `THREADS` threads append to the
//! store at `DB` (default options: every append durable when
//! acknowledged) at once, each to a stream of its own, until the process
//! is killed. After each append returns it prints `ack POSITION EVENT_ID`;
//! every 64 acknowledgements it prints `counts SYNCS COMMITS` (the WAL's
//! fsyncs and the commits they covered).
//!
//! Usage: `group-child DB THREADS`

use std::error::Error;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Mutex;

use sandlog_core::{EventId, NewEvent, SessionId, StreamVersion};
use sandlog_eventstore::ExpectedVersion;
use sandlog_sqlite::{EventStore, OpenOptions};

const USAGE: &str = "usage: group-child DB THREADS";

fn main() -> Result<(), Box<dyn Error + Send + Sync>> {
    let mut arguments = std::env::args_os().skip(1);
    let database = PathBuf::from(arguments.next().ok_or(USAGE)?);
    let threads: usize = arguments
        .next()
        .ok_or(USAGE)?
        .to_str()
        .ok_or(USAGE)?
        .parse()?;
    let store = EventStore::open(&database, OpenOptions::default())?;
    let out = Mutex::new((std::io::stdout(), 0u64));
    std::thread::scope(|scope| -> Result<(), Box<dyn Error + Send + Sync>> {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| -> Result<(), Box<dyn Error + Send + Sync>> {
                    let stream = SessionId::new_v4().stream();
                    let mut version: Option<StreamVersion> = None;
                    loop {
                        let event = NewEvent {
                            event_id: EventId::now(),
                            kind: "test.appended".to_owned(),
                            schema: 1,
                            actor: "api:group-child".to_owned(),
                            correlation_id: None,
                            causation_id: None,
                            payload: b"{}".to_vec(),
                        };
                        let expected =
                            version.map_or(ExpectedVersion::NoStream, ExpectedVersion::Exact);
                        let envelopes = store.append(stream, expected, &[event])?;
                        let envelope = envelopes.first().ok_or("no envelope")?;
                        version = Some(envelope.version);
                        let mut out = out.lock().unwrap_or_else(|p| p.into_inner());
                        out.1 += 1;
                        let acked = out.1;
                        writeln!(out.0, "ack {} {}", envelope.position.0, envelope.event_id.0)?;
                        if acked.is_multiple_of(64) {
                            let (syncs, commits) = store.group_commit_counts();
                            writeln!(out.0, "counts {syncs} {commits}")?;
                        }
                        out.0.flush()?;
                    }
                })
            })
            .collect();
        for worker in workers {
            worker.join().map_err(|_| "a writer thread panicked")??;
        }
        Ok(())
    })
}

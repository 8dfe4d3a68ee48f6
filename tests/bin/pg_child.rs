//! A writer process for the PostgreSQL concurrency tests (`it::postgres_backend`).
//!
//! Usage: `pg-child URL SHARED_STREAM N` (`N` = 0: until killed)
//!
//! Connects a `PgEventStore` to `URL` (default options), prints `ready`,
//! and waits for one line on stdin so every child starts at once. Then, `N`
//! times (or until SIGKILLed), it appends one event to `SHARED_STREAM` with
//! `Exact(version just read)`, retrying on a version conflict, and one to a
//! session stream of its own with `Exact`, where a conflict would be a bug.
//!
//! It prints `ack EVENT_ID POSITION` for every event an append returned
//! (flushed at once: the parent's record of what was acknowledged), and
//! `done` at the end. Any other error ends it with a non-zero status.

use std::error::Error;
use std::io::{BufRead, Write};

use sandlog_core::{EventId, NewEvent, SessionId, StreamId, StreamVersion};
use sandlog_eventstore::{EventStoreError, ExpectedVersion};
use sandlog_postgres::PgEventStore;

/// Most conflicts one shared append may meet before the child gives up:
/// each conflict means another writer made progress, so this many means
/// something is stuck.
const RETRIES_MAX: u32 = 10_000;

fn event(kind: &str, n: u64) -> NewEvent {
    NewEvent {
        event_id: EventId::now(),
        kind: kind.to_owned(),
        schema: 1,
        actor: format!("api:pg-child-{}", std::process::id()),
        correlation_id: None,
        causation_id: None,
        payload: format!(r#"{{"n":{n},"pid":{}}}"#, std::process::id()).into_bytes(),
    }
}

fn expectation(version: Option<StreamVersion>) -> ExpectedVersion {
    version.map_or(ExpectedVersion::NoStream, ExpectedVersion::Exact)
}

fn run() -> Result<(), Box<dyn Error>> {
    let mut arguments = std::env::args().skip(1);
    let mut next = |name: &str| {
        arguments
            .next()
            .ok_or_else(|| format!("missing argument {name}"))
    };
    let url = next("URL")?;
    let shared = StreamId::parse(&next("SHARED_STREAM")?)?;
    let n: u64 = next("N")?.parse()?;
    let store = PgEventStore::connect(&url)?;
    let own = StreamId::Session(SessionId::new_v4());
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    writeln!(out, "ready")?;
    out.flush()?;
    let mut go = String::new();
    std::io::stdin().lock().read_line(&mut go)?;

    let mut own_version = None;
    let mut i = 0u64;
    while n == 0 || i < n {
        let shared_event = event("shared.appended", i);
        let mut conflicts = 0;
        loop {
            let version = store.stream_version(shared)?;
            match store.append(
                shared,
                expectation(version),
                std::slice::from_ref(&shared_event),
            ) {
                Ok(envelopes) => {
                    for envelope in envelopes {
                        writeln!(out, "ack {} {}", envelope.event_id, envelope.position)?;
                    }
                    out.flush()?;
                    break;
                }
                Err(EventStoreError::VersionConflict { .. }) => {
                    conflicts += 1;
                    if conflicts >= RETRIES_MAX {
                        return Err(format!("{RETRIES_MAX} conflicts in a row").into());
                    }
                }
                Err(error) => return Err(error.into()),
            }
        }
        let own_event = event("own.appended", i);
        let envelopes = store.append(own, expectation(own_version), &[own_event])?;
        for envelope in envelopes {
            writeln!(out, "ack {} {}", envelope.event_id, envelope.position)?;
            own_version = Some(envelope.version);
        }
        out.flush()?;
        i += 1;
    }
    writeln!(out, "done")?;
    out.flush()?;
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    run()
}

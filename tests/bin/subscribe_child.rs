//! A child process for the subscription tests (`it::subscribe`), in one of
//! two roles:
//!
//! * `subscribe-child append DB N`: appends `N` events, one append each, to
//!   the `system` stream and a handful of session streams in turn
//!   (`synchronous = NORMAL`: the test is about ordering, not power loss),
//!   printing `appended POS` for the last one and `done`.
//! * `subscribe-child follow DB NAME`: follows the log from consumer
//!   `NAME`'s stored checkpoint and prints `event POS` for every event it
//!   is given, each line flushed before the next event is asked for (which
//!   is what lets the checkpoint move past it). It never ends on its own:
//!   the test kills it.
//!
//! Any error ends the process with a non-zero status and the error on
//! stderr.

use std::error::Error;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sandlog_core::{EventId, NewEvent, SessionId, StreamId};
use sandlog_eventstore::{ExpectedVersion, LogFilter};
use sandlog_sqlite::{Durability, EventStore, OpenOptions, SubscribeFrom};

/// Session streams the appender spreads its events over (with `system`),
/// so the follower sees interleaved streams, as a real log has.
const STREAMS: usize = 4;

fn append(database: &Path, count: u64) -> Result<(), Box<dyn Error>> {
    let store = EventStore::open(
        database,
        OpenOptions::default().durability(Durability::Normal),
    )?;
    let mut streams = vec![StreamId::System];
    streams.extend((0..STREAMS).map(|_| StreamId::Session(SessionId::new_v4())));
    let mut out = std::io::stdout().lock();
    let mut last = 0;
    for n in 0..count {
        let stream = streams
            .get(usize::try_from(n).unwrap_or(0) % streams.len())
            .copied()
            .unwrap_or(StreamId::System);
        let event = NewEvent {
            event_id: EventId::now(),
            kind: "test.appended".to_owned(),
            schema: 1,
            actor: format!("api:appender-{}", std::process::id()),
            correlation_id: None,
            causation_id: None,
            payload: format!(r#"{{"n":{n}}}"#).into_bytes(),
        };
        let stored = store.append(stream, ExpectedVersion::Any, &[event])?;
        last = stored.first().map_or(last, |envelope| envelope.position.0);
    }
    writeln!(out, "appended {last}")?;
    writeln!(out, "done")?;
    out.flush()?;
    Ok(())
}

fn follow(database: &Path, name: &str) -> Result<(), Box<dyn Error>> {
    let store = EventStore::open(database, OpenOptions::default())?;
    let mut subscription = store.subscribe(
        SubscribeFrom::Checkpoint(name.to_owned()),
        LogFilter::default(),
    )?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "from {}", subscription.committed())?;
    out.flush()?;
    loop {
        if let Some(envelope) = subscription.next_event(Duration::from_secs(1))? {
            writeln!(out, "event {}", envelope.position)?;
            out.flush()?;
        }
    }
}

fn main() -> Result<(), Box<dyn Error>> {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    match arguments.as_slice() {
        [role, database, count] if role == "append" => {
            append(&PathBuf::from(database), count.parse()?)
        }
        [role, database, name] if role == "follow" => follow(&PathBuf::from(database), name),
        _ => Err("usage: subscribe-child append DB N | subscribe-child follow DB NAME".into()),
    }
}

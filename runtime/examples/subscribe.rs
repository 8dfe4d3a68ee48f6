//! Follows a root's log as a named consumer: prints every event after the
//! consumer's stored checkpoint (the whole log the first time), then each
//! event any process appends, one line each, until interrupted (or, with
//! `--until-idle SECS`, until nothing new came for that long). Killed and
//! started again, it resumes where it got to: at least once, in position
//! order, nothing skipped.
//!
//! Run: `cargo run -p sandlog-runtime --example subscribe -- ROOT [CONSUMER] [--until-idle SECS]`
//! (`sandlog init ROOT` or `sandlog demo` makes a root; run `sandlog`
//! commands on it from another terminal to see them arrive). Without a
//! consumer name it starts at position 0 every time and stores nothing.
//! `--correlation ID` (a task id or a UUID, as `sandlog --correlation-id`
//! takes it) follows only that task's events.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use sandlog_runtime::core::escape::for_terminal;
use sandlog_runtime::core::{Position, correlation_id};
use sandlog_runtime::eventstore::LogFilter;
use sandlog_runtime::sqlite::SubscribeFrom;
use sandlog_runtime::{Engine, EngineOptions};

type Error = Box<dyn std::error::Error>;

const USAGE: &str = "usage: subscribe ROOT [CONSUMER] [--until-idle SECS] [--correlation ID]";

fn main() -> Result<(), Error> {
    let mut root: Option<PathBuf> = None;
    let mut consumer: Option<String> = None;
    let mut idle_limit: Option<Duration> = None;
    let mut filter = LogFilter::default();
    let mut arguments = std::env::args().skip(1);
    while let Some(argument) = arguments.next() {
        match argument.as_str() {
            "--until-idle" => {
                let seconds: u64 = arguments.next().ok_or(USAGE)?.parse()?;
                idle_limit = Some(Duration::from_secs(seconds));
            }
            "--correlation" => {
                filter.correlation = Some(correlation_id(&arguments.next().ok_or(USAGE)?)?);
            }
            _ if root.is_none() => root = Some(PathBuf::from(argument)),
            _ if consumer.is_none() => consumer = Some(argument),
            _ => return Err(USAGE.into()),
        }
    }
    let root = root.ok_or(USAGE)?;
    let engine = Engine::open(&root, EngineOptions::default())?;
    let from = match consumer {
        Some(name) => SubscribeFrom::Checkpoint(name),
        None => SubscribeFrom::After(Position::ZERO),
    };
    let mut events = engine.subscribe(from, filter)?;
    eprintln!(
        "following {} after position {}",
        root.display(),
        events.committed()
    );
    let mut last_event = Instant::now();
    loop {
        // Asking for the next event is what marks the previous one as
        // processed: the consumer's checkpoint moves past it the next
        // time the subscription reads the log.
        match events.next_event(Duration::from_millis(500))? {
            Some(envelope) => {
                last_event = Instant::now();
                let correlation = envelope
                    .correlation_id
                    .map(|id| format!(" correlation={id}"))
                    .unwrap_or_default();
                // Kinds and actors are whatever a writer stored: escaped
                // so they cannot drive the terminal.
                println!(
                    "{:>6} {} {:<28} {} by {}{correlation}",
                    envelope.position,
                    envelope.recorded_at,
                    for_terminal(&envelope.kind),
                    envelope.stream,
                    for_terminal(&envelope.actor)
                );
            }
            None if idle_limit.is_some_and(|limit| last_event.elapsed() >= limit) => {
                // Everything printed is processed: store it before leaving.
                let stored = events.commit()?;
                eprintln!("idle; stored position {stored}");
                return Ok(());
            }
            None => {}
        }
    }
}

//! `log`, `replay`, `verify`, `digest`, `migrate`.

use sandlog_runtime::Engine;
use sandlog_runtime::core::{Position, StreamId, Timestamp};
use sandlog_runtime::eventstore::{Digest, LogFilter};
use sandlog_runtime::projections::SessionSummary;
use sandlog_runtime::sqlite::{SUBSCRIBE_POLL, SubscribeFrom};
use serde_json::json;

use super::parse_cut;
use crate::args::{LogArgs, MigrateArgs, ReplayArgs, VerifyArgs};
use crate::exit::{CliError, usage};
use crate::output::{self, Output};
use crate::render;

/// Parses a time flag: an RFC 3339 time, or a duration meaning that long
/// ago by the engine's clock (`--since 10m`).
fn time_flag(
    engine: &Engine,
    flag: &str,
    text: Option<&str>,
) -> Result<Option<Timestamp>, CliError> {
    let Some(text) = text else {
        return Ok(None);
    };
    if let Ok(time) = Timestamp::parse(text) {
        return Ok(Some(time));
    }
    if let Ok(ago) = sandlog_runtime::core::human::parse_duration(text) {
        return Ok(Some(engine.clock().now().saturating_sub(ago)));
    }
    Err(CliError::Usage {
        kind: "invalid_time",
        message: format!(
            "{flag} {text:?}: expected an RFC 3339 time (`2026-01-31T12:00:00Z`) or a duration \
             meaning that long ago (`90s`, `10m`, `2h`, `7d`)"
        ),
    })
}

/// How long `log --follow` waits for an event before looking whether
/// stdout's reader has gone; the subscription itself looks for new events
/// every `SUBSCRIBE_POLL`.
const FOLLOW_WAIT: std::time::Duration = SUBSCRIBE_POLL;

pub fn log(engine: &Engine, args: LogArgs, output: &Output) -> Result<u8, CliError> {
    check_kinds(&args.kinds)?;
    let stream = args
        .session
        .as_deref()
        .map(|id| super::session_id(engine, id))
        .transpose()?
        .map(StreamId::Session);
    let mut filter = LogFilter {
        stream,
        kinds: args.kinds,
        since: time_flag(engine, "--since", args.since.as_deref())?,
        until: time_flag(engine, "--until", args.until.as_deref())?,
        from: args.from.map(Position),
        to: None,
        limit: args.limit,
        correlation: args.correlation,
    };
    if let Some(name) = args.checkpoint {
        return log_consumer(engine, name, filter, args.follow, output);
    }
    let unfiltered = filter.stream.is_none()
        && filter.kinds.is_empty()
        && filter.since.is_none()
        && filter.until.is_none()
        && filter.correlation.is_none();
    if let (Some(tail), true) = (args.tail, unfiltered) {
        // Every position holds an event: the newest N start at head - N + 1.
        let head = engine.head()?;
        let first = head.position.0.saturating_sub(tail).saturating_add(1);
        filter.from = Some(Position(first.max(filter.from.map_or(0, |from| from.0))));
    }
    let mut envelopes = Vec::new();
    let mut newest: Option<Position> = None;
    for envelope in engine.log(filter.clone()) {
        let envelope = envelope?;
        newest = Some(envelope.position);
        envelopes.push(envelope);
        if let Some(tail) = args.tail {
            // Filtered: keep only the newest N seen so far.
            let excess = envelopes
                .len()
                .saturating_sub(usize::try_from(tail).unwrap_or(usize::MAX));
            if excess > 0 {
                envelopes.drain(..excess);
            }
        }
    }
    if !args.follow {
        if output.json || output.ocsf {
            for envelope in &envelopes {
                if !log_json_line(output, engine.node(), envelope)? {
                    return Ok(0);
                }
            }
        } else {
            let mut table = render::table(
                output,
                &["pos", "recorded", "stream", "kind", "actor", "what", "hash"],
            );
            for envelope in &envelopes {
                table.add_row(log_row(output, envelope));
            }
            // WHAT is cut to the terminal's width; --wide shows it whole.
            table.fit(output, 5);
            output.line(&table.to_string())?;
        }
        return Ok(0);
    }
    // Following: every event on its own line as it comes, so no column
    // waits for the widest cell.
    for envelope in &envelopes {
        if !follow_line(output, engine.node(), envelope)? {
            return Ok(0);
        }
    }
    let after = match newest {
        Some(position) => position,
        None => engine.head()?.position.max(Position(
            filter.from.map_or(0, |from| from.0.saturating_sub(1)),
        )),
    };
    let subscription = engine.subscribe(SubscribeFrom::After(after), filter)?;
    follow(subscription, output, engine.node())
}

/// Refuses a `--kind` that names no kind this version knows (a typo would
/// otherwise print an empty log and exit 0): a usage error listing them.
/// A pattern ending in `*` must match at least one.
fn check_kinds(kinds: &[String]) -> Result<(), CliError> {
    let known = sandlog_runtime::core::event::KNOWN_KINDS;
    let unknown: Vec<&str> = kinds
        .iter()
        .map(String::as_str)
        .filter(|kind| match kind.strip_suffix('*') {
            Some(prefix) => !known.iter().any(|(name, _)| name.starts_with(prefix)),
            None => !known.iter().any(|(name, _)| name == kind),
        })
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    let mut names: Vec<&str> = known.iter().map(|(name, _)| *name).collect();
    names.sort_unstable();
    Err(CliError::Usage {
        kind: "unknown_kind",
        message: format!(
            "unknown event kind{} {}: the kinds are {} (a trailing * matches a prefix, as \
             session.prune.*; docs/events.md describes each)",
            if unknown.len() == 1 { "" } else { "s" },
            unknown
                .iter()
                .map(|kind| format!("{:?}", render::escape_for_terminal(kind)))
                .collect::<Vec<_>>()
                .join(", "),
            names.join(", ")
        ),
    })
}

/// `log --checkpoint NAME [--follow]`: the events after the consumer's
/// stored checkpoint; without `--follow`, up to the head as it is now,
/// then the checkpoint is stored.
fn log_consumer(
    engine: &Engine,
    name: String,
    filter: LogFilter,
    follow_on: bool,
    output: &Output,
) -> Result<u8, CliError> {
    let mut subscription = engine.subscribe(SubscribeFrom::Checkpoint(name), filter)?;
    if follow_on {
        return follow(subscription, output, engine.node());
    }
    let store_error = sandlog_runtime::RuntimeError::from;
    while let Some(envelope) = subscription
        .next_event(std::time::Duration::ZERO)
        .map_err(store_error)?
    {
        if !follow_line(output, engine.node(), &envelope)? {
            // The reader went before this event was printed: it is not
            // stored as processed.
            return Ok(0);
        }
    }
    subscription.commit().map_err(store_error)?;
    Ok(0)
}

/// Prints every event the subscription delivers until stdout's reader
/// goes away (or the process is interrupted). Each line is flushed before
/// the next event is asked for, which is what lets a consumer's checkpoint
/// move past it.
fn follow(
    mut subscription: sandlog_runtime::sqlite::Subscription<'_>,
    output: &Output,
    node: &str,
) -> Result<u8, CliError> {
    loop {
        if stdout_reader_gone() {
            return Ok(0);
        }
        let next = subscription
            .next_event(FOLLOW_WAIT)
            .map_err(sandlog_runtime::RuntimeError::from)?;
        if let Some(envelope) = next
            && !follow_line(output, node, &envelope)?
        {
            return Ok(0);
        }
    }
}

/// Whether stdout is a pipe (or terminal) whose other end has gone: `poll`
/// reports an error or hang-up on it. Lets `log --follow | head` end when
/// `head` does, not only at the next event.
fn stdout_reader_gone() -> bool {
    let mut stdout = libc::pollfd {
        fd: libc::STDOUT_FILENO,
        events: 0,
        revents: 0,
    };
    // One descriptor we own the record of, and a zero timeout: poll only
    // writes `revents` and returns at once.
    #[expect(unsafe_code, reason = "poll on one pollfd we own")]
    let ready = unsafe { libc::poll(&mut stdout, 1, 0) };
    ready > 0 && (stdout.revents & (libc::POLLERR | libc::POLLHUP)) != 0
}

/// One envelope as a JSON line (with `--format ocsf`, its OCSF record,
/// the host named by `node`); false once stdout's reader has gone.
fn log_json_line(
    output: &Output,
    node: &str,
    envelope: &sandlog_runtime::core::Envelope,
) -> Result<bool, CliError> {
    let encoded = if output.ocsf {
        serde_json::to_string(&sandlog_runtime::ocsf::record(envelope, node))
    } else {
        serde_json::to_string(envelope)
    };
    let line = encoded.map_err(|error| CliError::Io {
        context: "encoding JSON".into(),
        source: std::io::Error::other(error),
    })?;
    output.line_open(&line)
}

/// One envelope while following: a JSON line, or a human line with the
/// table's columns at fixed widths.
fn follow_line(
    output: &Output,
    node: &str,
    envelope: &sandlog_runtime::core::Envelope,
) -> Result<bool, CliError> {
    if output.json || output.ocsf {
        return log_json_line(output, node, envelope);
    }
    let row = log_row(output, envelope);
    let line = if output.tsv {
        render::table(output, &[]).add_row(row).to_string()
    } else {
        let cell = |index: usize| row.get(index).map_or("", String::as_str);
        format!(
            "{:>6}  {}  {:<16}  {:<26}  {:<10}  {}  {}",
            cell(0),
            cell(1),
            cell(2),
            cell(3),
            cell(4),
            cell(5),
            cell(6)
        )
    };
    output.line_open(&line)
}

/// The cells of one event in `log`'s table.
fn log_row(output: &Output, envelope: &sandlog_runtime::core::Envelope) -> Vec<String> {
    let stream = match &envelope.stream {
        StreamId::Session(session_id) => format!("session/{}", render::id(output, session_id)),
        other => other.to_string(),
    };
    vec![
        envelope.position.to_string(),
        envelope.recorded_at.to_string(),
        stream,
        render::escaped(&envelope.kind),
        render::escaped(&envelope.actor),
        describe_with_correlation(envelope),
        render::hash(output, &envelope.hash.to_hex()),
    ]
}

/// The `what` cell, followed by the correlation id when there is one.
fn describe_with_correlation(envelope: &sandlog_runtime::core::Envelope) -> String {
    let what = render::describe(envelope);
    match envelope.correlation_id {
        Some(correlation) if what.is_empty() => format!("correlation {correlation}"),
        Some(correlation) => format!("{what} (correlation {correlation})"),
        None => what,
    }
}

pub fn replay(engine: &Engine, args: ReplayArgs, output: &Output) -> Result<u8, CliError> {
    let cut = parse_cut(engine, &args.at)?;
    let position = engine.cut_position(cut)?;
    if let Some(id) = args.session {
        let session_id = super::session_id(engine, &id)?;
        let session = engine.session_at(session_id, cut)?;
        let Some(session) = session else {
            return Err(sandlog_runtime::RuntimeError::UnknownSession(session_id).into());
        };
        let summary = SessionSummary::from(&session);
        let files: Vec<_> = session
            .files
            .iter()
            .map(|(path, file)| json!({"path": path, "size": file.size, "blake3": file.blake3, "updated_at": file.updated_at}))
            .collect();
        if output.json {
            let mut document = super::session::session_document(&summary);
            if let Some(object) = document.as_object_mut() {
                object.insert("as_of_position".into(), json!(position));
                // `position`, as `files restore` names the same point.
                object.insert("position".into(), json!(position));
                object.insert("file_list".into(), json!(files));
            }
            output.json(&document)?;
        } else {
            output.line(&format!("as of position {position}:"))?;
            output.line(&render::sessions_table(output, &[summary]).to_string())?;
            let mut table = render::table(output, &["path", "size", "blake3", "written"]);
            for (path, file) in &session.files {
                table.add_row(vec![
                    render::escaped(path),
                    render::size(output, file.size),
                    render::hash(output, &file.blake3.to_hex()),
                    file.updated_at.to_string(),
                ]);
            }
            output.line(&table.to_string())?;
        }
        return Ok(0);
    }
    let bar = output.progress_bar("replaying");
    let state = engine.state_at(cut, output::advance(&bar))?;
    bar.finish();
    let sessions: Vec<SessionSummary> = state.sessions.values().map(SessionSummary::from).collect();
    if output.json {
        let documents: Vec<_> = sessions
            .iter()
            .map(super::session::session_document)
            .collect();
        output.json(
            &json!({"as_of_position": position, "position": position, "sessions": documents, "cleanup": state.stats}),
        )?;
    } else {
        output.line(&format!(
            "as of position {position}: {} sessions",
            sessions.len()
        ))?;
        output.line(&render::sessions_table(output, &sessions).to_string())?;
    }
    Ok(0)
}

pub fn verify(engine: &Engine, args: VerifyArgs, output: &Output) -> Result<u8, CliError> {
    if let (Some(checkpoint), Some(vkey)) = (&args.checkpoint, &args.vkey) {
        let witnesses = super::witness::policy(&args.witness_vkey, args.witnesses)?;
        // The chain and read models first, quietly; then the checkpoint.
        let outcome = engine.verify(None, &|_| {})?;
        if !outcome.ok {
            return Err(CliError::Integrity(not_ok_message(&outcome)));
        }
        return super::proofs::verify_checkpoint(
            engine,
            checkpoint,
            vkey,
            witnesses.as_ref(),
            output,
        );
    }
    let digest = args
        .digest
        .as_deref()
        .map(|text| text.parse::<Digest>())
        .transpose()
        .map_err(usage)?;
    let bar = output.progress_bar("verifying");
    // The head bounds the events to check; a head that cannot be read
    // is reported by `verify` itself, so the bar just stays hidden.
    let total = engine.head().map_or(0, |head| head.position.0);
    let result = engine.verify(digest, &|events| bar.update(events, total));
    bar.finish();
    let outcome = match result {
        Ok(outcome) => outcome,
        Err(error) if error.is_integrity() => {
            if output.json {
                let (position, problem) = match &error {
                    sandlog_runtime::RuntimeError::Store(
                        sandlog_runtime::eventstore::EventStoreError::ChainBroken {
                            position,
                            problem,
                        },
                    ) => (Some(position.0), problem.to_string()),
                    other => (None, other.to_string()),
                };
                output.json(&json!({"ok": false, "first_bad_position": position, "problem": problem, "message": error.to_string()}))?;
                return Ok(crate::exit::EXIT_INTEGRITY);
            }
            return Err(error.into());
        }
        Err(error) => return Err(error.into()),
    };
    if output.json {
        output.json(&json!({
            "ok": outcome.ok,
            "events": outcome.events,
            "head": outcome.head,
            "position": outcome.position,
            "digest_checked": outcome.digest_checked,
            "read_model_mismatches": outcome.read_model_mismatches,
            "missing_blobs": outcome.missing_blobs,
        }))?;
    } else if outcome.ok {
        output.line(&format!(
            "{}: {} events, chain intact{}, read models match the log; head {}:{}",
            output.good("ok"),
            outcome.events,
            if outcome.digest_checked {
                ", extends the digest"
            } else {
                ""
            },
            outcome.position,
            outcome.head
        ))?;
    } else {
        for mismatch in &outcome.read_model_mismatches {
            output.line(&format!(
                "{} {}",
                output.bad("mismatch:"),
                render::escaped(mismatch)
            ))?;
        }
        for hash in &outcome.missing_blobs {
            output.line(&format!("{} {hash}", output.bad("missing blob:")))?;
        }
    }
    if !outcome.ok {
        return Err(CliError::Integrity(not_ok_message(&outcome)));
    }
    Ok(0)
}

/// What a failed verify found, when the chain itself is intact.
fn not_ok_message(outcome: &sandlog_runtime::VerifyOutcome) -> String {
    let mut problems = Vec::new();
    if !outcome.read_model_mismatches.is_empty() {
        problems.push(format!(
            "the read models differ from the log in {} places",
            outcome.read_model_mismatches.len()
        ));
    }
    if !outcome.missing_blobs.is_empty() {
        problems.push(format!(
            "{} blobs that events say were stored are missing from the database",
            outcome.missing_blobs.len()
        ));
    }
    format!("{} (the chain itself is intact)", problems.join("; "))
}

pub fn digest(engine: &Engine, output: &Output) -> Result<u8, CliError> {
    let digest = engine.digest()?;
    if output.json {
        output.json(&json!({"position": digest.position, "hash": digest.hash}))?;
    } else {
        output.line(&digest.to_string())?;
    }
    Ok(0)
}

/// `migrate`: copies the log (the root's, or --from's) into --to, then
/// verifies and compares both sides. `engine` is the root's when there is
/// no --from: the root is checked (anchor, schema) before its log is read.
pub fn migrate(
    engine: Option<&Engine>,
    args: MigrateArgs,
    output: &Output,
) -> Result<u8, CliError> {
    use sandlog_runtime::migrate::{LogLocation, migrate};
    let from = match (&args.from, engine) {
        (Some(from), _) => LogLocation::parse(from),
        (None, Some(engine)) => LogLocation::Sqlite(engine.layout().database.clone()),
        (None, None) => {
            return Err(CliError::Usage {
                kind: "usage",
                message: "migrate: no source; give --from URL or a root".into(),
            });
        }
    };
    let to = LogLocation::parse(&args.to);
    let report = migrate(&from, &to, &mut |_| {})?;
    if output.json {
        output.json(&json!({
            "events": report.to.events,
            "head": report.to.head.to_hex(),
            "root": report.to.root.to_hex(),
            "position": report.head_position,
            "blobs": report.blobs,
            "erased_blobs": report.erased_blobs,
            "chunks": report.chunks,
            "checkpoints": report.checkpoints,
            "from": report.from.location,
            "to": report.to.location,
        }))?;
    } else {
        output.line(&format!(
            "migrated {} events, {} blobs ({} erased), {} checkpoints from {} to {}; \
             both verified: head {}, root {}",
            report.to.events,
            report.blobs,
            report.erased_blobs,
            report.checkpoints,
            report.from.location,
            report.to.location,
            report.to.head.to_hex(),
            report.to.root.to_hex(),
        ))?;
    }
    Ok(0)
}

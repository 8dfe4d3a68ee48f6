//! `log`, `replay`, `verify`, `digest`.

use sandlog_runtime::Engine;
use sandlog_runtime::core::human::format_size;
use sandlog_runtime::core::{Position, StreamId, Timestamp};
use sandlog_runtime::eventstore::{Digest, LogFilter};
use sandlog_runtime::projections::SessionSummary;
use sandlog_runtime::projections::replay::{self, Cut};
use serde_json::json;

use crate::args::{LogArgs, ReplayArgs, VerifyArgs};
use crate::exit::{CliError, usage};
use crate::output::{self, Output};
use crate::render;

fn timestamp(text: Option<&str>) -> Result<Option<Timestamp>, CliError> {
    text.map(Timestamp::parse).transpose().map_err(usage)
}

pub fn log(engine: &Engine, args: LogArgs, output: &Output) -> Result<u8, CliError> {
    let stream = args
        .session
        .as_deref()
        .map(super::session_id)
        .transpose()?
        .map(StreamId::Session);
    let filter = LogFilter {
        stream,
        kinds: args.kinds,
        since: timestamp(args.since.as_deref())?,
        until: timestamp(args.until.as_deref())?,
        from: args.from.map(Position),
        to: None,
        limit: args.limit,
    };
    let mut table = (!output.json).then(|| {
        render::table(
            output,
            &["pos", "recorded", "stream", "kind", "what", "hash"],
        )
    });
    for envelope in engine.store().query(filter) {
        let envelope = envelope.map_err(sandlog_runtime::RuntimeError::from)?;
        match &mut table {
            None => {
                let line = serde_json::to_string(&envelope).map_err(|error| CliError::Io {
                    context: "encoding JSON".into(),
                    source: std::io::Error::other(error),
                })?;
                output.line(&line)?;
            }
            Some(table) => {
                table.add_row(vec![
                    envelope.position.to_string(),
                    envelope.recorded_at.to_string(),
                    envelope.stream.to_string(),
                    render::escaped(&envelope.kind),
                    render::describe(&envelope),
                    render::short_hash(&envelope.hash.to_hex()).to_owned(),
                ]);
            }
        }
    }
    if let Some(table) = table {
        output.line(&table.to_string())?;
    }
    Ok(0)
}

/// Parses `--at POS|TIME`: an integer is a position; otherwise an RFC 3339
/// time, or a duration meaning that long ago (`2h`, by the engine's clock).
pub fn parse_cut(engine: &Engine, text: &str) -> Result<Cut, CliError> {
    if let Ok(position) = text.parse::<u64>() {
        return Ok(Cut::Position(Position(position)));
    }
    if let Ok(time) = Timestamp::parse(text) {
        return Ok(Cut::Time(time));
    }
    if let Ok(ago) = sandlog_runtime::core::human::parse_duration(text) {
        return Ok(Cut::Time(engine.clock().now().saturating_sub(ago)));
    }
    Err(CliError::Usage {
        kind: "invalid_cut",
        message: format!(
            "--at {text:?}: expected a position (integer), an RFC 3339 time, or a duration meaning that long ago (`2h`)"
        ),
    })
}

pub fn replay(engine: &Engine, args: ReplayArgs, output: &Output) -> Result<u8, CliError> {
    let cut = parse_cut(engine, &args.at)?;
    let position = cut
        .position(engine.store())
        .map_err(sandlog_runtime::RuntimeError::from)?;
    if let Some(id) = args.session {
        let session_id = super::session_id(&id)?;
        let session = replay::session_at(engine.store(), session_id, cut)
            .map_err(sandlog_runtime::RuntimeError::from)?;
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
                    format_size(file.size),
                    render::short_hash(&file.blake3.to_hex()).to_owned(),
                    file.updated_at.to_string(),
                ]);
            }
            output.line(&table.to_string())?;
        }
        return Ok(0);
    }
    let bar = output.progress_bar("replaying");
    let state = replay::state_at_with_progress(engine.store(), cut, output::advance(&bar))
        .map_err(sandlog_runtime::RuntimeError::from)?;
    bar.finish_and_clear();
    let sessions: Vec<SessionSummary> = state.sessions.values().map(SessionSummary::from).collect();
    if output.json {
        let documents: Vec<_> = sessions
            .iter()
            .map(super::session::session_document)
            .collect();
        output.json(
            &json!({"as_of_position": position, "sessions": documents, "cleanup": state.stats}),
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
        // The chain and read models first, quietly; then the checkpoint.
        let outcome = engine.verify(None, &|_| {})?;
        if !outcome.ok {
            return Err(CliError::Integrity(not_ok_message(&outcome)));
        }
        return super::proofs::verify_checkpoint(engine, checkpoint, vkey, output);
    }
    let digest = args
        .digest
        .as_deref()
        .map(|text| text.parse::<Digest>())
        .transpose()
        .map_err(usage)?;
    let bar = output.progress_bar("verifying");
    let result = engine.verify(digest, &|events| bar.set_position(events));
    bar.finish_and_clear();
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
    let digest = engine
        .store()
        .digest()
        .map_err(sandlog_runtime::RuntimeError::from)?;
    if output.json {
        output.json(&json!({"position": digest.position, "hash": digest.hash}))?;
    } else {
        output.line(&digest.to_string())?;
    }
    Ok(0)
}

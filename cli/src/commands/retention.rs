//! `blob cat`, `erase`, `gc`, `config`: stored evidence and what keeps or
//! removes it.

use sandlog_runtime::Engine;
use sandlog_runtime::core::Hash;
use sandlog_runtime::core::human::{format_size, parse_duration};
use sandlog_runtime::evidence::{EVIDENCE_BUDGET_SETTING, EVIDENCE_BYTES_DEFAULT, SETTINGS};
use serde_json::json;

use crate::args::{BlobCommand, ConfigCommand, EraseArgs, GcArgs};
use crate::exit::{CliError, usage};
use crate::output::{Output, RawStdout};
use crate::render;

pub fn blob(engine: &Engine, command: BlobCommand) -> Result<u8, CliError> {
    match command {
        BlobCommand::Cat { hash } => {
            let hash = Hash::from_hex(&hash).map_err(usage)?;
            // Streamed a chunk at a time: a blob is never loaded whole.
            let mut stdout = RawStdout::new();
            engine.cat_blob(&hash, &mut stdout)?;
            stdout.finish()?;
        }
    }
    Ok(0)
}

pub fn erase(engine: &Engine, args: EraseArgs, output: &Output) -> Result<u8, CliError> {
    let session_id = super::session_id(engine, &args.id)?;
    let path = args
        .path
        .as_deref()
        .map(super::workspace_path)
        .transpose()?;
    let report = engine.erase(session_id, path.as_ref(), &args.reason)?;
    if output.json {
        output.json(&report)?;
    } else {
        output.line(&format!(
            "erased {} blobs ({}) of session {session_id}{}; events and hashes remain, so `sandlog verify` still passes",
            report.erased,
            format_size(report.bytes),
            path.as_ref()
                .map_or(String::new(), |path| format!(" under {}", render::escaped(path))),
        ))?;
        if report.kept_for_hold > 0 {
            output.line(&format!(
                "{} blobs left in place: a held session names them too",
                report.kept_for_hold
            ))?;
        }
        if !report.wal_cleared {
            output.line(
                "the write-ahead log was busy: erased bytes may stay in sandlog.db-wal until the next checkpoint (run `sandlog gc` when nothing else reads the root)",
            )?;
        }
    }
    Ok(0)
}

pub fn gc(engine: &Engine, args: GcArgs, output: &Output) -> Result<u8, CliError> {
    let age = args
        .evidence_older_than
        .as_deref()
        .map(parse_duration)
        .transpose()
        .map_err(usage)?;
    let report = engine.gc(age)?;
    if output.json {
        output.json(&report)?;
    } else {
        output.line(&format!(
            "removed {} unreferenced blobs ({} freed)",
            report.blobs_removed,
            format_size(report.bytes_freed)
        ))?;
        if age.is_some() {
            output.line(&format!(
                "erased {} blobs of expired evidence ({})",
                report.blobs_erased,
                format_size(report.bytes_erased)
            ))?;
        }
    }
    Ok(0)
}

/// A setting's default, as text.
fn default_of(key: &str) -> String {
    match key {
        EVIDENCE_BUDGET_SETTING => format_size(EVIDENCE_BYTES_DEFAULT),
        _ => String::new(),
    }
}

/// Refuses a key that is not a setting, naming the settings.
fn known(key: &str) -> Result<(), CliError> {
    if SETTINGS.iter().any(|(name, _)| *name == key) {
        return Ok(());
    }
    let names: Vec<&str> = SETTINGS.iter().map(|(name, _)| *name).collect();
    Err(CliError::Usage {
        kind: "unknown_setting",
        message: format!(
            "unknown setting {key:?}; the settings are: {} (`sandlog config list`)",
            names.join(", ")
        ),
    })
}

pub fn config(engine: &Engine, command: ConfigCommand, output: &Output) -> Result<u8, CliError> {
    match command {
        ConfigCommand::Get { key } => {
            known(&key)?;
            let value = engine.setting(&key)?;
            if output.json {
                output.json(&json!({"key": key, "value": value, "default": default_of(&key)}))?;
            } else {
                match value {
                    Some(value) => output.line(&render::escaped(value))?,
                    None => output.line(&format!("unset (default {})", default_of(&key)))?,
                }
            }
        }
        ConfigCommand::Set { key, value } => {
            engine.configure(&key, Some(&value))?;
            if output.json {
                output.json(&json!({"key": key, "value": value}))?;
            } else {
                output.line(&format!(
                    "{} = {}",
                    render::escaped(&key),
                    render::escaped(&value)
                ))?;
            }
        }
        ConfigCommand::Unset { key } => {
            known(&key)?;
            engine.configure(&key, None)?;
            if output.json {
                output.json(&json!({"key": key, "value": null}))?;
            } else {
                output.line(&format!(
                    "{} unset (default {})",
                    render::escaped(&key),
                    default_of(&key)
                ))?;
            }
        }
        ConfigCommand::List => {
            let mut settings = Vec::new();
            for (key, meaning) in SETTINGS {
                settings.push((*key, engine.setting(key)?, *meaning));
            }
            if output.json {
                let documents: Vec<_> = settings
                    .iter()
                    .map(|(key, value, meaning)| {
                        json!({"key": key, "value": value, "default": default_of(key), "description": meaning})
                    })
                    .collect();
                output.json(&documents)?;
            } else {
                let mut table = render::table(output, &["setting", "value", "default", "meaning"]);
                for (key, value, meaning) in &settings {
                    table.add_row(vec![
                        (*key).to_owned(),
                        value
                            .as_deref()
                            .map_or("(unset)".to_owned(), render::escaped),
                        default_of(key),
                        (*meaning).to_owned(),
                    ]);
                }
                output.line(&table.to_string())?;
            }
        }
    }
    Ok(0)
}

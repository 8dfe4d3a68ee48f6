//! `init`, `completions`, `man`, `export-metadata`, `stats`.

use std::path::Path;

use clap::CommandFactory;
use sandlog_runtime::Engine;
use sandlog_runtime::core::human::format_size;
use sandlog_runtime::projections::{SessionStatus, query};
use serde_json::json;

use crate::args::Cli;
use crate::exit::CliError;
use crate::output::Output;

pub fn init(root: &Path, output: &Output) -> Result<u8, CliError> {
    let root = Engine::init(root)?;
    // Opening creates the database and its schema.
    drop(super::open(&root)?);
    if output.json {
        output.json(&json!({"root": root}))?;
    } else {
        output.line(&format!("initialised {}", root.display()))?;
    }
    Ok(0)
}

pub fn completions(shell: clap_complete::Shell) -> Result<u8, CliError> {
    let mut command = Cli::command();
    clap_complete::generate(shell, &mut command, "sandlog", &mut std::io::stdout());
    Ok(0)
}

pub fn man() -> Result<u8, CliError> {
    let page = clap_mangen::Man::new(Cli::command());
    page.render(&mut std::io::stdout())
        .map_err(|source| CliError::Io {
            context: "writing the man page".into(),
            source,
        })?;
    Ok(0)
}

pub fn export_metadata(engine: &Engine, dir: &Path, output: &Output) -> Result<u8, CliError> {
    std::fs::create_dir_all(dir).map_err(|source| CliError::Io {
        context: format!("creating {}", dir.display()),
        source,
    })?;
    let mut written = 0u64;
    let mut skipped_legacy = 0u64;
    for session in engine.sessions(Some(SessionStatus::Active))? {
        if session.legacy {
            skipped_legacy += 1;
            continue;
        }
        let path = dir.join(format!("{}.json", session.session_id));
        let text = serde_json::to_string_pretty(&session.seed_metadata()).map_err(|error| {
            CliError::Io {
                context: "encoding metadata".into(),
                source: std::io::Error::other(error),
            }
        })?;
        std::fs::write(&path, text).map_err(|source| CliError::Io {
            context: format!("writing {}", path.display()),
            source,
        })?;
        written += 1;
    }
    if output.json {
        output.json(&json!({"written": written, "skipped_legacy": skipped_legacy}))?;
    } else {
        output.line(&format!(
            "wrote {written} metadata files to {} ({skipped_legacy} legacy sessions have none)",
            dir.display()
        ))?;
    }
    Ok(0)
}

pub fn stats(engine: &Engine, output: &Output) -> Result<u8, CliError> {
    let stats = query::stats(engine.store()).map_err(sandlog_runtime::RuntimeError::from)?;
    let failed_intents = engine.failed_intents()?;
    let head = engine
        .store()
        .head()
        .map_err(sandlog_runtime::RuntimeError::from)?;
    let log_bytes = std::fs::metadata(&engine.layout().database)
        .map(|m| m.len())
        .unwrap_or(0)
        + std::fs::metadata(engine.layout().database.with_extension("db-wal"))
            .map(|m| m.len())
            .unwrap_or(0);
    if output.json {
        output.json(&json!({
            "events": head.position.0,
            "log_bytes": log_bytes,
            "sessions": stats.sessions,
            "legacy_sessions": stats.legacy_sessions,
            "workspace_bytes": stats.workspace_bytes,
            "files": stats.files,
            "executions": stats.executions,
            "cleanup": stats.cleanup,
            "failed_intents": failed_intents,
        }))?;
        return Ok(0);
    }
    let mut table = crate::render::table(output, &["", ""]);
    table.add_row(vec!["events".to_owned(), head.position.0.to_string()]);
    table.add_row(vec!["log size".to_owned(), format_size(log_bytes)]);
    for (status, count) in &stats.sessions {
        table.add_row(vec![format!("sessions {status}"), count.to_string()]);
    }
    table.add_row(vec![
        "legacy sessions".to_owned(),
        stats.legacy_sessions.to_string(),
    ]);
    table.add_row(vec![
        "workspace bytes".to_owned(),
        format_size(stats.workspace_bytes),
    ]);
    table.add_row(vec!["files".to_owned(), stats.files.to_string()]);
    table.add_row(vec!["executions".to_owned(), stats.executions.to_string()]);
    let cleanup = &stats.cleanup;
    table.add_row(vec![
        "prune runs".to_owned(),
        cleanup.prune_runs.to_string(),
    ]);
    table.add_row(vec![
        "sessions pruned".to_owned(),
        format!(
            "{} ({})",
            cleanup.sessions_pruned,
            format_size(cleanup.pruned_bytes)
        ),
    ]);
    table.add_row(vec![
        "prune errors".to_owned(),
        cleanup.prune_errors.to_string(),
    ]);
    table.add_row(vec![
        "sessions deleted".to_owned(),
        cleanup.sessions_deleted.to_string(),
    ]);
    table.add_row(vec![
        "reconcile runs".to_owned(),
        cleanup.reconcile_runs.to_string(),
    ]);
    table.add_row(vec![
        "orphans".to_owned(),
        format!(
            "{} quarantined, {} purged",
            cleanup.orphans_quarantined, cleanup.orphans_purged
        ),
    ]);
    table.add_row(vec![
        "intents finished".to_owned(),
        cleanup.intents_finished.to_string(),
    ]);
    table.add_row(vec![
        "intents failing".to_owned(),
        failed_intents.len().to_string(),
    ]);
    for failed in &failed_intents {
        table.add_row(vec![
            format!("  {} {}", failed.intent, failed.session_id),
            failed.error.clone(),
        ]);
    }
    table.add_row(vec![
        "cleanup time".to_owned(),
        sandlog_runtime::core::human::format_duration(std::time::Duration::from_micros(
            cleanup.cleanup_duration_us,
        )),
    ]);
    output.line(&table.to_string())?;
    Ok(0)
}

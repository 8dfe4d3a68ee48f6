//! `prune` and `reconcile`.

use sandlog_runtime::core::PrunePolicy;
use sandlog_runtime::core::human::{format_duration, format_size, parse_duration, parse_size};
use sandlog_runtime::{Engine, ReconcileOptions};
use serde_json::json;

use crate::args::{PruneArgs, ReconcileArgs};
use crate::exit::{CliError, usage};
use crate::output::Output;
use crate::render;

pub fn prune(engine: &Engine, args: PruneArgs, output: &Output) -> Result<u8, CliError> {
    let policy = PrunePolicy {
        older_than: parse_duration(&args.older_than).map_err(usage)?,
        max_deletions: args.max_deletions,
        max_sessions: args.max_sessions,
        max_total_bytes: args
            .max_bytes
            .as_deref()
            .map(parse_size)
            .transpose()
            .map_err(usage)?,
    };
    let bar = output.progress_bar("pruning");
    let progress = crate::output::advance(&bar);
    let report = engine.prune(&policy, args.dry_run, &progress)?;
    bar.finish_and_clear();
    if output.json {
        output.json(&json!({
            "deleted_sessions": report.deleted_sessions,
            "skipped_sessions": report.skipped_sessions,
            "skipped_reasons": report.skipped_reasons,
            "reclaimed_bytes": report.reclaimed_bytes,
            "errors": report.errors,
            "dry_run": report.dry_run,
            "candidates": report.candidates,
            "run_id": report.run_id,
            "duration_ms": report.duration_ms,
            "summary": report.summary(),
        }))?;
    } else {
        if !report.candidates.is_empty() {
            let mut table = render::table(
                output,
                &[
                    "session",
                    "idle",
                    "updated",
                    "size",
                    "selected by",
                    "result",
                ],
            );
            for candidate in &report.candidates {
                let result = if let Some(error) = report.errors.get(&candidate.session_id) {
                    output.bad(&render::escaped(format!("failed: {error}")))
                } else if let Some(reason) = report.skipped_reasons.get(&candidate.session_id) {
                    render::escaped(format!("kept: {reason}"))
                } else if report.dry_run {
                    "would delete".to_owned()
                } else {
                    output.good("deleted")
                };
                table.add_row(vec![
                    candidate.session_id.to_string(),
                    format_duration(candidate.age()),
                    candidate.updated_at.to_string(),
                    format_size(candidate.bytes),
                    format!("{:?}", candidate.selected_by).to_lowercase(),
                    result,
                ]);
            }
            output.line(&table.to_string())?;
        }
        for (session_id, reason) in &report.skipped_reasons {
            if !report
                .candidates
                .iter()
                .any(|candidate| candidate.session_id == *session_id)
            {
                output.line(&render::escaped(format!("skipped {session_id}: {reason}")))?;
            }
        }
        output.line(&report.summary())?;
    }
    Ok(if report.errors.is_empty() {
        0
    } else {
        crate::exit::EXIT_FAILURE
    })
}

pub fn reconcile(engine: &Engine, args: ReconcileArgs, output: &Output) -> Result<u8, CliError> {
    let options = ReconcileOptions {
        dry_run: args.dry_run,
        purge_orphans: args.purge_orphans,
        deep: args.deep,
        orphan_grace: parse_duration(&args.orphan_grace).map_err(usage)?,
    };
    let bar = output.progress_bar("reconciling");
    let progress = crate::output::advance(&bar);
    let report = engine.reconcile(&options, &progress)?;
    bar.finish_and_clear();
    if output.json {
        output.json(&json!({
            "actions": report.actions,
            "orphans": report.orphans,
            "intents_finished": report.intents_finished,
            "drift": report.drift,
            "ignored": report.ignored,
            "errors": report.errors,
            "dry_run": report.dry_run,
            "duration_ms": report.duration_ms,
            "failed_intents": report.failed_intents,
        }))?;
    } else {
        for failed in &report.failed_intents {
            output.line(&output.bad(&render::escaped(format!(
                "session {}: the pending {} intent keeps failing: {}",
                failed.session_id, failed.intent, failed.error
            ))))?;
        }
        for action in &report.actions {
            output.line(&render::escape_for_terminal(
                &serde_json::to_string(action).unwrap_or_default(),
            ))?;
        }
        output.line(&format!(
            "{} actions: {} intents finished, {} orphans {}, {} drift reports, {} errors{}",
            report.actions.len(),
            report.intents_finished,
            report.orphans.len(),
            if options.purge_orphans {
                "purged"
            } else {
                "quarantined"
            },
            report.drift.len(),
            report.errors.len(),
            if report.dry_run { " (dry run)" } else { "" }
        ))?;
    }
    Ok(if report.errors.is_empty() {
        0
    } else {
        crate::exit::EXIT_FAILURE
    })
}

//! `prune` and `reconcile`.

use sandlog_runtime::core::human::{parse_duration, parse_size};
use sandlog_runtime::core::{CoreError, PrunePolicy, PruneRequest};
use sandlog_runtime::{Engine, ReconcileOptions};
use serde_json::json;

use crate::args::{PruneArgs, ReconcileArgs};
use crate::exit::{CliError, usage};
use crate::output::Output;
use crate::render;

pub fn prune(engine: &Engine, args: PruneArgs, output: &Output) -> Result<u8, CliError> {
    let request = PruneRequest {
        older_than: args
            .older_than
            .as_deref()
            .map(parse_duration)
            .transpose()
            .map_err(usage)?,
        max_deletions: args.max_deletions,
        max_sessions: args.max_sessions,
        max_total_bytes: args
            .max_bytes
            .as_deref()
            .map(parse_size)
            .transpose()
            .map_err(usage)?,
        group: args.group,
    };
    let policy = PrunePolicy::new(request).map_err(|error| match error {
        // The rule is the engine's; the words are the flags'.
        CoreError::NothingToPrune => CliError::Usage {
            kind: "usage",
            message: "say what to prune: --older-than DUR (idle sessions), --max-sessions N or \
                      --max-bytes SIZE (the oldest beyond a cap); --max-deletions only caps a run"
                .into(),
        },
        other => usage(other),
    })?;
    let bar = output.progress_bar("pruning");
    let progress = crate::output::advance(&bar);
    let report = engine.prune(&policy, args.dry_run, &progress)?;
    bar.finish();
    if output.json {
        output.json(&json!({
            "deleted_sessions": report.deleted_sessions,
            // The same sessions, named for what a dry run did with them:
            // nothing, yet.
            "would_delete": if report.dry_run { report.deleted_sessions.clone() } else { Vec::new() },
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
                    render::id(output, &candidate.session_id),
                    render::duration(output, candidate.age()),
                    candidate.updated_at.to_string(),
                    render::size(output, candidate.bytes),
                    selected_by_flag(candidate.selected_by).to_owned(),
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
    bar.finish();
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
            "reclaimed": report.reclaimed,
        }))?;
    } else {
        for line in reconcile_summary(output, &report, options.purge_orphans) {
            output.line(&line)?;
        }
    }
    // Drift (a workspace that differs from the log, or a directory the log
    // does not account for) is an integrity finding, like `verify`'s.
    let drift_found = !report.drift.is_empty() || !report.orphans.is_empty();
    Ok(if drift_found {
        crate::exit::EXIT_INTEGRITY
    } else if report.errors.is_empty() {
        0
    } else {
        crate::exit::EXIT_FAILURE
    })
}

/// What `reconcile` did, for a person: one line per finding, then a
/// summary line.
fn reconcile_summary(
    output: &Output,
    report: &sandlog_runtime::ReconcileReport,
    purge_orphans: bool,
) -> Vec<String> {
    use sandlog_runtime::applier::plan::Action;
    let dry = report.dry_run;
    let mut lines = Vec::new();
    for action in &report.actions {
        let line = match action {
            Action::FinishIntent { session_id, intent } => format!(
                "session {}: {} the pending {} intent",
                render::id(output, session_id),
                if dry { "would finish" } else { "finished" },
                render::escaped(format!("{intent:?}").to_lowercase())
            ),
            Action::Orphan { dir_name, known } => format!(
                "orphan directory {} ({}): {}",
                render::id(output, dir_name),
                if *known {
                    "its session was pruned or deleted"
                } else {
                    "the log never had this session"
                },
                match (dry, purge_orphans) {
                    (true, true) => "would be purged",
                    (true, false) => "would be moved to quarantine/",
                    (false, true) => "purged",
                    (false, false) => "moved to quarantine/",
                }
            ),
            Action::RecordDrift { session_id, drift } => {
                let items: Vec<String> = drift.iter().map(render::describe_drift).collect();
                format!(
                    "drift in session {}: {}{}",
                    render::id(output, session_id),
                    render::escaped(items.join("; ")),
                    if dry { " (not recorded: dry run)" } else { "" }
                )
            }
        };
        lines.push(line);
    }
    for failed in &report.failed_intents {
        lines.push(output.bad(&render::escaped(format!(
            "session {}: the pending {} intent keeps failing: {}",
            render::id(output, &failed.session_id),
            failed.intent,
            failed.error
        ))));
    }
    if report.reclaimed.workspaces > 0 {
        lines.push(format!(
            "{} pruned workspace{} freed from trash/ ({})",
            report.reclaimed.workspaces,
            if report.reclaimed.workspaces == 1 {
                ""
            } else {
                "s"
            },
            sandlog_runtime::core::human::format_size(report.reclaimed.bytes)
        ));
    }
    for (what, error) in &report.errors {
        lines.push(output.bad(&render::escaped(format!("error: {what}: {error}"))));
    }
    let findings = report.drift.len() + report.orphans.len();
    lines.push(if report.actions.is_empty() && report.errors.is_empty() {
        format!(
            "the disk matches the log{}",
            if dry { " (dry run)" } else { "" }
        )
    } else {
        format!(
            "{} intents finished, {} orphans {}, {} sessions with drift, {} errors{}{}",
            report.intents_finished,
            report.orphans.len(),
            if purge_orphans {
                "purged"
            } else {
                "quarantined"
            },
            report.drift.len(),
            report.errors.len(),
            if dry { " (dry run)" } else { "" },
            if findings > 0 {
                "; drift found: exit 4 (`sandlog log --kind 'workspace.*'` lists what was recorded)"
            } else {
                ""
            }
        )
    });
    lines
}

/// The flag whose rule selected a candidate, for the prune table.
fn selected_by_flag(selected_by: sandlog_runtime::projections::prune::SelectedBy) -> &'static str {
    use sandlog_runtime::projections::prune::SelectedBy;
    match selected_by {
        SelectedBy::Age => "--older-than",
        SelectedBy::MaxSessions => "--max-sessions",
        SelectedBy::MaxTotalBytes => "--max-bytes",
    }
}

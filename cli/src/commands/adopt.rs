//! `adopt DIR`.

use std::path::Path;

use serde_json::json;

use crate::exit::CliError;
use crate::output::Output;

pub fn adopt(root: &Path, dir: &Path, output: &Output) -> Result<u8, CliError> {
    let engine = super::open_with(root, true, output)?;
    let bar = output.progress_bar("adopting");
    let progress = crate::output::advance(&bar);
    let report = engine.adopt(dir, &progress)?;
    bar.finish();
    if output.json {
        let skipped: Vec<_> = report
            .skipped
            .iter()
            .map(|(name, reason)| json!({"name": name, "reason": reason}))
            .collect();
        output.json(&json!({
            "adopted": report.adopted,
            "legacy": report.legacy,
            "corrupted": report.corrupted,
            "skipped": skipped,
            "neutralised": report.neutralised,
        }))?;
    } else {
        for id in &report.adopted {
            output.line(&format!("adopted {id} (metadata valid: timestamps kept)"))?;
        }
        for id in &report.legacy {
            output.line(&format!(
                "adopted {id} as legacy (no metadata: never pruned)"
            ))?;
        }
        for id in &report.corrupted {
            output.line(&format!(
                "adopted {id} as legacy (corrupted metadata kept in evidence/)"
            ))?;
        }
        for (name, reason) in &report.skipped {
            output.line(&crate::render::escaped(format!("skipped {name}: {reason}")))?;
        }
        for neutralised in &report.neutralised {
            let id = neutralised.session_id;
            for refused in &neutralised.refused {
                let place = refused
                    .moved_to
                    .as_deref()
                    .map_or_else(|| "deleted".to_owned(), |to| format!("moved to {to}"));
                output.line(&crate::render::escaped(format!(
                    "refused {id}/{} ({}): {}; {place}",
                    refused.path, refused.kind, refused.reason
                )))?;
            }
            for path in &neutralised.copied_links {
                output.line(&crate::render::escaped(format!(
                    "copied {id}/{path}: it had other hard links; the workspace has a private copy"
                )))?;
            }
            if neutralised.unrecorded > 0 {
                output.line(&format!(
                    "{id}: {} more entries refused or copied (see the log)",
                    neutralised.unrecorded
                ))?;
            }
        }
    }
    Ok(0)
}

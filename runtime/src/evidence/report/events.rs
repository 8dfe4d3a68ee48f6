//! Events in the report: each event of the session's stream with what it
//! means, its payload and cause, and executions with their code and output.

use std::time::Duration;

use sandlog_core::event::SessionExecuted;
use sandlog_core::human::{format_duration, format_size};
use sandlog_core::{Envelope, Event};

use sandlog_host::error::Result;

use super::*;

impl Report<'_, '_> {
    pub(super) fn event(
        &mut self,
        envelope: &Envelope,
        event: std::result::Result<Option<Event>, sandlog_core::CoreError>,
        execution: u64,
    ) -> Result<()> {
        let event = match event {
            Ok(Some(event)) => event,
            Ok(None) => {
                self.open_event(
                    envelope,
                    "warn",
                    "event of a kind this version does not know",
                );
                self.payload(envelope);
                self.page.raw("</article>\n");
                return Ok(());
            }
            Err(error) => {
                self.open_event(envelope, "gone", "undecodable event");
                self.note(&format!("Its payload does not decode: {error}"));
                self.payload(envelope);
                self.page.raw("</article>\n");
                return Ok(());
            }
        };
        match event {
            Event::SessionExecuted(executed) => self.execution(envelope, &executed, execution)?,
            Event::FileWritten(written) => self.file_written(envelope, &written)?,
            Event::FileDeleted(deleted) => {
                self.summary.file_changes += 1;
                self.last_write
                    .retain(|path, _| !path.starts_with(&deleted.path));
                let title = format!("{} deleted {}", by_name(deleted.by), deleted.path);
                self.open_event(envelope, "file", &title);
                self.caused_by(envelope);
                self.page.raw("</article>\n");
            }
            Event::SessionCreated(created) => {
                self.open_event(envelope, "", "session created");
                self.page.raw("<table class=\"kv\">\n");
                if created.labels.is_empty() {
                    self.page.row("labels", "none");
                }
                for (key, value) in &created.labels {
                    self.page.row(&format!("label {key}"), value);
                }
                self.page.raw("</table>\n</article>\n");
            }
            Event::SessionAdopted(adopted) => {
                self.open_event(envelope, "", "workspace adopted");
                let page = &mut self.page;
                page.raw("<table class=\"kv\">\n");
                page.row("from", &adopted.source);
                page.row(
                    "metadata",
                    &format!("{:?}", adopted.metadata).to_lowercase(),
                );
                page.row(
                    "created",
                    &adopted
                        .created_at
                        .map_or("unknown".into(), |at| at.to_string()),
                );
                page.row(
                    "updated",
                    &adopted
                        .updated_at
                        .map_or("unknown".into(), |at| at.to_string()),
                );
                if let Some(evidence) = &adopted.evidence {
                    page.row("metadata kept at", evidence);
                }
                for refused in &adopted.refused {
                    page.row(
                        "refused",
                        &format!("{} ({}): {}", refused.path, refused.kind, refused.reason),
                    );
                }
                for copied in &adopted.copied_links {
                    page.row("hard link copied", copied);
                }
                if adopted.unrecorded > 0 {
                    page.row("unrecorded entries", &adopted.unrecorded.to_string());
                }
                page.raw("</table>\n</article>\n");
            }
            Event::SessionPruneRequested(intent) => {
                self.open_event(envelope, "warn", "prune requested");
                let page = &mut self.page;
                page.raw("<table class=\"kv\">\n");
                page.row(
                    "idle",
                    &format_duration(Duration::from_micros(intent.age_us)),
                );
                page.row(
                    "policy threshold",
                    &format_duration(Duration::from_micros(intent.threshold_us)),
                );
                page.row("size", &format_size(intent.size_bytes));
                page.row("prune run", &intent.run_id.to_string());
                page.raw("</table>\n</article>\n");
            }
            Event::SessionPruned(pruned) => {
                self.last_write.clear();
                let title = format!("pruned: {} reclaimed", format_size(pruned.reclaimed_bytes));
                self.open_event(envelope, "gone", &title);
                self.page.raw("</article>\n");
            }
            Event::SessionPruneFailed(failed) => {
                self.open_event(
                    envelope,
                    "warn",
                    "prune failed; the session is active again",
                );
                self.page.element("p", &failed.error);
                self.page.raw("</article>\n");
            }
            Event::SessionDeleteRequested(intent) => {
                self.open_event(envelope, "warn", "delete requested");
                self.page
                    .element("p", &format!("reason: {}", intent.reason));
                self.page.raw("</article>\n");
            }
            Event::SessionDeleted(deleted) => {
                self.last_write.clear();
                let title = format!(
                    "deleted: {} reclaimed",
                    format_size(deleted.reclaimed_bytes)
                );
                self.open_event(envelope, "gone", &title);
                self.page
                    .element("p", &format!("reason: {}", deleted.reason));
                self.page.raw("</article>\n");
            }
            Event::SessionIntentFailed(failed) => {
                let title = format!(
                    "finishing the {} intent failed (still pending)",
                    failed.intent
                );
                self.open_event(envelope, "warn", &title);
                self.page.element("p", &failed.error);
                self.page.raw("</article>\n");
            }
            Event::WorkspaceDriftDetected(detected) => {
                self.open_event(envelope, "warn", "drift: the disk differs from the log");
                self.page.raw("<ul>\n");
                for drift in &detected.drift {
                    self.page.element("li", &describe_drift(drift));
                }
                self.page.raw("</ul>\n");
                if let Some(split) = &detected.split {
                    self.note(&format!(
                        "Part {} of {} of one detection of {} items (digest {}).",
                        split.part + 1,
                        split.parts,
                        split.items_total,
                        split.items_digest
                    ));
                }
                self.page.raw("</article>\n");
            }
            Event::SessionHeld(held) => {
                self.open_event(envelope, "warn", "legal hold placed");
                self.page.element("p", &format!("reason: {}", held.reason));
                self.page.raw("</article>\n");
            }
            Event::SessionReleased(released) => {
                self.open_event(envelope, "warn", "legal hold released");
                if let Some(reason) = &released.reason {
                    self.page.element("p", &format!("reason: {reason}"));
                }
                self.page.raw("</article>\n");
            }
            Event::SessionForked(forked) => {
                self.open_event(envelope, "", "forked from another session");
                let page = &mut self.page;
                page.raw("<table class=\"kv\">\n");
                page.row("origin", &forked.from.to_string());
                page.row("as of position", &forked.at.to_string());
                page.row("files copied", &forked.files.to_string());
                for missing in &forked.missing {
                    page.row("missing (bytes not kept)", &missing.to_string());
                }
                page.raw("</table>\n</article>\n");
            }
            Event::EvidenceErased(erased) => {
                self.open_event(envelope, "gone", "evidence erased");
                let page = &mut self.page;
                page.raw("<table class=\"kv\">\n");
                page.row("reason", &erased.reason);
                if let Some(path) = &erased.path {
                    page.row("path", &path.to_string());
                }
                page.row(
                    "blobs erased",
                    &format!("{} ({})", erased.blobs.len(), format_size(erased.bytes)),
                );
                if !erased.kept_for_hold.is_empty() {
                    page.row("kept for a hold", &erased.kept_for_hold.len().to_string());
                }
                page.raw("</table>\n</article>\n");
            }
            Event::NativeStarted(started) => {
                self.open_event(envelope, "warn", "native command started (not sandboxed)");
                self.page.raw("<pre>");
                self.page.text(&started.argv.join(" "));
                self.page.raw("</pre>\n</article>\n");
            }
            Event::NativeCompleted(completed) => {
                let failed = completed.exit_code != Some(0);
                self.open_event(
                    envelope,
                    if failed { "warn" } else { "" },
                    "native command completed",
                );
                let page = &mut self.page;
                page.raw("<table class=\"kv\">\n");
                let ended = match (completed.exit_code, completed.signal) {
                    _ if completed.timed_out => "killed at its timeout".to_owned(),
                    (Some(code), _) => format!("exit {code}"),
                    (None, Some(signal)) => format!("killed by signal {signal}"),
                    (None, None) => "did not run".to_owned(),
                };
                page.row("ended", &ended);
                page.row(
                    "duration",
                    &format_duration(std::time::Duration::from_micros(completed.duration_us)),
                );
                page.row(
                    "output",
                    &format!(
                        "stdout {}{}, stderr {}{}",
                        format_size(completed.stdout_bytes),
                        if completed.stdout_truncated {
                            " (cut)"
                        } else {
                            ""
                        },
                        format_size(completed.stderr_bytes),
                        if completed.stderr_truncated {
                            " (cut)"
                        } else {
                            ""
                        },
                    ),
                );
                if let Some(scan) = &completed.scan {
                    page.row("files changed", &scan.files_recorded.to_string());
                }
                if let Some(exceeded) = completed.size_exceeded {
                    page.row(
                        "size limit passed",
                        &format!(
                            "{} of {}",
                            format_size(exceeded.bytes),
                            format_size(exceeded.max_size)
                        ),
                    );
                }
                if let Some(message) = &completed.message {
                    page.row("message", message);
                }
                page.raw("</table>\n</article>\n");
            }
            Event::SessionSynced(synced) => {
                self.open_event(envelope, "", "changes made outside sandlog synced");
                let page = &mut self.page;
                page.raw("<table class=\"kv\">\n");
                if let Some(scan) = &synced.scan {
                    page.row("files changed", &scan.files_recorded.to_string());
                }
                if let Some(exceeded) = synced.size_exceeded {
                    page.row(
                        "size limit passed",
                        &format!(
                            "{} of {}",
                            format_size(exceeded.bytes),
                            format_size(exceeded.max_size)
                        ),
                    );
                }
                page.raw("</table>\n</article>\n");
            }
            // Kinds of other streams (orphans, runs, settings) and kernel
            // housekeeping: the kind as the title, and the payload. Listed,
            // not matched by `_`, so a new kind is a compile error here
            // until the report decides how to show it.
            other @ (Event::WorkspaceOrphanQuarantined(_)
            | Event::WorkspaceOrphanPurged(_)
            | Event::WorkspaceReclaimed(_)
            | Event::PruneRunStarted(_)
            | Event::PruneRunCompleted(_)
            | Event::ReconcileRunCompleted(_)
            | Event::RootConfigured(_)
            | Event::KernelRestarted(_)
            | Event::KernelEvicted(_)) => {
                let title = other.kind().to_owned();
                self.open_event(envelope, "", &title);
                self.payload(envelope);
                self.page.raw("</article>\n");
            }
        }
        Ok(())
    }

    /// An event's payload as text, bounded.
    pub(super) fn payload(&mut self, envelope: &Envelope) {
        let shown = envelope
            .payload
            .get(..REPORT_CONTENT_BYTES_MAX)
            .unwrap_or(&envelope.payload);
        self.page.raw("<pre>");
        self.page.text(&String::from_utf8_lossy(shown));
        self.page.raw("</pre>\n");
        if shown.len() < envelope.payload.len() {
            self.summary.cut = true;
            self.note(&format!(
                "Payload cut at {} of {}.",
                format_size(shown.len() as u64),
                format_size(envelope.payload.len() as u64)
            ));
        }
    }

    pub(super) fn caused_by(&mut self, envelope: &Envelope) {
        if let Some(number) = envelope
            .causation_id
            .and_then(|cause| self.executions.get(&cause))
        {
            self.page.raw("<div class=\"meta\">");
            self.page.text(&format!("changed by execution {number}"));
            self.page.raw("</div>\n");
        }
    }

    pub(super) fn execution(
        &mut self,
        envelope: &Envelope,
        executed: &SessionExecuted,
        number: u64,
    ) -> Result<()> {
        self.summary.executions += 1;
        self.hashes.insert(executed.code_blake3);
        self.hashes.insert(executed.stdout_blake3);
        self.hashes.insert(executed.stderr_blake3);
        let title = format!(
            "execution {number}: {} → {}",
            executed.runtime,
            executed.outcome.as_str()
        );
        self.open_event(envelope, "exec", &title);
        let page = &mut self.page;
        page.raw("<table class=\"kv\">\n<tr><th>outcome</th><td>");
        let class = if executed.outcome == sandlog_core::Outcome::Ok
            && executed.exit_code.unwrap_or(0) == 0
        {
            "ok"
        } else {
            "bad"
        };
        page.raw(&format!("<span class=\"{class}\">"));
        page.text(executed.outcome.as_str());
        page.raw("</span></td></tr>\n");
        page.row(
            "exit code",
            &executed
                .exit_code
                .map_or("none (did not exit)".to_owned(), |code| code.to_string()),
        );
        page.row(
            "duration",
            &format!(
                "{} ({} µs)",
                format_duration(Duration::from_micros(executed.duration_us)),
                executed.duration_us
            ),
        );
        page.row(
            "fuel",
            &match (executed.fuel_consumed, executed.limits.fuel) {
                (Some(used), Some(limit)) => format!("{used} of {limit}"),
                (Some(used), None) => used.to_string(),
                (None, Some(limit)) => format!("limit {limit}"),
                (None, None) => "not metered".to_owned(),
            },
        );
        page.row(
            "limits",
            &format!(
                "timeout {}, memory {}, workspace {}",
                format_duration(Duration::from_millis(executed.limits.timeout_ms)),
                format_size(executed.limits.memory_bytes),
                format_size(executed.limits.workspace_bytes)
            ),
        );
        page.row("runtime module", &executed.runtime_blake3.to_hex());
        match &executed.evidence {
            Some(evidence) => page.row(
                "evidence kept",
                &format!(
                    "budget {}{}; {} files kept ({}), {} not kept; output {}",
                    format_size(evidence.budget_bytes),
                    if evidence.budget_bytes == 0 {
                        " (off)"
                    } else {
                        ""
                    },
                    evidence.kept_files,
                    format_size(evidence.kept_bytes),
                    evidence.not_kept_files,
                    if evidence.output_kept {
                        "kept"
                    } else {
                        "not kept"
                    }
                ),
            ),
            None => page.row(
                "evidence kept",
                "code only (recorded before sandlog kept output and files)",
            ),
        }
        if let Some(scan) = &executed.scan {
            page.row(
                "scan after the run",
                &format!(
                    "{} changes found, {} recorded, {} ms{}",
                    scan.files_changed_total,
                    scan.files_recorded,
                    scan.scan_ms,
                    scan.limit.map_or(String::new(), |limit| format!(
                        ", bound hit: {}",
                        limit.as_str()
                    ))
                ),
            );
        }
        page.raw("</table>\n");
        let output_kept = executed
            .evidence
            .is_some_and(|evidence| evidence.output_kept);
        self.content_block(
            "code",
            &executed.code_blake3,
            executed.code_bytes,
            true,
            false,
        )?;
        self.content_block(
            "stdout",
            &executed.stdout_blake3,
            executed.stdout_bytes,
            output_kept,
            executed.stdout_truncated,
        )?;
        self.content_block(
            "stderr",
            &executed.stderr_blake3,
            executed.stderr_bytes,
            output_kept,
            executed.stderr_truncated,
        )?;
        self.page.raw("</article>\n");
        Ok(())
    }
}

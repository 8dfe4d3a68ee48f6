//! One line saying what an event means, for a person: the single
//! description every reader shows (the CLI's timelines and `log`, the
//! report's fallback). The `match` is exhaustive with no catch-all arm, so
//! a new event kind does not compile until it is described here (and in
//! the report, which matches the same way).

use std::time::Duration;

use sandlog_core::WrittenBy;
use sandlog_core::event::{Drift, Event, SizeExceeded};
use sandlog_core::human::{format_duration, format_size};

/// What `event` means, in one line, with names exactly as recorded
/// (callers escape them for a terminal).
pub fn describe(event: &Event) -> String {
    match event {
        Event::SessionCreated(created) => {
            if created.labels.is_empty() {
                "session created".to_owned()
            } else {
                let labels: Vec<String> = created
                    .labels
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                format!("session created ({})", labels.join(", "))
            }
        }
        Event::SessionAdopted(adopted) => format!(
            "adopted from {} (metadata {:?}{})",
            adopted.source,
            adopted.metadata,
            adopted
                .created_at
                .map_or(String::new(), |t| format!(", created {t}"))
        ),
        Event::SessionExecuted(executed) => format!(
            "executed {} ({} bytes of code) → {}{} in {}, fuel {}{}{}",
            executed.runtime,
            executed.code_bytes,
            executed.outcome.as_str(),
            executed
                .exit_code
                .map_or(String::new(), |code| format!(" (exit {code})")),
            format_duration(Duration::from_micros(executed.duration_us)),
            executed.fuel_consumed.unwrap_or(0),
            if executed.stdout_truncated {
                ", stdout truncated"
            } else {
                ""
            },
            if executed.stderr_truncated {
                ", stderr truncated"
            } else {
                ""
            },
        ),
        Event::FileWritten(file) => format!(
            "{} {} ({}, blake3 {}{})",
            match file.by {
                WrittenBy::Adoption => "found",
                WrittenBy::Host => "host wrote",
                WrittenBy::Guest => "guest wrote",
                WrittenBy::Native => "native work wrote",
            },
            file.path,
            format_size(file.size),
            short_hash(&file.blake3.to_hex()),
            match (file.content_kept, file.not_kept) {
                (Some(false), Some(reason)) => format!(", bytes not kept: {}", reason.as_str()),
                (Some(false), None) => ", bytes not kept".to_owned(),
                _ => String::new(),
            }
        )
        .to_lowercase_first(),
        Event::FileDeleted(file) => {
            format!("{:?} deleted {}", file.by, file.path).to_lowercase_first()
        }
        Event::SessionPruneRequested(intent) => format!(
            "prune requested (idle {}, threshold {}, {})",
            format_duration(Duration::from_micros(intent.age_us)),
            format_duration(Duration::from_micros(intent.threshold_us)),
            format_size(intent.size_bytes)
        ),
        Event::SessionPruned(pruned) => {
            format!("pruned, {} reclaimed", format_size(pruned.reclaimed_bytes))
        }
        Event::SessionPruneFailed(failed) => format!("prune failed: {}", failed.error),
        Event::SessionDeleteRequested(intent) => format!("delete requested: {}", intent.reason),
        Event::SessionDeleted(deleted) => format!(
            "deleted, {} reclaimed",
            format_size(deleted.reclaimed_bytes)
        ),
        Event::WorkspaceOrphanQuarantined(orphan) => {
            format!(
                "orphan {} ({}) moved to {}",
                orphan.dir_name,
                format_size(orphan.bytes),
                orphan.moved_to
            )
        }
        Event::WorkspaceOrphanPurged(orphan) => format!(
            "orphan {} ({}) purged",
            orphan.dir_name,
            format_size(orphan.bytes)
        ),
        Event::WorkspaceReclaimed(reclaimed) => {
            let mut text = format!(
                "{} pruned workspace{} reclaimed ({})",
                reclaimed.workspaces,
                if reclaimed.workspaces == 1 { "" } else { "s" },
                format_size(reclaimed.bytes)
            );
            if reclaimed.failed > 0 {
                text.push_str(&format!(", {} left in trash", reclaimed.failed));
            }
            text
        }
        Event::WorkspaceDriftDetected(detected) => {
            let items: Vec<String> = detected.drift.iter().map(describe_drift).collect();
            format!("drift: {}", items.join("; "))
        }
        Event::PruneRunStarted(run) => format!(
            "prune run started ({} candidate{})",
            run.candidates,
            if run.candidates == 1 { "" } else { "s" }
        ),
        Event::PruneRunCompleted(run) => format!(
            "prune run completed: {} deleted, {} skipped, {} errors, {} reclaimed",
            run.deleted,
            run.skipped,
            run.errors,
            format_size(run.reclaimed_bytes)
        ),
        Event::ReconcileRunCompleted(run) => format!(
            "reconcile: {} intents finished, {} orphans, {} drift, {} errors",
            run.intents_finished, run.orphans, run.drift, run.errors
        ),
        Event::SessionIntentFailed(failed) => format!(
            "finishing the {} intent failed (still pending): {}",
            failed.intent, failed.error
        ),
        Event::SessionHeld(held) => format!("legal hold: {}", held.reason),
        Event::SessionReleased(released) => match &released.reason {
            Some(reason) => format!("hold released: {reason}"),
            None => "hold released".to_owned(),
        },
        Event::SessionForked(forked) => format!(
            "forked from {} as of position {} ({} files{})",
            forked.from,
            forked.at,
            forked.files,
            if forked.missing.is_empty() {
                String::new()
            } else {
                format!(", {} missing", forked.missing.len())
            }
        ),
        Event::EvidenceErased(erased) => format!(
            "evidence erased{}: {} blobs, {}{}; reason: {}",
            erased
                .path
                .as_ref()
                .map_or(String::new(), |path| format!(" under {path}")),
            erased.blobs.len(),
            format_size(erased.bytes),
            if erased.kept_for_hold.is_empty() {
                String::new()
            } else {
                format!(", {} kept for a hold", erased.kept_for_hold.len())
            },
            erased.reason
        ),
        Event::NativeStarted(started) => {
            format!("native command started: {}", started.argv.join(" "))
        }
        Event::NativeCompleted(completed) => {
            let ended = match (completed.exit_code, completed.signal) {
                _ if completed.timed_out => "killed at its timeout".to_owned(),
                (Some(code), _) => format!("exit {code}"),
                (None, Some(signal)) => format!("killed by signal {signal}"),
                (None, None) => "did not run".to_owned(),
            };
            let files = completed
                .scan
                .as_ref()
                .map_or(0, |scan| scan.files_recorded);
            format!(
                "native command completed: {ended} in {}, {files} files changed{}{}",
                format_duration(Duration::from_micros(completed.duration_us)),
                size_note(completed.size_exceeded),
                completed
                    .message
                    .as_ref()
                    .map_or(String::new(), |message| format!(" ({message})"))
            )
        }
        Event::SessionSynced(synced) => format!(
            "synced changes made outside sandlog: {} files{}",
            synced.scan.as_ref().map_or(0, |scan| scan.files_recorded),
            size_note(synced.size_exceeded)
        ),
        Event::RootConfigured(configured) => match &configured.value {
            Some(value) => format!("setting {} = {value}", configured.key),
            None => format!("setting {} unset", configured.key),
        },
        Event::KernelRestarted(_) | Event::KernelEvicted(_) => event.kind().to_owned(),
    }
}

/// One item of drift, for a person.
pub fn describe_drift(drift: &Drift) -> String {
    match drift {
        Drift::MissingDirectory => "workspace directory missing".to_owned(),
        Drift::FileMissing { path, .. } => format!("{path} missing"),
        Drift::FileChanged { path, .. } => format!("{path} changed"),
        Drift::FileUnexpected { path, .. } => format!("{path} not in the log"),
    }
}

/// The first 12 hex digits of a hash.
pub fn short_hash(hex: &str) -> &str {
    hex.get(..12).unwrap_or(hex)
}

fn size_note(exceeded: Option<SizeExceeded>) -> String {
    exceeded.map_or(String::new(), |exceeded| {
        format!(
            ", past the size limit ({} of {})",
            format_size(exceeded.bytes),
            format_size(exceeded.max_size)
        )
    })
}

/// A text with its first character in lower case.
trait LowercaseFirst {
    fn to_lowercase_first(self) -> String;
}

impl LowercaseFirst for String {
    fn to_lowercase_first(self) -> String {
        let mut chars = self.chars();
        match chars.next() {
            Some(first) => first.to_lowercase().chain(chars).collect(),
            None => self,
        }
    }
}

//! Keeping evidence: the bytes an execution's guest wrote, within the
//! execution's evidence budget, stored with the execution's events.
//!
//! Files are taken in path order. A file is kept if its whole size fits in
//! what is left of the budget; otherwise it is recorded with its hash and
//! `content_kept: false` and the reason ([`NotKept`]), and later, smaller
//! files may still fit. The budget counts a kept file's full size even when
//! its bytes were stored already (deduplicated), so what a guest can make
//! an execution keep does not depend on what other sessions wrote.

pub mod history;
pub mod ocsf;
pub mod report;
pub mod retention;

use sandlog_core::event::{ExecEvidence, FileWritten, NotKept};
use sandlog_core::human::{format_size, parse_size};
use sandlog_core::{Event, StreamId};
use sandlog_eventstore::{EventStoreError, LogFilter, UnitOfWork};

use crate::engine::Engine;
use sandlog_host::error::{Result, RuntimeError};
use sandlog_host::workspace::Workspace;
use sandlog_sandbox::limits::WORKSPACE_BYTES_MAX;

/// File bytes one execution keeps as evidence when neither the call nor
/// the root says otherwise: a third of the default workspace quota, so a
/// run that fills its workspace keeps most of what it wrote without one
/// execution adding the whole quota to the log.
pub const EVIDENCE_BYTES_DEFAULT: u64 = 32 * 1024 * 1024;

/// The largest evidence budget accepted: the largest workspace quota.
pub const EVIDENCE_BYTES_MAX: u64 = WORKSPACE_BYTES_MAX;

/// The root setting holding the evidence budget (a size; `0` turns
/// evidence off).
pub const EVIDENCE_BUDGET_SETTING: &str = "evidence.budget";

/// The root setting naming the signing key file automatic checkpoints are
/// signed with (made by `sandlog keygen`).
pub const CHECKPOINT_KEY_SETTING: &str = "checkpoint.key";

/// The root setting: sign a checkpoint once this many events were appended
/// since the last one.
pub const CHECKPOINT_EVERY_SETTING: &str = "checkpoint.every";

/// The root setting: sign a checkpoint after every prune run (`true`).
pub const CHECKPOINT_ON_PRUNE_SETTING: &str = "checkpoint.on_prune";

/// Settings a root accepts, with what their value is.
pub const SETTINGS: &[(&str, &str)] = &[
    (
        EVIDENCE_BUDGET_SETTING,
        "file bytes each execution keeps as evidence (a size such as 32MiB; 0 turns evidence off)",
    ),
    (
        CHECKPOINT_KEY_SETTING,
        "the signing key file (from `sandlog keygen`) automatic checkpoints are signed with",
    ),
    (
        CHECKPOINT_EVERY_SETTING,
        "sign a checkpoint once this many events were appended since the last (a count)",
    ),
    (
        CHECKPOINT_ON_PRUNE_SETTING,
        "sign a checkpoint after every prune run (true or false)",
    ),
    (
        crate::engine::sessions::SESSION_MAX_SIZE_SETTING,
        "the size limit of sessions created without --max-size (a size such as 1GiB)",
    ),
];

fn invalid_setting(key: &str, reason: String) -> RuntimeError {
    RuntimeError::Invalid(sandlog_core::CoreError::InvalidPayload {
        kind: key.to_owned(),
        schema: 0,
        reason,
    })
}

/// Parses an evidence budget, bounded by [`EVIDENCE_BYTES_MAX`].
pub fn parse_budget(text: &str) -> Result<u64> {
    let bytes = parse_size(text).map_err(RuntimeError::Invalid)?;
    if bytes > EVIDENCE_BYTES_MAX {
        return Err(RuntimeError::Invalid(
            sandlog_core::CoreError::InvalidPayload {
                kind: EVIDENCE_BUDGET_SETTING.into(),
                schema: 0,
                reason: format!(
                    "{text} is more than the largest budget, EVIDENCE_BYTES_MAX = {}; give a smaller size",
                    format_size(EVIDENCE_BYTES_MAX)
                ),
            },
        ));
    }
    Ok(bytes)
}

/// Stores the bytes of `written` (a guest's writes, in path order) within
/// `budget`, and returns the events' payloads saying what was kept.
pub(crate) fn keep_files(
    write: &mut dyn UnitOfWork,
    workspace: &Workspace,
    written: &[FileWritten],
    budget: u64,
) -> Result<(Vec<FileWritten>, ExecEvidence)> {
    let mut evidence = ExecEvidence {
        budget_bytes: budget,
        kept_bytes: 0,
        kept_files: 0,
        not_kept_files: 0,
        output_kept: budget > 0,
    };
    let mut files = Vec::with_capacity(written.len());
    for file in written {
        let left = budget - evidence.kept_bytes;
        let verdict = if file.not_kept == Some(NotKept::Unreadable) {
            // The scan could not read it: there is nothing to keep.
            Err(NotKept::Unreadable)
        } else if budget == 0 {
            Err(NotKept::Off)
        } else if file.size > budget {
            Err(NotKept::TooLarge)
        } else if file.size > left {
            Err(NotKept::Budget)
        } else {
            keep_one(write, workspace, file)?
        };
        let mut file = file.clone();
        match verdict {
            Ok(()) => {
                evidence.kept_bytes += file.size;
                evidence.kept_files += 1;
                file.content_kept = Some(true);
                file.not_kept = None;
            }
            Err(reason) => {
                evidence.not_kept_files += 1;
                file.content_kept = Some(false);
                file.not_kept = Some(reason);
            }
        }
        files.push(file);
    }
    Ok((files, evidence))
}

/// Stores one file's bytes; the reason when they cannot be kept.
fn keep_one(
    write: &mut dyn UnitOfWork,
    workspace: &Workspace,
    file: &FileWritten,
) -> Result<std::result::Result<(), NotKept>> {
    let mut reader = match workspace.open_read(&file.path) {
        Ok(reader) => reader,
        Err(error) => {
            tracing::warn!(path = %file.path, %error, "a written file could not be reopened to keep its bytes");
            return Ok(Err(NotKept::Unreadable));
        }
    };
    match write.put_blob_from(&mut reader, Some(file.blake3), file.size) {
        Ok(_) => Ok(Ok(())),
        Err(EventStoreError::BlobHashMismatch { .. } | EventStoreError::BlobTooLarge { .. }) => {
            Ok(Err(NotKept::Changed))
        }
        Err(EventStoreError::Io { context, source }) => {
            tracing::warn!(path = %file.path, %context, error = %source, "a written file could not be read to keep its bytes");
            Ok(Err(NotKept::Unreadable))
        }
        Err(error) => Err(error.into()),
    }
}

impl Engine {
    /// A root setting's current value (`None`: unset, the default applies).
    pub fn setting(&self, key: &str) -> Result<Option<String>> {
        Ok(self.settings()?.remove(key))
    }

    /// Every root setting that is set, folded from the `root.configured`
    /// events (found through the log's index by kind).
    pub fn settings(&self) -> Result<std::collections::BTreeMap<String, String>> {
        // Every write asks (for the automatic checkpoint), and the answer
        // changes only with the system stream, which any process appends
        // to: its version, one indexed lookup, says whether the folded
        // settings still hold.
        let version = self.store.stream_version(StreamId::System)?;
        let mut cache = self
            .settings_cache
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some((cached_version, settings)) = cache.as_ref()
            && *cached_version == version
        {
            return Ok(settings.clone());
        }
        let settings = self.fold_settings()?;
        *cache = Some((version, settings.clone()));
        Ok(settings)
    }

    fn fold_settings(&self) -> Result<std::collections::BTreeMap<String, String>> {
        let filter = LogFilter {
            stream: Some(StreamId::System),
            kinds: vec!["root.configured".to_owned()],
            ..LogFilter::default()
        };
        let mut settings = std::collections::BTreeMap::new();
        for envelope in self.store.query(filter) {
            if let Ok(Some(Event::RootConfigured(configured))) = envelope?.event() {
                match configured.value {
                    Some(value) => settings.insert(configured.key, value),
                    None => settings.remove(&configured.key),
                };
            }
        }
        Ok(settings)
    }

    /// Changes a root setting (one of [`SETTINGS`]), recorded as a
    /// `root.configured` event; `None` unsets it.
    pub fn configure(&self, key: &str, value: Option<&str>) -> Result<()> {
        match (key, value) {
            (_, None) if SETTINGS.iter().any(|(known, _)| *known == key) => {}
            (EVIDENCE_BUDGET_SETTING, Some(value)) => {
                parse_budget(value)?;
            }
            (CHECKPOINT_KEY_SETTING, Some(value)) => {
                // Checked now, so a typo fails here and not at the first
                // automatic checkpoint.
                sandlog_host::keys::read_signer_key(std::path::Path::new(value))?;
            }
            (CHECKPOINT_EVERY_SETTING, Some(value)) => {
                if !value.parse::<u64>().is_ok_and(|every| every > 0) {
                    return Err(invalid_setting(
                        key,
                        format!("{value:?} is not a count of events; give a whole number above 0"),
                    ));
                }
            }
            (crate::engine::sessions::SESSION_MAX_SIZE_SETTING, Some(value)) => {
                crate::engine::sessions::parse_max_size(value)?;
            }
            (CHECKPOINT_ON_PRUNE_SETTING, Some(value)) => {
                if value.parse::<bool>().is_err() {
                    return Err(invalid_setting(
                        key,
                        format!("{value:?} is not true or false"),
                    ));
                }
            }
            _ => {
                let known: Vec<&str> = SETTINGS.iter().map(|(key, _)| *key).collect();
                return Err(RuntimeError::Invalid(
                    sandlog_core::CoreError::InvalidPayload {
                        kind: "root.configured".into(),
                        schema: 0,
                        reason: format!(
                            "unknown setting {key:?}; the settings are: {}",
                            known.join(", ")
                        ),
                    },
                ));
            }
        }
        let event = Event::RootConfigured(sandlog_core::event::RootConfigured {
            key: key.to_owned(),
            value: value.map(str::to_owned),
        });
        self.append_log(
            StreamId::System,
            sandlog_eventstore::ExpectedVersion::Any,
            &[self.event(&event)],
        )?;
        Ok(())
    }

    /// The evidence budget of an execution: the call's, else the root's
    /// setting, else [`EVIDENCE_BYTES_DEFAULT`].
    pub fn evidence_budget(&self, requested: Option<u64>) -> Result<u64> {
        if let Some(bytes) = requested {
            if bytes > EVIDENCE_BYTES_MAX {
                return parse_budget(&bytes.to_string());
            }
            return Ok(bytes);
        }
        match self.setting(EVIDENCE_BUDGET_SETTING)? {
            Some(text) => parse_budget(&text),
            None => Ok(EVIDENCE_BYTES_DEFAULT),
        }
    }
}

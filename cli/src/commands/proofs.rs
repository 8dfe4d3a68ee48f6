//! The verifiable log: keygen, checkpoint, prove, verify --checkpoint,
//! evidence export / verify, tree rebuild.

use std::io::Write;
use std::path::Path;

use sandlog_runtime::Engine;
use sandlog_runtime::core::Position;
use sandlog_runtime::core::cosignature::WitnessPolicy;
use sandlog_runtime::proofs::{
    generate_key_file, read_signer_key, read_verifier_key, verify_bundle_witnessed,
};
use sandlog_runtime::witness::generate_witness_key_file;
use serde_json::json;

use crate::args::{
    AuditArgs, CheckpointArgs, EvidenceCommand, KeygenArgs, ProveCommand, TreeCommand,
};
use crate::exit::CliError;
use crate::output::Output;

/// Environment variable naming the signing key file when `--key` is not
/// given.
pub const KEY_ENV: &str = "SANDLOG_KEY";

fn signer(key: Option<&Path>) -> Result<Option<sandlog_runtime::core::note::SignerKey>, CliError> {
    let from_env = std::env::var_os(KEY_ENV).map(std::path::PathBuf::from);
    match key.map(Path::to_path_buf).or(from_env) {
        Some(path) => Ok(Some(read_signer_key(&path)?)),
        None => Ok(None),
    }
}

fn write_new_file(path: &Path, bytes: &[u8]) -> Result<(), CliError> {
    let io = |source| CliError::Io {
        context: format!(
            "writing {} (it must not exist yet; choose another name or remove it)",
            path.display()
        ),
        source,
    };
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(io)?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(io)
}

/// `keygen --name ORIGIN -o KEYFILE`: needs no root.
pub fn keygen(args: KeygenArgs, output: &Output) -> Result<u8, CliError> {
    let vkey = if args.witness {
        generate_witness_key_file(&args.name, &args.output)?
            .verifier()
            .to_string()
    } else {
        generate_key_file(&args.name, &args.output)?
            .verifier()
            .to_string()
    };
    if output.json {
        output.json(&json!({"vkey": vkey, "key_file": args.output}))?;
    } else {
        let audience = if args.witness {
            "give it to the logs that use this witness (--witness URL=VKEY) and to auditors (--witness-vkey)"
        } else {
            "give it to auditors"
        };
        output.line(&format!(
            "wrote the signing key to {} (keep it secret; mode 0600)\nverifier key, {audience}:\n{vkey}",
            args.output.display()
        ))?;
    }
    Ok(0)
}

/// `checkpoint [--key KEYFILE]`: sign and store; without a key, print the
/// newest stored checkpoint.
pub fn checkpoint(engine: &Engine, args: CheckpointArgs, output: &Output) -> Result<u8, CliError> {
    let Some(key) = signer(args.key.as_deref())? else {
        if !args.witness.is_empty() {
            return Err(CliError::Usage {
                kind: "witness_needs_key",
                message: format!(
                    "--witness cosigns a new checkpoint, which needs the log's signing key: pass \
                     --key KEYFILE or set ${KEY_ENV}"
                ),
            });
        }
        let note = engine
            .latest_checkpoint()?
            .ok_or(sandlog_runtime::RuntimeError::NoCheckpoint)?;
        if output.json {
            output.json(&json!({"note": note}))?;
        } else {
            output.line(note.trim_end())?;
        }
        return Ok(0);
    };
    if !args.witness.is_empty() {
        let (signed, witnesses) =
            super::witness::cosigned_checkpoint(engine, &key, &args.witness, args.witnesses)?;
        if output.json {
            output.json(&json!({
                "size": signed.size,
                "root": signed.root,
                "note": signed.note,
                "witnesses": witnesses,
            }))?;
        } else {
            output.line(signed.note.trim_end())?;
        }
        return Ok(0);
    }
    if args.witnesses.is_some() {
        return Err(CliError::Usage {
            kind: "witnesses",
            message: "--witnesses K needs the witnesses: pass each with --witness URL=VKEY".into(),
        });
    }
    let signed = engine.sign_checkpoint(&key)?;
    if output.json {
        output.json(&signed)?;
    } else {
        output.line(signed.note.trim_end())?;
    }
    Ok(0)
}

/// `prove inclusion POS [--size N]`, `prove consistency OLD [NEW]`: JSON
/// in both modes (a proof is for machines).
pub fn prove(engine: &Engine, command: ProveCommand, output: &Output) -> Result<u8, CliError> {
    let value = match command {
        ProveCommand::Inclusion { position, size } => {
            serde_json::to_value(engine.prove_inclusion(Position(position), size)?)
        }
        ProveCommand::Consistency { old, new } => {
            serde_json::to_value(engine.prove_consistency(old, new)?)
        }
        ProveCommand::Session { id, size } => {
            let session_id = id
                .parse::<sandlog_runtime::core::SessionId>()
                .map_err(|_| CliError::Usage {
                    kind: "invalid_session_id",
                    message: format!(
                        "{id:?} is not a session id: give the full UUID (an absent \
                             session has no prefix to match)"
                    ),
                })?;
            serde_json::to_value(engine.prove_session(session_id, size)?)
        }
    }
    .map_err(|error| CliError::Io {
        context: "encoding the proof".into(),
        source: std::io::Error::other(error),
    })?;
    output.json(&value)?;
    Ok(0)
}

/// `audit [--checkpoint FILE [--witness-vkey VKEY... --witnesses K]] --vkey VKEY`.
pub fn audit(engine: &Engine, args: AuditArgs, output: &Output) -> Result<u8, CliError> {
    let witnesses = super::witness::policy(&args.witness_vkey, args.witnesses)?;
    let note = match &args.checkpoint {
        Some(path) => Some(sandlog_runtime::input::read_text_bounded(
            path,
            "checkpoint",
            sandlog_runtime::proofs::KEY_FILE_BYTES_MAX,
            "KEY_FILE_BYTES_MAX",
        )?),
        None => None,
    };
    let key = read_verifier_key(&args.vkey)?;
    // The cosignatures first: a checkpoint without its quorum is refused
    // before the whole log is replayed.
    let quorum = match (&note, &witnesses) {
        (Some(note), Some(policy)) => Some(sandlog_runtime::witness::check_witnesses(
            note, &key, policy,
        )?),
        _ => None,
    };
    let progress = output.progress_bar("auditing");
    let report = engine.audit(note.as_deref(), &key, &crate::output::advance(&progress))?;
    progress.finish();
    if output.json {
        let mut value = serde_json::to_value(&report).map_err(|error| CliError::Io {
            context: "encoding the audit report".into(),
            source: std::io::Error::other(error),
        })?;
        if let (Some(quorum), Some(object)) = (&quorum, value.as_object_mut()) {
            object.insert("witnesses".into(), json!(quorum));
        }
        output.json(&value)?;
    } else {
        output.line(&format!(
            "{}: {} events replayed; the chain, the tree (root {}) and the map of stream heads \
             (root {}) agree with {} checkpoints signed by {} and {} stored map roots{}",
            output.good("ok"),
            report.events,
            report.root,
            report.map_root,
            report.checkpoints,
            key.name(),
            report.map_roots,
            match report.other_keys {
                0 => String::new(),
                n => format!(" ({n} stored checkpoints by other keys skipped)"),
            }
        ))?;
        if let Some(quorum) = quorum {
            output.line(&format!(
                "the checkpoint given is cosigned by {} of the {} witnesses named ({} required)",
                quorum.valid,
                quorum.witnesses.len(),
                quorum.required
            ))?;
        }
    }
    Ok(0)
}

/// `verify --checkpoint FILE --vkey VKEY [--witness-vkey VKEY... --witnesses K]`.
pub fn verify_checkpoint(
    engine: &Engine,
    checkpoint: &Path,
    vkey: &str,
    witnesses: Option<&WitnessPolicy>,
    output: &Output,
) -> Result<u8, CliError> {
    let note = sandlog_runtime::input::read_text_bounded(
        checkpoint,
        "checkpoint",
        sandlog_runtime::proofs::KEY_FILE_BYTES_MAX,
        "KEY_FILE_BYTES_MAX",
    )?;
    let key = read_verifier_key(vkey)?;
    let quorum = witnesses
        .map(|policy| sandlog_runtime::witness::check_witnesses(&note, &key, policy))
        .transpose()?;
    let check = engine.verify_checkpoint(&note, &key)?;
    if output.json {
        let mut value = json!({
            "ok": true,
            "checkpoint_size": check.checkpoint_size,
            "events": check.log_size,
            "root": check.log_root,
        });
        if let (Some(quorum), Some(object)) = (&quorum, value.as_object_mut()) {
            object.insert("witnesses".into(), json!(quorum));
        }
        output.json(&value)?;
    } else {
        output.line(&format!(
            "{}: the log ({} events) extends the checkpoint of {} events signed by {}{}",
            output.good("ok"),
            check.log_size,
            check.checkpoint_size,
            key.name(),
            quorum.map_or(String::new(), |quorum| format!(
                " and cosigned by {} of the {} witnesses named ({} required)",
                quorum.valid,
                quorum.witnesses.len(),
                quorum.required
            ))
        ))?;
    }
    Ok(0)
}

/// `evidence export ID -o FILE [--key KEYFILE]` and `evidence verify FILE
/// --vkey VKEY` (the latter needs no root).
pub fn evidence(
    engine: Option<&Engine>,
    command: EvidenceCommand,
    output: &Output,
) -> Result<u8, CliError> {
    match command {
        EvidenceCommand::Export {
            id,
            output: file,
            key,
        } => {
            let Some(engine) = engine else {
                return Ok(0);
            };
            let session_id = super::session_id(engine, &id)?;
            let key = signer(key.as_deref())?;
            let bundle = engine.export_bundle(session_id, key.as_ref())?;
            let bytes = serde_json::to_vec(&bundle).map_err(|error| CliError::Io {
                context: "encoding the bundle".into(),
                source: std::io::Error::other(error),
            })?;
            write_new_file(&file, &bytes)?;
            if output.json {
                output.json(&json!({
                    "path": file,
                    "session_id": session_id,
                    "events": bundle.events.len(),
                    "blobs": bundle.blobs.len(),
                }))?;
            } else {
                output.line(&format!(
                    "wrote {}: {} events of session {session_id} with their proofs, {} blobs",
                    file.display(),
                    bundle.events.len(),
                    bundle.blobs.len()
                ))?;
            }
            Ok(0)
        }
        EvidenceCommand::Verify {
            file,
            vkey,
            witness_vkey,
            witnesses,
        } => {
            let witnesses = super::witness::policy(&witness_vkey, witnesses)?;
            let limit = sandlog_runtime::core::bundle::BUNDLE_BYTES_MAX;
            let (opened, metadata) = sandlog_runtime::input::open_regular(&file, "bundle")?;
            if metadata.len() > limit {
                return Err(CliError::Integrity(format!(
                    "{} is larger than the {limit}-byte limit of a bundle: not a sandlog bundle",
                    file.display()
                )));
            }
            let bytes = sandlog_runtime::input::read_opened_bounded(
                opened,
                &metadata,
                &file,
                "bundle",
                limit,
                "BUNDLE_BYTES_MAX",
            )?;
            let key = read_verifier_key(&vkey)?;
            let report = verify_bundle_witnessed(&bytes, &key, witnesses.as_ref())?;
            if output.json {
                output.json(&report)?;
            } else {
                let state = report.state.as_ref();
                output.line(&format!(
                    "{}: session {}: {} events proven against checkpoint {} of {} ({}){}, {} blobs checked{}; status {}, {} executions, {} files",
                    output.good("ok"),
                    report.session_id,
                    report.events,
                    report.checkpoint_size,
                    report.origin,
                    match &report.head {
                        Some(head) => format!(
                            "complete: ends at the session's head, version {} at position {}",
                            head.version, head.position
                        ),
                        None => "inclusion only: an old-format bundle, events after the last one may be missing".to_owned(),
                    },
                    report.witnesses.as_ref().map_or(String::new(), |quorum| format!(
                        " (cosigned by {} of the {} witnesses named, {} required)",
                        quorum.valid,
                        quorum.witnesses.len(),
                        quorum.required
                    )),
                    report.blobs,
                    if report.missing_blobs.is_empty() {
                        String::new()
                    } else {
                        format!(" ({} referenced blobs not carried: erased or not kept)", report.missing_blobs.len())
                    },
                    state.map_or("unknown", |state| state.status.as_str()),
                    state.map_or(0, |state| state.exec_count),
                    state.map_or(0, |state| state.files.len()),
                ))?;
            }
            Ok(0)
        }
    }
}

/// `tree rebuild`, `tree verify`.
pub fn tree(engine: &Engine, command: TreeCommand, output: &Output) -> Result<u8, CliError> {
    let (events, root) = match command {
        TreeCommand::Rebuild => engine.rebuild_merkle()?,
        TreeCommand::Verify => {
            let report = engine.verify_merkle()?;
            (report.size, report.root)
        }
    };
    if output.json {
        output.json(&json!({"ok": true, "events": events, "root": root.to_hex()}))?;
    } else {
        output.line(&format!(
            "{}: tree of {events} events, root {root}",
            output.good("ok")
        ))?;
    }
    Ok(0)
}

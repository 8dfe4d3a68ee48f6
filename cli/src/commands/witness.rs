//! Witnesses: `witness serve` (a C2SP tlog-witness, in sandlog-server),
//! the client side of `checkpoint --witness` (asking witnesses to cosign
//! over HTTP), and reading `--witness-vkey`/`--witnesses` for verifiers.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use sandlog_runtime::Engine;
use sandlog_runtime::core::cosignature::{WITNESSES_MAX, WitnessPolicy, WitnessVerifierKey};
use sandlog_runtime::core::note::SignerKey;
use sandlog_runtime::core::witness::{
    ADD_CHECKPOINT_PATH, SIZE_CONTENT_TYPE, WITNESS_RESPONSE_BYTES_MAX, parse_size,
};
use sandlog_runtime::proofs::SignedCheckpoint;
use sandlog_runtime::witness::{read_witness_verifier_key, witnessed_size};
use serde::Serialize;

use crate::exit::CliError;

/// How long one exchange with a witness may take (connecting, sending,
/// its answer) before it counts as failed.
pub const WITNESS_TIMEOUT: Duration = Duration::from_secs(10);

/// Characters of a witness's refusal text repeated in an error message.
const REFUSAL_SHOWN_MAX: usize = 300;

/// `witness` subcommands.
#[derive(Debug, Subcommand)]
pub enum WitnessCommand {
    /// Serve a C2SP tlog-witness (`POST /add-checkpoint`): cosign a log's
    /// checkpoints, each only if the log's key signed it and it extends,
    /// by a consistency proof, the last one of that log this witness
    /// cosigned. Needs no root. Prints `listening on http://ADDR` first;
    /// SIGTERM or SIGINT stops it.
    Serve(WitnessServeArgs),
}

/// `witness serve` arguments.
#[derive(Debug, Args)]
pub struct WitnessServeArgs {
    /// The witness's key file (`sandlog keygen --witness`).
    #[arg(long, value_name = "KEYFILE")]
    pub key: PathBuf,
    /// The state directory (created if missing): per log, the last
    /// checkpoint cosigned, written durably before each cosignature. One
    /// witness process per directory.
    #[arg(long, value_name = "DIR")]
    pub state: PathBuf,
    /// Address to listen on; port 0 picks a free port (printed first).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7380")]
    pub listen: std::net::SocketAddr,
    /// A log's verifier key (text or a file holding it): a log this
    /// witness cosigns for, known by its key's name.
    #[arg(long = "log", value_name = "VKEY", required = true)]
    pub logs: Vec<String>,
}

/// `--witness-vkey`/`--witnesses` of the verifying commands, as a policy
/// (None when no witness key is given).
pub fn policy(
    vkeys: &[String],
    threshold: Option<usize>,
) -> Result<Option<WitnessPolicy>, CliError> {
    if vkeys.is_empty() {
        return match threshold {
            Some(_) => Err(CliError::Usage {
                kind: "witnesses",
                message:
                    "--witnesses K needs the witnesses' keys: pass each with --witness-vkey VKEY"
                        .into(),
            }),
            None => Ok(None),
        };
    }
    let keys = vkeys
        .iter()
        .map(|vkey| read_witness_verifier_key(vkey))
        .collect::<Result<Vec<_>, _>>()?;
    WitnessPolicy::new(keys, threshold)
        .map(Some)
        .map_err(|message| CliError::Usage {
            kind: "witnesses",
            message,
        })
}

/// One `--witness URL=VKEY`.
#[derive(Debug)]
struct WitnessTarget {
    /// The submission prefix, without a trailing `/`.
    url: String,
    key: WitnessVerifierKey,
}

fn parse_target(text: &str) -> Result<WitnessTarget, CliError> {
    let usage = |message: String| CliError::Usage {
        kind: "witness",
        message,
    };
    let Some((url, vkey)) = text.split_once('=') else {
        return Err(usage(format!(
            "--witness {text:?} is not URL=VKEY (the witness's URL prefix, `=`, its verifier key)"
        )));
    };
    if url.starts_with("https://") {
        return Err(usage(format!(
            "--witness {url}: this build speaks plain http:// to witnesses (cosignatures are \
             signed, so the transport needs no integrity of its own); reach an HTTPS witness \
             through a local proxy"
        )));
    }
    if !url.starts_with("http://") || url.len() <= "http://".len() {
        return Err(usage(format!(
            "--witness {text:?}: the URL must start with http:// (e.g. http://127.0.0.1:7380)"
        )));
    }
    Ok(WitnessTarget {
        url: url.trim_end_matches('/').to_owned(),
        key: read_witness_verifier_key(vkey)?,
    })
}

/// What one witness did with the checkpoint.
#[derive(Debug, Serialize)]
pub struct WitnessOutcome {
    /// Its URL prefix.
    pub url: String,
    /// Its name.
    pub name: String,
    /// Whether it cosigned.
    pub cosigned: bool,
    /// Why not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Whether the refusal shows the log does not extend what the witness
    /// saw (a split view or a rollback), not a failure to reach it.
    #[serde(skip)]
    conflict: bool,
}

/// Why one witness gave no cosignature.
struct Failure {
    reason: String,
    conflict: bool,
}

impl Failure {
    fn plain(reason: String) -> Failure {
        Failure {
            reason,
            conflict: false,
        }
    }

    fn conflict(reason: String) -> Failure {
        Failure {
            reason,
            conflict: true,
        }
    }
}

/// A witness's text, made safe and short for an error message.
fn shown(text: &str) -> String {
    let clean: String = text
        .trim()
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(REFUSAL_SHOWN_MAX)
        .collect();
    if clean.is_empty() {
        "(no reason given)".into()
    } else {
        clean
    }
}

/// POSTs `body` to the witness; returns the status, the content type and
/// the answer (at most [`WITNESS_RESPONSE_BYTES_MAX`] bytes).
fn post(agent: &ureq::Agent, url: &str, body: String) -> Result<(u16, String, String), Failure> {
    let endpoint = format!("{url}{ADD_CHECKPOINT_PATH}");
    let mut response = agent
        .post(&endpoint)
        .header("Content-Type", "text/plain; charset=utf-8")
        .send(body)
        .map_err(|error| Failure::plain(format!("cannot reach {endpoint}: {error}")))?;
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let text = response
        .body_mut()
        .with_config()
        .limit(WITNESS_RESPONSE_BYTES_MAX as u64)
        .read_to_string()
        .map_err(|error| {
            Failure::plain(format!(
                "reading the answer of {endpoint} (at most {WITNESS_RESPONSE_BYTES_MAX} bytes): {error}"
            ))
        })?;
    Ok((status, content_type, text))
}

/// Asks one witness to cosign `signed`: from the size it cosigned in
/// `previous` (the newest stored checkpoint before this one), else 0; on
/// 409, once more from the size it names. Returns its valid cosignature
/// lines.
fn ask(
    agent: &ureq::Agent,
    engine: &Engine,
    signed: &SignedCheckpoint,
    previous: Option<&str>,
    target: &WitnessTarget,
) -> Result<Vec<String>, Failure> {
    let mut old = witnessed_size(previous, &target.key);
    let mut retried = false;
    loop {
        let request = engine.witness_request(signed, old).map_err(|error| {
            Failure::plain(format!("making the request from size {old}: {error}"))
        })?;
        let (status, content_type, text) = post(agent, &target.url, request.encode())?;
        match status {
            200 => {
                let lines = target
                    .key
                    .cosignatures_in(&signed.note, &text)
                    .map_err(|error| Failure::plain(error.to_string()))?;
                if lines.is_empty() {
                    return Err(Failure::plain(format!(
                        "it answered without a valid cosignature by {} ({}): is --witness given its right key?",
                        target.key.name(),
                        target.key.key_id_hex()
                    )));
                }
                return Ok(lines);
            }
            409 => {
                let size = content_type
                    .starts_with(SIZE_CONTENT_TYPE)
                    .then(|| parse_size(text.trim_end_matches('\n')))
                    .flatten()
                    .ok_or_else(|| {
                        Failure::plain(format!(
                            "409 without its size as {SIZE_CONTENT_TYPE}: {}",
                            shown(&text)
                        ))
                    })?;
                if size == old {
                    return Err(Failure::conflict(format!(
                        "409: it cosigned another root for size {size}: the log it saw and this one \
                         differ (a split view: two copies of this log signed with one key)"
                    )));
                }
                if size > signed.size {
                    return Err(Failure::conflict(format!(
                        "409: it cosigned size {size}, more than this checkpoint's {}: the log it \
                         saw is longer than this one (rolled back, or another copy signed with this key)",
                        signed.size
                    )));
                }
                if retried {
                    return Err(Failure::plain(format!(
                        "409 twice: it now has size {size} (another client is checkpointing this log)"
                    )));
                }
                retried = true;
                old = size;
            }
            422 => {
                return Err(Failure::conflict(format!(
                    "422: this log does not extend the checkpoint of size {old} it cosigned ({})",
                    shown(&text)
                )));
            }
            _ => return Err(Failure::plain(format!("HTTP {status}: {}", shown(&text)))),
        }
    }
}

/// `checkpoint --key KEY --witness URL=VKEY... [--witnesses K]`: signs a
/// checkpoint, asks every witness (at once) to cosign it, keeps the note
/// with the cosignatures it got, and fails unless at least K cosigned
/// (exit 4 if a witness's refusal shows a split view or a rollback, else
/// 1), naming each witness that did not and why.
pub fn cosigned_checkpoint(
    engine: &Engine,
    key: &SignerKey,
    targets: &[String],
    threshold: Option<usize>,
) -> Result<(SignedCheckpoint, Vec<WitnessOutcome>), CliError> {
    let targets = targets
        .iter()
        .map(|text| parse_target(text))
        .collect::<Result<Vec<_>, _>>()?;
    if targets.len() > WITNESSES_MAX {
        return Err(CliError::Usage {
            kind: "witnesses",
            message: format!("{} witnesses given; at most {WITNESSES_MAX}", targets.len()),
        });
    }
    for (index, target) in targets.iter().enumerate() {
        if targets
            .iter()
            .skip(index + 1)
            .any(|other| other.key == target.key)
        {
            return Err(CliError::Usage {
                kind: "witnesses",
                message: format!(
                    "witness {} is given twice: each witness counts once",
                    target.key.name()
                ),
            });
        }
    }
    let threshold = threshold.unwrap_or(targets.len());
    if threshold == 0 || threshold > targets.len() {
        return Err(CliError::Usage {
            kind: "witnesses",
            message: format!(
                "--witnesses {threshold} is not between 1 and the {} witnesses given",
                targets.len()
            ),
        });
    }
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(WITNESS_TIMEOUT))
        .http_status_as_error(false)
        // A witness answers where it was asked; a redirect is reported
        // as its status, not followed with the log's checkpoint.
        .max_redirects(0)
        .build()
        .into();
    let previous = engine.latest_checkpoint()?;
    let signed = engine.sign_checkpoint(key)?;
    let answers: Vec<Result<Vec<String>, Failure>> = std::thread::scope(|scope| {
        let asking: Vec<_> = targets
            .iter()
            .map(|target| {
                let (agent, signed, previous) = (&agent, &signed, previous.as_deref());
                scope.spawn(move || ask(agent, engine, signed, previous, target))
            })
            .collect();
        asking
            .into_iter()
            .map(|thread| {
                thread
                    .join()
                    .unwrap_or_else(|_| Err(Failure::plain("asking it failed unexpectedly".into())))
            })
            .collect()
    });
    let mut lines = Vec::new();
    let mut outcomes = Vec::new();
    for (target, answer) in targets.iter().zip(answers) {
        let (cosigned, error, conflict) = match answer {
            Ok(mut got) => {
                lines.append(&mut got);
                (true, None, false)
            }
            Err(failure) => (false, Some(failure.reason), failure.conflict),
        };
        outcomes.push(WitnessOutcome {
            url: target.url.clone(),
            name: target.key.name().to_owned(),
            cosigned,
            error,
            conflict,
        });
    }
    // Whatever was cosigned is kept, even short of K: the next checkpoint
    // then starts each of those witnesses' proofs from the size it saw.
    let stored = if lines.is_empty() {
        signed
    } else {
        engine.store_cosigned_checkpoint(&signed, &lines, &key.verifier())?
    };
    let cosigned = outcomes.iter().filter(|outcome| outcome.cosigned).count();
    if cosigned < threshold {
        let failures: Vec<String> = outcomes
            .iter()
            .filter_map(|outcome| {
                outcome
                    .error
                    .as_ref()
                    .map(|error| format!("{} at {}: {error}", outcome.name, outcome.url))
            })
            .collect();
        let message = format!(
            "checkpoint of size {} was cosigned by {cosigned} of the {threshold} witnesses required: {}",
            stored.size,
            failures.join("; ")
        );
        return Err(if outcomes.iter().any(|outcome| outcome.conflict) {
            CliError::Integrity(message)
        } else {
            CliError::Failed {
                kind: "witnesses",
                message,
            }
        });
    }
    Ok((stored, outcomes))
}

#[cfg(feature = "server")]
mod built {
    use sandlog_runtime::proofs::read_verifier_key;
    use sandlog_runtime::witness::read_witness_key;
    use sandlog_server::witness::WitnessOptions;

    use super::{WitnessCommand, WitnessServeArgs};
    use crate::exit::CliError;

    fn serve(args: WitnessServeArgs) -> Result<u8, CliError> {
        let key = read_witness_key(&args.key)?;
        let logs = args
            .logs
            .iter()
            .map(|vkey| read_verifier_key(vkey))
            .collect::<Result<Vec<_>, _>>()?;
        sandlog_server::witness::serve(WitnessOptions {
            listen: args.listen,
            key,
            logs,
            state_dir: args.state,
        })
        .map_err(|error| match error {
            sandlog_server::ServeError::Io { context, source } => CliError::Io { context, source },
            other => CliError::Failed {
                kind: "witness",
                message: other.to_string(),
            },
        })?;
        Ok(0)
    }

    pub fn run(command: WitnessCommand) -> Result<u8, CliError> {
        match command {
            WitnessCommand::Serve(args) => serve(args),
        }
    }
}

#[cfg(feature = "server")]
pub use built::run;

/// `witness serve` in a build without the `server` feature.
#[cfg(not(feature = "server"))]
pub fn run(_command: WitnessCommand) -> Result<u8, CliError> {
    Err(super::serve::not_built("witness serve"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn witness_targets_are_url_equals_vkey_over_plain_http() {
        let key = sandlog_runtime::core::cosignature::WitnessKey::from_seed("w.test/a", [1; 32])
            .map(|key| key.verifier().to_string())
            .unwrap_or_default();
        let target = parse_target(&format!("http://127.0.0.1:9/={key}"));
        assert!(
            matches!(&target, Ok(target) if target.url == "http://127.0.0.1:9"),
            "{target:?}"
        );
        for bad in [
            format!("https://w.example={key}"),
            format!("127.0.0.1:9={key}"),
            "http://127.0.0.1:9".to_owned(),
        ] {
            assert!(parse_target(&bad).is_err(), "{bad}");
        }
    }
}

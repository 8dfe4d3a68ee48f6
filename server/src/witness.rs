//! `sandlog witness serve`: a C2SP `tlog-witness` over HTTP, its own small
//! process with no sandlog root. It cosigns a log's checkpoint only if the
//! log's key signed it and it extends, by an RFC 6962 consistency proof,
//! the last checkpoint of that log it cosigned. The decision is
//! `sandlog_core::witness`'s (pure); this module keeps the state on disk
//! and speaks HTTP.
//!
//! # State (the `--state` directory)
//!
//! * `witness.lock`: held (an exclusive file lock) while a witness serves
//!   the directory, so two processes never race on one log's state.
//! * `logs/<blake3(origin)>.note`: per log, the last checkpoint note it
//!   cosigned, as the log signed it. Written atomically (a new temporary
//!   file, fsync, rename over, fsync of the directory) *before* the
//!   cosignature is returned, and the check and the write happen under one
//!   lock: after a crash at any point the witness never cosigns a
//!   checkpoint that does not extend one it returned a cosignature for.
//! * `conflicts/`: checkpoints it refused that prove the log misbehaved
//!   (another root for a size it cosigned, or a tree that does not extend
//!   it), signed by the log, kept as evidence (at most
//!   [`CONFLICT_NOTES_MAX`]).

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use sandlog_runtime::core::cosignature::WitnessKey;
use sandlog_runtime::core::note::{NOTE_BYTES_MAX, VerifierKey};
use sandlog_runtime::core::witness::{
    ADD_CHECKPOINT_BYTES_MAX, ADD_CHECKPOINT_PATH, AddCheckpoint, Refusal, SIZE_CONTENT_TYPE,
    WitnessedHead, kept_head,
};

use crate::ServeError;

/// Refused checkpoints kept as evidence of a log's misbehaviour; past it
/// they are only logged (a log's key could otherwise fill the disk).
pub const CONFLICT_NOTES_MAX: usize = 1000;

/// Logs one witness is configured for at most (`--log`).
pub const WITNESS_LOGS_MAX: usize = 1000;

/// The lock file a serving witness holds in its state directory.
const LOCK_FILE: &str = "witness.lock";

/// Where a witness serves, with what key, for which logs.
#[derive(Debug)]
pub struct WitnessOptions {
    /// Address to listen on (port 0 picks one, printed first).
    pub listen: SocketAddr,
    /// The witness's cosigning key.
    pub key: WitnessKey,
    /// The logs' verifier keys; a log is known by its key's name (origin).
    pub logs: Vec<VerifierKey>,
    /// The state directory (created if missing).
    pub state_dir: PathBuf,
}

/// Why an `add-checkpoint` request got no cosignature.
#[derive(Debug)]
pub enum WitnessError {
    /// The protocol's refusal (4xx).
    Refused(Refusal),
    /// The witness could not read or keep its state (500): it cosigns
    /// nothing it could not record.
    State(String),
}

impl From<Refusal> for WitnessError {
    fn from(refusal: Refusal) -> WitnessError {
        WitnessError::Refused(refusal)
    }
}

/// A witness over its state directory.
#[derive(Debug)]
pub struct Witness {
    key: WitnessKey,
    logs: Vec<VerifierKey>,
    dir: PathBuf,
    /// Held from reading a log's state to writing the new one, so two
    /// requests cannot both pass the check against the same old state.
    serial: Mutex<()>,
    /// The lock on `witness.lock`, held while this value lives.
    _lock: std::fs::File,
}

static TEMPORARY_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes `bytes` to `path` atomically and durably: a new temporary file
/// beside it, fsynced, renamed over it, the directory fsynced.
fn write_durably(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| std::io::Error::other("the state file has no directory"))?;
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::other("the state file has no name"))?;
    let temporary = dir.join(format!(
        ".{}.tmp-{}-{}",
        name.to_string_lossy(),
        std::process::id(),
        TEMPORARY_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temporary)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&temporary, path)?;
        std::fs::File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    result
}

/// Reads a file of at most `max` bytes.
fn read_bounded(path: &Path, max: usize) -> std::io::Result<Option<String>> {
    use std::io::Read as _;
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(error),
    };
    let mut text = String::new();
    file.take(max as u64 + 1).read_to_string(&mut text)?;
    if text.len() > max {
        return Err(std::io::Error::other(format!(
            "larger than {max} bytes: not a state file this witness wrote"
        )));
    }
    Ok(Some(text))
}

fn create_dir(path: &Path) -> Result<(), ServeError> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder
        .create(path)
        .map_err(ServeError::io(format!("creating {}", path.display())))
}

impl Witness {
    /// Opens (creating) the state directory and locks it. Refused if
    /// another witness serves it, or if no log is configured.
    pub fn open(
        dir: &Path,
        key: WitnessKey,
        logs: Vec<VerifierKey>,
    ) -> Result<Witness, ServeError> {
        if logs.is_empty() || logs.len() > WITNESS_LOGS_MAX {
            return Err(ServeError::Io {
                context: "configuring the witness".into(),
                source: std::io::Error::other(format!(
                    "give between 1 and {WITNESS_LOGS_MAX} log verifier keys with --log VKEY"
                )),
            });
        }
        create_dir(&dir.join("logs"))?;
        create_dir(&dir.join("conflicts"))?;
        let lock_path = dir.join(LOCK_FILE);
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(ServeError::io(format!("opening {}", lock_path.display())))?;
        lock.try_lock().map_err(|error| ServeError::Io {
            context: format!("locking {}", lock_path.display()),
            source: match error {
                std::fs::TryLockError::WouldBlock => std::io::Error::other(
                    "another witness process serves this state directory; stop it first",
                ),
                std::fs::TryLockError::Error(error) => error,
            },
        })?;
        // The new directories' entries are durable before any state in them.
        std::fs::File::open(dir)
            .and_then(|handle| handle.sync_all())
            .map_err(ServeError::io(format!("syncing {}", dir.display())))?;
        // Temporary files a crash left behind were never renamed: the
        // state they would have replaced is still in place.
        if let Ok(entries) = std::fs::read_dir(dir.join("logs")) {
            for entry in entries.flatten() {
                if entry.file_name().to_string_lossy().starts_with('.') {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
        Ok(Witness {
            key,
            logs,
            dir: dir.to_owned(),
            serial: Mutex::new(()),
            _lock: lock,
        })
    }

    fn state_path(&self, origin: &str) -> PathBuf {
        self.dir
            .join("logs")
            .join(format!("{}.note", blake3::hash(origin.as_bytes()).to_hex()))
    }

    /// The head this witness last cosigned for `origin`.
    fn latest(&self, origin: &str) -> Result<Option<WitnessedHead>, WitnessError> {
        let path = self.state_path(origin);
        let damaged = |reason: String| {
            WitnessError::State(format!(
                "the state file {} is damaged ({reason}); this witness cosigns nothing for {origin:?} until it is restored",
                path.display()
            ))
        };
        let Some(note) =
            read_bounded(&path, NOTE_BYTES_MAX).map_err(|error| damaged(error.to_string()))?
        else {
            return Ok(None);
        };
        let (kept_origin, head) = kept_head(&note).map_err(damaged)?;
        if kept_origin != origin {
            return Err(damaged(format!("it is for {kept_origin:?}")));
        }
        Ok(Some(head))
    }

    /// Keeps a refused checkpoint that proves misbehaviour, if room is left.
    fn keep_conflict(&self, origin: &str, size: u64, note: &str) {
        let dir = self.dir.join("conflicts");
        let kept = std::fs::read_dir(&dir).map_or(0, Iterator::count);
        if kept >= CONFLICT_NOTES_MAX {
            tracing::warn!(
                origin,
                size,
                "conflicting checkpoint not kept: {CONFLICT_NOTES_MAX} are kept already"
            );
            return;
        }
        let name = format!(
            "{}-{size}-{}.note",
            blake3::hash(origin.as_bytes()).to_hex(),
            &blake3::hash(note.as_bytes()).to_hex()[..16]
        );
        if let Err(error) = write_durably(&dir.join(name), note.as_bytes()) {
            tracing::warn!(origin, size, %error, "conflicting checkpoint not kept");
        }
    }

    /// Handles one `add-checkpoint` body at `now` (POSIX seconds): the
    /// cosignature line, or why not. The new head is on disk before this
    /// returns a cosignature.
    pub fn add_checkpoint(&self, body: &[u8], now: u64) -> Result<String, WitnessError> {
        let request = AddCheckpoint::parse(body)?;
        let checkpoint = request.verify_note(&self.logs)?;
        let origin = checkpoint.origin.clone();
        let _serial = self
            .serial
            .lock()
            .map_err(|_| WitnessError::State("a request failed while holding the state".into()))?;
        let latest = self.latest(&origin)?;
        let head = match request.check_extends(latest.as_ref(), &checkpoint) {
            Ok(head) => head,
            Err(refusal) => {
                if matches!(
                    refusal,
                    Refusal::RootConflict { .. } | Refusal::BadProof { .. }
                ) {
                    tracing::warn!(origin, size = checkpoint.size, %refusal, "the log showed a checkpoint that does not extend what this witness cosigned");
                    self.keep_conflict(&origin, checkpoint.size, &request.note);
                }
                return Err(refusal.into());
            }
        };
        if latest != Some(head) {
            let path = self.state_path(&origin);
            write_durably(&path, request.note.as_bytes()).map_err(|error| {
                WitnessError::State(format!("writing {}: {error}", path.display()))
            })?;
        }
        let line = self
            .key
            .cosign(request.body()?, now)
            .map_err(|error| WitnessError::Refused(Refusal::Malformed(error.to_string())))?;
        tracing::info!(origin, size = head.size, "cosigned");
        Ok(line)
    }
}

fn text(status: StatusCode, content_type: &'static str, body: String) -> Response {
    let mut response = (status, body).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

async fn add_checkpoint(State(witness): State<Arc<Witness>>, body: Bytes) -> Response {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs());
    let outcome = tokio::task::spawn_blocking(move || witness.add_checkpoint(&body, now)).await;
    match outcome {
        Ok(Ok(line)) => text(StatusCode::OK, "text/plain; charset=utf-8", line),
        Ok(Err(WitnessError::Refused(refusal))) => {
            let status = StatusCode::from_u16(refusal.status()).unwrap_or(StatusCode::BAD_REQUEST);
            match refusal.latest_size() {
                Some(size) => text(status, SIZE_CONTENT_TYPE, format!("{size}\n")),
                None => text(status, "text/plain; charset=utf-8", format!("{refusal}\n")),
            }
        }
        Ok(Err(WitnessError::State(reason))) => {
            tracing::error!(%reason, "witness state");
            text(
                StatusCode::INTERNAL_SERVER_ERROR,
                "text/plain; charset=utf-8",
                format!("{reason}\n"),
            )
        }
        Err(error) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            "text/plain; charset=utf-8",
            format!("the request failed: {error}\n"),
        ),
    }
}

async fn no_route() -> Response {
    text(
        StatusCode::NOT_FOUND,
        "text/plain; charset=utf-8",
        format!("not found: this witness serves POST {ADD_CHECKPOINT_PATH}\n"),
    )
}

/// The witness's router: `POST /add-checkpoint`, bodies bounded by
/// [`ADD_CHECKPOINT_BYTES_MAX`] (413 past it), 404 for anything else.
pub fn router(witness: Arc<Witness>) -> Router {
    Router::new()
        .route(ADD_CHECKPOINT_PATH, post(add_checkpoint))
        .fallback(no_route)
        .layer(DefaultBodyLimit::max(ADD_CHECKPOINT_BYTES_MAX))
        .with_state(witness)
}

/// Serves until SIGTERM or SIGINT. Prints `listening on http://ADDR` on
/// stdout first.
pub fn serve(options: WitnessOptions) -> Result<(), ServeError> {
    let witness = Arc::new(Witness::open(
        &options.state_dir,
        options.key,
        options.logs,
    )?);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name("sandlog-witness")
        .build()
        .map_err(ServeError::io("starting the witness's runtime"))?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(options.listen)
            .await
            .map_err(ServeError::io(format!("listening on {}", options.listen)))?;
        let bound = listener
            .local_addr()
            .map_err(ServeError::io("reading the bound address"))?;
        {
            let mut stdout = std::io::stdout().lock();
            writeln!(stdout, "listening on http://{bound}")
                .and_then(|()| stdout.flush())
                .map_err(ServeError::io("writing the bound address to stdout"))?;
        }
        tracing::info!(%bound, witness = witness.key.name(), "witness serving");
        axum::serve(listener, router(witness))
            .with_graceful_shutdown(crate::api::wait_for_signal())
            .await
            .map_err(ServeError::io("serving"))
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;
    use sandlog_runtime::core::merkle::{Frontier, MerkleHash};
    use sandlog_runtime::core::note::{Checkpoint, SignerKey};

    fn log_key() -> SignerKey {
        SignerKey::from_seed("sandlog.test/log", [7; 32]).unwrap()
    }

    fn witness_key() -> WitnessKey {
        WitnessKey::from_seed("witness.test/w", [5; 32]).unwrap()
    }

    /// The root of `size` leaves whose data is the index and `seed`.
    fn root(size: u64, seed: u8) -> MerkleHash {
        let mut frontier = Frontier::new();
        for leaf in 0..size {
            let mut data = [seed; 32];
            data[..8].copy_from_slice(&leaf.to_be_bytes());
            frontier.append(&data);
        }
        frontier.root()
    }

    fn body(old: u64, size: u64, seed: u8) -> Vec<u8> {
        let note = Checkpoint {
            origin: "sandlog.test/log".into(),
            size,
            root: root(size, seed),
            extensions: vec![],
        }
        .sign(&log_key())
        .unwrap();
        assert!(old == 0 || old == size, "proofs are not built here");
        AddCheckpoint {
            old,
            proof: vec![],
            note,
        }
        .encode()
        .into_bytes()
    }

    /// Goal: the state is on disk when a cosignature is returned, and a
    /// witness reopened on it (as after SIGKILL) refuses another root of
    /// the same size; a second witness on the same directory is refused.
    #[test]
    fn the_state_survives_reopening_and_is_exclusive() {
        let dir = tempfile::tempdir().unwrap();
        let open = || Witness::open(dir.path(), witness_key(), vec![log_key().verifier()]);
        let witness = open().unwrap();
        let line = witness.add_checkpoint(&body(0, 4, 1), 10).unwrap();
        assert!(line.starts_with("\u{2014} witness.test/w "), "{line}");
        assert!(open().is_err(), "a second witness on one directory");
        drop(witness);
        let witness = open().unwrap();
        // The same checkpoint again: fine.
        assert!(witness.add_checkpoint(&body(4, 4, 1), 11).is_ok());
        // Another root of size 4: 409 with 4, kept as a conflict.
        match witness.add_checkpoint(&body(4, 4, 2), 12) {
            Err(WitnessError::Refused(refusal)) => {
                assert_eq!((refusal.status(), refusal.latest_size()), (409, Some(4)));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            std::fs::read_dir(dir.path().join("conflicts"))
                .unwrap()
                .count(),
            1
        );
        // A stale old size: 409 with the witness's size.
        match witness.add_checkpoint(&body(0, 9, 1), 13) {
            Err(WitnessError::Refused(refusal)) => {
                assert_eq!(refusal.latest_size(), Some(4));
            }
            other => panic!("{other:?}"),
        }
    }

    /// Goal: a damaged state file stops cosigning for that log (500), it is
    /// never taken as "never cosigned".
    #[test]
    fn a_damaged_state_file_refuses_rather_than_forgets() {
        let dir = tempfile::tempdir().unwrap();
        let witness = Witness::open(dir.path(), witness_key(), vec![log_key().verifier()]).unwrap();
        witness.add_checkpoint(&body(0, 4, 1), 10).unwrap();
        let path = witness.state_path("sandlog.test/log");
        std::fs::write(&path, "garbage").unwrap();
        assert!(matches!(
            witness.add_checkpoint(&body(0, 4, 2), 11),
            Err(WitnessError::State(_))
        ));
    }
}

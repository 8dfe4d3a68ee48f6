//! The one error enum of `sandlog-runtime`.

use std::path::PathBuf;

use sandlog_core::note::NoteError;
use sandlog_core::{CoreError, ErrorClass, SessionId};
use sandlog_eventstore::EventStoreError;
use sandlog_projections::{ProjectionError, SessionStatus};

use sandlog_sandbox::SandboxError;

/// Errors of the engine. Each variant says how to handle it; `kind()` gives
/// the CLI's stable name.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// The root directory does not exist. Create it (`sandlog init`) or
    /// point at the right one.
    #[error(
        "no sandlog root at {0}: the directory does not exist; run `sandlog init` to create it, or pass the right --root"
    )]
    RootMissing(PathBuf),
    /// No session with this id.
    #[error("no session {0}")]
    UnknownSession(SessionId),
    /// The session exists but is not active (being pruned, pruned,
    /// deleted): nothing can run or be written in it.
    #[error("session {session_id} is {}; only active sessions can be used", status.as_str())]
    SessionNotActive {
        /// The session.
        session_id: SessionId,
        /// Its status.
        status: SessionStatus,
    },
    /// An input was invalid (path, id, duration). Nothing was touched.
    #[error(transparent)]
    Invalid(#[from] CoreError),
    /// A file the host asked for is not in the workspace.
    #[error("{path}: no such file in session {session_id}")]
    FileNotFound {
        /// The session.
        session_id: SessionId,
        /// The path.
        path: String,
    },
    /// A write without `overwrite` found the file there.
    #[error("{path} already exists in session {session_id} (pass overwrite to replace it)")]
    FileExists {
        /// The session.
        session_id: SessionId,
        /// The path.
        path: String,
    },
    /// A delete of a directory without `recursive`.
    #[error("{path} is a directory; delete it with recursive")]
    IsDirectory {
        /// The path.
        path: String,
    },
    /// The path resolves outside the workspace (a symlink pointing out).
    /// Nothing was touched.
    #[error("{path}: refused: the path resolves outside the workspace (through a symlink)")]
    EscapesWorkspace {
        /// The path.
        path: String,
    },
    /// A host write would take the workspace past its quota.
    #[error(
        "writing {path} would take session {session_id} to {would_be} bytes, over its quota of {quota} bytes"
    )]
    QuotaExceeded {
        /// The session.
        session_id: SessionId,
        /// The path.
        path: String,
        /// The size it would reach.
        would_be: u64,
        /// The quota.
        quota: u64,
    },
    /// Context files given at creation would take a new session past its
    /// size limit. Nothing was created.
    #[error(
        "the context files come to {would_be} bytes, over the session's size limit of {max_size} bytes; raise --max-size (or the root's session.max_size) or give smaller files"
    )]
    ContextTooLarge {
        /// Their total size.
        would_be: u64,
        /// The limit.
        max_size: u64,
    },
    /// A native command could not be started (not found, not
    /// executable). The attempt is recorded.
    #[error(
        "could not start {program:?}: {source}; the attempt is recorded at position {position} (check the command's name, its PATH and its permissions)"
    )]
    NativeNotStarted {
        /// The program.
        program: String,
        /// The position of its `native.completed`.
        position: u64,
        /// Why.
        source: std::io::Error,
    },
    /// A guest runtime module is not installed.
    #[error(
        "runtime {name:?} not found (looked for {searched}): install it with `sandlog runtimes install`, or set SANDLOG_RUNTIMES_DIR to a directory holding it"
    )]
    RuntimeMissing {
        /// The runtime's name.
        name: String,
        /// Every path it was looked for at, in order.
        searched: String,
    },
    /// The code is larger than the limit.
    #[error("code is {size} bytes; the limit is {max}")]
    CodeTooLarge {
        /// Its size.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// The session changed while an operation ran (another process wrote
    /// to it). Retry.
    #[error("session {0} changed concurrently; retry")]
    Conflict(SessionId),
    /// The sandbox failed to set up or compile (not a guest failure: those
    /// are outcomes).
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    /// The log failed.
    #[error(transparent)]
    Store(#[from] EventStoreError),
    /// A projection query failed.
    #[error(transparent)]
    Projection(#[from] ProjectionError),
    /// A key, a signed note or a checkpoint was refused. A key that does
    /// not parse is bad input (`bad_key`); a note that is malformed, not
    /// signed by the key or altered is an integrity failure.
    #[error(transparent)]
    Note(NoteError),
    /// An evidence bundle failed verification; the message names what.
    #[error(transparent)]
    Bundle(sandlog_core::bundle::BundleError),
    /// The log does not extend a checkpoint signed earlier.
    #[error(
        "the log ({log_size} events) does not extend the checkpoint of {checkpoint_size} events: {reason}"
    )]
    NotConsistent {
        /// The checkpoint's size.
        checkpoint_size: u64,
        /// The log's size.
        log_size: u64,
        /// What failed.
        reason: String,
    },
    /// A full audit found the log, its tree, its map or a checkpoint
    /// disagreeing, first at tree size `size`.
    #[error("the audit failed at tree size {size}: {reason}")]
    AuditFailed {
        /// The first tree size where something disagrees.
        size: u64,
        /// What disagrees.
        reason: String,
    },
    /// No checkpoint has been signed yet.
    #[error("no signed checkpoint yet: run `sandlog checkpoint --key KEYFILE` (or pass --key)")]
    NoCheckpoint,
    /// A filesystem operation failed (permission denied, disk full, …).
    #[error("{context}: {source}")]
    Io {
        /// What was being done, with the path.
        context: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A streamed host write read more than it may write; the copy stopped
    /// there and nothing was written (no file, no temporary file, no
    /// event). Write a smaller file, or raise the limit.
    #[error(
        "{path}: the input is larger than {limit} (stopped after reading {read} bytes); nothing was written. {remedy}"
    )]
    InputTooLarge {
        /// The path it was to be written to.
        path: String,
        /// The limit, described (which one and how much).
        limit: String,
        /// The most bytes the write could take.
        bytes_max: u64,
        /// Bytes read when the copy stopped.
        read: u64,
        /// What to do about it.
        remedy: &'static str,
    },
    /// A path given as input (a key, a checkpoint, a bundle, a code file,
    /// an upload) is not a regular file: a FIFO or a device would hang the
    /// command or never end, so it is refused before anything is read.
    #[error(
        "{what} {path} is {found}, not a regular file: nothing was read from it; give the path of a file (or `-` for stdin where the command takes it)"
    )]
    NotAFile {
        /// The path as given.
        path: String,
        /// What it was to be (`signing key`, `bundle`, `code file`).
        what: String,
        /// What it is (`a FIFO (named pipe)`, `a character device`, …).
        found: &'static str,
    },
    /// A signing key file that its group or others may read or write.
    #[error(
        "key file {path} has mode {mode:04o}: others may read or change it, so it signs for them too; run `chmod 600 {path}`"
    )]
    KeyExposed {
        /// The key file.
        path: String,
        /// Its permission bits.
        mode: u32,
    },
    /// A text input (a key, a checkpoint) is not UTF-8.
    #[error("{what} {path} is not UTF-8 text: it cannot be a {what}")]
    NotText {
        /// The path as given.
        path: String,
        /// What it was to be.
        what: String,
    },
    /// An input is past the largest size it may have; reading stopped
    /// there, in bounded memory.
    #[error(
        "{what} is larger than {limit} = {max} bytes; it was not read past that. Give a smaller input"
    )]
    ReadTooLarge {
        /// The input (and its path, when it has one).
        what: String,
        /// The limit's name.
        limit: &'static str,
        /// The limit, bytes.
        max: u64,
    },
    /// A client named a guest runtime the server does not offer. Over HTTP
    /// and MCP a runtime is a name from a fixed set, never a path on the
    /// server, which a client could otherwise make it compile and run.
    #[error(
        "unknown runtime {name:?}: this server runs {known}; an operator registers more with `--module NAME=PATH.wasm`"
    )]
    UnknownRuntime {
        /// What the client asked for (cut to a bounded length).
        name: String,
        /// The names it may ask for, comma-separated.
        known: String,
    },
    /// Another process (or engine) holds the session's lease: an execution
    /// or write is running in it, or it is being pruned or deleted. Nothing
    /// was changed. Retry when it finishes, or wait longer.
    #[error(
        "session {session_id} is busy: another execution, write, prune or delete holds it (waited {} ms); retry when it finishes, or wait longer (`--wait DUR`)",
        wait.as_millis()
    )]
    Busy {
        /// The session.
        session_id: SessionId,
        /// How long the command waited for the lease.
        wait: std::time::Duration,
    },
    /// The directory exists but holds no root (no `sandlog.db`, no
    /// `sandlog.anchor`). Nothing was created in it.
    #[error(
        "no sandlog root at {path}: it has no sandlog.db and no sandlog.anchor; run `sandlog init` to create one there, or pass the right --root"
    )]
    NotARoot {
        /// The directory.
        path: PathBuf,
    },
    /// `sandlog.anchor` says this root had a log, but the database is
    /// missing, empty or has no events. Nothing was created. Restore the
    /// database, or reset the log explicitly.
    #[error(
        "{reason} but sandlog.anchor says this root had a log (root id {root_id}, genesis {genesis}): restore the database from a backup, or run `sandlog init --reset-log` to start a new log and keep the old anchor as sandlog.anchor.replaced-<time> (root {root})"
    )]
    LogMissing {
        /// The root.
        root: PathBuf,
        /// What is wrong with the database.
        reason: String,
        /// The anchor's root id.
        root_id: String,
        /// The anchor's genesis hash.
        genesis: String,
    },
    /// The database's first event is not the anchor's genesis: the database
    /// was replaced by another log.
    #[error(
        "sandlog.db is another log (its first event has hash {found}) but sandlog.anchor says this root's log starts with genesis {genesis} (root id {root_id}): restore this root's database from a backup, or run `sandlog init --reset-log` to accept the current database and keep the old anchor as sandlog.anchor.replaced-<time> (root {root})"
    )]
    AnchorMismatch {
        /// The root.
        root: PathBuf,
        /// The hash of the database's first event.
        found: String,
        /// The anchor's root id.
        root_id: String,
        /// The anchor's genesis hash.
        genesis: String,
    },
    /// `sandlog.anchor` cannot be read (not a file, too large, not an
    /// anchor). Restore it, or reset the log explicitly.
    #[error(
        "{path}: not a readable sandlog anchor ({reason}); restore it from a backup, or run `sandlog init --reset-log`"
    )]
    AnchorUnreadable {
        /// The anchor's path.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The bytes asked for were never kept (past the evidence budget,
    /// evidence off, an adopted file): the events keep their hash only.
    #[error("{what}: its bytes were not kept ({reason}); only its hash {hash} is recorded")]
    ContentNotKept {
        /// What was asked for.
        what: String,
        /// Why they were not kept.
        reason: String,
        /// The recorded hash.
        hash: String,
    },
    /// The bytes asked for were erased; the events naming them remain.
    #[error(
        "{what}: its bytes were erased at {erased_at} ({reason}); the events and its hash {hash} remain"
    )]
    ContentErased {
        /// What was asked for.
        what: String,
        /// When.
        erased_at: String,
        /// Why, from the `evidence.erased` event when found.
        reason: String,
        /// The recorded hash.
        hash: String,
    },
    /// The session is under a legal hold: it cannot be pruned, deleted or
    /// erased until `session release`.
    #[error(
        "session {session_id} is under a legal hold ({reason}); release it first with `sandlog session release {session_id}`"
    )]
    Held {
        /// The session.
        session_id: SessionId,
        /// The hold's reason.
        reason: String,
    },
    /// No blob with this address is stored, and none was erased.
    #[error("no blob {0} is stored: no event's kept content has this blake3")]
    BlobNotFound(String),
    /// A restore target that already holds something.
    #[error("{}: not empty; restore writes only into a new or empty directory, so nothing is overwritten", path.display())]
    NotEmpty {
        /// The directory.
        path: PathBuf,
    },
    /// A command that touches a workspace was given another node's session
    /// (with a shared log, each node's workspaces are on its own disk).
    #[error(
        "session {session_id} belongs to node {node}; this is node {this_node}: run the command on {node} (or with --node {node} there)"
    )]
    ForeignSession {
        /// The session.
        session_id: SessionId,
        /// Its node.
        node: String,
        /// This engine's node.
        this_node: String,
    },
    /// A log location given to `migrate` that cannot be used.
    #[error("{location}: {reason}")]
    BadLocation {
        /// The location (without a password).
        location: String,
        /// What is wrong, and what to give instead.
        reason: String,
    },
    /// No such execution, or no such point in a session's history.
    #[error("session {session_id}: {what}")]
    NotInHistory {
        /// The session.
        session_id: SessionId,
        /// What is missing, and what exists.
        what: String,
    },
}

impl RuntimeError {
    /// A stable, machine-readable name for the CLI's `{"error":{"kind"}}`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::RootMissing(_) => "root_missing",
            Self::UnknownSession(_) => "not_found",
            Self::SessionNotActive { .. } => "session_not_active",
            Self::Invalid(error) => error.kind(),
            Self::FileNotFound { .. } => "not_found",
            Self::FileExists { .. } => "file_exists",
            Self::IsDirectory { .. } => "is_directory",
            Self::EscapesWorkspace { .. } => "path_escapes",
            Self::QuotaExceeded { .. } | Self::ContextTooLarge { .. } => "quota",
            Self::RuntimeMissing { .. } => "runtime_missing",
            Self::UnknownRuntime { .. } => "unknown_runtime",
            Self::NotAFile { .. } => "not_a_file",
            Self::KeyExposed { .. } => "key_exposed",
            Self::NotText { .. } => "invalid_input",
            Self::ReadTooLarge { .. } => "too_large",
            Self::NativeNotStarted { source, .. } => match source.kind() {
                std::io::ErrorKind::NotFound => "not_found",
                std::io::ErrorKind::PermissionDenied => "permission_denied",
                _ => "io",
            },
            Self::CodeTooLarge { .. } => "too_large",
            Self::Conflict(_) => "conflict",
            Self::Sandbox(error) => error.kind(),
            Self::Store(error) => error.kind(),
            Self::Projection(ProjectionError::UnknownSession(_)) => "not_found",
            Self::Projection(error) => error.kind(),
            Self::Io { source, .. } if source.kind() == std::io::ErrorKind::StorageFull => {
                "disk_full"
            }
            Self::Io { source, .. } if source.kind() == std::io::ErrorKind::PermissionDenied => {
                "permission_denied"
            }
            Self::Io { .. } => "io",
            Self::Note(NoteError::BadName(_) | NoteError::BadKey { .. }) => "bad_key",
            Self::Note(_)
            | Self::Bundle(_)
            | Self::NotConsistent { .. }
            | Self::AuditFailed { .. } => "integrity",
            Self::NoCheckpoint => "not_found",
            Self::InputTooLarge { .. } => "too_large",
            Self::Busy { .. } => "busy",
            Self::ContentNotKept { .. } => "not_kept",
            Self::ContentErased { .. } => "erased",
            Self::Held { .. } => "held",
            Self::NotEmpty { .. } => "not_empty",
            Self::BlobNotFound(_) => "not_found",
            Self::NotInHistory { .. } => "not_found",
            Self::BadLocation { .. } => "invalid_location",
            Self::ForeignSession { .. } => "foreign_session",
            Self::NotARoot { .. } => "root_missing",
            Self::LogMissing { .. }
            | Self::AnchorMismatch { .. }
            | Self::AnchorUnreadable { .. } => "integrity",
        }
    }

    /// The class of the failure, which the CLI maps to its exit code, the
    /// server to an HTTP status and the Python package to an exception.
    pub fn class(&self) -> ErrorClass {
        match self {
            Self::RootMissing(_)
            | Self::NotARoot { .. }
            | Self::UnknownSession(_)
            | Self::FileNotFound { .. }
            | Self::RuntimeMissing { .. }
            | Self::NoCheckpoint
            | Self::BlobNotFound(_)
            | Self::NotInHistory { .. } => ErrorClass::NotFound,
            Self::SessionNotActive { .. }
            | Self::FileExists { .. }
            | Self::Conflict(_)
            | Self::Busy { .. }
            | Self::Held { .. }
            | Self::NotEmpty { .. } => ErrorClass::Conflict,
            Self::Invalid(error) => error.class(),
            // A key is the caller's input: one that does not parse is a
            // mistake to fix, never evidence that a log was forged.
            Self::IsDirectory { .. }
            | Self::EscapesWorkspace { .. }
            | Self::BadLocation { .. }
            | Self::UnknownRuntime { .. }
            | Self::NotAFile { .. }
            | Self::KeyExposed { .. }
            | Self::NotText { .. }
            | Self::Note(NoteError::BadName(_) | NoteError::BadKey { .. }) => ErrorClass::BadInput,
            Self::QuotaExceeded { .. }
            | Self::ContextTooLarge { .. }
            | Self::CodeTooLarge { .. }
            | Self::InputTooLarge { .. }
            | Self::ReadTooLarge { .. } => ErrorClass::Limit,
            Self::Sandbox(error) => error.class(),
            Self::Store(error) => error.class(),
            Self::Projection(error) => error.class(),
            Self::Note(_)
            | Self::Bundle(_)
            | Self::NotConsistent { .. }
            | Self::AuditFailed { .. }
            | Self::LogMissing { .. }
            | Self::AnchorMismatch { .. }
            | Self::AnchorUnreadable { .. } => ErrorClass::Integrity,
            Self::ContentNotKept { .. }
            | Self::ContentErased { .. }
            | Self::ForeignSession { .. } => ErrorClass::Refused,
            Self::NativeNotStarted { source, .. }
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                ErrorClass::NotFound
            }
            Self::NativeNotStarted { .. } | Self::Io { .. } => ErrorClass::Io,
        }
    }

    /// Whether this is "not found" (CLI exit code 3).
    pub fn is_not_found(&self) -> bool {
        self.class() == ErrorClass::NotFound
    }

    /// Whether this is an integrity failure (CLI exit code 4).
    pub fn is_integrity(&self) -> bool {
        self.class() == ErrorClass::Integrity
    }

    /// Maps an I/O error to [`RuntimeError::Io`] with this context.
    pub fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> RuntimeError {
        let context = context.into();
        move |source| RuntimeError::Io { context, source }
    }
}

/// Result alias.
pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;

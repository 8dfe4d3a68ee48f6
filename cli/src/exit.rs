//! Errors of the CLI and the exit codes they map to (docs/cli.md): 0 ok, 1
//! failure, 2 usage or bad input, 3 not found, 4 integrity failure, 5 guest
//! failure.

use std::process::ExitCode;

use sandlog_runtime::RuntimeError;
use sandlog_runtime::core::ErrorClass;

/// Success.
pub const EXIT_OK: u8 = 0;
/// A failure (I/O, database, refused operation).
pub const EXIT_FAILURE: u8 = 1;
/// Bad command line or malformed input (id, duration, size, path syntax).
pub const EXIT_USAGE: u8 = 2;
/// An unknown session, file or runtime.
pub const EXIT_NOT_FOUND: u8 = 3;
/// The log or the read models failed verification.
pub const EXIT_INTEGRITY: u8 = 4;
/// `exec` whose outcome was not ok or whose guest exited non-zero.
pub const EXIT_GUEST_FAILURE: u8 = 5;

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// From the engine.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// Malformed input the CLI parsed itself.
    #[error("{message}")]
    Usage {
        /// Stable kind.
        kind: &'static str,
        /// What was wrong.
        message: String,
    },
    /// An engine error in the CLI's words (flags, not library fields): the
    /// engine's kind and exit code, a message naming the fix on the
    /// command line.
    #[error("{message}")]
    Reworded {
        /// The engine's error.
        source: Box<RuntimeError>,
        /// What to tell the person.
        message: String,
    },
    /// Something the user named does not exist (a session id prefix).
    #[error("{message}")]
    NotFound {
        /// Stable kind.
        kind: &'static str,
        /// What was missing and where to look.
        message: String,
    },
    /// An integrity failure found by `verify` that is not a chain error.
    #[error("{0}")]
    Integrity(String),
    /// Others refused or failed what the command needed (witnesses that
    /// did not cosign).
    #[error("{message}")]
    Failed {
        /// Stable kind.
        kind: &'static str,
        /// Who failed and why.
        message: String,
    },
    /// Reading or writing a file the user named.
    #[error("{context}: {source}")]
    Io {
        /// What and where.
        context: String,
        /// The error.
        source: std::io::Error,
    },
}

impl CliError {
    /// A damaged database (SQLite's "malformed" or "not a database" in
    /// the middle of a command) named by its file, with what to do: its
    /// errors carry SQLite's words only. Kind and exit code (4) unchanged.
    pub fn naming_database(self, database: &std::path::Path) -> CliError {
        let CliError::Runtime(error) = self else {
            return self;
        };
        if error.kind() != "database_corrupt" {
            return CliError::Runtime(error);
        }
        let message = format!(
            "{} is damaged ({error}): the log cannot be read. Copy the root aside, restore the file from a backup, or recover it with `sqlite3 {} .recover`; `sandlog verify` then checks what was recovered",
            database.display(),
            database.display()
        );
        CliError::Reworded {
            source: Box::new(error),
            message,
        }
    }

    /// The error as a person should read it. The engine reports a refused
    /// input value (a reason, an execution number, a setting, code that is
    /// not UTF-8) as a payload of schema 0 that "does not decode"; that
    /// wording is about stored events, so only its reason, which names the
    /// value and the fix, is shown. Kind and exit code are unchanged.
    pub fn for_people(self) -> CliError {
        let CliError::Runtime(error) = self else {
            return self;
        };
        let message = match &error {
            RuntimeError::Invalid(sandlog_runtime::core::CoreError::InvalidPayload {
                schema: 0,
                reason,
                ..
            }) => {
                return CliError::Usage {
                    kind: "invalid_payload",
                    message: reason.clone(),
                };
            }
            RuntimeError::FileExists { session_id, path } => format!(
                "{path} already exists in session {session_id}; pass --overwrite to replace it"
            ),
            RuntimeError::IsDirectory { path } => format!(
                "{path} is a directory: to delete it and everything in it pass --recursive (`sandlog files rm ID PATH --recursive`); `files cat` and `files put` take a file"
            ),
            RuntimeError::UnknownSession(session_id) => format!(
                "no session {session_id}; `sandlog session list` shows the sessions of this root"
            ),
            RuntimeError::SessionNotActive { .. } => format!(
                "{error}; `sandlog session list --status active` shows them, `sandlog session create` makes a new one"
            ),
            RuntimeError::CodeTooLarge { size, max } => format!(
                "the code is {size} bytes; the limit is {max} bytes: write the data it holds to the workspace with `sandlog files put` and run a short script that reads it"
            ),
            RuntimeError::QuotaExceeded { .. } => {
                format!("{error}; delete files first (`sandlog files rm`) or write less")
            }
            RuntimeError::Conflict(session_id) => format!(
                "session {session_id} changed while this command ran (another process wrote to it): run the command again"
            ),
            _ => return CliError::Runtime(error),
        };
        CliError::Reworded {
            source: Box::new(error),
            message,
        }
    }

    /// The stable kind for `{"error":{"kind"}}`.
    pub fn kind(&self) -> &'static str {
        match self {
            CliError::Runtime(error) => error.kind(),
            CliError::Reworded { source, .. } => source.kind(),
            CliError::Usage { kind, .. }
            | CliError::NotFound { kind, .. }
            | CliError::Failed { kind, .. } => kind,
            CliError::Integrity(_) => "integrity",
            CliError::Io { .. } => "io",
        }
    }

    /// The class of the failure (`{"error":{"class"}}`).
    pub fn class(&self) -> ErrorClass {
        match self {
            CliError::Runtime(error) => error.class(),
            CliError::Reworded { source, .. } => source.class(),
            CliError::Usage { .. } => ErrorClass::BadInput,
            CliError::NotFound { .. } => ErrorClass::NotFound,
            CliError::Integrity(_) => ErrorClass::Integrity,
            CliError::Failed { .. } => ErrorClass::Refused,
            CliError::Io { .. } => ErrorClass::Io,
        }
    }

    /// The exit code.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage { .. } => EXIT_USAGE,
            CliError::NotFound { .. } => EXIT_NOT_FOUND,
            CliError::Integrity(_) => EXIT_INTEGRITY,
            CliError::Io { .. } | CliError::Failed { .. } => EXIT_FAILURE,
            CliError::Reworded { source, .. } => runtime_exit_code(source),
            CliError::Runtime(error) => runtime_exit_code(error),
        }
    }
}

/// The exit code of an engine error, by its class. Bad input and a limit
/// are exit 2: the engine refused what the caller asked for rather than
/// failed doing it (a malformed value, a path that leaves the workspace or
/// names a directory, an input past its limit), so the fix is a different
/// argument. A restore into a directory that is not empty is exit 2 too,
/// though the class is a conflict: the fix is a different `--to`.
fn runtime_exit_code(error: &RuntimeError) -> u8 {
    if matches!(error, RuntimeError::NotEmpty { .. }) {
        return EXIT_USAGE;
    }
    match error.class() {
        ErrorClass::Integrity => EXIT_INTEGRITY,
        ErrorClass::NotFound => EXIT_NOT_FOUND,
        ErrorClass::BadInput | ErrorClass::Limit => EXIT_USAGE,
        ErrorClass::Conflict | ErrorClass::Refused | ErrorClass::Io => EXIT_FAILURE,
    }
}

/// Writes a line on stderr; a closed or full stderr is ignored, as
/// `eprintln!` would panic there and there is nowhere left to report.
pub fn stderr_line(text: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{text}");
}

/// Turns a malformed-input error from `sandlog-core` into a usage error.
pub fn usage(error: sandlog_runtime::core::CoreError) -> CliError {
    CliError::Usage {
        kind: error.kind(),
        message: error.to_string(),
    }
}

/// Reports a clap error: help and version go to stdout with 0; anything
/// else is a usage error (2), as JSON if `--json` was on the command line.
pub fn usage_error(error: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        error.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        let _ = error.print();
        return if error.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
            ExitCode::from(EXIT_USAGE)
        } else {
            ExitCode::from(EXIT_OK)
        };
    }
    // `args_os`: an argument that is not UTF-8 must not panic here.
    if std::env::args_os().any(|arg| arg == "--json") {
        let message = error.render().to_string();
        let message = message
            .lines()
            .next()
            .unwrap_or_default()
            .trim_start_matches("error: ")
            .to_owned();
        let document = serde_json::json!({"error": {"kind": "usage", "class": "bad_input", "message": message}});
        stderr_line(&document.to_string());
    } else {
        // A closed stderr is not worth a panic.
        let _ = error.print();
    }
    ExitCode::from(EXIT_USAGE)
}

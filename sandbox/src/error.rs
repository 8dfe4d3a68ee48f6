//! `SandboxError`: everything that stops the sandbox from running a guest.
//!
//! A guest that misbehaves (loops, allocates, floods its output, fills its
//! workspace, traps or exits non-zero) is *not* an error: that is an
//! [`Outcome`](super::Outcome) in an `Ok(RunReport)`. These variants are for
//! the embedder: a bad request, a module that is not a WASI command, a broken
//! host. Each says how to handle it.

use std::io;
use std::path::PathBuf;

/// A boxed error from wasmtime, kept as the `source` so the chain survives.
///
/// `wasmtime::Error` does not implement `std::error::Error` (like `anyhow`),
/// so it is converted into this box, which does.
pub type BoxedError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why the sandbox could not load a module or run a guest.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    /// The wasmtime engine could not be built (for example the pooling
    /// allocator could not reserve its virtual address space).
    ///
    /// Handle: fatal for this `Sandbox`; the host lacks resources or the
    /// configuration does not fit it. Not retryable as is.
    #[error("could not configure the wasmtime engine")]
    Engine {
        /// wasmtime's reason.
        #[source]
        source: BoxedError,
    },

    /// The epoch ticker thread (the wall-clock limit) could not be started.
    ///
    /// Handle: fatal for this `Sandbox`; the process is out of threads.
    #[error("could not start the epoch ticker thread")]
    Ticker {
        /// The OS error from spawning the thread.
        #[source]
        source: io::Error,
    },

    /// The module cache directory could not be created, or cannot be
    /// trusted (a user other than us or root owns it, or others may write
    /// to it).
    ///
    /// Handle: check the path's owner, permissions and free space, or
    /// choose another (`$SANDLOG_CACHE_DIR`). Loading still works when only
    /// *writing* an artifact fails (that is logged, not returned), so this
    /// means the directory itself is unusable.
    #[error("module cache directory {path} is unusable: {source}")]
    CacheDir {
        /// The cache directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },

    /// The `.wasm` file could not be read.
    ///
    /// Handle: the path is wrong or unreadable; for the built-in runtimes,
    /// run `scripts/fetch-runtimes.sh`.
    #[error("could not read wasm module {path}")]
    ReadModule {
        /// The module path given to `load`.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },

    /// The file is not a valid WebAssembly module for this engine (or
    /// uses a feature the engine does not enable).
    ///
    /// Handle: a caller error; report it to whoever supplied the module.
    #[error("could not compile wasm module {path}")]
    Compile {
        /// The module path given to `load`.
        path: PathBuf,
        /// wasmtime's reason (validation or compilation error).
        #[source]
        source: BoxedError,
    },

    /// The module imports something other than WASI preview 1 functions,
    /// which the sandbox deliberately does not provide.
    ///
    /// Handle: a caller error; only WASI preview 1 command modules run here.
    #[error("wasm module {path} needs imports the sandbox does not grant")]
    Link {
        /// The module path given to `load`.
        path: PathBuf,
        /// wasmtime's reason, naming the missing import.
        #[source]
        source: BoxedError,
    },

    /// The module has no `_start` export of type `() -> ()`, so it is not a
    /// WASI command (it may be a reactor or a library).
    ///
    /// Handle: a caller error; only command modules run here.
    #[error("wasm module {path} is not a WASI command (no `_start: () -> ()` export)")]
    NotACommand {
        /// The module path given to `load`.
        path: PathBuf,
    },

    /// A limit in the request is zero where that makes no sense, or above
    /// its hard maximum (`*_MAX` in [`limits`](super::limits)).
    ///
    /// Handle: a caller error; clamp the value or reject the request.
    #[error("invalid limit {name} = {value}: must be within {min}..={max}")]
    InvalidLimit {
        /// The `ExecLimits` field name.
        name: &'static str,
        /// The rejected value (in the field's unit).
        value: u128,
        /// The smallest accepted value.
        min: u128,
        /// The largest accepted value.
        max: u128,
    },

    /// The request is malformed: a guest path that is not absolute, that
    /// collides with `/app` or another mount, or too many mounts or args.
    ///
    /// Handle: a caller error; fix the request.
    #[error("invalid run request: {reason}")]
    InvalidRequest {
        /// What is wrong, in words.
        reason: String,
    },

    /// The workspace directory or a read-only mount could not be opened.
    ///
    /// Handle: the directory is missing or unreadable; the Engine should
    /// create workspaces before running in them (and treat a missing one
    /// as drift).
    #[error("could not open host directory {host_path} for guest path {guest_path}")]
    Preopen {
        /// The host directory.
        host_path: PathBuf,
        /// Where the guest would have seen it.
        guest_path: String,
        /// wasmtime-wasi's reason.
        #[source]
        source: BoxedError,
    },

    /// The workspace could not be measured for the quota check after the
    /// run.
    ///
    /// Handle: an I/O problem on the host's disk; the run's other results
    /// are lost with it, so retry or investigate the disk.
    #[error("could not measure workspace {path}")]
    Measure {
        /// The workspace directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },

    /// The module was loaded by a different `Sandbox` (another engine).
    ///
    /// Handle: a programming error in the embedder; load modules through
    /// the `Sandbox` that runs them.
    #[error("module was loaded by a different Sandbox")]
    ForeignModule,

    /// The guest could not be instantiated for a reason other than its
    /// memory limit: most often every pooling-allocator slot is in use
    /// (more than `CONCURRENT_RUNS_MAX` runs at once).
    ///
    /// Handle: retry later, or bound concurrent runs below
    /// `CONCURRENT_RUNS_MAX`.
    #[error("could not instantiate the guest")]
    Instantiate {
        /// wasmtime's reason.
        #[source]
        source: BoxedError,
    },

    /// A warm kernel (a guest kept alive between executions) did not get
    /// ready: its driver ended, or did not ask for its first frame within
    /// its limits.
    ///
    /// Handle: the execution runs cold instead; the reason says what the
    /// guest did.
    #[error("the kernel did not start: {reason}")]
    KernelStart {
        /// What happened.
        reason: String,
    },
}

impl SandboxError {
    /// The class of the failure: a request the sandbox refuses is bad
    /// input; anything else is the machinery failing.
    pub fn class(&self) -> sandlog_core::ErrorClass {
        match self {
            SandboxError::InvalidLimit { .. }
            | SandboxError::InvalidRequest { .. }
            | SandboxError::NotACommand { .. }
            | SandboxError::ForeignModule => sandlog_core::ErrorClass::BadInput,
            _ => sandlog_core::ErrorClass::Io,
        }
    }

    /// A stable, machine-readable name for this error's kind (used in the
    /// CLI's `{"error":{"kind":…}}`).
    pub fn kind(&self) -> &'static str {
        match self {
            SandboxError::Engine { .. } => "engine",
            SandboxError::Ticker { .. } => "ticker",
            SandboxError::CacheDir { .. } => "cache_dir",
            SandboxError::ReadModule { .. } => "read_module",
            SandboxError::Compile { .. } => "compile",
            SandboxError::Link { .. } => "link",
            SandboxError::NotACommand { .. } => "not_a_command",
            SandboxError::InvalidLimit { .. } => "invalid_limit",
            SandboxError::InvalidRequest { .. } => "invalid_request",
            SandboxError::Preopen { .. } => "preopen",
            SandboxError::Measure { .. } => "measure",
            SandboxError::ForeignModule => "foreign_module",
            SandboxError::Instantiate { .. } => "instantiate",
            SandboxError::KernelStart { .. } => "kernel_start",
        }
    }
}

/// Converts a `wasmtime::Error` into the boxed `source` our variants carry.
pub(crate) fn boxed(error: wasmtime::Error) -> BoxedError {
    error.into()
}

/// A wasmtime error of the host's own setup, as a [`SandboxError`].
pub(crate) fn engine_error(error: wasmtime::Error) -> SandboxError {
    SandboxError::Engine {
        source: boxed(error),
    }
}

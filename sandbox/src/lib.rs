//! The wasmtime/WASI sandbox: runs one WASI preview 1 command module in one
//! workspace, under hard limits, and reports how it ended.
//!
//! Owns: the wasmtime engine and its configuration, the precompiled-module
//! cache, the guest's capabilities, and limit enforcement.
//! Never does: touch the event log, decide what a session is, or interpret
//! the workspace's contents (the Engine compares workspaces and records
//! events; this module only runs code and measures the quota).
//!
//! # Use
//!
//! ```no_run
//! use sandlog_sandbox::{Outcome, RunRequest, Sandbox};
//! # fn main() -> Result<(), sandlog_sandbox::SandboxError> {
//! let sandbox = Sandbox::new("/var/lib/sandlog/cache".as_ref())?;
//! let python = sandbox.load(".runtimes/python.wasm".as_ref())?;
//! let mut request = RunRequest::new("/var/lib/sandlog/workspaces/s1".as_ref());
//! request.args = sandlog_sandbox::python_args("print(1)");
//! let report = sandbox.run(&python, request)?;
//! assert_eq!(report.outcome, Outcome::Ok);
//! # Ok(()) }
//! ```
//!
//! # Layout
//!
//! * `lib.rs`: [`Sandbox`] (engine, linker, caches, ticker) and
//!   [`LoadedModule`].
//! * `limits.rs`: every limit constant, [`ExecLimits`], the memory limiter.
//! * `request.rs`: [`RunRequest`], [`ReadonlyMount`], [`RunReport`].
//! * `store.rs`: the run's host state in its `Store`, and the limits it
//!   enforces (fuel, deadline, quota checks).
//! * `run.rs`: one run and the [`Outcome`] classification (`ending.rs`).
//! * `kernel.rs`: a [`Kernel`], one guest kept alive on its own thread and
//!   fed code frames through fd 0, each under its own limits
//!   (`kernel_io.rs`: its fd 0 and the frames and reports it passes).
//! * `wasi.rs`: the guest's WASI context (`/app`, mounts, stdio, env).
//! * `output.rs`: capped stdout/stderr capture.
//! * `poll.rs`: the sleep guard that keeps `poll_oneoff` within the timeout
//!   (`clock.rs`: the guest's monotonic clock).
//! * `quota.rs`: workspace size measurement.
//! * `cache.rs`: verified precompiled artifacts on disk.
//! * `ticker.rs`: the epoch ticker thread.
//! * `runtimes.rs`: argument conventions of the built-in runtimes.
//! * `tree.rs`: walks and removals of directory trees by descriptor (the
//!   quota here; the host's scans and removals).
//!
//! # Invariants
//!
//! * The guest sees `/app` (its workspace, read-write), the request's
//!   read-only mounts, and nothing else of the host: no env it was not given,
//!   no host stdio, no sockets.
//! * Every limit hit is an [`Outcome`] in an `Ok(RunReport)`; `Err` means the
//!   request or the host is wrong, never that the guest misbehaved.
//! * A precompiled artifact is deserialised only after its blake3 matched
//!   the checksum we wrote beside it.
//! * The hash recorded for a run names the code that ran: a module file's
//!   hash is remembered (across processes) only under its full stat stamp,
//!   and bytes compiled for a key must hash to that key.

mod cache;
mod clock;
mod ending;
mod error;
mod kernel;
mod kernel_io;
pub mod limits;
mod module_hashes;
mod output;
mod poll;
mod quota;
mod request;
mod run;
mod runtimes;
mod signals;
mod store;
mod ticker;
pub mod tree;
mod wasi;

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Instant, SystemTime};

use wasmtime::{
    Config, Engine, ExternType, InstanceAllocationStrategy, InstancePre, Linker, Module, OptLevel,
    PoolingAllocationConfig,
};

pub use self::cache::{CacheStats, CompileEvent, CompileObserver, ModuleOrigin, WASMTIME_VERSION};
pub use self::error::{BoxedError, SandboxError};
pub use self::kernel::{KERNEL_REPORT_GRACE, Kernel, KernelRun, STATUS_PREFIX};
pub use self::limits::ExecLimits;
pub use self::request::{Outcome, ReadonlyMount, RunReport, RunRequest};
pub use self::runtimes::{javascript_args, python_args};
pub use self::signals::{CancelFlag, OutputSink, OutputStream, RunSignals};
pub use self::wasi::WORKSPACE_GUEST_PATH;
pub use self::wasi::validate_request;

use self::cache::{ArtifactDir, LoadFailure};
use self::error::boxed;
use self::limits::{CONCURRENT_RUNS_MAX, INSTANCES_PER_RUN, MEMORY_BYTES_MAX, TABLE_ELEMENTS_MAX};
use self::module_hashes::{FileStamp, ModuleHashes};
use self::poll::{INNER_MODULE, POLL_ONEOFF, WASI_MODULE};
use self::store::Host;
use self::ticker::{EpochTicker, Overdue};

/// Runs WASI command modules under limits. Cheap to clone (all clones share
/// one engine, cache and ticker); `Send + Sync`, so runs in different
/// workspaces may proceed from many threads at once.
#[derive(Clone)]
pub struct Sandbox {
    inner: Arc<SandboxInner>,
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Sandbox")
            .field("artifact_dir", &self.inner.artifacts.path())
            .finish_non_exhaustive()
    }
}

/// What all clones of a `Sandbox` share.
pub(crate) struct SandboxInner {
    /// Configured once: fuel, epochs, pooling. Every module and store
    /// belongs to it.
    pub(crate) engine: Engine,
    /// WASI preview 1 plus the sleep guard; modules are pre-linked against
    /// it once, at load.
    pub(crate) linker: Linker<Host>,
    /// The sleep guard's trampoline (see `poll.rs`), compiled once.
    pub(crate) trampoline: Module,
    /// The cache directory given to `new`.
    cache_dir: PathBuf,
    artifacts: ArtifactDir,
    /// Which content a module file had when last seen (in this process or,
    /// through the cache directory, an earlier one), so a `load` of an
    /// unchanged file needs neither a read nor a hash.
    module_hashes: ModuleHashes,
    /// Loaded modules by content. Each slot has its own lock so two threads
    /// loading the same module compile it once, while different modules
    /// load in parallel.
    modules: Mutex<HashMap<blake3::Hash, Arc<Mutex<Option<LoadedModule>>>>>,
    /// Told before and after a module is compiled.
    observer: Option<CompileObserver>,
    /// The linker and trampoline of warm kernels (`kernel.rs`), made on
    /// the first kernel start so one-shot runs never pay for them.
    kernel: OnceLock<Result<(Linker<Host>, Module), String>>,
    /// Kernel pre-instantiations by module content.
    kernel_pres: Mutex<HashMap<blake3::Hash, InstancePre<Host>>>,
    /// Runs that may be blocked in a host call past their deadline.
    pub(crate) overdue: Arc<Overdue>,
    /// Advances the epoch; dropped (and joined) with the last clone.
    _ticker: EpochTicker,
}

impl SandboxInner {
    /// The kernel linker (WASI with `poll_oneoff`, `fd_read` and `fd_write`
    /// guarded) and the kernel trampoline.
    pub(crate) fn kernel_parts(&self) -> Result<(&Linker<Host>, &Module), SandboxError> {
        let parts = self.kernel.get_or_init(|| {
            let linker = build_kernel_linker(&self.engine).map_err(|error| format!("{error:#}"))?;
            let trampoline = Module::from_binary(&self.engine, kernel::KERNEL_TRAMPOLINE_WASM)
                .map_err(|error| format!("{error:#}"))?;
            Ok((linker, trampoline))
        });
        match parts {
            Ok((linker, trampoline)) => Ok((linker, trampoline)),
            Err(reason) => Err(SandboxError::KernelStart {
                reason: format!("could not build the kernel linker: {reason}"),
            }),
        }
    }

    /// `module` pre-linked against the kernel linker (cached).
    pub(crate) fn kernel_instance_pre(
        &self,
        module: &LoadedModule,
    ) -> Result<InstancePre<Host>, SandboxError> {
        if let Some(pre) = lock(&self.kernel_pres).get(&module.blake3()) {
            return Ok(pre.clone());
        }
        let (linker, _) = self.kernel_parts()?;
        let pre = linker
            .instantiate_pre(module.instance_pre().module())
            .map_err(|error| SandboxError::Link {
                path: module.path().to_path_buf(),
                source: boxed(error),
            })?;
        lock(&self.kernel_pres).insert(module.blake3(), pre.clone());
        Ok(pre)
    }
}

/// A compiled, pre-linked module, ready to instantiate. Cheap to clone.
#[derive(Clone)]
pub struct LoadedModule {
    inner: Arc<LoadedModuleInner>,
}

struct LoadedModuleInner {
    instance_pre: InstancePre<Host>,
    blake3: blake3::Hash,
    origin: ModuleOrigin,
    path: PathBuf,
    argv0: String,
}

impl std::fmt::Debug for LoadedModule {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("LoadedModule")
            .field("path", &self.inner.path)
            .field("blake3", &self.inner.blake3.to_hex().as_str())
            .field("origin", &self.inner.origin)
            .finish_non_exhaustive()
    }
}

impl LoadedModule {
    /// blake3 of the module's `.wasm` bytes (what `session.executed`
    /// records as the runtime's hash).
    pub fn blake3(&self) -> blake3::Hash {
        self.inner.blake3
    }

    /// Whether this module was compiled or loaded from the cache when this
    /// `Sandbox` first loaded it.
    pub fn origin(&self) -> ModuleOrigin {
        self.inner.origin
    }

    /// The path it was first loaded from.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// `argv[0]` the guest sees: the module's file name.
    pub(crate) fn argv0(&self) -> &str {
        &self.inner.argv0
    }

    pub(crate) fn instance_pre(&self) -> &InstancePre<Host> {
        &self.inner.instance_pre
    }
}

impl Sandbox {
    /// Builds the engine (once), the WASI linker and the epoch ticker, and
    /// opens the precompiled-module cache under `cache_dir` (created if
    /// missing). Several sandboxes, in one process or many, may share one
    /// cache directory.
    ///
    /// # Errors
    ///
    /// [`SandboxError::Engine`], [`SandboxError::Ticker`] or
    /// [`SandboxError::CacheDir`] (also when the directory belongs to
    /// another user or others may write to it); all mean this host cannot
    /// run a sandbox as configured.
    pub fn new(cache_dir: &Path) -> Result<Self, SandboxError> {
        Sandbox::with_observer(cache_dir, None)
    }

    /// [`Sandbox::new`], telling `observer` before and after each module
    /// it has to compile (no usable precompiled artifact).
    ///
    /// # Errors
    ///
    /// As [`Sandbox::new`].
    pub fn with_observer(
        cache_dir: &Path,
        observer: Option<CompileObserver>,
    ) -> Result<Self, SandboxError> {
        let engine = Engine::new(&engine_config()).map_err(|error| SandboxError::Engine {
            source: boxed(error),
        })?;
        let linker = build_linker(&engine).map_err(|error| SandboxError::Engine {
            source: boxed(error),
        })?;
        let trampoline = Module::from_binary(&engine, poll::TRAMPOLINE_WASM).map_err(|error| {
            SandboxError::Engine {
                source: boxed(error),
            }
        })?;
        let artifacts =
            ArtifactDir::open(cache_dir, &engine).map_err(|source| SandboxError::CacheDir {
                path: cache_dir.to_path_buf(),
                source,
            })?;
        let overdue = Arc::new(Overdue::default());
        let ticker = EpochTicker::start(engine.clone(), Arc::clone(&overdue))
            .map_err(|source| SandboxError::Ticker { source })?;
        Ok(Sandbox {
            inner: Arc::new(SandboxInner {
                engine,
                linker,
                trampoline,
                cache_dir: cache_dir.to_path_buf(),
                artifacts,
                module_hashes: ModuleHashes::new(cache_dir),
                modules: Mutex::new(HashMap::new()),
                observer,
                kernel: OnceLock::new(),
                kernel_pres: Mutex::new(HashMap::new()),
                overdue,
                _ticker: ticker,
            }),
        })
    }

    /// Whether the module at `wasm_path` is compiled in this sandbox's
    /// cache (an artifact for its bytes is stored), without compiling it.
    ///
    /// # Errors
    ///
    /// [`SandboxError::ReadModule`] if it cannot be read.
    pub fn is_compiled(&self, wasm_path: &Path) -> Result<bool, SandboxError> {
        let read_error = |source| SandboxError::ReadModule {
            path: wasm_path.to_path_buf(),
            source,
        };
        let metadata = fs::metadata(wasm_path).map_err(read_error)?;
        let module_hash = match self
            .inner
            .module_hashes
            .get(wasm_path, &FileStamp::of(&metadata))
        {
            Some(hash) => hash,
            None => blake3::hash(&fs::read(wasm_path).map_err(read_error)?),
        };
        Ok(self.inner.artifacts.is_stored(&module_hash))
    }

    /// Loads the module at `wasm_path`: from memory if this `Sandbox` has
    /// loaded the same bytes before, else from a verified precompiled
    /// artifact in the cache, else by compiling it (and caching the
    /// artifact).
    ///
    /// # Errors
    ///
    /// [`SandboxError::ReadModule`], [`SandboxError::Compile`],
    /// [`SandboxError::Link`] (imports beyond WASI preview 1) or
    /// [`SandboxError::NotACommand`] (no `_start`).
    pub fn load(&self, wasm_path: &Path) -> Result<LoadedModule, SandboxError> {
        let read_error = |source| SandboxError::ReadModule {
            path: wasm_path.to_path_buf(),
            source,
        };
        let metadata = fs::metadata(wasm_path).map_err(read_error)?;
        let stamp = FileStamp::of(&metadata);
        let (module_hash, mut wasm_bytes) = match self.inner.module_hashes.get(wasm_path, &stamp) {
            Some(hash) => (hash, None),
            None => {
                let read_started = SystemTime::now();
                let bytes = fs::read(wasm_path).map_err(read_error)?;
                let hash = blake3::hash(&bytes);
                self.inner
                    .module_hashes
                    .remember(wasm_path, stamp, read_started, hash);
                (hash, Some(bytes))
            }
        };

        let slot = Arc::clone(lock(&self.inner.modules).entry(module_hash).or_default());
        let mut slot = lock(&slot);
        if let Some(module) = slot.as_ref() {
            return Ok(module.clone());
        }
        let mut compile_started = None;
        let mut started = || {
            compile_started = Some(Instant::now());
            if let Some(observer) = &self.inner.observer {
                observer.notify(CompileEvent::Started {
                    path: wasm_path,
                    wasm_bytes: metadata.len(),
                });
            }
        };
        let loaded = self.inner.artifacts.load_or_compile(
            &self.inner.engine,
            &module_hash,
            &mut started,
            || {
                match wasm_bytes.take() {
                    Some(bytes) => Ok(bytes),
                    // Hash known from an earlier load: re-read, and make sure
                    // the bytes are still the ones keyed, so an artifact is
                    // never stored under another module's hash.
                    None => {
                        let bytes = fs::read(wasm_path).map_err(LoadFailure::Read)?;
                        if blake3::hash(&bytes) == module_hash {
                            Ok(bytes)
                        } else {
                            self.inner.module_hashes.forget(wasm_path);
                            Err(LoadFailure::Read(io::Error::other(
                                "the module file changed while it was being loaded; retry",
                            )))
                        }
                    }
                }
            },
        );
        let (module, origin) = loaded.map_err(|failure| match failure {
            LoadFailure::Read(source) => read_error(source),
            LoadFailure::Compile(error) => SandboxError::Compile {
                path: wasm_path.to_path_buf(),
                source: boxed(error),
            },
        })?;
        if let (Some(started), Some(observer)) = (compile_started, &self.inner.observer) {
            observer.notify(CompileEvent::Finished {
                path: wasm_path,
                elapsed: started.elapsed(),
                origin,
            });
        }
        check_command_shape(&module, wasm_path)?;
        let instance_pre = self
            .inner
            .linker
            .instantiate_pre(&module)
            .map_err(|error| SandboxError::Link {
                path: wasm_path.to_path_buf(),
                source: boxed(error),
            })?;
        let argv0 = wasm_path
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_else(|| "main.wasm".to_owned());
        let loaded = LoadedModule {
            inner: Arc::new(LoadedModuleInner {
                instance_pre,
                blake3: module_hash,
                origin,
                path: wasm_path.to_path_buf(),
                argv0,
            }),
        };
        *slot = Some(loaded.clone());
        Ok(loaded)
    }

    /// How many modules this sandbox compiled and how many it loaded from
    /// the cache directory.
    pub fn cache_stats(&self) -> CacheStats {
        self.inner.artifacts.stats()
    }

    /// The cache directory given to [`Sandbox::new`].
    pub fn cache_dir(&self) -> &Path {
        &self.inner.cache_dir
    }

    /// The directory holding this engine's precompiled modules (under the
    /// cache directory, named after the wasmtime version and the engine's
    /// fingerprint).
    pub fn artifact_dir(&self) -> &Path {
        self.inner.artifacts.path()
    }

    /// Runs `module` once per `request` and reports how it ended. Blocks the
    /// calling thread for the run (at most the request's timeout plus the
    /// final quota walk). Call it from a thread with at least 2 MiB of
    /// stack (any std thread or `main`): wasm frames use the caller's stack.
    ///
    /// # Errors
    ///
    /// Only for bad requests and host failures: [`SandboxError::InvalidLimit`],
    /// [`SandboxError::InvalidRequest`], [`SandboxError::Preopen`] (missing
    /// workspace or mount), [`SandboxError::ForeignModule`],
    /// [`SandboxError::Instantiate`] (all `CONCURRENT_RUNS_MAX` slots busy),
    /// [`SandboxError::Measure`]. A guest hitting a limit is an `Ok` report.
    pub fn run(
        &self,
        module: &LoadedModule,
        request: RunRequest<'_>,
    ) -> Result<RunReport, SandboxError> {
        run::run(&self.inner, module, request)
    }

    /// Starts `module` as a warm kernel per `request` (whose args run the
    /// kernel driver) on a thread of its own, and waits until the guest
    /// first asks for a frame. The report is the start's (its fuel, time
    /// and output). The kernel holds a pool slot until dropped.
    ///
    /// # Errors
    ///
    /// As [`Sandbox::run`], and [`SandboxError::KernelStart`] if the guest
    /// ended or did not ask for a frame within the request's limits.
    pub fn start_kernel(
        &self,
        module: &LoadedModule,
        request: RunRequest<'_>,
    ) -> Result<(Kernel, RunReport), SandboxError> {
        Kernel::start(Arc::clone(&self.inner), module, request)
    }
}

/// Refuses, at load rather than at every run, modules the sandbox cannot run
/// safely: anything importing from a module other than WASI preview 1
/// (notably the sleep guard's inner `poll_oneoff`, which would bypass the
/// guard), without a `_start: () -> ()` export, with a memory the guard's
/// trampoline cannot import (64-bit or shared: not WASI preview 1 commands),
/// or needing more memories, tables or table elements than a pool slot has.
fn check_command_shape(module: &Module, wasm_path: &Path) -> Result<(), SandboxError> {
    let link_error = |message: String| SandboxError::Link {
        path: wasm_path.to_path_buf(),
        source: message.into(),
    };
    if let Some(import) = module
        .imports()
        .find(|import| import.module() != WASI_MODULE)
    {
        return Err(link_error(format!(
            "imports `{}::{}`; only `{WASI_MODULE}` functions are granted",
            import.module(),
            import.name()
        )));
    }
    let resources = module.resources_required();
    let fits_slot = resources.num_memories <= 1
        && resources.num_tables <= 1
        && resources
            .max_initial_table_size
            .is_none_or(|elements| elements <= TABLE_ELEMENTS_MAX as u64);
    if !fits_slot {
        return Err(link_error(format!(
            "needs {} memories and {} tables of up to {:?} elements; at most 1, 1 and \
             {TABLE_ELEMENTS_MAX} are supported",
            resources.num_memories, resources.num_tables, resources.max_initial_table_size
        )));
    }
    if let Some(ExternType::Memory(memory)) = module.get_export("memory")
        && (memory.is_64() || memory.is_shared())
    {
        return Err(link_error("exports a 64-bit or shared memory".to_owned()));
    }
    let is_command = matches!(
        module.get_export("_start"),
        Some(ExternType::Func(start)) if start.params().len() == 0 && start.results().len() == 0
    );
    if !is_command {
        return Err(SandboxError::NotACommand {
            path: wasm_path.to_path_buf(),
        });
    }
    Ok(())
}

/// Locks a mutex, recovering from poisoning: every critical section here
/// leaves the maps consistent (single inserts), so a panic elsewhere while
/// holding the lock does not make the data wrong.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The one engine configuration. Every setting that affects compiled code
/// is part of the cache fingerprint automatically.
fn engine_config() -> Config {
    let mut config = Config::new();
    // Deterministic CPU limit. Costs CPU-heavy guests 1.45–1.87× (measured),
    // the price of a limit that stops a guest at the same instruction
    // everywhere.
    config.consume_fuel(true);
    // Wall-clock limit; costs 1.20–1.35× (measured).
    config.epoch_interruption(true);
    config.cranelift_opt_level(OptLevel::Speed);
    // Pooling: instantiation reuses pre-reserved slots (no mmap/munmap per
    // run). Slots are sized for `MEMORY_BYTES_MAX`, so any memory limit a
    // request may ask for fits, and a guest asking for more is refused at
    // `memory.grow` (an outcome), never at instantiation.
    let mut pooling = PoolingAllocationConfig::new();
    pooling.total_core_instances(CONCURRENT_RUNS_MAX.saturating_mul(INSTANCES_PER_RUN as u32));
    pooling.total_memories(CONCURRENT_RUNS_MAX);
    pooling.total_tables(CONCURRENT_RUNS_MAX);
    pooling.max_memories_per_module(1);
    pooling.max_tables_per_module(1);
    pooling.max_memory_size(usize::try_from(MEMORY_BYTES_MAX).unwrap_or(usize::MAX));
    pooling.table_elements(TABLE_ELEMENTS_MAX);
    config.allocation_strategy(InstanceAllocationStrategy::Pooling(pooling));
    config
}

/// WASI preview 1, with `poll_oneoff` replaced by the sleep guard (the
/// original stays reachable under [`INNER_MODULE`] for the guard to call).
fn build_linker(engine: &Engine) -> wasmtime::Result<Linker<Host>> {
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p1::add_to_linker_sync(&mut linker, |host: &mut Host| &mut host.wasi)?;
    linker.alias(WASI_MODULE, POLL_ONEOFF, INNER_MODULE, POLL_ONEOFF)?;
    linker.allow_shadowing(true);
    linker.func_wrap(WASI_MODULE, POLL_ONEOFF, poll::guarded_poll_oneoff)?;
    linker.allow_shadowing(false);
    Ok(linker)
}

/// The linker of warm kernels: [`build_linker`]'s, with `fd_read` and
/// `fd_write` also guarded (fd 0 is the kernel's frame channel; the
/// originals stay reachable under [`INNER_MODULE`]).
fn build_kernel_linker(engine: &Engine) -> wasmtime::Result<Linker<Host>> {
    let mut linker = build_linker(engine)?;
    linker.alias(WASI_MODULE, kernel::FD_READ, INNER_MODULE, kernel::FD_READ)?;
    linker.alias(
        WASI_MODULE,
        kernel::FD_WRITE,
        INNER_MODULE,
        kernel::FD_WRITE,
    )?;
    linker.allow_shadowing(true);
    linker.func_wrap(WASI_MODULE, kernel::FD_READ, kernel::kernel_fd_read)?;
    linker.func_wrap(WASI_MODULE, kernel::FD_WRITE, kernel::kernel_fd_write)?;
    linker.allow_shadowing(false);
    Ok(linker)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: the sandbox can be shared across threads. Method: compile-time
    /// trait bounds.
    #[test]
    fn sandbox_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Sandbox>();
        assert_send_sync::<LoadedModule>();
    }
}

//! Precompiled modules on disk, so a module is compiled once per machine,
//! wasmtime version and engine configuration rather than once per process
//! or per root (python.wasm takes seconds to tens of seconds to compile,
//! milliseconds to load precompiled). By default one cache serves every
//! root of a user (see `layout::default_cache_dir`).
//!
//! Layout under the cache directory:
//!
//! ```text
//! <cache_dir>/wasmtime-<version>/engine-<fingerprint>/<module blake3>.cwasm         the artifact
//! <cache_dir>/wasmtime-<version>/engine-<fingerprint>/<module blake3>.cwasm.blake3  its blake3, hex
//! <cache_dir>/wasmtime-<version>/engine-<fingerprint>/<module blake3>.lock          held while compiling
//! ```
//!
//! * `version` is wasmtime's, so old entries are easy to find and remove.
//!   `fingerprint` = blake3 of wasmtime's precompile-compatibility hash
//!   (target, ISA flags — the host CPU's detected features —, compiler
//!   flags, tunables, wasm features, wasmtime version) plus our
//!   [`ARTIFACT_FORMAT`]: a different wasmtime, engine configuration or CPU
//!   looks in a different directory, so it never even opens an incompatible
//!   artifact.
//! * The artifact is trusted only if the blake3 of its bytes, read through
//!   the same open file handle that is then mapped, equals the sidecar. A
//!   torn write, a truncated file, bit rot or a stray overwrite all fail this
//!   check, and the module is recompiled and the entry rewritten.
//! * The engine directory must belong to this user (or root) and be
//!   writable by no one else (it is created `0700`): precompiled code is
//!   mapped executable, so anyone able to write there could run code as us.
//!   A directory that fails this check is refused ([`ArtifactDir::open`]).
//! * Writes go to a unique temporary file, are `fsync`ed, then renamed over
//!   the final name, artifact first and sidecar second. A crash leaves at
//!   worst a temporary file (ignored) or an artifact whose sidecar is missing
//!   or stale (recompiled). The directory is not `fsync`ed: a lost rename only
//!   costs a recompile.
//! * Concurrent writers: a process about to compile takes the entry's lock
//!   file (an OS advisory lock, released by the kernel if the holder dies),
//!   then looks again, so processes starting together compile a module once
//!   and the others load the artifact. The lock only saves work: a process
//!   that cannot take it within [`COMPILE_WAIT_MAX`] compiles anyway, and
//!   concurrent writers of one entry race harmlessly (each rename installs
//!   a complete file; a mismatched pair is recompiled).

use std::fs::{self, DirBuilder, File, OpenOptions, TryLockError};
use std::hash::Hasher;
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use wasmtime::{Engine, Module};

use super::limits::{COMPILE_WAIT_MAX, COMPILE_WAIT_POLL};

/// Version of our on-disk layout; bump it to orphan every existing entry.
pub(crate) const ARTIFACT_FORMAT: &str = "sandlog-cwasm-v1";

/// The wasmtime version compiled in (wasmtime-environ is released in
/// lockstep with wasmtime, and both are pinned to the same version).
pub const WASMTIME_VERSION: &str = wasmtime_environ::VERSION;

/// File name suffix of an artifact.
const ARTIFACT_SUFFIX: &str = "cwasm";
/// File name suffix of an artifact's checksum sidecar.
const CHECKSUM_SUFFIX: &str = "cwasm.blake3";
/// File name suffix of an entry's compile lock.
const LOCK_SUFFIX: &str = "lock";

/// Mode of the directories this module creates: the owner's alone.
const PRIVATE_DIR_MODE: u32 = 0o700;

/// Read buffer for hashing an artifact.
const HASH_BUFFER_BYTES: usize = 256 * 1024;

/// Makes temporary file names unique within this process (the pid makes
/// them unique across processes).
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// The directory of one engine fingerprint.
#[derive(Debug)]
pub(crate) struct ArtifactDir {
    dir: PathBuf,
    /// Modules compiled (no usable artifact) since this was opened.
    compiled: AtomicU64,
    /// Modules loaded from a verified artifact since this was opened.
    loaded: AtomicU64,
}

/// Where a module came from when it was loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ModuleOrigin {
    /// Compiled from the `.wasm` (no valid precompiled artifact existed).
    Compiled,
    /// Loaded from a verified precompiled artifact in the cache directory
    /// (possibly one another process compiled while this one waited).
    CachedArtifact,
}

/// How often a `Sandbox` compiled a module and how often it loaded one from
/// the cache directory (modules it already had in memory count neither).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Modules compiled, for lack of a usable artifact.
    pub compiled: u64,
    /// Modules loaded from a verified artifact.
    pub loaded: u64,
}

/// What a [`CompileObserver`] is told.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum CompileEvent<'a> {
    /// No usable precompiled artifact: the module is about to be compiled
    /// (by this process, or by another one this process waits for).
    Started {
        /// The `.wasm` file.
        path: &'a Path,
        /// Its size.
        wasm_bytes: u64,
    },
    /// The module announced by `Started` is ready.
    Finished {
        /// The `.wasm` file.
        path: &'a Path,
        /// Since `Started`.
        elapsed: Duration,
        /// `Compiled` by this process, or `CachedArtifact` if another
        /// process compiled it meanwhile.
        origin: ModuleOrigin,
    },
}

/// Called before and after a module is compiled, so a front end can say
/// why the first run takes seconds. Called on the loading thread. Cheap to
/// clone.
#[derive(Clone)]
pub struct CompileObserver(std::sync::Arc<dyn Fn(CompileEvent<'_>) + Send + Sync>);

impl CompileObserver {
    /// Wraps `observer`.
    pub fn new(observer: impl Fn(CompileEvent<'_>) + Send + Sync + 'static) -> Self {
        CompileObserver(std::sync::Arc::new(observer))
    }

    /// Tells the observer.
    pub(crate) fn notify(&self, event: CompileEvent<'_>) {
        (self.0)(event);
    }
}

impl std::fmt::Debug for CompileObserver {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("CompileObserver(..)")
    }
}

impl ArtifactDir {
    /// Opens (creating if needed, mode `0700`)
    /// `<cache_dir>/wasmtime-<version>/engine-<fingerprint>`.
    ///
    /// # Errors
    ///
    /// The I/O error if the directory cannot be created, or if it belongs
    /// to another user or others may write to it (then its artifacts cannot
    /// be trusted).
    pub(crate) fn open(cache_dir: &Path, engine: &Engine) -> io::Result<Self> {
        let dir = cache_dir
            .join(format!("wasmtime-{WASMTIME_VERSION}"))
            .join(format!("engine-{}", engine_fingerprint(engine)));
        create_private_dir(&dir)?;
        check_private(&dir)?;
        Ok(ArtifactDir {
            dir,
            compiled: AtomicU64::new(0),
            loaded: AtomicU64::new(0),
        })
    }

    /// The directory holding this engine's artifacts.
    pub(crate) fn path(&self) -> &Path {
        &self.dir
    }

    /// Compiles and loads counted so far.
    pub(crate) fn stats(&self) -> CacheStats {
        CacheStats {
            compiled: self.compiled.load(Ordering::Relaxed),
            loaded: self.loaded.load(Ordering::Relaxed),
        }
    }

    /// Whether an artifact of the module with blake3 `module_hash` is
    /// stored, with its checksum beside it (it is still checked when
    /// loaded).
    pub(crate) fn is_stored(&self, module_hash: &blake3::Hash) -> bool {
        self.artifact_path(module_hash).is_file() && self.checksum_path(module_hash).is_file()
    }

    fn artifact_path(&self, module_hash: &blake3::Hash) -> PathBuf {
        self.dir
            .join(format!("{}.{ARTIFACT_SUFFIX}", module_hash.to_hex()))
    }

    fn checksum_path(&self, module_hash: &blake3::Hash) -> PathBuf {
        self.dir
            .join(format!("{}.{CHECKSUM_SUFFIX}", module_hash.to_hex()))
    }

    fn lock_path(&self, module_hash: &blake3::Hash) -> PathBuf {
        self.dir
            .join(format!("{}.{LOCK_SUFFIX}", module_hash.to_hex()))
    }

    /// Loads the module with blake3 `module_hash` from a verified artifact,
    /// or compiles `wasm` and stores the artifact. `wasm` is only called if
    /// compiling is needed; `started` is called once, just before waiting
    /// for another process's compile or starting one.
    ///
    /// # Errors
    ///
    /// The compile error if the bytes are not a valid module, or the read
    /// error from `wasm`. Cache read and write failures are never errors:
    /// they are logged and the module is compiled instead.
    pub(crate) fn load_or_compile(
        &self,
        engine: &Engine,
        module_hash: &blake3::Hash,
        started: &mut dyn FnMut(),
        wasm: impl FnOnce() -> Result<Vec<u8>, LoadFailure>,
    ) -> Result<(Module, ModuleOrigin), LoadFailure> {
        if let Some(module) = self.load_logged(engine, module_hash) {
            self.loaded.fetch_add(1, Ordering::Relaxed);
            return Ok((module, ModuleOrigin::CachedArtifact));
        }
        started();
        // Held until the artifact is stored; another process that found no
        // artifact either waits here, then loads what this one stored.
        let lock = self.lock_entry(module_hash);
        // An entry rejected above was logged there; one that is still
        // unusable after the wait is simply overwritten.
        if lock.is_some()
            && let Ok(Some(module)) = self.load_verified(engine, module_hash)
        {
            self.loaded.fetch_add(1, Ordering::Relaxed);
            return Ok((module, ModuleOrigin::CachedArtifact));
        }
        let bytes = wasm()?;
        let module = Module::from_binary(engine, &bytes).map_err(LoadFailure::Compile)?;
        self.compiled.fetch_add(1, Ordering::Relaxed);
        if let Err(error) = self.store(module_hash, &module) {
            tracing::warn!(
                dir = %self.dir.display(),
                %error,
                "could not write precompiled module; it will be recompiled next time"
            );
        }
        drop(lock);
        Ok((module, ModuleOrigin::Compiled))
    }

    /// The verified module, or `None` (logging why an entry was rejected).
    fn load_logged(&self, engine: &Engine, module_hash: &blake3::Hash) -> Option<Module> {
        match self.load_verified(engine, module_hash) {
            Ok(found) => found,
            Err(reason) => {
                tracing::warn!(
                    artifact = %self.artifact_path(module_hash).display(),
                    %reason,
                    "precompiled module rejected; recompiling"
                );
                None
            }
        }
    }

    /// Takes the entry's compile lock, waiting up to [`COMPILE_WAIT_MAX`]
    /// for another process compiling it. `None` if the lock could not be
    /// had (the caller compiles regardless).
    fn lock_entry(&self, module_hash: &blake3::Hash) -> Option<File> {
        let path = self.lock_path(module_hash);
        let file = match OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
        {
            Ok(file) => file,
            Err(error) => {
                tracing::debug!(lock = %path.display(), %error, "no compile lock; compiling without");
                return None;
            }
        };
        let deadline = Instant::now() + COMPILE_WAIT_MAX;
        loop {
            match file.try_lock() {
                Ok(()) => return Some(file),
                Err(TryLockError::WouldBlock) if Instant::now() < deadline => {
                    std::thread::sleep(COMPILE_WAIT_POLL);
                }
                Err(TryLockError::WouldBlock) => {
                    tracing::warn!(
                        lock = %path.display(),
                        waited_s = COMPILE_WAIT_MAX.as_secs(),
                        "another process has been compiling this module for too long; compiling here too"
                    );
                    return None;
                }
                Err(TryLockError::Error(error)) => {
                    tracing::debug!(lock = %path.display(), %error, "compile lock failed; compiling without");
                    return None;
                }
            }
        }
    }

    /// `Ok(None)` if there is no entry; `Err(reason)` if there is one that
    /// must not be trusted.
    fn load_verified(
        &self,
        engine: &Engine,
        module_hash: &blake3::Hash,
    ) -> Result<Option<Module>, String> {
        let mut artifact = match File::open(self.artifact_path(module_hash)) {
            Ok(file) => file,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(format!("cannot open artifact: {error}")),
        };
        let expected = match fs::read_to_string(self.checksum_path(module_hash)) {
            Ok(text) => blake3::Hash::from_hex(text.trim())
                .map_err(|error| format!("bad checksum file: {error}"))?,
            Err(error) => return Err(format!("no readable checksum beside the artifact: {error}")),
        };
        let actual =
            hash_reader(&mut artifact).map_err(|error| format!("cannot read artifact: {error}"))?;
        if actual != expected {
            return Err(format!(
                "artifact blake3 {actual} does not match its checksum {expected}"
            ));
        }
        // SAFETY: `deserialize_open_file` maps the file as executable code,
        // so it must be an artifact wasmtime produced for this engine, and
        // must not change while the module lives. Both hold:
        // * The file was written by `store` below, from `Module::serialize`,
        //   into a temporary file that was fsynced and then atomically
        //   renamed into place, in a directory named after this engine's
        //   precompile-compatibility fingerprint.
        // * We just hashed every byte of it through this very handle and the
        //   hash equals the checksum written beside it after the artifact,
        //   so a torn, truncated, stale or overwritten file is rejected
        //   above. The handle pins this inode: replacing the file by rename
        //   (the only way we write) does not affect it.
        // * wasmtime checks the artifact's own header (version, engine
        //   compatibility) and returns an error on mismatch.
        // What remains outside this proof is a hostile process with write
        // access to the cache directory modifying the file in place; the
        // cache directory must be as trusted as the sandlog binary itself.
        #[expect(
            unsafe_code,
            reason = "deserialising a verified artifact; see the SAFETY comment"
        )]
        let module = unsafe { Module::deserialize_open_file(engine, artifact) };
        module
            .map(Some)
            .map_err(|error| format!("wasmtime rejected the artifact: {error:#}"))
    }

    /// Writes `module`'s artifact and checksum, each atomically.
    fn store(&self, module_hash: &blake3::Hash, module: &Module) -> io::Result<()> {
        let artifact = module.serialize().map_err(io::Error::other)?;
        let checksum = blake3::hash(&artifact);
        write_atomically(&self.artifact_path(module_hash), &artifact)?;
        write_atomically(
            &self.checksum_path(module_hash),
            checksum.to_hex().as_bytes(),
        )?;
        Ok(())
    }
}

/// Why a module could not be produced (mapped to `SandboxError` by the
/// caller, which knows the module's path).
#[derive(Debug)]
pub(crate) enum LoadFailure {
    /// Reading the `.wasm` failed.
    Read(io::Error),
    /// wasmtime could not compile it.
    Compile(wasmtime::Error),
}

/// Writes `bytes` to a unique temporary file beside `path`, fsyncs it, and
/// renames it over `path`.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let file_name = path.file_name().ok_or_else(|| {
        io::Error::new(io::ErrorKind::InvalidInput, "cache path has no file name")
    })?;
    let temp_path = path.with_file_name(format!(
        ".{}.tmp-{}-{}",
        file_name.to_string_lossy(),
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp_path)?;
        file.write_all(bytes)?;
        // The data must be on disk before the rename makes it visible under
        // the final name; otherwise a crash could leave a renamed but empty
        // file. (The checksum would catch it, but at the cost of a compile.)
        file.sync_all()?;
        fs::rename(&temp_path, path)
    })();
    if result.is_err() {
        // Best effort: a leftover temporary file is only clutter.
        let _ = fs::remove_file(&temp_path);
    }
    result
}

/// Creates `dir` and any missing parents with mode `0700` (less the umask).
pub(crate) fn create_private_dir(dir: &Path) -> io::Result<()> {
    DirBuilder::new()
        .recursive(true)
        .mode(PRIVATE_DIR_MODE)
        .create(dir)
}

/// Refuses a directory that another user owns or that group or others may
/// write to: whoever can write there chooses the code we map executable.
/// One owned by root is accepted (root can change our files anyway), so a
/// cache prepared read-only for every user, as in a container image, works.
fn check_private(dir: &Path) -> io::Result<()> {
    let metadata = fs::metadata(dir)?;
    let owner = metadata.uid();
    let me = effective_uid();
    let mode = metadata.permissions().mode() & 0o777;
    if owner != me && owner != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} belongs to uid {owner}, neither this user (uid {me}) nor root; its \
                 precompiled code cannot be trusted: use a cache directory of your own \
                 ($SANDLOG_CACHE_DIR)",
                dir.display()
            ),
        ));
    }
    if mode & 0o022 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} has mode {mode:03o}: other users may write precompiled code there; \
                 `chmod 700` it or remove it",
                dir.display()
            ),
        ));
    }
    Ok(())
}

/// This process's effective user id.
fn effective_uid() -> u32 {
    // SAFETY: geteuid takes no arguments, touches no memory of ours and
    // cannot fail (POSIX).
    #[expect(unsafe_code, reason = "geteuid has no preconditions")]
    unsafe {
        libc::geteuid()
    }
}

/// blake3 of everything `reader` yields.
fn hash_reader(reader: &mut impl Read) -> io::Result<blake3::Hash> {
    let mut hasher = blake3::Hasher::new();
    let mut buffer = vec![0u8; HASH_BUFFER_BYTES];
    loop {
        let n_read = match reader.read(&mut buffer) {
            Ok(0) => return Ok(hasher.finalize()),
            Ok(n_read) => n_read,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(error),
        };
        hasher.update(buffer.get(..n_read).unwrap_or_default());
    }
}

/// A short, stable name for everything that makes a precompiled artifact
/// (in)compatible with `engine`.
pub(crate) fn engine_fingerprint(engine: &Engine) -> String {
    let mut hasher = Blake3StdHasher(blake3::Hasher::new());
    hasher.0.update(ARTIFACT_FORMAT.as_bytes());
    std::hash::Hash::hash(&engine.precompile_compatibility_hash(), &mut hasher);
    let hex = hasher.0.finalize().to_hex();
    // 16 hex digits (64 bits) is plenty to tell configurations apart.
    hex.as_str().chars().take(16).collect()
}

/// Feeds `std::hash::Hash` output into blake3, so the fingerprint is a
/// stable digest rather than `DefaultHasher`'s unspecified, per-release one.
struct Blake3StdHasher(blake3::Hasher);

impl Hasher for Blake3StdHasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    fn finish(&self) -> u64 {
        let digest = self.0.finalize();
        let [b0, b1, b2, b3, b4, b5, b6, b7, ..] = *digest.as_bytes();
        u64::from_le_bytes([b0, b1, b2, b3, b4, b5, b6, b7])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: the fingerprint is stable for one configuration and differs
    /// when a compile-relevant setting changes. Method: two engines with the
    /// same config, one with fuel off.
    #[test]
    fn fingerprint_tracks_engine_config() {
        let mut config = wasmtime::Config::new();
        config.consume_fuel(true);
        let first = Engine::new(&config).unwrap();
        let second = Engine::new(&config).unwrap();
        config.consume_fuel(false);
        let other = Engine::new(&config).unwrap();
        assert_eq!(engine_fingerprint(&first), engine_fingerprint(&second));
        assert_ne!(engine_fingerprint(&first), engine_fingerprint(&other));
        assert_eq!(engine_fingerprint(&first).len(), 16);
    }

    /// Goal: an artifact compiled for one CPU is never looked up on a CPU
    /// with other features. Method: the default engine (host features
    /// detected) against one with a feature this host has switched off, as
    /// a machine without it would detect.
    #[test]
    fn fingerprint_tracks_host_cpu_features() {
        let flag = host_cpu_flag();
        let host = Engine::new(&wasmtime::Config::new()).unwrap();
        let mut config = wasmtime::Config::new();
        // SAFETY: switching a CPU feature *off* only makes Cranelift emit
        // code for an older CPU, which this host runs.
        #[expect(unsafe_code, reason = "cranelift_flag_set is unsafe in wasmtime")]
        unsafe {
            config.cranelift_flag_set(flag, "false");
        }
        let older = Engine::new(&config).unwrap();
        assert_ne!(
            engine_fingerprint(&host),
            engine_fingerprint(&older),
            "{flag} off did not change the fingerprint"
        );
    }

    /// A Cranelift ISA flag naming a feature this CPU has (every x86-64 CPU
    /// of the last 15 years has SSE3; every AArch64 CPU Cranelift targets
    /// has at least one of these).
    fn host_cpu_flag() -> &'static str {
        #[cfg(target_arch = "x86_64")]
        {
            let candidates = [
                ("has_avx2", std::arch::is_x86_feature_detected!("avx2")),
                ("has_sse42", std::arch::is_x86_feature_detected!("sse4.2")),
                ("has_sse3", std::arch::is_x86_feature_detected!("sse3")),
            ];
            candidates
                .iter()
                .find(|(_, detected)| *detected)
                .map(|(flag, _)| *flag)
                .expect("no SSE3: this CPU is older than Cranelift supports")
        }
        #[cfg(target_arch = "aarch64")]
        {
            let candidates = [
                ("has_lse", std::arch::is_aarch64_feature_detected!("lse")),
                ("has_fp16", std::arch::is_aarch64_feature_detected!("fp16")),
            ];
            candidates
                .iter()
                .find(|(_, detected)| *detected)
                .map(|(flag, _)| *flag)
                .expect("neither LSE nor FP16 detected: name a feature this CPU has")
        }
    }

    /// Goal: a corrupt, truncated or unchecksummed artifact is recompiled,
    /// never trusted. Method: compile a tiny module, damage the entry in
    /// three ways, load again each time.
    #[test]
    fn cache_rejects_damaged_artifacts() {
        let engine = Engine::default();
        let dir = tempfile::tempdir().unwrap();
        let cache = ArtifactDir::open(dir.path(), &engine).unwrap();
        let wasm = wat_module();
        let hash = blake3::hash(&wasm);
        let load = || {
            cache
                .load_or_compile(&engine, &hash, &mut || {}, || Ok(wasm.clone()))
                .unwrap()
                .1
        };

        assert_eq!(load(), ModuleOrigin::Compiled);
        assert_eq!(load(), ModuleOrigin::CachedArtifact);

        fs::write(cache.artifact_path(&hash), b"garbage").unwrap();
        assert_eq!(load(), ModuleOrigin::Compiled);
        assert_eq!(load(), ModuleOrigin::CachedArtifact);

        let artifact = fs::read(cache.artifact_path(&hash)).unwrap();
        fs::write(cache.artifact_path(&hash), &artifact[..artifact.len() / 2]).unwrap();
        assert_eq!(load(), ModuleOrigin::Compiled);

        fs::remove_file(cache.checksum_path(&hash)).unwrap();
        assert_eq!(load(), ModuleOrigin::Compiled);
        assert_eq!(load(), ModuleOrigin::CachedArtifact);
    }

    /// Goal: the counters say what happened. Method: one compile, then two
    /// loads through a second `ArtifactDir` on the same directory.
    #[test]
    fn stats_count_compiles_and_loads() {
        let engine = Engine::default();
        let dir = tempfile::tempdir().unwrap();
        let wasm = wat_module();
        let hash = blake3::hash(&wasm);
        let first = ArtifactDir::open(dir.path(), &engine).unwrap();
        let mut announced = 0;
        first
            .load_or_compile(&engine, &hash, &mut || announced += 1, || Ok(wasm.clone()))
            .unwrap();
        assert_eq!(announced, 1);
        assert_eq!(
            first.stats(),
            CacheStats {
                compiled: 1,
                loaded: 0
            }
        );
        let second = ArtifactDir::open(dir.path(), &engine).unwrap();
        for _ in 0..2 {
            second
                .load_or_compile(&engine, &hash, &mut || announced += 1, || {
                    panic!("a cached module must not be read")
                })
                .unwrap();
        }
        assert_eq!(announced, 1);
        assert_eq!(
            second.stats(),
            CacheStats {
                compiled: 0,
                loaded: 2
            }
        );
    }

    /// Goal: a cache directory others can write to is refused, since
    /// whoever writes there picks the code we run. Method: make the engine
    /// directory group- and world-writable, open again.
    #[test]
    fn a_directory_others_may_write_is_refused() {
        let engine = Engine::default();
        let dir = tempfile::tempdir().unwrap();
        let cache = ArtifactDir::open(dir.path(), &engine).unwrap();
        let mode = fs::metadata(cache.path()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode & 0o077, 0, "created with mode {mode:o}");
        fs::set_permissions(cache.path(), fs::Permissions::from_mode(0o777)).unwrap();
        let error = ArtifactDir::open(dir.path(), &engine).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::PermissionDenied);
        assert!(error.to_string().contains("chmod 700"), "{error}");
    }

    /// The smallest WASI-free module: `(module)` in binary form.
    fn wat_module() -> Vec<u8> {
        b"\0asm\x01\0\0\0".to_vec()
    }
}

//! Precompiled modules on disk, so a module is compiled once per engine
//! configuration rather than once per process (python.wasm takes seconds to
//! tens of seconds to compile, milliseconds to load precompiled).
//!
//! Layout under the cache directory:
//!
//! ```text
//! <cache_dir>/engine-<fingerprint>/<module blake3>.cwasm         the artifact
//! <cache_dir>/engine-<fingerprint>/<module blake3>.cwasm.blake3  its blake3, hex
//! ```
//!
//! * `fingerprint` = blake3 of wasmtime's precompile-compatibility hash
//!   (target, ISA flags, compiler flags, tunables, wasm features, wasmtime
//!   version) plus our [`ARTIFACT_FORMAT`]: a different wasmtime or engine
//!   configuration looks in a different directory, so it never even opens an
//!   incompatible artifact.
//! * The artifact is trusted only if the blake3 of its bytes, read through
//!   the same open file handle that is then mapped, equals the sidecar. A
//!   torn write, a truncated file, bit rot or a stray overwrite all fail this
//!   check, and the module is recompiled and the entry rewritten.
//! * Writes go to a unique temporary file, are `fsync`ed, then renamed over
//!   the final name, artifact first and sidecar second. A crash leaves at
//!   worst a temporary file (ignored) or an artifact whose sidecar is missing
//!   or stale (recompiled). The directory is not `fsync`ed: a lost rename only
//!   costs a recompile. Concurrent writers of the same entry race harmlessly:
//!   each rename installs a complete pair, and a mismatched pair is
//!   recompiled.

use std::fs::{self, File, OpenOptions};
use std::hash::Hasher;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use wasmtime::{Engine, Module};

/// Version of our on-disk layout; bump it to orphan every existing entry.
pub(crate) const ARTIFACT_FORMAT: &str = "sandlog-cwasm-v1";

/// File name suffix of an artifact.
const ARTIFACT_SUFFIX: &str = "cwasm";
/// File name suffix of an artifact's checksum sidecar.
const CHECKSUM_SUFFIX: &str = "cwasm.blake3";

/// Read buffer for hashing an artifact.
const HASH_BUFFER_BYTES: usize = 256 * 1024;

/// Makes temporary file names unique within this process (the pid makes
/// them unique across processes).
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// The directory of one engine fingerprint.
#[derive(Debug)]
pub(crate) struct ArtifactDir {
    dir: PathBuf,
}

/// Where a module came from when it was loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ModuleOrigin {
    /// Compiled from the `.wasm` (no valid precompiled artifact existed).
    Compiled,
    /// Loaded from a verified precompiled artifact in the cache directory.
    CachedArtifact,
}

impl ArtifactDir {
    /// Opens (creating if needed) `<cache_dir>/engine-<fingerprint>`.
    ///
    /// # Errors
    ///
    /// The I/O error if the directory cannot be created.
    pub(crate) fn open(cache_dir: &Path, engine: &Engine) -> io::Result<Self> {
        let dir = cache_dir.join(format!("engine-{}", engine_fingerprint(engine)));
        fs::create_dir_all(&dir)?;
        Ok(ArtifactDir { dir })
    }

    /// The directory holding this engine's artifacts.
    pub(crate) fn path(&self) -> &Path {
        &self.dir
    }

    fn artifact_path(&self, module_hash: &blake3::Hash) -> PathBuf {
        self.dir
            .join(format!("{}.{ARTIFACT_SUFFIX}", module_hash.to_hex()))
    }

    fn checksum_path(&self, module_hash: &blake3::Hash) -> PathBuf {
        self.dir
            .join(format!("{}.{CHECKSUM_SUFFIX}", module_hash.to_hex()))
    }

    /// Loads the module with blake3 `module_hash` from a verified artifact,
    /// or compiles `wasm` and stores the artifact. `wasm` is only called if
    /// compiling is needed.
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
        wasm: impl FnOnce() -> Result<Vec<u8>, LoadFailure>,
    ) -> Result<(Module, ModuleOrigin), LoadFailure> {
        match self.load_verified(engine, module_hash) {
            Ok(Some(module)) => return Ok((module, ModuleOrigin::CachedArtifact)),
            Ok(None) => {}
            Err(reason) => tracing::warn!(
                artifact = %self.artifact_path(module_hash).display(),
                %reason,
                "precompiled module rejected; recompiling"
            ),
        }
        let bytes = wasm()?;
        let module = Module::from_binary(engine, &bytes).map_err(LoadFailure::Compile)?;
        if let Err(error) = self.store(module_hash, &module) {
            tracing::warn!(
                dir = %self.dir.display(),
                %error,
                "could not write precompiled module; it will be recompiled next time"
            );
        }
        Ok((module, ModuleOrigin::Compiled))
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
                .load_or_compile(&engine, &hash, || Ok(wasm.clone()))
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

    /// The smallest WASI-free module: `(module)` in binary form.
    fn wat_module() -> Vec<u8> {
        b"\0asm\x01\0\0\0".to_vec()
    }
}

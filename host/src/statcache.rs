//! The stat cache of `session sync` (see `sandlog_runtime::native`): per session,
//! what each file's size, times and inode were when it was last hashed, so
//! an unchanged file is not read again. Kept under `<root>/scans/`; a file
//! that cannot be read back whole and checksummed is an empty cache (every
//! file is hashed again), never a wrong one. Below the lease, which removes
//! a finished session's cache with its lease file.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use sandlog_core::{Hash, SessionId, WorkspacePath};

use crate::workspace::Scanned;

/// Stat caches under the root, one file per session.
pub const SCANS_DIR: &str = "scans";

/// Largest stat cache read or written: past it the cache is not used
/// (every file is hashed), so a hostile or runaway cache costs at most
/// this much reading.
pub const STAT_CACHE_BYTES_MAX: u64 = 256 * 1024 * 1024;

/// The stat cache of `session_id` under `root`.
pub fn stat_cache_path(root: &Path, session_id: SessionId) -> PathBuf {
    root.join(SCANS_DIR).join(format!("{session_id}.bin"))
}

/// The stat cache format: this magic (which names the version), the entry
/// count (u64 LE), the entries, then blake3 of everything before it. An
/// entry: the path's text length (u32 LE) and bytes, size (u64 LE),
/// modification and change times (ns since the epoch, i64 LE), inode (u64
/// LE), blake3 (32 bytes).
const STAT_CACHE_MAGIC: &[u8; 16] = b"sandlog-scan-v1\n";

/// Per workspace path: its stat stamp and blake3 when last hashed.
pub type StatCache = BTreeMap<WorkspacePath, (Scanned, Hash)>;

/// The cache at `path`, or an empty one when it is missing, too large,
/// unreadable or corrupt (logged; never an error: it is only a cache).
pub fn read_stat_cache(path: &Path) -> StatCache {
    match try_read_stat_cache(path) {
        Ok(cache) => cache,
        Err(reason) => {
            if !reason.is_empty() {
                tracing::warn!(cache = %path.display(), %reason, "stat cache not used; hashing every file");
            }
            StatCache::new()
        }
    }
}

fn try_read_stat_cache(path: &Path) -> std::result::Result<StatCache, String> {
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Err(String::new()),
        Err(error) => return Err(error.to_string()),
    };
    let mut bytes = Vec::new();
    file.take(STAT_CACHE_BYTES_MAX + 1)
        .read_to_end(&mut bytes)
        .map_err(|error| error.to_string())?;
    if bytes.len() as u64 > STAT_CACHE_BYTES_MAX {
        return Err(format!(
            "larger than STAT_CACHE_BYTES_MAX = {STAT_CACHE_BYTES_MAX}"
        ));
    }
    let body_len = bytes
        .len()
        .checked_sub(32)
        .ok_or_else(|| "truncated".to_owned())?;
    let (body, checksum) = bytes.split_at(body_len);
    if blake3::hash(body).as_bytes() != checksum {
        return Err("its checksum does not match".into());
    }
    let mut reader = CacheReader { rest: body };
    if reader.take(STAT_CACHE_MAGIC.len())? != STAT_CACHE_MAGIC {
        return Err("not a stat cache of this version".into());
    }
    let count = reader.u64()?;
    let mut cache = StatCache::new();
    for _ in 0..count {
        let length = reader.u32()? as usize;
        let text = std::str::from_utf8(reader.take(length)?).map_err(|error| error.to_string())?;
        let path = WorkspacePath::parse(text).map_err(|error| error.to_string())?;
        let size = reader.u64()?;
        let mtime_ns = i128::from(reader.i64()?);
        let ctime_ns = i128::from(reader.i64()?);
        let inode = reader.u64()?;
        let hash: [u8; 32] = reader
            .take(32)?
            .try_into()
            .map_err(|_| "truncated".to_owned())?;
        cache.insert(
            path,
            (
                Scanned {
                    size,
                    mtime_ns,
                    ctime_ns,
                    inode,
                },
                Hash(hash),
            ),
        );
    }
    if !reader.rest.is_empty() {
        return Err("trailing bytes".into());
    }
    Ok(cache)
}

struct CacheReader<'a> {
    rest: &'a [u8],
}

impl<'a> CacheReader<'a> {
    fn take(&mut self, count: usize) -> std::result::Result<&'a [u8], String> {
        if count > self.rest.len() {
            return Err("truncated".into());
        }
        let (taken, rest) = self.rest.split_at(count);
        self.rest = rest;
        Ok(taken)
    }

    fn array<const N: usize>(&mut self) -> std::result::Result<[u8; N], String> {
        self.take(N)?.try_into().map_err(|_| "truncated".to_owned())
    }

    fn u32(&mut self) -> std::result::Result<u32, String> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> std::result::Result<u64, String> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    fn i64(&mut self) -> std::result::Result<i64, String> {
        Ok(i64::from_le_bytes(self.array()?))
    }
}

/// Writes the cache beside `path` and renames it over: a reader sees the
/// old cache or the new one. Not fsynced: a cache torn by a crash fails
/// its checksum and is not used.
pub fn write_stat_cache(
    path: &Path,
    entries: &[(&WorkspacePath, Scanned, Hash)],
) -> std::io::Result<()> {
    let mut bytes = Vec::with_capacity(64 + entries.len() * 96);
    bytes.extend_from_slice(STAT_CACHE_MAGIC);
    bytes.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    for (path, scanned, hash) in entries {
        let text = path.as_str().as_bytes();
        let length = u32::try_from(text.len()).map_err(std::io::Error::other)?;
        bytes.extend_from_slice(&length.to_le_bytes());
        bytes.extend_from_slice(text);
        bytes.extend_from_slice(&scanned.size.to_le_bytes());
        let time = |ns: i128| i64::try_from(ns).unwrap_or(i64::MAX);
        bytes.extend_from_slice(&time(scanned.mtime_ns).to_le_bytes());
        bytes.extend_from_slice(&time(scanned.ctime_ns).to_le_bytes());
        bytes.extend_from_slice(&scanned.inode.to_le_bytes());
        bytes.extend_from_slice(&hash.0);
    }
    let checksum = blake3::hash(&bytes);
    bytes.extend_from_slice(checksum.as_bytes());
    if bytes.len() as u64 > STAT_CACHE_BYTES_MAX {
        // Too large to be read back: no cache rather than a useless one.
        return remove_stat_cache(path);
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    // One temporary per process: two syncs of a session in different
    // processes never write the same file.
    let temporary = path.with_extension(format!("bin.{}.tmp", std::process::id()));
    std::fs::write(&temporary, &bytes)?;
    std::fs::rename(&temporary, path)
}

/// Removes a stat cache (a missing one is fine).
pub fn remove_stat_cache(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(error),
        _ => Ok(()),
    }
}

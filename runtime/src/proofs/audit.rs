//! The full audit: replays the whole log, recomputes the hash chain, the
//! RFC 6962 tree and the map of stream heads from the events alone, and
//! checks every signed checkpoint stored in the root (and one given)
//! against them, and every map root the store keeps.
//!
//! Memory grows with the number of streams (the map is held whole) and
//! the number of stored checkpoints (their sizes and roots), never with
//! the number of events: the events and the stored map roots are streamed
//! in pages.

use std::collections::BTreeMap;

use sandlog_core::map::{self, HeadFold, MemoryMap};
use sandlog_core::merkle::{Frontier, MerkleHash};
use sandlog_core::note::{Checkpoint, VerifierKey};
use sandlog_core::{Hash, Position, chain_hash};
use sandlog_eventstore::Portable as _;
use sandlog_sqlite::EventStore;
use serde::Serialize;

use crate::engine::Engine;
use sandlog_host::error::{Result, RuntimeError};

/// Stored checkpoints read per page, and stored map roots.
const AUDIT_PAGE_ROWS: usize = 10_000;

/// Events between two progress reports.
const AUDIT_PROGRESS_EVENTS: u64 = 4096;

/// What a passed audit checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AuditReport {
    /// Always true when returned (a failure is an error).
    pub ok: bool,
    /// Events replayed.
    pub events: u64,
    /// Signed checkpoints checked against the recomputed tree and map
    /// (the stored ones by the key, and the one given).
    pub checkpoints: u64,
    /// Stored checkpoints signed by another key (skipped).
    pub other_keys: u64,
    /// Stored map roots checked against the recomputed map.
    pub map_roots: u64,
    /// The tree's root at the head, hex.
    pub root: String,
    /// The map's root at the head, hex.
    pub map_root: String,
}

/// What a signed checkpoint claims at its size.
#[derive(Debug, Clone)]
struct Claim {
    root: MerkleHash,
    map_root: Option<MerkleHash>,
    what: String,
}

fn failed(size: u64, reason: String) -> RuntimeError {
    RuntimeError::AuditFailed { size, reason }
}

impl Engine {
    /// Audits the whole log against every checkpoint stored in the root
    /// that `key` signed, and `given` (a signed note) if any. `progress`
    /// is told `(events done, events in all)` as the replay goes. Fails
    /// with [`RuntimeError::AuditFailed`] naming the first bad size.
    pub fn audit(
        &self,
        given: Option<&str>,
        key: &VerifierKey,
        progress: &(dyn Fn(u64, u64) + Sync),
    ) -> Result<AuditReport> {
        audit_store(&self.store, given, key, progress)
    }
}

/// [`Engine::audit`] on a log store alone (no root): for tools and
/// benchmarks that hold only the database.
pub fn audit_store(
    store: &EventStore,
    given: Option<&str>,
    key: &VerifierKey,
    progress: &(dyn Fn(u64, u64) + Sync),
) -> Result<AuditReport> {
    let mut claims: BTreeMap<u64, Vec<Claim>> = BTreeMap::new();
    let mut other_keys = 0u64;
    let mut add = |note: &str, what: String| -> Result<bool> {
        let checkpoint = match Checkpoint::verify(note, key) {
            Ok(checkpoint) => checkpoint,
            Err(error) => {
                return Err(RuntimeError::AuditFailed {
                    size: note
                        .lines()
                        .nth(1)
                        .and_then(|line| line.parse().ok())
                        .unwrap_or(0),
                    reason: format!("{what}: {error}"),
                });
            }
        };
        let map_root = map::root_of_checkpoint(&checkpoint)
            .map_err(|error| failed(checkpoint.size, format!("{what}: {error}")))?;
        claims.entry(checkpoint.size).or_default().push(Claim {
            root: checkpoint.root,
            map_root,
            what,
        });
        Ok(true)
    };
    if let Some(note) = given {
        add(note, "the checkpoint given".into())?;
    }
    let mut after = 0i64;
    loop {
        let page = store.export_checkpoints(after, AUDIT_PAGE_ROWS)?;
        for record in &page {
            after = record.id;
            // A checkpoint of another log's key is not this key's
            // claim: counted, not checked.
            let origin = record.note.lines().next().unwrap_or_default();
            if origin != key.name() {
                other_keys += 1;
                continue;
            }
            add(&record.note, format!("stored checkpoint #{}", record.id))?;
        }
        if page.len() < AUDIT_PAGE_ROWS {
            break;
        }
    }
    let checkpoints = claims.values().map(|claims| claims.len() as u64).sum();

    let total = store.head()?.position.0;
    let mut frontier = Frontier::new();
    let mut heads = HeadFold::default();
    let mut tree = MemoryMap::new();
    let mut map_roots = StoredRoots::new(store);
    let mut map_roots_checked = 0u64;
    let mut previous = Hash::GENESIS;
    let mut size = 0u64;
    let mut check_at = |size: u64,
                        frontier: &Frontier,
                        heads: &mut HeadFold,
                        tree: &mut MemoryMap,
                        map_roots: &mut StoredRoots<'_>|
     -> Result<()> {
        let claimed = claims.remove(&size);
        let stored = map_roots.at(size)?;
        if claimed.is_none() && stored.is_none() {
            return Ok(());
        }
        let map_root = tree
            .apply(&heads.take())
            .map_err(|error| failed(size, format!("the recomputed map: {error}")))?;
        if let Some(stored) = stored {
            map_roots_checked += 1;
            if stored != map_root {
                return Err(failed(
                    size,
                    format!(
                        "the stored map root is {}, but the log's streams make {}: \
                         the stored map disagrees with the log",
                        stored.to_hex(),
                        map_root.to_hex()
                    ),
                ));
            }
        }
        for claim in claimed.into_iter().flatten() {
            let root = frontier.root();
            if claim.root != root {
                return Err(failed(
                    size,
                    format!(
                        "{} signs the tree root {}, but the log's first {size} events make {}: \
                         it signs a log this one is not (a fork, or rewritten history)",
                        claim.what,
                        claim.root.to_hex(),
                        root.to_hex()
                    ),
                ));
            }
            if let Some(claimed_map) = claim.map_root
                && claimed_map != map_root
            {
                return Err(failed(
                    size,
                    format!(
                        "{} signs the map root {}, but the log's streams make {}",
                        claim.what,
                        claimed_map.to_hex(),
                        map_root.to_hex()
                    ),
                ));
            }
        }
        Ok(())
    };
    check_at(0, &frontier, &mut heads, &mut tree, &mut map_roots)?;
    for envelope in store.read_all_after(Position::ZERO) {
        let envelope = envelope?;
        let position = envelope.position.0;
        if position != size + 1 {
            return Err(failed(
                size + 1,
                format!("the event at position {} is missing", size + 1),
            ));
        }
        let stream = envelope.stream.to_string();
        if envelope.prev_hash != previous {
            return Err(failed(
                position,
                format!("the event at position {position} does not link to the one before"),
            ));
        }
        if chain_hash(&envelope.prev_hash, &envelope.fields(&stream)) != envelope.hash {
            return Err(failed(
                position,
                format!(
                    "the event at position {position} was altered: its fields do not hash to its hash"
                ),
            ));
        }
        previous = envelope.hash;
        frontier.append(&envelope.hash.0);
        heads.push(&stream, envelope.version.0, position, envelope.hash);
        size = position;
        check_at(size, &frontier, &mut heads, &mut tree, &mut map_roots)?;
        if size.is_multiple_of(AUDIT_PROGRESS_EVENTS) {
            progress(size, total);
        }
    }
    progress(size, total);
    if let Some((&beyond, claims)) = claims.iter().next() {
        let what = claims
            .first()
            .map_or("a checkpoint", |claim| claim.what.as_str());
        return Err(failed(
            beyond,
            format!("{what} is of {beyond} events, but the log holds {size}: events were removed"),
        ));
    }
    if let Some(stored) = map_roots.at(u64::MAX)? {
        return Err(failed(
            size,
            format!(
                "a map root is stored past the log's end ({})",
                stored.to_hex()
            ),
        ));
    }
    let map_root = tree
        .apply(&heads.take())
        .map_err(|error| failed(size, format!("the recomputed map: {error}")))?;
    Ok(AuditReport {
        ok: true,
        events: size,
        checkpoints,
        other_keys,
        map_roots: map_roots_checked,
        root: frontier.root().to_hex(),
        map_root: map_root.to_hex(),
    })
}

/// The stored map roots, paged in size order.
struct StoredRoots<'a> {
    store: &'a EventStore,
    page: std::collections::VecDeque<(u64, MerkleHash)>,
    next_from: u64,
    done: bool,
}

impl<'a> StoredRoots<'a> {
    fn new(store: &'a EventStore) -> Self {
        StoredRoots {
            store,
            page: Default::default(),
            next_from: 0,
            done: false,
        }
    }

    /// The stored root at `size`, if any. Sizes are asked in increasing
    /// order; a stored size skipped over is a map root at a size no event
    /// ends, which fails the audit. `u64::MAX` asks for any root left.
    fn at(&mut self, size: u64) -> Result<Option<MerkleHash>> {
        if self.page.is_empty() && !self.done {
            let page = self
                .store
                .map_roots(self.next_from, AUDIT_PAGE_ROWS as u32)?;
            self.done = page.len() < AUDIT_PAGE_ROWS;
            if let Some((last, _)) = page.last() {
                self.next_from = last.saturating_add(1);
            }
            self.page.extend(page);
        }
        match self.page.front() {
            Some(&(stored, root)) if stored == size => {
                self.page.pop_front();
                Ok(Some(root))
            }
            Some(&(stored, root)) if stored < size || size == u64::MAX => Err(failed(
                stored,
                format!(
                    "a map root ({}) is stored at a size the log does not have",
                    root.to_hex()
                ),
            )),
            _ => Ok(None),
        }
    }
}

//! The SQL read models, kept in the log's SQLite file and written inside
//! the append transaction (through the event store's [`AppendHook`]), so
//! the log and the read models never disagree.
//!
//! The read model is a *materialisation of the same fold* as the in-memory
//! [`State`]: a [`Batch`] loads the sessions an event touches from the
//! tables into a partial `State`, runs the fold ([`apply_in_context`]) on
//! it, and writes back what changed. There is one copy of the rules, so the
//! SQL tables cannot drift from the fold; a property test still checks that
//! they are equal.
//!
//! A checkpoint row holds the position of the last event folded. If the
//! log is ahead of it (events appended by a process without the hook, a
//! crash between versions, a read model added later), the next append or
//! [`catch_up`] folds the gap first. A stored read-model version other than
//! [`READ_MODEL_VERSION`] means the tables' shape changed: they are dropped
//! and rebuilt from position 0.
//!
//! Here: the hook, installing, catching up and rebuilding. Beside it:
//! `schema` (the tables and the checkpoint row), `rows` (reading rows
//! back), `batch` (folding a run of events into a partial state and
//! writing it back) and `catch_up` (folding the log after the checkpoint,
//! in chunks, with decoding pipelined on another thread when far behind).

mod batch;
mod catch_up;
mod rows;
mod schema;
mod session_row;
mod values;

use std::sync::Arc;

use rusqlite::Connection;
use sandlog_core::{Envelope, Position};
use sandlog_projections::error::Result;

use self::batch::Batch;
use self::catch_up::{
    PIPELINED_CATCH_UP_EVENTS_MIN, catch_up_chunk, catch_up_in, fold_decoded, pipelined_catch_up,
    with_decoded_events,
};
use self::schema::{checkpoint, reset};
use crate::store::SqlResult;
use crate::store::rows::log_length;
use crate::{AppendHook, EventStore, Upgrade, UpgradeObserver};

pub use catch_up::CATCH_UP_CHUNK_EVENTS;
pub(crate) use rows::{load_active_totals, load_file, load_files, load_session, load_stats};
pub use schema::READ_MODEL_VERSION;
pub(crate) use session_row::{SELECT_SESSIONS, session_from_row};
pub(crate) use values::stored_u64;

#[cfg(test)]
pub(crate) use schema::reset as reset_tables;

/// The hook that keeps the read models in step with every append.
#[derive(Debug, Default, Clone, Copy)]
pub struct ReadModelHook;

impl AppendHook for ReadModelHook {
    fn after_append(
        &self,
        transaction: &rusqlite::Transaction<'_>,
        envelopes: &[Envelope],
    ) -> std::result::Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let Some(first) = envelopes.first() else {
            return Ok(());
        };
        let Some((position, _)) = checkpoint(transaction)? else {
            return Ok(());
        };
        if Position(position.0.saturating_add(1)) == first.position {
            let mut batch = Batch::new(transaction, position)?;
            for envelope in envelopes {
                batch.apply(envelope)?;
            }
            batch.flush()?;
        } else {
            // Behind (or, impossibly, ahead): fold from the checkpoint,
            // which includes the events just inserted in this transaction.
            tracing::info!(checkpoint = %position, first = %first.position, "read model behind the log; catching up");
            catch_up_in(transaction)?;
        }
        Ok(())
    }
}

/// What opening the read models did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CatchUpReport {
    /// Events folded to catch up.
    pub events: u64,
    /// Whether the tables were (re)built from position 0.
    pub rebuilt: bool,
}

/// Whether a checkpoint (see [`checkpoint`]) is of read models of the
/// current shape.
fn is_current(found: Option<(Position, i64)>) -> bool {
    matches!(found, Some((_, version)) if version == READ_MODEL_VERSION)
}

/// Creates the read-model tables if needed (rebuilding them if their
/// version changed), catches them up with the log, and installs the hook
/// that keeps them in step with every later append.
pub fn install(store: &mut EventStore) -> Result<CatchUpReport> {
    install_observed(store, None)
}

/// [`install`], telling `observer` before and after read models of
/// another version are rebuilt over a log that has events (the rebuild
/// holds the write lock for as long as it takes).
pub fn install_observed(
    store: &mut EventStore,
    observer: Option<&UpgradeObserver>,
) -> Result<CatchUpReport> {
    let mut report = CatchUpReport::default();
    let found = store.with_reader(checkpoint)?;
    if store.is_read_only() {
        // Nothing may be written: read models that are current and caught
        // up are read as they are; others cannot be brought up to date.
        let head = store.head()?.position;
        return match found {
            Some((position, _)) if is_current(found) && position >= head => Ok(report),
            _ => Err(sandlog_eventstore::EventStoreError::Io {
                context: format!("opening {} read-only", store.path().display()),
                source: std::io::Error::other(
                    "its read models are behind the log or of another version, and a \
                     read-only root cannot catch them up: open it once where it is writable",
                ),
            }
            .into()),
        };
    }
    if !is_current(found) {
        if let Some((_, version)) = found {
            tracing::info!(
                found = version,
                wanted = READ_MODEL_VERSION,
                "read model version changed; rebuilding"
            );
        }
        // Announced only when tables of another version are replaced: a
        // log that never had read models (a new root's first event) gets
        // them without a word.
        let upgrade = found.map(|(_, version)| Upgrade::ReadModels {
            from: version,
            to: READ_MODEL_VERSION,
        });
        let mut announced = None;
        // Checked again under the write lock: another process opening the
        // same store may have rebuilt it meanwhile.
        if let Some(events) = rebuild_unless(store, |connection| {
            if is_current(checkpoint(connection)?) {
                return Ok(true);
            }
            if let (Some(observer), Some(upgrade)) = (observer, upgrade) {
                let events = log_length(connection)?;
                if events > 0 {
                    announced = Some(observer.started(store.path(), upgrade, events));
                }
            }
            Ok(false)
        })? {
            report.rebuilt = true;
            report.events = events;
        }
        // Announced only if rebuilt: the rebuild has committed by now.
        if let Some(announced) = announced {
            announced.finished();
        }
    }
    report.events += catch_up(store)?;
    store.set_hook(Arc::new(ReadModelHook));
    Ok(report)
}

/// Folds every event after the checkpoint, one chunk per transaction.
/// Resumable: a crash loses at most the chunk in flight, which the next
/// call folds again. Every commit leaves the read models equal to the fold
/// of the log up to their checkpoint.
///
/// Long catch-ups run on two threads: a reader with its own connection
/// selects and decodes the events, this thread folds them and writes the
/// read models. Each chunk's transaction first checks that the checkpoint
/// is still where the reader started; if another process folded events
/// meanwhile (its append hook catches up too), the reader is dropped and
/// the rest is folded here, as are events appended after the reader
/// stopped.
pub fn catch_up(store: &EventStore) -> Result<u64> {
    let Some((start, _)) = store.with_reader(checkpoint)? else {
        return Ok(0);
    };
    let head = store.head()?.position;
    let mut total = 0u64;
    if head.0.saturating_sub(start.0) >= PIPELINED_CATCH_UP_EVENTS_MIN {
        total += pipelined_catch_up(store, start)?;
    }
    loop {
        let folded = store.with_write_transaction(|transaction| catch_up_chunk(transaction))?;
        if folded == 0 {
            return Ok(total);
        }
        total += folded as u64;
    }
}

/// Drops the read models and folds the whole log again from position 0,
/// streamed (memory does not grow with the log), in one transaction.
/// Returns the number of events folded.
///
/// One transaction, so nobody ever sees a half-built read model: queries
/// meanwhile (in this process or another) read the old tables, a crash or
/// an error leaves them as they were, and the new ones appear whole at the
/// commit. Appends wait for the write lock meanwhile, as long as the
/// rebuild takes; without the single transaction, an append landing
/// between two chunks would find its read model behind and fold the whole
/// rest of the log in its own transaction anyway.
pub fn rebuild(store: &EventStore) -> Result<u64> {
    Ok(rebuild_unless(store, |_| Ok(false))?.unwrap_or(0))
}

/// [`rebuild`], unless `done` says, under the write lock, that the read
/// models need none (another process rebuilt them first): `None` then.
fn rebuild_unless(
    store: &EventStore,
    done: impl FnOnce(&Connection) -> Result<bool>,
) -> Result<Option<u64>> {
    store.with_write_transaction(|transaction| {
        if done(transaction)? {
            return Ok(None);
        }
        // The page cache belongs to the connection, not the transaction:
        // set for the refold, and given back afterwards, failed or not.
        let usual: i64 = transaction
            .query_row("PRAGMA cache_size", [], |row| row.get(0))
            .sql()?;
        transaction
            .execute_batch(&format!("PRAGMA cache_size = -{REBUILD_CACHE_KIB}"))
            .sql()?;
        let refolded = refold(store, transaction);
        let restored = transaction.execute_batch(&format!("PRAGMA cache_size = {usual}"));
        let refolded = refolded?;
        restored.sql()?;
        Ok(Some(refolded))
    })
}

/// Page cache of the writing connection while the read models are rebuilt
/// from position 0, in KiB. Their writes append at the right edge of the
/// tables (see the schema), so a large cache buys a rebuild nothing
/// measurable (the `projections` bench prints the rebuild rate), while
/// filling the store's usual 32 MiB made the rebuild's peak memory
/// grow with the size of the read model it replaced, up to that cap.
const REBUILD_CACHE_KIB: i64 = 8 * 1024;

/// Drops the read models and folds the whole log into new ones, in
/// `transaction` (which holds the write lock: the head cannot move).
fn refold(store: &EventStore, transaction: &Connection) -> Result<u64> {
    reset(transaction)?;
    if store.head()?.position.0 < PIPELINED_CATCH_UP_EVENTS_MIN {
        return catch_up_in(transaction);
    }
    let (folded, _) = with_decoded_events(store, Position::ZERO, |events| {
        fold_decoded(transaction, events, Position::ZERO, None)
    })?;
    Ok(folded)
}

/// The checkpoint: the position of the last event the read models folded.
pub fn checkpoint_position(store: &EventStore) -> Result<Position> {
    let current = store.with_reader(checkpoint)?;
    Ok(current.map_or(Position::ZERO, |(position, _)| position))
}

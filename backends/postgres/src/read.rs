//! Reading on PostgreSQL: the head, stream versions, filtered pages,
//! the chain walk of `verify`, and the Merkle tree's roots and proofs.

use std::cell::RefCell;

use postgres::Row;
use postgres::types::ToSql;
use sandlog_core::envelope::EnvelopeFields;
use sandlog_core::merkle::{self, Frontier, MerkleHash, NodeId, NodeSource};
use sandlog_core::{
    Envelope, EventId, Hash, Position, StreamId, StreamVersion, Timestamp, chain_hash,
};
use sandlog_eventstore::chain::{Digest, VerifyReport};
use sandlog_eventstore::error::{ChainProblem, EventStoreError, Result};
use sandlog_eventstore::merkle::{
    STORED_LEVEL_MIN, check_tree_size, leaf_span, missing_node, stored_node_hash, subtree_of_events,
};
pub(crate) use sandlog_eventstore::read::ENVELOPE_COLUMNS;
use sandlog_eventstore::read::{LogFilter, PAGE_EVENTS};
use sandlog_eventstore::types::Head;
use uuid::Uuid;

use crate::PgResult;
use crate::{PgEventStore, Session, read_session, to_i64};

/// Rows fetched per round trip by `verify`'s walk: enough that the round
/// trips vanish against the hashing, few enough that a batch of maximal
/// payloads stays in the tens of MiB.
const VERIFY_FETCH_ROWS: i32 = 1024;

fn malformed(position: Position, reason: impl Into<String>) -> EventStoreError {
    EventStoreError::Corrupt {
        position,
        reason: reason.into(),
    }
}

fn column<'a, T: postgres::types::FromSql<'a>>(
    row: &'a Row,
    index: usize,
    position: Position,
    name: &str,
) -> Result<T> {
    row.try_get(index)
        .map_err(|error| malformed(position, format!("{name}: {error}")))
}

fn u64_of(value: i64, position: Position, name: &str) -> Result<u64> {
    u64::try_from(value).map_err(|_| malformed(position, format!("{name} is negative")))
}

fn uuid_of(bytes: Option<&[u8]>, position: Position, name: &str) -> Result<Option<Uuid>> {
    bytes
        .map(|bytes| {
            Uuid::from_slice(bytes)
                .map_err(|_| malformed(position, format!("{name} is not 16 bytes")))
        })
        .transpose()
}

fn hash_of(bytes: &[u8], position: Position, name: &str) -> Result<Hash> {
    Hash::from_slice(bytes).ok_or_else(|| malformed(position, format!("{name} is not 32 bytes")))
}

/// Builds an envelope from a row selected with [`ENVELOPE_COLUMNS`]. A row
/// of the wrong shape is [`EventStoreError::Corrupt`], never a panic.
pub(crate) fn envelope_from_row(row: &Row) -> Result<Envelope> {
    envelope_from_row_at(row, 0)
}

/// [`envelope_from_row`] of the [`ENVELOPE_COLUMNS`] starting at column `at`.
pub(crate) fn envelope_from_row_at(row: &Row, at: usize) -> Result<Envelope> {
    let position = Position(u64_of(
        column(row, at, Position::ZERO, "position")?,
        Position::ZERO,
        "position",
    )?);
    let stream = StreamId::parse(column::<&str>(row, at + 1, position, "stream")?)
        .map_err(|error| malformed(position, error.to_string()))?;
    let event_id = uuid_of(
        Some(column(row, at + 3, position, "event_id")?),
        position,
        "event_id",
    )?
    .ok_or_else(|| malformed(position, "event_id is null"))?;
    let schema: i64 = column(row, at + 5, position, "schema")?;
    Ok(Envelope {
        position,
        stream,
        version: StreamVersion(u64_of(
            column(row, at + 2, position, "version")?,
            position,
            "version",
        )?),
        event_id: EventId(event_id),
        kind: column::<String>(row, at + 4, position, "kind")?,
        schema: u32::try_from(schema).map_err(|_| malformed(position, "schema is out of range"))?,
        recorded_at: Timestamp::from_unix_micros(column(row, at + 6, position, "recorded_at")?),
        actor: column::<String>(row, at + 7, position, "actor")?,
        correlation_id: uuid_of(
            column(row, at + 8, position, "correlation_id")?,
            position,
            "correlation_id",
        )?,
        causation_id: uuid_of(
            column(row, at + 9, position, "causation_id")?,
            position,
            "causation_id",
        )?,
        payload: column::<Vec<u8>>(row, at + 10, position, "payload")?,
        prev_hash: hash_of(
            column(row, at + 11, position, "prev_hash")?,
            position,
            "prev_hash",
        )?,
        hash: hash_of(column(row, at + 12, position, "hash")?, position, "hash")?,
    })
}

/// The last event's position, hash and time.
pub(crate) fn read_head(session: &mut Session<'_>) -> Result<Head> {
    let row = session.query_opt(
        "SELECT position, hash, recorded_at FROM events ORDER BY position DESC LIMIT 1",
        &[],
    )?;
    let Some(row) = row else {
        return Ok(Head {
            position: Position::ZERO,
            hash: Hash::GENESIS,
            recorded_at: None,
        });
    };
    let position = Position(u64_of(
        column(&row, 0, Position::ZERO, "position")?,
        Position::ZERO,
        "position",
    )?);
    Ok(Head {
        position,
        hash: hash_of(column(&row, 1, position, "hash")?, position, "hash")?,
        recorded_at: Some(Timestamp::from_unix_micros(column(
            &row,
            2,
            position,
            "recorded_at",
        )?)),
    })
}

/// A stream's version (`None` without events).
pub(crate) fn read_stream_version(
    session: &mut Session<'_>,
    stream: &str,
) -> Result<Option<StreamVersion>> {
    let row = session.query_opt(
        "SELECT version FROM events WHERE stream = $1 ORDER BY version DESC LIMIT 1",
        &[&stream],
    )?;
    row.map(|row| {
        let version: i64 = column(&row, 0, Position::ZERO, "version")?;
        Ok(StreamVersion(u64_of(version, Position::ZERO, "version")?))
    })
    .transpose()
}

/// Reads tree nodes in one transaction, recomputing the levels below
/// [`STORED_LEVEL_MIN`] from the events (as [`sandlog_eventstore::merkle`] does on
/// SQLite).
struct PgNodes<'s, 't> {
    session: RefCell<&'s mut Session<'t>>,
}

impl PgNodes<'_, '_> {
    fn event_hashes(&self, start: u64, end: u64) -> Result<Vec<Hash>> {
        let rows = self.session.borrow_mut().query(
            "SELECT position, hash FROM events WHERE position > $1 AND position <= $2 ORDER BY position",
            &[&to_i64(start, "leaf")?, &to_i64(end, "leaf")?],
        )?;
        let mut hashes = Vec::with_capacity(rows.len());
        let mut expected = start + 1;
        for row in &rows {
            let position: i64 = column(row, 0, Position(expected), "position")?;
            if u64::try_from(position).ok() != Some(expected) {
                return Err(malformed(Position(expected), "missing from the log"));
            }
            hashes.push(hash_of(
                column(row, 1, Position(expected), "hash")?,
                Position(expected),
                "hash",
            )?);
            expected += 1;
        }
        if expected != end + 1 {
            return Err(malformed(Position(expected), "missing from the log"));
        }
        Ok(hashes)
    }
}

impl NodeSource for PgNodes<'_, '_> {
    type Error = EventStoreError;

    fn node(&self, id: NodeId) -> Result<MerkleHash> {
        if id.level >= STORED_LEVEL_MIN {
            let row = self.session.borrow_mut().query_opt(
                "SELECT hash FROM merkle_nodes WHERE level = $1 AND idx = $2",
                &[&i64::from(id.level), &to_i64(id.index, "node index")?],
            )?;
            let row = row.ok_or_else(|| missing_node(id))?;
            let bytes: &[u8] = row.try_get(0).map_err(|_| missing_node(id))?;
            return stored_node_hash(id, bytes);
        }
        let (start, end) = leaf_span(id)?;
        let leaves = self.event_hashes(start, end)?;
        subtree_of_events(id, &leaves)
    }
}

/// The frontier of the stored tree of `size` leaves.
pub(crate) fn load_frontier(session: &mut Session<'_>, size: u64) -> Result<Frontier> {
    let source = PgNodes {
        session: RefCell::new(session),
    };
    let hashes = merkle::frontier_ids(size)
        .into_iter()
        .map(|id| source.node(id))
        .collect::<Result<Vec<_>>>()?;
    Ok(Frontier::from_nodes(size, &hashes)?)
}

fn kind_condition(kinds: &[String], params: &mut Vec<Box<dyn ToSql + Sync>>) -> String {
    let mut alternatives = Vec::new();
    for kind in kinds {
        match kind.strip_suffix('*') {
            Some(prefix) => {
                params.push(Box::new(prefix.to_owned()));
                alternatives.push(format!("starts_with(kind, ${})", params.len()));
            }
            None => {
                params.push(Box::new(kind.clone()));
                alternatives.push(format!("kind = ${}", params.len()));
            }
        }
    }
    format!("({})", alternatives.join(" OR "))
}

fn broken(position: Position, problem: ChainProblem) -> EventStoreError {
    EventStoreError::ChainBroken { position, problem }
}

impl PgEventStore {
    /// The last event's position and hash.
    pub fn head(&self) -> Result<Head> {
        self.with_read(read_head)
    }

    /// A stream's current version (`None` if it has no events).
    pub fn stream_version(&self, stream: StreamId) -> Result<Option<StreamVersion>> {
        let stream = stream.to_string();
        self.with_read(|session| read_stream_version(session, &stream))
    }

    /// Events matching `filter`, in position order, collected a page of
    /// [`PAGE_EVENTS`] at a time (each page one query).
    pub fn query_page(&self, filter: &LogFilter) -> Result<Vec<Envelope>> {
        let mut after = filter
            .from
            .map_or(Position::ZERO, |from| Position(from.0.saturating_sub(1)));
        let mut remaining = filter.limit.unwrap_or(u64::MAX);
        let mut envelopes = Vec::new();
        while remaining > 0 {
            let page_size = usize::try_from(remaining)
                .unwrap_or(PAGE_EVENTS)
                .min(PAGE_EVENTS);
            let page = self.page(filter, after, page_size)?;
            let full = page.len() == page_size;
            if let Some(last) = page.last() {
                after = last.position;
            }
            remaining -= page.len() as u64;
            envelopes.extend(page);
            if !full {
                break;
            }
        }
        Ok(envelopes)
    }

    /// The event at `position`, if stored.
    pub fn get(&self, position: Position) -> Result<Option<Envelope>> {
        let filter = LogFilter {
            from: Some(position),
            to: Some(position),
            ..LogFilter::default()
        };
        Ok(self
            .page(&filter, Position(position.0.saturating_sub(1)), 1)?
            .pop())
    }

    fn page(&self, filter: &LogFilter, after: Position, page_size: usize) -> Result<Vec<Envelope>> {
        // Every field, named: a field added to the filter fails to compile
        // here until this backend honours it.
        let LogFilter {
            stream,
            kinds,
            since,
            until,
            // `from` and `limit` are the caller's `after` and `page_size`.
            from: _,
            to,
            limit: _,
            correlation,
        } = filter;
        let mut params: Vec<Box<dyn ToSql + Sync>> = vec![Box::new(to_i64(after.0, "position")?)];
        let mut conditions = vec!["position > $1".to_owned()];
        if let Some(stream) = stream {
            params.push(Box::new(stream.to_string()));
            conditions.push(format!("stream = ${}", params.len()));
        }
        if !kinds.is_empty() {
            conditions.push(kind_condition(kinds, &mut params));
        }
        if let Some(since) = since {
            params.push(Box::new(since.unix_micros()));
            conditions.push(format!("recorded_at >= ${}", params.len()));
        }
        if let Some(until) = until {
            params.push(Box::new(until.unix_micros()));
            conditions.push(format!("recorded_at < ${}", params.len()));
        }
        if let Some(correlation) = correlation {
            params.push(Box::new(correlation.as_bytes().to_vec()));
            conditions.push(format!("correlation_id = ${}", params.len()));
        }
        if let Some(to) = to {
            params.push(Box::new(i64::try_from(to.0).unwrap_or(i64::MAX)));
            conditions.push(format!("position <= ${}", params.len()));
        }
        params.push(Box::new(i64::try_from(page_size).unwrap_or(i64::MAX)));
        let sql = format!(
            "SELECT {ENVELOPE_COLUMNS} FROM events WHERE {} ORDER BY position LIMIT ${}",
            conditions.join(" AND "),
            params.len()
        );
        let params: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p.as_ref()).collect();
        self.with_read(|session| {
            session
                .query(&sql, &params)?
                .iter()
                .map(envelope_from_row)
                .collect()
        })
    }

    /// Walks the whole chain in one snapshot on a connection of its own:
    /// every position from 1 present once and in order, every `prev_hash`
    /// the previous `hash`, every `hash` the hash of its row, and (with a
    /// digest) the log still extends it. Constant memory: rows come
    /// `VERIFY_FETCH_ROWS` at a time through a cursor.
    ///
    /// Errors with [`EventStoreError::ChainBroken`] naming the first bad
    /// position.
    pub fn verify(&self, digest: Option<Digest>) -> Result<VerifyReport> {
        let mut conn = self.connect_again()?;
        read_session(&mut conn, |session| {
            let statement = session.statement(&format!(
                "SELECT {ENVELOPE_COLUMNS} FROM events ORDER BY position"
            ))?;
            let portal = session.transaction.bind(&statement, &[]).pg()?;
            let mut walk = ChainWalk::new(digest);
            loop {
                let rows = session
                    .transaction
                    .query_portal(&portal, VERIFY_FETCH_ROWS)
                    .pg()?;
                for row in &rows {
                    walk.row(row)?;
                }
                if rows.len() < usize::try_from(VERIFY_FETCH_ROWS).unwrap_or(usize::MAX) {
                    break;
                }
            }
            walk.finish()
        })
    }

    /// The root of the tree of the first `size` events.
    pub fn merkle_root(&self, size: u64) -> Result<MerkleHash> {
        self.with_read(|session| {
            let head = read_head(session)?.position.0;
            check_tree_size(size, head)?;
            merkle::root(
                &PgNodes {
                    session: RefCell::new(session),
                },
                size,
            )
        })
    }

    /// The tree's size (the log's length) and root, in one snapshot.
    pub fn merkle_head(&self) -> Result<(u64, MerkleHash)> {
        self.with_read(|session| {
            let size = read_head(session)?.position.0;
            let root = merkle::root(
                &PgNodes {
                    session: RefCell::new(session),
                },
                size,
            )?;
            Ok((size, root))
        })
    }

    /// RFC 6962 inclusion proof of the event at `position` in the tree of
    /// the first `size` events (`position <= size <= head`).
    pub fn inclusion_proof(&self, position: Position, size: u64) -> Result<Vec<MerkleHash>> {
        self.with_read(|session| {
            let index = sandlog_eventstore::merkle::inclusion_index(
                position,
                size,
                read_head(session)?.position.0,
            )?;
            merkle::inclusion_proof(
                &PgNodes {
                    session: RefCell::new(session),
                },
                index,
                size,
            )
        })
    }

    /// RFC 6962 consistency proof between the trees of the first `old` and
    /// `new` events (`old <= new <= head`).
    pub fn consistency_proof(&self, old: u64, new: u64) -> Result<Vec<MerkleHash>> {
        self.with_read(|session| {
            sandlog_eventstore::merkle::check_consistency_sizes(
                old,
                new,
                read_head(session)?.position.0,
            )?;
            merkle::consistency_proof(
                &PgNodes {
                    session: RefCell::new(session),
                },
                old,
                new,
            )
        })
    }
}

/// `verify`'s state between rows.
struct ChainWalk {
    digest: Option<Digest>,
    digest_checked: bool,
    prev_hash: Hash,
    expected: Position,
}

impl ChainWalk {
    fn new(digest: Option<Digest>) -> ChainWalk {
        ChainWalk {
            digest,
            digest_checked: false,
            prev_hash: Hash::GENESIS,
            expected: Position(1),
        }
    }

    fn row(&mut self, row: &Row) -> Result<()> {
        let expected = self.expected;
        let bad = |name: &str| {
            broken(
                expected,
                ChainProblem::Malformed(format!("{name} is unreadable")),
            )
        };
        let position: i64 = row.try_get(0).map_err(|_| bad("position"))?;
        let position = Position(u64::try_from(position).unwrap_or(0));
        if position != expected {
            return Err(broken(expected, ChainProblem::Missing { found: position }));
        }
        let bytes = |index: usize, name: &str| -> Result<&[u8]> {
            row.try_get::<_, &[u8]>(index).map_err(|_| bad(name))
        };
        let optional = |index: usize, name: &str| -> Result<&[u8]> {
            row.try_get::<_, Option<&[u8]>>(index)
                .map(Option::unwrap_or_default)
                .map_err(|_| bad(name))
        };
        let text = |index: usize, name: &str| -> Result<&str> {
            row.try_get::<_, &str>(index).map_err(|_| bad(name))
        };
        let integer = |index: usize, name: &str| -> Result<i64> {
            row.try_get::<_, i64>(index).map_err(|_| bad(name))
        };
        let stored_prev = Hash::from_slice(bytes(11, "prev_hash")?).ok_or_else(|| {
            broken(
                position,
                ChainProblem::Malformed("prev_hash is not 32 bytes".into()),
            )
        })?;
        let stored_hash = Hash::from_slice(bytes(12, "hash")?).ok_or_else(|| {
            broken(
                position,
                ChainProblem::Malformed("hash is not 32 bytes".into()),
            )
        })?;
        let fields = EnvelopeFields {
            position: position.0,
            stream: text(1, "stream")?,
            version: u64::try_from(integer(2, "version")?).unwrap_or(u64::MAX),
            event_id: bytes(3, "event_id")?,
            kind: text(4, "kind")?,
            schema: u32::try_from(integer(5, "schema")?).unwrap_or(u32::MAX),
            recorded_at_micros: integer(6, "recorded_at")?,
            actor: text(7, "actor")?,
            correlation_id: optional(8, "correlation_id")?,
            causation_id: optional(9, "causation_id")?,
            payload: bytes(10, "payload")?,
        };
        // The row must hash to what it stores (catches an edited field) and
        // link to the previous row (catches an inserted or swapped row whose
        // own hash was recomputed): the order of SQLite's walk.
        if chain_hash(&stored_prev, &fields) != stored_hash {
            return Err(broken(position, ChainProblem::HashMismatch));
        }
        if stored_prev != self.prev_hash {
            return Err(broken(position, ChainProblem::PrevHashMismatch));
        }
        if let Some(digest) = self.digest
            && digest.position == position
        {
            if digest.hash != stored_hash {
                return Err(broken(
                    position,
                    ChainProblem::DigestMismatch {
                        expected: digest.hash,
                        actual: stored_hash,
                    },
                ));
            }
            self.digest_checked = true;
        }
        self.prev_hash = stored_hash;
        self.expected = position.next();
        Ok(())
    }

    fn finish(self) -> Result<VerifyReport> {
        let head = Position(self.expected.0 - 1);
        if let Some(digest) = self.digest {
            if !self.digest_checked && digest.position != Position::ZERO {
                return Err(broken(digest.position, ChainProblem::Truncated { head }));
            }
            if digest.position == Position::ZERO && digest.hash != Hash::GENESIS {
                return Err(broken(
                    Position::ZERO,
                    ChainProblem::DigestMismatch {
                        expected: digest.hash,
                        actual: Hash::GENESIS,
                    },
                ));
            }
        }
        Ok(VerifyReport {
            events: head.0,
            head,
            head_hash: self.prev_hash,
        })
    }
}

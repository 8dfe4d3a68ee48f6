//! Reading the SQLite file: by stream, by global position (streamed in
//! pages, so memory stays constant however long the log), and by filter.

use sandlog_core::{Envelope, Position, StreamId, StreamVersion, Timestamp};
use sandlog_eventstore::error::Result;
use sandlog_eventstore::read::{ENVELOPE_COLUMNS, LogFilter, PAGE_EVENTS};
use sandlog_eventstore::types::Head;

use super::EventStore;
pub use super::rows::envelope_from_row;
use super::rows::{read_head, read_stream_version};
use crate::store::SqlResult;

/// Streams envelopes in position order, one page at a time.
pub struct EnvelopeIter<'a> {
    store: &'a EventStore,
    filter: LogFilter,
    after: Position,
    page: std::vec::IntoIter<Envelope>,
    remaining: u64,
    done: bool,
}

impl Iterator for EnvelopeIter<'_> {
    type Item = Result<Envelope>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 {
            return None;
        }
        if let Some(envelope) = self.page.next() {
            self.remaining -= 1;
            return Some(Ok(envelope));
        }
        if self.done {
            return None;
        }
        let page_size = usize::try_from(self.remaining)
            .unwrap_or(PAGE_EVENTS)
            .min(PAGE_EVENTS);
        match self.store.page(&self.filter, self.after, page_size) {
            Err(error) => {
                self.done = true;
                Some(Err(error))
            }
            Ok(page) => {
                if page.len() < page_size {
                    self.done = true;
                }
                if let Some(last) = page.last() {
                    self.after = last.position;
                }
                self.page = page.into_iter();
                let envelope = self.page.next()?;
                self.remaining -= 1;
                Some(Ok(envelope))
            }
        }
    }
}

fn kind_condition(kinds: &[String], params: &mut Vec<rusqlite::types::Value>) -> String {
    let mut alternatives = Vec::new();
    for kind in kinds {
        match kind.strip_suffix('*') {
            Some(prefix) => {
                params.push(rusqlite::types::Value::Integer(
                    i64::try_from(prefix.len()).unwrap_or(i64::MAX),
                ));
                params.push(rusqlite::types::Value::Text(prefix.to_owned()));
                alternatives.push(format!(
                    "substr(kind, 1, ?{}) = ?{}",
                    params.len() - 1,
                    params.len()
                ));
            }
            None => {
                params.push(rusqlite::types::Value::Text(kind.clone()));
                alternatives.push(format!("kind = ?{}", params.len()));
            }
        }
    }
    format!("({})", alternatives.join(" OR "))
}

impl EventStore {
    /// The last event's position and hash.
    pub fn head(&self) -> Result<Head> {
        read_head(&self.lock_reader())
    }

    /// A stream's current version (`None` if it has no events).
    pub fn stream_version(&self, stream: StreamId) -> Result<Option<StreamVersion>> {
        read_stream_version(&self.lock_reader(), &stream.to_string())
    }

    /// A whole stream, in version order. Streams are per session and
    /// bounded in practice; use [`EventStore::query`] for the `system`
    /// stream of a long-lived root.
    pub fn read_stream(&self, stream: StreamId) -> Result<Vec<Envelope>> {
        self.query(LogFilter {
            stream: Some(stream),
            ..LogFilter::default()
        })
        .collect()
    }

    /// Every event after `after`, in order, streamed in pages.
    pub fn read_all_after(&self, after: Position) -> EnvelopeIter<'_> {
        self.query(LogFilter {
            from: Some(after.next()),
            ..LogFilter::default()
        })
    }

    /// Events matching `filter`, in position order, streamed in pages.
    pub fn query(&self, filter: LogFilter) -> EnvelopeIter<'_> {
        let after = filter
            .from
            .map_or(Position::ZERO, |from| Position(from.0.saturating_sub(1)));
        let remaining = filter.limit.unwrap_or(u64::MAX);
        EnvelopeIter {
            store: self,
            filter,
            after,
            page: Vec::new().into_iter(),
            remaining,
            done: false,
        }
    }

    /// The event at `position`, if stored.
    pub fn get(&self, position: Position) -> Result<Option<Envelope>> {
        let mut page = self.page(
            &LogFilter {
                from: Some(position),
                to: Some(position),
                ..LogFilter::default()
            },
            Position(position.0.saturating_sub(1)),
            1,
        )?;
        Ok(page.pop())
    }

    /// The position of the last event recorded at or before `instant` (for
    /// as-of replay by time: `Cut::Time` includes events stamped exactly
    /// then), or [`Position::ZERO`] if there is none.
    pub fn position_before(&self, instant: Timestamp) -> Result<Position> {
        let connection = self.lock_reader();
        let position: Option<i64> = connection
            .query_row(
                "SELECT max(position) FROM events WHERE recorded_at <= ?1",
                [instant.unix_micros()],
                |row| row.get(0),
            )
            .sql()?;
        Ok(Position(
            position.and_then(|p| u64::try_from(p).ok()).unwrap_or(0),
        ))
    }

    pub(crate) fn page(
        &self,
        filter: &LogFilter,
        after: Position,
        page_size: usize,
    ) -> Result<Vec<Envelope>> {
        let mut conditions = vec!["position > ?1".to_owned()];
        let mut params: Vec<rusqlite::types::Value> = vec![rusqlite::types::Value::Integer(
            i64::try_from(after.0).unwrap_or(i64::MAX),
        )];
        if let Some(stream) = filter.stream {
            params.push(rusqlite::types::Value::Text(stream.to_string()));
            conditions.push(format!(
                "stream_key = (SELECT key FROM streams WHERE stream = ?{})",
                params.len()
            ));
        }
        if !filter.kinds.is_empty() {
            conditions.push(kind_condition(&filter.kinds, &mut params));
        }
        if let Some(since) = filter.since {
            params.push(rusqlite::types::Value::Integer(since.unix_micros()));
            conditions.push(format!("recorded_at >= ?{}", params.len()));
        }
        if let Some(until) = filter.until {
            params.push(rusqlite::types::Value::Integer(until.unix_micros()));
            conditions.push(format!("recorded_at < ?{}", params.len()));
        }
        if let Some(correlation) = filter.correlation {
            params.push(rusqlite::types::Value::Blob(
                correlation.as_bytes().to_vec(),
            ));
            conditions.push(format!("correlation_id = ?{}", params.len()));
        }
        if let Some(to) = filter.to {
            params.push(rusqlite::types::Value::Integer(
                i64::try_from(to.0).unwrap_or(i64::MAX),
            ));
            conditions.push(format!("position <= ?{}", params.len()));
        }
        params.push(rusqlite::types::Value::Integer(
            i64::try_from(page_size).unwrap_or(i64::MAX),
        ));
        let sql = format!(
            "SELECT {ENVELOPE_COLUMNS} FROM events WHERE {} ORDER BY position LIMIT ?{}",
            conditions.join(" AND "),
            params.len()
        );
        let connection = self.lock_reader();
        let mut statement = connection.prepare_cached(&sql).sql()?;
        let mut rows = statement.query(rusqlite::params_from_iter(params)).sql()?;
        let mut page = Vec::with_capacity(page_size.min(PAGE_EVENTS));
        while let Some(row) = rows.next().sql()? {
            page.push(envelope_from_row(row)?);
        }
        Ok(page)
    }
}

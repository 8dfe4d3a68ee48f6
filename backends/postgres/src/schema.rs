//! The PostgreSQL schema and its versioned migrations.
//!
//! `sandlog_schema(application, version)` holds one row: the schema
//! version. [`migrate`] applies the missing scripts of [`MIGRATIONS`] in one
//! transaction under the advisory lock [`MIGRATION_LOCK_KEY`], so two
//! processes connecting to a fresh database at once create it once and
//! nobody sees half a schema.
//!
//! The tables mirror the SQLite file's (see [`crate::sqlite`]) column for
//! column: integers are BIGINT, blobs BYTEA, `recorded_at` microseconds
//! since the Unix epoch (the value hashed, so it must round-trip exactly).

use std::path::PathBuf;

use postgres::Client;
use sandlog_eventstore::error::{EventStoreError, Result};

use crate::PgResult;

/// The advisory lock key schema migrations take ("SnLg" and 2), so two
/// processes opening a fresh database at once migrate it once.
pub const MIGRATION_LOCK_KEY: i64 = 0x536E_4C67_0000_0002;

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = 3;

/// The schema version that added the map of stream heads.
const MAP_SCHEMA_VERSION: i64 = 3;

/// The application name in `sandlog_schema`.
const APPLICATION: &str = "sandlog";

/// One SQL script per schema version; `MIGRATIONS[n]` takes version `n` to
/// `n + 1`.
pub const MIGRATIONS: &[&str] = &[
    // 0 → 1: the log, its Merkle tree, checkpoints, blobs, the lock row.
    r#"
    CREATE TABLE events (
        position       BIGINT NOT NULL CONSTRAINT events_pkey PRIMARY KEY,
        stream         TEXT   NOT NULL,
        version        BIGINT NOT NULL,
        event_id       BYTEA  NOT NULL CONSTRAINT events_event_id_key UNIQUE,
        kind           TEXT   NOT NULL,
        schema         BIGINT NOT NULL,
        recorded_at    BIGINT NOT NULL,
        actor          TEXT   NOT NULL,
        correlation_id BYTEA,
        causation_id   BYTEA,
        payload        BYTEA  NOT NULL,
        prev_hash      BYTEA  NOT NULL,
        hash           BYTEA  NOT NULL,
        CONSTRAINT events_stream_version_key UNIQUE (stream, version)
    );
    CREATE INDEX events_by_recorded_at ON events (recorded_at);
    CREATE INDEX events_by_kind ON events (kind, position);
    CREATE FUNCTION sandlog_events_are_append_only() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            RAISE EXCEPTION 'sandlog: events are append-only'
                USING ERRCODE = 'restrict_violation';
        END
        $$;
    CREATE TRIGGER events_are_append_only BEFORE UPDATE OR DELETE ON events
        FOR EACH ROW EXECUTE FUNCTION sandlog_events_are_append_only();
    CREATE TRIGGER events_are_append_only_truncate BEFORE TRUNCATE ON events
        FOR EACH STATEMENT EXECUTE FUNCTION sandlog_events_are_append_only();
    CREATE TABLE merkle_nodes (
        level BIGINT NOT NULL,
        idx   BIGINT NOT NULL,
        hash  BYTEA  NOT NULL,
        CONSTRAINT merkle_nodes_pkey PRIMARY KEY (level, idx)
    );
    CREATE TABLE checkpoints (
        id          BIGSERIAL PRIMARY KEY,
        size        BIGINT NOT NULL,
        root        BYTEA  NOT NULL,
        note        TEXT   NOT NULL,
        recorded_at BIGINT NOT NULL
    );
    CREATE TABLE blob_index (
        hash       BYTEA  PRIMARY KEY,
        size       BIGINT NOT NULL,
        stored     BIGINT NOT NULL,
        chunks     BIGINT NOT NULL,
        created_at BIGINT NOT NULL,
        erased_at  BIGINT
    );
    CREATE TABLE blob_chunks (
        hash       BYTEA  NOT NULL,
        seq        BIGINT NOT NULL,
        codec      BIGINT NOT NULL,
        raw_len    BIGINT NOT NULL,
        chunk_hash BYTEA  NOT NULL,
        data       BYTEA  NOT NULL,
        PRIMARY KEY (hash, seq)
    );
    -- Chunks are zstd frames already: PostgreSQL's own compression would
    -- only spend time.
    ALTER TABLE blob_chunks ALTER COLUMN data SET STORAGE EXTERNAL;
    -- The row AppendLock::HeadRow locks.
    CREATE TABLE append_lock (id BOOLEAN PRIMARY KEY CHECK (id));
    INSERT INTO append_lock (id) VALUES (true);
    "#,
    // 1 → 2: events found by correlation id (`LogFilter::correlation`), as
    // SQLite's schema v4 does.
    r#"
    CREATE INDEX events_by_correlation ON events (correlation_id, position)
        WHERE correlation_id IS NOT NULL;
    "#,
    // 2 → 3: the map of stream heads, as SQLite's schema v6 (see
    // `crate::sqlite::map`); the migration then builds it from the log.
    r#"
    CREATE TABLE map_nodes (
        depth  BIGINT NOT NULL,
        prefix BYTEA  NOT NULL,
        size   BIGINT NOT NULL,
        kind   BIGINT NOT NULL,
        a      BYTEA  NOT NULL,
        b      BYTEA  NOT NULL,
        PRIMARY KEY (depth, prefix, size)
    );
    CREATE TABLE map_roots (
        size BIGINT PRIMARY KEY,
        root BYTEA  NOT NULL
    );
    "#,
];

const _: () = assert!(MIGRATIONS.len() as i64 == SCHEMA_VERSION);

fn foreign(database: &str, reason: &str) -> EventStoreError {
    EventStoreError::NotADatabase {
        path: PathBuf::from(format!("PostgreSQL database {database}")),
        reason: reason.to_owned(),
    }
}

/// Checks the database is sandlog's (or blank) and brings its schema up to
/// date, in one transaction under the migration lock.
pub(crate) fn migrate(client: &mut Client, database: &str) -> Result<()> {
    // Outlives the transaction: the map's rebuild runs in a session.
    let mut statements = crate::StatementCache::default();
    let mut transaction = client.transaction().pg()?;
    transaction
        .execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK_KEY])
        .pg()?;
    let has_schema_table: bool = transaction
        .query_one(
            "SELECT to_regclass('sandlog_schema') IS NOT NULL, to_regclass('events') IS NOT NULL",
            &[],
        )
        .and_then(|row| {
            let schema: bool = row.try_get(0)?;
            let events: bool = row.try_get(1)?;
            Ok((schema, events))
        })
        .map(|(schema, events)| {
            if !schema && events {
                Err(foreign(
                    database,
                    "it has an `events` table but no `sandlog_schema`: another application's; refusing to touch it",
                ))
            } else {
                Ok(schema)
            }
        }).pg()??;
    if !has_schema_table {
        transaction
            .batch_execute(
                "CREATE TABLE sandlog_schema (application TEXT NOT NULL, version BIGINT NOT NULL)",
            )
            .pg()?;
        transaction
            .execute(
                "INSERT INTO sandlog_schema (application, version) VALUES ($1, 0)",
                &[&APPLICATION],
            )
            .pg()?;
    }
    let rows = transaction
        .query("SELECT application, version FROM sandlog_schema", &[])
        .pg()?;
    let [row] = rows.as_slice() else {
        return Err(foreign(
            database,
            "its sandlog_schema table does not hold exactly one row",
        ));
    };
    let application: String = row.try_get(0).pg()?;
    let version: i64 = row.try_get(1).pg()?;
    if application != APPLICATION {
        return Err(foreign(
            database,
            &format!("its sandlog_schema names the application {application:?}"),
        ));
    }
    if version > SCHEMA_VERSION {
        return Err(EventStoreError::SchemaTooNew {
            path: PathBuf::from(format!("PostgreSQL database {database}")),
            found: version,
            supported: SCHEMA_VERSION,
        });
    }
    for (from, script) in MIGRATIONS
        .iter()
        .enumerate()
        .skip(usize::try_from(version).unwrap_or(0))
    {
        tracing::info!(
            from,
            to = from + 1,
            database,
            "migrating the PostgreSQL event store schema"
        );
        transaction.batch_execute(script).pg()?;
    }
    let mut session = crate::Session {
        transaction,
        statements: &mut statements,
    };
    if version < MAP_SCHEMA_VERSION {
        let root = crate::map::rebuild(&mut session)?;
        tracing::info!(root = %root.to_hex(), database, "built the map of stream heads from the log");
    }
    if version < SCHEMA_VERSION {
        session
            .transaction
            .execute("UPDATE sandlog_schema SET version = $1", &[&SCHEMA_VERSION])
            .pg()?;
    }
    session.transaction.commit().pg()?;
    Ok(())
}

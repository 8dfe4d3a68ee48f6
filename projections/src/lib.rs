//! sandlog-projections: everything users ask about sessions, derived from
//! the log.
//!
//! Owns: the pure fold ([`state::apply`]) over sessions, files, metadata
//! timestamps and cleanup statistics; as-of replay ([`replay`]) over any
//! log that streams ([`replay::LogReader`]); the result types of queries
//! ([`query`]) and the prune planner ([`prune`]).
//!
//! The SQL read models (a materialisation of this fold, written inside the
//! append transaction) and the queries over them belong to each backend
//! (`sandlog_sqlite::read_model`, `sandlog_sqlite::query`): this crate
//! imports no database client.
//!
//! Never does: read the clock (callers pass `now`), touch the filesystem,
//! or append events. The fold decides nothing: rules live in the runtime's
//! command handlers and in the pure prune planner.

pub mod describe;
pub mod error;
pub mod evidence;
pub mod prune;
pub mod query;
pub mod replay;
pub mod state;

pub use error::{ProjectionError, Result};
pub use query::{FileView, PrunePlan, SeedMetadata, SessionSummary, StoreStats, TreeNode};
pub use replay::{Cut, LogReader};
pub use state::{CleanupStats, FileEntry, SessionState, SessionStatus, State, apply};

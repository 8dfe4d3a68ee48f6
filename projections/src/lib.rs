//! sandlog-projections: everything users ask about sessions, derived from
//! the log.
//!
//! Owns: the pure fold ([`state::apply`]) over sessions, files, metadata
//! timestamps and cleanup statistics; the SQL read models kept in the log's
//! file and written inside the append transaction ([`read_model`]); rebuild
//! and catch-up; as-of replay ([`replay`]); queries, including prune
//! candidates ([`query`], [`prune`]).
//!
//! The read models and the queries over them are SQLite code and live in
//! [`sqlite`], re-exported here under their usual paths; the fold, the
//! prune planner, replay and the result types import nothing of a backend.
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
pub mod sqlite;
pub mod state;

pub use sqlite::read_model;

pub use error::{ProjectionError, Result};
pub use query::{FileView, PrunePlan, SeedMetadata, SessionSummary, StoreStats, TreeNode};
pub use read_model::{
    CatchUpReport, READ_MODEL_VERSION, catch_up, checkpoint_position, install, install_observed,
    rebuild,
};
pub use replay::Cut;
pub use state::{CleanupStats, FileEntry, SessionState, SessionStatus, State, apply};

//! sandlog-core: the domain vocabulary every other crate speaks.
//!
//! Owns: identifiers ([`SessionId`], [`EventId`], [`StreamId`], [`Position`],
//! [`StreamVersion`]), the event kinds and their payloads ([`event`]), the
//! [`Envelope`] with its canonical byte encoding and hash link, the only
//! validated workspace-relative path ([`WorkspacePath`]), prune policies, the
//! [`Clock`], every named limit, and parsing of human durations and sizes.
//!
//! Never does: I/O of any kind — no files, no database, no wasm, no reading
//! the system clock except through [`SystemClock`], which callers inject.
//! Because it does no I/O, nothing here fails for operational reasons: every
//! error is a rejected input.

pub mod bundle;
pub mod clock;
pub mod correlation;
pub mod cosignature;
pub mod envelope;
pub mod error;
pub mod escape;
pub mod event;
pub mod hash;
pub mod human;
pub mod ids;
pub mod limits;
pub mod map;
pub mod merkle;
pub mod node;
pub mod note;
pub mod path;
pub mod path_error;
pub mod policy;
pub mod time;
pub mod witness;

pub use clock::{Clock, ManualClock, SystemClock};
pub use correlation::correlation_id;
pub use envelope::{Envelope, Hash, NewEvent, append_chain_input, canonical_bytes, chain_hash};
pub use error::{CoreError, ErrorClass};
pub use event::{Event, Outcome, WrittenBy};
pub use hash::NOT_HASHED;
pub use ids::{EventId, Position, SessionId, StreamId, StreamVersion};
pub use path::{PathError, WorkspacePath};
pub use policy::{PrunePolicy, PruneRequest};
pub use time::Timestamp;

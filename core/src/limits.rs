//! Every limit of the vocabulary, named, with units last and a reason each.
//!
//! Limits that relate to each other are checked at compile time below, so a
//! change to one that breaks another fails the build, not production.

/// Longest workspace-relative path, in bytes. Linux's `PATH_MAX` is 4096
/// including the workspace prefix; refusing longer relative paths up front
/// gives a clear error instead of `ENAMETOOLONG` half-way through an
/// operation.
pub const PATH_BYTES_MAX: usize = 4096;

/// Longest single path component, in bytes (Linux's `NAME_MAX`).
pub const PATH_COMPONENT_BYTES_MAX: usize = 255;

/// Deepest nesting of a workspace path, in components. Bounds recursion in
/// tree listings and deletes; 4096 bytes cannot hold more than 2048
/// components anyway.
pub const PATH_DEPTH_MAX: usize = 2048;

/// Largest event payload, in bytes. Payloads are metadata (paths, hashes,
/// counts); contents go to blobs. A bound keeps a single row, and the
/// memory of reading one, small.
pub const PAYLOAD_BYTES_MAX: usize = 1024 * 1024;

/// Largest blob (file content or code), in bytes. A host write of more is
/// refused; the default workspace quota is smaller anyway.
pub const BLOB_BYTES_MAX: usize = 256 * 1024 * 1024;

/// Most events in one atomic append. A batch is one SQLite transaction held
/// under the write lock; bounding it bounds how long other writers wait.
pub const BATCH_EVENTS_MAX: usize = 100_000;

/// Longest actor name, in bytes.
pub const ACTOR_BYTES_MAX: usize = 256;

/// Longest event kind name, in bytes.
pub const KIND_BYTES_MAX: usize = 128;

/// Longest correlation text (a task id mapped to a correlation id, see
/// [`crate::correlation`]), in bytes. Task ids, ticket numbers and URLs
/// fit; only the UUID is stored, so the bound only keeps a mistaken
/// argument (a file's contents) from being taken for a name.
pub const CORRELATION_TEXT_BYTES_MAX: usize = 256;

/// Longest node name (the host a session's workspace lives on, see
/// [`crate::node`]), in bytes: a host name's first label is at most 63.
pub const NODE_NAME_BYTES_MAX: usize = 64;

/// Most labels on one session, and longest label key / value in bytes.
pub const LABELS_MAX: usize = 64;
/// Longest label key or value, in bytes.
pub const LABEL_BYTES_MAX: usize = 256;

const _: () = assert!(PAYLOAD_BYTES_MAX <= BLOB_BYTES_MAX);
const _: () = assert!(PATH_COMPONENT_BYTES_MAX <= PATH_BYTES_MAX);
const _: () = assert!(PATH_DEPTH_MAX * 2 <= PATH_BYTES_MAX);
// A label set must fit in one payload with room for the rest of the event.
const _: () = assert!(LABELS_MAX * LABEL_BYTES_MAX * 2 * 2 <= PAYLOAD_BYTES_MAX);

/// Longest text form of a workspace path, in bytes. The text form writes a
/// byte that is not UTF-8 as the four characters `\xHH`, so a path of
/// [`PATH_BYTES_MAX`] bytes on disk can take four times as much text; a
/// longer input is refused as too long before it is decoded.
pub const PATH_TEXT_BYTES_MAX: usize = 4 * PATH_BYTES_MAX;

// A path at its longest text still fits in one payload, with room for the
// rest of the event (JSON may escape each of its characters again).
const _: () = assert!(PATH_TEXT_BYTES_MAX * 6 <= PAYLOAD_BYTES_MAX);

/// Most drift items in one `workspace.drift.detected` event.
///
/// Why 1,000: an item is a path (at most `PATH_BYTES_MAX`) and up to two
/// hashes, a few hundred bytes typically; a thousand keeps an event far
/// below `PAYLOAD_BYTES_MAX` while a big drift takes few events. A
/// detection with more items is split over several events appended in one
/// batch (each event is also kept under `DRIFT_EVENT_BYTES_MAX`).
pub const DRIFT_ITEMS_PER_EVENT_MAX: usize = 1_000;

/// Most payload bytes one `workspace.drift.detected` event is filled to
/// before the rest of the detection goes to the next event: half the
/// payload limit, leaving room for the event's other fields.
pub const DRIFT_EVENT_BYTES_MAX: usize = PAYLOAD_BYTES_MAX / 2;

/// Most drift items recorded for one session by one reconcile run.
///
/// Why 100,000: a workspace changed behind sandlog's back can hold
/// millions of files, and recording each would grow the log without bound.
/// Past it the detection is summarised: the first items are recorded and
/// every event of the detection carries the total and a digest of all
/// items.
pub const DRIFT_ITEMS_MAX: usize = 100_000;

const _: () = assert!(DRIFT_ITEMS_PER_EVENT_MAX <= DRIFT_ITEMS_MAX);
// A drift item (a path and two hashes, JSON-escaped) fits in one event.
const _: () = assert!(PATH_BYTES_MAX * 6 + 1024 <= DRIFT_EVENT_BYTES_MAX);
// Even at one item per event, a whole detection is one append.
const _: () = assert!(DRIFT_ITEMS_MAX <= BATCH_EVENTS_MAX);

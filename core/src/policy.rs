//! [`PrunePolicy`]: what a prune run may delete.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A prune policy (P1, P6). A session is a candidate when it is active, has
/// timestamps (legacy sessions never are), and its age from `updated_at` is
/// at least `older_than`. Retention limits then add the oldest remaining
/// sessions until the survivors fit; `max_deletions` caps the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct PrunePolicy {
    /// Minimum age from `updated_at`, microseconds. A session exactly this
    /// old is a candidate (age ≥ threshold).
    #[serde(rename = "older_than_us", with = "duration_micros")]
    pub older_than: Duration,
    /// Delete at most this many sessions in one run (the oldest first).
    pub max_deletions: Option<u64>,
    /// Keep at most this many active sessions; delete the oldest beyond it.
    pub max_sessions: Option<u64>,
    /// Keep at most this many bytes in active sessions; delete the oldest
    /// until the rest fit.
    pub max_total_bytes: Option<u64>,
    /// Only sessions of this task group: candidates, and the totals the
    /// retention limits count, are the group's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Only sessions of this node (and those that record none): a node of
    /// a shared log prunes the workspaces on its own disk, and the
    /// retention limits count its sessions only (see [`crate::node`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

impl PrunePolicy {
    /// Age-only policy.
    pub fn older_than(older_than: Duration) -> Self {
        PrunePolicy {
            older_than,
            ..PrunePolicy::default()
        }
    }
}

mod duration_micros {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(u64::try_from(duration.as_micros()).unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        u64::deserialize(deserializer).map(Duration::from_micros)
    }
}

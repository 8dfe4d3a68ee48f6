//! [`PrunePolicy`]: what a prune run may delete.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::CoreError;

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

/// What a caller asks a prune to select, as each front end receives it
/// (the CLI's flags, HTTP's body, Python's arguments), before
/// [`PrunePolicy::new`] checks it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PruneRequest {
    /// Select sessions idle at least this long; `None`: age selects
    /// nothing, the caps select alone.
    pub older_than: Option<Duration>,
    /// Delete at most this many sessions in one run.
    pub max_deletions: Option<u64>,
    /// Keep at most this many active sessions.
    pub max_sessions: Option<u64>,
    /// Keep at most this many bytes in active sessions.
    pub max_total_bytes: Option<u64>,
    /// Only this task group's sessions.
    pub group: Option<String>,
}

/// The age threshold of a policy selected by its caps alone: no session
/// is ever this old, so age selects nothing.
pub const AGE_SELECTS_NOTHING: Duration = Duration::MAX;

impl PrunePolicy {
    /// The one rule every front end's prune request follows: it must
    /// select something, by age (`older_than`) or by a retention cap
    /// (`max_sessions`, `max_total_bytes`), each alone or together;
    /// `max_deletions` only caps a run, so alone it is refused with
    /// [`CoreError::NothingToPrune`]. Without an age the caps select alone
    /// ([`AGE_SELECTS_NOTHING`]). The policy covers every node's sessions
    /// (a node's own prune narrows it).
    pub fn new(request: PruneRequest) -> Result<PrunePolicy, CoreError> {
        let PruneRequest {
            older_than,
            max_deletions,
            max_sessions,
            max_total_bytes,
            group,
        } = request;
        if older_than.is_none() && max_sessions.is_none() && max_total_bytes.is_none() {
            return Err(CoreError::NothingToPrune);
        }
        Ok(PrunePolicy {
            older_than: older_than.unwrap_or(AGE_SELECTS_NOTHING),
            max_deletions,
            max_sessions,
            max_total_bytes,
            group,
            node: None,
        })
    }

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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{AGE_SELECTS_NOTHING, PrunePolicy, PruneRequest};
    use crate::CoreError;

    /// Goal: the rule of `PrunePolicy::new`. Method: each selector alone is
    /// accepted, caps alone leave age selecting nothing, and a request
    /// with nothing but `max_deletions` (or nothing) is refused.
    #[test]
    fn a_prune_request_must_select_something() {
        let by_age = PrunePolicy::new(PruneRequest {
            older_than: Some(Duration::from_secs(60)),
            ..PruneRequest::default()
        });
        assert_eq!(by_age, Ok(PrunePolicy::older_than(Duration::from_secs(60))));
        let by_cap = PrunePolicy::new(PruneRequest {
            max_sessions: Some(3),
            group: Some("g".to_owned()),
            ..PruneRequest::default()
        });
        assert_eq!(
            by_cap,
            Ok(PrunePolicy {
                older_than: AGE_SELECTS_NOTHING,
                max_sessions: Some(3),
                group: Some("g".to_owned()),
                ..PrunePolicy::default()
            })
        );
        let by_bytes = PrunePolicy::new(PruneRequest {
            max_total_bytes: Some(1),
            ..PruneRequest::default()
        });
        assert!(by_bytes.is_ok());
        for nothing in [
            PruneRequest::default(),
            PruneRequest {
                max_deletions: Some(5),
                ..PruneRequest::default()
            },
        ] {
            assert_eq!(PrunePolicy::new(nothing), Err(CoreError::NothingToPrune));
        }
    }
}

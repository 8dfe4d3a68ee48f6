//! Prune candidates for a policy: a pure planner fed oldest-first.
//!
//! The planner never sees the clock: `now` is handed in. It never sees the
//! disk either: sizes are the projected ones (the runtime measures the real
//! size just before deleting).

use std::time::Duration;

use sandlog_core::{PrunePolicy, SessionId, StreamVersion, Timestamp};
use serde::Serialize;

/// An active, non-legacy session offered to the planner, oldest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActiveSession {
    /// Id.
    pub session_id: SessionId,
    /// Last activity.
    pub updated_at: Timestamp,
    /// Projected size.
    pub bytes: u64,
    /// Stream version when read: the prune intent expects it (P7).
    pub version: StreamVersion,
}

/// Why a session was selected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SelectedBy {
    /// Its age reached `older_than`.
    Age,
    /// More active sessions than `max_sessions`.
    MaxSessions,
    /// More active bytes than `max_total_bytes`.
    MaxTotalBytes,
}

/// A session a prune run would delete.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PruneCandidate {
    /// Id.
    pub session_id: SessionId,
    /// Last activity.
    pub updated_at: Timestamp,
    /// `now - updated_at`, microseconds.
    pub age_us: u64,
    /// Projected size.
    pub bytes: u64,
    /// Stream version when read.
    #[serde(skip)]
    pub version: StreamVersion,
    /// Why.
    pub selected_by: SelectedBy,
}

impl PruneCandidate {
    /// The age as a duration.
    pub fn age(&self) -> Duration {
        Duration::from_micros(self.age_us)
    }
}

/// A session a prune run leaves alone on purpose, with the reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SkippedSession {
    /// Id.
    pub session_id: SessionId,
    /// Why.
    pub reason: String,
}

/// The reason prune gives for a session under a legal hold.
pub const HELD_SKIP_REASON: &str = "held";

/// The reason recorded for legacy sessions (P1).
pub const LEGACY_SKIP_REASON: &str = "legacy session without valid metadata: never pruned";

/// The planner's state. Feed sessions oldest first with
/// [`PrunePlanner::offer`] until it returns `false`.
///
/// Selection (P1, P6): a session is selected if its age is at least
/// `older_than` (a session exactly that old is selected), or while more
/// than `max_sessions` active sessions would remain, or while more than
/// `max_total_bytes` would remain — whichever holds, oldest first, and at
/// most `max_deletions` in all. Legacy sessions count towards the totals
/// (they use the space) but are never selected.
#[derive(Debug, Clone)]
pub struct PrunePlanner {
    policy: PrunePolicy,
    now: Timestamp,
    remaining_sessions: u64,
    remaining_bytes: u64,
    selected: Vec<PruneCandidate>,
}

impl PrunePlanner {
    /// A planner over `active_sessions` sessions holding `active_bytes`
    /// (legacy included).
    pub fn new(
        policy: PrunePolicy,
        now: Timestamp,
        active_sessions: u64,
        active_bytes: u64,
    ) -> Self {
        PrunePlanner {
            policy,
            now,
            remaining_sessions: active_sessions,
            remaining_bytes: active_bytes,
            selected: Vec::new(),
        }
    }

    /// Whether the totals matter (a retention limit is set); if not, the
    /// caller can skip counting them.
    pub fn needs_totals(policy: &PrunePolicy) -> bool {
        policy.max_sessions.is_some() || policy.max_total_bytes.is_some()
    }

    /// Offers the next-oldest session; returns whether to go on.
    pub fn offer(&mut self, session: ActiveSession) -> bool {
        if self
            .policy
            .max_deletions
            .is_some_and(|max| self.selected.len() as u64 >= max)
        {
            return false;
        }
        let age = self.now.duration_since(session.updated_at);
        let selected_by = if age >= self.policy.older_than {
            SelectedBy::Age
        } else if self
            .policy
            .max_sessions
            .is_some_and(|max| self.remaining_sessions > max)
        {
            SelectedBy::MaxSessions
        } else if self
            .policy
            .max_total_bytes
            .is_some_and(|max| self.remaining_bytes > max)
        {
            SelectedBy::MaxTotalBytes
        } else {
            // Oldest first: no later session is older, and the retention
            // conditions only get easier as sessions are selected.
            return false;
        };
        self.remaining_sessions = self.remaining_sessions.saturating_sub(1);
        self.remaining_bytes = self.remaining_bytes.saturating_sub(session.bytes);
        self.selected.push(PruneCandidate {
            session_id: session.session_id,
            updated_at: session.updated_at,
            age_us: u64::try_from(age.as_micros()).unwrap_or(u64::MAX),
            bytes: session.bytes,
            version: session.version,
            selected_by,
        });
        if self
            .policy
            .max_deletions
            .is_some_and(|max| self.selected.len() as u64 >= max)
        {
            return false;
        }
        true
    }

    /// The selected candidates, oldest first.
    pub fn finish(self) -> Vec<PruneCandidate> {
        self.selected
    }
}

/// Plans over an in-memory list (any order); for as-of replay and tests.
pub fn plan(
    policy: &PrunePolicy,
    now: Timestamp,
    sessions: &[(ActiveSession, bool)],
) -> (Vec<PruneCandidate>, Vec<SkippedSession>) {
    let total_bytes = sessions.iter().map(|(session, _)| session.bytes).sum();
    let mut planner = PrunePlanner::new(policy.clone(), now, sessions.len() as u64, total_bytes);
    let mut deletable: Vec<&ActiveSession> = sessions
        .iter()
        .filter(|(_, legacy)| !legacy)
        .map(|(session, _)| session)
        .collect();
    deletable.sort_by_key(|session| (session.updated_at, session.session_id));
    for session in deletable {
        if !planner.offer(*session) {
            break;
        }
    }
    let skipped = sessions
        .iter()
        .filter(|(_, legacy)| *legacy)
        .map(|(session, _)| SkippedSession {
            session_id: session.session_id,
            reason: LEGACY_SKIP_REASON.to_owned(),
        })
        .collect();
    (planner.finish(), skipped)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(age_hours: u64, bytes: u64, now: Timestamp) -> ActiveSession {
        ActiveSession {
            session_id: SessionId::new_v4(),
            updated_at: now.saturating_sub(Duration::from_secs(age_hours * 3600)),
            bytes,
            version: StreamVersion(1),
        }
    }

    #[test]
    fn threshold_is_inclusive() {
        let now = Timestamp::from_unix_micros(1_000_000_000_000);
        let exactly = session(24, 1, now);
        let younger = ActiveSession {
            updated_at: exactly.updated_at.saturating_add(Duration::from_micros(1)),
            ..session(0, 1, now)
        };
        let (candidates, _) = plan(
            &PrunePolicy::older_than(Duration::from_secs(24 * 3600)),
            now,
            &[(exactly, false), (younger, false)],
        );
        assert_eq!(
            candidates.iter().map(|c| c.session_id).collect::<Vec<_>>(),
            vec![exactly.session_id]
        );
    }

    #[test]
    fn retention_by_count_and_bytes_takes_oldest_first() {
        let now = Timestamp::from_unix_micros(1_000_000_000_000);
        let sessions: Vec<_> = (1..=5)
            .rev()
            .map(|hours| (session(hours, 10, now), false))
            .collect();
        let policy = PrunePolicy {
            older_than: Duration::from_secs(100 * 3600),
            max_sessions: Some(3),
            ..PrunePolicy::default()
        };
        let (candidates, _) = plan(&policy, now, &sessions);
        assert_eq!(candidates.len(), 2);
        assert_eq!(candidates[0].session_id, sessions[0].0.session_id);
        assert!(
            candidates
                .iter()
                .all(|c| c.selected_by == SelectedBy::MaxSessions)
        );
        let policy = PrunePolicy {
            older_than: Duration::from_secs(100 * 3600),
            max_total_bytes: Some(25),
            ..PrunePolicy::default()
        };
        let (candidates, _) = plan(&policy, now, &sessions);
        assert_eq!(candidates.len(), 3);
    }
}

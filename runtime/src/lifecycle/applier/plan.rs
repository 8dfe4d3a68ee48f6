//! `plan(projected, observed) -> Vec<Action>`: the applier's pure core.
//!
//! Given what the log says (each session's status, and with `deep` its
//! files) and what the disk shows (the entries of `workspaces/`, and with
//! `deep` each live workspace's files), it lists what to do. Executing the
//! actions and observing again yields an empty plan: that is the property
//! test.

use std::collections::{BTreeMap, BTreeSet};

use sandlog_core::event::Drift;
use sandlog_core::{Hash, SessionId, WorkspacePath};
use sandlog_projections::SessionStatus;
use serde::Serialize;

/// One session as the log says it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectedSession {
    /// Status.
    pub status: SessionStatus,
    /// Files and their hashes (only for `deep`; `None` otherwise).
    pub files: Option<BTreeMap<WorkspacePath, Hash>>,
    /// The drift last recorded for it (so a run does not report the same
    /// drift again: the applier is idempotent).
    pub last_drift: Vec<Drift>,
}

/// What the disk shows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed {
    /// UUID-named directories under `workspaces/`, old enough to judge
    /// (younger ones may be a session being created right now).
    pub session_dirs: BTreeSet<SessionId>,
    /// UUID-named directories too young to judge: never orphans yet, but
    /// they do count as present.
    pub young_dirs: BTreeSet<SessionId>,
    /// Other entries, left alone (P5).
    pub ignored: BTreeSet<String>,
    /// Files and hashes of live workspaces (only for `deep`).
    pub files: BTreeMap<SessionId, BTreeMap<WorkspacePath, Hash>>,
}

/// Which pending intent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Intent {
    /// `session.prune.requested` without completion.
    Prune,
    /// `session.delete.requested` without completion.
    Delete,
}

/// One thing to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Action {
    /// Finish a pending intent.
    FinishIntent {
        /// The session.
        session_id: SessionId,
        /// Which.
        intent: Intent,
    },
    /// Move an orphan directory to `quarantine/` (or purge it).
    Orphan {
        /// The directory name (a UUID).
        dir_name: SessionId,
        /// Whether the log knows the session (pruned or deleted, but its
        /// directory is back or was never removed).
        known: bool,
    },
    /// Record drift.
    RecordDrift {
        /// The session.
        session_id: SessionId,
        /// What differs.
        drift: Vec<Drift>,
    },
}

/// Compares `projected` with `observed`.
pub fn plan(projected: &BTreeMap<SessionId, ProjectedSession>, observed: &Observed) -> Vec<Action> {
    let mut actions = Vec::new();
    for (session_id, session) in projected {
        let on_disk =
            observed.session_dirs.contains(session_id) || observed.young_dirs.contains(session_id);
        match session.status {
            SessionStatus::Pruning => actions.push(Action::FinishIntent {
                session_id: *session_id,
                intent: Intent::Prune,
            }),
            SessionStatus::Deleting => actions.push(Action::FinishIntent {
                session_id: *session_id,
                intent: Intent::Delete,
            }),
            SessionStatus::Active => {
                let drift = if on_disk {
                    match (&session.files, observed.files.get(session_id)) {
                        (Some(expected), Some(actual)) => file_drift(expected, actual),
                        _ => Vec::new(),
                    }
                } else {
                    vec![Drift::MissingDirectory]
                };
                if !drift.is_empty() && drift != session.last_drift {
                    actions.push(Action::RecordDrift {
                        session_id: *session_id,
                        drift,
                    });
                }
            }
            SessionStatus::Pruned | SessionStatus::Deleted => {}
        }
    }
    for dir_name in &observed.session_dirs {
        let known = projected.get(dir_name);
        if known.is_none_or(|session| !session.status.has_workspace()) {
            actions.push(Action::Orphan {
                dir_name: *dir_name,
                known: known.is_some(),
            });
        }
    }
    actions
}

fn file_drift(
    expected: &BTreeMap<WorkspacePath, Hash>,
    actual: &BTreeMap<WorkspacePath, Hash>,
) -> Vec<Drift> {
    let mut drift = Vec::new();
    for (path, expected_hash) in expected {
        match actual.get(path) {
            None => drift.push(Drift::FileMissing {
                path: path.clone(),
                expected: *expected_hash,
            }),
            Some(actual_hash) if actual_hash != expected_hash => drift.push(Drift::FileChanged {
                path: path.clone(),
                expected: *expected_hash,
                actual: *actual_hash,
            }),
            Some(_) => {}
        }
    }
    for (path, actual_hash) in actual {
        if !expected.contains_key(path) {
            drift.push(Drift::FileUnexpected {
                path: path.clone(),
                actual: *actual_hash,
            });
        }
    }
    drift
}

/// What executing `actions` does, as a pure model: the contract the real
/// executor keeps, and what the idempotence property test runs.
pub fn model_execute(
    actions: &[Action],
    projected: &mut BTreeMap<SessionId, ProjectedSession>,
    observed: &mut Observed,
) {
    for action in actions {
        match action {
            Action::FinishIntent { session_id, intent } => {
                if let Some(session) = projected.get_mut(session_id) {
                    session.status = match intent {
                        Intent::Prune => SessionStatus::Pruned,
                        Intent::Delete => SessionStatus::Deleted,
                    };
                }
                observed.session_dirs.remove(session_id);
                observed.young_dirs.remove(session_id);
                observed.files.remove(session_id);
            }
            Action::Orphan { dir_name, .. } => {
                observed.session_dirs.remove(dir_name);
                observed.files.remove(dir_name);
            }
            Action::RecordDrift { session_id, drift } => {
                if let Some(session) = projected.get_mut(session_id) {
                    session.last_drift = drift.clone();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn status() -> impl Strategy<Value = SessionStatus> {
        prop_oneof![
            Just(SessionStatus::Active),
            Just(SessionStatus::Pruning),
            Just(SessionStatus::Pruned),
            Just(SessionStatus::Deleting),
            Just(SessionStatus::Deleted),
        ]
    }

    fn files() -> impl Strategy<Value = BTreeMap<WorkspacePath, Hash>> {
        proptest::collection::btree_map(
            prop_oneof![Just("a"), Just("b/c"), Just("d.txt")]
                .prop_map(|p| WorkspacePath::parse(p).unwrap()),
            prop_oneof![Just(Hash::of(b"1")), Just(Hash::of(b"2"))],
            0..3,
        )
    }

    /// Sessions known to the log and directories on disk, drawn from one
    /// small pool of ids so they overlap.
    fn world() -> impl Strategy<Value = (BTreeMap<SessionId, ProjectedSession>, Observed)> {
        let ids: Vec<SessionId> = (0..6).map(|_| SessionId::new_v4()).collect();
        let ids_for_projection = ids.clone();
        (
            proptest::collection::vec((status(), proptest::option::of(files()), any::<bool>()), 6),
            proptest::collection::vec((any::<bool>(), any::<bool>(), files()), 6),
        )
            .prop_map(move |(sessions, disk)| {
                let mut projected = BTreeMap::new();
                for (id, (status, files, known)) in ids_for_projection.iter().zip(sessions) {
                    if known {
                        projected.insert(
                            *id,
                            ProjectedSession {
                                status,
                                files,
                                last_drift: Vec::new(),
                            },
                        );
                    }
                }
                let mut observed = Observed::default();
                for (id, (present, young, files)) in ids.iter().zip(disk) {
                    if present {
                        if young {
                            observed.young_dirs.insert(*id);
                        } else {
                            observed.session_dirs.insert(*id);
                        }
                        observed.files.insert(*id, files);
                    }
                }
                observed.ignored.insert("not-a-uuid".to_owned());
                (projected, observed)
            })
    }

    proptest! {
        /// C1: planning, executing, and planning again yields nothing.
        #[test]
        fn second_plan_is_empty((mut projected, mut observed) in world()) {
            let actions = plan(&projected, &observed);
            model_execute(&actions, &mut projected, &mut observed);
            let again = plan(&projected, &observed);
            prop_assert!(again.is_empty(), "second plan: {:?}", again);
        }

        /// P5: entries that are not UUID-named are never acted on, and a
        /// directory of a live session is never an orphan.
        #[test]
        fn never_touches_live_sessions_or_foreign_entries((projected, observed) in world()) {
            for action in plan(&projected, &observed) {
                if let Action::Orphan { dir_name, .. } = action {
                    let live = projected.get(&dir_name).is_some_and(|s| s.status.has_workspace());
                    prop_assert!(!live);
                    prop_assert!(!observed.young_dirs.contains(&dir_name));
                }
            }
        }
    }
}

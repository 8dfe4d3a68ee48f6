//! Projections (issue 3): the pure fold, the inline SQL read models, rebuild
//! and catch-up, as-of replay, queries and prune candidates, checked against
//! each other and against the rules of M1, M2, M4, P1, P5, P6, A2, C2, C3.
//!
//! Every test drives a real `EventStore` in a temporary directory whose
//! `ManualClock` only moves when the test says so, so every timestamp below
//! is exact.

#![cfg(test)]

use std::collections::BTreeMap;
use std::time::Duration;

use proptest::prelude::*;
use sandlog_core::event::{MetadataStatus, Outcome, WrittenBy};
use sandlog_core::{Position, PrunePolicy, SessionId, StreamId, Timestamp};
use sandlog_eventstore::ExpectedVersion;
use sandlog_projections::prune::{self, ActiveSession, LEGACY_SKIP_REASON, SelectedBy};
use sandlog_projections::replay::{self, Cut};
use sandlog_projections::{ProjectionError, SessionStatus, State};
use sandlog_sqlite::query::{self, FileView, TreeNode};
use sandlog_sqlite::{CatchUpReport, READ_MODEL_VERSION, SqlResult, checkpoint_position, rebuild};
use sandlog_tests::events::{
    DAY, HISTORY_SESSIONS, HOUR, ProjectionStore, Step, T0, TestResult, UNKNOWN_KIND, adopted,
    created, created_with_labels, delete_requested, executed, file_deleted, hash_of, history,
    new_events, orphan_purged, orphan_quarantined, path, plan_history, prune_failed,
    prune_requested, prune_run_completed, pruned, reconcile_run_completed, session_deleted,
    stats_of, unknown_event, written,
};

/// The time `micros` after (or before, if negative) `instant`.
fn shifted(instant: Timestamp, micros: i64) -> Timestamp {
    Timestamp::from_unix_micros(instant.unix_micros().saturating_add(micros))
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

/// Asserts that the read model holds exactly what the in-memory fold of the
/// whole log holds: every session field by field (files included), the
/// statistics, and the checkpoint.
fn assert_read_model_matches_fold(harness: &ProjectionStore) -> TestResult<State> {
    let state = harness.fold()?;
    let read_model = query::all_sessions_with_files(&harness.store)?;
    assert_eq!(
        read_model.keys().collect::<Vec<_>>(),
        state.sessions.keys().collect::<Vec<_>>(),
        "the same sessions"
    );
    for (session_id, expected) in &state.sessions {
        assert_eq!(
            read_model.get(session_id),
            Some(expected),
            "session {session_id}"
        );
    }
    assert_eq!(query::stats(&harness.store)?, stats_of(&state));
    assert_eq!(checkpoint_position(&harness.store)?, state.position);
    assert_eq!(state.position, harness.store.head()?.position);
    Ok(state)
}

/// Asserts that the SQL prune query (an index walk starting from the
/// totals the read model keeps) plans exactly what the pure planner plans
/// over the fold's active sessions, for age and retention policies (P1,
/// P6).
fn assert_prune_matches_pure_planner(harness: &ProjectionStore, state: &State) -> TestResult {
    let active: Vec<(ActiveSession, bool)> = state
        .sessions
        .values()
        .filter(|session| session.status == SessionStatus::Active)
        .map(|session| {
            let offered = ActiveSession {
                session_id: session.session_id,
                updated_at: session.updated_at.unwrap_or(Timestamp::EPOCH),
                bytes: session.bytes,
                version: session.version,
            };
            (offered, session.legacy)
        })
        .collect();
    let now = harness.now();
    for policy in [
        PrunePolicy::older_than(HOUR),
        PrunePolicy {
            older_than: DAY * 365,
            max_sessions: Some(1),
            ..PrunePolicy::default()
        },
        PrunePolicy {
            older_than: DAY * 365,
            max_total_bytes: Some(5_000),
            max_deletions: Some(2),
            ..PrunePolicy::default()
        },
    ] {
        let (candidates, skipped) = prune::plan(&policy, now, &active);
        let from_sql = query::prune_candidates(&harness.store, &policy, now)?;
        assert_eq!(from_sql.candidates, candidates, "{policy:?}");
        assert_eq!(from_sql.skipped, skipped, "{policy:?}");
    }
    Ok(())
}

/// The (id, age, bytes, reason) of each candidate, in order.
fn candidate_rows(plan: &query::PrunePlan) -> Vec<(SessionId, u64, u64, SelectedBy)> {
    plan.candidates
        .iter()
        .map(|candidate| {
            (
                candidate.session_id,
                candidate.age_us,
                candidate.bytes,
                candidate.selected_by,
            )
        })
        .collect()
}

// ---------------------------------------------------------------------------
// Properties.

/// Runs one random history through a real store with the read-model hook
/// and checks every equality the projections promise.
fn check_history(steps: &[Step]) -> TestResult {
    let sessions: [SessionId; HISTORY_SESSIONS] = std::array::from_fn(|_| SessionId::new_v4());
    let appends = plan_history(steps, &sessions);
    let harness = ProjectionStore::new(true)?;

    // M2 on the inline read model after every append: created_at never
    // changes once set, updated_at never decreases.
    let mut seen: BTreeMap<SessionId, (Option<Timestamp>, Option<Timestamp>)> = BTreeMap::new();
    for append in &appends {
        harness
            .clock
            .set(shifted(harness.now(), append.clock_delta_us));
        harness
            .store
            .append(append.stream, ExpectedVersion::Any, &append.events)?;
        for summary in query::sessions(&harness.store, None)? {
            if let Some((created_at, updated_at)) = seen.get(&summary.session_id) {
                if created_at.is_some() {
                    assert_eq!(summary.created_at, *created_at, "created_at changed");
                }
                if updated_at.is_some() {
                    assert!(summary.updated_at >= *updated_at, "updated_at went back");
                }
            }
            seen.insert(summary.session_id, (summary.created_at, summary.updated_at));
        }
    }

    // The same two rules on the in-memory fold, event by event.
    let envelopes = harness.envelopes()?;
    let mut state = State::default();
    for envelope in &envelopes {
        let before = state.sessions.clone();
        sandlog_projections::apply(&mut state, envelope);
        for (session_id, after) in &state.sessions {
            let Some(before) = before.get(session_id) else {
                // Adopted sessions bring their own pair (or none).
                if envelope.kind == "session.created" {
                    assert_eq!(after.created_at, after.updated_at, "M1 at creation");
                }
                continue;
            };
            if before.created_at.is_some() {
                assert_eq!(after.created_at, before.created_at, "created_at changed");
            }
            if before.updated_at.is_some() {
                assert!(
                    after.updated_at >= before.updated_at,
                    "updated_at went back"
                );
            }
        }
    }
    assert_eq!(state, State::fold(&envelopes));

    // (1) fold == (2) inline read model.
    assert_eq!(assert_read_model_matches_fold(&harness)?, state);

    // As-of replay at the head is the live state; per session too.
    let head = harness.store.head()?.position;
    assert_eq!(
        replay::state_at(&harness.store, Cut::Position(head))?,
        state
    );
    for session_id in sessions {
        assert_eq!(
            replay::session_at(&harness.store, session_id, Cut::Position(head))?,
            state.sessions.get(&session_id).cloned()
        );
    }
    // A time cut in the middle is the fold of the events recorded by then.
    if let Some(middle) = envelopes.get(envelopes.len() / 2) {
        let expected = State::fold(
            envelopes
                .iter()
                .filter(|envelope| envelope.recorded_at <= middle.recorded_at),
        );
        assert_eq!(
            replay::state_at(&harness.store, Cut::Time(middle.recorded_at))?,
            expected
        );
    }

    // P1: with no age threshold every active session with timestamps is a
    // candidate, and every active legacy one is skipped instead.
    let plan = query::prune_candidates(
        &harness.store,
        &PrunePolicy::older_than(Duration::ZERO),
        harness.now(),
    )?;
    let active = |legacy: bool| {
        state
            .sessions
            .values()
            .filter(move |session| {
                session.status == SessionStatus::Active && session.legacy == legacy
            })
            .map(|session| session.session_id)
    };
    let mut candidates: Vec<SessionId> = plan.candidates.iter().map(|c| c.session_id).collect();
    candidates.sort();
    assert_eq!(candidates, active(false).collect::<Vec<_>>());
    let skipped: Vec<SessionId> = plan.skipped.iter().map(|s| s.session_id).collect();
    assert_eq!(skipped, active(true).collect::<Vec<_>>());

    assert_prune_matches_pure_planner(&harness, &state)?;

    // (3) rebuild from position 0 == fold.
    assert_eq!(rebuild(&harness.store)?, envelopes.len() as u64);
    assert_eq!(assert_read_model_matches_fold(&harness)?, state);
    assert_prune_matches_pure_planner(&harness, &state)?;
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    /// Goal: the three ways of computing the projection agree (M1, M2, M4,
    /// P1, A2, C2). Method: random valid histories over four sessions
    /// (created or adopted with valid, missing or corrupted metadata;
    /// executions of every outcome; host, guest and adoption writes and
    /// deletes of nested paths and whole directories; prune and delete
    /// intents that complete, fail or stay pending; drift; unknown future
    /// kinds; `system` stream runs and orphans) are appended in random
    /// batches through a store with the read-model hook, while a manual
    /// clock moves forward and sometimes back. Then the in-memory fold, the
    /// inline SQL read model and a rebuild from position 0 must hold the
    /// same sessions (field by field, files included) and statistics;
    /// replay at the head must equal the live state; `created_at` must never
    /// change once set and `updated_at` never decrease, after every append
    /// and after every event.
    #[test]
    fn fold_read_model_and_rebuild_agree_on_random_histories(steps in history(48)) {
        check_history(&steps).map_err(|error| TestCaseError::fail(error.to_string()))?;
    }
}

// ---------------------------------------------------------------------------
// Rules of the fold.

/// Goal: a new session's metadata is `created_at == updated_at` (M1), in
/// the seed's JSON shape. Method: create a session at the known instant
/// `T0` and read it back from the read model and the fold.
#[test]
fn created_session_has_equal_created_and_updated_at() -> TestResult {
    let harness = ProjectionStore::new(true)?;
    let session_id = SessionId::new_v4();
    harness.append_to(
        session_id,
        &[created_with_labels(session_id, &[("owner", "ana")])],
    )?;

    let summary = query::session(&harness.store, session_id)?.unwrap();
    assert_eq!(summary.created_at, Some(T0));
    assert_eq!(summary.updated_at, Some(T0));
    assert_eq!(summary.status, SessionStatus::Active);
    assert_eq!(summary.exec_count, 0);
    assert_eq!(summary.bytes, 0);
    assert_eq!(summary.file_count, 0);
    assert!(!summary.legacy);
    assert_eq!(
        summary.labels,
        BTreeMap::from([("owner".to_owned(), "ana".to_owned())])
    );
    assert_eq!(
        serde_json::to_string(&summary.seed_metadata())?,
        format!(
            r#"{{"session_id":"{session_id}","created_at":"2025-11-22T10:15:30.123456Z","updated_at":"2025-11-22T10:15:30.123456Z","version":1}}"#
        )
    );
    assert_read_model_matches_fold(&harness)?;
    Ok(())
}

/// Goal: `updated_at` moves on a successful execution and on host writes
/// and deletes, and on nothing else (M2); `created_at` never moves.
/// Method: one session, the clock one hour further before each event;
/// after each, the exact expected `updated_at`.
#[test]
fn updated_at_moves_on_successful_execution_and_host_write_only() -> TestResult {
    let harness = ProjectionStore::new(true)?;
    let session_id = harness.create_session()?;
    let notes = path("notes/today.md")?;
    let scratch = path("scratch.txt")?;
    let updated_at = || -> TestResult<Option<Timestamp>> {
        Ok(query::session(&harness.store, session_id)?
            .unwrap()
            .updated_at)
    };

    let mut expected = T0;
    let mut hours = 0;
    let mut step = |event, moves: bool| -> TestResult {
        hours += 1;
        harness.advance(HOUR);
        harness.append_to(session_id, &[event])?;
        if moves {
            expected = shifted(T0, hours * micros(HOUR) as i64);
        }
        assert_eq!(updated_at()?, Some(expected), "after hour {hours}");
        Ok(())
    };
    for failed in [
        Outcome::Error,
        Outcome::OutOfFuel,
        Outcome::Timeout,
        Outcome::Memory,
        Outcome::Quota,
        Outcome::Trap,
    ] {
        step(executed(failed), false)?;
    }
    step(written(&scratch, 5, WrittenBy::Guest), false)?;
    step(file_deleted(&scratch, WrittenBy::Guest), false)?;
    step(executed(Outcome::Ok), true)?;
    step(written(&notes, 12, WrittenBy::Host), true)?;
    step(written(&scratch, 7, WrittenBy::Guest), false)?;
    step(file_deleted(&scratch, WrittenBy::Host), true)?;

    let summary = query::session(&harness.store, session_id)?.unwrap();
    assert_eq!(summary.created_at, Some(T0));
    assert_eq!(
        summary.updated_at,
        Some(shifted(T0, 12 * micros(HOUR) as i64))
    );
    assert_eq!(summary.exec_count, 7);
    assert_eq!(summary.last_outcome, Some(Outcome::Ok));
    assert_eq!((summary.file_count, summary.bytes), (1, 12));
    // A guest's file carries its own time even though the session's
    // updated_at did not move for it.
    let files = query::files(&harness.store, session_id, None)?;
    assert_eq!(
        files,
        vec![FileView {
            path: notes,
            size: 12,
            blake3: hash_of("notes/today.md"),
            updated_at: shifted(T0, 10 * micros(HOUR) as i64),
        }]
    );
    assert_read_model_matches_fold(&harness)?;
    Ok(())
}

/// Goal: `updated_at` never goes backwards even when the clock does (M2).
/// Method: set the clock a day back before a successful execution; the
/// store stamps it no earlier than the last event, so `updated_at` stays.
#[test]
fn updated_at_never_goes_backwards_when_the_clock_does() -> TestResult {
    let harness = ProjectionStore::new(true)?;
    let session_id = harness.create_session()?;
    harness.advance(HOUR);
    harness.append_to(session_id, &[executed(Outcome::Ok)])?;
    let last = shifted(T0, micros(HOUR) as i64);

    harness.clock.set(shifted(T0, -(micros(DAY) as i64)));
    let stamped = harness.append_to(session_id, &[executed(Outcome::Ok)])?;
    assert_eq!(
        stamped.first().map(|envelope| envelope.recorded_at),
        Some(last)
    );
    let summary = query::session(&harness.store, session_id)?.unwrap();
    assert_eq!(summary.created_at, Some(T0));
    assert_eq!(summary.updated_at, Some(last));
    assert_read_model_matches_fold(&harness)?;
    Ok(())
}

/// Goal: a workspace adopted without valid metadata is legacy: no
/// timestamps, still usable, never a prune candidate but listed as skipped
/// with the reason (M4, P1). Method: adopt one with metadata missing and
/// one corrupted, use both, and ask for candidates with `older_than = 0`,
/// which would select every session that has timestamps.
#[test]
fn legacy_adopted_session_has_no_timestamps_works_and_is_never_a_candidate() -> TestResult {
    let harness = ProjectionStore::new(true)?;
    let missing = SessionId::new_v4();
    let corrupted = SessionId::new_v4();
    let ordinary = harness.create_session()?;
    harness.append_to(
        missing,
        &[
            adopted(missing, MetadataStatus::Missing, None, None),
            written(&path("old/data.csv")?, 300, WrittenBy::Adoption),
        ],
    )?;
    // Corrupted metadata whose timestamps someone still parsed: not valid,
    // so they are not taken.
    harness.append_to(
        corrupted,
        &[adopted(
            corrupted,
            MetadataStatus::Corrupted,
            Some(T0),
            Some(T0),
        )],
    )?;
    harness.advance(DAY * 400);
    for legacy in [missing, corrupted] {
        harness.append_to(
            legacy,
            &[
                executed(Outcome::Ok),
                written(&path("out.txt")?, 10, WrittenBy::Host),
            ],
        )?;
        let summary = query::session(&harness.store, legacy)?.unwrap();
        assert!(summary.legacy);
        assert_eq!((summary.created_at, summary.updated_at), (None, None));
        assert_eq!(summary.exec_count, 1);
        assert_eq!(summary.status, SessionStatus::Active);
        assert_eq!(
            serde_json::to_value(summary.seed_metadata())?,
            serde_json::json!({
                "session_id": legacy.to_string(),
                "created_at": null,
                "updated_at": null,
                "version": 1,
            })
        );
    }
    assert_eq!(query::session(&harness.store, missing)?.unwrap().bytes, 310);

    let plan = query::prune_candidates(
        &harness.store,
        &PrunePolicy::older_than(Duration::ZERO),
        harness.now(),
    )?;
    assert_eq!(
        candidate_rows(&plan),
        vec![(ordinary, micros(DAY * 400), 0, SelectedBy::Age)]
    );
    let mut expected_skipped = [missing, corrupted];
    expected_skipped.sort();
    assert_eq!(
        plan.skipped
            .iter()
            .map(|skipped| (skipped.session_id, skipped.reason.as_str()))
            .collect::<Vec<_>>(),
        expected_skipped
            .iter()
            .map(|id| (*id, LEGACY_SKIP_REASON))
            .collect::<Vec<_>>()
    );
    // Retention limits cannot reach them either: they count towards the
    // totals but are never selected.
    let plan = query::prune_candidates(
        &harness.store,
        &PrunePolicy {
            older_than: DAY * 10_000,
            max_sessions: Some(0),
            max_total_bytes: Some(0),
            ..PrunePolicy::default()
        },
        harness.now(),
    )?;
    assert_eq!(
        candidate_rows(&plan),
        vec![(ordinary, micros(DAY * 400), 0, SelectedBy::MaxSessions)]
    );
    assert_eq!(query::stats(&harness.store)?.legacy_sessions, 2);
    assert_read_model_matches_fold(&harness)?;
    Ok(())
}

/// Goal: a workspace adopted with valid seed metadata keeps its timestamps
/// (M4), even though the adoption records the files it found, and so it is
/// prunable by age like any session (P1). Method: adopt with metadata from
/// 30 and 29 days ago plus two inventory writes, and one with no
/// `updated_at` in its metadata; check the timestamps and the candidates.
#[test]
fn adopted_session_with_valid_metadata_keeps_its_timestamps() -> TestResult {
    let harness = ProjectionStore::new(true)?;
    let with_both = SessionId::new_v4();
    let created_only = SessionId::new_v4();
    let created_at = shifted(T0, -(micros(DAY * 30) as i64));
    let updated_at = shifted(T0, -(micros(DAY * 29) as i64));
    harness.append_to(
        with_both,
        &[
            adopted(
                with_both,
                MetadataStatus::Ok,
                Some(created_at),
                Some(updated_at),
            ),
            written(&path("main.py")?, 120, WrittenBy::Adoption),
            written(&path("data/in.csv")?, 80, WrittenBy::Adoption),
        ],
    )?;
    harness.append_to(
        created_only,
        &[adopted(
            created_only,
            MetadataStatus::Ok,
            Some(created_at),
            None,
        )],
    )?;

    let summary = query::session(&harness.store, with_both)?.unwrap();
    assert!(!summary.legacy);
    assert_eq!(summary.created_at, Some(created_at));
    assert_eq!(summary.updated_at, Some(updated_at));
    assert_eq!((summary.file_count, summary.bytes), (2, 200));
    let summary = query::session(&harness.store, created_only)?.unwrap();
    assert_eq!(summary.created_at, Some(created_at));
    assert_eq!(summary.updated_at, Some(created_at));

    let plan = query::prune_candidates(
        &harness.store,
        &PrunePolicy::older_than(DAY * 7),
        harness.now(),
    )?;
    assert_eq!(
        candidate_rows(&plan),
        vec![
            (created_only, micros(DAY * 30), 0, SelectedBy::Age),
            (with_both, micros(DAY * 29), 200, SelectedBy::Age),
        ]
    );
    assert!(plan.skipped.is_empty());

    // Activity after adoption moves updated_at as usual.
    harness.append_to(with_both, &[executed(Outcome::Ok)])?;
    assert_eq!(
        query::session(&harness.store, with_both)?
            .unwrap()
            .updated_at,
        Some(T0)
    );
    assert_read_model_matches_fold(&harness)?;
    Ok(())
}

/// Goal: a session in `pruning` keeps its files and bytes until
/// `session.pruned` (the data is still on disk until then), and is not a
/// candidate again meanwhile (P1). Method: write two files, record the
/// intent, check, then record the completion and check again.
#[test]
fn pruning_session_keeps_its_files_until_pruned() -> TestResult {
    let harness = ProjectionStore::new(true)?;
    let session_id = harness.create_session()?;
    harness.append_to(
        session_id,
        &[
            written(&path("a.txt")?, 100, WrittenBy::Host),
            written(&path("dir/b.txt")?, 200, WrittenBy::Guest),
        ],
    )?;
    harness.advance(DAY * 2);
    harness.append_to(session_id, &[prune_requested(micros(DAY * 2), 300)])?;

    let summary = query::session(&harness.store, session_id)?.unwrap();
    assert_eq!(summary.status, SessionStatus::Pruning);
    assert_eq!((summary.file_count, summary.bytes), (2, 300));
    assert_eq!(query::files(&harness.store, session_id, None)?.len(), 2);
    assert_eq!(query::stats(&harness.store)?.workspace_bytes, 300);
    let everything = PrunePolicy::older_than(Duration::ZERO);
    assert!(
        query::prune_candidates(&harness.store, &everything, harness.now())?
            .candidates
            .is_empty()
    );
    assert_eq!(
        query::sessions(&harness.store, Some(SessionStatus::Pruning))?
            .iter()
            .map(|s| s.session_id)
            .collect::<Vec<_>>(),
        vec![session_id]
    );

    harness.append_to(session_id, &[pruned(300)])?;
    let summary = query::session(&harness.store, session_id)?.unwrap();
    assert_eq!(summary.status, SessionStatus::Pruned);
    assert_eq!((summary.file_count, summary.bytes), (0, 0));
    assert!(query::files(&harness.store, session_id, None)?.is_empty());
    let stats = query::stats(&harness.store)?;
    assert_eq!(stats.workspace_bytes, 0);
    assert_eq!(stats.cleanup.sessions_pruned, 1);
    assert_eq!(stats.cleanup.pruned_bytes, 300);
    // The timestamps are history, not erased.
    assert_eq!(summary.created_at, Some(T0));
    assert_eq!(summary.updated_at, Some(T0));
    assert_read_model_matches_fold(&harness)?;
    Ok(())
}

/// Goal: `session.prune.failed` returns the session to active, files and
/// all, and counts the error (P4's record, C3). Method: intent, failure,
/// then check status, files, statistics and that it is a candidate again.
#[test]
fn prune_failed_returns_the_session_to_active() -> TestResult {
    let harness = ProjectionStore::new(true)?;
    let session_id = harness.create_session()?;
    harness.append_to(
        session_id,
        &[written(&path("keep.txt")?, 42, WrittenBy::Host)],
    )?;
    harness.advance(DAY);
    harness.append_to(
        session_id,
        &[
            prune_requested(micros(DAY), 42),
            prune_failed("permission denied"),
        ],
    )?;

    let summary = query::session(&harness.store, session_id)?.unwrap();
    assert_eq!(summary.status, SessionStatus::Active);
    assert_eq!((summary.file_count, summary.bytes), (1, 42));
    assert_eq!(summary.updated_at, Some(T0), "intents are not activity");
    assert_eq!(query::stats(&harness.store)?.cleanup.prune_errors, 1);
    let plan =
        query::prune_candidates(&harness.store, &PrunePolicy::older_than(DAY), harness.now())?;
    assert_eq!(
        candidate_rows(&plan),
        vec![(session_id, micros(DAY), 42, SelectedBy::Age)]
    );
    // The candidate carries the version the intent must expect (P7).
    assert_eq!(plan.candidates.first().map(|c| c.version.0), Some(4));
    assert_read_model_matches_fold(&harness)?;
    Ok(())
}

/// Goal: an event kind from a newer sandlog is skipped, not fatal, by the
/// fold, the inline read model and a rebuild (forward compatibility, C2).
/// Method: append `session.teleported` in a session stream and in the
/// `system` stream between known events, then compare all three.
#[test]
fn unknown_event_kinds_are_skipped_by_fold_read_model_and_rebuild() -> TestResult {
    let harness = ProjectionStore::new(true)?;
    let session_id = harness.create_session()?;
    harness.store.append(
        session_id.stream(),
        ExpectedVersion::Any,
        &[unknown_event()],
    )?;
    harness
        .store
        .append(StreamId::System, ExpectedVersion::Any, &[unknown_event()])?;
    harness.advance(HOUR);
    harness.append_to(
        session_id,
        &[written(&path("after.txt")?, 9, WrittenBy::Host)],
    )?;

    let envelopes = harness.envelopes()?;
    assert_eq!(
        envelopes
            .iter()
            .filter(|envelope| envelope.kind == UNKNOWN_KIND)
            .count(),
        2
    );
    let state = assert_read_model_matches_fold(&harness)?;
    assert_eq!(state.position, Position(4));
    let session = state.sessions.get(&session_id).unwrap();
    assert_eq!(
        session.version.0, 3,
        "the stream's version counts the unknown event"
    );
    assert_eq!(session.updated_at, Some(shifted(T0, micros(HOUR) as i64)));
    assert_eq!(session.file_count, 1);

    assert_eq!(rebuild(&harness.store)?, 4);
    assert_eq!(assert_read_model_matches_fold(&harness)?, state);
    assert_eq!(
        replay::state_at(&harness.store, Cut::Position(Position(4)))?,
        state
    );
    Ok(())
}

/// Goal: a blob an event names stays referenced whether or not the fold
/// knows the event's session: the session's references are found by its
/// row, and a file written in a stream the fold has no session for (no
/// `session.created`) is still found by its hash, so `gc` keeps its
/// bytes. Both hold after a rebuild. Method: host writes in a created
/// session and in a stream that was never created; the reference queries.
#[test]
fn blob_references_are_found_by_session_and_by_hash() -> TestResult {
    use sandlog_sqlite::evidence;
    let harness = ProjectionStore::new(true)?;
    let known = harness.create_session()?;
    harness.append_to(known, &[written(&path("a.txt")?, 3, WrittenBy::Host)])?;
    let unknown = SessionId::new_v4();
    harness.append_to(unknown, &[written(&path("b.txt")?, 4, WrittenBy::Host)])?;
    for pass in ["inline", "rebuilt"] {
        let refs = evidence::session_refs(&harness.store, known)?;
        assert_eq!(refs.len(), 1, "{pass}");
        assert_eq!(
            (refs[0].hash, refs[0].session_id, refs[0].role.as_str()),
            (hash_of("a.txt"), known, "file"),
            "{pass}"
        );
        assert!(
            evidence::session_refs(&harness.store, unknown)?.is_empty(),
            "{pass}"
        );
        assert!(
            evidence::is_referenced(&harness.store, &hash_of("b.txt"))?,
            "{pass}"
        );
        let orphan = evidence::refs_to(&harness.store, &hash_of("b.txt"))?;
        assert_eq!(orphan.len(), 1, "{pass}");
        assert_eq!(orphan[0].session_id, unknown, "{pass}");
        assert_eq!(
            evidence::referenced_blobs(&harness.store)?.len(),
            2,
            "{pass}"
        );
        rebuild(&harness.store)?;
    }
    Ok(())
}

/// Goal: only sessions the log knows are ever candidates; directories that
/// are not sessions (orphans, non-UUID names) show up only in the cleanup
/// statistics (P5, C3). Method: record orphans and runs in the `system`
/// stream and check sessions, candidates and the exact statistics.
#[test]
fn system_stream_events_feed_statistics_and_never_sessions() -> TestResult {
    let harness = ProjectionStore::new(true)?;
    harness.append(
        StreamId::System,
        &[
            orphan_quarantined("not-a-session", 300),
            orphan_purged("0b5e0b5e-0000-4000-8000-000000000000", 500),
            prune_run_completed(0, 1_500),
        ],
    )?;
    harness.advance(HOUR);
    harness.append(StreamId::System, &[reconcile_run_completed(2, 1, 2_500)])?;

    assert!(query::sessions(&harness.store, None)?.is_empty());
    let plan = query::prune_candidates(
        &harness.store,
        &PrunePolicy::older_than(Duration::ZERO),
        harness.now(),
    )?;
    assert!(plan.candidates.is_empty());
    assert!(plan.skipped.is_empty());
    let cleanup = query::stats(&harness.store)?.cleanup;
    assert_eq!(cleanup.prune_runs, 1);
    assert_eq!(cleanup.reconcile_runs, 1);
    assert_eq!(cleanup.orphans_quarantined, 1);
    assert_eq!(cleanup.orphans_purged, 1);
    assert_eq!(cleanup.orphan_bytes, 800);
    assert_eq!(cleanup.intents_finished, 2);
    assert_eq!(cleanup.reconcile_errors, 1);
    assert_eq!(cleanup.cleanup_duration_us, 4_000);
    assert_eq!(
        cleanup.last_cleanup_at,
        Some(shifted(T0, micros(HOUR) as i64))
    );
    assert_read_model_matches_fold(&harness)?;
    Ok(())
}

// ---------------------------------------------------------------------------
// Prune candidates (P1, P6).

/// Creates one session per entry of `ages` (oldest first), each `age`
/// before `now`, with `bytes` of files; leaves the clock at `now`.
fn sessions_aged(
    harness: &ProjectionStore,
    now: Timestamp,
    ages_and_bytes: &[(Duration, u64)],
) -> TestResult<Vec<SessionId>> {
    let mut ids = Vec::new();
    for (age, bytes) in ages_and_bytes {
        harness.clock.set(now.saturating_sub(*age));
        let session_id = harness.create_session()?;
        if *bytes > 0 {
            harness.append_to(
                session_id,
                &[written(&path("blob.bin")?, *bytes, WrittenBy::Guest)],
            )?;
        }
        ids.push(session_id);
    }
    harness.clock.set(now);
    Ok(ids)
}

/// Goal: the age threshold is inclusive: a session exactly `older_than`
/// old is a candidate, one a microsecond younger is not (P1). Method: two
/// sessions one microsecond apart and `now` exactly 24 h after the older.
#[test]
fn prune_threshold_is_inclusive_at_exactly_older_than() -> TestResult {
    let harness = ProjectionStore::new(true)?;
    let now = shifted(T0, micros(DAY) as i64);
    let exactly = harness.create_session()?;
    harness.clock.set(shifted(T0, 1));
    let younger = harness.create_session()?;
    harness.clock.set(now);

    let plan = query::prune_candidates(&harness.store, &PrunePolicy::older_than(DAY), now)?;
    assert_eq!(
        candidate_rows(&plan),
        vec![(exactly, micros(DAY), 0, SelectedBy::Age)]
    );
    let candidate = plan.candidates.first().unwrap();
    assert_eq!(candidate.updated_at, T0);
    assert_eq!(candidate.age(), DAY);
    // One microsecond later the younger one qualifies too.
    let plan = query::prune_candidates(
        &harness.store,
        &PrunePolicy::older_than(DAY),
        shifted(now, 1),
    )?;
    assert_eq!(
        candidate_rows(&plan),
        vec![
            (exactly, micros(DAY) + 1, 0, SelectedBy::Age),
            (younger, micros(DAY), 0, SelectedBy::Age),
        ]
    );
    // Activity resets the age (M2 feeding P1).
    harness.append_to(exactly, &[executed(Outcome::Ok)])?;
    let plan = query::prune_candidates(&harness.store, &PrunePolicy::older_than(DAY), now)?;
    assert!(plan.candidates.is_empty());
    Ok(())
}

/// Goal: `max_deletions` caps a run at the N oldest (P6). Method: five
/// sessions all past the threshold; N = 3 gives the three oldest in order,
/// N = 0 gives none.
#[test]
fn max_deletions_stops_at_the_n_oldest() -> TestResult {
    let harness = ProjectionStore::new(true)?;
    let now = T0;
    let ids = sessions_aged(
        &harness,
        now,
        &[
            (DAY * 9, 1),
            (DAY * 8, 2),
            (DAY * 7, 3),
            (DAY * 6, 4),
            (DAY * 5, 5),
        ],
    )?;
    let policy = PrunePolicy {
        older_than: DAY,
        max_deletions: Some(3),
        ..PrunePolicy::default()
    };
    let plan = query::prune_candidates(&harness.store, &policy, now)?;
    assert_eq!(
        candidate_rows(&plan),
        vec![
            (ids[0], micros(DAY * 9), 1, SelectedBy::Age),
            (ids[1], micros(DAY * 8), 2, SelectedBy::Age),
            (ids[2], micros(DAY * 7), 3, SelectedBy::Age),
        ]
    );
    let none = PrunePolicy {
        max_deletions: Some(0),
        ..policy
    };
    assert!(
        query::prune_candidates(&harness.store, &none, now)?
            .candidates
            .is_empty()
    );
    Ok(())
}

/// Goal: retention by count keeps the newest `max_sessions` active
/// sessions and selects the rest, oldest first (P6); legacy sessions count
/// towards the total but are never selected. Method: five young sessions
/// and one legacy, `max_sessions = 3`.
#[test]
fn retention_by_max_sessions_selects_the_oldest_first() -> TestResult {
    let harness = ProjectionStore::new(true)?;
    let now = T0;
    let ids = sessions_aged(
        &harness,
        now,
        &[
            (HOUR * 5, 10),
            (HOUR * 4, 10),
            (HOUR * 3, 10),
            (HOUR * 2, 10),
            (HOUR, 10),
        ],
    )?;
    let legacy = SessionId::new_v4();
    harness.append_to(
        legacy,
        &[adopted(legacy, MetadataStatus::Missing, None, None)],
    )?;
    let policy = PrunePolicy {
        older_than: DAY,
        max_sessions: Some(3),
        ..PrunePolicy::default()
    };
    let plan = query::prune_candidates(&harness.store, &policy, now)?;
    assert_eq!(
        candidate_rows(&plan),
        vec![
            (ids[0], micros(HOUR * 5), 10, SelectedBy::MaxSessions),
            (ids[1], micros(HOUR * 4), 10, SelectedBy::MaxSessions),
            (ids[2], micros(HOUR * 3), 10, SelectedBy::MaxSessions),
        ]
    );
    assert_eq!(plan.skipped.len(), 1);
    // Age and retention together: age first selects what is old enough,
    // retention then goes on from there.
    let policy = PrunePolicy {
        older_than: HOUR * 4,
        max_sessions: Some(4),
        ..PrunePolicy::default()
    };
    let plan = query::prune_candidates(&harness.store, &policy, now)?;
    assert_eq!(
        candidate_rows(&plan),
        vec![
            (ids[0], micros(HOUR * 5), 10, SelectedBy::Age),
            (ids[1], micros(HOUR * 4), 10, SelectedBy::Age),
        ]
    );
    Ok(())
}

/// Goal: retention by bytes selects the oldest sessions until the rest fit
/// in `max_total_bytes` (P6), each candidate carrying its size. Method:
/// sizes 100..500 oldest first (1500 in all), limit 1000: the oldest three
/// must go (1500 → 1400 → 1200 → 900).
#[test]
fn retention_by_max_total_bytes_selects_the_oldest_first() -> TestResult {
    let harness = ProjectionStore::new(true)?;
    let now = T0;
    let ids = sessions_aged(
        &harness,
        now,
        &[
            (HOUR * 5, 100),
            (HOUR * 4, 200),
            (HOUR * 3, 300),
            (HOUR * 2, 400),
            (HOUR, 500),
        ],
    )?;
    let policy = PrunePolicy {
        older_than: DAY,
        max_total_bytes: Some(1000),
        ..PrunePolicy::default()
    };
    let plan = query::prune_candidates(&harness.store, &policy, now)?;
    assert_eq!(
        candidate_rows(&plan),
        vec![
            (ids[0], micros(HOUR * 5), 100, SelectedBy::MaxTotalBytes),
            (ids[1], micros(HOUR * 4), 200, SelectedBy::MaxTotalBytes),
            (ids[2], micros(HOUR * 3), 300, SelectedBy::MaxTotalBytes),
        ]
    );
    // Exactly at the limit nothing more is needed.
    let policy = PrunePolicy {
        max_total_bytes: Some(1500),
        ..policy
    };
    assert!(
        query::prune_candidates(&harness.store, &policy, now)?
            .candidates
            .is_empty()
    );
    // max_deletions still caps a retention run.
    let policy = PrunePolicy {
        older_than: DAY,
        max_total_bytes: Some(0),
        max_deletions: Some(2),
        ..PrunePolicy::default()
    };
    assert_eq!(
        candidate_rows(&query::prune_candidates(&harness.store, &policy, now)?)
            .into_iter()
            .map(|row| row.0)
            .collect::<Vec<_>>(),
        vec![ids[0], ids[1]]
    );
    Ok(())
}

/// Goal: sessions that are not active (pruning, deleting, pruned, deleted)
/// are never candidates (P1). Method: one session per status, all old,
/// and `older_than = 0`; also check `sessions` by status.
#[test]
fn only_active_sessions_are_candidates_and_sessions_filter_by_status() -> TestResult {
    let harness = ProjectionStore::new(true)?;
    let active = harness.create_session()?;
    let pruning = harness.create_session()?;
    let pruned_id = harness.create_session()?;
    let deleting = harness.create_session()?;
    let deleted = harness.create_session()?;
    harness.advance(DAY);
    harness.append_to(pruning, &[prune_requested(1, 0)])?;
    harness.append_to(pruned_id, &[prune_requested(1, 0), pruned(0)])?;
    harness.append_to(deleting, &[delete_requested()])?;
    harness.append_to(deleted, &[delete_requested(), session_deleted(64)])?;

    let plan = query::prune_candidates(
        &harness.store,
        &PrunePolicy::older_than(Duration::ZERO),
        harness.now(),
    )?;
    assert_eq!(
        candidate_rows(&plan),
        vec![(active, micros(DAY), 0, SelectedBy::Age)]
    );
    for (status, id) in [
        (SessionStatus::Active, active),
        (SessionStatus::Pruning, pruning),
        (SessionStatus::Pruned, pruned_id),
        (SessionStatus::Deleting, deleting),
        (SessionStatus::Deleted, deleted),
    ] {
        let ids: Vec<SessionId> = query::sessions(&harness.store, Some(status))?
            .iter()
            .map(|summary| summary.session_id)
            .collect();
        assert_eq!(ids, vec![id], "{status:?}");
    }
    let all: Vec<SessionId> = query::sessions(&harness.store, None)?
        .iter()
        .map(|summary| summary.session_id)
        .collect();
    let mut expected = vec![active, pruning, pruned_id, deleting, deleted];
    expected.sort();
    assert_eq!(all, expected, "same created_at: ordered by id");
    let stats = query::stats(&harness.store)?;
    assert_eq!(
        stats.sessions,
        BTreeMap::from(
            ["active", "deleted", "deleting", "pruned", "pruning"]
                .map(|status| (status.to_owned(), 1))
        )
    );
    assert_eq!(stats.cleanup.sessions_deleted, 1);
    assert_eq!(stats.cleanup.deleted_bytes, 64);
    assert_read_model_matches_fold(&harness)?;
    Ok(())
}

// ---------------------------------------------------------------------------
// Queries (S4, M1).

/// Goal: file listings filter by glob with `*` stopping at `/` and `**`
/// crossing it, sorted by path; a bad pattern is a clear error (S4).
/// Method: four files at three depths, several patterns.
#[test]
fn files_glob_star_stays_in_its_directory_and_double_star_crosses() -> TestResult {
    let harness = ProjectionStore::new(true)?;
    let session_id = harness.create_session()?;
    let events: Vec<_> = [
        ("x.py", 1),
        ("dir/x.py", 2),
        ("dir/sub/y.py", 3),
        ("README.md", 4),
    ]
    .iter()
    .map(|(text, size)| Ok(written(&path(text)?, *size, WrittenBy::Host)))
    .collect::<TestResult<_>>()?;
    harness.append_to(session_id, &events)?;
    let listed = |pattern: Option<&str>| -> TestResult<Vec<String>> {
        Ok(query::files(&harness.store, session_id, pattern)?
            .into_iter()
            .map(|file| file.path.as_str().to_owned())
            .collect())
    };

    assert_eq!(
        listed(None)?,
        ["README.md", "dir/sub/y.py", "dir/x.py", "x.py"]
    );
    assert_eq!(listed(Some("*.py"))?, ["x.py"]);
    assert_eq!(
        listed(Some("**/*.py"))?,
        ["dir/sub/y.py", "dir/x.py", "x.py"]
    );
    assert_eq!(listed(Some("dir/*.py"))?, ["dir/x.py"]);
    assert_eq!(listed(Some("dir/**"))?, ["dir/sub/y.py", "dir/x.py"]);
    assert_eq!(listed(Some("*.rs"))?, Vec::<String>::new());
    let error = query::files(&harness.store, session_id, Some("a[")).unwrap_err();
    assert!(
        matches!(&error, ProjectionError::InvalidPattern { pattern, .. } if pattern == "a["),
        "{error}"
    );
    assert_eq!(error.kind(), "invalid_pattern");
    assert!(query::files(&harness.store, SessionId::new_v4(), None)?.is_empty());
    assert_eq!(query::session(&harness.store, SessionId::new_v4())?, None);
    Ok(())
}

/// Goal: the nested tree view nests directories and leaves files with
/// their size and hash; deleting a directory removes everything under it
/// and nothing beside it (S4). Method: build a tree, delete a directory
/// whose name prefixes a sibling's, compare with the exact expected tree.
#[test]
fn file_tree_nests_directories_and_directory_delete_is_recursive() -> TestResult {
    let harness = ProjectionStore::new(true)?;
    let session_id = harness.create_session()?;
    let events: Vec<_> = [
        "top.txt",
        "src/main.py",
        "src/lib/util.py",
        "src/lib/deep/x.py",
        "srcs/keep.py",
        "data/in.csv",
    ]
    .iter()
    .map(|text| Ok(written(&path(text)?, 10, WrittenBy::Host)))
    .collect::<TestResult<_>>()?;
    harness.append_to(session_id, &events)?;
    harness.append_to(
        session_id,
        &[file_deleted(&path("src/lib")?, WrittenBy::Host)],
    )?;

    let file = |text: &str| TreeNode::File {
        size: 10,
        blake3: hash_of(text),
    };
    let dir = |entries: Vec<(&str, TreeNode)>| {
        TreeNode::Dir(
            entries
                .into_iter()
                .map(|(name, node)| (name.to_owned(), node))
                .collect(),
        )
    };
    let expected: BTreeMap<String, TreeNode> = [
        ("data", dir(vec![("in.csv", file("data/in.csv"))])),
        ("src", dir(vec![("main.py", file("src/main.py"))])),
        ("srcs", dir(vec![("keep.py", file("srcs/keep.py"))])),
        ("top.txt", file("top.txt")),
    ]
    .into_iter()
    .map(|(name, node)| (name.to_owned(), node))
    .collect();
    let files = query::files(&harness.store, session_id, None)?;
    assert_eq!(query::file_tree(&files), expected);
    assert_eq!(
        serde_json::to_value(query::file_tree(&files))?["top.txt"],
        serde_json::json!({"size": 10, "blake3": hash_of("top.txt").to_hex()})
    );
    let summary = query::session(&harness.store, session_id)?.unwrap();
    assert_eq!((summary.file_count, summary.bytes), (4, 40));
    assert_read_model_matches_fold(&harness)?;
    Ok(())
}

// ---------------------------------------------------------------------------
// Catch-up and rebuild (C2).

/// Appends a small mixed history to `harness` and returns how many events.
fn mixed_history(harness: &ProjectionStore) -> TestResult<u64> {
    let mut count = 0;
    for index in 0..5u64 {
        let session_id = SessionId::new_v4();
        harness.advance(HOUR);
        count += harness
            .append_to(
                session_id,
                &[
                    created(session_id),
                    executed(Outcome::Ok),
                    written(
                        &path(&format!("dir/file{index}.txt"))?,
                        index * 10,
                        WrittenBy::Host,
                    ),
                ],
            )?
            .len() as u64;
        if index % 2 == 0 {
            count += harness
                .append_to(session_id, &[prune_requested(1, 0), pruned(index)])?
                .len() as u64;
        }
    }
    count += harness
        .append(StreamId::System, &[prune_run_completed(3, 100)])?
        .len() as u64;
    Ok(count)
}

/// Goal: a read model behind the log catches up when installed (C2).
/// Method: append through a store that never installed the read models (a
/// process without the hook), then reopen with `install`: the report
/// counts every event, and the tables equal the fold. Then a second round
/// with the tables present but behind.
#[test]
fn read_model_behind_the_log_catches_up_on_install() -> TestResult {
    let harness = ProjectionStore::new(false)?;
    let appended = mixed_history(&harness)?;
    assert_eq!(checkpoint_position(&harness.store)?, Position::ZERO);

    let (harness, report) = harness.reopen(true)?;
    assert_eq!(
        report,
        Some(CatchUpReport {
            events: appended,
            rebuilt: true,
        })
    );
    assert_read_model_matches_fold(&harness)?;

    // Tables present, but another process appends without the hook.
    let (harness, _) = harness.reopen(false)?;
    let more = mixed_history(&harness)?;
    let (harness, report) = harness.reopen(true)?;
    assert_eq!(
        report,
        Some(CatchUpReport {
            events: more,
            rebuilt: false,
        })
    );
    assert_read_model_matches_fold(&harness)?;
    Ok(())
}

/// Goal: a rebuild of the read models of a log that has events (their
/// version changed) is announced before and after, with the log's length:
/// it holds the write lock for as long as it takes. Method: mark the read
/// models as one version older with plain SQL, reopen the file with
/// `install_observed`; the tables equal the fold afterwards. A second
/// install, with nothing to rebuild, says nothing.
#[test]
fn a_read_model_rebuild_is_announced() -> TestResult {
    use sandlog_sqlite::{EventStore, OpenOptions};
    let harness = ProjectionStore::new(true)?;
    let appended = mixed_history(&harness)?;
    let path = harness.path();
    sandlog_tests::open_tamperer(&path)?.execute(
        "UPDATE rm_checkpoint SET model_version = ?1",
        [READ_MODEL_VERSION - 1],
    )?;
    let (harness, _) = harness.reopen(false)?;
    let (observer, told) = sandlog_tests::upgrade_recorder();
    let mut store = EventStore::open(&path, OpenOptions::default())?;
    let report = sandlog_sqlite::install_observed(&mut store, Some(&observer))?;
    assert!(report.rebuilt);
    let mut again = EventStore::open(&path, OpenOptions::default())?;
    let report = sandlog_sqlite::install_observed(&mut again, Some(&observer))?;
    assert!(!report.rebuilt);
    let v = READ_MODEL_VERSION;
    let told = told.lock().map_err(|_| "observer lock poisoned")?.clone();
    assert_eq!(
        told,
        [
            format!("started read-models {}->{v} {appended}", v - 1),
            format!("finished read-models {}->{v}", v - 1)
        ]
    );
    let (harness, _) = harness.reopen(true)?;
    assert_read_model_matches_fold(&harness)?;
    Ok(())
}

/// Goal: when another writer appended without the hook while this store
/// kept its read model, this store's next append folds the gap first, in
/// the same transaction (C2). Method: two stores on one file, only one
/// with the hook.
#[test]
fn hooked_append_folds_the_gap_left_by_a_hookless_writer() -> TestResult {
    let harness = ProjectionStore::new(true)?;
    let session_id = harness.create_session()?;
    let other = harness.open_without_read_model()?;
    other.append(
        session_id.stream(),
        ExpectedVersion::Any,
        &new_events(&[
            executed(Outcome::Ok),
            written(&path("from-other.txt")?, 5, WrittenBy::Host),
        ]),
    )?;
    drop(other);
    assert_eq!(checkpoint_position(&harness.store)?, Position(1));

    harness.advance(HOUR);
    harness.append_to(
        session_id,
        &[written(&path("mine.txt")?, 6, WrittenBy::Host)],
    )?;
    let state = assert_read_model_matches_fold(&harness)?;
    let session = state.sessions.get(&session_id).unwrap();
    assert_eq!(
        (session.file_count, session.bytes, session.exec_count),
        (2, 11, 1)
    );
    Ok(())
}

/// Goal: a deleted read model is rebuilt by `install` (C2), whether one
/// table or all of them were dropped. Method: drop tables through a plain
/// rusqlite connection while the store is closed, reopen with `install`.
#[test]
fn dropped_read_model_tables_are_rebuilt_by_install() -> TestResult {
    let mut harness = ProjectionStore::new(true)?;
    let appended = mixed_history(&harness)?;
    let expected = assert_read_model_matches_fold(&harness)?;
    for drop_sql in [
        "DROP TABLE rm_sessions;",
        "DROP TABLE rm_files;",
        "DROP TABLE rm_stats;",
        "DROP TABLE rm_checkpoint;",
        "DROP TABLE rm_checkpoint; DROP TABLE rm_sessions; DROP TABLE rm_files; DROP TABLE rm_stats;",
        "DELETE FROM rm_checkpoint;",
    ] {
        let (closed, _) = harness.reopen(false)?;
        rusqlite::Connection::open(closed.path())?.execute_batch(drop_sql)?;
        let (reopened, report) = closed.reopen(true)?;
        harness = reopened;
        assert_eq!(
            report,
            Some(CatchUpReport {
                events: appended,
                rebuilt: true,
            }),
            "after {drop_sql}"
        );
        assert_eq!(
            assert_read_model_matches_fold(&harness)?,
            expected,
            "after {drop_sql}"
        );
    }
    Ok(())
}

/// The life of generated session number `index` for the long rebuild
/// test: files written, overwritten and deleted, executions that succeed
/// and fail, and every tenth session pruned.
fn long_life(index: usize, session_id: SessionId) -> TestResult<Vec<sandlog_core::event::Event>> {
    let mut life = vec![
        created(session_id),
        written(&path("main.py")?, 100 + index as u64, WrittenBy::Host),
        executed(Outcome::Ok),
        written(
            &path(&format!("out/{}.txt", index % 7))?,
            10,
            WrittenBy::Guest,
        ),
        written(&path("main.py")?, 200, WrittenBy::Host),
        executed(Outcome::Error),
        file_deleted(&path("out")?, WrittenBy::Guest),
    ];
    if index.is_multiple_of(10) {
        life.push(prune_requested(DAY.as_micros() as u64, 200));
        life.push(pruned(200));
    }
    Ok(life)
}

/// Goal: a long catch-up (more than one chunk, so folded on two threads:
/// a reader decoding, this thread folding) gives exactly the fold of the
/// log, including sessions whose events sit in different chunks, and stays
/// exact when another process appends (and, through its own hook, folds)
/// while the rebuild runs (C2). Method: ~64,000 events of 9,000 generated
/// sessions, then more events for the first 200 sessions at the end of the
/// log; rebuild alone (it folds every event itself); then rebuild again
/// while a second store with the read models installed keeps appending
/// (they wait for the rebuild's write lock, before or after it) and a
/// third keeps querying (it must never see a half-built read model);
/// compare each with the in-memory fold. The writer's page cache is its
/// usual size again afterwards. Last, a rebuild that meets a damaged event
/// fails and leaves the read models as they were.
#[test]
fn long_rebuilds_fold_on_two_threads_and_stay_exact_beside_other_writers() -> TestResult {
    const SESSIONS: usize = 9_000;
    let harness = ProjectionStore::new(false)?;
    let mut sessions = Vec::with_capacity(SESSIONS);
    let mut appended = 0u64;
    for index in 0..SESSIONS {
        let session_id = SessionId::new_v4();
        appended += harness
            .append_to(session_id, &long_life(index, session_id)?)?
            .len() as u64;
        sessions.push(session_id);
        if index.is_multiple_of(1_000) {
            harness.advance(HOUR);
        }
    }
    for session_id in sessions.iter().take(200) {
        appended += harness
            .append_to(
                *session_id,
                &[written(&path("late.txt")?, 7, WrittenBy::Host)],
            )?
            .len() as u64;
    }
    assert!(
        appended > sandlog_sqlite::read_model::CATCH_UP_CHUNK_EVENTS as u64,
        "the log must span more than one chunk: {appended} events"
    );

    let cache_size = |store: &sandlog_sqlite::EventStore| {
        store.with_write_transaction(|transaction| {
            transaction
                .query_row("PRAGMA cache_size", [], |row| row.get::<_, i64>(0))
                .sql()
                .map_err(sandlog_eventstore::EventStoreError::from)
        })
    };
    let usual_cache_size = cache_size(&harness.store)?;
    assert_eq!(rebuild(&harness.store)?, appended);
    assert_eq!(
        assert_read_model_matches_fold(&harness)?.position,
        Position(appended)
    );

    // The writer waits for the rebuild's write lock (the store's default
    // busy timeout, a minute, is far longer than the rebuild).
    let other = harness.open_with_read_model()?;
    let observer = harness.open_with_read_model()?;
    let done = std::sync::atomic::AtomicBool::new(false);
    let late = std::thread::scope(|scope| -> TestResult<u64> {
        // Queries until the rebuild is over: every one sees all sessions.
        let queries = scope.spawn(|| -> TestResult<u64> {
            let mut queries = 0u64;
            while !done.load(std::sync::atomic::Ordering::Relaxed) || queries == 0 {
                let seen: u64 = query::stats(&observer)?.sessions.values().sum();
                assert!(seen >= SESSIONS as u64, "a query saw {seen} sessions");
                queries += 1;
            }
            Ok(queries)
        });
        // Appends until the rebuild is over: appends (and the other
        // store's hook folding them) land before the rebuild takes the
        // write lock and after it commits, never inside.
        let writer = scope.spawn(|| -> TestResult<u64> {
            let mut late = 0u64;
            while !done.load(std::sync::atomic::Ordering::Relaxed) || late < 10 {
                let session_id = sessions[late as usize % sessions.len()];
                other.append(
                    session_id.stream(),
                    ExpectedVersion::Any,
                    &new_events(&[executed(Outcome::Ok)]),
                )?;
                late += 1;
            }
            Ok(late)
        });
        let started = std::time::Instant::now();
        let rebuilt = rebuild(&harness.store);
        eprintln!("rebuild beside a writer: {:?}", started.elapsed());
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        let late = writer.join().map_err(|_| "the writer thread panicked")??;
        queries.join().map_err(|_| "the query thread panicked")??;
        // The rebuild folds the log as it was when it took the write lock:
        // everything generated, and the late appends that came first.
        let rebuilt = rebuilt?;
        assert!(
            (appended..=appended + late).contains(&rebuilt),
            "{rebuilt} rebuilt, {appended} + {late} appended"
        );
        Ok(late)
    })?;
    let state = assert_read_model_matches_fold(&harness)?;
    assert_eq!(state.position, Position(appended + late));
    // The rebuild ran with a small page cache and gave the usual one back.
    assert_eq!(cache_size(&harness.store)?, usual_cache_size);
    let pruned_count = state
        .sessions
        .values()
        .filter(|session| session.status == SessionStatus::Pruned)
        .count();
    assert_eq!(pruned_count, SESSIONS / 10);

    assert_failed_rebuild_changes_nothing(&harness, &state)?;
    Ok(())
}

/// Damages the log's last event (its payload is no longer a blob), checks
/// that `rebuild` refuses it naming the position, and that the read
/// models still answer as `expected` (the state of the log before).
fn assert_failed_rebuild_changes_nothing(
    harness: &ProjectionStore,
    expected: &State,
) -> TestResult {
    sandlog_tests::open_tamperer(&harness.path())?.execute(
        "UPDATE events SET payload = 'damaged' WHERE position = ?1",
        [expected.position.0],
    )?;
    match rebuild(&harness.store) {
        Err(ProjectionError::Store(sandlog_eventstore::EventStoreError::Corrupt {
            position,
            reason,
        })) => {
            assert_eq!(position, expected.position);
            assert!(reason.contains("payload"), "{reason}");
        }
        other => return Err(format!("rebuild of a damaged log gave {other:?}").into()),
    }
    assert_eq!(
        query::all_sessions_with_files(&harness.store)?,
        expected.sessions
    );
    assert_eq!(checkpoint_position(&harness.store)?, expected.position);
    Ok(())
}

/// Goal: a whole-state replay reports its progress (the CLI's bar): counts
/// never go down, and the last call says every event up to the cut was
/// folded; the state is the one `state_at` gives. Method: the mixed
/// history, replayed to its head and to its middle.
#[test]
fn replay_reports_progress_up_to_the_cut() -> TestResult {
    let harness = ProjectionStore::new(true)?;
    let appended = mixed_history(&harness)?;
    for to in [appended, appended / 2] {
        let mut calls = Vec::new();
        let cut = Cut::Position(Position(to));
        let state = replay::state_at_with_progress(&harness.store, cut, |done, total| {
            calls.push((done, total))
        })?;
        assert_eq!(calls.last(), Some(&(to, to)), "{calls:?}");
        assert!(
            calls.windows(2).all(|pair| pair[0].0 <= pair[1].0),
            "{calls:?}"
        );
        assert_eq!(state, replay::state_at(&harness.store, cut)?);
    }
    Ok(())
}

/// Goal: `rebuild` restores a read model whose rows were changed behind
/// its back (C2). Method: corrupt a session row, delete file rows and the
/// statistics through rusqlite, see the queries lie, rebuild, compare.
#[test]
fn rebuild_restores_a_tampered_read_model() -> TestResult {
    let harness = ProjectionStore::new(true)?;
    let appended = mixed_history(&harness)?;
    let expected = assert_read_model_matches_fold(&harness)?;
    let tamperer = rusqlite::Connection::open(harness.path())?;
    tamperer.execute_batch(
        "UPDATE rm_sessions SET updated_at = 0, bytes = 999999, status = 'deleted';
         DELETE FROM rm_files;
         DELETE FROM rm_stats;",
    )?;
    drop(tamperer);
    assert_ne!(
        query::all_sessions_with_files(&harness.store)?,
        expected.sessions
    );

    assert_eq!(rebuild(&harness.store)?, appended);
    assert_eq!(assert_read_model_matches_fold(&harness)?, expected);
    // And appends go on from the rebuilt checkpoint.
    let session_id = harness.create_session()?;
    assert_eq!(
        query::session(&harness.store, session_id)?.map(|s| s.status),
        Some(SessionStatus::Active)
    );
    let state = assert_read_model_matches_fold(&harness)?;
    // A rebuild is all or nothing (C2): one that fails part-way leaves the
    // read models it was to replace (this log is short: folded on one
    // thread; the long-rebuild test checks the two-thread fold).
    assert_failed_rebuild_changes_nothing(&harness, &state)?;
    Ok(())
}

// ---------------------------------------------------------------------------
// As-of replay (A2).

/// Goal: replay shows a session and its files as they were at a time or a
/// position, from the log alone (A2). Method: write, overwrite and delete
/// files an hour apart, then look at several cuts, including instants
/// between events and before the session existed; then tamper with the
/// read model to show replay does not read it.
#[test]
fn replay_by_time_and_position_shows_files_as_they_were() -> TestResult {
    let harness = ProjectionStore::new(true)?;
    let session_id = harness.create_session()?; // T0, position 1
    let a = path("a.txt")?;
    let b = path("docs/b.md")?;
    let at = |hours: i64| shifted(T0, hours * micros(HOUR) as i64);
    let mut positions = vec![Position(1)];
    for (hours, event) in [
        (1, written(&a, 10, WrittenBy::Host)),
        (2, written(&b, 20, WrittenBy::Guest)),
        (3, written(&a, 30, WrittenBy::Host)),
        (4, file_deleted(&path("docs")?, WrittenBy::Host)),
    ] {
        harness.clock.set(at(hours));
        positions.extend(
            harness
                .append_to(session_id, &[event])?
                .iter()
                .map(|e| e.position),
        );
    }
    // Replay must not read the read model: wreck it first.
    rusqlite::Connection::open(harness.path())?.execute_batch("DELETE FROM rm_files;")?;

    let files_at = |cut: Cut| -> TestResult<Option<Vec<(String, u64, Timestamp)>>> {
        Ok(
            replay::session_at(&harness.store, session_id, cut)?.map(|session| {
                session
                    .files
                    .iter()
                    .map(|(path, file)| (path.as_str().to_owned(), file.size, file.updated_at))
                    .collect()
            }),
        )
    };
    assert_eq!(
        files_at(Cut::Time(shifted(T0, -1)))?,
        None,
        "before creation"
    );
    assert_eq!(files_at(Cut::Time(T0))?, Some(vec![]));
    assert_eq!(
        files_at(Cut::Time(shifted(at(2), -1)))?,
        Some(vec![("a.txt".to_owned(), 10, at(1))])
    );
    let at_two_hours = Some(vec![
        ("a.txt".to_owned(), 10, at(1)),
        ("docs/b.md".to_owned(), 20, at(2)),
    ]);
    assert_eq!(files_at(Cut::Time(at(2)))?, at_two_hours);
    assert_eq!(files_at(Cut::Position(positions[2]))?, at_two_hours);
    assert_eq!(
        files_at(Cut::Time(at(3)))?,
        Some(vec![
            ("a.txt".to_owned(), 30, at(3)),
            ("docs/b.md".to_owned(), 20, at(2)),
        ])
    );
    assert_eq!(
        files_at(Cut::Position(positions[4]))?,
        Some(vec![("a.txt".to_owned(), 30, at(3))])
    );

    // The whole state as of a time, with the session's metadata then: the
    // guest write did not move updated_at, the host writes did.
    let then = replay::state_at(&harness.store, Cut::Time(shifted(at(3), -1)))?;
    let session = then.sessions.get(&session_id).unwrap();
    assert_eq!(session.updated_at, Some(at(1)));
    assert_eq!((session.file_count, session.bytes), (2, 30));
    assert_eq!(then.position, positions[2]);
    let envelopes = harness.envelopes()?;
    assert_eq!(then, State::fold(envelopes.iter().take(3)));
    Ok(())
}

/// Goal: a stored count the read model cannot hold (a negative size) is
/// an integrity failure naming its column, never read as zero.
/// Method: one session; its row's `bytes` set to -1 behind the fold's
/// back; the summary, the session with its files and the statistics are
/// each refused with `read_model_corrupt` naming the column.
#[test]
fn a_negative_stored_count_is_a_corrupt_read_model_naming_its_column() -> TestResult {
    let harness = ProjectionStore::new(true)?;
    let session_id = SessionId::new_v4();
    harness.append_to(session_id, &[created_with_labels(session_id, &[])])?;
    harness
        .store
        .with_write_transaction(|transaction| -> Result<(), ProjectionError> {
            transaction
                .execute("UPDATE rm_sessions SET bytes = -1", [])
                .sql()?;
            Ok(())
        })?;

    let refusals = [
        ("summary", query::session(&harness.store, session_id).err()),
        (
            "session with files",
            query::session_with_files(&harness.store, session_id).err(),
        ),
        ("statistics", query::stats(&harness.store).err()),
    ];
    for (what, error) in refusals {
        let error = error.unwrap_or_else(|| panic!("the {what} must be refused"));
        assert_eq!(error.kind(), "read_model_corrupt", "{what}: {error}");
        assert!(
            matches!(&error, ProjectionError::Corrupt(reason) if reason.contains("bytes") && reason.contains("-1")),
            "{what}: the column and its value are named: {error}"
        );
    }
    Ok(())
}

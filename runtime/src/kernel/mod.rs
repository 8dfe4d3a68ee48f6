//! Warm session kernels: a [`KernelPool`], owned by a long-lived process
//! (a server), keeps one CPython instance per session alive between
//! executions, so variables, imports and open files persist as in a
//! notebook kernel.
//!
//! Owns: which kernels exist, their bounds (count, total memory, idle
//! time) and the `kernel.restarted` / `kernel.evicted` events.
//! Never does: record an execution itself. Every warm execution goes
//! through the engine's one recording path ([`Engine::execute_with`]):
//! session lock, lease, scans, evidence and `session.executed` are those
//! of a one-shot run; only the run differs.
//!
//! # Invariants
//!
//! * One kernel per session, used by one execution at a time (the
//!   engine's session lock is held around it).
//! * A kernel that ended an execution on a limit, a trap or a broken
//!   protocol is dropped at once and `kernel.restarted` says why; the
//!   session's next execution starts a fresh kernel and its
//!   [`WarmExecution::state_lost`] repeats the reason.
//! * An idle kernel holds no lease, so it never blocks a prune or delete;
//!   a kernel whose session stopped being active is dropped when next
//!   used, reaped, or named in [`KernelPool::drop_session`].
//! * Kernels hold pool slots for their whole life; at most
//!   [`KERNELS_CEILING`] (half of `CONCURRENT_RUNS_MAX`) may exist, so
//!   one-shot runs always keep the other half.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use sandlog_core::SessionId;
use sandlog_core::event::{Event, KernelEvicted, KernelRestarted};
use sandlog_eventstore::ExpectedVersion;
use sandlog_projections::SessionStatus;

use crate::engine::Engine;
use crate::engine::exec::{ExecRequest, Execution, RunContext, Runtime};
use sandlog_host::error::{Result, RuntimeError};
use sandlog_sandbox::limits::CONCURRENT_RUNS_MAX;
use sandlog_sandbox::{Kernel, RunReport, RunSignals};

/// The driver program python.wasm runs as a kernel.
pub const DRIVER_SOURCE: &str = include_str!("driver.py");

/// Kernels a pool keeps by default.
///
/// Why 8: each idle CPython kernel holds its linear memory (tens of MiB)
/// and a pool slot; 8 sessions warm at once covers an agent host's active
/// sessions, and leaves most of the pool to one-shot runs.
pub const KERNELS_MAX: usize = 8;

/// Most kernels a pool may be configured for: half of the sandbox's pool
/// slots, so kernels never starve one-shot runs.
pub const KERNELS_CEILING: usize = CONCURRENT_RUNS_MAX as usize / 2;

/// Total linear memory of a pool's kernels by default, bytes; past it the
/// least recently used idle kernels are evicted.
pub const KERNEL_MEMORY_TOTAL_MAX: u64 = 1024 * 1024 * 1024;

/// How long a kernel may sit idle before [`KernelPool::reap_idle`] drops it.
pub const KERNEL_IDLE_TIMEOUT: Duration = Duration::from_secs(10 * 60);

/// Sessions whose lost-state reason a pool remembers for their next
/// execution; past it the oldest reasons are forgotten (the events keep
/// them).
pub const LOST_REASONS_MAX: usize = 4096;

/// The bounds of a [`KernelPool`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelLimits {
    /// Most kernels at once (clamped to [`KERNELS_CEILING`]).
    pub kernels_max: usize,
    /// Most total linear memory of all kernels, bytes.
    pub memory_total_max: u64,
    /// Idle time after which a kernel is reaped.
    pub idle_timeout: Duration,
}

impl Default for KernelLimits {
    fn default() -> Self {
        KernelLimits {
            kernels_max: KERNELS_MAX,
            memory_total_max: KERNEL_MEMORY_TOTAL_MAX,
            idle_timeout: KERNEL_IDLE_TIMEOUT,
        }
    }
}

/// What a pool holds and has done.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct KernelStats {
    /// Kernels alive (idle or running).
    pub kernels: usize,
    /// Of which running an execution now.
    pub busy: usize,
    /// Their total linear memory, bytes.
    pub memory_bytes: u64,
    /// Executions run in a kernel that had run earlier ones.
    pub warm_executions: u64,
    /// Kernels started.
    pub kernel_starts: u64,
    /// Total time spent starting kernels, microseconds.
    pub kernel_start_us: u64,
    /// Kernels dropped after an execution ended them.
    pub restarts: u64,
    /// Idle kernels dropped by the host.
    pub evictions: u64,
    /// Executions run one-shot instead (not Python, the pool shut down, or
    /// no kernel could start).
    pub one_shot: u64,
}

/// One warm (or cold) execution's result.
#[derive(Debug, Clone, serde::Serialize)]
pub struct WarmExecution {
    /// What the engine recorded.
    pub execution: Execution,
    /// Whether it ran in a kernel that had run earlier executions.
    pub warm: bool,
    /// When the session had a kernel that was dropped since its last
    /// execution: why (its state, variables and imports, is gone).
    pub state_lost: Option<String>,
}

struct Entry {
    /// `None` while an execution has it.
    kernel: Option<Kernel>,
    last_used: Instant,
    executions: u64,
    memory_bytes: u64,
}

#[derive(Default)]
struct State {
    entries: HashMap<SessionId, Entry>,
    /// Why a session's last kernel was dropped, with when (to forget the
    /// oldest first).
    lost: HashMap<SessionId, (Instant, String)>,
    closed: bool,
    stats: KernelStats,
}

/// A kernel taken out of the pool, to be dropped outside its lock and
/// recorded.
struct Dropped {
    session_id: SessionId,
    kernel: Option<Kernel>,
    executions: u64,
    memory_bytes: u64,
    reason: String,
}

/// Warm kernels by session. `Send + Sync`; one per long-lived process.
pub struct KernelPool {
    limits: KernelLimits,
    state: Mutex<State>,
}

impl std::fmt::Debug for KernelPool {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("KernelPool")
            .field("limits", &self.limits)
            .field("stats", &self.stats())
            .finish()
    }
}

enum Checkout {
    Found(Kernel, u64),
    Busy,
    Absent,
}

/// What one warm run learned, for after the recording.
#[derive(Default)]
struct RunNotes {
    warm: bool,
    state_lost: Option<String>,
    restarted: Option<KernelRestarted>,
    dropped: Vec<Dropped>,
}

impl KernelPool {
    /// An empty pool under `limits` (`kernels_max` clamped to
    /// [`KERNELS_CEILING`] and at least 1).
    pub fn new(limits: KernelLimits) -> KernelPool {
        KernelPool {
            limits: KernelLimits {
                kernels_max: limits.kernels_max.clamp(1, KERNELS_CEILING),
                ..limits
            },
            state: Mutex::new(State::default()),
        }
    }

    /// The pool's bounds as in force.
    pub fn limits(&self) -> KernelLimits {
        self.limits
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `request` (Python only; other runtimes run one-shot through
    /// [`Engine::execute`]) in the session's warm kernel, starting one if
    /// needed. Limits, scans and recording are [`Engine::execute`]'s; the
    /// `session.executed` event says whether the kernel was warm.
    ///
    /// # Errors
    ///
    /// As [`Engine::execute`]. A guest hitting a limit is an `Ok`
    /// execution with that outcome (and the kernel restarted).
    pub fn execute(
        &self,
        engine: &Engine,
        session_id: SessionId,
        request: &ExecRequest,
    ) -> Result<WarmExecution> {
        self.execute_signalled(engine, session_id, request, None)
    }

    /// [`KernelPool::execute`] with a cancel flag and a live-output sink
    /// (see [`Engine::execute_signalled`]). A cancelled execution ends its
    /// kernel: `kernel.restarted` says so and the session's next execution
    /// reports the state lost.
    ///
    /// # Errors
    ///
    /// As [`KernelPool::execute`].
    pub fn execute_signalled(
        &self,
        engine: &Engine,
        session_id: SessionId,
        request: &ExecRequest,
        signals: Option<&RunSignals>,
    ) -> Result<WarmExecution> {
        let closed = self.state().closed;
        if request.runtime != Runtime::Python || closed {
            self.state().stats.one_shot += 1;
            let execution = match signals {
                Some(signals) => engine.execute_signalled(session_id, request, signals)?,
                None => engine.execute(session_id, request)?,
            };
            return Ok(WarmExecution {
                execution,
                warm: false,
                state_lost: None,
            });
        }
        let mut notes = RunNotes::default();
        let result = engine.execute_with(session_id, request, |mut run| {
            run.request.signals = signals.cloned();
            self.run_in_kernel(session_id, request, run, &mut notes)
        });
        let mut dropped = std::mem::take(&mut notes.dropped);
        if let Err(RuntimeError::SessionNotActive { .. } | RuntimeError::UnknownSession(_)) =
            &result
        {
            dropped.extend(self.take_idle(session_id, "the session is no longer active"));
        }
        self.finish(engine, dropped);
        // Recorded even when the execution could not be: the kernel is gone
        // either way, and the next execution's `state_lost` names it.
        if let Some(restarted) = notes.restarted {
            record(engine, session_id, &Event::KernelRestarted(restarted));
        }
        let execution = result?;
        Ok(WarmExecution {
            execution,
            warm: notes.warm,
            state_lost: notes.state_lost,
        })
    }

    /// The run inside the engine's recording: check the session's kernel
    /// out (or start one), run the frame, check it back in or drop it.
    fn run_in_kernel(
        &self,
        session_id: SessionId,
        request: &ExecRequest,
        run: RunContext<'_>,
        notes: &mut RunNotes,
    ) -> Result<(RunReport, Option<bool>)> {
        let checked_out = {
            let mut state = self.state();
            match state.entries.get_mut(&session_id) {
                Some(entry) => match entry.kernel.take() {
                    Some(kernel) => Checkout::Found(kernel, entry.executions),
                    // Held by another execution of this session: cannot
                    // happen under the engine's session lock, but if two
                    // engines share the pool, run one-shot.
                    None => Checkout::Busy,
                },
                None => {
                    notes.state_lost = state.lost.remove(&session_id).map(|(_, reason)| reason);
                    Checkout::Absent
                }
            }
        };
        let started = match checked_out {
            Checkout::Found(kernel, executions) => {
                notes.warm = true;
                Some((kernel, executions))
            }
            Checkout::Busy => None,
            Checkout::Absent => self
                .start(session_id, &run, notes)
                .map(|kernel| (kernel, 0)),
        };
        let Some((mut kernel, executions)) = started else {
            self.state().stats.one_shot += 1;
            let report = run.sandbox.run(run.module, run.request)?;
            return Ok((report, None));
        };
        let executed = kernel.execute_signalled(
            request.code.clone(),
            &run.request.limits,
            run.request.signals.as_ref(),
        );
        let mut state = self.state();
        if notes.warm {
            state.stats.warm_executions += 1;
        }
        let executions = executions + 1;
        let ran = match executed {
            Ok(ran) => ran,
            Err(error) => {
                state.entries.remove(&session_id);
                remember_lost(&mut state, session_id, error.to_string());
                state.stats.restarts += 1;
                notes.restarted = Some(KernelRestarted {
                    reason: error.to_string(),
                    executions,
                });
                drop(state);
                drop(kernel);
                return Err(error.into());
            }
        };
        if ran.alive && !state.closed {
            if let Some(entry) = state.entries.get_mut(&session_id) {
                entry.kernel = Some(kernel);
                entry.last_used = Instant::now();
                entry.executions = executions;
                entry.memory_bytes = ran.memory_bytes;
            }
            // The kernel just used stays: alone, it is bounded by the
            // execution's own memory limit.
            notes
                .dropped
                .extend(self.evict_for_memory(&mut state, Some(session_id)));
        } else {
            let entry = state.entries.remove(&session_id);
            let reason = match (&ran.ended, state.closed) {
                (Some(reason), _) => reason.clone(),
                (None, _) => "the kernel pool shut down".to_owned(),
            };
            if ran.ended.is_some() {
                state.stats.restarts += 1;
                remember_lost(&mut state, session_id, reason.clone());
                notes.restarted = Some(KernelRestarted { reason, executions });
            } else {
                notes.dropped.push(Dropped {
                    session_id,
                    kernel: Some(kernel),
                    executions,
                    memory_bytes: entry.map_or(ran.memory_bytes, |entry| entry.memory_bytes),
                    reason,
                });
            }
        }
        Ok((ran.report, Some(notes.warm)))
    }

    /// Starts a kernel for `session_id`, making room first. `None` if none
    /// can start (every kernel busy, or the driver failed): the caller runs
    /// one-shot.
    fn start(
        &self,
        session_id: SessionId,
        run: &RunContext<'_>,
        notes: &mut RunNotes,
    ) -> Option<Kernel> {
        {
            let mut state = self.state();
            if state.closed {
                return None;
            }
            while state.entries.len() >= self.limits.kernels_max {
                let Some(victim) = lru_idle(&state, None) else {
                    tracing::warn!(%session_id, kernels_max = self.limits.kernels_max, "every kernel is busy; running one-shot");
                    return None;
                };
                let reason = format!(
                    "the kernel cap (KERNELS_MAX, {} here) was reached; the least recently used kernel made room",
                    self.limits.kernels_max
                );
                if let Some(dropped) = take_entry(&mut state, victim, reason) {
                    notes.dropped.push(dropped);
                }
            }
            // Reserve the slot while the kernel starts.
            state.entries.insert(
                session_id,
                Entry {
                    kernel: None,
                    last_used: Instant::now(),
                    executions: 0,
                    memory_bytes: 0,
                },
            );
        }
        let mut request = run.request.clone();
        request.args = driver_args();
        request.stdin = Vec::new();
        // The driver's start is not the caller's run: nothing to stream.
        request.signals = None;
        let started = Instant::now();
        let result = run.sandbox.start_kernel(run.module, request);
        let mut state = self.state();
        match result {
            Ok((kernel, _report)) => {
                state.stats.kernel_starts += 1;
                state.stats.kernel_start_us = state.stats.kernel_start_us.saturating_add(
                    u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
                );
                if let Some(entry) = state.entries.get_mut(&session_id) {
                    entry.memory_bytes = kernel.memory_bytes();
                }
                Some(kernel)
            }
            Err(error) => {
                state.entries.remove(&session_id);
                tracing::warn!(%session_id, %error, "the kernel did not start; running one-shot");
                None
            }
        }
    }

    /// Evicts least recently used idle kernels (other than `keep`) while
    /// the total memory is past its bound.
    fn evict_for_memory(&self, state: &mut State, keep: Option<SessionId>) -> Vec<Dropped> {
        let mut dropped = Vec::new();
        while total_memory(state) > self.limits.memory_total_max {
            let Some(victim) = lru_idle(state, keep) else {
                break;
            };
            let reason = format!(
                "the kernels' total memory passed KERNEL_MEMORY_TOTAL_MAX ({} bytes here); the least recently used kernel was dropped",
                self.limits.memory_total_max
            );
            if let Some(one) = take_entry(state, victim, reason) {
                dropped.push(one);
            }
        }
        dropped
    }

    fn take_idle(&self, session_id: SessionId, reason: &str) -> Vec<Dropped> {
        let mut state = self.state();
        let idle = state
            .entries
            .get(&session_id)
            .is_some_and(|entry| entry.kernel.is_some());
        if !idle {
            return Vec::new();
        }
        take_entry(&mut state, session_id, reason.to_owned())
            .into_iter()
            .collect()
    }

    /// Drops the session's kernel if it is idle (before a delete or prune,
    /// say), recording `kernel.evicted` with `reason` while the session is
    /// active. Returns whether there was one.
    pub fn drop_session(&self, engine: &Engine, session_id: SessionId, reason: &str) -> bool {
        let dropped = self.take_idle(session_id, reason);
        let any = !dropped.is_empty();
        self.finish(engine, dropped);
        any
    }

    /// Drops kernels idle past the idle timeout, and those whose session is
    /// no longer active. Returns how many.
    pub fn reap_idle(&self, engine: &Engine) -> usize {
        let now = Instant::now();
        let candidates: Vec<(SessionId, Instant)> = self
            .state()
            .entries
            .iter()
            .filter(|(_, entry)| entry.kernel.is_some())
            .map(|(session_id, entry)| (*session_id, entry.last_used))
            .collect();
        let mut dropped = Vec::new();
        for (session_id, last_used) in candidates {
            let active = engine
                .session(session_id)
                .is_ok_and(|session| session.status == SessionStatus::Active);
            let idle = now.saturating_duration_since(last_used);
            let reason = if !active {
                "the session is no longer active".to_owned()
            } else if idle >= self.limits.idle_timeout {
                format!(
                    "idle for {} s, past KERNEL_IDLE_TIMEOUT ({} s here)",
                    idle.as_secs(),
                    self.limits.idle_timeout.as_secs()
                )
            } else {
                continue;
            };
            let mut state = self.state();
            // Used again since the candidates were taken: keep it.
            let still_idle = state
                .entries
                .get(&session_id)
                .is_some_and(|entry| entry.kernel.is_some() && entry.last_used == last_used);
            if still_idle && let Some(one) = take_entry(&mut state, session_id, reason) {
                dropped.push(one);
            }
        }
        let count = dropped.len();
        self.finish(engine, dropped);
        count
    }

    /// Drops every idle kernel (recording why) and makes later executions
    /// run one-shot; a kernel still running is dropped when it finishes.
    pub fn shutdown(&self, engine: &Engine) {
        let dropped = {
            let mut state = self.state();
            state.closed = true;
            let idle: Vec<SessionId> = state
                .entries
                .iter()
                .filter(|(_, entry)| entry.kernel.is_some())
                .map(|(session_id, _)| *session_id)
                .collect();
            idle.into_iter()
                .filter_map(|session_id| {
                    take_entry(
                        &mut state,
                        session_id,
                        "the kernel pool shut down".to_owned(),
                    )
                })
                .collect::<Vec<_>>()
        };
        self.finish(engine, dropped);
    }

    /// Counts, memory and counters.
    pub fn stats(&self) -> KernelStats {
        let state = self.state();
        KernelStats {
            kernels: state.entries.len(),
            busy: state
                .entries
                .values()
                .filter(|entry| entry.kernel.is_none())
                .count(),
            memory_bytes: total_memory(&state),
            ..state.stats
        }
    }

    /// Whether the session has a kernel (idle or running).
    pub fn has_kernel(&self, session_id: SessionId) -> bool {
        self.state().entries.contains_key(&session_id)
    }

    /// Drops taken kernels (outside the lock: an idle kernel's thread is
    /// joined) and records `kernel.evicted` for sessions still active.
    fn finish(&self, engine: &Engine, dropped: Vec<Dropped>) {
        for mut one in dropped {
            drop(one.kernel.take());
            record(
                engine,
                one.session_id,
                &Event::KernelEvicted(KernelEvicted {
                    reason: one.reason,
                    executions: one.executions,
                    memory_bytes: one.memory_bytes,
                }),
            );
        }
    }
}

/// The driver's command line.
fn driver_args() -> Vec<String> {
    vec!["-S".to_owned(), "-c".to_owned(), DRIVER_SOURCE.to_owned()]
}

fn total_memory(state: &State) -> u64 {
    state
        .entries
        .values()
        .map(|entry| entry.memory_bytes)
        .fold(0, u64::saturating_add)
}

/// The least recently used idle kernel's session, other than `keep`.
fn lru_idle(state: &State, keep: Option<SessionId>) -> Option<SessionId> {
    state
        .entries
        .iter()
        .filter(|(session_id, entry)| entry.kernel.is_some() && Some(**session_id) != keep)
        .min_by_key(|(_, entry)| entry.last_used)
        .map(|(session_id, _)| *session_id)
}

fn take_entry(state: &mut State, session_id: SessionId, reason: String) -> Option<Dropped> {
    let entry = state.entries.remove(&session_id)?;
    state.stats.evictions += 1;
    remember_lost(state, session_id, reason.clone());
    Some(Dropped {
        session_id,
        kernel: entry.kernel,
        executions: entry.executions,
        memory_bytes: entry.memory_bytes,
        reason,
    })
}

fn remember_lost(state: &mut State, session_id: SessionId, reason: String) {
    if state.lost.len() >= LOST_REASONS_MAX
        && !state.lost.contains_key(&session_id)
        && let Some(oldest) = state
            .lost
            .iter()
            .min_by_key(|(_, (at, _))| *at)
            .map(|(session_id, _)| *session_id)
    {
        state.lost.remove(&oldest);
    }
    state.lost.insert(session_id, (Instant::now(), reason));
}

/// Appends a kernel event to an active session's stream; a session that is
/// gone gets none (its kernel went with it). Failing to record is logged:
/// the kernel is dropped either way.
fn record(engine: &Engine, session_id: SessionId, event: &Event) {
    let active = engine
        .session(session_id)
        .is_ok_and(|session| session.status == SessionStatus::Active);
    if !active {
        return;
    }
    match engine.append_log(
        session_id.stream(),
        ExpectedVersion::Any,
        &[engine.event(event)],
    ) {
        Ok(_) => {
            tracing::info!(target: "sandlog::lifecycle", event = event.kind(), %session_id, "kernel dropped");
        }
        Err(error) => {
            tracing::warn!(%session_id, %error, kind = event.kind(), "could not record a kernel event");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: a pool is shareable across a server's threads. Method:
    /// compile-time bounds.
    #[test]
    fn pool_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<KernelPool>();
    }

    /// Goal: the count bound cannot take more than half the pool slots.
    /// Method: ask for more and for none.
    #[test]
    fn kernels_max_is_clamped() {
        let pool = KernelPool::new(KernelLimits {
            kernels_max: 1000,
            ..KernelLimits::default()
        });
        assert_eq!(pool.limits().kernels_max, KERNELS_CEILING);
        let pool = KernelPool::new(KernelLimits {
            kernels_max: 0,
            ..KernelLimits::default()
        });
        assert_eq!(pool.limits().kernels_max, 1);
        const { assert!(KERNELS_MAX <= KERNELS_CEILING) };
    }
}

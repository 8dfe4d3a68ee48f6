//! Warm session kernels with the real python.wasm: state that persists,
//! limits that end a kernel (and the restart that follows), eviction,
//! a guest trying to desynchronise the frame protocol, and recording.

#![cfg(test)]

use std::collections::BTreeMap;
use std::time::Duration;

use sandlog_core::event::Event;
use sandlog_core::{Outcome, SessionId, StreamId};
use sandlog_runtime::{ExecRequest, KernelLimits, KernelPool, LimitOverrides, WarmExecution};
use sandlog_tests::engine::TestRoot;

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

fn python(code: &str) -> ExecRequest {
    ExecRequest::python(code)
}

fn with_limits(code: &str, limits: LimitOverrides) -> ExecRequest {
    let mut request = ExecRequest::python(code);
    request.limits = limits;
    request
}

fn run(pool: &KernelPool, root: &TestRoot, id: SessionId, code: &str) -> WarmExecution {
    pool.execute(&root.engine, id, &python(code))
        .unwrap_or_else(|error| panic!("executing {code:?}: {error}"))
}

/// The `warm` field of each `session.executed` of the session, in order.
fn warm_flags(root: &TestRoot, id: SessionId) -> Vec<Option<bool>> {
    root.engine
        .stream_events(StreamId::Session(id))
        .unwrap()
        .iter()
        .filter_map(|envelope| match envelope.event() {
            Ok(Some(Event::SessionExecuted(executed))) => Some(executed.warm),
            _ => None,
        })
        .collect()
}

fn kernel_events(root: &TestRoot, id: SessionId) -> Vec<(String, String)> {
    root.engine
        .stream_events(StreamId::Session(id))
        .unwrap()
        .iter()
        .filter_map(|envelope| match envelope.event() {
            Ok(Some(Event::KernelRestarted(restarted))) => {
                Some(("kernel.restarted".to_owned(), restarted.reason))
            }
            Ok(Some(Event::KernelEvicted(evicted))) => {
                Some(("kernel.evicted".to_owned(), evicted.reason))
            }
            _ => None,
        })
        .collect()
}

fn assert_verifies(root: &TestRoot) {
    let verified = root.engine.verify(None, &|_| {}).unwrap();
    assert!(verified.ok, "verify: {:?}", verified.read_model_mismatches);
}

/// Goal: variables and imports persist between executions of a session,
/// each execution is recorded with whether its kernel was warm, and an
/// exception is an `error` outcome with its traceback that leaves the
/// kernel alive. Method: `x = 1`, `print(x)`, an import used later, `1/0`.
#[test]
fn state_and_imports_persist_across_warm_executions() -> TestResult {
    let root = TestRoot::new()?;
    let pool = KernelPool::new(KernelLimits::default());
    let id = root.engine.create_session(BTreeMap::new())?.session_id;

    let first = run(&pool, &root, id, "x = 1");
    assert_eq!(first.execution.outcome, Outcome::Ok);
    assert!(!first.warm);
    assert_eq!(first.state_lost, None);

    let second = run(&pool, &root, id, "print(x)");
    assert_eq!(second.execution.outcome, Outcome::Ok);
    assert_eq!(second.execution.stdout, b"1\n");
    assert!(second.warm);

    run(&pool, &root, id, "import json");
    let fourth = run(&pool, &root, id, "print(json.dumps([x, 2]))");
    assert_eq!(fourth.execution.stdout, b"[1, 2]\n");

    let failed = run(&pool, &root, id, "1/0");
    assert_eq!(failed.execution.outcome, Outcome::Error);
    assert_eq!(failed.execution.exit_code, Some(1));
    let stderr = String::from_utf8_lossy(&failed.execution.stderr);
    assert!(stderr.contains("Traceback"), "{stderr}");
    assert!(stderr.contains("ZeroDivisionError"), "{stderr}");
    assert!(
        !stderr.contains("_sandlog_kernel"),
        "driver frame shown: {stderr}"
    );

    let after = run(&pool, &root, id, "print(x + 1)");
    assert_eq!(after.execution.stdout, b"2\n");
    assert!(after.warm);
    assert_eq!(
        warm_flags(&root, id),
        vec![
            Some(false),
            Some(true),
            Some(true),
            Some(true),
            Some(true),
            Some(true)
        ]
    );
    assert!(kernel_events(&root, id).is_empty());
    let stats = pool.stats();
    assert_eq!((stats.kernels, stats.kernel_starts), (1, 1));
    assert_eq!(stats.warm_executions, 5);
    assert!(stats.memory_bytes > 0);
    assert_verifies(&root);
    Ok(())
}

/// Runs `x = 1`, then `code` under `limits`, which must end as `outcome`
/// and restart the kernel; then checks the next execution starts fresh,
/// succeeds and says the state was lost.
fn limit_restarts_kernel(code: &str, limits: LimitOverrides, outcome: Outcome) -> TestResult {
    let root = TestRoot::new()?;
    let pool = KernelPool::new(KernelLimits::default());
    let id = root.engine.create_session(BTreeMap::new())?.session_id;
    run(&pool, &root, id, "x = 1");

    let hit = pool.execute(&root.engine, id, &with_limits(code, limits))?;
    assert_eq!(
        hit.execution.outcome, outcome,
        "{:?}",
        hit.execution.message
    );
    assert!(hit.warm);
    assert!(!pool.has_kernel(id), "the kernel survived {outcome:?}");
    let events = kernel_events(&root, id);
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].0, "kernel.restarted");

    let next = run(&pool, &root, id, "print('x' in globals())");
    assert_eq!(next.execution.outcome, Outcome::Ok);
    assert_eq!(next.execution.stdout, b"False\n");
    assert!(!next.warm);
    let lost = next.state_lost.ok_or("no state_lost after a restart")?;
    assert_eq!(lost, events[0].1);
    let again = run(&pool, &root, id, "print(1)");
    assert!(again.warm);
    assert_eq!(again.state_lost, None);
    assert_eq!(pool.stats().restarts, 1);
    assert_verifies(&root);
    Ok(())
}

/// Goal: a warm execution past its wall-clock limit ends as `timeout`,
/// and the kernel restarts. Method: a busy loop under 500 ms.
#[test]
fn a_timeout_restarts_the_kernel() -> TestResult {
    limit_restarts_kernel(
        "while True: pass",
        LimitOverrides {
            timeout: Some(Duration::from_millis(500)),
            ..LimitOverrides::default()
        },
        Outcome::Timeout,
    )
}

/// Goal: a warm execution waiting in the host on a FIFO of its workspace
/// (where no epoch check reaches it) still ends as `timeout` at its
/// deadline, reported by the kernel itself rather than abandoned with its
/// thread stuck, and the kernel restarts. Method: a real FIFO placed in the
/// workspace from outside; the guest opens it for reading under 500 ms.
#[test]
fn a_warm_execution_blocked_on_a_fifo_times_out() -> TestResult {
    let root = TestRoot::new()?;
    let pool = KernelPool::new(KernelLimits::default());
    let id = root.engine.create_session(BTreeMap::new())?.session_id;
    run(&pool, &root, id, "x = 1");
    let fifo = root.engine.layout().workspace(id).join("pipe");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status()?;
    assert!(made.success(), "mkfifo: {made}");
    let limits = LimitOverrides {
        timeout: Some(Duration::from_millis(500)),
        ..LimitOverrides::default()
    };
    let hit = pool.execute(
        &root.engine,
        id,
        &with_limits("print(open('/app/pipe').read())", limits),
    )?;
    assert_eq!(hit.execution.outcome, Outcome::Timeout);
    let message = hit.execution.message.clone().unwrap_or_default();
    assert!(!message.contains("abandoned"), "{message}");
    std::fs::remove_file(&fifo)?;
    let next = run(&pool, &root, id, "print(2)");
    assert_eq!(next.execution.stdout, b"2\n");
    assert_verifies(&root);
    Ok(())
}

/// Goal: a warm execution's fuel is its own (reset per execution): a loop
/// runs out of it, and the kernel restarts. Method: 200 M fuel, busy loop.
#[test]
fn fuel_exhaustion_restarts_the_kernel() -> TestResult {
    limit_restarts_kernel(
        "while True: pass",
        LimitOverrides {
            fuel: Some(200_000_000),
            ..LimitOverrides::default()
        },
        Outcome::OutOfFuel,
    )
}

/// Goal: an allocation past a warm execution's memory limit ends as
/// `memory`, and the kernel restarts. Method: 300 MB under 128 MiB.
#[test]
fn out_of_memory_restarts_the_kernel() -> TestResult {
    limit_restarts_kernel(
        "b = bytearray(300 * 1024 * 1024)",
        LimitOverrides {
            memory_bytes: Some(128 * 1024 * 1024),
            ..LimitOverrides::default()
        },
        Outcome::Memory,
    )
}

/// Goal: each warm execution's fuel is counted from zero: many small
/// executions, each far under the limit, never add up to an exhaustion.
/// Method: 20 executions under a fuel limit 5 times what one needs.
#[test]
fn fuel_is_reset_for_every_execution() -> TestResult {
    let root = TestRoot::new()?;
    let pool = KernelPool::new(KernelLimits::default());
    let id = root.engine.create_session(BTreeMap::new())?.session_id;
    run(&pool, &root, id, "n = 0");
    let code = "for _ in range(20000): n += 1";
    let one = run(&pool, &root, id, code).execution.fuel_consumed;
    let limits = LimitOverrides {
        fuel: Some(one * 5),
        ..LimitOverrides::default()
    };
    for _ in 0..20 {
        let ran = pool.execute(&root.engine, id, &with_limits(code, limits))?;
        assert_eq!(ran.execution.outcome, Outcome::Ok);
        assert!(ran.warm);
    }
    assert_eq!(
        run(&pool, &root, id, "print(n)").execution.stdout,
        b"420000\n"
    );
    Ok(())
}

/// Goal: past the kernel cap the least recently used idle kernel is
/// evicted, with `kernel.evicted`, and its session's next execution says
/// its state was lost; the others stay warm. Method: cap 2; sessions a, b,
/// then a again, then c (evicts b).
#[test]
fn the_least_recently_used_kernel_is_evicted_at_the_cap() -> TestResult {
    let root = TestRoot::new()?;
    let pool = KernelPool::new(KernelLimits {
        kernels_max: 2,
        ..KernelLimits::default()
    });
    let a = root.engine.create_session(BTreeMap::new())?.session_id;
    let b = root.engine.create_session(BTreeMap::new())?.session_id;
    let c = root.engine.create_session(BTreeMap::new())?.session_id;
    run(&pool, &root, a, "v = 'a'");
    run(&pool, &root, b, "v = 'b'");
    assert!(run(&pool, &root, a, "print(v)").warm);
    run(&pool, &root, c, "v = 'c'");

    assert_eq!(pool.stats().kernels, 2);
    assert!(pool.has_kernel(a) && pool.has_kernel(c) && !pool.has_kernel(b));
    let evicted = kernel_events(&root, b);
    assert_eq!(evicted.len(), 1, "{evicted:?}");
    assert_eq!(evicted[0].0, "kernel.evicted");
    assert!(evicted[0].1.contains("KERNELS_MAX"), "{}", evicted[0].1);
    assert!(kernel_events(&root, a).is_empty());

    let back = run(&pool, &root, a, "print(v)");
    assert!(back.warm);
    assert_eq!(back.execution.stdout, b"a\n");
    let b_again = run(&pool, &root, b, "print('v' in globals())");
    assert!(!b_again.warm);
    assert_eq!(b_again.execution.stdout, b"False\n");
    assert_eq!(b_again.state_lost.as_deref(), Some(evicted[0].1.as_str()));
    assert_eq!(pool.stats().evictions, 2, "b, then c or a for b's return");
    assert_verifies(&root);
    Ok(())
}

/// Goal: past the total memory bound, the least recently used idle
/// kernels are evicted and the one just used stays. Method: a bound below
/// one kernel's memory; sessions a then b.
#[test]
fn kernels_past_the_memory_total_are_evicted() -> TestResult {
    let root = TestRoot::new()?;
    let pool = KernelPool::new(KernelLimits {
        memory_total_max: 1024 * 1024,
        ..KernelLimits::default()
    });
    let a = root.engine.create_session(BTreeMap::new())?.session_id;
    let b = root.engine.create_session(BTreeMap::new())?.session_id;
    run(&pool, &root, a, "v = 'a'");
    assert!(pool.has_kernel(a), "the kernel just used is kept");
    run(&pool, &root, b, "v = 'b'");
    assert!(pool.has_kernel(b) && !pool.has_kernel(a));
    let evicted = kernel_events(&root, a);
    assert_eq!(evicted.len(), 1, "{evicted:?}");
    assert!(
        evicted[0].1.contains("KERNEL_MEMORY_TOTAL_MAX"),
        "{}",
        evicted[0].1
    );
    assert!(run(&pool, &root, b, "print(v)").warm);
    Ok(())
}

/// Goal: one pool serves many sessions from many threads at once (as a
/// server does): every execution is recorded once, each session's state
/// is its own, and the log verifies. Method: 4 threads, a session each, 10
/// executions each counting in a session variable.
#[test]
fn concurrent_sessions_share_one_pool() -> TestResult {
    let root = TestRoot::new()?;
    let pool = KernelPool::new(KernelLimits::default());
    let sessions: Vec<SessionId> = (0..4)
        .map(|_| {
            root.engine
                .create_session(BTreeMap::new())
                .map(|s| s.session_id)
        })
        .collect::<Result<_, _>>()?;
    std::thread::scope(|scope| {
        for (index, id) in sessions.iter().enumerate() {
            let (pool, root) = (&pool, &root);
            scope.spawn(move || {
                run(pool, root, *id, &format!("n = {index} * 100"));
                for _ in 0..10 {
                    let ran = run(pool, root, *id, "n += 1");
                    assert_eq!(ran.execution.outcome, Outcome::Ok);
                    assert!(ran.warm);
                }
                let total = run(pool, root, *id, "print(n)");
                assert_eq!(
                    total.execution.stdout,
                    format!("{}\n", index * 100 + 10).into_bytes()
                );
            });
        }
    });
    for id in &sessions {
        assert_eq!(warm_flags(&root, *id).len(), 12);
    }
    let stats = pool.stats();
    assert_eq!((stats.kernels, stats.busy, stats.kernel_starts), (4, 0, 4));
    assert_verifies(&root);
    Ok(())
}

/// Goal: the guest cannot end an execution early, or smuggle output into
/// the next one, by writing the driver's status or a frame-like header
/// anywhere. Method: code that writes the status to fd 0 and fd 1 and a
/// length header to fd 1, then keeps printing; the next execution's output
/// must be its own, exactly.
#[test]
fn a_fake_end_of_execution_cannot_desynchronise_the_host() -> TestResult {
    let root = TestRoot::new()?;
    let pool = KernelPool::new(KernelLimits::default());
    let id = root.engine.create_session(BTreeMap::new())?.session_id;
    run(&pool, &root, id, "import os, sys");
    let forged = run(
        &pool,
        &root,
        id,
        "os.write(1, b'sandlog-status:0')\n\
         os.write(0, b'sandlog-status:0')\n\
         os.write(1, (5).to_bytes(8, 'little') + b'print')\n\
         sys.stdout.flush()\n\
         import time; time.sleep(0.2)\n\
         print('after')\n\
         sys.exit(4)",
    );
    assert_eq!(forged.execution.outcome, Outcome::Error);
    assert_eq!(forged.execution.exit_code, Some(4));
    let stdout = String::from_utf8_lossy(&forged.execution.stdout);
    assert!(stdout.ends_with("after\n"), "{stdout:?}");
    let next = run(&pool, &root, id, "print('next')");
    assert!(next.warm);
    assert_eq!(next.execution.stdout, b"next\n");
    assert_eq!(next.execution.outcome, Outcome::Ok);
    assert!(kernel_events(&root, id).is_empty());
    Ok(())
}

/// Goal: a guest reading the frame channel itself breaks the protocol;
/// the host notices (it asked for a frame with no status), ends the
/// kernel with a reason, and the next execution starts fresh. Method:
/// `os.read(0, 1)` in executed code.
#[test]
fn reading_the_frame_channel_ends_the_kernel() -> TestResult {
    let root = TestRoot::new()?;
    let pool = KernelPool::new(KernelLimits::default());
    let id = root.engine.create_session(BTreeMap::new())?.session_id;
    run(&pool, &root, id, "import os");
    let broken = run(&pool, &root, id, "os.read(0, 1)\nprint('unreachable')");
    assert_eq!(broken.execution.outcome, Outcome::Error);
    assert!(!pool.has_kernel(id));
    let events = kernel_events(&root, id);
    assert_eq!(events.len(), 1);
    assert!(events[0].1.contains("status"), "{}", events[0].1);
    let next = run(&pool, &root, id, "print(2)");
    assert_eq!(next.execution.stdout, b"2\n");
    assert!(next.state_lost.is_some());
    // `input()` sees the end of its stdin, not a frame.
    let input = run(
        &pool,
        &root,
        id,
        "try:\n    input()\nexcept EOFError:\n    print('eof')",
    );
    assert_eq!(input.execution.stdout, b"eof\n");
    assert!(input.warm);
    Ok(())
}

/// Goal: a warm execution's file changes are scanned and recorded as a
/// one-shot execution's are, including a file left open between
/// executions. Method: write, append through an open handle, delete; look
/// at the execution results, the events and the projection.
#[test]
fn file_changes_of_warm_executions_are_recorded() -> TestResult {
    let root = TestRoot::new()?;
    let pool = KernelPool::new(KernelLimits::default());
    let id = root.engine.create_session(BTreeMap::new())?.session_id;
    let wrote = run(
        &pool,
        &root,
        id,
        "open('a.txt', 'w').write('hi')\nf = open('log.txt', 'w')\nf.write('x'); f.flush()",
    );
    let mut written: Vec<String> = wrote
        .execution
        .files_written
        .iter()
        .map(ToString::to_string)
        .collect();
    written.sort();
    assert_eq!(written, vec!["a.txt", "log.txt"]);

    let appended = run(&pool, &root, id, "f.write('y'); f.close()");
    assert!(appended.warm);
    assert_eq!(
        appended
            .execution
            .files_written
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        vec!["log.txt"]
    );
    let log = sandlog_core::WorkspacePath::parse("log.txt")?;
    assert_eq!(root.engine.read_file(id, &log)?, b"xy");

    let deleted = run(&pool, &root, id, "import os; os.remove('a.txt')");
    assert_eq!(
        deleted
            .execution
            .files_deleted
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        vec!["a.txt"]
    );
    let files: Vec<String> = root
        .engine
        .list_files(id, None)?
        .into_iter()
        .map(|file| file.path.to_string())
        .collect();
    assert_eq!(files, vec!["log.txt"]);
    let kinds = root.stream_kinds(id)?;
    assert_eq!(
        kinds,
        vec![
            "session.created",
            "session.executed",
            "file.written",
            "file.written",
            "session.executed",
            "file.written",
            "session.executed",
            "file.deleted",
        ]
    );
    assert_verifies(&root);
    Ok(())
}

/// Goal: an idle kernel never blocks deleting its session, and is dropped
/// afterwards (reaped, or on its session's next use); shutdown drops the
/// rest with `kernel.evicted` and later executions run one-shot.
/// Method: delete a session whose kernel is idle, reap; shut down.
#[test]
fn idle_kernels_do_not_block_delete_and_shutdown_drops_them() -> TestResult {
    let root = TestRoot::new()?;
    let pool = KernelPool::new(KernelLimits::default());
    let gone = root.engine.create_session(BTreeMap::new())?.session_id;
    let kept = root.engine.create_session(BTreeMap::new())?.session_id;
    run(&pool, &root, gone, "x = 1");
    run(&pool, &root, kept, "x = 2");
    root.engine
        .delete_session_waiting(gone, "test", Duration::ZERO)?;
    assert_eq!(pool.reap_idle(&root.engine), 1);
    assert!(!pool.has_kernel(gone) && pool.has_kernel(kept));

    pool.shutdown(&root.engine);
    assert_eq!(pool.stats().kernels, 0);
    let events = kernel_events(&root, kept);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].0, "kernel.evicted");
    let after = run(&pool, &root, kept, "print('x' in globals())");
    assert_eq!(after.execution.stdout, b"False\n");
    assert!(!after.warm);
    assert_eq!(warm_flags(&root, kept).last(), Some(&None));
    assert_verifies(&root);
    Ok(())
}

/// Goal: kernels idle past the timeout are reaped with `kernel.evicted`.
/// Method: a zero idle timeout.
#[test]
fn idle_kernels_are_reaped_after_the_timeout() -> TestResult {
    let root = TestRoot::new()?;
    let pool = KernelPool::new(KernelLimits {
        idle_timeout: Duration::ZERO,
        ..KernelLimits::default()
    });
    let id = root.engine.create_session(BTreeMap::new())?.session_id;
    run(&pool, &root, id, "x = 1");
    assert_eq!(pool.reap_idle(&root.engine), 1);
    let events = kernel_events(&root, id);
    assert_eq!(events.len(), 1);
    assert!(
        events[0].1.contains("KERNEL_IDLE_TIMEOUT"),
        "{}",
        events[0].1
    );
    let next = run(&pool, &root, id, "print(1)");
    assert!(next.state_lost.is_some());
    Ok(())
}

/// Goal: a caller's cancel flag stops a running guest, warm or one-shot,
/// the execution is recorded with outcome `cancelled` (a warm kernel is
/// then restarted, and the next execution says its state was lost), and
/// the live-output sink got exactly the recorded output, in order.
/// Method: the guest prints, then loops forever; the sink cancels once it
/// has seen the print (so cancelling provably happens mid-run).
#[test]
fn a_cancelled_run_stops_and_is_recorded_with_what_it_streamed() -> TestResult {
    use sandlog_runtime::sandbox::{CancelFlag, OutputStream, RunSignals};
    use std::sync::{Arc, Mutex};

    /// Output chunks as the sink saw them.
    type Chunks = Vec<(OutputStream, Vec<u8>)>;

    let root = TestRoot::new()?;
    let pool = KernelPool::new(KernelLimits::default());
    let id = root.engine.create_session(BTreeMap::new())?.session_id;
    run(&pool, &root, id, "x = 1");
    let code = "import sys\nprint('a', flush=True)\nprint('b', file=sys.stderr, flush=True)\nwhile True: pass";
    let request = with_limits(
        code,
        LimitOverrides {
            timeout: Some(Duration::from_secs(120)),
            fuel: Some(u64::MAX / 2),
            ..LimitOverrides::default()
        },
    );
    for warm in [true, false] {
        let chunks: Arc<Mutex<Chunks>> = Arc::default();
        let cancel = CancelFlag::new();
        let signals = RunSignals {
            cancel: cancel.clone(),
            on_output: Some(Arc::new({
                let chunks = Arc::clone(&chunks);
                move |stream: OutputStream, chunk: &[u8]| {
                    let mut chunks = chunks.lock().unwrap();
                    chunks.push((stream, chunk.to_vec()));
                    if stream == OutputStream::Stderr {
                        cancel.cancel();
                    }
                }
            })),
        };
        let execution = if warm {
            pool.execute_signalled(&root.engine, id, &request, Some(&signals))?
                .execution
        } else {
            root.engine.execute_signalled(id, &request, &signals)?
        };
        assert_eq!(execution.outcome, Outcome::Cancelled, "warm {warm}");
        assert_eq!(execution.stdout, b"a\n");
        assert_eq!(execution.stderr, b"b\n");
        let chunks = chunks.lock().unwrap();
        assert_eq!(
            *chunks,
            vec![
                (OutputStream::Stdout, b"a\n".to_vec()),
                (OutputStream::Stderr, b"b\n".to_vec())
            ]
        );
    }
    let after = run(&pool, &root, id, "print(globals().get('x'))");
    assert_eq!(after.execution.stdout, b"None\n");
    assert!(
        after
            .state_lost
            .is_some_and(|reason| reason.contains("cancelled"))
    );
    let events = kernel_events(&root, id);
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].0, "kernel.restarted");
    let outcomes: Vec<Outcome> = root
        .engine
        .stream_events(StreamId::Session(id))?
        .iter()
        .filter_map(|envelope| match envelope.event() {
            Ok(Some(Event::SessionExecuted(executed))) => Some(executed.outcome),
            _ => None,
        })
        .collect();
    assert_eq!(
        outcomes,
        vec![
            Outcome::Ok,
            Outcome::Cancelled,
            Outcome::Cancelled,
            Outcome::Ok
        ]
    );
    assert_verifies(&root);
    Ok(())
}

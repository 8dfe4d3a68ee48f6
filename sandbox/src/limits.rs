//! Every limit the sandbox enforces: named defaults, hard maxima, the
//! per-run [`ExecLimits`], and the store's `GuestLimiter`.
//!
//! Units are suffixes (`_bytes`, `_ms`). Each `*_DEFAULT` is what a run gets
//! unless the caller overrides it; each `*_MAX` is a ceiling no request may
//! exceed, because the engine was configured for it (memory), because the
//! host holds it in RAM (output), or because a bigger value would no longer
//! bound anything useful (timeout). Relationships between them are asserted
//! at compile time at the bottom of the constants.

use std::time::Duration;

use wasmtime::ResourceLimiter;

use super::SandboxError;

/// One WebAssembly page: the unit linear memory grows by.
pub const WASM_PAGE_BYTES: u64 = 64 * 1024;

/// Default fuel per run: about 10 s of CPython compute.
///
/// Why this value: CPython burns 4.3–5.6 G units of fuel per CPU-second of
/// interpreted work here (measured on three loop kinds), and its start-up
/// (`print(1)`) ~0.21 G. 50 G therefore stops runaway computation
/// deterministically after ~10 s of CPU, well inside the default 30 s
/// timeout on an unloaded host, while leaving ample room for real work.
/// Fuel, unlike the timeout, stops a given guest at the same instruction on
/// every machine and under any load.
pub const FUEL_DEFAULT: u64 = 50_000_000_000;

/// Default wall-clock limit per run.
///
/// Why 30 s: long enough for real data-processing snippets, short enough that
/// a stuck session does not hold a worker thread for minutes. This bounds time
/// spent blocked outside wasm too (sleeps), which fuel cannot see.
pub const TIMEOUT_DEFAULT: Duration = Duration::from_secs(30);

/// Hard ceiling on the wall-clock limit.
///
/// Why: a run occupies a host thread and a pooling-allocator slot for its
/// whole life; anything longer than this is a batch job, not a sandbox call.
pub const TIMEOUT_MAX: Duration = Duration::from_secs(600);

/// How often the epoch ticker advances the engine's epoch, which is when a
/// running guest checks its deadline (and, rate-limited, its quota).
///
/// Why 10 ms: the timeout is honoured to within about one tick, and a check
/// per 10 ms costs a guest well under 1% (it is a clock read and a compare).
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// How long after its deadline a run still blocked in a host call (a guest
/// opening or reading a FIFO in its workspace waits in the kernel, where no
/// epoch check reaches it) has its FIFOs unblocked, and how often again
/// while it stays blocked.
///
/// Why 50 ms: a guest in wasm code ends within one [`EPOCH_TICK`] of its
/// deadline and is never touched; only a run still going five ticks later
/// is waiting in the host, and its timeout is then honoured within 50 ms.
pub const UNBLOCK_AFTER: Duration = Duration::from_millis(50);

/// Most directory entries one unblocking round visits across a run's
/// workspace and mounts.
///
/// Why 100,000: a workspace of ordinary size is walked whole in a few
/// milliseconds, while a pathological tree (up to
/// [`SCAN_ENTRIES_DEFAULT`]) costs the unblocking thread a bounded walk per
/// round; only a run already past its deadline pays it.
pub const UNBLOCK_ENTRIES_MAX: u64 = 100_000;

/// The smallest accepted timeout: one epoch tick, the timer's resolution.
pub const TIMEOUT_MIN: Duration = EPOCH_TICK;

/// Default cap on a guest's linear memory.
///
/// Why 256 MiB: CPython with the standard library needs ~20 MiB to start and
/// typical data snippets stay far below 256 MiB, while 256 MiB × a few
/// concurrent runs fits comfortably in a small host's RAM.
pub const MEMORY_BYTES_DEFAULT: u64 = 256 * 1024 * 1024;

/// Hard ceiling on a guest's linear memory: 4 GiB, all a wasm32 memory can
/// address.
///
/// Why: the pooling allocator reserves (virtual) slots of this size, so a
/// request up to it can never fail at instantiation; growth beyond it is
/// refused like any other over-limit growth.
pub const MEMORY_BYTES_MAX: u64 = 4 * 1024 * 1024 * 1024;

/// The smallest accepted memory limit: one wasm page.
pub const MEMORY_BYTES_MIN: u64 = WASM_PAGE_BYTES;

/// Default cap on captured stdout and on captured stderr (each).
///
/// Why 1 MiB: enough for any output a person or a model will read, small
/// enough that many concurrent runs cannot exhaust host RAM. Output past the
/// cap is dropped silently (the guest sees successful writes) and the
/// report's `*_truncated` flag says so.
pub const OUTPUT_BYTES_DEFAULT: usize = 1024 * 1024;

/// Hard ceiling on each captured stream.
///
/// Why: captured output lives in host RAM until the run ends; 64 MiB × 2
/// streams × `CONCURRENT_RUNS_MAX` is the worst case the host must hold.
pub const OUTPUT_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Default quota on the total size of regular files in a workspace.
///
/// Why 100 MiB: the seeds' per-session budget; sessions are scratch space,
/// not storage, and hundreds of them share one disk.
pub const WORKSPACE_BYTES_DEFAULT: u64 = 100 * 1024 * 1024;

/// Hard ceiling on the workspace byte quota.
///
/// Why: the quota is measured by walking the workspace; beyond this the
/// workspace should be a volume with a filesystem quota, not a sandbox dir.
pub const WORKSPACE_BYTES_MAX: u64 = 16 * 1024 * 1024 * 1024;

/// Default cap on the number of entries (files, directories, symlinks) in a
/// workspace.
///
/// Why: a byte quota alone lets a guest create millions of empty files,
/// exhausting inodes and making every later scan of the workspace slow. The
/// quota walk stops as soon as this many entries are seen, which also bounds
/// the cost of one quota check.
pub const WORKSPACE_ENTRIES_DEFAULT: u64 = 100_000;

/// Hard ceiling on the workspace entry cap.
pub const WORKSPACE_ENTRIES_MAX: u64 = 10_000_000;

/// Shortest interval between two quota checks while the guest runs.
///
/// Why 100 ms: a guest writing at disk speed (~1 GB/s) overshoots the quota
/// by at most ~100 MB before it is stopped, and walking a workspace of a few
/// hundred files every 100 ms costs the guest ~1%. The interval also
/// stretches to `QUOTA_CHECK_COST_RATIO` × the last walk's duration, so a
/// large workspace is walked proportionally less often.
pub const QUOTA_CHECK_INTERVAL: Duration = Duration::from_millis(100);

/// The interval between quota checks is at least this many times the
/// duration of the last check, so checking never takes more than
/// 1/`QUOTA_CHECK_COST_RATIO` of the guest's wall time.
pub const QUOTA_CHECK_COST_RATIO: u32 = 20;

/// Most runs that may be in flight at once in one `Sandbox`: the number of
/// pooling-allocator slots (instances, memories, tables).
///
/// Why 32: each slot reserves `MEMORY_BYTES_MAX` plus guard of *virtual*
/// address space (~130 GiB in total, far inside the 128 TiB user space) and
/// nothing resident when idle; 32 concurrent CPython runs need ~1 GiB RAM
/// and far more cores than a sandbox host has. A run past this gets
/// [`SandboxError::Instantiate`].
pub const CONCURRENT_RUNS_MAX: u32 = 32;

/// Core instances per run: the guest and the sleep guard's trampoline
/// (which has no memory or table of its own).
pub(crate) const INSTANCES_PER_RUN: usize = 2;

/// Most elements any guest table may grow to.
///
/// Why: tables hold function references (8 bytes each on the host), and the
/// pooling allocator reserves this many per slot; python.wasm declares 5,903
/// and quickjs.wasm 546. 100,000 leaves room for much larger runtimes while
/// keeping the pool's table reservation at 25 MiB.
pub const TABLE_ELEMENTS_MAX: usize = 100_000;

/// Most bytes of arguments plus environment passed to a guest.
///
/// Why: both are copied into guest memory at start-up; 8 MiB carries any
/// realistic code snippet passed as `-c CODE` with room to spare.
pub const ARGS_ENV_BYTES_MAX: usize = 8 * 1024 * 1024;

/// Most bytes of stdin handed to a guest.
///
/// Why: stdin is held in host RAM for the run; 64 MiB matches the output
/// ceiling.
pub const STDIN_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Most read-only mounts one run may have.
///
/// Why: each mount is an open directory handle; a handful covers vendored
/// packages and data sets.
pub const READONLY_MOUNTS_MAX: usize = 16;

/// Default cap on the entries the host's scan after a run visits.
///
/// Why 1,000,000: ten times the default entry quota, so a workspace within
/// its quota is always scanned whole, while the scan's memory (a path and a
/// size per file, ~100 bytes) stays near 100 MB at worst. Past it the scan
/// stops, the execution is recorded as `limit_exceeded` (`scan_entries`)
/// with the changes seen so far, and no deletion is inferred.
pub const SCAN_ENTRIES_DEFAULT: u64 = 1_000_000;

/// Hard ceiling on the scan entry cap: the entry quota's ceiling.
pub const SCAN_ENTRIES_CEILING: u64 = WORKSPACE_ENTRIES_MAX;

/// Most file changes (writes plus deletions) one execution records as
/// events; also the default of [`ExecLimits::changed_files_max`].
///
/// Why 10,000: each change is one event of at most ~4.3 KB (a path of up
/// to 4096 bytes), so one execution's append stays under ~45 MB and one
/// SQLite transaction, far inside `BATCH_EVENTS_MAX`, and the database
/// does not grow by ~1 KB per file for a guest that creates millions of
/// files. Past it the first changes in path order are recorded, the
/// outcome is `limit_exceeded` (`changed_files`) and `session.executed`
/// carries the total and a digest of the full change list.
pub const CHANGED_FILES_PER_EXEC_MAX: u64 = 10_000;

/// Shortest time the host's scan and hashing after a run may take before
/// giving up; the bound is the run's timeout, but never less than this.
///
/// Why 1 s: a run with a tiny timeout can still leave a workspace of
/// ordinary size to scan (thousands of files scan in milliseconds). Past
/// the bound the execution is recorded as `limit_exceeded` (`scan_time`)
/// with what was scanned and hashed so far.
pub const SCAN_TIME_MIN: Duration = Duration::from_secs(1);

/// Longest a process waits for another one compiling the same module into
/// the shared cache before compiling it itself.
///
/// Why 120 s: compiling python.wasm takes seconds on an idle machine and
/// several times that on a busy one; waiting saves the CPU of a second
/// compile, and both processes still get a correct module if the first one
/// hangs or dies (the lock dies with it): past the wait this process
/// compiles too, and atomic renames keep the entry whole.
pub const COMPILE_WAIT_MAX: Duration = Duration::from_secs(120);

/// How often a process waiting for another one's compile retries the lock.
/// Advisory locks cannot be waited on with a deadline; 50 ms is nothing
/// against a compile of seconds.
pub const COMPILE_WAIT_POLL: Duration = Duration::from_millis(50);

const _: () = assert!(SCAN_ENTRIES_DEFAULT <= SCAN_ENTRIES_CEILING);
const _: () = assert!(WORKSPACE_ENTRIES_DEFAULT <= SCAN_ENTRIES_DEFAULT);
// `session.executed` plus every recorded change is one append.
const _: () = assert!(CHANGED_FILES_PER_EXEC_MAX < sandlog_core::limits::BATCH_EVENTS_MAX as u64);
const _: () = assert!(TIMEOUT_MIN.as_nanos() <= TIMEOUT_DEFAULT.as_nanos());
const _: () = assert!(TIMEOUT_DEFAULT.as_nanos() <= TIMEOUT_MAX.as_nanos());
// The deadline is only checked on ticks, so a tick must be far shorter than
// any timeout a caller can ask for, and quota checks happen on ticks too.
const _: () = assert!(EPOCH_TICK.as_nanos() <= TIMEOUT_MIN.as_nanos());
const _: () = assert!(EPOCH_TICK.as_nanos() <= QUOTA_CHECK_INTERVAL.as_nanos());
const _: () = assert!(QUOTA_CHECK_INTERVAL.as_nanos() < TIMEOUT_DEFAULT.as_nanos());
const _: () = assert!(QUOTA_CHECK_COST_RATIO >= 2);
const _: () = assert!(MEMORY_BYTES_MIN <= MEMORY_BYTES_DEFAULT);
const _: () = assert!(MEMORY_BYTES_DEFAULT <= MEMORY_BYTES_MAX);
const _: () = assert!(MEMORY_BYTES_DEFAULT.is_multiple_of(WASM_PAGE_BYTES));
const _: () = assert!(MEMORY_BYTES_MAX.is_multiple_of(WASM_PAGE_BYTES));
// A wasm32 memory cannot exceed 4 GiB, so a larger ceiling would be a lie.
const _: () = assert!(MEMORY_BYTES_MAX <= 1 << 32);
const _: () = assert!(OUTPUT_BYTES_DEFAULT <= OUTPUT_BYTES_MAX);
const _: () = assert!(WORKSPACE_BYTES_DEFAULT <= WORKSPACE_BYTES_MAX);
const _: () = assert!(WORKSPACE_ENTRIES_DEFAULT <= WORKSPACE_ENTRIES_MAX);
const _: () = assert!(CONCURRENT_RUNS_MAX >= 1);
// Both captured streams of every concurrent run must fit in 8 GiB of host RAM
// even at their ceilings.
const _: () = assert!(2 * OUTPUT_BYTES_MAX as u64 * CONCURRENT_RUNS_MAX as u64 <= 8 << 30);

/// The limits one run executes under. Every field is enforced; hitting one is
/// an [`Outcome`](super::Outcome), never an error or a host panic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecLimits {
    /// Fuel (≈ wasm instructions) the guest may burn; `None` means only the
    /// timeout bounds it. Exhaustion ends the run as `out_of_fuel`. Fuel is
    /// always metered (the engine is built with it), so the report carries
    /// the fuel consumed either way.
    pub fuel: Option<u64>,
    /// Wall-clock limit, honoured to within one [`EPOCH_TICK`], including
    /// time the guest spends sleeping. Ends the run as `timeout`.
    pub timeout: Duration,
    /// Cap on the guest's linear memory. A refused growth makes the guest's
    /// allocator fail (CPython raises `MemoryError`); the run then ends as
    /// `memory` unless the guest recovered and exited 0.
    pub memory_bytes: u64,
    /// Cap on captured stdout; the rest is dropped and flagged.
    pub stdout_bytes_max: usize,
    /// Cap on captured stderr; the rest is dropped and flagged.
    pub stderr_bytes_max: usize,
    /// Quota on the total size of regular files in the workspace. Past it
    /// the run ends as `quota` (checked during the run and after it).
    pub workspace_bytes_max: u64,
    /// Cap on the number of entries in the workspace, enforced like the
    /// byte quota.
    pub workspace_entries_max: u64,
    /// Cap on the entries the host's scan after the run visits (see
    /// [`SCAN_ENTRIES_DEFAULT`]).
    pub scan_entries_max: u64,
    /// Cap on the file changes one execution records (see
    /// [`CHANGED_FILES_PER_EXEC_MAX`]).
    pub changed_files_max: u64,
}

impl Default for ExecLimits {
    fn default() -> Self {
        ExecLimits {
            fuel: Some(FUEL_DEFAULT),
            timeout: TIMEOUT_DEFAULT,
            memory_bytes: MEMORY_BYTES_DEFAULT,
            stdout_bytes_max: OUTPUT_BYTES_DEFAULT,
            stderr_bytes_max: OUTPUT_BYTES_DEFAULT,
            workspace_bytes_max: WORKSPACE_BYTES_DEFAULT,
            workspace_entries_max: WORKSPACE_ENTRIES_DEFAULT,
            scan_entries_max: SCAN_ENTRIES_DEFAULT,
            changed_files_max: CHANGED_FILES_PER_EXEC_MAX,
        }
    }
}

impl ExecLimits {
    /// Checks every field against its minimum and maximum.
    ///
    /// # Errors
    ///
    /// [`SandboxError::InvalidLimit`] naming the first field out of range.
    pub fn validate(&self) -> Result<(), SandboxError> {
        if let Some(fuel) = self.fuel {
            check_range("fuel", u128::from(fuel), 1, u128::from(u64::MAX))?;
        }
        check_range(
            "timeout_ms",
            self.timeout.as_millis(),
            TIMEOUT_MIN.as_millis(),
            TIMEOUT_MAX.as_millis(),
        )?;
        check_range(
            "memory_bytes",
            u128::from(self.memory_bytes),
            u128::from(MEMORY_BYTES_MIN),
            u128::from(MEMORY_BYTES_MAX),
        )?;
        check_range(
            "stdout_bytes_max",
            self.stdout_bytes_max as u128,
            0,
            OUTPUT_BYTES_MAX as u128,
        )?;
        check_range(
            "stderr_bytes_max",
            self.stderr_bytes_max as u128,
            0,
            OUTPUT_BYTES_MAX as u128,
        )?;
        check_range(
            "workspace_bytes_max",
            u128::from(self.workspace_bytes_max),
            0,
            u128::from(WORKSPACE_BYTES_MAX),
        )?;
        check_range(
            "workspace_entries_max",
            u128::from(self.workspace_entries_max),
            0,
            u128::from(WORKSPACE_ENTRIES_MAX),
        )?;
        check_range(
            "scan_entries_max",
            u128::from(self.scan_entries_max),
            0,
            u128::from(SCAN_ENTRIES_CEILING),
        )?;
        check_range(
            "changed_files_max",
            u128::from(self.changed_files_max),
            0,
            u128::from(CHANGED_FILES_PER_EXEC_MAX),
        )?;
        Ok(())
    }
}

fn check_range(name: &'static str, value: u128, min: u128, max: u128) -> Result<(), SandboxError> {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(SandboxError::InvalidLimit {
            name,
            value,
            min,
            max,
        })
    }
}

/// The store's resource limiter: enforces the memory cap and remembers that
/// it refused, because the guest only sees a failed `memory.grow` (CPython
/// turns it into `MemoryError` and exits 1), and the report must still say
/// `memory`.
#[derive(Debug)]
pub(crate) struct GuestLimiter {
    memory_bytes_max: usize,
    memory_bytes_peak: usize,
    memory_refused: bool,
}

impl GuestLimiter {
    /// A limiter for one run. `memory_bytes` has been validated to be at
    /// most `MEMORY_BYTES_MAX`, which fits `usize` on the 64-bit hosts
    /// wasmtime's pooling allocator supports; it saturates otherwise.
    pub(crate) fn new(memory_bytes: u64) -> Self {
        GuestLimiter {
            memory_bytes_max: usize::try_from(memory_bytes).unwrap_or(usize::MAX),
            memory_bytes_peak: 0,
            memory_refused: false,
        }
    }

    /// True if any memory growth (including the initial allocation) was
    /// refused or failed during the run.
    pub(crate) fn memory_refused(&self) -> bool {
        self.memory_refused
    }

    /// The largest linear memory size granted during the run.
    pub(crate) fn memory_bytes_peak(&self) -> u64 {
        u64::try_from(self.memory_bytes_peak).unwrap_or(u64::MAX)
    }

    /// Sets the cap for what follows (a warm kernel's next execution). A
    /// memory already past it stays; only growth is refused.
    pub(crate) fn set_memory_bytes_max(&mut self, memory_bytes: u64) {
        self.memory_bytes_max = usize::try_from(memory_bytes).unwrap_or(usize::MAX);
    }
}

impl ResourceLimiter for GuestLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.memory_bytes_max {
            self.memory_refused = true;
            return Ok(false);
        }
        // Past the module's own maximum wasmtime fails the growth after we
        // approve it (`memory_grow_failed` records that), so it is not a
        // new peak.
        if maximum.is_none_or(|maximum| desired <= maximum) {
            self.memory_bytes_peak = self.memory_bytes_peak.max(desired);
        }
        Ok(true)
    }

    fn memory_grow_failed(&mut self, _error: wasmtime::Error) -> wasmtime::Result<()> {
        // Growth we allowed still failed (beyond the module's declared
        // maximum, or the OS refused): to the guest it is the same
        // out-of-memory, so it counts as hitting the memory limit.
        self.memory_refused = true;
        Ok(())
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= TABLE_ELEMENTS_MAX)
    }

    fn instances(&self) -> usize {
        // The guest (a WASI command is one core instance) and the sleep
        // guard's trampoline.
        INSTANCES_PER_RUN
    }

    fn memories(&self) -> usize {
        // One memory, so `memory_bytes` caps the guest's total (`load`
        // refuses modules with more; the pool has one memory per module).
        1
    }

    fn tables(&self) -> usize {
        // One table, as in every WASI preview 1 command we know (`load`
        // refuses modules with more; the pool has one table per module).
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: the defaults are accepted and each bound is enforced.
    /// Method: validate the defaults, then push one field past its max.
    #[test]
    fn limits_default_valid_and_bounds_enforced() {
        assert!(ExecLimits::default().validate().is_ok());
        let too_much_memory = ExecLimits {
            memory_bytes: MEMORY_BYTES_MAX + WASM_PAGE_BYTES,
            ..ExecLimits::default()
        };
        assert!(matches!(
            too_much_memory.validate(),
            Err(SandboxError::InvalidLimit {
                name: "memory_bytes",
                ..
            })
        ));
        let zero_timeout = ExecLimits {
            timeout: Duration::ZERO,
            ..ExecLimits::default()
        };
        assert!(matches!(
            zero_timeout.validate(),
            Err(SandboxError::InvalidLimit {
                name: "timeout_ms",
                ..
            })
        ));
    }

    /// Goal: the limiter refuses growth past the cap and remembers it.
    /// Method: grow within, then past, the cap.
    #[test]
    fn limiter_records_refused_growth() {
        let mut limiter = GuestLimiter::new(2 * WASM_PAGE_BYTES);
        let page = WASM_PAGE_BYTES as usize;
        assert!(limiter.memory_growing(0, 2 * page, None).unwrap());
        assert!(!limiter.memory_refused());
        assert!(!limiter.memory_growing(2 * page, 3 * page, None).unwrap());
        assert!(limiter.memory_refused());
        assert_eq!(limiter.memory_bytes_peak(), 2 * WASM_PAGE_BYTES);
    }
}

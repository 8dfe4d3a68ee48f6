//! The sleep guard: wraps WASI's `poll_oneoff` so a guest cannot outlive
//! its wall-clock deadline by sleeping.
//!
//! Why: epoch interruption only fires while wasm code runs. A guest blocked
//! in a host call is invisible to it, and `poll_oneoff` (behind `sleep`,
//! `time.sleep`, `select`) blocks the host thread for as long as the guest
//! asks: `time.sleep(3600)` would hold a worker for an hour past a 30 s
//! timeout. The guard runs before wasmtime-wasi's implementation and
//!
//! 1. traps with [`Interrupt::Timeout`] if the deadline has passed, and
//! 2. shortens every clock subscription that would wake after the deadline
//!    so it wakes just after it instead (then restores the guest's
//!    subscription bytes, so the guest never sees them change).
//!
//! An early wake looks to the guest like a spurious wake-up; CPython (and
//! any libc loop) re-checks the clock and sleeps again, which hits step 1.
//! Absolute-time subscriptions are converted using the same clocks the guest
//! sees: the monotonic clock is ours ([`GuestMonotonicClock`]), so its origin
//! is known; the realtime clock is the system's.
//!
//! How the guard reaches the original: wasmtime-wasi's functions find guest
//! memory through their caller's `memory` export, so calling the original
//! straight from host code fails ("missing required memory export"). The
//! guard therefore calls it through a tiny per-run *trampoline* instance
//! ([`TRAMPOLINE_WAT`]) that imports the guest's memory, re-exports it, and
//! forwards the call. Only `poll_oneoff` takes this detour; every other WASI
//! call goes straight to wasmtime-wasi.

use std::time::{Duration, Instant, SystemTime};

use wasmtime::{Caller, Extern};

use super::clock::duration_nanos;
use super::store::{Host, Interrupt};

/// The linker module under which wasmtime-wasi's own `poll_oneoff` stays
/// reachable after the guard shadows it. A guest importing it directly would
/// bypass the guard, so `Sandbox::load` refuses every module that imports
/// from anything but [`WASI_MODULE`].
pub(crate) const INNER_MODULE: &str = "sandlog:inner";

/// The trampoline: imports the guest's memory and wasmtime-wasi's
/// `poll_oneoff`, exports the memory (so wasmtime-wasi finds it through its
/// caller) and a forwarding `poll_oneoff`. The memory import has no maximum,
/// so it matches any 32-bit unshared memory, which is what every WASI
/// preview 1 command has (`Sandbox::load` checks). The sandbox loads
/// [`TRAMPOLINE_WASM`], its binary form (a test checks they agree), so
/// wasmtime is built without its text-format parser.
#[cfg_attr(not(test), expect(dead_code, reason = "the source of TRAMPOLINE_WASM"))]
pub(crate) const TRAMPOLINE_WAT: &str = r#"
(module
  (import "guest" "memory" (memory 0))
  (import "sandlog:inner" "poll_oneoff" (func (param i32 i32 i32 i32) (result i32)))
  (export "memory" (memory 0))
  (func (export "poll_oneoff") (param i32 i32 i32 i32) (result i32)
    (call 0 (local.get 0) (local.get 1) (local.get 2) (local.get 3))))
"#;

/// [`TRAMPOLINE_WAT`] in the binary format, section by section.
pub(crate) const TRAMPOLINE_WASM: &[u8] = &[
    0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version 1
    // type section: 1 type, (i32 i32 i32 i32) -> i32
    0x01, 0x09, 0x01, 0x60, 0x04, 0x7f, 0x7f, 0x7f, 0x7f, 0x01, 0x7f,
    // import section: 2 imports
    0x02, 0x2d, 0x02, //
    // "guest" "memory": memory, limits min 0, no max
    0x05, b'g', b'u', b'e', b's', b't', //
    0x06, b'm', b'e', b'm', b'o', b'r', b'y', 0x02, 0x00, 0x00, //
    // "sandlog:inner" "poll_oneoff": function of type 0
    0x0d, b's', b'a', b'n', b'd', b'l', b'o', b'g', b':', b'i', b'n', b'n', b'e', b'r', //
    0x0b, b'p', b'o', b'l', b'l', b'_', b'o', b'n', b'e', b'o', b'f', b'f', 0x00, 0x00,
    // function section: 1 function of type 0
    0x03, 0x02, 0x01, 0x00, //
    // export section: 2 exports
    0x07, 0x18, 0x02, //
    0x06, b'm', b'e', b'm', b'o', b'r', b'y', 0x02, 0x00, // memory 0
    0x0b, b'p', b'o', b'l', b'l', b'_', b'o', b'n', b'e', b'o', b'f', b'f', 0x00,
    0x01, // function 1
    // code section: 1 body of 12 bytes, no locals:
    // local.get 0..3, call 0, end
    0x0a, 0x0e, 0x01, 0x0c, 0x00, 0x20, 0x00, 0x20, 0x01, 0x20, 0x02, 0x20, 0x03, 0x10, 0x00, 0x0b,
];

/// The WASI preview 1 module name.
pub(crate) const WASI_MODULE: &str = "wasi_snapshot_preview1";

/// The guarded function's name.
pub(crate) const POLL_ONEOFF: &str = "poll_oneoff";

/// How far past the deadline a shortened sleep wakes.
///
/// Why 1 ms: waking exactly at the deadline could race the guest's own clock
/// read and make it sleep again for a few nanoseconds; one millisecond later
/// the next call is certain to see the deadline passed.
const WAKE_AFTER_DEADLINE: Duration = Duration::from_millis(1);

// Layout of a WASI preview 1 `subscription` (witx): 48 bytes, 8-aligned.
// `userdata: u64` at 0, then the `subscription_u` union: tag `u8` at 8,
// payload at 16. For the clock variant the payload is `subscription_clock`:
// `id: u32` at 16, `timeout: u64` at 24, `precision: u64` at 32,
// `flags: u16` at 40.
const SUBSCRIPTION_BYTES: usize = 48;
const TAG_OFFSET: usize = 8;
const CLOCK_ID_OFFSET: usize = 16;
const CLOCK_TIMEOUT_OFFSET: usize = 24;
const CLOCK_FLAGS_OFFSET: usize = 40;
const _: () = assert!(CLOCK_FLAGS_OFFSET + 2 <= SUBSCRIPTION_BYTES);
const _: () = assert!(CLOCK_TIMEOUT_OFFSET + 8 <= CLOCK_FLAGS_OFFSET);

/// `eventtype::clock`.
const EVENTTYPE_CLOCK: u8 = 0;
/// `clockid::realtime`.
const CLOCKID_REALTIME: u32 = 0;
/// `clockid::monotonic`.
const CLOCKID_MONOTONIC: u32 = 1;
/// `subclockflags::subscription_clock_abstime`.
const SUBCLOCKFLAGS_ABSTIME: u16 = 1;

/// The guard itself, registered in the linker as
/// `wasi_snapshot_preview1::poll_oneoff`.
pub(crate) fn guarded_poll_oneoff(
    mut caller: Caller<'_, Host>,
    subscriptions: i32,
    events: i32,
    n_subscriptions: i32,
    n_events_out: i32,
) -> wasmtime::Result<i32> {
    let now = Instant::now();
    let deadline = caller.data().deadline;
    if now >= deadline {
        return Err(Interrupt::Timeout.into());
    }
    if caller.data().cancelled() {
        return Err(Interrupt::Cancelled.into());
    }
    let Some(inner) = caller.data().inner_poll_oneoff.clone() else {
        // Set right after instantiation whenever the guest exports a
        // memory; without one, no WASI call can work anyway.
        return Err(wasmtime::format_err!(
            "poll_oneoff needs the guest's `memory` export"
        ));
    };

    let remaining_nanos =
        duration_nanos(deadline.saturating_duration_since(now) + WAKE_AFTER_DEADLINE);
    let guest_clock = caller.data().guest_clock;
    let memory = caller.get_export("memory").and_then(Extern::into_memory);
    let mut originals: Vec<(usize, u64)> = Vec::new();
    if let Some(memory) = memory {
        let bytes = memory.data_mut(&mut caller);
        originals = shorten_clock_subscriptions(
            bytes,
            subscriptions,
            n_subscriptions,
            remaining_nanos,
            guest_clock.nanos_at(now),
            realtime_nanos(),
        );
    }

    let result = inner.call(
        &mut caller,
        (subscriptions, events, n_subscriptions, n_events_out),
    );

    if !originals.is_empty()
        && let Some(memory) = caller.get_export("memory").and_then(Extern::into_memory)
    {
        let bytes = memory.data_mut(&mut caller);
        for (offset, timeout) in originals {
            write_u64(bytes, offset, timeout);
        }
    }
    result
}

fn realtime_nanos() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(duration_nanos)
        .unwrap_or(0)
}

/// Rewrites, in guest memory, every clock subscription that would fire more
/// than `remaining_nanos` from now so it fires after `remaining_nanos`.
/// Returns `(offset, original timeout)` for each rewrite, to be restored.
///
/// Subscriptions out of bounds are left alone: wasmtime-wasi will reject
/// the call with `EFAULT` itself.
fn shorten_clock_subscriptions(
    memory: &mut [u8],
    subscriptions: i32,
    n_subscriptions: i32,
    remaining_nanos: u64,
    monotonic_now_nanos: u64,
    realtime_now_nanos: u64,
) -> Vec<(usize, u64)> {
    let mut originals = Vec::new();
    // wasm32 pointers and sizes are unsigned 32-bit values passed as i32.
    let base = subscriptions as u32 as usize;
    let count = n_subscriptions as u32 as usize;
    for index in 0..count {
        let Some(start) = index
            .checked_mul(SUBSCRIPTION_BYTES)
            .and_then(|offset| offset.checked_add(base))
        else {
            break;
        };
        // Stop at the end of memory rather than counting up to a
        // guest-chosen `n_subscriptions` of up to 4 billion.
        if start.saturating_add(SUBSCRIPTION_BYTES) > memory.len() {
            break;
        }
        if read_u8(memory, start + TAG_OFFSET) != Some(EVENTTYPE_CLOCK) {
            continue;
        }
        let (Some(clock_id), Some(timeout), Some(flags)) = (
            read_u32(memory, start + CLOCK_ID_OFFSET),
            read_u64(memory, start + CLOCK_TIMEOUT_OFFSET),
            read_u16(memory, start + CLOCK_FLAGS_OFFSET),
        ) else {
            break;
        };
        let absolute = flags & SUBCLOCKFLAGS_ABSTIME != 0;
        let clock_now_nanos = match clock_id {
            CLOCKID_MONOTONIC => monotonic_now_nanos,
            CLOCKID_REALTIME => realtime_now_nanos,
            // CPU-time clocks are not supported by wasmtime-wasi's poll.
            _ => continue,
        };
        let relative_nanos = if absolute {
            timeout.saturating_sub(clock_now_nanos)
        } else {
            timeout
        };
        if relative_nanos <= remaining_nanos {
            continue;
        }
        let shortened = if absolute {
            clock_now_nanos.saturating_add(remaining_nanos)
        } else {
            remaining_nanos
        };
        if write_u64(memory, start + CLOCK_TIMEOUT_OFFSET, shortened) {
            originals.push((start + CLOCK_TIMEOUT_OFFSET, timeout));
        }
    }
    originals
}

fn read_array<const N: usize>(memory: &[u8], offset: usize) -> Option<[u8; N]> {
    memory.get(offset..offset.checked_add(N)?)?.try_into().ok()
}

fn read_u8(memory: &[u8], offset: usize) -> Option<u8> {
    memory.get(offset).copied()
}

fn read_u16(memory: &[u8], offset: usize) -> Option<u16> {
    read_array(memory, offset).map(u16::from_le_bytes)
}

fn read_u32(memory: &[u8], offset: usize) -> Option<u32> {
    read_array(memory, offset).map(u32::from_le_bytes)
}

fn read_u64(memory: &[u8], offset: usize) -> Option<u64> {
    read_array(memory, offset).map(u64::from_le_bytes)
}

fn write_u64(memory: &mut [u8], offset: usize, value: u64) -> bool {
    let Some(end) = offset.checked_add(8) else {
        return false;
    };
    match memory.get_mut(offset..end) {
        Some(slot) => {
            slot.copy_from_slice(&value.to_le_bytes());
            true
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: the binary trampoline is exactly its documented text form.
    #[test]
    fn trampoline_binary_matches_its_text() {
        assert_eq!(wat::parse_str(TRAMPOLINE_WAT).unwrap(), TRAMPOLINE_WASM);
    }

    fn clock_subscription(
        memory: &mut [u8],
        start: usize,
        clock_id: u32,
        timeout: u64,
        flags: u16,
    ) {
        memory[start + TAG_OFFSET] = EVENTTYPE_CLOCK;
        memory[start + CLOCK_ID_OFFSET..start + CLOCK_ID_OFFSET + 4]
            .copy_from_slice(&clock_id.to_le_bytes());
        memory[start + CLOCK_TIMEOUT_OFFSET..start + CLOCK_TIMEOUT_OFFSET + 8]
            .copy_from_slice(&timeout.to_le_bytes());
        memory[start + CLOCK_FLAGS_OFFSET..start + CLOCK_FLAGS_OFFSET + 2]
            .copy_from_slice(&flags.to_le_bytes());
    }

    /// Goal: long sleeps (relative and absolute) are shortened to the
    /// remaining time, short ones untouched, non-clock ones ignored.
    /// Method: four subscriptions in a fake guest memory.
    #[test]
    fn poll_guard_shortens_only_sleeps_past_deadline() {
        let mut memory = vec![0u8; 16 + 4 * SUBSCRIPTION_BYTES];
        let base = 16;
        clock_subscription(&mut memory, base, CLOCKID_MONOTONIC, 5_000, 0);
        clock_subscription(&mut memory, base + 48, CLOCKID_MONOTONIC, 1_000_000, 0);
        clock_subscription(
            &mut memory,
            base + 96,
            CLOCKID_MONOTONIC,
            2_000_000,
            SUBCLOCKFLAGS_ABSTIME,
        );
        memory[base + 144 + TAG_OFFSET] = 1; // fd_read: not a clock
        let originals = shorten_clock_subscriptions(&mut memory, base as i32, 4, 10_000, 500, 0);
        assert_eq!(
            originals,
            vec![
                (base + 48 + CLOCK_TIMEOUT_OFFSET, 1_000_000),
                (base + 96 + CLOCK_TIMEOUT_OFFSET, 2_000_000)
            ]
        );
        assert_eq!(read_u64(&memory, base + CLOCK_TIMEOUT_OFFSET), Some(5_000));
        assert_eq!(
            read_u64(&memory, base + 48 + CLOCK_TIMEOUT_OFFSET),
            Some(10_000)
        );
        assert_eq!(
            read_u64(&memory, base + 96 + CLOCK_TIMEOUT_OFFSET),
            Some(10_500)
        );
    }

    /// Goal: a subscription array running off the end of memory is left for
    /// wasmtime-wasi to reject, without a panic here.
    /// Method: claim more subscriptions than fit.
    #[test]
    fn poll_guard_ignores_out_of_bounds_subscriptions() {
        let mut memory = vec![0u8; SUBSCRIPTION_BYTES];
        clock_subscription(&mut memory, 0, CLOCKID_MONOTONIC, u64::MAX, 0);
        let originals = shorten_clock_subscriptions(&mut memory, 0, i32::MAX, 1, 0, 0);
        assert_eq!(originals, vec![(CLOCK_TIMEOUT_OFFSET, u64::MAX)]);
    }
}

//! The guest's monotonic clock ([`GuestMonotonicClock`]) and the type of
//! the `poll_oneoff` the sleep guard delegates to: what a run's host state
//! holds of the sleep guard, below both.

use std::time::{Duration, Instant};

use wasmtime::TypedFunc;
use wasmtime_wasi::HostMonotonicClock;

/// wasmtime-wasi's `poll_oneoff`: `(subscriptions, events, n, out) -> errno`.
pub(crate) type PollOneoff = TypedFunc<(i32, i32, i32, i32), i32>;

/// The monotonic clock the guest sees: nanoseconds since the run started.
/// Ours rather than wasmtime-wasi's so the guard knows its origin and can
/// convert absolute deadlines.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GuestMonotonicClock {
    origin: Instant,
}

impl GuestMonotonicClock {
    /// A clock reading 0 at `origin`.
    pub(crate) fn new(origin: Instant) -> Self {
        GuestMonotonicClock { origin }
    }

    pub(crate) fn nanos_at(&self, instant: Instant) -> u64 {
        duration_nanos(instant.saturating_duration_since(self.origin))
    }
}

impl HostMonotonicClock for GuestMonotonicClock {
    fn resolution(&self) -> u64 {
        1
    }

    fn now(&self) -> u64 {
        self.nanos_at(Instant::now())
    }
}

pub(crate) fn duration_nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

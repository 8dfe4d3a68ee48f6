//! The [`Clock`]: the only way sandlog learns the time, so tests can freeze
//! and move it.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use crate::time::Timestamp;

/// A source of the current time. Injected into the event store (which
/// stamps `recorded_at`) and the engine (which computes prune ages).
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current instant.
    fn now(&self) -> Timestamp;
}

/// The system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_offset_date_time(time::OffsetDateTime::now_utc())
    }
}

/// A clock that says what it is told: for tests, demos and backdating.
/// Clones share one time.
#[derive(Debug, Clone)]
pub struct ManualClock {
    micros: Arc<AtomicI64>,
}

impl ManualClock {
    /// A clock stopped at `start`.
    pub fn new(start: Timestamp) -> Self {
        ManualClock {
            micros: Arc::new(AtomicI64::new(start.unix_micros())),
        }
    }

    /// Moves the clock to `instant` (backwards too: tests of monotonicity
    /// need that).
    pub fn set(&self, instant: Timestamp) {
        self.micros.store(instant.unix_micros(), Ordering::SeqCst);
    }

    /// Moves the clock forward by `duration`.
    pub fn advance(&self, duration: std::time::Duration) {
        let micros = i64::try_from(duration.as_micros()).unwrap_or(i64::MAX);
        self.micros.fetch_add(micros, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_unix_micros(self.micros.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_clones_share_time() {
        let clock = ManualClock::new(Timestamp::from_unix_micros(10));
        let other = clock.clone();
        clock.advance(std::time::Duration::from_micros(5));
        assert_eq!(other.now(), Timestamp::from_unix_micros(15));
    }
}

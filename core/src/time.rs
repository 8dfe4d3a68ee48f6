//! [`Timestamp`]: a UTC instant with microsecond precision, the only time
//! the log stores.
//!
//! Microseconds because the seed metadata format uses them and because
//! everything finer is noise on the machines that record events. Stored as
//! signed microseconds since the Unix epoch; printed as RFC 3339 with six
//! fractional digits and a `Z`, e.g. `2025-11-22T10:15:30.123456Z`.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use time::OffsetDateTime;

use crate::error::CoreError;

/// A UTC instant, microsecond precision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(i64);

const MICROS_PER_SECOND: i64 = 1_000_000;

impl Timestamp {
    /// The Unix epoch.
    pub const EPOCH: Timestamp = Timestamp(0);

    /// From microseconds since the Unix epoch.
    pub const fn from_unix_micros(micros: i64) -> Self {
        Timestamp(micros)
    }

    /// Microseconds since the Unix epoch.
    pub const fn unix_micros(self) -> i64 {
        self.0
    }

    /// From a `time` instant, truncated to microseconds.
    pub fn from_offset_date_time(instant: OffsetDateTime) -> Self {
        let nanos = instant.unix_timestamp_nanos();
        let micros = nanos.div_euclid(1_000);
        Timestamp(i64::try_from(micros).unwrap_or(if micros < 0 { i64::MIN } else { i64::MAX }))
    }

    /// As a `time` instant in UTC. Out-of-range values (beyond year 9999)
    /// saturate at the ends of what `time` can represent.
    pub fn to_offset_date_time(self) -> OffsetDateTime {
        let nanos = i128::from(self.0) * 1_000;
        OffsetDateTime::from_unix_timestamp_nanos(nanos).unwrap_or(if self.0 < 0 {
            OffsetDateTime::UNIX_EPOCH
        } else {
            OffsetDateTime::UNIX_EPOCH + time::Duration::days(365 * 7000)
        })
    }

    /// Parses RFC 3339 / ISO 8601 with an offset (`Z` or `+hh:mm`); the
    /// result is in UTC, truncated to microseconds. Seed metadata written by
    /// Python's `isoformat()` uses `+00:00`, which is accepted.
    pub fn parse(input: &str) -> Result<Self, CoreError> {
        OffsetDateTime::parse(input.trim(), &time::format_description::well_known::Rfc3339)
            .map(Self::from_offset_date_time)
            .map_err(|error| CoreError::InvalidTimestamp {
                input: input.to_owned(),
                reason: error.to_string(),
            })
    }

    /// This instant plus `duration` (saturating).
    pub fn saturating_add(self, duration: std::time::Duration) -> Self {
        let micros = i64::try_from(duration.as_micros()).unwrap_or(i64::MAX);
        Timestamp(self.0.saturating_add(micros))
    }

    /// This instant minus `duration` (saturating).
    pub fn saturating_sub(self, duration: std::time::Duration) -> Self {
        let micros = i64::try_from(duration.as_micros()).unwrap_or(i64::MAX);
        Timestamp(self.0.saturating_sub(micros))
    }

    /// How long after `earlier` this instant is; zero if it is not after.
    pub fn duration_since(self, earlier: Timestamp) -> std::time::Duration {
        let micros = self.0.saturating_sub(earlier.0).max(0);
        std::time::Duration::from_micros(u64::try_from(micros).unwrap_or(0))
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let instant = self.to_offset_date_time();
        let micros = self.0.rem_euclid(MICROS_PER_SECOND);
        write!(
            f,
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
            instant.year(),
            u8::from(instant.month()),
            instant.day(),
            instant.hour(),
            instant.minute(),
            instant.second(),
            micros
        )
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Timestamp::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn displays_rfc3339_with_microseconds_in_utc() {
        let ts = Timestamp::parse("2025-11-22T10:15:30.123456Z").unwrap();
        assert_eq!(ts.to_string(), "2025-11-22T10:15:30.123456Z");
        let ts = Timestamp::parse("2025-11-22T12:15:30.5+02:00").unwrap();
        assert_eq!(ts.to_string(), "2025-11-22T10:15:30.500000Z");
    }

    #[test]
    fn parses_python_isoformat_output() {
        let ts = Timestamp::parse("2025-11-22T10:15:30.123456+00:00").unwrap();
        assert_eq!(ts.to_string(), "2025-11-22T10:15:30.123456Z");
    }

    #[test]
    fn rejects_timestamps_without_offset() {
        let error = Timestamp::parse("2025-11-22T10:15:30").unwrap_err();
        assert_eq!(error.kind(), "invalid_timestamp");
    }

    #[test]
    fn negative_micros_display_correctly() {
        let ts = Timestamp::from_unix_micros(-1);
        assert_eq!(ts.to_string(), "1969-12-31T23:59:59.999999Z");
        assert_eq!(Timestamp::parse(&ts.to_string()).unwrap(), ts);
    }

    proptest::proptest! {
        #[test]
        fn display_parse_round_trips(micros in -62_135_596_800_000_000i64..253_402_300_799_999_999i64) {
            let ts = Timestamp::from_unix_micros(micros);
            proptest::prop_assert_eq!(Timestamp::parse(&ts.to_string()).unwrap(), ts);
        }
    }
}

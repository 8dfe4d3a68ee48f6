//! Human durations and sizes: parsing what operators type (`90s`, `24h`,
//! `7d`, `512K`, `10MB`, `1GiB`) and printing what they read (`3h 12m`,
//! `1.5 MiB`).

use std::time::Duration;

use crate::error::CoreError;

const SECONDS_PER_MINUTE: u64 = 60;
const SECONDS_PER_HOUR: u64 = 60 * SECONDS_PER_MINUTE;
const SECONDS_PER_DAY: u64 = 24 * SECONDS_PER_HOUR;
const SECONDS_PER_WEEK: u64 = 7 * SECONDS_PER_DAY;

/// Parses a duration: one or more `<integer><unit>` parts, units `ms`, `s`,
/// `m`, `h`, `d`, `w` (`90s`, `15m`, `24h`, `7d`, `1h30m`). A bare `0` is
/// zero. Negative and fractional values are refused.
pub fn parse_duration(input: &str) -> Result<Duration, CoreError> {
    let invalid = |reason| CoreError::InvalidDuration {
        input: input.to_owned(),
        reason,
    };
    let text = input.trim();
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    if text.is_empty() {
        return Err(invalid("it is empty"));
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(invalid("expected a whole number before each unit"));
        }
        let (number, after) = rest.split_at(digits);
        let value: u64 = number
            .parse()
            .map_err(|_| invalid("the number is too large"))?;
        let unit_len = after
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        let part = match unit {
            "ms" => Duration::from_millis(value),
            "s" => Duration::from_secs(value),
            "m" => Duration::from_secs(
                value
                    .checked_mul(SECONDS_PER_MINUTE)
                    .ok_or_else(|| invalid("it is too large"))?,
            ),
            "h" => Duration::from_secs(
                value
                    .checked_mul(SECONDS_PER_HOUR)
                    .ok_or_else(|| invalid("it is too large"))?,
            ),
            "d" => Duration::from_secs(
                value
                    .checked_mul(SECONDS_PER_DAY)
                    .ok_or_else(|| invalid("it is too large"))?,
            ),
            "w" => Duration::from_secs(
                value
                    .checked_mul(SECONDS_PER_WEEK)
                    .ok_or_else(|| invalid("it is too large"))?,
            ),
            "" => return Err(invalid("a unit is missing (ms, s, m, h, d, w)")),
            _ => return Err(invalid("unknown unit (use ms, s, m, h, d, w)")),
        };
        total = total
            .checked_add(part)
            .ok_or_else(|| invalid("it is too large"))?;
        rest = next;
    }
    Ok(total)
}

/// Prints a duration for people: the two largest non-zero units
/// (`3h 12m`, `2d 4h`, `45s`, `120ms`).
pub fn format_duration(duration: Duration) -> String {
    let seconds = duration.as_secs();
    if seconds == 0 {
        return format!("{}ms", duration.as_millis());
    }
    let units = [
        (SECONDS_PER_DAY, "d"),
        (SECONDS_PER_HOUR, "h"),
        (SECONDS_PER_MINUTE, "m"),
        (1, "s"),
    ];
    let mut parts = Vec::new();
    let mut rest = seconds;
    for (size, name) in units {
        let count = rest / size;
        rest %= size;
        if count > 0 || !parts.is_empty() {
            if count > 0 {
                parts.push(format!("{count}{name}"));
            }
            if parts.len() == 2 || (!parts.is_empty() && count == 0) {
                break;
            }
        }
    }
    parts.join(" ")
}

/// Parses a size: an integer with an optional unit. `B`; decimal `KB`,
/// `MB`, `GB`, `TB`; binary `KiB`, `MiB`, `GiB`, `TiB`; and the single
/// letters `K`, `M`, `G`, `T`, which are binary as in `ulimit` and `dd`.
/// Case-insensitive.
pub fn parse_size(input: &str) -> Result<u64, CoreError> {
    let invalid = |reason| CoreError::InvalidSize {
        input: input.to_owned(),
        reason,
    };
    let text = input.trim();
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    if digits == 0 {
        return Err(invalid("expected a whole number"));
    }
    let (number, unit) = text.split_at(digits);
    let value: u64 = number
        .parse()
        .map_err(|_| invalid("the number is too large"))?;
    let multiplier: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        _ => {
            return Err(invalid(
                "unknown unit (use B, K, KB, KiB, M, MB, MiB, G, GB, GiB)",
            ));
        }
    };
    value
        .checked_mul(multiplier)
        .ok_or_else(|| invalid("it is too large"))
}

/// Prints a size for people in binary units, as the documentation and the
/// limits give them: a whole number of its unit as such, else with one
/// decimal (`512 B`, `64 KiB`, `1.5 MiB`, `2.3 GiB`).
pub fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut unit_bytes = 1024_u64;
    let mut unit = "KiB";
    for next in UNITS.iter().skip(1) {
        // Past 1023.95 of a unit, one decimal would print 1024.0: the next
        // unit reads better.
        if (bytes as f64) / (unit_bytes as f64) < 1023.95 {
            break;
        }
        unit_bytes = unit_bytes.saturating_mul(1024);
        unit = next;
    }
    if bytes.is_multiple_of(unit_bytes) {
        format!("{} {unit}", bytes / unit_bytes)
    } else {
        format!("{:.1} {unit}", bytes as f64 / unit_bytes as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_documented_durations() {
        assert_eq!(parse_duration("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("15m").unwrap(), Duration::from_secs(900));
        assert_eq!(parse_duration("24h").unwrap(), Duration::from_secs(86_400));
        assert_eq!(parse_duration("7d").unwrap(), Duration::from_secs(604_800));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5_400));
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
    }

    #[test]
    fn refuses_bad_durations() {
        for input in ["", "h", "5", "-5s", "1.5h", "5y", "99999999999999999999s"] {
            assert!(
                matches!(
                    parse_duration(input),
                    Err(CoreError::InvalidDuration { .. })
                ),
                "{input}"
            );
        }
    }

    #[test]
    fn parses_documented_sizes() {
        assert_eq!(parse_size("512K").unwrap(), 512 * 1024);
        assert_eq!(parse_size("10MB").unwrap(), 10_000_000);
        assert_eq!(parse_size("1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_size("100").unwrap(), 100);
        assert!(parse_size("1.5MB").is_err());
        assert!(parse_size("10XB").is_err());
    }

    #[test]
    fn formats_for_people() {
        assert_eq!(format_size(512), "512 B");
        assert_eq!(format_size(1_500_000), "1.4 MiB");
        assert_eq!(format_size(1_048_575), "1.0 MiB");
        assert_eq!(format_size(1023), "1023 B");
        assert_eq!(format_size(65_536), "64 KiB");
        assert_eq!(format_size(65_600), "64.1 KiB");
        assert_eq!(format_size(32 << 20), "32 MiB");
        assert_eq!(format_size(268_400_000), "256.0 MiB");
        assert_eq!(format_size(3 << 40), "3 TiB");
        assert_eq!(
            format_duration(Duration::from_secs(3 * 3600 + 12 * 60 + 5)),
            "3h 12m"
        );
        assert_eq!(format_duration(Duration::from_secs(45)), "45s");
        assert_eq!(format_duration(Duration::from_secs(2 * 86_400 + 7)), "2d");
        assert_eq!(format_duration(Duration::from_millis(120)), "120ms");
    }
}

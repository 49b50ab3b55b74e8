//! Instants as the API writes them: RFC 3339, UTC, millisecond precision, a `Z` suffix.
//!
//! Every timestamp this service writes has the same 24-character shape, so text order is time
//! order (the database compares `expires_at` as text). The calendar arithmetic is Howard
//! Hinnant's `days_from_civil` and `civil_from_days`, exact over the proleptic Gregorian
//! calendar.

use std::fmt;

use serde::{Serialize, Serializer};

/// The last millisecond this format can write: 9999-12-31T23:59:59.999Z.
const MS_MAX: u64 = 253_402_300_799_999;

/// Milliseconds in a day.
const DAY_MS: u64 = 86_400_000;

/// An instant, in milliseconds since the Unix epoch, within years 1970 to 9999.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Timestamp(u64);

impl Timestamp {
    /// The last instant this format can write.
    pub(crate) const MAX: Self = Self(MS_MAX);

    /// The instant `ms` milliseconds after the epoch, held at the format's last millisecond.
    pub(crate) fn from_unix_ms(ms: u64) -> Self {
        Self(ms.min(MS_MAX))
    }

    /// Milliseconds since the epoch.
    pub(crate) fn unix_ms(self) -> u64 {
        self.0
    }

    /// The instant `seconds` later, held at the format's last millisecond.
    pub(crate) fn plus_seconds(self, seconds: u32) -> Self {
        Self::from_unix_ms(self.0.saturating_add(u64::from(seconds) * 1000))
    }

    /// The instant `ms` milliseconds later, held at the format's last millisecond.
    pub(crate) fn plus_millis(self, ms: u64) -> Self {
        Self::from_unix_ms(self.0.saturating_add(ms))
    }

    /// Reads an RFC 3339 instant in any of its forms (any offset, any fraction of a second):
    /// the millisecond it falls in. An instant before 1970 is the epoch's first millisecond;
    /// one past the format's last, that one.
    pub(crate) fn parse_rfc3339(raw: &str) -> Option<Self> {
        let at: jiff::Timestamp = raw.parse().ok()?;
        // Whole milliseconds since the epoch, rounded down for an instant after it.
        let ms = at.as_millisecond();
        Some(Self::from_unix_ms(u64::try_from(ms).unwrap_or(0)))
    }

    /// Reads exactly the form [`fmt::Display`] writes, `YYYY-MM-DDTHH:MM:SS.mmmZ`.
    pub(crate) fn parse(raw: &str) -> Option<Self> {
        let b = raw.as_bytes();
        if b.len() != 24 {
            return None;
        }
        let punctuation = [
            (4, b'-'),
            (7, b'-'),
            (10, b'T'),
            (13, b':'),
            (16, b':'),
            (19, b'.'),
            (23, b'Z'),
        ];
        if punctuation.iter().any(|&(i, c)| b[i] != c) {
            return None;
        }
        let num = |from: usize, to: usize| -> Option<u64> {
            b[from..to].iter().try_fold(0u64, |n, &d| {
                d.is_ascii_digit().then(|| n * 10 + u64::from(d - b'0'))
            })
        };
        let (year, month, day) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
        let (hour, minute, second, milli) =
            (num(11, 13)?, num(14, 16)?, num(17, 19)?, num(20, 23)?);
        if year < 1970
            || !(1..=12).contains(&month)
            || day == 0
            || day > days_in_month(year, month)
            || hour > 23
            || minute > 59
            || second > 59
        {
            return None;
        }
        let days = days_from_civil(year, month, day);
        let ms = days * DAY_MS + ((hour * 60 + minute) * 60 + second) * 1000 + milli;
        Some(Self(ms))
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (days, in_day) = (self.0 / DAY_MS, self.0 % DAY_MS);
        let (year, month, day) = civil_from_days(days);
        let (seconds, milli) = (in_day / 1000, in_day % 1000);
        // Digits put by hand into the one fixed shape: `write!` with padded fields costs
        // several times as much, and every write formats a few timestamps.
        let mut text = *b"0000-00-00T00:00:00.000Z";
        let mut put = |at: usize, width: usize, mut value: u64| {
            for digit in text[at..at + width].iter_mut().rev() {
                *digit = b'0' + (value % 10) as u8;
                value /= 10;
            }
        };
        put(0, 4, year);
        put(5, 2, month);
        put(8, 2, day);
        put(11, 2, seconds / 3600);
        put(14, 2, seconds / 60 % 60);
        put(17, 2, seconds % 60);
        put(20, 3, milli);
        f.write_str(std::str::from_utf8(&text).map_err(|_| fmt::Error)?)
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

fn is_leap(year: u64) -> bool {
    year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400))
}

fn days_in_month(year: u64, month: u64) -> u64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a date on or after it.
fn days_from_civil(year: u64, month: u64, day: u64) -> u64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date `days` after 1970-01-01.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn known_instants_are_written_exactly() {
        for (ms, text) in [
            (0, "1970-01-01T00:00:00.000Z"),
            (951_782_400_000, "2000-02-29T00:00:00.000Z"),
            (1_795_341_600_123, "2026-11-22T10:00:00.123Z"),
            (MS_MAX, "9999-12-31T23:59:59.999Z"),
        ] {
            assert_eq!(Timestamp::from_unix_ms(ms).to_string(), text);
            assert_eq!(Timestamp::parse(text), Some(Timestamp(ms)), "{text}");
        }
    }

    #[test]
    fn malformed_text_is_refused() {
        for raw in [
            "",
            "2026-11-22T10:00:00.123",
            "2026-11-22T10:00:00Z",
            "2026-11-22 10:00:00.123Z",
            "2026-02-29T10:00:00.123Z",
            "2026-13-01T10:00:00.123Z",
            "2026-11-22T24:00:00.123Z",
            "1969-12-31T23:59:59.999Z",
            "2026-11-22T10:00:60.000Z",
            "2026-1a-22T10:00:00.123Z",
        ] {
            assert_eq!(Timestamp::parse(raw), None, "{raw:?}");
        }
    }

    proptest! {
        /// Every instant reads back from its text, and the text agrees with a calendar library.
        #[test]
        fn text_round_trips_and_agrees_with_jiff(ms in 0..=MS_MAX) {
            let t = Timestamp::from_unix_ms(ms);
            let text = t.to_string();
            prop_assert_eq!(Timestamp::parse(&text), Some(t));
            let jiff = jiff::Timestamp::from_millisecond(i64::try_from(ms).expect("fits"))
                .expect("in range");
            prop_assert_eq!(text, jiff.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string());
        }

        /// Text order is time order.
        #[test]
        fn text_order_is_time_order(a in 0..=MS_MAX, b in 0..=MS_MAX) {
            let (ta, tb) = (Timestamp::from_unix_ms(a), Timestamp::from_unix_ms(b));
            prop_assert_eq!(ta.cmp(&tb), ta.to_string().cmp(&tb.to_string()));
        }
    }
}

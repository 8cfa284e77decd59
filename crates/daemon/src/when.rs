//! How a user writes a time for the agenda (a reminder, a snooze, a scheduled session), read into
//! one instant: RFC 3339 with `Z` or an offset, a date and time in a named IANA zone, or a time
//! relative to now. Every surface reads it here (`ctl`, the socket, MCP, the dashboard), so one
//! text means one instant everywhere.
//!
//! Named zones come from the system's time zone database (`/usr/share/zoneinfo`, kept current
//! by the system's updates), or from the copy bundled into the binary on a machine that has
//! none. A local time that a zone skips (the clocks jump forward) or passes twice (they go back)
//! is refused rather than guessed: the user gives the offset that says which instant is meant.

use jiff::Timestamp;
use jiff::civil::DateTime;
use jiff::tz::{AmbiguousOffset, TimeZone};

/// The furthest a relative time reaches: ten years.
const MAX_RELATIVE_SECONDS: i64 = 3650 * 86_400;

/// The forms a user may write, for error messages.
const FORMS: &str = "use RFC 3339 with `Z` or an offset (2026-12-03T09:00:00Z, \
                     2026-12-03T09:00:00+01:00), a date and time with a zone name \
                     (2026-12-03T09:00 Europe/Paris), or relative (+10m)";

/// Reads a time a user gives, at `now` (Unix seconds), into Unix seconds:
/// - RFC 3339 with `Z` or an offset: `2026-12-03T09:00:00Z`, `2026-12-03T09:00:00+01:00`;
/// - a date and time in an IANA zone, after a space or in brackets:
///   `2026-12-03T09:00 Europe/Paris`, `2026-12-03 09:00:00 America/New_York`,
///   `2026-12-03T09:00[Asia/Tokyo]`;
/// - relative to `now`: `+N` with a unit `s`, `m`, `h`, `d` or `w` (`+10m`), or several
///   (`+1h30m`), at most ten years.
///
/// Refused, with what to write instead: a zone the database does not know (`unknown timezone`,
/// abbreviations such as `PST` included: they name no single rule), a local time the zone skips
/// or repeats, a date and time with no zone at all, and anything else.
pub fn parse_when(text: &str, now: i64) -> Result<i64, String> {
    let t = text.trim();
    if let Some(rel) = t.strip_prefix('+') {
        return relative(text, rel, now);
    }
    if let Ok(instant) = t.parse::<Timestamp>() {
        return Ok(instant.as_second());
    }
    let zoned = match t.strip_suffix(']').and_then(|s| s.split_once('[')) {
        Some((civil, zone)) => Some((civil, zone)),
        None => t.rsplit_once(char::is_whitespace),
    };
    match zoned {
        Some((civil, zone)) if !civil.trim().is_empty() => in_zone(text, civil.trim(), zone),
        _ if t.parse::<DateTime>().is_ok() => Err(format!(
            "{text:?} has no timezone: add `Z`, an offset (+01:00) or a zone name \
             (Europe/Paris)"
        )),
        _ => Err(format!("{text:?} is not a time: {FORMS}")),
    }
}

/// `+N` with a unit, or several (`+1h30m`), `rel` being what follows the `+`.
fn relative(text: &str, rel: &str, now: i64) -> Result<i64, String> {
    let total = span(text, rel, "+")?;
    now.checked_add(total)
        .ok_or_else(|| format!("{text:?} is too far ahead (at most ten years)"))
}

/// A length of time a user gives, in seconds: `N` with a unit `s`, `m`, `h`, `d` or `w`
/// (`30d`), or several (`1w3d`), at most ten years (`intendant sessions prune --older-than`).
pub fn parse_span(text: &str) -> Result<u64, String> {
    let total = span(text, text.trim(), "")?;
    u64::try_from(total).map_err(|e| e.to_string())
}

/// The seconds of `rel` (`N` with a unit, or several), part of `text`; `sign` is what the
/// user writes before it (`+` for a relative time), for the messages.
fn span(text: &str, rel: &str, sign: &str) -> Result<i64, String> {
    let shape = || {
        format!(
            "{text:?}: a {} is {sign}N with a unit, e.g. {sign}10m, {sign}2h, {sign}1d, {sign}1h30m",
            if sign.is_empty() {
                "length of time"
            } else {
                "relative time"
            }
        )
    };
    if rel.is_empty() {
        return Err(shape());
    }
    let too_far = || {
        let what = if sign.is_empty() {
            "too long"
        } else {
            "too far ahead"
        };
        format!("{text:?} is {what} (at most ten years)")
    };
    let mut rest = rel;
    let mut total: i64 = 0;
    while !rest.is_empty() {
        let digits_end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (digits, after) = rest.split_at(digits_end);
        let unit_end = after
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_end);
        if digits.is_empty() || unit.is_empty() {
            return Err(shape());
        }
        let scale = match unit {
            "s" => 1,
            "m" => 60,
            "h" => 3600,
            "d" => 86_400,
            "w" => 7 * 86_400,
            _ => {
                return Err(format!(
                    "{text:?}: unknown unit {unit:?}; use s, m, h, d or w (e.g. {sign}10m, \
                     {sign}1h30m)"
                ));
            }
        };
        let n: i64 = digits.parse().map_err(|_| too_far())?;
        total = n
            .checked_mul(scale)
            .and_then(|d| total.checked_add(d))
            .ok_or_else(too_far)?;
        rest = next;
    }
    if total > MAX_RELATIVE_SECONDS {
        return Err(too_far());
    }
    Ok(total)
}

/// The local date and time `civil` in the IANA zone `zone`, as one instant.
fn in_zone(text: &str, civil: &str, zone: &str) -> Result<i64, String> {
    let tz = TimeZone::get(zone).map_err(|_| {
        format!(
            "{text:?}: unknown timezone {zone:?}; give an IANA zone name (Europe/Paris, \
             America/New_York, UTC) or an offset (2026-12-03T09:00:00+01:00)"
        )
    })?;
    let local: DateTime = civil.parse().map_err(|_| {
        format!("{text:?}: {civil:?} is not a date and time (write it as 2026-12-03T09:00)")
    })?;
    let ambiguous = tz.to_ambiguous_zoned(local);
    match ambiguous.offset() {
        AmbiguousOffset::Unambiguous { .. } => ambiguous
            .unambiguous()
            .map(|z| z.timestamp().as_second())
            .map_err(|e| format!("{text:?}: {e}")),
        AmbiguousOffset::Gap { before, after } => Err(format!(
            "{text:?}: {civil} does not exist in {zone} (its clocks go from {before} to \
             {after} then); give another time, or an offset"
        )),
        AmbiguousOffset::Fold { before, after } => Err(format!(
            "{text:?}: {civil} happens twice in {zone} (at {before}, then at {after}); give the \
             offset of the one you mean, e.g. {civil}{before}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use intendant_protocol::agenda::rfc3339;

    const NOW: i64 = 1_796_200_000; // 2026-12-02T...Z

    #[test]
    fn times_are_rfc3339_with_an_offset_or_relative() {
        let z = parse_when("2026-12-03T09:00:00Z", NOW).unwrap();
        assert_eq!(rfc3339(z), "2026-12-03T09:00:00.000Z");
        assert_eq!(parse_when("2026-12-03T09:00:00z", NOW).unwrap(), z);
        assert_eq!(parse_when("2026-12-03T10:00:00+01:00", NOW).unwrap(), z);
        assert_eq!(parse_when("2026-12-03T04:30:00-04:30", NOW).unwrap(), z);
        assert_eq!(parse_when("2026-12-03T09:00:00.250Z", NOW).unwrap(), z);
        assert_eq!(parse_when("+10m", NOW).unwrap(), NOW + 600);
        assert_eq!(parse_when(" +2h ", NOW).unwrap(), NOW + 7200);
        assert_eq!(parse_when("+1d", NOW).unwrap(), NOW + 86_400);
        assert_eq!(parse_when("+30s", NOW).unwrap(), NOW + 30);
        assert_eq!(parse_when("+1h30m", NOW).unwrap(), NOW + 5400);
        assert_eq!(parse_when("+1d12h", NOW).unwrap(), NOW + 129_600);
        assert_eq!(parse_when("+2w", NOW).unwrap(), NOW + 14 * 86_400);
    }

    #[test]
    fn a_named_zone_is_read_with_its_rules_of_that_date() {
        // Winter in Paris is UTC+1, summer UTC+2; New York is UTC-5 in December.
        let z = parse_when("2026-12-03T09:00:00Z", NOW).unwrap();
        assert_eq!(parse_when("2026-12-03T10:00 Europe/Paris", NOW).unwrap(), z);
        assert_eq!(
            parse_when("2026-12-03 10:00:00 Europe/Paris", NOW).unwrap(),
            z
        );
        assert_eq!(
            parse_when("2026-12-03T10:00[Europe/Paris]", NOW).unwrap(),
            z
        );
        assert_eq!(
            parse_when("2026-12-03T04:00 America/New_York", NOW).unwrap(),
            z
        );
        assert_eq!(parse_when("2026-12-03T09:00 UTC", NOW).unwrap(), z);
        let summer = parse_when("2027-07-01T09:00:00Z", NOW).unwrap();
        assert_eq!(
            parse_when("2027-07-01T11:00 Europe/Paris", NOW).unwrap(),
            summer
        );
    }

    #[test]
    fn an_unknown_zone_or_a_bad_time_is_a_clear_error() {
        let e = parse_when("2026-12-03T09:00:00 Mars/Olympus_Mons", NOW).unwrap_err();
        assert!(e.contains("unknown timezone \"Mars/Olympus_Mons\""), "{e}");
        let e = parse_when("2026-12-03 09:00 PST", NOW).unwrap_err();
        assert!(e.contains("unknown timezone \"PST\""), "{e}");
        let e = parse_when("2026-12-03T09:00[Nowhere/Atall]", NOW).unwrap_err();
        assert!(e.contains("unknown timezone"), "{e}");
        let e = parse_when("2026-12-03T09:00:00", NOW).unwrap_err();
        assert!(e.contains("has no timezone"), "{e}");
        let e = parse_when("tomorrow Europe/Paris", NOW).unwrap_err();
        assert!(e.contains("is not a date and time"), "{e}");
        for bad in [
            "tomorrow",
            "2026-13-03T09:00:00Z",
            "+10",
            "+m",
            "+99999999999999d",
            "+522w",
            "+1h30",
            "+h30m",
            "+",
            "",
            "Europe/Paris",
        ] {
            assert!(parse_when(bad, NOW).is_err(), "{bad}");
        }
        let e = parse_when("+10y", NOW).unwrap_err();
        assert!(e.contains("unknown unit \"y\""), "{e}");
        let e = parse_when("+1h 30m", NOW).unwrap_err();
        assert!(e.contains("unknown unit"), "{e}");
    }

    #[test]
    fn a_local_time_the_zone_skips_or_repeats_is_refused_not_guessed() {
        // Paris: 2027-03-28 02:00 jumps to 03:00; 2027-10-31 03:00 goes back to 02:00.
        let e = parse_when("2027-03-28T02:30 Europe/Paris", NOW).unwrap_err();
        assert!(e.contains("does not exist in Europe/Paris"), "{e}");
        let e = parse_when("2027-10-31T02:30 Europe/Paris", NOW).unwrap_err();
        assert!(e.contains("happens twice in Europe/Paris"), "{e}");
        assert!(e.contains("+02"), "names the offsets: {e}");
        // With its offset it is one instant.
        assert_eq!(
            parse_when("2027-10-31T02:30:00+02:00", NOW).unwrap(),
            parse_when("2027-10-31T00:30:00Z", NOW).unwrap()
        );
    }

    #[test]
    fn a_length_of_time_is_units_without_a_sign() {
        assert_eq!(parse_span("30d"), Ok(30 * 86_400));
        assert_eq!(parse_span(" 1w3d "), Ok(10 * 86_400));
        assert_eq!(parse_span("90s"), Ok(90));
        for (bad, says) in [
            ("", "a length of time is N with a unit"),
            ("30", "a length of time is N with a unit"),
            ("d", "a length of time is N with a unit"),
            ("+30d", "a length of time is N with a unit"),
            ("3y", "unknown unit \"y\""),
            ("5000w", "too long (at most ten years)"),
            ("99999999999999999999d", "too long"),
        ] {
            let e = parse_span(bad).unwrap_err();
            assert!(e.contains(says), "{bad:?}: {e}");
        }
    }
}

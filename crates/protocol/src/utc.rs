//! UTC timestamps without a date-time dependency: RFC 3339 for session-log records and metadata,
//! a compact sortable form for session ids, `YYYYMMDD_HHMMSS` for runtime log directories.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Calendar fields of one UTC instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UtcTime {
    /// Proleptic Gregorian year.
    pub year: i64,
    /// 1-12.
    pub month: u32,
    /// 1-31.
    pub day: u32,
    /// 0-23.
    pub hour: u32,
    /// 0-59.
    pub minute: u32,
    /// 0-59.
    pub second: u32,
    /// 0-999.
    pub millis: u32,
}

impl UtcTime {
    /// Now.
    pub fn now() -> UtcTime {
        UtcTime::from_system(SystemTime::now())
    }

    /// The calendar fields of `t` (clamped to the epoch for a clock set before 1970).
    pub fn from_system(t: SystemTime) -> UtcTime {
        let since = t.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
        let secs = since.as_secs() as i64;
        let days = secs.div_euclid(86_400);
        let rem = secs.rem_euclid(86_400);
        let (year, month, day) = civil_from_days(days);
        UtcTime {
            year,
            month,
            day,
            hour: (rem / 3600) as u32,
            minute: ((rem % 3600) / 60) as u32,
            second: (rem % 60) as u32,
            millis: since.subsec_millis(),
        }
    }

    /// `2026-11-30T10:15:30.123Z`.
    pub fn rfc3339(&self) -> String {
        format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
            self.year, self.month, self.day, self.hour, self.minute, self.second, self.millis
        )
    }

    /// `20261130T101530Z`: sorts lexically in time order.
    pub fn compact(&self) -> String {
        format!(
            "{:04}{:02}{:02}T{:02}{:02}{:02}Z",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )
    }

    /// `20261130_101530`: the runtime's fallback log-directory name.
    pub fn log_dir_stamp(&self) -> String {
        format!(
            "{:04}{:02}{:02}_{:02}{:02}{:02}",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )
    }

    /// Seconds since the Unix epoch.
    pub fn unix_seconds(&self) -> i64 {
        days_from_civil(self.year, self.month, self.day) * 86_400
            + i64::from(self.hour) * 3600
            + i64::from(self.minute) * 60
            + i64::from(self.second)
    }

    /// Parses the [`UtcTime::rfc3339`] form (fraction optional); `None` for anything else.
    pub fn parse_rfc3339(s: &str) -> Option<UtcTime> {
        let s = s.strip_suffix('Z')?;
        let (date, time) = s.split_once('T')?;
        let mut d = date.splitn(3, '-');
        let year = d.next()?.parse().ok()?;
        let month: u32 = d.next()?.parse().ok()?;
        let day: u32 = d.next()?.parse().ok()?;
        let (hms, frac) = match time.split_once('.') {
            Some((hms, frac)) => (hms, Some(frac)),
            None => (time, None),
        };
        let mut t = hms.splitn(3, ':');
        let hour: u32 = t.next()?.parse().ok()?;
        let minute: u32 = t.next()?.parse().ok()?;
        let second: u32 = t.next()?.parse().ok()?;
        let millis = match frac {
            Some(f) if !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()) => {
                let padded = format!("{:0<3}", &f[..f.len().min(3)]);
                padded.parse().ok()?
            }
            Some(_) => return None,
            None => 0,
        };
        let valid = (1..=12).contains(&month)
            && (1..=31).contains(&day)
            && hour < 24
            && minute < 60
            && second < 61;
        valid.then_some(UtcTime {
            year,
            month,
            day,
            hour,
            minute,
            second,
            millis,
        })
    }
}

/// Days since 1970-01-01 to (year, month, day); Howard Hinnant's algorithm.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// (year, month, day) to days since 1970-01-01; inverse of [`civil_from_days`].
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// A short human form of an age in seconds: `42s`, `5m`, `3h`, `2d`.
pub fn human_age(seconds: i64) -> String {
    let s = seconds.max(0);
    if s < 60 {
        format!("{s}s")
    } else if s < 3600 {
        format!("{}m", s / 60)
    } else if s < 86_400 {
        format!("{}h", s / 3600)
    } else {
        format!("{}d", s / 86_400)
    }
}

/// Seconds between the RFC 3339 instant `then` and now; `None` when `then` does not parse.
pub fn age_seconds(then: &str) -> Option<i64> {
    let then = UtcTime::parse_rfc3339(then)?;
    Some(UtcTime::now().unix_seconds() - then.unix_seconds())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_instants() {
        let t = UtcTime::from_system(UNIX_EPOCH + Duration::from_millis(1_796_033_730_123));
        assert_eq!(t.rfc3339(), "2026-11-30T10:15:30.123Z");
        assert_eq!(t.compact(), "20261130T101530Z");
        let leap = UtcTime::from_system(UNIX_EPOCH + Duration::from_secs(951_782_400));
        assert_eq!(leap.rfc3339(), "2000-02-29T00:00:00.000Z");
        assert_eq!(
            UtcTime::from_system(UNIX_EPOCH).compact(),
            "19700101T000000Z"
        );
    }

    #[test]
    fn parse_round_trips() {
        for secs in [0u64, 951_782_400, 1_796_033_730, 4_102_444_799] {
            let t = UtcTime::from_system(UNIX_EPOCH + Duration::from_secs(secs));
            let back = UtcTime::parse_rfc3339(&t.rfc3339()).unwrap();
            assert_eq!(back, t);
            assert_eq!(back.unix_seconds(), secs as i64);
        }
        assert_eq!(
            UtcTime::parse_rfc3339("2026-11-30T10:15:30Z")
                .unwrap()
                .millis,
            0
        );
        for bad in [
            "",
            "2026-11-30",
            "2026-13-01T00:00:00Z",
            "2026-11-30T10:15:30",
            "x",
        ] {
            assert!(UtcTime::parse_rfc3339(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn ages() {
        assert_eq!(human_age(5), "5s");
        assert_eq!(human_age(125), "2m");
        assert_eq!(human_age(7200), "2h");
        assert_eq!(human_age(200_000), "2d");
        assert_eq!(human_age(-3), "0s");
        assert!(age_seconds(&UtcTime::now().rfc3339()).unwrap() <= 1);
    }
}

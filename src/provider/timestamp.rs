//! Signed timestamps: parsing the forms providers use (unix seconds, unix
//! milliseconds, RFC 3339) into milliseconds, and checking them against a window.

use super::VerifyError;

/// How a provider writes its timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TsFormat {
    Seconds,
    Millis,
    /// RFC 3339 (`2026-01-01T00:00:00Z`, `…+02:00`, fractions allowed); a plain
    /// integer is read as seconds, and a date-time without an offset as UTC (Orb's
    /// `2024-03-27T15:42:29.551`).
    Iso8601,
}

/// Parses a decimal unsigned integer: digits only, no sign, no overflow.
pub fn parse_digits(s: &str) -> Result<u64, VerifyError> {
    if s.is_empty() || s.len() > 19 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(VerifyError::BadTimestamp);
    }
    s.parse().map_err(|_| VerifyError::BadTimestamp)
}

impl TsFormat {
    /// The timestamp in unix milliseconds.
    pub fn parse_ms(self, s: &str) -> Result<u64, VerifyError> {
        match self {
            Self::Seconds => parse_digits(s)?
                .checked_mul(1000)
                .ok_or(VerifyError::BadTimestamp),
            Self::Millis => parse_digits(s),
            Self::Iso8601 => match parse_digits(s) {
                Ok(secs) => secs.checked_mul(1000).ok_or(VerifyError::BadTimestamp),
                Err(_) => rfc3339_ms(s)
                    .or_else(|| naive_utc_ms(s))
                    .ok_or(VerifyError::BadTimestamp),
            },
        }
    }
}

/// Checks a timestamp (ms) against `now` (seconds) within `tolerance` seconds, both ways.
pub fn check_window(ts_ms: u64, now_s: u64, tolerance: Option<u64>) -> Result<(), VerifyError> {
    let Some(tol) = tolerance else {
        return Ok(());
    };
    let now_ms = now_s.saturating_mul(1000);
    let tol_ms = tol.saturating_mul(1000);
    if now_ms > ts_ms && now_ms - ts_ms > tol_ms {
        return Err(VerifyError::TimestampTooOld {
            by_ms: now_ms - ts_ms - tol_ms,
        });
    }
    if ts_ms > now_ms && ts_ms - now_ms > tol_ms {
        return Err(VerifyError::TimestampInFuture {
            by_ms: ts_ms - now_ms - tol_ms,
        });
    }
    Ok(())
}

/// An ISO 8601 date-time without an offset, read as UTC.
fn naive_utc_ms(s: &str) -> Option<u64> {
    let t = s.trim();
    if t.ends_with(['Z', 'z']) || t.get(19..).is_some_and(|r| r.contains(['+', '-'])) {
        return None;
    }
    rfc3339_ms(&format!("{t}Z"))
}

/// RFC 3339 to unix milliseconds. Hand-written because the one format needed here
/// (with numeric offsets) is a few lines, where a date-time crate would be a large
/// dependency for a single parser.
pub fn rfc3339_ms(s: &str) -> Option<u64> {
    let b = s.trim().as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let part = b.get(r)?;
        if !part.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(part).ok()?.parse().ok()
    };
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut i = 19;
    let mut millis = 0i64;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start {
            return None;
        }
        let frac = &b[start..i.min(start + 3)];
        let mut m = 0i64;
        for (k, c) in frac.iter().enumerate() {
            m += i64::from(c - b'0') * [100, 10, 1][k];
        }
        millis = m;
    }
    let offset_s = match b.get(i..)? {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let hh = i64::from((*h1 as char).to_digit(10)? * 10 + (*h2 as char).to_digit(10)?);
            let mm = i64::from((*m1 as char).to_digit(10)? * 10 + (*m2 as char).to_digit(10)?);
            let off = hh * 3600 + mm * 60;
            if *sign == b'+' { off } else { -off }
        }
        _ => return None,
    };
    // Days from the civil date (Howard Hinnant's algorithm).
    let y2 = if mo <= 2 { y - 1 } else { y };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let doy = (153 * (if mo > 2 { mo - 3 } else { mo + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + h * 3600 + mi * 60 + sec - offset_s;
    u64::try_from(secs * 1000 + millis).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_forms() {
        assert_eq!(rfc3339_ms("2026-01-01T00:00:00Z"), Some(1_767_225_600_000));
        assert_eq!(
            rfc3339_ms("2026-01-01T01:00:00+01:00"),
            Some(1_767_225_600_000)
        );
        assert_eq!(
            rfc3339_ms("2025-12-31T23:59:59.123456789Z"),
            Some(1_767_225_599_123)
        );
        assert_eq!(rfc3339_ms("1970-01-01T00:00:00Z"), Some(0));
        for bad in [
            "",
            "2026-01-01",
            "2026-13-01T00:00:00Z",
            "2026-01-01T00:00:00",
            "2026-01-01T00:00:00.Z",
            "２０２６-01-01T00:00:00Z",
        ] {
            assert_eq!(rfc3339_ms(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn formats_and_window() {
        assert_eq!(TsFormat::Seconds.parse_ms("10"), Ok(10_000));
        assert_eq!(TsFormat::Millis.parse_ms("10"), Ok(10));
        assert_eq!(TsFormat::Iso8601.parse_ms("10"), Ok(10_000));
        assert_eq!(
            TsFormat::Iso8601.parse_ms("2026-01-01T00:00:00.5"),
            Ok(1_767_225_600_500)
        );
        for bad in [
            "2026-01-01T00:00:00ZZ",
            "2026-01-01T00:00:00+01",
            "2026-01-01",
        ] {
            assert_eq!(
                TsFormat::Iso8601.parse_ms(bad),
                Err(VerifyError::BadTimestamp),
                "{bad:?}"
            );
        }
        assert_eq!(
            TsFormat::Seconds.parse_ms("99999999999999999"),
            Err(VerifyError::BadTimestamp)
        );
        assert!(check_window(100_000, 400, Some(300)).is_ok());
        assert_eq!(
            check_window(99_999, 400, Some(300)),
            Err(VerifyError::TimestampTooOld { by_ms: 1 })
        );
        assert_eq!(
            check_window(700_001, 400, Some(300)),
            Err(VerifyError::TimestampInFuture { by_ms: 1 })
        );
        assert!(check_window(0, u64::MAX, None).is_ok());
    }
}

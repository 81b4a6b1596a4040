//! Dates in the words of C's `ctime(3)`, as mdadm prints them ("Sun Nov 22 12:03:47
//! 2026"). Rendered in UTC: the crate does no I/O and so cannot read the local zone.

const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// Year, month (1..=12) and day of the proleptic Gregorian calendar for a count of
/// days since 1970-01-01 (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// `ctime(3)` without its newline, cut to 24 characters as mdadm's `%.24s` does.
pub(crate) fn ctime(secs: u64) -> String {
    let secs = secs as i64;
    let days = secs.div_euclid(86_400);
    let tod = secs.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    let weekday = DAYS[days.rem_euclid(7) as usize];
    let mut s = format!(
        "{weekday} {} {day:2} {:02}:{:02}:{:02} {year}",
        MONTHS[(month - 1) as usize],
        tod / 3600,
        tod / 60 % 60,
        tod % 60
    );
    s.truncate(24);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_ctime() {
        assert_eq!(ctime(0), "Thu Jan  1 00:00:00 1970");
        // The raid5 fixture's creation time (0x6b02da23) as mdadm showed it on a host
        // running in UTC.
        assert_eq!(ctime(0x6b02_da23), "Sun Nov 22 12:03:47 2026");
        assert_eq!(ctime(951_782_400), "Tue Feb 29 00:00:00 2000");
        assert_eq!(ctime(4_102_444_799), "Thu Dec 31 23:59:59 2099");
    }
}

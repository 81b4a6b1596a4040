//! Sizes the way mdadm prints them after a count (`human_size` in mdadm's `util.c`):
//! " (15.00 MiB 15.73 MB)", switching to GiB/GB from 2 GiB and TiB/TB from 2 TiB,
//! nothing below 5000 KiB.

/// mdadm's `human_size(bytes)`, leading space and parentheses included.
///
/// The arithmetic is mdadm's on a signed 64-bit value, wrapping where C would, so even
/// absurd sizes print as mdadm prints them.
pub(crate) fn human_size(bytes: i64) -> String {
    const KIB: i64 = 1024;
    if bytes < 5000 * KIB {
        return String::new();
    }
    // Centi-units rounded to nearest: (x * 200 / unit + 1) / 2.
    let (c_bin, c_dec, bin, dec) = if bytes < 2 * KIB * KIB * KIB {
        (
            (bytes.wrapping_mul(200) / (1 << 20) + 1) / 2,
            (bytes / (1_000_000 / 200) + 1) / 2,
            "MiB",
            "MB",
        )
    } else if bytes < 2 * KIB * KIB * KIB * KIB {
        (
            (bytes.wrapping_mul(200) / (1 << 30) + 1) / 2,
            (bytes / (1_000_000_000 / 200) + 1) / 2,
            "GiB",
            "GB",
        )
    } else {
        (
            (bytes.wrapping_mul(200) / (1 << 40) + 1) / 2,
            (bytes / (1_000_000_000_000 / 200) + 1) / 2,
            "TiB",
            "TB",
        )
    };
    format!(
        " ({}.{:02} {bin} {}.{:02} {dec})",
        c_bin / 100,
        c_bin % 100,
        c_dec / 100,
        c_dec % 100
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_mdadm() {
        assert_eq!(human_size(30720 << 9), " (15.00 MiB 15.73 MB)");
        assert_eq!(human_size(46080 << 10), " (45.00 MiB 47.19 MB)");
        assert_eq!(human_size(5000 * 1024 - 1), "");
        assert_eq!(human_size(5000 * 1024), " (4.88 MiB 5.12 MB)");
        assert_eq!(human_size(2 << 30), " (2.00 GiB 2.15 GB)");
        assert_eq!(human_size(1_000_204_886_016), " (931.51 GiB 1000.20 GB)");
        assert_eq!(human_size(4_000_787_030_016), " (3.64 TiB 4.00 TB)");
    }
}

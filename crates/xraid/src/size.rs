//! Sizes on the command line: plain bytes or with K/M/G/T suffixes (powers of 1024),
//! as mdadm takes them.

/// Parses "64K", "1M", "512", "2g", "1.5G" is refused (whole units only).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let (digits, shift) = match text.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_uppercase() {
                'K' => 10,
                'M' => 20,
                'G' => 30,
                'T' => 40,
                'B' if i > 0 => 0,
                _ => {
                    return Err(format!(
                        "'{text}': unknown size suffix '{c}': use K, M, G or T"
                    ))
                }
            };
            (&text[..i], shift)
        }
        _ => (text, 0),
    };
    let value: u64 = digits
        .parse()
        .map_err(|_| format!("'{text}' is not a size: write e.g. 4096, 64K, 1M or 2G"))?;
    value
        .checked_mul(1u64 << shift)
        .ok_or_else(|| format!("'{text}' is too large"))
}

/// Bytes as a short human figure with binary units ("64.00 MiB").
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.2} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffixes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64K"), Ok(65536));
        assert_eq!(parse_size("64k"), Ok(65536));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("1T"), Ok(1 << 40));
        assert_eq!(parse_size("512B"), Ok(512));
    }

    #[test]
    fn bad_sizes_are_explained() {
        assert!(parse_size("1.5G").unwrap_err().contains("not a size"));
        assert!(parse_size("12X")
            .unwrap_err()
            .contains("unknown size suffix"));
        assert!(parse_size("").is_err());
        assert!(parse_size("99999999999T")
            .unwrap_err()
            .contains("too large"));
    }

    #[test]
    fn human_units() {
        assert_eq!(human(512), "512 B");
        assert_eq!(human(64 << 20), "64.00 MiB");
    }
}

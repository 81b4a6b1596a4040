//! mdadm's names for md's numbers (`maps.c`): levels and the raid0/5/6 layouts, and
//! its spelling of raid10 layouts (`print_r10_layout` in `util.c`).

/// mdadm's name for an md level (first match in its `pers` table).
pub(crate) fn level_name(level: i32) -> Option<&'static str> {
    Some(match level {
        -1 => "linear",
        0 => "raid0",
        1 => "raid1",
        4 => "raid4",
        5 => "raid5",
        -4 => "multipath",
        6 => "raid6",
        10 => "raid10",
        -5 => "faulty",
        -100 => "container",
        _ => return None,
    })
}

/// mdadm's `r5layout` names: only the first name of each number ever prints.
pub(crate) fn r5_layout_name(layout: u32) -> Option<&'static str> {
    Some(match layout {
        0 => "left-asymmetric",
        1 => "right-asymmetric",
        2 => "left-symmetric",
        3 => "right-symmetric",
        4 => "parity-first",
        5 => "parity-last",
        _ => return None,
    })
}

/// mdadm's `r6layout` names, including the DDF and "-6" (raid5-converted) layouts.
pub(crate) fn r6_layout_name(layout: u32) -> Option<&'static str> {
    match layout {
        0..=5 => r5_layout_name(layout),
        8 => Some("ddf-zero-restart"),
        9 => Some("ddf-N-restart"),
        10 => Some("ddf-N-continue"),
        16 => Some("left-asymmetric-6"),
        17 => Some("right-asymmetric-6"),
        18 => Some("left-symmetric-6"),
        19 => Some("right-symmetric-6"),
        20 => Some("parity-first-6"),
        _ => None,
    }
}

/// mdadm's `r0layout` names.
pub(crate) fn r0_layout_name(layout: u32) -> Option<&'static str> {
    Some(match layout {
        1 => "original",
        2 => "alternate",
        0 => "dangerous",
        _ => return None,
    })
}

/// mdadm's `print_r10_layout`: " near=2", " far=2", " offset=2", " near=2, far=3",
/// and "NO REDUNDANCY" (without a leading space) for one copy.
pub(crate) fn r10_layout_text(layout: u32) -> String {
    let near = layout & 255;
    let far = (layout >> 8) & 255;
    let offset = layout & 0x10000 != 0;
    let mut s = String::new();
    let mut sep = "";
    if near != 1 {
        s.push_str(&format!("{sep} near={near}"));
        sep = ",";
    }
    if far != 1 {
        let word = if offset { "offset" } else { "far" };
        s.push_str(&format!("{sep} {word}={far}"));
    }
    if near * far == 1 {
        s.push_str("NO REDUNDANCY");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raid10_layouts() {
        assert_eq!(r10_layout_text(0x102), " near=2");
        assert_eq!(r10_layout_text(0x201), " far=2");
        assert_eq!(r10_layout_text(0x10201), " offset=2");
        assert_eq!(r10_layout_text(0x302), " near=2, far=3");
        assert_eq!(r10_layout_text(0x101), "NO REDUNDANCY");
    }

    #[test]
    fn parity_layouts() {
        assert_eq!(r5_layout_name(2), Some("left-symmetric"));
        assert_eq!(r5_layout_name(8), None);
        assert_eq!(r6_layout_name(5), Some("parity-last"));
        assert_eq!(r6_layout_name(18), Some("left-symmetric-6"));
        assert_eq!(level_name(10), Some("raid10"));
        assert_eq!(level_name(3), None);
    }
}

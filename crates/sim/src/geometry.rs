//! A disk's format: zones of cylinders, heads, data and spare sectors per track, and
//! the track and cylinder skews; maps a logical block address to where it lies on the
//! platters (cylinder, head, sector) and at which angular slot.
//!
//! Logical blocks run zone by zone from the outer edge, cylinder by cylinder, head by
//! head, sector by sector, as on real drives. Each track holds `sectors_per_track` data
//! sectors followed by `spare_sectors_per_track` spare slots: the spares hold no data
//! but take rotation time, so they lower the media rate. A track's first sector is
//! shifted from the previous track's by the head skew (same cylinder) or the cylinder
//! skew (next cylinder), so that a sequential transfer finds the next track's first
//! sector just after the head or cylinder switch instead of a revolution later.

/// One recording zone as a spec sheet or format gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Zone {
    pub cylinders: u32,
    pub sectors_per_track: u32,
}

/// A zone with its place in the disk and its skews, in slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZoneInfo {
    pub first_cylinder: u32,
    pub cylinders: u32,
    /// Data sectors per track.
    pub sectors_per_track: u32,
    /// Angular slots per track: data sectors plus spares.
    pub slots: u32,
    pub first_lba: u64,
    pub head_skew: u32,
    pub cylinder_skew: u32,
}

impl ZoneInfo {
    fn sectors(&self, heads: u32) -> u64 {
        u64::from(self.cylinders) * u64::from(heads) * u64::from(self.sectors_per_track)
    }
}

/// Where one logical block lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loc {
    pub zone: usize,
    pub cylinder: u32,
    pub head: u32,
    /// Logical sector within the track (0..sectors_per_track).
    pub sector: u32,
}

/// The format of a whole disk. Built by [`crate::DiskParams::build`], which checks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Format {
    heads: u32,
    zones: Vec<ZoneInfo>,
    cylinders: u32,
    sectors: u64,
}

impl Format {
    /// Lays out `zones` (outer first); skews are per zone, in slots. The caller has
    /// checked that every count is positive and every skew below the zone's slots.
    pub(crate) fn new(heads: u32, zones: Vec<ZoneInfo>) -> Format {
        let mut laid = Vec::with_capacity(zones.len());
        let (mut cyl, mut lba) = (0u32, 0u64);
        for z in zones {
            let z = ZoneInfo {
                first_cylinder: cyl,
                first_lba: lba,
                ..z
            };
            cyl += z.cylinders;
            lba += z.sectors(heads);
            laid.push(z);
        }
        Format {
            heads,
            zones: laid,
            cylinders: cyl,
            sectors: lba,
        }
    }

    pub fn heads(&self) -> u32 {
        self.heads
    }

    pub fn cylinders(&self) -> u32 {
        self.cylinders
    }

    /// Data sectors of the whole disk.
    pub fn sectors(&self) -> u64 {
        self.sectors
    }

    pub fn zones(&self) -> &[ZoneInfo] {
        &self.zones
    }

    pub fn zone(&self, i: usize) -> &ZoneInfo {
        &self.zones[i]
    }

    /// Where `lba` lies; `lba` must be below [`Format::sectors`].
    pub fn locate(&self, lba: u64) -> Loc {
        assert!(lba < self.sectors, "lba {lba} beyond the disk");
        let zone = self.zones.partition_point(|z| z.first_lba <= lba) - 1;
        let z = &self.zones[zone];
        let rel = lba - z.first_lba;
        let spt = u64::from(z.sectors_per_track);
        let track = rel / spt;
        let heads = u64::from(self.heads);
        Loc {
            zone,
            cylinder: z.first_cylinder + (track / heads) as u32,
            head: (track % heads) as u32,
            sector: (rel % spt) as u32,
        }
    }

    /// The angular slot (0..slots) at which logical sector `sector` of the track
    /// (`cylinder`, `head`) in zone `zone` starts.
    pub fn slot(&self, zone: usize, cylinder: u32, head: u32, sector: u32) -> u32 {
        let z = &self.zones[zone];
        let slots = u64::from(z.slots);
        let cyl_in_zone = u64::from(cylinder - z.first_cylinder);
        // Each cylinder advances the start by (heads - 1) head skews and one cylinder
        // skew; each head within it by one head skew.
        let per_cyl = (u64::from(self.heads - 1) * u64::from(z.head_skew)
            + u64::from(z.cylinder_skew))
            % slots;
        let offset = (cyl_in_zone % slots) * per_cyl + u64::from(head) * u64::from(z.head_skew);
        ((u64::from(sector) + offset) % slots) as u32
    }

    /// The first block of the track after the one holding `loc`, if the disk goes on.
    pub fn next_track(&self, loc: Loc) -> Option<Loc> {
        if loc.head + 1 < self.heads {
            return Some(Loc {
                head: loc.head + 1,
                sector: 0,
                ..loc
            });
        }
        let cylinder = loc.cylinder + 1;
        if cylinder >= self.cylinders {
            return None;
        }
        let z = &self.zones[loc.zone];
        let zone = if cylinder >= z.first_cylinder + z.cylinders {
            loc.zone + 1
        } else {
            loc.zone
        };
        Some(Loc {
            zone,
            cylinder,
            head: 0,
            sector: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zone(cylinders: u32, spt: u32, skews: (u32, u32)) -> ZoneInfo {
        ZoneInfo {
            first_cylinder: 0,
            cylinders,
            sectors_per_track: spt,
            slots: spt + 1,
            first_lba: 0,
            head_skew: skews.0,
            cylinder_skew: skews.1,
        }
    }

    #[test]
    fn blocks_run_zone_cylinder_head_sector() {
        let f = Format::new(2, vec![zone(3, 10, (0, 0)), zone(2, 8, (0, 0))]);
        assert_eq!(f.sectors(), 3 * 2 * 10 + 2 * 2 * 8);
        assert_eq!(f.cylinders(), 5);
        let l = f.locate(0);
        assert_eq!((l.zone, l.cylinder, l.head, l.sector), (0, 0, 0, 0));
        let l = f.locate(13);
        assert_eq!((l.zone, l.cylinder, l.head, l.sector), (0, 0, 1, 3));
        let l = f.locate(20);
        assert_eq!((l.zone, l.cylinder, l.head, l.sector), (0, 1, 0, 0));
        let l = f.locate(60);
        assert_eq!((l.zone, l.cylinder, l.head, l.sector), (1, 3, 0, 0));
        let l = f.locate(60 + 8 * 3 + 5);
        assert_eq!((l.zone, l.cylinder, l.head, l.sector), (1, 4, 1, 5));
    }

    #[test]
    fn skews_shift_each_track_from_the_previous() {
        let f = Format::new(3, vec![zone(4, 20, (3, 7))]);
        // Head skew between heads of one cylinder, cylinder skew from the last head of
        // one cylinder to head 0 of the next.
        assert_eq!(f.slot(0, 0, 0, 0), 0);
        assert_eq!(f.slot(0, 0, 1, 0), 3);
        assert_eq!(f.slot(0, 0, 2, 0), 6);
        assert_eq!(f.slot(0, 1, 0, 0), 13);
        assert_eq!(f.slot(0, 1, 1, 2), 18);
        // Wraps around the 21 slots of the track.
        assert_eq!(f.slot(0, 1, 2, 5), (13 + 6 + 5) % 21);
    }

    #[test]
    fn next_track_crosses_heads_cylinders_and_zones() {
        let f = Format::new(2, vec![zone(1, 10, (0, 0)), zone(1, 8, (0, 0))]);
        let l = f.locate(0);
        let n = f.next_track(l).map(|n| (n.zone, n.cylinder, n.head));
        assert_eq!(n, Some((0, 0, 1)));
        let l = f.locate(10);
        let n = f.next_track(l).map(|n| (n.zone, n.cylinder, n.head));
        assert_eq!(n, Some((1, 1, 0)));
        let l = f.locate(f.sectors() - 1);
        assert_eq!(f.next_track(l), None);
    }
}

//! An SSD's parameters as a data sheet gives them, their checks, and the model built
//! from them: the flash geometry (channels, dies, blocks, pages), the flash's own
//! latencies, the over-provisioning that decides how much of the flash the host can
//! address, and the drive's front end (command overhead, host interface, queue).
//!
//! [`SsdParams::build`] checks everything once, so the drive and its FTL never meet a
//! bad value.

use xraid_engine::Nanos;
use xraid_layout::SECTOR_BYTES;

/// Parts per million: over-provisioning is kept as an integer so that the user
/// capacity it implies is the same on every machine.
const PPM: u64 = 1_000_000;
/// Most flash pages one drive may have: the FTL keeps a page index in 32 bits and a
/// map entry per logical page, so a bound keeps its memory bounded (16 TiB of 4 KiB
/// pages; a map of at most 16 GiB, filled only as far as a run writes).
const MAX_PAGES: u64 = 1 << 32;
/// Largest flash page the model takes (real ones are 512 B to 16 KiB).
const MAX_PAGE_BYTES: u32 = 1 << 20;
/// Blocks each die keeps beyond its share of the data: one open for writes and one
/// free for garbage collection to copy into (see `ftl`).
pub(crate) const SPARE_BLOCKS_MIN: u64 = 2;

/// Everything that describes one SSD.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SsdParams {
    /// Flash channels: buses between the controller and the dies, each carrying one
    /// page transfer at a time.
    pub channels: u32,
    /// Dies on each channel; each die does one read, program or erase at a time.
    pub dies_per_channel: u32,
    pub page_bytes: u32,
    pub pages_per_block: u32,
    pub blocks_per_die: u32,
    /// Flash beyond the user capacity, in parts per million of the user capacity.
    pub over_provisioning_ppm: u64,
    /// Flash array to page register (tR).
    pub page_read: Nanos,
    /// Page register to flash array (tPROG).
    pub page_program: Nanos,
    /// One block erased (tBERS).
    pub block_erase: Nanos,
    /// Each channel's rate, bytes per second.
    pub channel_bytes_per_sec: u64,
    /// The controller's processing per command (decode, map lookup, status).
    pub command_overhead: Nanos,
    /// Host interface rate, bytes per second.
    pub interface_bytes_per_sec: u64,
    /// Commands the drive holds (native command queueing).
    pub queue_depth: u32,
}

/// Why SSD parameters were refused. Each message names the value and the fix.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SsdParamError {
    /// A count or rate that must be positive is zero.
    #[error("{what} must be at least 1")]
    Zero { what: &'static str },
    /// The page is not a whole number of sectors, or too large.
    #[error("a page of {bytes} bytes is not a multiple of 512 bytes up to {MAX_PAGE_BYTES}")]
    PageSize { bytes: u32 },
    /// More flash than the FTL's map can index.
    #[error(
        "{pages} flash pages is beyond the model's limit of {MAX_PAGES}: fewer blocks or dies"
    )]
    TooLarge { pages: u64 },
    /// Too little over-provisioning for garbage collection to make progress.
    #[error("over-provisioning of {percent}% leaves a die {blocks} blocks for {pages} pages of data at {pages_per_block} pages a block: it needs {SPARE_BLOCKS_MIN} blocks more than its data fills; raise over_provisioning_percent")]
    TooLittleSpare {
        percent: f64,
        blocks: u64,
        pages: u64,
        pages_per_block: u32,
    },
}

/// A checked SSD model: the parameters and what follows from them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SsdModel {
    pub params: SsdParams,
    /// Dies in all (channels × dies per channel).
    pub dies: u32,
    /// Pages the host can address.
    pub logical_pages: u64,
    /// Sectors in a page.
    pub page_sectors: u64,
}

impl SsdModel {
    /// Sectors the host can address.
    pub fn sectors(&self) -> u64 {
        self.logical_pages * self.page_sectors
    }

    /// Time for `bytes` over a channel.
    pub fn channel_time(&self, bytes: u64) -> Nanos {
        rate_time(bytes, self.params.channel_bytes_per_sec)
    }

    /// Time for `bytes` over the host interface.
    pub fn interface_time(&self, bytes: u64) -> Nanos {
        rate_time(bytes, self.params.interface_bytes_per_sec)
    }

    /// Flash pages in all.
    pub fn physical_pages(&self) -> u64 {
        let p = &self.params;
        u64::from(self.dies) * u64::from(p.blocks_per_die) * u64::from(p.pages_per_block)
    }
}

/// `bytes` at `rate` bytes per second, rounded up to a nanosecond.
fn rate_time(bytes: u64, rate: u64) -> Nanos {
    Nanos((u128::from(bytes) * 1_000_000_000).div_ceil(u128::from(rate)) as u64)
}

/// Over-provisioning in percent (as presets and configurations give it) to parts per
/// million; None when it is not a finite number from 0 to 10,000%.
pub(crate) fn percent_to_ppm(percent: f64) -> Option<u64> {
    (percent.is_finite() && (0.0..=10_000.0).contains(&percent))
        .then(|| (percent * 1e4).round() as u64)
}

impl SsdParams {
    /// Checks the parameters and builds the model.
    pub fn build(&self) -> Result<SsdModel, SsdParamError> {
        let zero = |v: u64, what| {
            if v == 0 {
                return Err(SsdParamError::Zero { what });
            }
            Ok(())
        };
        zero(self.channels.into(), "channels")?;
        zero(self.dies_per_channel.into(), "dies_per_channel")?;
        zero(self.pages_per_block.into(), "pages_per_block")?;
        zero(self.blocks_per_die.into(), "blocks_per_die")?;
        zero(self.channel_bytes_per_sec, "the channel rate")?;
        zero(self.interface_bytes_per_sec, "the interface rate")?;
        zero(self.queue_depth.into(), "queue_depth")?;
        if self.page_bytes == 0
            || !u64::from(self.page_bytes).is_multiple_of(SECTOR_BYTES)
            || self.page_bytes > MAX_PAGE_BYTES
        {
            return Err(SsdParamError::PageSize {
                bytes: self.page_bytes,
            });
        }
        let dies = u64::from(self.channels) * u64::from(self.dies_per_channel);
        let per_die = u64::from(self.blocks_per_die) * u64::from(self.pages_per_block);
        let pages = dies.saturating_mul(per_die);
        if pages > MAX_PAGES {
            return Err(SsdParamError::TooLarge { pages });
        }
        // The host gets what is left once the spare share is set aside:
        // physical = logical · (1 + ppm / 10^6), rounded down to a whole page.
        let logical = u128::from(pages) * u128::from(PPM)
            / (u128::from(PPM) + u128::from(self.over_provisioning_ppm));
        let logical = logical as u64;
        // Logical pages are dealt out to the dies in turn, so die 0 holds the most.
        let die_pages = logical.div_ceil(dies);
        let blocks = u64::from(self.blocks_per_die);
        if logical == 0
            || (blocks.saturating_sub(SPARE_BLOCKS_MIN)) * u64::from(self.pages_per_block)
                < die_pages
        {
            return Err(SsdParamError::TooLittleSpare {
                percent: self.over_provisioning_ppm as f64 / 1e4,
                blocks,
                pages: die_pages,
                pages_per_block: self.pages_per_block,
            });
        }
        Ok(SsdModel {
            params: self.clone(),
            dies: dies as u32,
            logical_pages: logical,
            page_sectors: u64::from(self.page_bytes) / SECTOR_BYTES,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> SsdParams {
        SsdParams {
            channels: 2,
            dies_per_channel: 2,
            page_bytes: 4096,
            pages_per_block: 32,
            blocks_per_die: 64,
            over_provisioning_ppm: 100_000,
            page_read: Nanos(50_000),
            page_program: Nanos(500_000),
            block_erase: Nanos(2_000_000),
            channel_bytes_per_sec: 100_000_000,
            command_overhead: Nanos(10_000),
            interface_bytes_per_sec: 300_000_000,
            queue_depth: 32,
        }
    }

    #[test]
    fn capacity_is_the_flash_less_its_spare_share() {
        let m = small().build().unwrap_or_else(|e| panic!("{e}"));
        // 4 dies x 64 blocks x 32 pages = 8192 pages; 10% spare: 8192 / 1.1 = 7447.27.
        assert_eq!(m.physical_pages(), 8192);
        assert_eq!(m.logical_pages, 7447);
        assert_eq!(m.sectors(), 7447 * 8);
        assert_eq!(m.dies, 4);
        assert_eq!(m.channel_time(4096), Nanos(40_960));
        assert_eq!(m.interface_time(4096), Nanos(13_654));
    }

    #[test]
    fn bad_parameters_are_refused() {
        let bad = |p: SsdParams| p.build().err().map(|e| e.to_string()).unwrap_or_default();
        assert!(bad(SsdParams {
            channels: 0,
            ..small()
        })
        .contains("channels"));
        assert!(bad(SsdParams {
            page_bytes: 1000,
            ..small()
        })
        .contains("1000 bytes"));
        assert!(bad(SsdParams {
            queue_depth: 0,
            ..small()
        })
        .contains("queue_depth"));
        // 64 blocks of 32 pages per die with under 1% spare: a die's data fills 63.5
        // blocks, more than the 62 it may.
        let e = bad(SsdParams {
            over_provisioning_ppm: 5_000,
            ..small()
        });
        assert!(e.contains("raise over_provisioning_percent"), "{e}");
        assert!(bad(SsdParams {
            blocks_per_die: u32::MAX,
            pages_per_block: 4096,
            ..small()
        })
        .contains("beyond the model's limit"));
        assert_eq!(percent_to_ppm(7.33), Some(73_300));
        assert_eq!(percent_to_ppm(-1.0), None);
        assert_eq!(percent_to_ppm(f64::NAN), None);
    }
}

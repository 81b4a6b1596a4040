//! The integrity table's entries of many 4 KiB blocks at once: the checksum of every
//! block a read brings or a write sends. crc-fast computes one buffer at a time, and
//! on a 4 KiB block its set-up and the folding of its lanes cost as much as the
//! blocks' bytes on CPUs without AVX-512 (10-13 GB/s per core on the 2-core AMD EPYC
//! VM, where the checksums took 12-13% of the server's CPU on 1 MiB requests). Four
//! blocks hashed side by side, one `crc32` instruction chain each, keep the CPU's CRC
//! unit busy without any folding (three chains fill it; four make whole groups of the
//! powers of two that requests come in): about 21 GB/s there (`cargo bench -p
//! xraid-format --bench block_crc`). A block alone (a 4 KiB request, or one past the
//! last group of four) has its thirds hashed side by side instead, their CRCs joined
//! by tables made once: about twice crc-fast's rate too. Where the CPU has AVX-512,
//! crc-fast's own kernels are faster still, and blocks go to it one at a time.

use crate::integrity::{block_entry_of_crc, crc32c, BLOCK_BYTES};

/// Calls `each(i, entry)` with [`crate::block_entry`] of block `i` of `blocks`, for
/// every whole 4 KiB block in order (bytes past the last whole block are left out).
pub fn block_entries(blocks: &[u8], mut each: impl FnMut(usize, u32)) {
    let mut i = 0;
    #[cfg(target_arch = "x86_64")]
    if x86::chains() {
        let mut fours = blocks.chunks_exact(4 * BLOCK_BYTES);
        for four in &mut fours {
            let (ab, cd) = four.split_at(2 * BLOCK_BYTES);
            let (a, b) = ab.split_at(BLOCK_BYTES);
            let (c, d) = cd.split_at(BLOCK_BYTES);
            // SAFETY: the CPU has SSE4.2 (`chains` detected it), the one
            // feature `four_crcs` is compiled for.
            let crcs = unsafe {
                x86::four_crcs([x86::block(a), x86::block(b), x86::block(c), x86::block(d)])
            };
            for crc in crcs {
                each(i, block_entry_of_crc(crc));
                i += 1;
            }
        }
        for one in fours.remainder().chunks_exact(BLOCK_BYTES) {
            // SAFETY: as above.
            let crc = unsafe { x86::one_crc(x86::block(one), x86::joins()) };
            each(i, block_entry_of_crc(crc));
            i += 1;
        }
        return;
    }
    for one in blocks.chunks_exact(BLOCK_BYTES) {
        each(i, block_entry_of_crc(crc32c(one)));
        i += 1;
    }
}

/// The kernels and what they need: x86-64 only (`crc32` is SSE4.2's).
#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::BLOCK_BYTES;
    use std::arch::x86_64::_mm_crc32_u64;

    /// Whether to hash in `crc32` chains side by side (four blocks, or a block's
    /// thirds): with SSE4.2, and not where crc-fast has AVX-512 (AVX512VL) for its
    /// fused kernels, which run at 45-68 GB/s a core (the 2-core Intel Xeon VM), twice
    /// four chains' rate.
    pub(super) fn chains() -> bool {
        std::arch::is_x86_feature_detected!("sse4.2")
            && !std::arch::is_x86_feature_detected!("avx512vl")
    }

    /// CRC-32C's polynomial, bit-reflected (Castagnoli).
    const POLY: u32 = 0x82F6_3B78;

    /// Words of a block's first and second thirds (its third has one fewer), which
    /// [`one_crc`] hashes side by side.
    const THIRD_WORDS: usize = 171;

    /// What joins a block's thirds' CRCs: each a CRC state carried over the bytes that
    /// follow it, as if they were zeros (CRC is linear: the state after A B C is A's
    /// carried over B and C, xor B's from zero carried over C, xor C's from zero).
    #[derive(Debug)]
    pub(super) struct Joins {
        /// Over the second and third thirds.
        past_two: Carry,
        /// Over the third.
        past_one: Carry,
    }

    /// A CRC state carried over a fixed run of zero bytes: a linear map of the state's
    /// 32 bits, by byte of the state.
    #[derive(Debug)]
    struct Carry([[u32; 256]; 4]);

    impl Carry {
        fn over_zeros(bytes: usize) -> Carry {
            // One bit at a time, as the polynomial defines it: computed once.
            let carry = |mut v: u32| {
                for _ in 0..bytes * 8 {
                    v = if v & 1 != 0 { (v >> 1) ^ POLY } else { v >> 1 };
                }
                v
            };
            let bits: Vec<u32> = (0..32).map(|b| carry(1 << b)).collect();
            let mut table = [[0u32; 256]; 4];
            for (byte, row) in table.iter_mut().enumerate() {
                for (value, entry) in row.iter_mut().enumerate() {
                    *entry = (0..8)
                        .filter(|bit| value >> bit & 1 != 0)
                        .fold(0, |acc, bit| acc ^ bits[8 * byte + bit]);
                }
            }
            Carry(table)
        }

        fn apply(&self, v: u32) -> u32 {
            let [a, b, c, d] = v.to_le_bytes();
            self.0[0][usize::from(a)]
                ^ self.0[1][usize::from(b)]
                ^ self.0[2][usize::from(c)]
                ^ self.0[3][usize::from(d)]
        }
    }

    /// The joins of a block's thirds, made at first use.
    pub(super) fn joins() -> &'static Joins {
        static JOINS: std::sync::OnceLock<Joins> = std::sync::OnceLock::new();
        JOINS.get_or_init(|| {
            let last = (BLOCK_BYTES / 8 - 2 * THIRD_WORDS) * 8;
            Joins {
                past_two: Carry::over_zeros(THIRD_WORDS * 8 + last),
                past_one: Carry::over_zeros(last),
            }
        })
    }

    /// `s` (exactly one block, as `chunks_exact` and `split_at` cut it) as an array, so
    /// that the kernel's loop has no bounds to check.
    pub(super) fn block(s: &[u8]) -> &[u8; BLOCK_BYTES] {
        s.try_into().expect("cut to one block")
    }

    /// CRC-32C (initial value and final xor all ones, as crc-fast's) of four blocks,
    /// their `crc32` chains interleaved: each instruction waits three cycles for the
    /// one before it in its chain, and one issues per cycle.
    #[target_feature(enable = "sse4.2")]
    pub(super) fn four_crcs(blocks: [&[u8; BLOCK_BYTES]; 4]) -> [u32; 4] {
        let word = |b: &[u8; BLOCK_BYTES], at: usize| {
            u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
        };
        let mut crcs = [u64::from(u32::MAX); 4];
        for at in (0..BLOCK_BYTES).step_by(8) {
            for (crc, b) in crcs.iter_mut().zip(blocks) {
                *crc = _mm_crc32_u64(*crc, word(b, at));
            }
        }
        // The instruction keeps the CRC in the low 32 bits.
        crcs.map(|crc| !(crc as u32))
    }

    /// CRC-32C of one block, its thirds' chains side by side (a request of one
    /// block, or the blocks past the last group of four), joined by `joins`.
    #[target_feature(enable = "sse4.2")]
    pub(super) fn one_crc(block: &[u8; BLOCK_BYTES], joins: &Joins) -> u32 {
        let word = |at: usize| u64::from_le_bytes(block[at..at + 8].try_into().expect("8 bytes"));
        let (second, third) = (8 * THIRD_WORDS, 16 * THIRD_WORDS);
        let (mut x, mut y, mut z) = (u64::from(u32::MAX), 0, 0);
        for at in (0..BLOCK_BYTES - third).step_by(8) {
            x = _mm_crc32_u64(x, word(at));
            y = _mm_crc32_u64(y, word(second + at));
            z = _mm_crc32_u64(z, word(third + at));
        }
        // The first and second thirds' last word.
        x = _mm_crc32_u64(x, word(second - 8));
        y = _mm_crc32_u64(y, word(third - 8));
        !(joins.past_two.apply(x as u32) ^ joins.past_one.apply(y as u32) ^ z as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block_entry;
    use proptest::prelude::*;

    fn one_at_a_time(blocks: &[u8]) -> Vec<u32> {
        blocks.chunks_exact(BLOCK_BYTES).map(block_entry).collect()
    }

    /// `len` bytes of a simple generator's, from `seed`.
    fn random_bytes(len: usize, mut seed: u64) -> Vec<u8> {
        (0..len)
            .map(|_| {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (seed >> 33) as u8
            })
            .collect()
    }

    fn several_at_a_time(blocks: &[u8]) -> Vec<u32> {
        let mut out = Vec::new();
        block_entries(blocks, |i, entry| {
            assert_eq!(i, out.len(), "in order");
            out.push(entry);
        });
        out
    }

    /// Every count of blocks up to two groups and a remainder of 0-3, at every
    /// alignment of a word, with a tail shorter than a block: the same entries as
    /// one at a time, and a zero block's entry is 0.
    #[test]
    fn entries_match_one_at_a_time_for_every_count_and_alignment() {
        let bytes = random_bytes(11 * BLOCK_BYTES + 100, 7);
        for offset in 0..8 {
            for blocks in 0..=10 {
                for tail in [0, 1, 511] {
                    let s = &bytes[offset..offset + blocks * BLOCK_BYTES + tail];
                    assert_eq!(
                        several_at_a_time(s),
                        one_at_a_time(s),
                        "{blocks} blocks at offset {offset}, tail {tail}"
                    );
                }
            }
        }
        assert_eq!(several_at_a_time(&[0u8; 4 * BLOCK_BYTES]), vec![0; 4]);
    }

    /// The kernel itself, also on CPUs where `block_entries` leaves it for crc-fast.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn four_chains_give_crc_fasts_crcs() {
        if !std::arch::is_x86_feature_detected!("sse4.2") {
            return;
        }
        let bytes = random_bytes(4 * BLOCK_BYTES, 11);
        let blocks: Vec<&[u8; BLOCK_BYTES]> =
            bytes.chunks_exact(BLOCK_BYTES).map(x86::block).collect();
        // SAFETY: SSE4.2 is there (checked above).
        let crcs = unsafe { x86::four_crcs([blocks[0], blocks[1], blocks[2], blocks[3]]) };
        for (crc, b) in crcs.iter().zip(&blocks) {
            assert_eq!(*crc, crc32c(&b[..]));
        }
    }

    /// A block's thirds hashed side by side and joined, also on CPUs where
    /// `block_entries` leaves single blocks to crc-fast.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn a_blocks_joined_thirds_give_crc_fasts_crc() {
        if !std::arch::is_x86_feature_detected!("sse4.2") {
            return;
        }
        let mut bytes = random_bytes(8 * BLOCK_BYTES, 5);
        // And blocks with a single bit set at each third's edges.
        let mut edges = Vec::new();
        for at in [0, 1367, 1368, 2735, 2736, 4095] {
            let mut b = vec![0u8; BLOCK_BYTES];
            b[at] = 0x80;
            edges.extend(b);
        }
        bytes.extend(edges);
        for b in bytes.chunks_exact(BLOCK_BYTES) {
            // SAFETY: SSE4.2 is there (checked above).
            let crc = unsafe { x86::one_crc(x86::block(b), x86::joins()) };
            assert_eq!(crc, crc32c(b));
        }
    }

    proptest! {
        /// Random contents, with one bit flipped somewhere: each block's entry
        /// is what crc-fast makes of it, and only the flipped block's changes.
        #[test]
        fn entries_match_crc_fast(seed in any::<u64>(), blocks in 1usize..8, flip in any::<usize>()) {
            let mut bytes = vec![0u8; blocks * BLOCK_BYTES];
            let mut s = seed | 1;
            for b in &mut bytes {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                *b = s as u8;
            }
            let before = several_at_a_time(&bytes);
            prop_assert_eq!(&before, &one_at_a_time(&bytes));
            let bit = flip % (bytes.len() * 8);
            bytes[bit / 8] ^= 1 << (bit % 8);
            let after = several_at_a_time(&bytes);
            prop_assert_eq!(&after, &one_at_a_time(&bytes));
            for (i, (b, a)) in before.iter().zip(&after).enumerate() {
                prop_assert_eq!(b != a, i == bit / 8 / BLOCK_BYTES);
            }
        }
    }
}

//! md's superblock checksum (`calc_sb_1_csum` in the kernel's `md.c` and in mdadm's
//! `super1.c`), reproduced exactly so that md and mdadm accept what xraid writes.

/// Byte offset of `sb_csum` in the superblock.
pub(crate) const SB_CSUM_OFFSET: usize = 216;

/// md's checksum of a superblock image: `bytes` must be the superblock's first
/// `256 + 2 * max_dev` bytes. The `sb_csum` field is counted as zero whatever it holds.
///
/// The sum of little-endian 32-bit words is kept in 64 bits and folded once, and a
/// trailing 16-bit word (odd `max_dev`) is added on its own, exactly as md does.
pub fn sb_checksum(bytes: &[u8]) -> u32 {
    let mut sum: u64 = 0;
    let mut words = bytes.chunks_exact(4);
    for (i, word) in words.by_ref().enumerate() {
        if i * 4 == SB_CSUM_OFFSET {
            continue;
        }
        let mut w = [0u8; 4];
        w.copy_from_slice(word);
        sum += u64::from(u32::from_le_bytes(w));
    }
    let rest = words.remainder();
    if rest.len() >= 2 {
        sum += u64::from(u16::from_le_bytes([rest[0], rest[1]]));
    }
    // md stores the fold in a 32-bit variable, so a carry out of the fold is dropped.
    ((sum & 0xffff_ffff) + (sum >> 32)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csum_field_is_ignored() {
        let mut a = vec![0u8; 512];
        a[0] = 1;
        let before = sb_checksum(&a);
        a[SB_CSUM_OFFSET..SB_CSUM_OFFSET + 4].copy_from_slice(&[0xff; 4]);
        assert_eq!(sb_checksum(&a), before);
        assert_eq!(before, 1);
    }

    #[test]
    fn carries_fold_back_in() {
        // Two words of 0xffffffff sum to 0x1_ffff_fffe, which folds to 0xffff_ffff.
        let a = [0xffu8; 8];
        assert_eq!(sb_checksum(&a), 0xffff_ffff);
        // 0x1_ffff_ffff folds to 0x1_0000_0000, whose carry md drops.
        let b = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1, 0, 0, 0];
        assert_eq!(sb_checksum(&b), 0);
    }

    #[test]
    fn trailing_half_word_counts() {
        let mut a = vec![0u8; 258];
        a[256] = 0x34;
        a[257] = 0x12;
        assert_eq!(sb_checksum(&a), 0x1234);
    }
}

//! What a would-be member holds that is not md's: a partition table, a file system, a
//! volume manager's or an encryption header, found by the signatures blkid and mdadm
//! look for. `create` puts md's superblock at 4 KiB and the array's data after it, so
//! it would write over any of these; it refuses them unless told `--force`, as mdadm
//! asks before it goes on ("appears to contain an ext2fs file system").

use xraid_member::Member;

/// Bytes read from the start of a member: the farthest signatures looked for are
/// ZFS's, in the uberblock array of its first label (128 to 256 KiB).
const PROBE_BYTES: usize = 256 * 1024;

/// Where ZFS's first vdev label keeps its uberblocks, and their least spacing.
const ZFS_UBERBLOCKS: std::ops::Range<usize> = 128 * 1024..256 * 1024;
const ZFS_UBERBLOCK_BYTES: usize = 1024;

/// bcache's and bcachefs's superblock magics, 24 bytes into a superblock at 4 KiB.
const BCACHE_MAGIC: [u8; 16] = [
    0xc6, 0x85, 0x73, 0xf6, 0x4e, 0x1a, 0x45, 0xca, 0x82, 0x65, 0xf5, 0x7f, 0x48, 0xba, 0x6d, 0x81,
];
const BCACHEFS_MAGIC: [u8; 16] = [
    0xc6, 0x85, 0x73, 0xf6, 0x66, 0xce, 0x90, 0xa9, 0xd9, 0x6a, 0x60, 0xcf, 0x80, 0x3d, 0xf7, 0xef,
];

/// What `member` holds, in words ("an ext2/3/4 file system"), if a signature says.
pub(crate) fn foreign_content(member: &dyn Member) -> Option<&'static str> {
    let len = usize::try_from(member.size_bytes()).map_or(PROBE_BYTES, |n| n.min(PROBE_BYTES));
    let mut head = vec![0u8; len];
    member.read_at(&mut head, 0).ok()?;
    identify(&head)
}

/// The signature `head` (a member's first bytes) starts with, if any.
fn identify(head: &[u8]) -> Option<&'static str> {
    let at = |offset: usize, magic: &[u8]| {
        head.get(offset..offset + magic.len())
            .is_some_and(|b| b == magic)
    };
    // First what sits at fixed places of its own, then the MBR, whose 0x55AA a FAT or
    // NTFS boot sector carries too.
    let found = [
        (
            at(512, b"EFI PART") || at(4096, b"EFI PART"),
            "a GPT partition table",
        ),
        (ext_superblock(head), "an ext2/3/4 file system"),
        (at(0, b"XFSB"), "an XFS file system"),
        (at(65536 + 64, b"_BHRfS_M"), "a btrfs file system"),
        (zfs_label(head), "a ZFS pool member"),
        (at(4096 + 24, &BCACHE_MAGIC), "a bcache device"),
        (at(4096 + 24, &BCACHEFS_MAGIC), "a bcachefs file system"),
        (
            at(1024, &0xf2f5_2010u32.to_le_bytes()),
            "an F2FS file system",
        ),
        (
            [b"ReIsErFs" as &[u8], b"ReIsEr2Fs", b"ReIsEr3Fs"]
                .iter()
                .any(|magic| at(65536 + 52, magic) || at(8192 + 52, magic))
                || at(65536, b"ReIsEr4"),
            "a ReiserFS file system",
        ),
        (at(32768, b"\x01CD001\x01"), "an ISO 9660 file system"),
        (at(0, b"dmvdo001"), "a VDO volume"),
        (at(0, b"LUKS\xba\xbe"), "a LUKS encryption header"),
        (
            (0..4).any(|s| at(s * 512, b"LABELONE") && at(s * 512 + 24, b"LVM2 001")),
            "an LVM physical volume",
        ),
        (
            at(4096 - 10, b"SWAPSPACE2") || at(4096 - 10, b"SWAP-SPACE"),
            "a swap area",
        ),
        (at(3, b"NTFS    "), "an NTFS file system"),
        (
            at(82, b"FAT32   ") || at(54, b"FAT16   ") || at(54, b"FAT12   "),
            "a FAT file system",
        ),
        (mbr_partitions(head), "a DOS (MBR) partition table"),
    ];
    found
        .into_iter()
        .find_map(|(present, what)| present.then_some(what))
}

/// Whether `head` holds an ext2/3/4 superblock at 1 KiB: the magic, and fields no
/// file system leaves out of range (inode and block counts, a block size of 1 to 64
/// KiB, revision 0 or 1), so that two random bytes matching the magic are not one.
fn ext_superblock(head: &[u8]) -> bool {
    let u32_at = |offset: usize| {
        head.get(1024 + offset..1024 + offset + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    head.get(1024 + 56..1024 + 58) == Some(&[0x53, 0xef][..])
        && [0, 4, 32, 40]
            .into_iter()
            .all(|field| u32_at(field).is_some_and(|v| v > 0))
        && u32_at(24).is_some_and(|log| log <= 6)
        && u32_at(76).is_some_and(|rev| rev <= 1)
}

/// Whether `head` holds the first label of a ZFS vdev: an uberblock (its magic,
/// either byte order, and a pool version ZFS has used: 1 to 28, or 5000 since
/// feature flags) on a 1 KiB boundary of the label's uberblock array. A new pool
/// leaves the first slots empty, so every slot is looked at, as blkid does.
fn zfs_label(head: &[u8]) -> bool {
    const MAGIC: u64 = 0x00ba_b10c;
    let Some(array) = head.get(ZFS_UBERBLOCKS) else {
        return false;
    };
    array.chunks_exact(ZFS_UBERBLOCK_BYTES).any(|ub| {
        let word = |at: usize| -> [u8; 8] { ub[at..at + 8].try_into().expect("8 bytes") };
        [u64::from_le_bytes, u64::from_be_bytes]
            .into_iter()
            .any(|read| {
                let version = read(word(8));
                read(word(0)) == MAGIC && ((1..=28).contains(&version) || version == 5000)
            })
    })
}

/// Whether `head` starts with an MBR that lists a partition: the boot signature, and
/// an entry with a type, a start, a size and a boot flag of 0 or 0x80 (random bytes
/// rarely pass; a blank disk never does).
fn mbr_partitions(head: &[u8]) -> bool {
    if head.get(510..512) != Some(&[0x55, 0xaa][..]) {
        return false;
    }
    let mut entries = head[446..510].chunks_exact(16);
    let mut any = false;
    for entry in entries.by_ref() {
        let boot = entry[0];
        let kind = entry[4];
        let start = u32::from_le_bytes([entry[8], entry[9], entry[10], entry[11]]);
        let sectors = u32::from_le_bytes([entry[12], entry[13], entry[14], entry[15]]);
        if boot != 0 && boot != 0x80 {
            return false;
        }
        if kind != 0 {
            if start == 0 || sectors == 0 {
                return false;
            }
            any = true;
        }
    }
    any
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(offset: usize, magic: &[u8]) -> Vec<u8> {
        let mut head = vec![0u8; PROBE_BYTES];
        head[offset..offset + magic.len()].copy_from_slice(magic);
        head
    }

    #[test]
    fn each_signature_is_named_and_a_blank_or_random_head_is_not() {
        assert_eq!(identify(&vec![0u8; PROBE_BYTES]), None);
        let cases: [(usize, &[u8], &str); 7] = [
            (512, b"EFI PART", "GPT"),
            (0, b"XFSB", "XFS"),
            (65600, b"_BHRfS_M", "btrfs"),
            (0, b"LUKS\xba\xbe", "LUKS"),
            (4086, b"SWAPSPACE2", "swap"),
            (3, b"NTFS    ", "NTFS"),
            (82, b"FAT32   ", "FAT"),
        ];
        for (offset, magic, says) in cases {
            let what = identify(&with(offset, magic)).unwrap_or("nothing");
            assert!(what.contains(says), "{says} at {offset}: {what}");
        }
        // ext: the magic alone is two bytes random data matches once in 65,536.
        let mut ext = with(1080, &[0x53, 0xef]);
        assert_eq!(identify(&ext), None, "the magic alone");
        for (field, value) in [(0, 2048u32), (4, 8192), (32, 8192), (40, 2048), (24, 2)] {
            ext[1024 + field..1024 + field + 4].copy_from_slice(&value.to_le_bytes());
        }
        ext[1024 + 76..1024 + 80].copy_from_slice(&1u32.to_le_bytes());
        assert_eq!(identify(&ext), Some("an ext2/3/4 file system"));
        ext[1024 + 24..1024 + 28].copy_from_slice(&40u32.to_le_bytes());
        assert_eq!(identify(&ext), None, "a block size of 2^50");
        let more: [(usize, &[u8], &str); 7] = [
            (4096 + 24, &BCACHE_MAGIC, "bcache device"),
            (4096 + 24, &BCACHEFS_MAGIC, "bcachefs"),
            (1024, &[0x10, 0x20, 0xf5, 0xf2], "F2FS"),
            (65536 + 52, b"ReIsEr2Fs", "ReiserFS"),
            (8192 + 52, b"ReIsErFs", "ReiserFS"),
            (32768, b"\x01CD001\x01", "ISO 9660"),
            (0, b"dmvdo001", "VDO"),
        ];
        for (offset, magic, says) in more {
            let what = identify(&with(offset, magic)).unwrap_or("nothing");
            assert!(what.contains(says), "{says} at {offset}: {what}");
        }
        // ZFS: an uberblock in any slot of the first label's array, either byte order,
        // with a pool version ZFS has used.
        let mut zfs = vec![0u8; PROBE_BYTES];
        let slot = ZFS_UBERBLOCKS.start + 37 * ZFS_UBERBLOCK_BYTES;
        zfs[slot..slot + 8].copy_from_slice(&0x00ba_b10cu64.to_be_bytes());
        assert_eq!(identify(&zfs), None, "the magic with version 0");
        zfs[slot + 8..slot + 16].copy_from_slice(&5000u64.to_be_bytes());
        assert_eq!(identify(&zfs), Some("a ZFS pool member"));
        zfs[slot..slot + 16].fill(0);
        zfs[ZFS_UBERBLOCKS.start..ZFS_UBERBLOCKS.start + 8]
            .copy_from_slice(&0x00ba_b10cu64.to_le_bytes());
        zfs[ZFS_UBERBLOCKS.start + 8..ZFS_UBERBLOCKS.start + 16]
            .copy_from_slice(&28u64.to_le_bytes());
        assert_eq!(identify(&zfs), Some("a ZFS pool member"));
        assert_eq!(
            identify(&zfs[..200 * 1024]),
            None,
            "a member too short to hold it"
        );
        let mut lvm = with(512, b"LABELONE");
        lvm[536..544].copy_from_slice(b"LVM2 001");
        assert_eq!(identify(&lvm), Some("an LVM physical volume"));
        // A short member (smaller than the probe) is read as far as it goes.
        assert_eq!(identify(&[0u8; 100]), None);
        // Random heads: no signature (a fixed seed, many heads).
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..200 {
            let head: Vec<u8> = (0..PROBE_BYTES)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            assert_eq!(identify(&head), None);
        }
    }

    #[test]
    fn an_mbr_counts_only_with_a_listed_partition() {
        let mut head = with(510, &[0x55, 0xaa]);
        assert!(!mbr_partitions(&head), "a boot signature alone");
        head[446 + 4] = 0x83;
        head[446 + 8..446 + 12].copy_from_slice(&2048u32.to_le_bytes());
        head[446 + 12..446 + 16].copy_from_slice(&4096u32.to_le_bytes());
        assert_eq!(identify(&head), Some("a DOS (MBR) partition table"));
        head[446] = 0x17;
        assert!(!mbr_partitions(&head), "a boot flag neither 0 nor 0x80");
    }
}

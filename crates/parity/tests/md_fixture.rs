//! P and Q of a RAID-6 written by Linux md (fixture `raid6-5d-64k`: 5 members,
//! left-symmetric, 64 KiB chunks, data 1 MiB into each member) must be what `pq_gen`
//! computes from the stripe's data chunks, for every kernel.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use xraid_parity::Kernel;

const CHUNK: usize = 64 * 1024;
const DATA_OFFSET: usize = 1 << 20;
const DISKS: usize = 5;
const STRIPES: usize = 12;

/// The first `bytes` bytes of a decompressed member, or `None` (with a message) when
/// `xz` or the file is missing.
fn read_member(dir: &Path, i: usize, bytes: usize) -> Option<Vec<u8>> {
    let path = dir.join(format!("member{i}.img.xz"));
    if !path.exists() {
        eprintln!("skipping: {} not found", path.display());
        return None;
    }
    let mut child = match Command::new("xz")
        .arg("-dc")
        .arg(&path)
        .stdout(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("skipping: cannot run xz: {e}");
            return None;
        }
    };
    let mut out = vec![0u8; bytes];
    child
        .stdout
        .take()
        .expect("piped")
        .read_exact(&mut out)
        .expect("member shorter than expected");
    // We stop reading early; xz then dies of SIGPIPE, which is fine.
    let _ = child.kill();
    let _ = child.wait();
    Some(out)
}

#[test]
fn md_raid6_pq_matches() {
    let dir =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures/md/raid6-5d-64k");
    let need = DATA_OFFSET + STRIPES * CHUNK;
    let mut members = Vec::new();
    for i in 0..DISKS {
        match read_member(&dir, i, need) {
            Some(m) => members.push(m),
            None => return,
        }
    }
    let chunk = |disk: usize, s: usize| {
        &members[disk][DATA_OFFSET + s * CHUNK..DATA_OFFSET + (s + 1) * CHUNK]
    };
    let mut nonzero = 0;
    for s in 0..STRIPES {
        let p_disk = DISKS - 1 - s % DISKS;
        let q_disk = (p_disk + 1) % DISKS;
        // Syndrome slot i is the i-th data disk after Q.
        let data: Vec<&[u8]> = (0..DISKS - 2)
            .map(|i| chunk((p_disk + 2 + i) % DISKS, s))
            .collect();
        nonzero += data.iter().filter(|d| d.iter().any(|&b| b != 0)).count();
        for k in Kernel::available() {
            let mut p = vec![0u8; CHUNK];
            let mut q = vec![0u8; CHUNK];
            k.pq_gen(&data, &mut p, &mut q);
            assert!(
                p == chunk(p_disk, s),
                "stripe {s}: P differs ({})",
                k.name()
            );
            assert!(
                q == chunk(q_disk, s),
                "stripe {s}: Q differs ({})",
                k.name()
            );

            // And rebuilding two data chunks from md's P and Q gives md's data back.
            let mut blocks: Vec<Vec<u8>> = data.iter().map(|d| d.to_vec()).collect();
            blocks.push(p);
            blocks.push(q);
            blocks[0].fill(0);
            blocks[2].fill(0xee);
            let mut b: Vec<&mut [u8]> = blocks.iter_mut().map(|v| v.as_mut_slice()).collect();
            k.recover(&mut b, 3, true, &[0, 2]).expect("recover");
            assert!(
                blocks[0] == data[0] && blocks[2] == data[2],
                "stripe {s}: recovery ({})",
                k.name()
            );
        }
    }
    assert!(
        nonzero > STRIPES,
        "fixture data is mostly zero; the check would prove little"
    );
}

//! Throughput of xraid's parity kernels, in the CSV format of
//! `bench/parity/isal_bench.c` so `bench/parity/run.sh` can set them side by side:
//! `impl,kernel,op,n,chunk_bytes,gib_per_s` where GiB/s counts the data blocks
//! processed (n * chunk per call).
//!
//! Usage: `parity [N CHUNK [SECONDS]]`; with no arguments runs n = 4, 8, 16 and
//! chunk = 64 KiB, 256 KiB, 1 MiB. Only std::time, no harness.

use std::hint::black_box;
use std::time::{Duration, Instant};
use xraid_parity::Kernel;

/// Runs `f` until `secs` have passed (after one warm-up call) and returns calls per second.
fn rate(secs: f64, mut f: impl FnMut()) -> f64 {
    f();
    let limit = Duration::from_secs_f64(secs);
    let start = Instant::now();
    let mut calls = 0u64;
    loop {
        f();
        calls += 1;
        let el = start.elapsed();
        if el >= limit {
            return calls as f64 / el.as_secs_f64();
        }
    }
}

/// Deterministic non-trivial contents (xorshift), so no kernel sees all-zero input.
fn fill(buf: &mut [u8], mut seed: u64) {
    for b in buf.iter_mut() {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        *b = seed as u8;
    }
}

/// A 64-byte-aligned buffer, as the C driver's `posix_memalign` and the engine's
/// 4 KiB-aligned buffers give: unaligned 64-byte vectors would split cache lines and
/// measure the allocator rather than the kernel.
struct Aligned {
    raw: Vec<u8>,
    off: usize,
    len: usize,
}

impl Aligned {
    fn new(len: usize) -> Aligned {
        let raw = vec![0u8; len + 64];
        let off = raw.as_ptr().align_offset(64);
        Aligned { raw, off, len }
    }
    fn as_slice(&self) -> &[u8] {
        &self.raw[self.off..self.off + self.len]
    }
    fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.raw[self.off..self.off + self.len]
    }
}

fn run(n: usize, chunk: usize, secs: f64) {
    let mut data: Vec<Aligned> = (0..n)
        .map(|k| {
            let mut v = Aligned::new(chunk);
            fill(v.as_mut_slice(), 0x9e37_79b9_7f4a_7c15 ^ k as u64);
            v
        })
        .collect();
    let mut pbuf = Aligned::new(chunk);
    let mut qbuf = Aligned::new(chunk);
    let (p, q) = (pbuf.as_mut_slice(), qbuf.as_mut_slice());
    let gib = (n * chunk) as f64 / (1u64 << 30) as f64;
    for k in Kernel::available() {
        let refs: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
        let r = rate(secs, || k.xor_gen(black_box(&refs), black_box(&mut *p)));
        println!("xraid,{},xor_gen,{n},{chunk},{:.3}", k.name(), r * gib);
        let r = rate(secs, || {
            k.pq_gen(black_box(&refs), black_box(&mut *p), black_box(&mut *q))
        });
        println!("xraid,{},pq_gen,{n},{chunk},{:.3}", k.name(), r * gib);
        drop(refs);
        if n >= 2 {
            // Two data erasures (slots 0 and n/2), the costliest RAID-6 rebuild. The
            // kernel ignores the missing blocks' contents, so rebuilding in place
            // repeatedly measures the same work every time.
            let (x, y) = (0, n / 2);
            k.pq_gen(&data.iter().map(|d| d.as_slice()).collect::<Vec<_>>(), p, q);
            let r = rate(secs, || {
                let mut blocks: Vec<&mut [u8]> =
                    data.iter_mut().map(|d| d.as_mut_slice()).collect();
                blocks.push(&mut *p);
                blocks.push(&mut *q);
                k.recover(black_box(&mut blocks), n, true, &[x, y])
                    .expect("recover");
            });
            println!("xraid,{},recov_2data,{n},{chunk},{:.3}", k.name(), r * gib);
        }
    }
}

fn main() {
    // Ignore flags cargo passes to harness-less benches (e.g. `--bench`).
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let secs = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(0.5);
    if let (Some(n), Some(c)) = (args.first(), args.get(1)) {
        run(n.parse().expect("N"), c.parse().expect("CHUNK"), secs);
        return;
    }
    for n in [4, 8, 16] {
        for chunk in [64 << 10, 256 << 10, 1 << 20] {
            run(n, chunk, secs);
        }
    }
}

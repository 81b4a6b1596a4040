//! Integrity entries of 4 KiB blocks per second, one block at a time through
//! crc-fast (`block_entry`, what the engine did before) against four at a time
//! (`block_entries`) and against `block_entries` given one block per call (a 4 KiB
//! request's), in the same run: `cargo bench -p xraid-format --bench
//! block_crc [MIB [SECONDS]]` (1 MiB of blocks, 3 s each, by default). Prints
//! `way,mib,gb_per_s` rows and the ratio. Only std::time, no harness.

use std::hint::black_box;
use std::time::{Duration, Instant};

use xraid_format::{block_entries, block_entry, BLOCK_BYTES};

/// Bytes per second of `f` over `bytes`, run until `secs` have passed.
fn rate(bytes: usize, secs: f64, mut f: impl FnMut()) -> f64 {
    f();
    let limit = Duration::from_secs_f64(secs);
    let start = Instant::now();
    let mut calls = 0u64;
    loop {
        f();
        calls += 1;
        let elapsed = start.elapsed();
        if elapsed >= limit {
            return calls as f64 * bytes as f64 / elapsed.as_secs_f64();
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let mib: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(1);
    let secs: f64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(3.0);
    let mut data = vec![0u8; mib << 20];
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for b in &mut data {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        *b = seed as u8;
    }
    let one = rate(data.len(), secs, || {
        for block in data.chunks_exact(BLOCK_BYTES) {
            black_box(block_entry(black_box(block)));
        }
    });
    let four = rate(data.len(), secs, || {
        block_entries(black_box(&data), |i, entry| {
            black_box((i, entry));
        });
    });
    let alone = rate(data.len(), secs, || {
        for block in data.chunks_exact(BLOCK_BYTES) {
            block_entries(black_box(block), |i, entry| {
                black_box((i, entry));
            });
        }
    });
    println!("way,mib,gb_per_s");
    println!("one_at_a_time,{mib},{:.2}", one / 1e9);
    println!("four_at_a_time,{mib},{:.2}", four / 1e9);
    println!("each_block_alone,{mib},{:.2}", alone / 1e9);
    println!("# four at a time / one at a time: {:.2}x", four / one);
    println!("# each block alone / one at a time: {:.2}x", alone / one);
}

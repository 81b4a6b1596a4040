//! Array reads of 1 MiB over in-memory members against single-core memcpy of the same
//! size. Run with `cargo bench -p xraid-engine --bench array_read`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use xraid_engine::sim::SimArray;
use xraid_layout::{Geometry, Layout, Level};

const REQUEST_BYTES: usize = 1 << 20;
const RUN_TIME: Duration = Duration::from_millis(700);

fn gib_per_s(bytes: u64, elapsed: Duration) -> f64 {
    bytes as f64 / elapsed.as_secs_f64() / f64::from(1u32 << 30)
}

fn memcpy_rate(src: &[u8]) -> f64 {
    let mut dst = vec![0u8; REQUEST_BYTES];
    let mut bytes = 0u64;
    let mut at = 0usize;
    let start = Instant::now();
    while start.elapsed() < RUN_TIME {
        for _ in 0..16 {
            dst.copy_from_slice(&src[at..at + REQUEST_BYTES]);
            black_box(&mut dst);
            at = (at + REQUEST_BYTES) % (src.len() - REQUEST_BYTES);
            bytes += REQUEST_BYTES as u64;
        }
    }
    gib_per_s(bytes, start.elapsed())
}

fn array_rate(level: Level, disks: u16) -> f64 {
    let member_sectors = 64 * 1024 * 2; // 64 MiB per member
    let geo = Geometry::new(
        level,
        Layout::default_for(level),
        disks,
        128,
        member_sectors,
    )
    .expect("valid geometry");
    let mut array = SimArray::new(geo, 1);
    array.shuffle = false;
    let requests = geo.array_sectors() / (REQUEST_BYTES as u64 / 512);
    let mut bytes = 0u64;
    let mut n = 0u64;
    let start = Instant::now();
    while start.elapsed() < RUN_TIME {
        for _ in 0..16 {
            let sector = (n % requests) * (REQUEST_BYTES as u64 / 512);
            let (_, buf) = array.start_read(sector, REQUEST_BYTES as u64 / 512);
            array.run();
            black_box(array.engine.buffers().get(buf));
            array.engine.buffers_mut().free(buf);
            bytes += REQUEST_BYTES as u64;
            n += 1;
        }
    }
    gib_per_s(bytes, start.elapsed())
}

fn main() {
    let src = vec![0x5au8; 256 << 20];
    println!("workload,gib_per_s,ratio_to_memcpy");
    for round in 0..3 {
        let copy = memcpy_rate(&src);
        println!("memcpy-1MiB-run{round},{copy:.2},1.00");
        for (name, level, disks) in [
            ("raid5-4d", Level::Raid5, 4),
            ("raid6-6d", Level::Raid6, 6),
            ("raid0-4d", Level::Raid0, 4),
            ("raid10-4d", Level::Raid10, 4),
        ] {
            let rate = array_rate(level, disks);
            println!("{name}-1MiB-run{round},{rate:.2},{:.2}", rate / copy);
        }
    }
}

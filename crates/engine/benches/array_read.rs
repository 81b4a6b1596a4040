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

fn array_rate(level: Level, disks: u16, degraded: bool) -> f64 {
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
    // Fill the array through the engine so every member page is real memory: untouched
    // members would read from the kernel's shared zero page and flatter the engine.
    let mut chunk = vec![0u8; 16 << 20];
    let fill_sectors = chunk.len() as u64 / 512;
    let mut at = 0;
    while at < geo.array_sectors() {
        let sectors = fill_sectors.min(geo.array_sectors() - at);
        array.rng().fill(&mut chunk);
        array
            .write(at, &chunk[..sectors as usize * 512])
            .expect("fill the array");
        at += sectors;
    }
    if degraded {
        array.kill_member(xraid_engine::MemberIdx(0));
    }
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
    // Random bytes, so the source is real memory (not the zero page) and larger than
    // any cache, like the members.
    let mut src = vec![0u8; 256 << 20];
    xraid_engine::sim::SimRng::new(7).fill(&mut src);
    println!("workload,gib_per_s,ratio_to_memcpy");
    for round in 0..3 {
        let copy = memcpy_rate(&src);
        println!("memcpy-1MiB-run{round},{copy:.2},1.00");
        for (name, level, disks, degraded) in [
            ("raid5-4d", Level::Raid5, 4, false),
            ("raid6-6d", Level::Raid6, 6, false),
            ("raid0-4d", Level::Raid0, 4, false),
            ("raid10-4d", Level::Raid10, 4, false),
            ("raid5-4d-degraded", Level::Raid5, 4, true),
        ] {
            let rate = array_rate(level, disks, degraded);
            println!("{name}-1MiB-run{round},{rate:.2},{:.2}", rate / copy);
        }
    }
}

//! The physics a disk model must get right (issue 5's "done when"), each checked against
//! a figure computed from the parameters by hand, not by the model's own functions.

use crate::{
    Dir, Disk, DiskModel, DiskOp, DiskParams, DiskRequest, HeadPos, Nanos, Rng, Scheduler, Zone,
};

/// A late-1990s 7200 rpm drive, single zone unless a test adds zones. 200 sectors per
/// track is a multiple of 8, so aligned 4 KiB reads never cross a track.
fn params() -> DiskParams {
    DiskParams {
        rpm: 7200,
        heads: 4,
        zones: vec![Zone {
            cylinders: 2000,
            sectors_per_track: 200,
        }],
        spare_sectors_per_track: 0,
        seek_track_to_track: Nanos(1_000_000),
        seek_average: Nanos(8_000_000),
        seek_full_stroke: Nanos(16_000_000),
        write_settle_extra: Nanos(0),
        head_switch: Nanos(800_000),
        cylinder_switch: None,
        head_skew_sectors: None,
        cylinder_skew_sectors: None,
        command_overhead: Nanos(200_000),
        interface_bytes_per_sec: 40_000_000,
        buffer_bytes: 1 << 20,
        cache_segments: 4,
        read_ahead_sectors: 0,
        write_back: false,
        queue_depth: 1,
        scheduler: Scheduler::Fifo,
        zero_latency: false,
    }
}

fn rev_ns(rpm: u32) -> f64 {
    60e9 / f64::from(rpm)
}

/// Runs one command on an idle disk at `t`; returns its service time.
fn one(disk: &mut Disk, op: DiskOp, lba: u64, sectors: u64, t: Nanos) -> u64 {
    disk.submit(
        DiskRequest {
            tag: 0,
            op,
            lba,
            sectors,
        },
        t,
    );
    loop {
        if let Some(c) = disk.poll_done() {
            return c.at.0 - t.0;
        }
        let Some(next) = disk.poll_timeout() else {
            panic!("disk stalled with a command outstanding");
        };
        disk.handle_timeout(next);
    }
}

fn build(p: &DiskParams) -> Disk {
    Disk::new(p.build().unwrap_or_else(|e| panic!("{e}")))
}

#[test]
fn average_rotational_latency_is_30000_over_rpm_ms() {
    for rpm in [3600, 5400, 7200, 10_025, 15_000] {
        let p = DiskParams { rpm, ..params() };
        let model = p.build().unwrap_or_else(|e| panic!("{e}"));
        let mut rng = Rng::new(u64::from(rpm));
        let n = 100_000;
        let mut sum = 0u64;
        for _ in 0..n {
            let t = Nanos(rng.below(1_000_000_000_000));
            sum += model.mech.wait_for_slot(t, 17, 200).0;
        }
        let mean_ms = sum as f64 / f64::from(n) / 1e6;
        let expect_ms = 30_000.0 / f64::from(rpm);
        assert!(
            (mean_ms - expect_ms).abs() / expect_ms < 0.01,
            "{rpm} rpm: {mean_ms} ms against {expect_ms} ms"
        );
    }
}

#[test]
fn full_track_read_costs_one_revolution_plus_overhead() {
    let p = DiskParams {
        zero_latency: true,
        ..params()
    };
    let mut rng = Rng::new(1);
    let rev = rev_ns(p.rpm);
    let slot = rev / 200.0;
    let bus = 200.0 * 512.0 / 40e6 * 1e9;
    let fixed = p.command_overhead.0 as f64 + bus;
    let mut t = Nanos(0);
    for _ in 0..1000 {
        t = Nanos(t.0 + 20_000_000 + rng.below(1_000_000_000));
        // A fresh drive each time (nothing in its buffer), its arm on the track
        // already (cylinder 0, head 0): no seek, no switch.
        let mut disk = build(&p);
        let took = one(&mut disk, DiskOp::Read, 0, 200, t) as f64;
        t = Nanos(t.0 + took as u64);
        // Read-on-arrival: one revolution from the next sector boundary.
        assert!(took >= fixed + rev - 2.0, "{took} < {}", fixed + rev);
        assert!(
            took <= fixed + rev + slot + 2.0,
            "{took} > {}",
            fixed + rev + slot
        );
    }
    // Without it, the rotational wait comes first: on average half a revolution.
    let p = params();
    let mut sum = 0.0;
    for _ in 0..4000 {
        t = Nanos(t.0 + 20_000_000 + rng.below(1_000_000_000));
        let mut disk = build(&p);
        let took = one(&mut disk, DiskOp::Read, 0, 200, t);
        t = Nanos(t.0 + took);
        sum += took as f64;
    }
    let mean = sum / 4000.0;
    let expect = fixed + 1.5 * rev;
    assert!(
        (mean - expect).abs() / expect < 0.02,
        "{mean} against {expect}"
    );
}

#[test]
fn a_cylinder_costs_its_revolutions_plus_head_switches() {
    let p = params();
    let model = p.build().unwrap_or_else(|e| panic!("{e}"));
    let rev = rev_ns(p.rpm);
    let slot = rev / 200.0;
    // The formatter's skew: the fewest whole sectors covering the 0.8 ms head switch.
    let skew_sectors = (0.8e6 / slot).ceil();
    let switch = skew_sectors * slot;
    assert!(switch >= 0.8e6 && switch - 0.8e6 < slot);
    // At t = 0 sector 0 of cylinder 0 is under head 0: no latency before the transfer.
    let mut head = HeadPos::default();
    let took = model
        .mech
        .transfer(&mut head, Dir::Read, 0, 4 * 200, Nanos(0))
        .0 as f64;
    let expect = 4.0 * rev + 3.0 * switch;
    assert!((took - expect).abs() < 8.0, "{took} against {expect}");
    assert_eq!(
        head,
        HeadPos {
            cylinder: 0,
            head: 3
        }
    );

    // With no skew, every head switch misses the next track's first sector and costs a
    // whole revolution.
    let p = DiskParams {
        head_skew_sectors: Some(0),
        ..params()
    };
    let model = p.build().unwrap_or_else(|e| panic!("{e}"));
    let mut head = HeadPos::default();
    let took = model
        .mech
        .transfer(&mut head, Dir::Read, 0, 4 * 200, Nanos(0))
        .0 as f64;
    let expect = 7.0 * rev;
    assert!((took - expect).abs() < 8.0, "{took} against {expect}");
}

#[test]
fn sustained_sequential_rate_is_the_zone_rate_less_switches_and_skews() {
    let p = DiskParams {
        zones: vec![
            Zone {
                cylinders: 300,
                sectors_per_track: 240,
            },
            Zone {
                cylinders: 300,
                sectors_per_track: 160,
            },
        ],
        spare_sectors_per_track: 4,
        ..params()
    };
    let model = p.build().unwrap_or_else(|e| panic!("{e}"));
    let rev = rev_ns(p.rpm);
    let heads = 4.0;
    for z in model.mech.format.zones() {
        let spt = f64::from(z.sectors_per_track);
        let slot = rev / f64::from(z.slots);
        let ideal = spt * 512.0 * f64::from(p.rpm) / 60.0;
        // The formatter's skews: the 4 spares pass during a switch, so the skew need
        // only cover the rest of it.
        let hs = ((0.8e6 / slot).ceil() - 4.0) * slot;
        let cs = ((1.0e6 / slot).ceil() - 4.0) * slot;
        // Each track takes a turn (its spares included) and then the switch's skew.
        let per_cyl = heads * rev + (heads - 1.0) * hs + cs;
        let expect = ideal * heads * rev / per_cyl;
        // Read the zone's first 100 cylinders, starting as its first sector arrives.
        let sectors = 100 * 4 * u64::from(z.sectors_per_track);
        let from = HeadPos {
            cylinder: z.first_cylinder,
            head: 0,
        };
        let t0 = model.mech.arrival(from, Dir::Read, z.first_lba, Nanos(0));
        let mut head = from;
        let end = model
            .mech
            .transfer(&mut head, Dir::Read, z.first_lba, sectors, t0);
        let rate = (sectors * 512) as f64 / ((end.0 - t0.0) as f64 / 1e9);
        assert!(rate < ideal);
        assert!(
            (rate - expect).abs() / expect < 0.005,
            "zone rate {rate} against {expect} (ideal {ideal})"
        );
    }
}

/// Serves `n` commands from `next` on `disk`, keeping `depth` outstanding; returns the
/// mean service time (submit to completion) and the simulated span.
fn closed_loop(
    disk: &mut Disk,
    depth: usize,
    n: usize,
    mut next: impl FnMut(&mut Rng) -> (DiskOp, u64, u64, u64),
    seed: u64,
) -> (f64, Nanos) {
    let mut rng = Rng::new(seed);
    let mut now = Nanos(0);
    let mut started = Vec::new();
    let (mut issued, mut finished, mut total) = (0usize, 0usize, 0u64);
    while finished < n {
        while issued < n && issued - finished < depth {
            let (op, lba, sectors, gap) = next(&mut rng);
            now = Nanos(now.0 + gap);
            started.push(now);
            disk.submit(
                DiskRequest {
                    tag: issued as u64,
                    op,
                    lba,
                    sectors,
                },
                now,
            );
            issued += 1;
        }
        if let Some(c) = disk.poll_done() {
            total += c.at.0 - started[c.tag as usize].0;
            finished += 1;
            continue;
        }
        let Some(t) = disk.poll_timeout() else {
            panic!("disk stalled");
        };
        now = now.max(t);
        disk.handle_timeout(now);
    }
    (total as f64 / n as f64, now)
}

#[test]
fn random_4k_read_is_seek_plus_half_turn_plus_transfer_plus_overhead() {
    let p = params();
    let mut disk = build(&p);
    let sectors = disk.model().sectors();
    let (mean, _) = closed_loop(
        &mut disk,
        1,
        20_000,
        |rng| {
            let lba = rng.below(sectors / 8) * 8;
            // An idle gap of up to 20 ms so arrivals fall at random angles.
            (DiskOp::Read, lba, 8, rng.below(20_000_000))
        },
        9,
    );
    let rev = rev_ns(p.rpm);
    let cylinders = 2000.0;
    // A random pair of cylinders is the same one with probability 1/C: no seek.
    let seek = 8e6 * (1.0 - 1.0 / cylinders);
    let transfer = 8.0 * rev / 200.0;
    let bus = 4096.0 / 40e6 * 1e9;
    let expect = 200e3 + seek + rev / 2.0 + transfer + bus;
    assert!(
        (mean - expect).abs() / expect < 0.02,
        "mean {mean} ns against {expect} ns"
    );
}

#[test]
fn sptf_beats_fifo_on_a_deep_random_queue() {
    let run = |scheduler| {
        let p = DiskParams {
            queue_depth: 16,
            scheduler,
            ..params()
        };
        let mut disk = build(&p);
        let sectors = disk.model().sectors();
        closed_loop(
            &mut disk,
            16,
            5000,
            |rng| (DiskOp::Read, rng.below(sectors / 8) * 8, 8, 0),
            3,
        )
        .1
    };
    let fifo = run(Scheduler::Fifo);
    let sptf = run(Scheduler::Sptf);
    // Positioning-aware choice cuts both seek and rotation: well over a third.
    assert!(sptf.0 * 3 < fifo.0 * 2, "sptf {sptf:?} fifo {fifo:?}");
}

#[test]
fn read_ahead_keeps_sequential_reads_at_the_media_rate() {
    let rate = |read_ahead_sectors| {
        let p = DiskParams {
            read_ahead_sectors,
            ..params()
        };
        let mut disk = build(&p);
        let mut lba = 0;
        let n = 2000;
        let (_, span) = closed_loop(
            &mut disk,
            1,
            n,
            |_| {
                let r = (DiskOp::Read, lba, 128, 0);
                lba += 128;
                r
            },
            1,
        );
        let stats = disk.stats();
        let rate = (n as u64 * 128 * 512) as f64 / (span.0 as f64 / 1e9);
        (rate, stats.buffer_hits + stats.stream_hits)
    };
    let ideal = 200.0 * 512.0 * 7200.0 / 60.0;
    let (without, hits) = rate(0);
    assert_eq!(hits, 0);
    let (with, hits) = rate(512);
    eprintln!(
        "sequential 64 KiB reads: {without} B/s without read-ahead, {with} B/s with, of {ideal}"
    );
    assert!(hits > 1900, "{hits} read-ahead hits");
    // Without read-ahead each command's overhead and bus time let the next sectors
    // pass: a revolution is lost per command.
    assert!(without < 0.5 * ideal, "{without}");
    // With it only the switches and skews are lost (as in the test above): per
    // cylinder 4 turns, 3 head skews of 20 sectors (0.8 ms over 41.7 us sectors,
    // rounded up) and a cylinder skew of 24 (1 ms).
    let slot = rev_ns(7200) / 200.0;
    let per_cyl = 4.0 * rev_ns(7200) + (3.0 * 20.0 + 24.0) * slot;
    let expect = ideal * 4.0 * rev_ns(7200) / per_cyl;
    assert!(
        (with - expect).abs() / expect < 0.01,
        "{with} against {expect}"
    );
}

#[test]
fn write_back_acknowledges_from_the_buffer_and_flush_waits_for_the_media() {
    let p = DiskParams {
        write_back: true,
        ..params()
    };
    let mut disk = build(&p);
    let lba = 1_000 * 800;
    let took = one(&mut disk, DiskOp::Write, lba, 8, Nanos(0));
    let bus = (4096.0f64 / 40e6 * 1e9).ceil() as u64;
    assert_eq!(took, p.command_overhead.0 + bus);
    // The flush must wait for the seek to cylinder 1000 and the write.
    let flush = one(&mut disk, DiskOp::Flush, 0, 0, Nanos(took));
    assert!(flush > 5_000_000, "flush took {flush} ns");
    // Write-through: the same write takes the seek itself.
    let mut disk = build(&params());
    let took = one(&mut disk, DiskOp::Write, lba, 8, Nanos(0));
    assert!(took > 5_000_000);
}

#[test]
fn rotation_is_exact_far_into_a_run() {
    // A day and a bit into simulated time the angle still follows the exact period:
    // the start of slot 0 recurs every 60e9 / rpm ns, so after exactly `rpm` turns
    // (one minute) the wait is the same as at the start.
    let model = params().build().unwrap_or_else(|e| panic!("{e}"));
    let day = 86_400_000_000_000u64 + 12_345;
    let w0 = model.mech.wait_for_slot(Nanos(day), 5, 200);
    let w1 = model
        .mech
        .wait_for_slot(Nanos(day + 60_000_000_000), 5, 200);
    assert_eq!(w0, w1);
    // Half a turn later, the wait to the same slot differs by half a turn.
    let half = 30_000_000_000 / 7200;
    let w2 = model.mech.wait_for_slot(Nanos(day + half), 5, 200);
    let turn = 60_000_000_000 / 7200;
    assert_eq!((w0.0 + turn - half) % turn, w2.0 % turn);
}

/// Two zones, with spares: what the read-walk tests run on besides `params()`.
fn zoned_params() -> DiskParams {
    DiskParams {
        zones: vec![
            Zone {
                cylinders: 30,
                sectors_per_track: 37,
            },
            Zone {
                cylinders: 30,
                sectors_per_track: 29,
            },
        ],
        spare_sectors_per_track: 3,
        ..params()
    }
}

/// The models the read-walk tests run on: `params()` and the zoned set, each with
/// read-on-arrival off and on.
fn read_walk_models() -> Vec<(bool, DiskModel)> {
    let mut models = Vec::new();
    for p in [params(), zoned_params()] {
        for zero_latency in [false, true] {
            let model = DiskParams {
                zero_latency,
                ..p.clone()
            }
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
            models.push((zero_latency, model));
        }
    }
    models
}

#[test]
fn read_progress_agrees_with_whole_transfers() {
    // `read_progress` is the largest count whose transfer has ended by t; check it
    // against that definition (a search with whole transfers) on zoned formats, with
    // spares, skews, and read-on-arrival on and off.
    let mut rng = Rng::new(11);
    for (zero_latency, model) in read_walk_models() {
        let mech = &model.mech;
        for _ in 0..3000 {
            let n = 1 + rng.below(600);
            let lba = rng.below(mech.format.sectors() - n);
            let start = mech.format.locate(rng.below(mech.format.sectors()));
            let head = HeadPos {
                cylinder: start.cylinder,
                head: start.head,
            };
            let t0 = Nanos(rng.below(1_000_000_000));
            let whole = |k: u64| {
                let mut h = head;
                (mech.transfer(&mut h, Dir::Read, lba, k, t0), h)
            };
            let span = whole(n).0 .0 - t0.0;
            let t = Nanos(t0.0 + rng.below(span + span / 4));
            let expect = if whole(n).0 <= t {
                (n, whole(n).1)
            } else {
                let (mut lo, mut hi) = (0, n);
                while hi - lo > 1 {
                    let mid = lo + (hi - lo) / 2;
                    if whole(mid).0 <= t {
                        lo = mid;
                    } else {
                        hi = mid;
                    }
                }
                (lo, if lo == 0 { head } else { whole(lo).1 })
            };
            assert_eq!(
                mech.read_progress(head, lba, n, t0, t),
                expect,
                "lba {lba} n {n} t0 {t0:?} t {t:?} zero_latency {zero_latency}"
            );
        }
    }
}

#[test]
fn a_read_cursor_asked_again_later_agrees_with_a_fresh_walk() {
    // A read-ahead stream asks how far it has read again and again as time passes
    // and a sequential reader pushes its end on; the cursor walks each track once.
    // Every answer must be the fresh walk's, and the time the stream holds a block
    // must be the whole transfer's end.
    let mut rng = Rng::new(12);
    for (zero_latency, model) in read_walk_models() {
        let mech = &model.mech;
        for _ in 0..200 {
            let lba = rng.below(mech.format.sectors() / 2);
            let start = mech.format.locate(rng.below(mech.format.sectors()));
            let head = HeadPos {
                cylinder: start.cylinder,
                head: start.head,
            };
            let t0 = Nanos(rng.below(1_000_000_000));
            let mut cursor = mech.read_cursor(head, lba, t0);
            let (mut n, mut t) = (1 + rng.below(300), t0);
            for _ in 0..40 {
                n = (n + rng.below(400)).min(mech.format.sectors() - lba);
                t = Nanos(t.0 + rng.below(20_000_000));
                let fresh = mech.read_progress(head, lba, n, t0, t);
                assert_eq!(
                    mech.read_progress_from(&mut cursor, n, t),
                    fresh,
                    "lba {lba} n {n} t0 {t0:?} t {t:?} zero_latency {zero_latency}"
                );
                assert!(cursor.passed() <= t);
                if fresh.0 < n {
                    let k = fresh.0 + 1 + rng.below(n - fresh.0);
                    let mut h = head;
                    assert_eq!(
                        mech.read_end_from(&cursor, k),
                        mech.transfer(&mut h, Dir::Read, lba, k, t0),
                        "end of {k} from lba {lba}, t0 {t0:?}, zero_latency {zero_latency}"
                    );
                }
            }
        }
    }
}

#[test]
fn a_stream_asked_about_an_earlier_time_than_its_cursor_passed_answers_as_a_transfer() {
    // The cursor moves on with each question; a question about an earlier time
    // (none comes today, but nothing forbids one) walks afresh, its ready time too.
    let model = DiskParams {
        read_ahead_sectors: 0,
        queue_depth: 1,
        scheduler: Scheduler::Fifo,
        zero_latency: false,
        ..params()
    }
    .build()
    .unwrap_or_else(|e| panic!("{e}"));
    let mech = &model.mech;
    let head = HeadPos::default();
    let mut buf = crate::buffer::DriveBuffer::new(4, 2048);
    buf.insert(mech, 0, 8, Nanos(0), head, 1000);
    let _ = buf.lookup(mech, 900, 8, Nanos(60_000_000), 0);
    let early = buf.lookup(mech, 300, 8, Nanos(5_000_000), 0);
    let mut h = head;
    let want = mech.transfer(&mut h, Dir::Read, 8, 300, Nanos(0));
    assert_eq!(early, crate::buffer::Lookup::Streaming(want));
}

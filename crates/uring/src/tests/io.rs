//! Both backends against real files: many I/Os at once, short reads, bad descriptors,
//! more I/Os than the depth, O_DIRECT, and dropping with I/O in flight.

use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};

use super::{backends, fsync, op, pattern, run, scrambled_pages, Aligned, PAGE};
use crate::{Backend, BackendChoice, BackendKind, IoOp, OpKind};

#[test]
fn kinds_display_as_the_cli_names_them() {
    assert_eq!(BackendKind::Uring.to_string(), "io_uring");
    assert_eq!(BackendKind::Threads.to_string(), "threads");
    assert_eq!(BackendChoice::default(), BackendChoice::Auto);
}

#[test]
fn io_uring_availability_is_reported() {
    match Backend::new(BackendChoice::Uring, 8) {
        Ok(b) => assert_eq!(b.kind(), BackendKind::Uring),
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.contains("io_uring is not available"), "{msg}");
            eprintln!("io_uring is not available on this machine: {msg}");
        }
    }
}

#[test]
fn auto_picks_a_backend_that_works() {
    let mut backend = Backend::new(BackendChoice::Auto, 256).expect("auto");
    eprintln!("auto picked {}", backend.kind());
    let file = tempfile::tempfile().expect("tempfile");
    let mut data = pattern(PAGE, 1);
    let mut back = vec![0u8; PAGE];
    // SAFETY: the buffers and the file outlive `run`, which waits for every op.
    let results = unsafe {
        run(
            &mut backend,
            vec![op(1, &file, OpKind::Write, 512, &mut data)],
        )
    };
    assert_eq!(results[&1].as_ref().ok(), Some(&PAGE));
    // SAFETY: as above.
    let results = unsafe {
        run(
            &mut backend,
            vec![op(2, &file, OpKind::Read, 512, &mut back)],
        )
    };
    assert_eq!(results[&2].as_ref().ok(), Some(&PAGE));
    assert_eq!(back, data);
}

#[test]
fn many_writes_then_reads_in_flight_at_once() {
    const N: u64 = 64;
    for mut backend in backends(256) {
        let kind = backend.kind();
        let file = tempfile::tempfile().expect("tempfile");
        file.set_len(N * PAGE as u64).expect("size");
        let mut data: Vec<Vec<u8>> = (0..N).map(|i| pattern(PAGE, i)).collect();
        let offsets: Vec<u64> = scrambled_pages(N).collect();
        let writes = data
            .iter_mut()
            .zip(&offsets)
            .enumerate()
            .map(|(i, (d, &at))| op(i as u64, &file, OpKind::Write, at, d))
            .collect();
        // SAFETY: `data` and `file` outlive `run`, which waits for every op.
        let results = unsafe { run(&mut backend, writes) };
        assert_eq!(results.len(), N as usize);
        assert!(results.values().all(|r| matches!(r, Ok(PAGE))), "{kind}");
        // SAFETY: as above.
        let results = unsafe { run(&mut backend, vec![fsync(1000, &file)]) };
        assert!(matches!(results[&1000], Ok(0)), "{kind}: {results:?}");
        let mut back: Vec<Vec<u8>> = (0..N).map(|_| vec![0u8; PAGE]).collect();
        let reads = back
            .iter_mut()
            .zip(&offsets)
            .enumerate()
            .map(|(i, (b, &at))| op(i as u64, &file, OpKind::Read, at, b))
            .collect();
        // SAFETY: as above.
        let results = unsafe { run(&mut backend, reads) };
        assert!(results.values().all(|r| matches!(r, Ok(PAGE))), "{kind}");
        assert!(back == data, "{kind}: read back what was written");
        for (d, &at) in data.iter().zip(&offsets) {
            let mut check = vec![0u8; PAGE];
            file.read_exact_at(&mut check, at).expect("pread");
            assert!(&check == d, "{kind}: the file holds the data");
        }
    }
}

/// A durable write (RWF_DSYNC) is taken by both backends and lands like a write; what
/// it adds, durability at completion, only a power cut would show.
#[test]
fn a_durable_write_lands_as_a_write_does() {
    for mut backend in backends(16) {
        let kind = backend.kind();
        let file = tempfile::tempfile().expect("tempfile");
        let mut data = pattern(3 * PAGE, 7);
        // SAFETY: `data` and `file` outlive `run`, which waits for every op.
        let results = unsafe {
            run(
                &mut backend,
                vec![op(1, &file, OpKind::WriteDsync, 1024, &mut data)],
            )
        };
        assert_eq!(results[&1].as_ref().ok(), Some(&(3 * PAGE)), "{kind}");
        let mut check = vec![0u8; 3 * PAGE];
        file.read_exact_at(&mut check, 1024).expect("pread");
        assert!(check == data, "{kind}: the file holds the data");
    }
}

#[test]
fn a_read_past_the_end_is_unexpected_eof() {
    for mut backend in backends(16) {
        let kind = backend.kind();
        let file = tempfile::tempfile().expect("tempfile");
        file.write_all_at(&pattern(6000, 3), 0).expect("fill");
        let mut spanning = vec![0u8; PAGE];
        let mut beyond = vec![0u8; PAGE];
        let mut inside = vec![0u8; 1000];
        let ops = vec![
            op(1, &file, OpKind::Read, PAGE as u64, &mut spanning),
            op(2, &file, OpKind::Read, 10_000, &mut beyond),
            op(3, &file, OpKind::Read, 5000, &mut inside),
        ];
        // SAFETY: the buffers and the file outlive `run`, which waits for every op.
        let results = unsafe { run(&mut backend, ops) };
        for token in [1, 2] {
            let err = results[&token].as_ref().expect_err("past the end");
            assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof, "{kind}: {err}");
        }
        assert!(matches!(results[&3], Ok(1000)), "{kind}");
        assert_eq!(
            &spanning[..6000 - PAGE],
            &pattern(6000, 3)[PAGE..],
            "{kind}"
        );
    }
}

#[test]
fn a_bad_descriptor_fails_one_io_only() {
    for mut backend in backends(16) {
        let kind = backend.kind();
        let file = tempfile::tempfile().expect("tempfile");
        let mut a = vec![1u8; 512];
        let mut b = vec![2u8; 512];
        let mut c = pattern(512, 4);
        // An fd beyond any process's limit: never a descriptor another test opened.
        let mut far = op(2, &file, OpKind::Write, 0, &mut b);
        far.fd = 1 << 30;
        let mut bad = op(1, &file, OpKind::Read, 0, &mut a);
        bad.fd = -1;
        let mut bad_sync = fsync(3, &file);
        bad_sync.fd = -1;
        let ops = vec![bad, far, bad_sync, op(4, &file, OpKind::Write, 0, &mut c)];
        // SAFETY: the buffers and the file outlive `run`, which waits for every op.
        let results = unsafe { run(&mut backend, ops) };
        for token in [1, 2, 3] {
            let err = results[&token].as_ref().expect_err("bad fd");
            assert_eq!(err.raw_os_error(), Some(libc::EBADF), "{kind}: {err}");
        }
        assert!(matches!(results[&4], Ok(512)), "{kind}");
        let mut check = vec![0u8; 512];
        file.read_exact_at(&mut check, 0).expect("pread");
        assert_eq!(check, c, "{kind}");
    }
}

#[test]
fn more_ios_than_the_depth_all_complete() {
    const N: u64 = 300;
    for mut backend in backends(4) {
        let kind = backend.kind();
        let file = tempfile::tempfile().expect("tempfile");
        let mut data: Vec<Vec<u8>> = (0..N).map(|i| pattern(512, i)).collect();
        let writes = data
            .iter_mut()
            .enumerate()
            .map(|(i, d)| op(i as u64, &file, OpKind::Write, i as u64 * 512, d))
            .collect();
        // SAFETY: `data` and `file` outlive `run`, which waits for every op.
        let results = unsafe { run(&mut backend, writes) };
        assert_eq!(results.len(), N as usize, "{kind}");
        assert!(results.values().all(|r| matches!(r, Ok(512))), "{kind}");
        let mut all = vec![0u8; N as usize * 512];
        file.read_exact_at(&mut all, 0).expect("pread");
        assert!(all == data.concat(), "{kind}");
    }
}

#[test]
fn in_flight_counts_and_wait_without_blocking() {
    for mut backend in backends(8) {
        let kind = backend.kind();
        let file = tempfile::tempfile().expect("tempfile");
        let mut out = Vec::new();
        backend.wait(0, &mut out).expect("nothing to wait for");
        backend
            .wait(5, &mut out)
            .expect("min beyond what is in flight");
        assert!(out.is_empty());
        let mut bufs: Vec<Vec<u8>> = (0..20).map(|i| pattern(PAGE, i)).collect();
        for (i, b) in bufs.iter_mut().enumerate() {
            let write = op(i as u64, &file, OpKind::Write, (i * PAGE) as u64, b);
            // SAFETY: `bufs` and `file` outlive the loop below, which waits for every op.
            unsafe { backend.submit(write) }
                .map_err(|(e, _)| e)
                .expect("submit");
        }
        assert_eq!(backend.in_flight(), 20, "{kind}");
        let mut seen = 0;
        while backend.in_flight() > 0 {
            out.clear();
            backend.wait(0, &mut out).expect("poll");
            seen += out.len();
            assert_eq!(backend.in_flight(), 20 - seen, "{kind}");
            std::thread::yield_now();
        }
        assert_eq!(seen, 20, "{kind}");
        // Zero-length and out-of-range I/Os complete without reaching the file.
        let mut empty = Vec::new();
        let mut huge = vec![0u8; 16];
        let ops = vec![
            op(100, &file, OpKind::Read, 0, &mut empty),
            op(101, &file, OpKind::Write, u64::MAX - 4, &mut huge),
        ];
        // SAFETY: the buffers and the file outlive `run`, which waits for every op.
        let results = unsafe { run(&mut backend, ops) };
        assert!(matches!(results[&100], Ok(0)), "{kind}");
        let err = results[&101].as_ref().expect_err("offset out of range");
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{kind}");
        assert_eq!(backend.in_flight(), 0);
    }
}

/// Dropping the backend waits for what the kernel holds, so the buffers may be freed
/// right after; for the thread pool every queued write is done.
#[test]
fn dropping_with_io_in_flight_waits_for_the_kernel() {
    for mut backend in backends(4) {
        let kind = backend.kind();
        let file = tempfile::tempfile().expect("tempfile");
        let mut data: Vec<Vec<u8>> = (0..100).map(|i| pattern(PAGE, i)).collect();
        for (i, d) in data.iter_mut().enumerate() {
            let write = op(i as u64, &file, OpKind::Write, (i * PAGE) as u64, d);
            // SAFETY: `data` and `file` outlive `backend`, dropped below.
            unsafe { backend.submit(write) }
                .map_err(|(e, _)| e)
                .expect("submit");
        }
        drop(backend);
        if kind == BackendKind::Threads {
            let mut all = vec![0u8; 100 * PAGE];
            file.read_exact_at(&mut all, 0).expect("pread");
            assert!(all == data.concat(), "{kind}: every queued write was done");
        }
        drop(data);
    }
}

/// O_DIRECT descriptors need aligned buffers, lengths and offsets; the file system of
/// the temporary directory must support O_DIRECT (tmpfs before Linux 6.6 does not).
#[test]
fn o_direct_round_trip_where_supported() {
    let dir = tempfile::tempdir_in(std::env::temp_dir()).expect("tempdir");
    let path = dir.path().join("direct.img");
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_DIRECT)
        .open(&path);
    let file = match opened {
        Ok(file) => file,
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            eprintln!("skipped: no O_DIRECT in {}", dir.path().display());
            return;
        }
        Err(e) => panic!("open {}: {e}", path.display()),
    };
    file.set_len(1 << 20).expect("size");
    for mut backend in backends(32) {
        let kind = backend.kind();
        let mut bufs: Vec<Aligned> = (0..16).map(|_| Aligned::new(4 * PAGE)).collect();
        for (i, b) in bufs.iter_mut().enumerate() {
            b.bytes_mut()
                .copy_from_slice(&pattern(4 * PAGE, i as u64 + 50));
        }
        let writes = bufs
            .iter_mut()
            .enumerate()
            .map(|(i, b)| {
                op(
                    i as u64,
                    &file,
                    OpKind::Write,
                    (i * 4 * PAGE) as u64,
                    b.bytes_mut(),
                )
            })
            .chain([fsync(99, &file)])
            .collect();
        // SAFETY: `bufs` and `file` outlive `run`, which waits for every op.
        let results = unsafe { run(&mut backend, writes) };
        assert!(results.values().all(Result::is_ok), "{kind}: {results:?}");
        let mut back: Vec<Aligned> = (0..16).map(|_| Aligned::new(4 * PAGE)).collect();
        let reads = back
            .iter_mut()
            .enumerate()
            .map(|(i, b)| {
                op(
                    i as u64,
                    &file,
                    OpKind::Read,
                    (i * 4 * PAGE) as u64,
                    b.bytes_mut(),
                )
            })
            .collect();
        // SAFETY: as above.
        let results = unsafe { run(&mut backend, reads) };
        assert!(
            results
                .values()
                .all(|r| matches!(r, Ok(n) if *n == 4 * PAGE)),
            "{kind}"
        );
        for (b, w) in back.iter().zip(&bufs) {
            assert!(b.bytes() == w.bytes(), "{kind}");
        }
    }
}

/// A read from an empty pipe never completes by itself: a waker must end the wait,
/// and the read must still complete (and be reported) once data arrives.
#[test]
fn a_waker_ends_a_blocked_wait() {
    let Ok(mut backend) = Backend::new(BackendChoice::Uring, 8) else {
        eprintln!("skipped: io_uring is not available");
        return;
    };
    let mut fds = [0i32; 2];
    // SAFETY: pipe writes two descriptors into the live array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let mut buf = [0u8; 4];
    let read = IoOp {
        token: 7,
        fd: fds[0],
        kind: OpKind::Read,
        offset: 0,
        ptr: buf.as_mut_ptr(),
        len: buf.len(),
    };
    // SAFETY: buf and the pipe outlive the op: the test waits for its completion.
    unsafe { backend.submit(read) }.expect("submit");
    let waker = backend.waker().expect("waker");
    let t = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(50));
        waker.wake();
    });
    let mut out = Vec::new();
    backend.wait(1, &mut out).expect("woken wait");
    t.join().expect("waker thread");
    assert!(out.is_empty(), "woken, not completed");
    assert_eq!(backend.in_flight(), 1);
    // SAFETY: writes 4 bytes from a live array to the pipe's write end.
    let written = unsafe { libc::write(fds[1], b"data".as_ptr().cast(), 4) };
    assert_eq!(written, 4);
    backend.wait(1, &mut out).expect("completed wait");
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].token, 7);
    assert_eq!(&buf, b"data");
    // SAFETY: closing the pipe's own descriptors, no longer used.
    unsafe {
        libc::close(fds[0]);
        libc::close(fds[1]);
    }
}

/// A thread-pool waker's marker never shows up as a completion.
#[test]
fn a_thread_pool_wake_is_not_a_completion() {
    let mut backend = Backend::new(BackendChoice::Threads, 4).expect("threads");
    let waker = backend.waker().expect("waker");
    waker.wake();
    waker.wake();
    let mut out = Vec::new();
    backend.wait(0, &mut out).expect("wait");
    assert!(out.is_empty());
    assert_eq!(backend.in_flight(), 0);
}

/// A wait with a timeout on an I/O that does not complete (a read from an empty pipe)
/// returns empty once the timeout passes, and the I/O is still reported when it
/// completes. io_uring only: the thread pool's pread of a pipe fails at once.
#[test]
fn a_timed_wait_ends_without_a_completion() {
    let Ok(mut backend) = Backend::new(BackendChoice::Uring, 8) else {
        eprintln!("skipped: io_uring is not available");
        return;
    };
    let mut fds = [0i32; 2];
    // SAFETY: pipe writes two descriptors into the live array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let mut buf = [0u8; 4];
    let read = IoOp {
        token: 9,
        fd: fds[0],
        kind: OpKind::Read,
        offset: 0,
        ptr: buf.as_mut_ptr(),
        len: buf.len(),
    };
    // SAFETY: buf and the pipe outlive the op: the test waits for its completion.
    unsafe { backend.submit(read) }.expect("submit");
    let mut out = Vec::new();
    backend
        .wait_for_at_most(1, &mut out, Some(std::time::Duration::from_millis(20)))
        .expect("timed wait");
    assert!(out.is_empty(), "timed out, not completed");
    assert_eq!(backend.in_flight(), 1);
    // SAFETY: writes 4 bytes from a live array to the pipe's write end.
    let written = unsafe { libc::write(fds[1], b"late".as_ptr().cast(), 4) };
    assert_eq!(written, 4);
    backend.wait(1, &mut out).expect("completed wait");
    assert_eq!(out.len(), 1);
    assert_eq!(&buf, b"late");
    // SAFETY: closing the pipe's own descriptors, no longer used.
    unsafe {
        libc::close(fds[0]);
        libc::close(fds[1]);
    }
}

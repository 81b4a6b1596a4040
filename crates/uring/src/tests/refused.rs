//! io_uring refused by a seccomp filter, as container runtimes do: setup refused, or
//! setup allowed and io_uring_enter refused. Auto must fall back to threads, an explicit
//! io_uring must fail with a clear message, and nothing may hang.

use super::{op, pattern, run, PAGE};
use crate::{Backend, BackendChoice, BackendError, BackendKind, OpKind, UringBackend};

/// Runs `f` on a new thread on which system call `nr` fails with EPERM (a seccomp
/// filter holds only for the thread that installs it and threads it starts), or returns
/// `None` where filters cannot be installed.
fn with_syscall_refused<T: Send>(nr: libc::c_long, f: impl FnOnce() -> T + Send) -> Option<T> {
    std::thread::scope(|s| {
        s.spawn(|| refuse(nr).then(f))
            .join()
            .expect("the filtered thread")
    })
}

fn refuse(nr: libc::c_long) -> bool {
    let insn = |code: u32, k: u32, jt: u8, jf: u8| libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    };
    let mut filter = [
        // The system call number is the first word of seccomp_data.
        insn(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0, 0, 0),
        insn(libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K, nr as u32, 0, 1),
        insn(
            libc::BPF_RET | libc::BPF_K,
            libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
            0,
            0,
        ),
        insn(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW, 0, 0),
    ];
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_mut_ptr(),
    };
    // SAFETY: PR_SET_NO_NEW_PRIVS takes integers only and affects this thread only.
    let rc = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
    if rc != 0 {
        eprintln!(
            "skipped: PR_SET_NO_NEW_PRIVS: {}",
            std::io::Error::last_os_error()
        );
        return false;
    }
    // SAFETY: `prog` points at `filter`, both alive for the call; the kernel copies the
    // program, and the filter it installs applies to this thread only.
    let rc = unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER,
            &prog as *const libc::sock_fprog,
        )
    };
    if rc != 0 {
        eprintln!("skipped: seccomp: {}", std::io::Error::last_os_error());
        return false;
    }
    true
}

/// What Auto and an explicit io_uring give on the calling thread; Auto's backend is
/// also made to do one write and read.
fn choices() -> (BackendKind, Result<Backend, BackendError>) {
    let mut auto = Backend::new(BackendChoice::Auto, 64).expect("auto falls back");
    let file = tempfile::tempfile().expect("tempfile");
    let mut data = pattern(PAGE, 7);
    let mut back = vec![0u8; PAGE];
    // SAFETY: the buffers and the file outlive `run`, which waits for every op.
    unsafe {
        run(&mut auto, vec![op(1, &file, OpKind::Write, 0, &mut data)]);
        run(&mut auto, vec![op(2, &file, OpKind::Read, 0, &mut back)]);
    }
    assert_eq!(back, data);
    (auto.kind(), Backend::new(BackendChoice::Uring, 64))
}

fn assert_falls_back(nr: libc::c_long) {
    let Some((auto, uring)) = with_syscall_refused(nr, choices) else {
        return;
    };
    assert_eq!(auto, BackendKind::Threads);
    let err = uring.expect_err("io_uring refused");
    let msg = err.to_string();
    assert!(msg.contains("io_uring is not available"), "{msg}");
    assert!(
        msg.contains("threads"),
        "the message names the way out: {msg}"
    );
}

#[test]
fn setup_refused_falls_back_to_threads() {
    assert_falls_back(libc::SYS_io_uring_setup);
}

/// Setup succeeds but the probe's NOP never reaches the kernel; dropping the half-made
/// ring must not wait for it.
#[test]
fn enter_refused_falls_back_to_threads() {
    assert_falls_back(libc::SYS_io_uring_enter);
    let probe = with_syscall_refused(libc::SYS_io_uring_enter, || UringBackend::new(8).err());
    if let Some(err) = probe {
        let err = err.expect("the probe fails");
        assert_eq!(err.raw_os_error(), Some(libc::EPERM), "{err}");
    }
}

//! Tests of both backends: against real files (`io`), and with io_uring refused the
//! way seccomp policies refuse it (`refused`).

mod io;
mod refused;

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::AsRawFd;

use crate::{Backend, BackendChoice, Completion, IoOp, OpKind};

pub(crate) const PAGE: usize = 4096;

/// Every backend that works here; io_uring is skipped (with a note) where it does not.
pub(crate) fn backends(depth: u32) -> Vec<Backend> {
    let mut all = vec![Backend::new(BackendChoice::Threads, depth).expect("threads")];
    match Backend::new(BackendChoice::Uring, depth) {
        Ok(ring) => all.push(ring),
        Err(e) => eprintln!("skipped the io_uring backend: {e}"),
    }
    all
}

/// A buffer at a page-aligned address, as O_DIRECT needs.
pub(crate) struct Aligned {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

impl Aligned {
    pub(crate) fn new(len: usize) -> Aligned {
        let storage = vec![0u8; len + PAGE];
        let start = storage.as_ptr().align_offset(PAGE);
        assert!(start < PAGE);
        Aligned {
            storage,
            start,
            len,
        }
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.storage[self.start..self.start + self.len]
    }

    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.start + self.len]
    }
}

pub(crate) fn op(token: u64, file: &File, kind: OpKind, offset: u64, buf: &mut [u8]) -> IoOp {
    IoOp {
        token,
        fd: file.as_raw_fd(),
        kind,
        offset,
        ptr: buf.as_mut_ptr(),
        len: buf.len(),
    }
}

pub(crate) fn fsync(token: u64, file: &File) -> IoOp {
    IoOp {
        token,
        fd: file.as_raw_fd(),
        kind: OpKind::Fsync,
        offset: 0,
        ptr: std::ptr::null_mut(),
        len: 0,
    }
}

/// Submits `ops` and waits for all of them, checking the in-flight count on the way;
/// returns the results by token.
///
/// # Safety
/// The ops' buffers and descriptors must be valid and unused until this returns.
pub(crate) unsafe fn run(
    backend: &mut Backend,
    ops: Vec<IoOp>,
) -> HashMap<u64, std::io::Result<usize>> {
    let before = backend.in_flight();
    let n = ops.len();
    for (i, op) in ops.into_iter().enumerate() {
        // SAFETY: passed on from this function's contract.
        unsafe { backend.submit(op) }
            .map_err(|(e, _)| e)
            .expect("submit");
        assert_eq!(backend.in_flight(), before + i + 1);
    }
    let mut results = HashMap::new();
    let mut out: Vec<Completion> = Vec::new();
    while results.len() < n {
        let left = backend.in_flight();
        out.clear();
        backend.wait(1, &mut out).expect("wait");
        assert!(
            !out.is_empty(),
            "wait(1) with I/O in flight returns something"
        );
        assert_eq!(backend.in_flight(), left - out.len());
        for c in out.drain(..) {
            assert!(results.insert(c.token, c.result).is_none(), "token twice");
        }
    }
    results
}

/// Distinct page offsets in a scrambled order (multiplying by an odd number permutes
/// the residues modulo a power of two).
pub(crate) fn scrambled_pages(n: u64) -> impl Iterator<Item = u64> {
    (0..n).map(move |i| (i * 37 + 11) % n * PAGE as u64)
}

pub(crate) fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

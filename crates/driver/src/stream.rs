//! Streaming a byte range of the array out to a writer, or in from a reader, with
//! many requests in flight and the bytes kept in order.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::ops::Range;

use xraid_engine::{BufId, EngineError, RequestId, RequestKind, SECTOR_BYTES};

use crate::{sector_range, ArrayDriver, DriverError};

/// Size of each request a stream issues: large enough to cover whole stripes of
/// typical arrays, small enough to keep several in flight in little memory.
pub const DEFAULT_STREAM_REQUEST_BYTES: usize = 1 << 20;
/// Requests a stream keeps in flight: enough to keep every member of a wide array busy.
pub const DEFAULT_STREAM_DEPTH: usize = 8;
/// Pieces a request the array could not read is read again in, to find what of it can
/// be (a piece that fails is then tried sector by sector).
const SALVAGE_PIECE_BYTES: usize = 4096;

/// Told how many bytes a stream has moved so far, after each request.
pub trait StreamProgress {
    fn advance(&mut self, bytes: u64);
}

impl<F: FnMut(u64)> StreamProgress for F {
    fn advance(&mut self, bytes: u64) {
        self(bytes)
    }
}

#[derive(Debug)]
struct InFlight {
    id: RequestId,
    buf: BufId,
    offset: u64,
    len: usize,
}

impl ArrayDriver {
    /// Writes `length` bytes of the array from byte `offset` on to `out`, in order.
    pub fn read_stream(
        &mut self,
        offset: u64,
        length: u64,
        out: &mut dyn Write,
        progress: &mut dyn StreamProgress,
    ) -> Result<(), DriverError> {
        self.read_stream_with(offset, length, out, progress, None)
    }

    /// [`ArrayDriver::read_stream`] that goes on past what the array cannot read
    /// ([`EngineError::Unreadable`]: a member's read errors, or blocks failing their
    /// checksums, where no redundancy is left): such a request is read again in small
    /// pieces, down to single sectors, the sectors that still fail are written out as
    /// zeros, and their byte ranges are added to `unreadable` (adjacent ones merged).
    /// Any other failure stops it, as it stops `read_stream`.
    pub fn read_stream_past_unreadable(
        &mut self,
        offset: u64,
        length: u64,
        out: &mut dyn Write,
        progress: &mut dyn StreamProgress,
        unreadable: &mut Vec<Range<u64>>,
    ) -> Result<(), DriverError> {
        self.read_stream_with(offset, length, out, progress, Some(unreadable))
    }

    fn read_stream_with(
        &mut self,
        offset: u64,
        length: u64,
        out: &mut dyn Write,
        progress: &mut dyn StreamProgress,
        mut unreadable: Option<&mut Vec<Range<u64>>>,
    ) -> Result<(), DriverError> {
        sector_range(offset, length)?;
        let mut queue: VecDeque<InFlight> = VecDeque::new();
        let mut next = offset;
        let end = offset + length;
        let mut done = 0u64;
        let mut failure = None;
        while failure.is_none() && (next < end || !queue.is_empty()) {
            while next < end && queue.len() < DEFAULT_STREAM_DEPTH {
                let len = (end - next).min(DEFAULT_STREAM_REQUEST_BYTES as u64);
                let buf = self.engine.buffers_mut().alloc(len as usize);
                let id = self.submit(
                    RequestKind::Read,
                    next / SECTOR_BYTES,
                    len / SECTOR_BYTES,
                    Some(buf),
                );
                queue.push_back(InFlight {
                    id,
                    buf,
                    offset: next,
                    len: len as usize,
                });
                next += len;
            }
            let front = queue.front().expect("something is in flight");
            let mut result = self.wait_for(front.id);
            let front = queue.pop_front().expect("front exists");
            if let (Err(DriverError::Engine(EngineError::Unreadable { .. })), Some(lost)) =
                (&result, unreadable.as_deref_mut())
            {
                result = self.salvage(front.offset, front.buf, front.len, lost);
            }
            match result {
                Ok(()) => {
                    let bytes = self.engine.buffers().get(front.buf);
                    if let Err(error) = out.write_all(bytes) {
                        failure = Some(DriverError::Stream(error));
                    }
                    done += front.len as u64;
                    progress.advance(done);
                }
                Err(error) => failure = Some(error),
            }
            self.engine.buffers_mut().free(front.buf);
        }
        self.drain(queue);
        if let Some(error) = failure {
            return Err(error);
        }
        out.flush().map_err(DriverError::Stream)
    }

    /// Reads what can be read of the `len` bytes at `offset` into `buf`, piece by piece
    /// and, where a piece fails, sector by sector; zeroes and records the sectors that
    /// cannot be read.
    fn salvage(
        &mut self,
        offset: u64,
        buf: BufId,
        len: usize,
        unreadable: &mut Vec<Range<u64>>,
    ) -> Result<(), DriverError> {
        let sector = SECTOR_BYTES as usize;
        let mut piece = vec![0u8; SALVAGE_PIECE_BYTES];
        for at in (0..len).step_by(SALVAGE_PIECE_BYTES) {
            let n = (len - at).min(SALVAGE_PIECE_BYTES);
            match self.read_at(&mut piece[..n], offset + at as u64) {
                Ok(()) => {}
                Err(DriverError::Engine(EngineError::Unreadable { .. })) => {
                    for s in (0..n).step_by(sector) {
                        let start = offset + (at + s) as u64;
                        match self.read_at(&mut piece[s..s + sector], start) {
                            Ok(()) => {}
                            Err(DriverError::Engine(EngineError::Unreadable { .. })) => {
                                piece[s..s + sector].fill(0);
                                match unreadable.last_mut() {
                                    Some(last) if last.end == start => last.end += SECTOR_BYTES,
                                    _ => unreadable.push(start..start + SECTOR_BYTES),
                                }
                            }
                            Err(error) => return Err(error),
                        }
                    }
                }
                Err(error) => return Err(error),
            }
            self.engine.buffers_mut().get_mut(buf)[at..at + n].copy_from_slice(&piece[..n]);
        }
        Ok(())
    }

    /// Waits for every queued write, recording progress and the first error.
    fn drain_keep(
        &mut self,
        queue: &mut VecDeque<InFlight>,
        done: &mut u64,
        progress: &mut dyn StreamProgress,
        failure: &mut Option<DriverError>,
    ) {
        while let Some(front) = queue.pop_front() {
            let result = self.wait_for(front.id);
            self.engine.buffers_mut().free(front.buf);
            match result {
                Ok(()) => {
                    *done += front.len as u64;
                    progress.advance(*done);
                }
                Err(error) => {
                    failure.get_or_insert(error);
                }
            }
        }
    }

    /// Waits for everything still in flight after a failure, ignoring results.
    fn drain(&mut self, queue: VecDeque<InFlight>) {
        for f in queue {
            let _ = self.wait_for(f.id);
            self.engine.buffers_mut().free(f.buf);
        }
    }

    /// A buffer of exactly `len` bytes holding the first `len` bytes of `buf`.
    fn shrink(&mut self, buf: BufId, len: usize) -> BufId {
        if self.engine.buffers().len(buf) == len {
            return buf;
        }
        let small = self.engine.buffers_mut().alloc(len);
        let (dst, src) = self.engine.buffers_mut().pair_mut(
            xraid_engine::BufSlice {
                buf: small,
                offset: 0,
                len,
            },
            xraid_engine::BufSlice {
                buf,
                offset: 0,
                len,
            },
        );
        dst.copy_from_slice(src);
        self.engine.buffers_mut().free(buf);
        small
    }
}

/// What a write stream runs on: the driver itself, or a layer above it with work to do
/// between the stream's requests. The array records a member's failure in the
/// superblocks as soon as a request completes after it, as a server does before its
/// next reply: an offline run that loses a second member then leaves records that
/// tell which failure failed the array (see `xraid serve --force`).
pub trait StreamRunner {
    type Error: From<DriverError>;
    fn driver(&mut self) -> &mut ArrayDriver;
    /// Called after each of the stream's requests completes, with more in flight.
    fn between_requests(&mut self) -> Result<(), Self::Error>;
}

impl StreamRunner for ArrayDriver {
    type Error = DriverError;
    fn driver(&mut self) -> &mut ArrayDriver {
        self
    }
    fn between_requests(&mut self) -> Result<(), DriverError> {
        Ok(())
    }
}

/// Writes everything `input` yields into the array from byte `offset` (a multiple of
/// 512) on, and flushes. A tail shorter than a sector is merged with the sector's
/// current contents. Returns the bytes written.
pub fn write_stream<R: StreamRunner>(
    runner: &mut R,
    offset: u64,
    input: &mut dyn Read,
    progress: &mut dyn StreamProgress,
) -> Result<u64, R::Error> {
    sector_range(offset, 0)?;
    let mut queue: VecDeque<InFlight> = VecDeque::new();
    let mut next = offset;
    let mut done = 0u64;
    let mut failure: Option<R::Error> = None;
    let mut eof = false;
    while failure.is_none() && (!eof || !queue.is_empty()) {
        let driver = runner.driver();
        while !eof && queue.len() < DEFAULT_STREAM_DEPTH {
            let buf = driver
                .engine
                .buffers_mut()
                .alloc(DEFAULT_STREAM_REQUEST_BYTES);
            let got = match fill(input, driver.engine.buffers_mut().get_mut(buf)) {
                Ok(got) => got,
                Err(error) => {
                    failure = Some(DriverError::Stream(error).into());
                    driver.engine.buffers_mut().free(buf);
                    eof = true;
                    break;
                }
            };
            if got < DEFAULT_STREAM_REQUEST_BYTES {
                eof = true;
            }
            if got == 0 {
                driver.engine.buffers_mut().free(buf);
                break;
            }
            let len = (got as u64).next_multiple_of(SECTOR_BYTES) as usize;
            if len != got {
                // Keep the bytes past the input's end as they are on the array.
                let tail_at = next + len as u64 - SECTOR_BYTES;
                let mut sector = [0u8; SECTOR_BYTES as usize];
                // Let earlier writes land first: they may cover this sector.
                let mut drained = None;
                driver.drain_keep(&mut queue, &mut done, progress, &mut drained);
                if let Some(error) = drained {
                    failure = Some(error.into());
                }
                if let Err(error) = driver.read_at(&mut sector, tail_at) {
                    failure.get_or_insert(error.into());
                    driver.engine.buffers_mut().free(buf);
                    break;
                }
                let keep = got % SECTOR_BYTES as usize;
                let bytes = driver.engine.buffers_mut().get_mut(buf);
                bytes[got..len].copy_from_slice(&sector[keep..]);
            }
            let buf = driver.shrink(buf, len);
            let id = driver.submit(
                RequestKind::Write,
                next / SECTOR_BYTES,
                len as u64 / SECTOR_BYTES,
                Some(buf),
            );
            queue.push_back(InFlight {
                id,
                buf,
                offset: next,
                len,
            });
            next += len as u64;
        }
        if let Some(front) = queue.pop_front() {
            let result = driver.wait_for(front.id);
            driver.engine.buffers_mut().free(front.buf);
            match result {
                Ok(()) => {
                    done += front.len as u64;
                    progress.advance(done);
                }
                Err(error) => failure = Some(error.into()),
            }
        }
        if failure.is_none() {
            if let Err(error) = runner.between_requests() {
                failure = Some(error);
            }
        }
    }
    runner.driver().drain(queue);
    if let Some(error) = failure {
        return Err(error);
    }
    runner.driver().flush()?;
    // The flush answers on a failed array too (its superblocks are still to be
    // written): a member that failed on it lost the writes it held unflushed.
    if let Some(lost) = runner.driver().engine().lost_error() {
        return Err(DriverError::Engine(lost).into());
    }
    Ok(done)
}

/// Reads until `buf` is full or the input ends; returns the bytes read.
fn fill(input: &mut dyn Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match input.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

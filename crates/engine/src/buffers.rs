//! Buffers the engine lends by handle: client data, and scratch space for parity.
//!
//! Every byte the engine or a driver moves lives in one of these buffers. They are
//! aligned to [`BUF_ALIGN`] so that a driver may hand them straight to O_DIRECT I/O,
//! and they are recycled rather than freed so that the data path does not allocate
//! (or zero) memory per request once warm.

use std::alloc::{self, Layout};
use std::ptr::NonNull;

/// Memory alignment of every buffer: the largest logical block size O_DIRECT asks for.
pub const BUF_ALIGN: usize = 4096;

/// Freed buffers kept for reuse, per size class; more are released to the allocator.
/// Enough for a deep queue of 1 MiB requests without returning memory to the system.
const KEEP_FREE_PER_CLASS: usize = 64;

/// A handle to one buffer in [`Buffers`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BufId(pub u32);

/// A byte range inside one buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufSlice {
    pub buf: BufId,
    pub offset: usize,
    pub len: usize,
}

/// One heap allocation aligned to [`BUF_ALIGN`]. Its bytes are always initialised
/// (zeroed when first allocated), so handing them out as slices is sound.
///
/// Drivers make these on other threads (a network reader receives a write's payload
/// straight into one) and lend them to the engine with [`Buffers::adopt`], so data
/// crosses memory once between the socket and the members.
pub struct IoBuf {
    ptr: NonNull<u8>,
    capacity: usize,
}

impl IoBuf {
    /// A zeroed buffer of at least `capacity` bytes (rounded up to [`BUF_ALIGN`]).
    pub fn new(capacity: usize) -> IoBuf {
        let capacity = capacity.max(1).next_multiple_of(BUF_ALIGN);
        let layout = Self::layout(capacity);
        // SAFETY: the layout has a non-zero size (capacity >= BUF_ALIGN).
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            alloc::handle_alloc_error(layout)
        };
        IoBuf { ptr, capacity }
    }

    /// Usable bytes (a multiple of [`BUF_ALIGN`]).
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the allocation holds `capacity` initialised bytes owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.capacity) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`; the exclusive borrow makes this the only view.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.capacity) }
    }

    fn layout(capacity: usize) -> Layout {
        match Layout::from_size_align(capacity, BUF_ALIGN) {
            Ok(layout) => layout,
            Err(_) => panic!("buffer of {capacity} bytes exceeds the address space"),
        }
    }
}

impl std::fmt::Debug for IoBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IoBuf")
            .field("capacity", &self.capacity)
            .finish()
    }
}

impl Drop for IoBuf {
    fn drop(&mut self) {
        // SAFETY: ptr came from alloc_zeroed with exactly this layout and is freed once.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), Self::layout(self.capacity)) }
    }
}

// SAFETY: IoBuf owns its allocation exclusively, like a Box<[u8]>.
unsafe impl Send for IoBuf {}

/// Bytes of buffers an [`IoBufPool`] keeps for reuse at most.
const POOL_MAX_BYTES: usize = 128 << 20;

/// Buffers for client payloads shared by the threads that pass them along (a
/// connection reads a write's payload into one, the array's thread writes it and
/// hands it back; a read's data goes from the array's thread to the connection's reply
/// writer and back). Reusing them saves what a fresh allocation of a large buffer costs
/// every time: the kernel's page faults and zeroing, a fifth of the server's CPU on
/// 1 MiB reads. A reused buffer holds old bytes: callers fill what they use.
#[derive(Debug, Clone, Default)]
pub struct IoBufPool {
    inner: std::sync::Arc<std::sync::Mutex<PoolInner>>,
}

#[derive(Debug, Default)]
struct PoolInner {
    /// By size class: class `c` holds buffers of at least `2^c` bytes.
    classes: Vec<Vec<IoBuf>>,
    bytes: usize,
}

impl IoBufPool {
    pub fn new() -> IoBufPool {
        IoBufPool::default()
    }

    /// A buffer of at least `len` bytes: a kept one, or a new zeroed one.
    pub fn take(&self, len: usize) -> IoBuf {
        let class = size_class(len);
        let kept = {
            let mut p = self.lock();
            let buf = p.classes.get_mut(class).and_then(Vec::pop);
            if let Some(b) = &buf {
                p.bytes -= b.capacity;
            }
            buf
        };
        kept.unwrap_or_else(|| IoBuf::new(1usize << class))
    }

    /// Gives a buffer back for reuse (or frees it, past the pool's size).
    pub fn put(&self, buf: IoBuf) {
        let mut p = self.lock();
        if p.bytes + buf.capacity > POOL_MAX_BYTES {
            return;
        }
        // The largest class whose requests it satisfies.
        let class = (usize::BITS - 1 - buf.capacity.leading_zeros()) as usize;
        if p.classes.len() <= class {
            p.classes.resize_with(class + 1, Vec::new);
        }
        p.bytes += buf.capacity;
        p.classes[class].push(buf);
    }

    /// Bytes kept for reuse.
    pub fn kept_bytes(&self) -> usize {
        self.lock().bytes
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PoolInner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

struct Slot {
    mem: IoBuf,
    len: usize,
    /// Zeros that members may store by freeing the range (see [`Buffers::alloc_discard`]).
    discard: bool,
}

/// The engine's buffer table: allocate, look up by handle, recycle.
pub struct Buffers {
    slots: Vec<Option<Slot>>,
    free_ids: Vec<u32>,
    /// Recycled allocations by size class (log2 of capacity).
    spare: Vec<Vec<IoBuf>>,
}

impl std::fmt::Debug for Buffers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let live = self.slots.iter().filter(|s| s.is_some()).count();
        f.debug_struct("Buffers").field("live", &live).finish()
    }
}

impl Default for Buffers {
    fn default() -> Self {
        Self::new()
    }
}

fn size_class(len: usize) -> usize {
    len.max(BUF_ALIGN).next_power_of_two().trailing_zeros() as usize
}

impl Buffers {
    pub fn new() -> Buffers {
        Buffers {
            slots: Vec::new(),
            free_ids: Vec::new(),
            spare: (0..usize::BITS).map(|_| Vec::new()).collect(),
        }
    }

    /// A buffer of `len` bytes. Its contents are unspecified (a recycled buffer keeps
    /// old bytes); callers overwrite what they use.
    pub fn alloc(&mut self, len: usize) -> BufId {
        let class = size_class(len);
        let mem = self.spare[class]
            .pop()
            .unwrap_or_else(|| IoBuf::new(1usize << class));
        self.insert(Slot {
            mem,
            len,
            discard: false,
        })
    }

    /// A buffer of `len` zeros that a member written from it may store by freeing the
    /// range instead (a punched hole): for trims and writes of zeros that allow holes.
    /// The engine plans with it like any write buffer; the driver looks at
    /// [`Buffers::is_discard`]. Its memory is fresh (never recycled), so it surely holds
    /// zeros, and nothing may write into it.
    pub fn alloc_discard(&mut self, len: usize) -> BufId {
        self.insert(Slot {
            mem: IoBuf::new(len),
            len,
            discard: true,
        })
    }

    /// Whether `id` came from [`Buffers::alloc_discard`].
    pub fn is_discard(&self, id: BufId) -> bool {
        self.slot(id).discard
    }

    /// Lends `buf` to the table as a buffer of `len` bytes (at most its capacity); take
    /// it back with [`Buffers::release`].
    pub fn adopt(&mut self, buf: IoBuf, len: usize) -> BufId {
        assert!(
            len <= buf.capacity,
            "adopted length beyond the buffer's capacity"
        );
        self.insert(Slot {
            mem: buf,
            len,
            discard: false,
        })
    }

    /// Takes a buffer out of the table (adopted or allocated) without recycling it.
    pub fn release(&mut self, id: BufId) -> IoBuf {
        let slot = self.slots[id.0 as usize]
            .take()
            .expect("releasing a buffer that is not allocated");
        self.free_ids.push(id.0);
        slot.mem
    }

    fn insert(&mut self, slot: Slot) -> BufId {
        match self.free_ids.pop() {
            Some(id) => {
                self.slots[id as usize] = Some(slot);
                BufId(id)
            }
            None => {
                self.slots.push(Some(slot));
                BufId(u32::try_from(self.slots.len() - 1).expect("fewer than 2^32 buffers"))
            }
        }
    }

    /// Returns a buffer for reuse. Freeing an unknown handle is a caller bug.
    pub fn free(&mut self, id: BufId) {
        let slot = self.slots[id.0 as usize]
            .take()
            .expect("freeing a buffer that is not allocated");
        self.free_ids.push(id.0);
        let class = size_class(slot.mem.capacity);
        if self.spare[class].len() < KEEP_FREE_PER_CLASS {
            self.spare[class].push(slot.mem);
        }
    }

    /// Length the buffer was allocated with.
    pub fn len(&self, id: BufId) -> usize {
        self.slot(id).len
    }

    /// Whether no buffer is allocated (all were freed).
    pub fn is_empty(&self) -> bool {
        self.slots.iter().all(Option::is_none)
    }

    /// Number of buffers currently allocated.
    pub fn live(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }

    fn slot(&self, id: BufId) -> &Slot {
        self.slots[id.0 as usize]
            .as_ref()
            .expect("using a buffer that is not allocated")
    }

    pub fn get(&self, id: BufId) -> &[u8] {
        let slot = self.slot(id);
        // SAFETY: the allocation holds `capacity >= len` initialised bytes and lives as
        // long as the slot; the shared borrow of self prevents mutation meanwhile.
        unsafe { std::slice::from_raw_parts(slot.mem.ptr.as_ptr(), slot.len) }
    }

    pub fn get_mut(&mut self, id: BufId) -> &mut [u8] {
        let slot = self.slot(id);
        // SAFETY: as in `get`, and the exclusive borrow of self makes this the only view.
        unsafe { std::slice::from_raw_parts_mut(slot.mem.ptr.as_ptr(), slot.len) }
    }

    pub fn slice(&self, s: BufSlice) -> &[u8] {
        &self.get(s.buf)[s.offset..s.offset + s.len]
    }

    pub fn slice_mut(&mut self, s: BufSlice) -> &mut [u8] {
        &mut self.get_mut(s.buf)[s.offset..s.offset + s.len]
    }

    /// Two disjoint views into different buffers at once (e.g. copy scratch → client).
    pub fn pair_mut(&mut self, a: BufSlice, b: BufSlice) -> (&mut [u8], &mut [u8]) {
        assert_ne!(a.buf, b.buf, "pair_mut needs two different buffers");
        let pa = self.raw_ptr(a);
        let pb = self.raw_ptr(b);
        // SAFETY: the two slices lie in different allocations, both in bounds (checked by
        // raw_ptr), and the exclusive borrow of self prevents any other view.
        unsafe {
            (
                std::slice::from_raw_parts_mut(pa, a.len),
                std::slice::from_raw_parts_mut(pb, b.len),
            )
        }
    }

    /// A raw pointer to a slice, for drivers that hand memory to the kernel (io_uring).
    /// The pointer stays valid until the buffer is freed; buffers never move.
    pub fn raw_ptr(&self, s: BufSlice) -> *mut u8 {
        let slot = self.slot(s.buf);
        assert!(
            s.offset + s.len <= slot.len,
            "slice out of the buffer's bounds"
        );
        // SAFETY: offset is within the allocation (checked just above).
        unsafe { slot.mem.ptr.as_ptr().add(s.offset) }
    }
}

#[cfg(test)]
mod pool_tests {
    use super::*;

    #[test]
    fn the_pool_gives_back_what_it_was_given_and_stays_bounded() {
        let pool = IoBufPool::new();
        let a = pool.take(100_000);
        assert!(a.capacity() >= 100_000);
        let ptr = a.as_slice().as_ptr();
        pool.put(a);
        assert_eq!(pool.kept_bytes(), 131_072);
        let b = pool.take(70_000);
        assert_eq!(b.as_slice().as_ptr(), ptr, "reused");
        assert_eq!(pool.kept_bytes(), 0);
        // Too small for a larger request: a new one.
        pool.put(b);
        assert!(pool.take(200_000).capacity() >= 200_000);
        // Never more than its bound.
        for _ in 0..200 {
            pool.put(IoBuf::new(1 << 20));
        }
        assert!(pool.kept_bytes() <= POOL_MAX_BYTES);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discard_buffers_are_fresh_zeros_and_say_so() {
        let mut bufs = Buffers::new();
        // A recycled buffer that held data must not come back as discard zeros.
        let used = bufs.alloc(8192);
        bufs.get_mut(used).fill(0xff);
        bufs.free(used);
        let zeros = bufs.alloc_discard(8192);
        assert!(bufs.is_discard(zeros));
        assert!(bufs.get(zeros).iter().all(|&b| b == 0));
        let plain = bufs.alloc(8192);
        assert!(!bufs.is_discard(plain));
        bufs.free(zeros);
        // Its slot, reused, is an ordinary buffer again.
        let again = bufs.alloc(4096);
        assert!(!bufs.is_discard(again));
    }

    #[test]
    fn alloc_is_aligned_and_recycled() {
        let mut bufs = Buffers::new();
        let a = bufs.alloc(5000);
        assert_eq!(bufs.len(a), 5000);
        let ptr = bufs.raw_ptr(BufSlice {
            buf: a,
            offset: 0,
            len: 5000,
        });
        assert_eq!(ptr as usize % BUF_ALIGN, 0);
        bufs.get_mut(a).fill(7);
        bufs.free(a);
        let b = bufs.alloc(6000);
        assert_eq!(
            bufs.raw_ptr(BufSlice {
                buf: b,
                offset: 0,
                len: 1
            }),
            ptr
        );
        assert!(
            bufs.get(b)[..5000].iter().all(|&x| x == 7),
            "recycled, not zeroed"
        );
        assert_eq!(bufs.live(), 1);
    }

    #[test]
    fn adopted_buffers_come_back_with_their_bytes() {
        let mut bufs = Buffers::new();
        let mut io = IoBuf::new(5000);
        assert_eq!(io.capacity(), 8192);
        io.as_mut_slice()[..3].copy_from_slice(b"abc");
        let id = bufs.adopt(io, 4096);
        assert_eq!(bufs.len(id), 4096);
        assert_eq!(&bufs.get(id)[..3], b"abc");
        bufs.get_mut(id)[3] = b'd';
        let back = bufs.release(id);
        assert_eq!(&back.as_slice()[..4], b"abcd");
        assert!(bufs.is_empty());
    }

    #[test]
    fn pair_mut_gives_disjoint_views() {
        let mut bufs = Buffers::new();
        let a = bufs.alloc(512);
        let b = bufs.alloc(512);
        let (x, y) = bufs.pair_mut(
            BufSlice {
                buf: a,
                offset: 0,
                len: 512,
            },
            BufSlice {
                buf: b,
                offset: 0,
                len: 512,
            },
        );
        x.fill(1);
        y.copy_from_slice(x);
        assert!(bufs.get(b).iter().all(|&v| v == 1));
    }
}

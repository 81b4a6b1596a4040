//! xraid's parity arithmetic: XOR parity (P) for RAID-4/5 and Reed–Solomon P+Q for
//! RAID-6 over GF(2^8) with md's polynomial 0x11d and generator 2, bit-compatible with
//! Linux `lib/raid6` (Q = sum over data slots k of g^k * D_k).
//!
//! This crate owns generation, incremental update (`xor_into`, `mul_xor_into`) and
//! reconstruction of one or two missing blocks. Each operation exists as a scalar
//! reference kernel ([`Kernel::Scalar`], also the portable fallback) and as SIMD kernels
//! for x86-64 (AVX2, AVX-512BW, AVX-512BW+GFNI). [`Kernel::detect`] picks the best one
//! the CPU supports, once; the free functions use it. Every SIMD kernel is
//! property-tested against the scalar one.
//!
//! All blocks of one call must have the same length (any length works; the SIMD
//! kernels finish the last bytes with the scalar code).

pub mod gf256;
mod recover;
pub mod scalar;
#[cfg(target_arch = "x86_64")]
mod x86;

use std::sync::OnceLock;

/// Largest data count for which RAID-6 recovery is defined: the coefficients g^k of the
/// data slots must be distinct (md's own limit).
pub const MAX_DATA: usize = 253;

/// A failure of [`recover`]'s arguments; the message names the problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParityError {
    /// More blocks are missing than the redundancy can rebuild.
    #[error("{missing} blocks missing but only {max} can be rebuilt")]
    TooManyMissing {
        /// How many were named.
        missing: usize,
        /// 1 for P only, 2 with Q.
        max: usize,
    },
    /// The same block was named twice in `missing`.
    #[error("block {0} named twice as missing")]
    DuplicateMissing(usize),
    /// A missing index is not a block of the stripe.
    #[error("missing block index {index} out of range (stripe has {blocks} blocks)")]
    IndexOutOfRange {
        /// The index named.
        index: usize,
        /// Blocks in the stripe.
        blocks: usize,
    },
    /// `blocks.len()` does not match `data_count` + parity blocks.
    #[error("expected {expected} blocks ({data_count} data + parity), got {actual}")]
    BlockCount {
        /// Data blocks declared.
        data_count: usize,
        /// Data + P (+ Q).
        expected: usize,
        /// Blocks passed.
        actual: usize,
    },
    /// The data count is 0 or above [`MAX_DATA`].
    #[error("data count {0} out of range 1..={MAX_DATA}")]
    DataCount(usize),
    /// Blocks of one stripe differ in length.
    #[error("block {index} is {actual} bytes, block 0 is {expected}")]
    LengthMismatch {
        /// The first block whose length differs.
        index: usize,
        /// Length of block 0.
        expected: usize,
        /// Its length.
        actual: usize,
    },
}

/// An implementation of the parity operations. All kernels give identical results.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// Portable code (64-bit words for P/Q, tables for multiply); the reference.
    Scalar,
    /// AVX2: `pshufb` nibble tables, `lib/raid6` doubling.
    Avx2,
    /// AVX-512F + AVX-512BW: as AVX2 with 64-byte vectors and mask registers.
    Avx512,
    /// AVX-512F + AVX-512BW + GFNI: field multiplies as `gf2p8affineqb`.
    Gfni,
}

const ALL: [Kernel; 4] = [Kernel::Gfni, Kernel::Avx512, Kernel::Avx2, Kernel::Scalar];

/// The kernels this CPU runs, best first; probed once.
fn supported() -> &'static [Kernel] {
    static SUPPORTED: OnceLock<Vec<Kernel>> = OnceLock::new();
    SUPPORTED.get_or_init(|| ALL.iter().copied().filter(|k| k.probe()).collect())
}

fn check_len(what: &str, expected: usize, actual: usize) {
    assert!(
        expected == actual,
        "xraid-parity: {what} is {actual} bytes, expected {expected} (all blocks must have equal length)"
    );
}

impl Kernel {
    /// The best kernel this CPU supports (decided once, then cached).
    pub fn detect() -> Kernel {
        supported()[0]
    }

    /// Every kernel this CPU supports, best first (always ends with `Scalar`).
    pub fn available() -> Vec<Kernel> {
        supported().to_vec()
    }

    /// Whether this CPU can run the kernel.
    pub fn is_available(self) -> bool {
        supported().contains(&self)
    }

    /// A short lower-case name ("scalar", "avx2", "avx512", "gfni").
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Scalar => "scalar",
            Kernel::Avx2 => "avx2",
            Kernel::Avx512 => "avx512",
            Kernel::Gfni => "gfni",
        }
    }

    #[cfg(target_arch = "x86_64")]
    fn probe(self) -> bool {
        match self {
            Kernel::Scalar => true,
            Kernel::Avx2 => is_x86_feature_detected!("avx2"),
            Kernel::Avx512 => {
                is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw")
            }
            Kernel::Gfni => {
                is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("gfni")
            }
        }
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn probe(self) -> bool {
        self == Kernel::Scalar
    }

    /// Panics unless the CPU runs this kernel: the SIMD code must never run without its
    /// instructions, and a caller naming an unsupported kernel is a bug.
    fn ensure(self) {
        assert!(
            self.is_available(),
            "xraid-parity: kernel {} is not supported by this CPU",
            self.name()
        );
    }

    /// `p = xor of data` (RAID-4/5 parity). With no data, `p` becomes zero.
    ///
    /// # Panics
    /// If lengths differ or the kernel is not [`available`](Kernel::available).
    pub fn xor_gen(self, data: &[&[u8]], p: &mut [u8]) {
        self.ensure();
        for d in data {
            check_len("data block", p.len(), d.len());
        }
        if data.is_empty() {
            p.fill(0);
            return;
        }
        self.xor_gen_raw(data, p);
    }

    /// RAID-6 syndromes: `p = xor of data`, `q = sum of g^k * data[k]`. With no data,
    /// both become zero.
    ///
    /// # Panics
    /// If lengths differ or the kernel is not [`available`](Kernel::available).
    pub fn pq_gen(self, data: &[&[u8]], p: &mut [u8], q: &mut [u8]) {
        self.ensure();
        check_len("Q", p.len(), q.len());
        for d in data {
            check_len("data block", p.len(), d.len());
        }
        if data.is_empty() {
            p.fill(0);
            q.fill(0);
            return;
        }
        self.pq_gen_raw(data, p, q);
    }

    /// `dst ^= src` (P update: xor in old data, then new data).
    ///
    /// # Panics
    /// If lengths differ or the kernel is not [`available`](Kernel::available).
    pub fn xor_into(self, dst: &mut [u8], src: &[u8]) {
        self.ensure();
        check_len("src", dst.len(), src.len());
        self.xor_into_raw(dst, src);
    }

    /// `dst ^= coef * src` in GF(2^8) (Q update: `coef = gf_exp2(k)` for slot k).
    ///
    /// # Panics
    /// If lengths differ or the kernel is not [`available`](Kernel::available).
    pub fn mul_xor_into(self, dst: &mut [u8], src: &[u8], coef: u8) {
        self.ensure();
        check_len("src", dst.len(), src.len());
        self.mul_xor_into_raw(dst, src, coef);
    }

    /// Rebuilds the blocks named in `missing` in place from the others.
    ///
    /// `blocks` holds data slots `0..data_count`, then P at `data_count`, then Q at
    /// `data_count + 1` when `has_q`. `missing` names 0, 1 or (with Q) 2 distinct
    /// indexes; their contents on entry are ignored. Nothing is written on error.
    ///
    /// # Panics
    /// If the kernel is not [`available`](Kernel::available).
    pub fn recover(
        self,
        blocks: &mut [&mut [u8]],
        data_count: usize,
        has_q: bool,
        missing: &[usize],
    ) -> Result<(), ParityError> {
        self.ensure();
        recover::recover(self, blocks, data_count, has_q, missing)
    }

    // The `*_raw` operations assume checked lengths, non-empty data and an available
    // kernel; `ensure` and the public methods establish that.

    fn xor_gen_raw(self, data: &[&[u8]], p: &mut [u8]) {
        match self {
            Kernel::Scalar => scalar::xor_gen_from(data, p, 0),
            // SAFETY: the kernel is available (`ensure` ran in the public entry point), the
            // lengths are equal and data is non-empty (checked there too). The same holds
            // for every `*_raw` arm below.
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => unsafe { x86::avx2::xor_gen(data, p) },
            // SAFETY: as above.
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => unsafe { x86::avx512::xor_gen(data, p) },
            // SAFETY: as above.
            #[cfg(target_arch = "x86_64")]
            Kernel::Gfni => unsafe { x86::avx512::xor_gen_gfni(data, p) },
            #[cfg(not(target_arch = "x86_64"))]
            _ => unreachable!("SIMD kernel on a non-x86 CPU"),
        }
    }

    fn pq_gen_raw(self, data: &[&[u8]], p: &mut [u8], q: &mut [u8]) {
        match self {
            Kernel::Scalar => scalar::pq_gen_from(data, p, q, 0),
            // SAFETY: as in `xor_gen_raw`.
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => unsafe { x86::avx2::pq_gen(data, p, q) },
            // SAFETY: as in `xor_gen_raw`.
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => unsafe { x86::avx512::pq_gen(data, p, q) },
            // SAFETY: as in `xor_gen_raw`.
            #[cfg(target_arch = "x86_64")]
            Kernel::Gfni => unsafe { x86::avx512::pq_gen_gfni(data, p, q) },
            #[cfg(not(target_arch = "x86_64"))]
            _ => unreachable!("SIMD kernel on a non-x86 CPU"),
        }
    }

    fn xor_into_raw(self, dst: &mut [u8], src: &[u8]) {
        match self {
            Kernel::Scalar => scalar::xor_into_from(dst, src, 0),
            // SAFETY: as in `xor_gen_raw`.
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => unsafe { x86::avx2::xor_into(dst, src) },
            // SAFETY: as in `xor_gen_raw`.
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => unsafe { x86::avx512::xor_into(dst, src) },
            // SAFETY: as in `xor_gen_raw`.
            #[cfg(target_arch = "x86_64")]
            Kernel::Gfni => unsafe { x86::avx512::xor_into_gfni(dst, src) },
            #[cfg(not(target_arch = "x86_64"))]
            _ => unreachable!("SIMD kernel on a non-x86 CPU"),
        }
    }

    fn mul_xor_into_raw(self, dst: &mut [u8], src: &[u8], c: u8) {
        match self {
            Kernel::Scalar => scalar::mul_xor_into_from(dst, src, c, 0),
            // SAFETY: as in `xor_gen_raw`.
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => unsafe { x86::avx2::mul_xor_into(dst, src, c) },
            // SAFETY: as in `xor_gen_raw`.
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => unsafe { x86::avx512::mul_xor_into(dst, src, c) },
            // SAFETY: as in `xor_gen_raw`.
            #[cfg(target_arch = "x86_64")]
            Kernel::Gfni => unsafe { x86::avx512::mul_xor_into_gfni(dst, src, c) },
            #[cfg(not(target_arch = "x86_64"))]
            _ => unreachable!("SIMD kernel on a non-x86 CPU"),
        }
    }

    fn recov2_raw(self, a: &mut [u8], b: &mut [u8], pmul: u8, qmul: u8) {
        match self {
            Kernel::Scalar => scalar::recov2_from(a, b, pmul, qmul, 0),
            // SAFETY: as in `xor_gen_raw`.
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => unsafe { x86::avx2::recov2(a, b, pmul, qmul) },
            // SAFETY: as in `xor_gen_raw`.
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => unsafe { x86::avx512::recov2(a, b, pmul, qmul) },
            // SAFETY: as in `xor_gen_raw`.
            #[cfg(target_arch = "x86_64")]
            Kernel::Gfni => unsafe { x86::avx512::recov2_gfni(a, b, pmul, qmul) },
            #[cfg(not(target_arch = "x86_64"))]
            _ => unreachable!("SIMD kernel on a non-x86 CPU"),
        }
    }
}

/// [`Kernel::xor_gen`] with the detected kernel.
pub fn xor_gen(data: &[&[u8]], p: &mut [u8]) {
    Kernel::detect().xor_gen(data, p)
}

/// [`Kernel::pq_gen`] with the detected kernel.
pub fn pq_gen(data: &[&[u8]], p: &mut [u8], q: &mut [u8]) {
    Kernel::detect().pq_gen(data, p, q)
}

/// [`Kernel::xor_into`] with the detected kernel.
pub fn xor_into(dst: &mut [u8], src: &[u8]) {
    Kernel::detect().xor_into(dst, src)
}

/// [`Kernel::mul_xor_into`] with the detected kernel.
pub fn mul_xor_into(dst: &mut [u8], src: &[u8], coef: u8) {
    Kernel::detect().mul_xor_into(dst, src, coef)
}

/// g^k, the Q coefficient of data slot k.
pub fn gf_exp2(k: usize) -> u8 {
    gf256::exp2(k)
}

/// [`Kernel::recover`] with the detected kernel.
pub fn recover(
    blocks: &mut [&mut [u8]],
    data_count: usize,
    has_q: bool,
    missing: &[usize],
) -> Result<(), ParityError> {
    Kernel::detect().recover(blocks, data_count, has_q, missing)
}

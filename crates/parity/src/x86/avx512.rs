//! AVX-512BW kernels, with and without GFNI: 64-byte vectors, four per loop iteration
//! (256 bytes). The structure is the AVX2 kernel's; what differs is the field
//! arithmetic, chosen by the const parameter `G` of the shared cores:
//! - without GFNI, doubling takes the top bits into a mask register (`vpmovb2m`) and
//!   adds the polynomial under that mask, and multiply-by-constant uses `pshufb`;
//! - with GFNI, both are one `gf2p8affineqb` with the constant's bit matrix (the
//!   instruction's own multiply is AES's field, so the affine form is the one we can use).
//!
//! Three-way XORs are single `vpternlogd` instructions. Bytes past the last full vector
//! go to the scalar kernel.
//!
//! # Safety (common to every function here)
//! The caller must ensure the CPU supports AVX-512F and AVX-512BW (and GFNI for the
//! `*_gfni` functions), that every slice has the same length as the destination(s), and
//! that `data` is not empty.

use crate::{gf256, scalar};
use core::arch::x86_64::*;

const V: usize = 64;
const U: usize = 4;
const STEP: usize = V * U;
/// `vpternlogd` truth table for `a ^ b ^ c`.
const XOR3: i32 = 0x96;

/// # Safety
/// `p` points to a full vector of readable bytes and the CPU has this module's features.
#[inline(always)]
unsafe fn load(p: *const u8) -> __m512i {
    // SAFETY: the caller guarantees 64 readable bytes at `p`; loadu needs no alignment.
    unsafe { _mm512_loadu_si512(p.cast()) }
}

/// # Safety
/// `p` points to a full vector of writable bytes and the CPU has this module's features.
#[inline(always)]
unsafe fn store(p: *mut u8, v: __m512i) {
    // SAFETY: the caller guarantees 64 writable bytes at `p`; storeu needs no alignment.
    unsafe { _mm512_storeu_si512(p.cast(), v) }
}

/// Per-call constants for multiplying by one field element.
#[derive(Clone, Copy)]
struct MulC {
    lo: __m512i,
    hi: __m512i,
    mat: __m512i,
}

/// # Safety
/// The CPU has this module's features (callers are its `#[target_feature]` functions).
#[inline(always)]
unsafe fn mulc_consts(c: u8) -> MulC {
    let (lo, hi) = gf256::nibble_tables(c);
    // SAFETY: the 16-byte arrays are readable; AVX-512F is enabled by the caller.
    unsafe {
        MulC {
            lo: _mm512_broadcast_i32x4(_mm_loadu_si128(lo.as_ptr().cast())),
            hi: _mm512_broadcast_i32x4(_mm_loadu_si128(hi.as_ptr().cast())),
            mat: _mm512_set1_epi64(gf256::affine_matrix(c) as i64),
        }
    }
}

/// `c * x` for 64 bytes.
///
/// # Safety
/// The CPU has this module's features (callers are its `#[target_feature]` functions).
#[inline(always)]
unsafe fn mulc<const G: bool>(x: __m512i, k: MulC) -> __m512i {
    // SAFETY: AVX-512BW (and GFNI when G) are enabled by the caller.
    unsafe {
        if G {
            _mm512_gf2p8affine_epi64_epi8::<0>(x, k.mat)
        } else {
            let mask = _mm512_set1_epi8(0x0f);
            let l = _mm512_and_si512(x, mask);
            let h = _mm512_and_si512(_mm512_srli_epi16::<4>(x), mask);
            _mm512_xor_si512(_mm512_shuffle_epi8(k.lo, l), _mm512_shuffle_epi8(k.hi, h))
        }
    }
}

/// `2 * q ^ x` for 64 bytes (one Horner step). `c` is `poly` broadcast without GFNI and
/// the doubling matrix with it.
///
/// # Safety
/// The CPU has this module's features (callers are its `#[target_feature]` functions).
#[inline(always)]
unsafe fn horner<const G: bool>(q: __m512i, x: __m512i, c: __m512i) -> __m512i {
    // SAFETY: AVX-512BW (and GFNI when G) are enabled by the caller.
    unsafe {
        if G {
            _mm512_xor_si512(_mm512_gf2p8affine_epi64_epi8::<0>(q, c), x)
        } else {
            let top = _mm512_movepi8_mask(q);
            let red = _mm512_maskz_mov_epi8(top, c);
            _mm512_ternarylogic_epi32::<XOR3>(_mm512_add_epi8(q, q), red, x)
        }
    }
}

/// # Safety
/// The module's preconditions: the CPU has its features, the slices have equal lengths and `data` is not empty.
#[inline(always)]
unsafe fn xor_gen_core(data: &[&[u8]], p: &mut [u8]) {
    let len = p.len();
    let pp = p.as_mut_ptr();
    let (first, rest) = data.split_first().expect("data not empty");
    let mut off = 0;
    while off + STEP <= len {
        // SAFETY: off + STEP <= len and every slice is len bytes long.
        unsafe {
            let s = first.as_ptr().add(off);
            let mut a = [
                load(s),
                load(s.add(V)),
                load(s.add(2 * V)),
                load(s.add(3 * V)),
            ];
            // Two sources per `vpternlogd`.
            let mut pairs = rest.chunks_exact(2);
            for d in &mut pairs {
                let (s0, s1) = (d[0].as_ptr().add(off), d[1].as_ptr().add(off));
                for (j, a) in a.iter_mut().enumerate() {
                    let o = j * V;
                    *a = _mm512_ternarylogic_epi32::<XOR3>(*a, load(s0.add(o)), load(s1.add(o)));
                }
            }
            for d in pairs.remainder() {
                let s = d.as_ptr().add(off);
                for (j, a) in a.iter_mut().enumerate() {
                    *a = _mm512_xor_si512(*a, load(s.add(j * V)));
                }
            }
            for (j, a) in a.iter().enumerate() {
                store(pp.add(off + j * V), *a);
            }
        }
        off += STEP;
    }
    while off + V <= len {
        // SAFETY: off + V <= len and every slice is len bytes long.
        unsafe {
            let mut a = load(first.as_ptr().add(off));
            for d in rest {
                a = _mm512_xor_si512(a, load(d.as_ptr().add(off)));
            }
            store(pp.add(off), a);
        }
        off += V;
    }
    scalar::xor_gen_from(data, p, off);
}

/// # Safety
/// The module's preconditions: the CPU has its features, the slices have equal lengths and `data` is not empty.
#[inline(always)]
unsafe fn pq_gen_core<const G: bool>(data: &[&[u8]], p: &mut [u8], q: &mut [u8]) {
    let len = p.len();
    let (pp, qp) = (p.as_mut_ptr(), q.as_mut_ptr());
    let (top, rest) = data.split_last().expect("data not empty");
    // SAFETY: AVX-512F is enabled by the caller.
    let c = unsafe {
        if G {
            _mm512_set1_epi64(gf256::affine_matrix(2) as i64)
        } else {
            _mm512_set1_epi8(gf256::POLY as i8)
        }
    };
    let mut off = 0;
    while off + STEP <= len {
        // SAFETY: off + STEP <= len and every slice is len bytes long.
        unsafe {
            let s = top.as_ptr().add(off);
            let mut pv = [
                load(s),
                load(s.add(V)),
                load(s.add(2 * V)),
                load(s.add(3 * V)),
            ];
            let mut qv = pv;
            for d in rest.iter().rev() {
                let s = d.as_ptr().add(off);
                for j in 0..U {
                    let x = load(s.add(j * V));
                    pv[j] = _mm512_xor_si512(pv[j], x);
                    qv[j] = horner::<G>(qv[j], x, c);
                }
            }
            for j in 0..U {
                store(pp.add(off + j * V), pv[j]);
                store(qp.add(off + j * V), qv[j]);
            }
        }
        off += STEP;
    }
    while off + V <= len {
        // SAFETY: off + V <= len and every slice is len bytes long.
        unsafe {
            let mut pv = load(top.as_ptr().add(off));
            let mut qv = pv;
            for d in rest.iter().rev() {
                let x = load(d.as_ptr().add(off));
                pv = _mm512_xor_si512(pv, x);
                qv = horner::<G>(qv, x, c);
            }
            store(pp.add(off), pv);
            store(qp.add(off), qv);
        }
        off += V;
    }
    scalar::pq_gen_from(data, p, q, off);
}

/// # Safety
/// The module's preconditions: the CPU has its features, the slices have equal lengths and `data` is not empty.
#[inline(always)]
unsafe fn xor_into_core(dst: &mut [u8], src: &[u8]) {
    let len = dst.len();
    let (dp, sp) = (dst.as_mut_ptr(), src.as_ptr());
    let mut off = 0;
    while off + V <= len {
        // SAFETY: off + V <= len == src.len().
        unsafe {
            store(
                dp.add(off),
                _mm512_xor_si512(load(dp.add(off)), load(sp.add(off))),
            )
        };
        off += V;
    }
    scalar::xor_into_from(dst, src, off);
}

/// # Safety
/// The module's preconditions: the CPU has its features, the slices have equal lengths and `data` is not empty.
#[inline(always)]
unsafe fn mul_xor_into_core<const G: bool>(dst: &mut [u8], src: &[u8], c: u8) {
    let len = dst.len();
    let (dp, sp) = (dst.as_mut_ptr(), src.as_ptr());
    // SAFETY: AVX-512F is enabled by the caller.
    let k = unsafe { mulc_consts(c) };
    let mut off = 0;
    while off + V <= len {
        // SAFETY: off + V <= len == src.len().
        unsafe {
            let m = mulc::<G>(load(sp.add(off)), k);
            store(dp.add(off), _mm512_xor_si512(load(dp.add(off)), m));
        }
        off += V;
    }
    scalar::mul_xor_into_from(dst, src, c, off);
}

/// # Safety
/// The module's preconditions: the CPU has its features, the slices have equal lengths and `data` is not empty.
#[inline(always)]
unsafe fn recov2_core<const G: bool>(a: &mut [u8], b: &mut [u8], pmul: u8, qmul: u8) {
    let len = a.len();
    let (ap, bp) = (a.as_mut_ptr(), b.as_mut_ptr());
    // SAFETY: AVX-512F is enabled by the caller.
    let (kp, kq) = unsafe { (mulc_consts(pmul), mulc_consts(qmul)) };
    let mut off = 0;
    while off + V <= len {
        // SAFETY: off + V <= len == b.len().
        unsafe {
            let x = load(ap.add(off));
            let dy = _mm512_xor_si512(mulc::<G>(x, kp), mulc::<G>(load(bp.add(off)), kq));
            store(bp.add(off), dy);
            store(ap.add(off), _mm512_xor_si512(x, dy));
        }
        off += V;
    }
    scalar::recov2_from(a, b, pmul, qmul, off);
}

macro_rules! entry_points {
    ($features:literal, $g:literal, $xor_gen:ident, $pq_gen:ident, $xor_into:ident,
     $mul_xor_into:ident, $recov2:ident) => {
        /// `p = xor of data`.
        ///
        /// # Safety
        /// See the module docs.
        #[target_feature(enable = $features)]
        pub unsafe fn $xor_gen(data: &[&[u8]], p: &mut [u8]) {
            // SAFETY: forwarded preconditions; the features are enabled here.
            unsafe { xor_gen_core(data, p) }
        }

        /// `p = xor of data`, `q = sum g^k data[k]`.
        ///
        /// # Safety
        /// See the module docs.
        #[target_feature(enable = $features)]
        pub unsafe fn $pq_gen(data: &[&[u8]], p: &mut [u8], q: &mut [u8]) {
            // SAFETY: forwarded preconditions; the features are enabled here.
            unsafe { pq_gen_core::<$g>(data, p, q) }
        }

        /// `dst ^= src`.
        ///
        /// # Safety
        /// See the module docs.
        #[target_feature(enable = $features)]
        pub unsafe fn $xor_into(dst: &mut [u8], src: &[u8]) {
            // SAFETY: forwarded preconditions; the features are enabled here.
            unsafe { xor_into_core(dst, src) }
        }

        /// `dst ^= c * src`.
        ///
        /// # Safety
        /// See the module docs.
        #[target_feature(enable = $features)]
        pub unsafe fn $mul_xor_into(dst: &mut [u8], src: &[u8], c: u8) {
            // SAFETY: forwarded preconditions; the features are enabled here.
            unsafe { mul_xor_into_core::<$g>(dst, src, c) }
        }

        /// The two-data recovery finish; see [`scalar::recov2_from`].
        ///
        /// # Safety
        /// See the module docs.
        #[target_feature(enable = $features)]
        pub unsafe fn $recov2(a: &mut [u8], b: &mut [u8], pmul: u8, qmul: u8) {
            // SAFETY: forwarded preconditions; the features are enabled here.
            unsafe { recov2_core::<$g>(a, b, pmul, qmul) }
        }
    };
}

entry_points!(
    "avx512f,avx512bw",
    false,
    xor_gen,
    pq_gen,
    xor_into,
    mul_xor_into,
    recov2
);
entry_points!(
    "avx512f,avx512bw,gfni",
    true,
    xor_gen_gfni,
    pq_gen_gfni,
    xor_into_gfni,
    mul_xor_into_gfni,
    recov2_gfni
);

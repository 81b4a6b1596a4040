//! AVX2 kernels: 32-byte vectors, four per loop iteration (128 bytes) so the loads of
//! one source overlap the arithmetic of the previous one. Q uses the `lib/raid6` Horner
//! scheme (double the running Q, add the next lower data block); multiply by an
//! arbitrary constant uses the `pshufb` nibble-table technique. Unaligned loads and
//! stores throughout (callers' buffers need no alignment); the bytes past the last full
//! vector go to the scalar kernel.
//!
//! # Safety (common to every function here)
//! The caller must ensure the CPU supports AVX2, that every slice passed has the same
//! length as the destination(s), and that `data` is not empty.

use crate::{gf256, scalar};
use core::arch::x86_64::*;

const V: usize = 32;
const U: usize = 4;
const STEP: usize = V * U;

/// # Safety
/// `p` points to a full vector of readable bytes and the CPU has this module's features.
#[inline(always)]
unsafe fn load(p: *const u8) -> __m256i {
    // SAFETY: the caller guarantees 32 readable bytes at `p`; loadu needs no alignment.
    unsafe { _mm256_loadu_si256(p.cast()) }
}

/// # Safety
/// `p` points to a full vector of writable bytes and the CPU has this module's features.
#[inline(always)]
unsafe fn store(p: *mut u8, v: __m256i) {
    // SAFETY: the caller guarantees 32 writable bytes at `p`; storeu needs no alignment.
    unsafe { _mm256_storeu_si256(p.cast(), v) }
}

/// Doubles 32 field elements: shift every byte, then pick the shifted value with the
/// polynomial added wherever the byte's top bit was set. Written as one `vpblendvb` on
/// purpose: the usual compare+and form costs one more ALU op per vector, and this kernel
/// is bound by vector ALU throughput (LLVM turns a blend between 0 and `poly` back into
/// compare+and, so the blend is between the two candidate results).
///
/// # Safety
/// The CPU has this module's features (callers are its `#[target_feature]` functions).
#[inline(always)]
unsafe fn mul2(q: __m256i, poly: __m256i) -> __m256i {
    // SAFETY: plain AVX2 arithmetic; the caller runs with AVX2 enabled.
    unsafe {
        let d = _mm256_add_epi8(q, q);
        _mm256_blendv_epi8(d, _mm256_xor_si256(d, poly), q)
    }
}

/// `c * x` for 32 bytes with the nibble tables `lo`, `hi` broadcast to both lanes.
///
/// # Safety
/// The CPU has this module's features (callers are its `#[target_feature]` functions).
#[inline(always)]
unsafe fn mulc(x: __m256i, lo: __m256i, hi: __m256i, mask: __m256i) -> __m256i {
    // SAFETY: plain AVX2 arithmetic; the caller runs with AVX2 enabled.
    unsafe {
        let l = _mm256_and_si256(x, mask);
        let h = _mm256_and_si256(_mm256_srli_epi16(x, 4), mask);
        _mm256_xor_si256(_mm256_shuffle_epi8(lo, l), _mm256_shuffle_epi8(hi, h))
    }
}

/// # Safety
/// The CPU has this module's features (callers are its `#[target_feature]` functions).
#[inline(always)]
unsafe fn tables(c: u8) -> (__m256i, __m256i) {
    let (lo, hi) = gf256::nibble_tables(c);
    // SAFETY: 16-byte arrays are readable; AVX2 is enabled by the caller.
    unsafe {
        (
            _mm256_broadcastsi128_si256(_mm_loadu_si128(lo.as_ptr().cast())),
            _mm256_broadcastsi128_si256(_mm_loadu_si128(hi.as_ptr().cast())),
        )
    }
}

/// `p = xor of data`.
///
/// # Safety
/// See the module docs: AVX2 present, equal lengths, `data` not empty.
#[target_feature(enable = "avx2")]
pub unsafe fn xor_gen(data: &[&[u8]], p: &mut [u8]) {
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
            for d in rest {
                let s = d.as_ptr().add(off);
                for (j, a) in a.iter_mut().enumerate() {
                    *a = _mm256_xor_si256(*a, load(s.add(j * V)));
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
                a = _mm256_xor_si256(a, load(d.as_ptr().add(off)));
            }
            store(pp.add(off), a);
        }
        off += V;
    }
    scalar::xor_gen_from(data, p, off);
}

/// `p = xor of data`, `q = sum g^k data[k]`.
///
/// # Safety
/// See the module docs: AVX2 present, equal lengths, `data` not empty.
#[target_feature(enable = "avx2")]
pub unsafe fn pq_gen(data: &[&[u8]], p: &mut [u8], q: &mut [u8]) {
    let len = p.len();
    let (pp, qp) = (p.as_mut_ptr(), q.as_mut_ptr());
    let (top, rest) = data.split_last().expect("data not empty");
    let poly = _mm256_set1_epi8(gf256::POLY as i8);
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
                    pv[j] = _mm256_xor_si256(pv[j], x);
                    qv[j] = _mm256_xor_si256(mul2(qv[j], poly), x);
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
                pv = _mm256_xor_si256(pv, x);
                qv = _mm256_xor_si256(mul2(qv, poly), x);
            }
            store(pp.add(off), pv);
            store(qp.add(off), qv);
        }
        off += V;
    }
    scalar::pq_gen_from(data, p, q, off);
}

/// `dst ^= src`.
///
/// # Safety
/// AVX2 present and `dst.len() == src.len()`.
#[target_feature(enable = "avx2")]
pub unsafe fn xor_into(dst: &mut [u8], src: &[u8]) {
    let len = dst.len();
    let (dp, sp) = (dst.as_mut_ptr(), src.as_ptr());
    let mut off = 0;
    while off + STEP <= len {
        // SAFETY: off + STEP <= len == src.len().
        unsafe {
            for j in 0..U {
                let o = off + j * V;
                store(
                    dp.add(o),
                    _mm256_xor_si256(load(dp.add(o)), load(sp.add(o))),
                );
            }
        }
        off += STEP;
    }
    while off + V <= len {
        // SAFETY: off + V <= len == src.len().
        unsafe {
            store(
                dp.add(off),
                _mm256_xor_si256(load(dp.add(off)), load(sp.add(off))),
            )
        };
        off += V;
    }
    scalar::xor_into_from(dst, src, off);
}

/// `dst ^= c * src`.
///
/// # Safety
/// AVX2 present and `dst.len() == src.len()`.
#[target_feature(enable = "avx2")]
pub unsafe fn mul_xor_into(dst: &mut [u8], src: &[u8], c: u8) {
    let len = dst.len();
    let (dp, sp) = (dst.as_mut_ptr(), src.as_ptr());
    // SAFETY: AVX2 is enabled in this function.
    let (lo, hi) = unsafe { tables(c) };
    let mask = _mm256_set1_epi8(0x0f);
    let mut off = 0;
    while off + STEP <= len {
        // SAFETY: off + STEP <= len == src.len().
        unsafe {
            for j in 0..U {
                let o = off + j * V;
                let m = mulc(load(sp.add(o)), lo, hi, mask);
                store(dp.add(o), _mm256_xor_si256(load(dp.add(o)), m));
            }
        }
        off += STEP;
    }
    while off + V <= len {
        // SAFETY: off + V <= len == src.len().
        unsafe {
            let m = mulc(load(sp.add(off)), lo, hi, mask);
            store(dp.add(off), _mm256_xor_si256(load(dp.add(off)), m));
        }
        off += V;
    }
    scalar::mul_xor_into_from(dst, src, c, off);
}

/// The two-data recovery finish; see [`scalar::recov2_from`].
///
/// # Safety
/// AVX2 present and `a.len() == b.len()`.
#[target_feature(enable = "avx2")]
pub unsafe fn recov2(a: &mut [u8], b: &mut [u8], pmul: u8, qmul: u8) {
    let len = a.len();
    let (ap, bp) = (a.as_mut_ptr(), b.as_mut_ptr());
    // SAFETY: AVX2 is enabled in this function.
    let ((plo, phi), (qlo, qhi)) = unsafe { (tables(pmul), tables(qmul)) };
    let mask = _mm256_set1_epi8(0x0f);
    let mut off = 0;
    while off + V <= len {
        // SAFETY: off + V <= len == b.len().
        unsafe {
            let x = load(ap.add(off));
            let dy = _mm256_xor_si256(
                mulc(x, plo, phi, mask),
                mulc(load(bp.add(off)), qlo, qhi, mask),
            );
            store(bp.add(off), dy);
            store(ap.add(off), _mm256_xor_si256(x, dy));
        }
        off += V;
    }
    scalar::recov2_from(a, b, pmul, qmul, off);
}

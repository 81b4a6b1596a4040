//! The scalar reference kernels, also the portable fallback on non-x86 machines.
//!
//! Every function works on bytes `start..len` so the SIMD kernels can hand their tails
//! here. P and Q generation run on 64-bit words (the `lib/raid6` `int64` trick: double
//! eight bytes at once with masks) and finish byte by byte; every other operation is
//! byte-wise and table-driven. Callers have checked that all slices have equal length
//! and that `data` is not empty.

use crate::gf256;

const HI: u64 = 0x8080_8080_8080_8080;
const LOW7: u64 = 0xfefe_fefe_fefe_fefe;
const POLY: u64 = 0x1d1d_1d1d_1d1d_1d1d;

#[inline(always)]
fn word(s: &[u8], i: usize) -> u64 {
    u64::from_ne_bytes(s[i..i + 8].try_into().expect("8 bytes"))
}

/// Doubles eight field elements at once: shift every byte, then add the polynomial to
/// the bytes whose top bit fell out (`(hi << 1) - (hi >> 7)` turns each set top bit
/// into a 0xff byte).
#[inline(always)]
fn mul2_word(q: u64) -> u64 {
    let hi = q & HI;
    let mask = (hi << 1).wrapping_sub(hi >> 7);
    ((q << 1) & LOW7) ^ (mask & POLY)
}

/// `p = xor of data`, bytes `start..`.
pub fn xor_gen_from(data: &[&[u8]], p: &mut [u8], start: usize) {
    let len = p.len();
    let mut i = start;
    while i + 8 <= len {
        let mut acc = word(data[0], i);
        for d in &data[1..] {
            acc ^= word(d, i);
        }
        p[i..i + 8].copy_from_slice(&acc.to_ne_bytes());
        i += 8;
    }
    for i in i..len {
        p[i] = data.iter().fold(0, |a, d| a ^ d[i]);
    }
}

/// `p = xor of data`, `q = sum of g^k * data[k]` (Horner from the highest slot: double,
/// then add the next block), bytes `start..`.
pub fn pq_gen_from(data: &[&[u8]], p: &mut [u8], q: &mut [u8], start: usize) {
    let len = p.len();
    let last = data.len() - 1;
    let mut i = start;
    while i + 8 <= len {
        let mut pw = word(data[last], i);
        let mut qw = pw;
        for d in data[..last].iter().rev() {
            let w = word(d, i);
            pw ^= w;
            qw = mul2_word(qw) ^ w;
        }
        p[i..i + 8].copy_from_slice(&pw.to_ne_bytes());
        q[i..i + 8].copy_from_slice(&qw.to_ne_bytes());
        i += 8;
    }
    for i in i..len {
        let mut pb = data[last][i];
        let mut qb = pb;
        for d in data[..last].iter().rev() {
            pb ^= d[i];
            qb = gf256::mul2(qb) ^ d[i];
        }
        p[i] = pb;
        q[i] = qb;
    }
}

/// `dst ^= src`, bytes `start..`.
pub fn xor_into_from(dst: &mut [u8], src: &[u8], start: usize) {
    for (d, s) in dst[start..].iter_mut().zip(&src[start..]) {
        *d ^= *s;
    }
}

/// `dst ^= c * src`, bytes `start..`.
pub fn mul_xor_into_from(dst: &mut [u8], src: &[u8], c: u8, start: usize) {
    match c {
        0 => {}
        1 => xor_into_from(dst, src, start),
        _ => {
            let t = gf256::mul_table(c);
            for (d, s) in dst[start..].iter_mut().zip(&src[start..]) {
                *d ^= t[*s as usize];
            }
        }
    }
}

/// The last step of a two-data recovery (`lib/raid6` `2data_recov`): `a` holds
/// `Dx ^ Dy`, `b` holds `g^x Dx ^ g^y Dy`. Then `Dy = pmul * a ^ qmul * b` and
/// `Dx = Dy ^ a`; writes `Dx` to `a` and `Dy` to `b`. Bytes `start..`.
pub fn recov2_from(a: &mut [u8], b: &mut [u8], pmul: u8, qmul: u8, start: usize) {
    let tp = gf256::mul_table(pmul);
    let tq = gf256::mul_table(qmul);
    for (x, y) in a[start..].iter_mut().zip(&mut b[start..]) {
        let dy = tp[*x as usize] ^ tq[*y as usize];
        *x ^= dy;
        *y = dy;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mul2_word_matches_bytes() {
        for b in 0..=255u8 {
            let w = u64::from_ne_bytes([b, b ^ 0x80, 0, 0xff, 1, 0x7f, b, 0x80]);
            let r = mul2_word(w).to_ne_bytes();
            let src = w.to_ne_bytes();
            for k in 0..8 {
                assert_eq!(r[k], gf256::mul2(src[k]));
            }
        }
    }

    #[test]
    fn small_pq_vector() {
        // Three one-byte-per-word blocks: P = 1^2^4 = 7, Q = 1 + 2*2 + 4*4 = 1^4^16 = 21.
        let d0 = [1u8; 11];
        let d1 = [2u8; 11];
        let d2 = [4u8; 11];
        let mut p = [0u8; 11];
        let mut q = [0u8; 11];
        pq_gen_from(&[&d0, &d1, &d2], &mut p, &mut q, 0);
        assert_eq!(p, [7; 11]);
        assert_eq!(q, [21; 11]);
        // 0x80 in slot 1 doubles into the polynomial: g * 0x80 = 0x1d.
        let z = [0u8; 9];
        let h = [0x80u8; 9];
        pq_gen_from(&[&z, &h], &mut p[..9], &mut q[..9], 0);
        assert_eq!(&p[..9], &[0x80; 9]);
        assert_eq!(&q[..9], &[0x1d; 9]);
    }
}

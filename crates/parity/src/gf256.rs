//! GF(2^8) arithmetic with md's field: polynomial x^8+x^4+x^3+x^2+1 (0x11d) and generator
//! g = 2, exactly as Linux `lib/raid6` uses it. Owns the exp/log tables (built at compile
//! time), multiply, inverse, and the per-constant tables the SIMD kernels load
//! (nibble tables for `pshufb`, bit matrices for GFNI's affine instruction).

/// The field's reduction polynomial, without the x^8 term (0x11d & 0xff).
pub const POLY: u8 = 0x1d;

/// `EXP[i] = g^i` for i in 0..510: doubled so `EXP[log a + log b]` needs no reduction.
pub const EXP: [u8; 510] = build_exp();

/// `LOG[a]` = the k in 0..255 with g^k = a; `LOG[0]` is unused (0 has no logarithm).
pub const LOG: [u8; 256] = build_log();

const fn build_exp() -> [u8; 510] {
    let mut t = [0u8; 510];
    let mut x: u8 = 1;
    let mut i = 0;
    while i < 510 {
        t[i] = x;
        x = mul2(x);
        i += 1;
    }
    t
}

const fn build_log() -> [u8; 256] {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 255 {
        t[EXP[i] as usize] = i as u8;
        i += 1;
    }
    t
}

/// Multiplies by g = 2: shift left and reduce by the polynomial when the top bit falls out.
#[inline]
pub const fn mul2(a: u8) -> u8 {
    (a << 1) ^ if a & 0x80 != 0 { POLY } else { 0 }
}

/// Field multiplication.
#[inline]
pub const fn mul(a: u8, b: u8) -> u8 {
    if a == 0 || b == 0 {
        0
    } else {
        EXP[LOG[a as usize] as usize + LOG[b as usize] as usize]
    }
}

/// Multiplicative inverse.
///
/// # Panics
/// If `a == 0` (zero has no inverse).
#[inline]
pub const fn inv(a: u8) -> u8 {
    assert!(a != 0, "GF(2^8): 0 has no inverse");
    EXP[255 - LOG[a as usize] as usize]
}

/// Field division `a / b`.
///
/// # Panics
/// If `b == 0`.
#[inline]
pub const fn div(a: u8, b: u8) -> u8 {
    mul(a, inv(b))
}

/// g^k for any k (the multiplicative group has order 255, so exponents wrap).
#[inline]
pub const fn exp2(k: usize) -> u8 {
    EXP[k % 255]
}

/// Discrete logarithm base g; `None` for 0.
#[inline]
pub const fn log(a: u8) -> Option<u8> {
    if a == 0 {
        None
    } else {
        Some(LOG[a as usize])
    }
}

/// The 256-entry product table `c * x` for every x, used by the scalar kernel.
pub fn mul_table(c: u8) -> [u8; 256] {
    let mut t = [0u8; 256];
    for (x, v) in t.iter_mut().enumerate() {
        *v = mul(c, x as u8);
    }
    t
}

/// Nibble tables for the `pshufb` technique: `c * x = lo[x & 15] ^ hi[x >> 4]`, because
/// multiplication by a constant is linear over GF(2).
pub fn nibble_tables(c: u8) -> ([u8; 16], [u8; 16]) {
    let mut lo = [0u8; 16];
    let mut hi = [0u8; 16];
    for i in 0..16u8 {
        lo[i as usize] = mul(c, i);
        hi[i as usize] = mul(c, i << 4);
    }
    (lo, hi)
}

/// The 8x8 bit matrix that makes GFNI's `gf2p8affineqb` multiply every byte by `c` in
/// md's field (the instruction's own multiply uses AES's 0x11b, so it cannot be used).
/// Byte `7 - i` of the matrix is the row producing output bit i: its bit j is bit i of
/// `c * 2^j`.
pub fn affine_matrix(c: u8) -> u64 {
    let mut m = 0u64;
    for i in 0..8 {
        let mut row = 0u8;
        for j in 0..8 {
            if (mul(c, 1 << j) >> i) & 1 != 0 {
                row |= 1 << j;
            }
        }
        m |= u64::from(row) << (8 * (7 - i));
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Slow bitwise multiplication, independent of the tables.
    fn mul_slow(mut a: u8, mut b: u8) -> u8 {
        let mut r = 0;
        while b != 0 {
            if b & 1 != 0 {
                r ^= a;
            }
            a = mul2(a);
            b >>= 1;
        }
        r
    }

    #[test]
    fn generator_has_order_255() {
        assert_eq!(exp2(0), 1);
        assert_eq!(exp2(255), 1);
        let mut seen = [false; 256];
        for k in 0..255 {
            let v = exp2(k);
            assert!(!seen[v as usize], "g^{k} repeats");
            seen[v as usize] = true;
        }
        assert!(!seen[0]);
    }

    #[test]
    fn known_values() {
        assert_eq!(exp2(1), 2);
        assert_eq!(exp2(8), 0x1d);
        assert_eq!(mul(0x80, 2), 0x1d);
        assert_eq!(mul(3, 7), 9);
        assert_eq!(log(0), None);
        assert_eq!(log(2), Some(1));
    }

    #[test]
    fn mul_matches_bitwise_and_identities() {
        for a in 0..=255u8 {
            assert_eq!(mul(a, 1), a);
            assert_eq!(mul(a, 0), 0);
            if a != 0 {
                assert_eq!(mul(a, inv(a)), 1, "a={a}");
                assert_eq!(div(a, a), 1);
            }
            for b in 0..=255u8 {
                assert_eq!(mul(a, b), mul_slow(a, b), "{a}*{b}");
                assert_eq!(mul(a, b), mul(b, a));
            }
        }
    }

    #[test]
    fn derived_tables_agree() {
        for c in [0u8, 1, 2, 0x1d, 0x80, 0xff, 0x53] {
            let t = mul_table(c);
            let (lo, hi) = nibble_tables(c);
            for x in 0..=255u8 {
                assert_eq!(t[x as usize], mul(c, x));
                assert_eq!(lo[(x & 15) as usize] ^ hi[(x >> 4) as usize], mul(c, x));
            }
        }
    }
}

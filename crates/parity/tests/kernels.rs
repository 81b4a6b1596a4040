//! Every available kernel against the scalar reference (and the scalar reference against
//! the field definition), and recovery of every erasure pattern for every kernel.

use proptest::prelude::*;
use xraid_parity::{gf256, gf_exp2, Kernel, ParityError};

fn stripe(max_n: usize) -> impl Strategy<Value = Vec<Vec<u8>>> {
    // Lengths around vector and unroll boundaries, plus some past the 4 KiB recovery
    // segment.
    let len = prop_oneof![4 => 0usize..700, 1 => 4000usize..9000];
    (1..=max_n, len)
        .prop_flat_map(|(n, len)| prop::collection::vec(prop::collection::vec(any::<u8>(), len), n))
}

fn refs(v: &[Vec<u8>]) -> Vec<&[u8]> {
    v.iter().map(|d| d.as_slice()).collect()
}

/// P and Q straight from the definition, byte by byte.
fn definition(data: &[Vec<u8>]) -> (Vec<u8>, Vec<u8>) {
    let len = data[0].len();
    let mut p = vec![0u8; len];
    let mut q = vec![0u8; len];
    for (k, d) in data.iter().enumerate() {
        for i in 0..len {
            p[i] ^= d[i];
            q[i] ^= gf256::mul(gf_exp2(k), d[i]);
        }
    }
    (p, q)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn gen_matches_scalar(data in stripe(20)) {
        let d = refs(&data);
        let len = data[0].len();
        let (dp, dq) = definition(&data);
        for k in Kernel::available() {
            let mut p = vec![0xa5u8; len];
            let mut q = vec![0x5au8; len];
            k.pq_gen(&d, &mut p, &mut q);
            prop_assert_eq!(&p, &dp, "pq_gen P {}", k.name());
            prop_assert_eq!(&q, &dq, "pq_gen Q {}", k.name());
            let mut p2 = vec![0x33u8; len];
            k.xor_gen(&d, &mut p2);
            prop_assert_eq!(&p2, &dp, "xor_gen {}", k.name());
        }
    }

    #[test]
    fn update_ops_match_scalar(data in stripe(2), coef in any::<u8>(), off in 0usize..64) {
        let src = &data[0];
        let dst0 = data.get(1).cloned().unwrap_or_else(|| vec![0x77; src.len()]);
        // Offsetting the start makes the SIMD loads unaligned.
        let off = off.min(src.len());
        let mut want_x = dst0.clone();
        let mut want_m = dst0.clone();
        for i in off..src.len() {
            want_x[i] ^= src[i];
            want_m[i] ^= gf256::mul(coef, src[i]);
        }
        for k in Kernel::available() {
            let mut x = dst0.clone();
            k.xor_into(&mut x[off..], &src[off..]);
            prop_assert_eq!(&x, &want_x, "xor_into {}", k.name());
            let mut m = dst0.clone();
            k.mul_xor_into(&mut m[off..], &src[off..], coef);
            prop_assert_eq!(&m, &want_m, "mul_xor_into {} coef {}", k.name(), coef);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn raid5_every_single_erasure(data in stripe(12)) {
        let n = data.len();
        let (p, _) = definition(&data);
        let mut full = data.clone();
        full.push(p);
        for k in Kernel::available() {
            for m in 0..=n {
                let mut blocks = full.clone();
                blocks[m].iter_mut().for_each(|b| *b = !*b);
                let mut br: Vec<&mut [u8]> = blocks.iter_mut().map(|b| b.as_mut_slice()).collect();
                k.recover(&mut br, n, false, &[m]).unwrap();
                prop_assert!(blocks == full, "{} missing {}", k.name(), m);
            }
        }
    }

    #[test]
    fn raid6_every_erasure_pattern(data in stripe(12)) {
        let n = data.len();
        let (p, q) = definition(&data);
        let mut full = data.clone();
        full.push(p);
        full.push(q);
        let total = n + 2;
        let mut patterns: Vec<Vec<usize>> = (0..total).map(|a| vec![a]).collect();
        for a in 0..total {
            for b in 0..total {
                if a != b {
                    patterns.push(vec![a, b]); // both orders
                }
            }
        }
        for k in Kernel::available() {
            for m in &patterns {
                let mut blocks = full.clone();
                for &i in m {
                    blocks[i].iter_mut().for_each(|b| *b = b.wrapping_add(0x3b));
                }
                let mut br: Vec<&mut [u8]> = blocks.iter_mut().map(|b| b.as_mut_slice()).collect();
                k.recover(&mut br, n, true, m).unwrap();
                prop_assert!(blocks == full, "{} missing {:?}", k.name(), m);
            }
        }
    }
}

#[test]
fn max_data_count_recovers() {
    // 253 slots: the last coefficients are g^251, g^252, still distinct.
    let n = xraid_parity::MAX_DATA;
    let data: Vec<Vec<u8>> = (0..n)
        .map(|k| (0..100).map(|i| (k * 31 + i * 7) as u8).collect())
        .collect();
    let (p, q) = definition(&data);
    let mut full = data.clone();
    full.push(p);
    full.push(q);
    for k in Kernel::available() {
        for m in [[0, n - 1], [n - 2, n - 1], [n - 1, n], [5, n + 1]] {
            let mut blocks = full.clone();
            blocks[m[0]].fill(0);
            blocks[m[1]].fill(0);
            let mut br: Vec<&mut [u8]> = blocks.iter_mut().map(|b| b.as_mut_slice()).collect();
            k.recover(&mut br, n, true, &m).unwrap();
            assert!(blocks == full, "{} missing {:?}", k.name(), m);
        }
    }
}

#[test]
fn known_vectors() {
    // D0 = 0x01.., D1 = 0x80.., D2 = 0xff..: P = 0x7e, Q = 1 ^ 2*0x80 ^ 4*0xff.
    let d = [vec![0x01u8; 70], vec![0x80; 70], vec![0xff; 70]];
    let q_byte = 0x01 ^ 0x1d ^ gf256::mul(4, 0xff);
    // 2*0xff = 0xfe^0x1d = 0xe3; 2*0xe3 = 0xc6^0x1d = 0xdb.
    assert_eq!(gf256::mul(4, 0xff), 0xdb);
    for k in Kernel::available() {
        let mut p = vec![0; 70];
        let mut q = vec![0; 70];
        k.pq_gen(&refs(&d), &mut p, &mut q);
        assert_eq!(p, vec![0x7e; 70], "{}", k.name());
        assert_eq!(q, vec![q_byte; 70], "{}", k.name());
    }
}

#[test]
fn empty_data_gives_zero_parity() {
    for k in Kernel::available() {
        let mut p = vec![1u8; 40];
        let mut q = vec![1u8; 40];
        k.pq_gen(&[], &mut p, &mut q);
        assert!(p.iter().chain(&q).all(|&b| b == 0));
    }
}

#[test]
fn recover_rejects_bad_arguments() {
    let mut v = vec![vec![0u8; 16]; 5];
    let mut b: Vec<&mut [u8]> = v.iter_mut().map(|x| x.as_mut_slice()).collect();
    assert_eq!(
        xraid_parity::recover(&mut b, 4, false, &[0, 1]),
        Err(ParityError::TooManyMissing { missing: 2, max: 1 })
    );
    assert_eq!(
        xraid_parity::recover(&mut b, 3, true, &[1, 1]),
        Err(ParityError::DuplicateMissing(1))
    );
    assert_eq!(
        xraid_parity::recover(&mut b, 3, true, &[5]),
        Err(ParityError::IndexOutOfRange {
            index: 5,
            blocks: 5
        })
    );
    assert!(matches!(
        xraid_parity::recover(&mut b, 3, false, &[0]),
        Err(ParityError::BlockCount { .. })
    ));
    assert_eq!(
        xraid_parity::recover(&mut b, 0, false, &[0]),
        Err(ParityError::DataCount(0))
    );
    assert_eq!(xraid_parity::recover(&mut b, 3, true, &[]), Ok(()));
    let mut w = [vec![0u8; 16], vec![0u8; 15], vec![0u8; 16]];
    let mut b: Vec<&mut [u8]> = w.iter_mut().map(|x| x.as_mut_slice()).collect();
    assert_eq!(
        xraid_parity::recover(&mut b, 2, false, &[0]),
        Err(ParityError::LengthMismatch {
            index: 1,
            expected: 16,
            actual: 15
        })
    );
    let e = ParityError::TooManyMissing { missing: 3, max: 2 };
    assert_eq!(e.to_string(), "3 blocks missing but only 2 can be rebuilt");
}

#[test]
fn detect_is_available_and_scalar_always_is() {
    let all = Kernel::available();
    assert_eq!(all.last(), Some(&Kernel::Scalar));
    assert!(all.contains(&Kernel::detect()));
    eprintln!("kernels: {:?}", all);
}

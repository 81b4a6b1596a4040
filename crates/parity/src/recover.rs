//! Reconstruction of one or two missing blocks of a stripe, in place, following Linux
//! `lib/raid6/recov.c`: compute the syndromes with the missing data slots read as zero
//! into the missing blocks' own buffers, fold in the surviving P/Q, then solve.
//!
//! The stripe is processed in segments of [`SEG`] bytes so the partial syndromes are
//! still in L1 when they are folded and solved, and so a static zero block of that size
//! can stand in for missing data (as the kernel's zero page does) without allocating.

use crate::{gf256, Kernel, ParityError, MAX_DATA};

const SEG: usize = 4096;
static ZERO: [u8; SEG] = [0; SEG];
const MAX_BLOCKS: usize = MAX_DATA + 2;

/// What is missing, with `a < b` when two are.
#[derive(Clone, Copy)]
enum Case {
    Data(usize),
    P,
    Q,
    DataData(usize, usize),
    DataP(usize),
    DataQ(usize),
    PQ,
}

fn validate(
    blocks: &[&mut [u8]],
    n: usize,
    has_q: bool,
    missing: &[usize],
) -> Result<(), ParityError> {
    if n == 0 || n > MAX_DATA {
        return Err(ParityError::DataCount(n));
    }
    let total = n + 1 + usize::from(has_q);
    if blocks.len() != total {
        return Err(ParityError::BlockCount {
            data_count: n,
            expected: total,
            actual: blocks.len(),
        });
    }
    let len = blocks[0].len();
    if let Some((index, b)) = blocks.iter().enumerate().find(|(_, b)| b.len() != len) {
        return Err(ParityError::LengthMismatch {
            index,
            expected: len,
            actual: b.len(),
        });
    }
    let max = 1 + usize::from(has_q);
    if missing.len() > max {
        return Err(ParityError::TooManyMissing {
            missing: missing.len(),
            max,
        });
    }
    if let Some(&index) = missing.iter().find(|&&m| m >= total) {
        return Err(ParityError::IndexOutOfRange {
            index,
            blocks: total,
        });
    }
    if missing.len() == 2 && missing[0] == missing[1] {
        return Err(ParityError::DuplicateMissing(missing[0]));
    }
    Ok(())
}

/// Fills `buf[..data.len()]` with bytes `off..end` of the data slots; the `zero` slots
/// (the missing ones) read as zeros.
fn data_segment<'a>(
    data: &[&'a [u8]],
    off: usize,
    end: usize,
    zero: [usize; 2],
    buf: &mut [&'a [u8]],
) {
    for (i, (slot, d)) in buf.iter_mut().zip(data).enumerate() {
        *slot = if zero.contains(&i) {
            &ZERO[..end - off]
        } else {
            &d[off..end]
        };
    }
}

pub(crate) fn recover(
    k: Kernel,
    blocks: &mut [&mut [u8]],
    n: usize,
    has_q: bool,
    missing: &[usize],
) -> Result<(), ParityError> {
    validate(blocks, n, has_q, missing)?;
    let (a, b) = match *missing {
        [] => return Ok(()),
        [a] => (a, None),
        [x, y] => (x.min(y), Some(x.max(y))),
        _ => unreachable!("validated"),
    };
    let (p, q) = (n, n + 1);
    let case = match (a, b) {
        (x, None) if x < n => Case::Data(x),
        (x, None) if x == p => Case::P,
        (_, None) => Case::Q,
        (x, Some(y)) if y < n => Case::DataData(x, y),
        (x, Some(y)) if x < n && y == p => Case::DataP(x),
        (x, Some(_)) if x < n => Case::DataQ(x),
        _ => Case::PQ,
    };

    // Split the stripe into the (one or two) blocks being written and the survivors.
    let mut others: [&[u8]; MAX_BLOCKS] = [&[]; MAX_BLOCKS];
    let mut ma: Option<&mut [u8]> = None;
    let mut mb: Option<&mut [u8]> = None;
    for (i, blk) in blocks.iter_mut().enumerate() {
        if i == a {
            ma = Some(&mut **blk);
        } else if Some(i) == b {
            mb = Some(&mut **blk);
        } else {
            others[i] = &**blk;
        }
    }
    let ma = ma.expect("missing block a found");
    let len = ma.len();
    let mut scratch = [0u8; SEG];

    let mut off = 0;
    while off < len {
        let end = (off + SEG).min(len);
        let l = end - off;
        let mut list: [&[u8]; MAX_BLOCKS] = [&[]; MAX_BLOCKS];
        let none = [usize::MAX; 2];
        let da = &mut ma[off..end];
        match case {
            Case::Data(x) => {
                // Dx = P ^ the other data.
                let mut m = 0;
                for (i, o) in others[..=n].iter().enumerate() {
                    if i != x {
                        list[m] = &o[off..end];
                        m += 1;
                    }
                }
                k.xor_gen_raw(&list[..m], da);
            }
            Case::P => {
                data_segment(&others[..n], off, end, none, &mut list);
                k.xor_gen_raw(&list[..n], da);
            }
            Case::Q => {
                data_segment(&others[..n], off, end, none, &mut list);
                k.pq_gen_raw(&list[..n], &mut scratch[..l], da);
            }
            Case::PQ => {
                data_segment(&others[..n], off, end, none, &mut list);
                let db = &mut mb.as_deref_mut().expect("two missing")[off..end];
                k.pq_gen_raw(&list[..n], da, db);
            }
            Case::DataData(x, y) => {
                data_segment(&others[..n], off, end, [x, y], &mut list);
                let db = &mut mb.as_deref_mut().expect("two missing")[off..end];
                k.pq_gen_raw(&list[..n], da, db);
                // da = Dx ^ Dy, db = g^x Dx ^ g^y Dy.
                k.xor_into_raw(da, &others[p][off..end]);
                k.xor_into_raw(db, &others[q][off..end]);
                let pmul = gf256::inv(gf256::exp2(y - x) ^ 1);
                let qmul = gf256::inv(gf256::exp2(x) ^ gf256::exp2(y));
                k.recov2_raw(da, db, pmul, qmul);
            }
            Case::DataP(x) => {
                data_segment(&others[..n], off, end, [x, usize::MAX], &mut list);
                let dp = &mut mb.as_deref_mut().expect("two missing")[off..end];
                let sq = &mut scratch[..l];
                k.pq_gen_raw(&list[..n], dp, sq);
                // sq = g^x Dx, dp = P without Dx.
                k.xor_into_raw(sq, &others[q][off..end]);
                da.fill(0);
                k.mul_xor_into_raw(da, sq, gf256::inv(gf256::exp2(x)));
                k.xor_into_raw(dp, da);
            }
            Case::DataQ(x) => {
                // Dx from P, then Q from the complete data.
                let mut m = 0;
                for (i, o) in others[..=n].iter().enumerate() {
                    if i != x {
                        list[m] = &o[off..end];
                        m += 1;
                    }
                }
                k.xor_gen_raw(&list[..m], da);
                data_segment(&others[..n], off, end, [x, usize::MAX], &mut list);
                list[x] = da;
                let dq = &mut mb.as_deref_mut().expect("two missing")[off..end];
                k.pq_gen_raw(&list[..n], &mut scratch[..l], dq);
            }
        }
        off = end;
    }
    Ok(())
}

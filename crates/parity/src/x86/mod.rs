//! x86-64 SIMD kernels. Each submodule owns one instruction-set level; `lib.rs` picks
//! one at run time after `is_x86_feature_detected!` says the CPU has it.

pub mod avx2;
pub mod avx512;

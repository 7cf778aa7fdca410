//! The measuring harness behind the `convkit` command (cargo feature `harness`, which the
//! command needs and library users do not): the f64 references, `check`, `bench` against
//! cuDNN, `tune`, and what a result records about the machine it ran on.

pub mod bench;
pub mod cgemm;
pub mod check;
pub mod cublas;
pub mod fft;
mod nvml;
pub mod reference;
pub mod report;
pub mod suites;
pub mod tune;

pub use nvml::GpuState;

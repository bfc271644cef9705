//! fused-core: the contract every fused backend builds on.
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[cfg(feature = "alloc")]
extern crate alloc;

pub mod blocks;
pub mod dtype;
pub mod error;
pub mod legality;
pub mod quant;

pub use dtype::DType;
pub use error::Error;

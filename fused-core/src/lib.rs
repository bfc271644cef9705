//! fused-core: the contract every fused backend builds on.
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[cfg(feature = "alloc")]
extern crate alloc;

pub mod dtype;
pub mod error;
pub mod legality;

pub use dtype::DType;
pub use error::Error;
pub mod element;
pub mod epilogue;
pub mod fwht;
#[cfg(feature = "alloc")]
pub mod graph;
#[cfg(feature = "alloc")]
pub mod planner;
pub mod tensor;
pub mod reference;
pub mod blocks;
pub mod quant;

//! The closed-loop transport: [`aggrate_core::transport`] (wire format, sans-IO sender and
//! receiver), re-exported, plus its UDP socket edge ([`io`]).

pub use aggrate_core::transport::*;

pub mod io;

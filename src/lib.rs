//! aggrate: learn 802.11ac A-MPDU frame aggregation from packet timing, and use it to send fast
//! without queueing.
//!
//! The estimator, controller and transport state machines live in the lean `aggrate-core`
//! crate (`time`, `features`, `model`, `runtime`, `control`, `transport`), re-exported here.
//!
//! Layers (a module may use those above it and `time`):
//! `time` → `phy` → `capture` → `label` → `features` → `dataset` → `pipeline` → `train` → `model` →
//! `runtime` → `control` → `transport` → `sim`; `wlan` (the emulator) and `testbed` (real
//! kernel receive paths) produce captures; `progress` is the callback long work reports through. The library never prints and never reads the real
//! clock outside its IO edges (`transport::io`, `wlan::live`, `testbed`); the `aggrate` binary is
//! the thin shell around it.
#![warn(missing_docs)]
#![warn(unreachable_pub)]
#![deny(unsafe_code)]

pub use aggrate_core::{control, features, runtime, time};

pub mod capture;
pub mod dataset;
pub mod label;
pub mod livelog;
pub mod metrics;
pub mod model;
pub mod parallel;
pub mod phy;
pub mod pipeline;
pub mod progress;
pub mod report;
pub mod sim;
pub mod testbed;
pub mod train;
pub mod transport;
pub mod wlan;

pub use time::{Ts, Tsft};

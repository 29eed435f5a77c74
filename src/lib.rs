//! aggrate: learn 802.11ac A-MPDU frame aggregation from packet timing, and use it to send fast
//! without queueing.
//!
//! The estimator, controller and transport state machines live in the lean `aggrate-core`
//! crate (`time`, `features`, `model`, `runtime`, `control`, `transport`, `selfcal`,
//! `airtime`, `level`, `watch`), re-exported here, below everything else. docs/ARCHITECTURE.md
//! is the map.
//!
//! Layers (a module uses only those before it, and the core): `phy`, `parallel`, `progress`,
//! `metrics`, `rxstamp` (the one kernel-timestamp receive edge), `impair`, `bulk` → `capture` → `label` →
//! `wlan` (the emulator: writes captures, sits in the live and virtual loops) → `dataset` →
//! `pipeline` → `train` → `bottleneck`, `model::onnx` (export) → `transport::io` (sockets) → `livelog`,
//! `testbed`, `sim` → `report` (renders; used by the CLI only). `tests/suite/layering.rs` holds the
//! table of allowed edges and fails on an arrow up. The library never prints and never reads
//! the real clock outside its IO edges (`transport::io`, `wlan::live`, `testbed`); the
//! `aggrate` binary is the thin shell around it.
#![warn(missing_docs)]
#![warn(unreachable_pub)]
#![deny(unsafe_code)]

pub use aggrate_core::{airtime, control, features, level, runtime, selfcal, time, watch};

pub mod bottleneck;
pub mod bulk;
pub mod capture;
pub mod dataset;
pub mod impair;
pub mod label;
pub mod livelog;
pub mod metrics;
pub mod model;
pub mod parallel;
pub mod phy;
pub mod pipeline;
pub mod progress;
pub mod report;
pub mod rxstamp;
pub mod sim;
pub mod testbed;
pub mod train;
pub mod transport;
pub mod wlan;

pub use time::{Ts, Tsft};

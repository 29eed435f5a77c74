//! aggrate-core: the parts of aggrate that run inside a transport — packet-timing features, the
//! fitted models and their file format, the online estimator of the receiver's A-MPDU
//! aggregation level, the PI rate controller, and the authenticated wire format with the sans-IO
//! sender and receiver. No IO, no clock, no training, no capture parsing: the `aggrate` crate
//! holds those and re-exports this one.
//!
//! Layers (a module may use those above it): `time` → `airtime` → `features` → `model` →
//! `runtime` → `selfcal` → `control` → `transport` → `watch`.
//!
//! ```
//! use std::time::Duration;
//! use aggrate_core::model::ModelFile;
//! use aggrate_core::runtime::{OnlineEstimator, RxPacket};
//! use aggrate_core::Ts;
//!
//! let model = ModelFile::shipped()?; // or ModelFile::load(path)
//! let mut est = OnlineEstimator::from_model(&model, Duration::from_millis(100))?;
//! // Kernel receive times: bursts of 8 packets 12 µs apart, one burst every 400 µs.
//! let mut reports = Vec::new();
//! for i in 0..4_000u64 {
//!     let host = Ts::from_micros(i / 8 * 400 + i % 8 * 12);
//!     est.push(&RxPacket { host, seq: Some(i), len: 1472, ..RxPacket::default() });
//!     reports.extend(est.poll_report(host));
//! }
//! let r = &reports[0];
//! assert!((r.mean_agg - 8.0).abs() < 0.5, "mean level {}", r.mean_agg);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![warn(missing_docs)]
#![warn(unreachable_pub)]
#![deny(unsafe_code)]

pub mod airtime;
pub mod control;
/// The shipped bottleneck classifier's weights (kept under [`control`], which reads them).
pub use control::bottleneck_weights;
pub mod features;
pub mod level;
pub mod model;
pub mod runtime;
pub mod selfcal;
pub mod time;
pub mod transport;
pub mod watch;

pub use time::{Ts, Tsft};

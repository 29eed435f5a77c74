//! Fitted models and model files: [`aggrate_core::model`], re-exported, plus their ONNX export.

pub use aggrate_core::model::*;

#[cfg(feature = "onnx")]
pub mod onnx;

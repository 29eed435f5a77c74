//! Model files: one versioned, self-describing JSON document per model, carrying its
//! [`FeatureSpec`], scaler, coefficients, a training-data summary and metrics. Loading checks the
//! format, the version and the spec, and names what does not match.

#[cfg(feature = "onnx")]
pub mod onnx;

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::features::FeatureSpec;
use crate::train::{LinearSvmModel, LogisticModel, Predict, ThresholdModel};

/// File format tag.
pub const FORMAT: &str = "aggrate-model";
/// Current version.
pub const VERSION: u32 = 1;

/// The fitted estimator inside a model file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum EstimatorModel {
    /// Logistic regression.
    Logistic(LogisticModel),
    /// Linear SVM.
    #[serde(rename = "linear_svm")]
    LinearSvm(LinearSvmModel),
    /// m = 1 gap threshold.
    Threshold(ThresholdModel),
}

impl Predict for EstimatorModel {
    fn decision(&self, x: &[f64]) -> f64 {
        match self {
            EstimatorModel::Logistic(m) => m.decision(x),
            EstimatorModel::LinearSvm(m) => m.decision(x),
            EstimatorModel::Threshold(m) => m.decision(x),
        }
    }
}

/// What the model was trained on.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TrainingSummary {
    /// Rows.
    pub rows: u64,
    /// Positive rows (frame starts).
    pub positives: u64,
    /// Capture files.
    pub captures: Vec<String>,
    /// Send rates seen (Mb/s).
    pub rates_mbps: Vec<f64>,
}

/// A model file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelFile {
    /// Always [`FORMAT`].
    pub format: String,
    /// [`VERSION`] when written.
    pub version: u32,
    /// Feature layout the model expects.
    pub spec: FeatureSpec,
    /// The estimator.
    pub model: EstimatorModel,
    /// Training data.
    pub training: TrainingSummary,
    /// Headline metrics (CV), free-form.
    #[serde(default)]
    pub metrics: serde_json::Value,
}

/// Errors loading a model file.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// IO.
    #[error("{path}")]
    Io {
        /// Path.
        path: String,
        /// Error.
        source: std::io::Error,
    },
    /// Not JSON, or not our schema.
    #[error("{path}: not an aggrate model file (line {line}, column {column}): {what}")]
    Parse {
        /// Path.
        path: String,
        /// Line.
        line: usize,
        /// Column.
        column: usize,
        /// Detail.
        what: String,
    },
    /// Another format tag.
    #[error("{path}: field `format` is {found:?}, expected {FORMAT:?}")]
    Format {
        /// Path.
        path: String,
        /// Found.
        found: String,
    },
    /// Unsupported version.
    #[error("{path}: field `version` is {found}, this aggrate reads version {VERSION}")]
    Version {
        /// Path.
        path: String,
        /// Found.
        found: u32,
    },
    /// The spec differs from what the caller runs.
    #[error("{path}: field `spec` {found:?} differs from the expected {expected:?}")]
    Spec {
        /// Path.
        path: String,
        /// In the file.
        found: FeatureSpec,
        /// Expected.
        expected: FeatureSpec,
    },
}

impl ModelFile {
    /// A new file for `model`.
    pub fn new(spec: FeatureSpec, model: EstimatorModel, training: TrainingSummary) -> ModelFile {
        ModelFile {
            format: FORMAT.into(),
            version: VERSION,
            spec,
            model,
            training,
            metrics: serde_json::Value::Null,
        }
    }

    /// Compact JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Parse and check a model document (`path` names it in errors).
    pub fn from_json(text: &str, path: &str) -> Result<ModelFile, Error> {
        let v: serde_json::Value = serde_json::from_str(text).map_err(|e| Error::Parse {
            path: path.into(),
            line: e.line(),
            column: e.column(),
            what: e.to_string(),
        })?;
        let found = v.get("format").and_then(|f| f.as_str()).unwrap_or("").to_string();
        if found != FORMAT {
            return Err(Error::Format {
                path: path.into(),
                found,
            });
        }
        let version = v.get("version").and_then(|f| f.as_u64()).unwrap_or(0) as u32;
        if version != VERSION {
            return Err(Error::Version {
                path: path.into(),
                found: version,
            });
        }
        serde_json::from_value(v).map_err(|e| Error::Parse {
            path: path.into(),
            line: 0,
            column: 0,
            what: e.to_string(),
        })
    }

    /// Read a model file.
    pub fn load(path: &Path) -> Result<ModelFile, Error> {
        let p = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            path: p.clone(),
            source,
        })?;
        ModelFile::from_json(&text, &p)
    }

    /// Refuse a model whose feature spec differs from `expected`.
    pub fn check_spec(&self, expected: &FeatureSpec, path: &str) -> Result<(), Error> {
        if self.spec != *expected {
            return Err(Error::Spec {
                path: path.into(),
                found: self.spec,
                expected: *expected,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::Scaler;

    fn logistic() -> ModelFile {
        let spec = FeatureSpec::default();
        let w = spec.width();
        let m = LogisticModel {
            scaler: Scaler {
                mean: vec![10.0; w],
                std: vec![3.0; w],
            },
            w: vec![0.5; w],
            b: -1.0,
            iterations: 6,
        };
        ModelFile::new(
            spec,
            EstimatorModel::Logistic(m),
            TrainingSummary {
                rows: 10,
                ..TrainingSummary::default()
            },
        )
    }

    #[test]
    fn round_trip_and_refusals() {
        let f = logistic();
        let text = f.to_json();
        assert!(text.len() < 2048, "logistic model file is {} bytes", text.len());
        let back = ModelFile::from_json(&text, "m.json").unwrap();
        assert_eq!(back, f);
        let x = vec![12.0; 21];
        assert_eq!(back.model.decision(&x), f.model.decision(&x));
        let e = ModelFile::from_json(&text.replace("\"version\":1", "\"version\":9"), "m.json").unwrap_err();
        assert!(e.to_string().contains("version") && e.to_string().contains('9'));
        let e = ModelFile::from_json("{\"format\":\"onnx\"}", "m.json").unwrap_err();
        assert!(e.to_string().contains("format"));
        let e = ModelFile::from_json("{not json", "m.json").unwrap_err();
        assert!(e.to_string().contains("line 1"));
        let other = FeatureSpec {
            m: 10,
            ..FeatureSpec::default()
        };
        let e = back.check_spec(&other, "m.json").unwrap_err();
        assert!(e.to_string().contains("spec"));
    }
}

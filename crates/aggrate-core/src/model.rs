//! Model files: one versioned, self-describing JSON document per model, carrying its
//! [`FeatureSpec`], scaler, coefficients, a training-data summary and metrics. Loading checks the
//! format, the version and the spec, and names what does not match.

pub mod fitted;
pub mod mlp;

pub use fitted::{
    LinearSvmModel, LogisticModel, ParamError, Predict, Scaler, SvmLoss, SvrModel, SvrParams, ThresholdModel,
    ValidSvrParams,
};
pub use mlp::{LoadOffset, MlpModel};

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::features::FeatureSpec;

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
    /// Logistic per packet, corrected per slot by an RBF ε-SVR.
    #[serde(rename = "slot_svr")]
    SlotSvr(SlotSvrModel),
    /// One-hidden-layer perceptron.
    Mlp(MlpModel),
}

/// The slot-level correction: a packet model decides frame starts, and an RBF ε-SVR maps the
/// last d slots' `[mean, var, count]` of predicted levels (the spec's `slot_ns`, `d`) to the
/// corrected mean level of the latest slot.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SlotSvrModel {
    /// Per-packet classifier (on the spec's gap rows).
    pub base: LogisticModel,
    /// Per-slot regressor (on rows of `3·d` slot features).
    pub svr: SvrModel,
}

macro_rules! into_estimator {
    ($($t:ty => $v:ident),*) => {$(
        impl From<$t> for EstimatorModel {
            fn from(m: $t) -> EstimatorModel {
                EstimatorModel::$v(m)
            }
        }
    )*};
}
into_estimator!(LogisticModel => Logistic, LinearSvmModel => LinearSvm, ThresholdModel => Threshold, MlpModel => Mlp);

impl EstimatorModel {
    /// Short name of the kind, as in the file's `kind` tag.
    pub fn kind(&self) -> &'static str {
        match self {
            EstimatorModel::Logistic(_) => "logistic",
            EstimatorModel::LinearSvm(_) => "linear_svm",
            EstimatorModel::Threshold(_) => "threshold",
            EstimatorModel::SlotSvr(_) => "slot_svr",
            EstimatorModel::Mlp(_) => "mlp",
        }
    }

    /// Move the operating point: afterwards the decision is the old decision minus `t`, so the
    /// model calls a frame start where it used to score above `t` (what `aggrate calibrate`
    /// writes). Exact for the f64 models; the perceptron's f32 output bias rounds `t` to f32.
    /// A non-finite `t` is refused (the model is left as it was).
    pub fn shift(&mut self, t: f64) -> Result<(), ParamError> {
        if !t.is_finite() {
            return Err(ParamError {
                field: "shift",
                value: t,
                allowed: "a finite number",
            });
        }
        match self {
            EstimatorModel::Logistic(m) => m.b -= t,
            EstimatorModel::LinearSvm(m) => m.b -= t,
            EstimatorModel::Threshold(m) => m.threshold_us += t,
            EstimatorModel::SlotSvr(m) => m.base.b -= t,
            EstimatorModel::Mlp(m) => m.b2 -= t as f32,
        }
        Ok(())
    }

    /// The slot SVR, if the model has one.
    pub fn slot_svr(&self) -> Option<&SvrModel> {
        match self {
            EstimatorModel::SlotSvr(m) => Some(&m.svr),
            _ => None,
        }
    }
}

impl Predict for EstimatorModel {
    fn decision(&self, x: &[f64]) -> f64 {
        match self {
            EstimatorModel::Logistic(m) => m.decision(x),
            EstimatorModel::LinearSvm(m) => m.decision(x),
            EstimatorModel::Threshold(m) => m.decision(x),
            EstimatorModel::SlotSvr(m) => m.base.decision(x),
            EstimatorModel::Mlp(m) => m.decision(x),
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
    /// The learned level ([`crate::level`]): per report interval, the level from the receive
    /// timing beyond the airtime relation; the online estimator reports it when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level: Option<crate::level::LevelModel>,
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
    /// The document parses but its numbers do not fit together.
    #[error("{path}: field `{field}`: {what}")]
    Invalid {
        /// Path.
        path: String,
        /// Field.
        field: &'static str,
        /// What is wrong.
        what: String,
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

/// File name of the shipped model (models/ in the repository).
pub const SHIPPED_NAME: &str = "mlp8_m5_ctx1024.json";
/// The shipped model's JSON document.
pub const SHIPPED_JSON: &str = include_str!("../../../models/mlp8_m5_ctx1024.json");

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
            level: None,
        }
    }

    /// Set `metrics[key]` (metrics that are not a JSON object become one).
    pub fn set_metric(&mut self, key: &str, value: serde_json::Value) {
        match self.metrics.as_object_mut() {
            Some(m) => {
                m.insert(key.into(), value);
            }
            None => self.metrics = serde_json::json!({ key: value }),
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
        let file: ModelFile = serde_json::from_value(v).map_err(|e| Error::Parse {
            path: path.into(),
            line: 0,
            column: 0,
            what: e.to_string(),
        })?;
        file.validate().map_err(|(field, what)| Error::Invalid {
            path: path.into(),
            field,
            what,
        })?;
        Ok(file)
    }

    /// Widths and numbers that must agree with the spec (a hand-edited or truncated file would
    /// otherwise predict garbage quietly).
    fn validate(&self) -> Result<(), (&'static str, String)> {
        validate_model(&self.spec, &self.model)?;
        if let Some(l) = &self.level {
            l.check().map_err(|e| ("level", e.to_string()))?;
        }
        Ok(())
    }
}

/// Whether `model` fits `spec`: every width and number the model applies to rows of that spec
/// (the field that does not, and why). Model files are checked with it when loaded, and the
/// online estimator when built from a model and a spec given apart.
pub(crate) fn validate_model(spec: &FeatureSpec, model: &EstimatorModel) -> Result<(), (&'static str, String)> {
    {
        let spec = spec.check().map_err(|e| ("spec", e.to_string()))?;
        let w = spec.width();
        // Every scaler: the width of its spec, finite means, finite stds > 0 (a zero std makes
        // every standardised value inf or NaN).
        let scaler = |field: &'static str, sc: &Scaler, width: usize| {
            if sc.mean.len() != width || sc.std.len() != width {
                return Err((
                    field,
                    format!(
                        "{} means / {} stds for a spec of {width} features",
                        sc.mean.len(),
                        sc.std.len()
                    ),
                ));
            }
            if let Some(i) = sc.mean.iter().position(|v| !v.is_finite()) {
                return Err((field, format!("mean[{i}] = {} is not finite", sc.mean[i])));
            }
            if let Some(i) = sc.std.iter().position(|s| !(s.is_finite() && *s > 0.0)) {
                return Err((field, format!("std[{i}] = {}: must be finite and > 0", sc.std[i])));
            }
            Ok(())
        };
        let linear = |field, sc: &Scaler, coef: &[f64], b: f64| {
            scaler("model.scaler", sc, w)?;
            if coef.len() != w {
                return Err((field, format!("{} weights for a spec of {w} features", coef.len())));
            }
            if !coef.iter().chain([&b]).all(|v| v.is_finite()) {
                return Err((field, "non-finite weight".to_string()));
            }
            Ok(())
        };
        match model {
            EstimatorModel::Logistic(m) => linear("model.w", &m.scaler, &m.w, m.b),
            EstimatorModel::LinearSvm(m) => linear("model.w", &m.scaler, &m.w, m.b),
            EstimatorModel::Threshold(t) if !t.threshold_us.is_finite() => {
                Err(("model.threshold_us", "not a finite number".into()))
            }
            EstimatorModel::Threshold(_) => Ok(()),
            EstimatorModel::Mlp(m) => m.check(w).map_err(|e| ("model", e)),
            EstimatorModel::SlotSvr(m) => {
                linear("model.base.w", &m.base.scaler, &m.base.w, m.base.b)?;
                let sw = 3 * spec.d;
                let s = &m.svr;
                scaler("model.svr.scaler", &s.scaler, sw)?;
                if s.support.len() != s.coef.len() * sw {
                    return Err((
                        "model.svr.support",
                        format!(
                            "{} values for {} support vectors of {sw} slot features (d = {})",
                            s.support.len(),
                            s.coef.len(),
                            spec.d
                        ),
                    ));
                }
                let finite = s.support.iter().chain(&s.coef).chain([&s.b]).all(|v| v.is_finite());
                if !(finite && s.gamma.is_finite() && s.gamma > 0.0) {
                    return Err(("model.svr", "non-finite value or γ ≤ 0".into()));
                }
                Ok(())
            }
        }
    }
}

impl ModelFile {
    /// The shipped default estimator, embedded in the binary: the 8-unit perceptron on the last
    /// 5 gaps and a 1024-gap receiver context, trained on 50 receive paths (presets, random
    /// draws, real-kernel veth paths); models/README.md has its leave-one-receiver-out table.
    /// (A test checks that the embedded document parses; the error is there for the type.)
    pub fn shipped() -> Result<ModelFile, Error> {
        ModelFile::from_json(SHIPPED_JSON, SHIPPED_NAME)
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
    use Scaler;

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

    #[test]
    fn inconsistent_widths_are_refused_with_the_field() {
        let f = logistic();
        let mut v: serde_json::Value = serde_json::from_str(&f.to_json()).unwrap();
        v["model"]["w"].as_array_mut().unwrap().pop();
        let e = ModelFile::from_json(&v.to_string(), "short.json")
            .unwrap_err()
            .to_string();
        assert!(e.contains("short.json") && e.contains("model.w"), "{e}");
        let mut v: serde_json::Value = serde_json::from_str(&f.to_json()).unwrap();
        v["spec"]["m"] = 0.into();
        let e = ModelFile::from_json(&v.to_string(), "m0.json").unwrap_err().to_string();
        assert!(e.contains("spec"), "{e}");
    }

    #[test]
    fn every_scaler_and_n_max_are_checked_and_named() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../models/slot_svr_m20_sigma_d5.json"
        ))
        .unwrap();
        let good: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert!(ModelFile::from_json(&text, "svr.json").is_ok());
        let refuse = |edit: &dyn Fn(&mut serde_json::Value)| {
            let mut v = good.clone();
            edit(&mut v);
            ModelFile::from_json(&v.to_string(), "svr.json")
                .unwrap_err()
                .to_string()
        };
        let e = refuse(&|v| v["model"]["svr"]["scaler"]["std"][2] = 0.0.into());
        assert!(
            e.contains("svr.json") && e.contains("model.svr.scaler") && e.contains("std[2] = 0"),
            "{e}"
        );
        let e = refuse(&|v| v["model"]["svr"]["scaler"]["std"][0] = (-1.0).into());
        assert!(e.contains("model.svr.scaler") && e.contains("std[0] = -1"), "{e}");
        let e = refuse(&|v| {
            v["model"]["svr"]["scaler"]["mean"].as_array_mut().unwrap().pop();
        });
        assert!(e.contains("14 means / 15 stds for a spec of 15 features"), "{e}");
        let e = refuse(&|v| v["model"]["base"]["scaler"]["std"][20] = 0.0.into());
        assert!(e.contains("model.scaler") && e.contains("std[20]"), "{e}");
        let e = refuse(&|v| v["spec"]["n_max"] = 0.into());
        assert!(e.contains("n_max") && e.contains("got 0"), "{e}");
    }
}

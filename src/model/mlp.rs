//! A small perceptron, the non-linear estimator: `decision = w2 · ReLU(x·W1 + b1) + b2` on the
//! raw feature row x (the training scaler is folded into W1 and b1 when the model is made).
//!
//! Why non-linear: across receivers the gap that marks a frame start is not a fixed multiple of
//! anything one line can express — a per-MPDU receiver with interrupt moderation has large gaps
//! inside frames that a batching-free receiver never shows — so the model has to combine a
//! gap's rank within its receiver's recent history with the receiver's load and scale
//! (`features` module docs, context rows). Inference is f32, input-major so that the hidden
//! layer is one contiguous multiply-add per input (vectorised by the compiler): ~20–30 ns for 16
//! hidden units and 24 inputs.

use serde::{Deserialize, Serialize};

use crate::train::Predict;

/// A fitted one-hidden-layer perceptron (plain data; see the module docs).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MlpModel {
    /// Inputs (row width).
    pub inputs: usize,
    /// Hidden units.
    pub hidden: usize,
    /// First layer, input-major: `w1[j * hidden + k]` multiplies input j into unit k (scaler
    /// folded in).
    pub w1: Vec<f32>,
    /// Hidden biases.
    pub b1: Vec<f32>,
    /// Output weights.
    pub w2: Vec<f32>,
    /// Output bias.
    pub b2: f32,
    /// Training epochs run.
    pub epochs: u32,
}

/// Most hidden units (keeps inference within the per-packet budget and the stack buffer).
pub const MAX_HIDDEN: usize = 64;

impl MlpModel {
    /// Decision value in f32 (what both the offline scorer and the online estimator compute).
    #[inline]
    pub fn decision_f32(&self, x: &[f64]) -> f32 {
        let h = self.hidden.min(MAX_HIDDEN);
        let mut acc = [0f32; MAX_HIDDEN];
        let acc = &mut acc[..h];
        acc.copy_from_slice(&self.b1[..h]);
        for (j, &v) in x.iter().enumerate().take(self.inputs) {
            let v = v as f32;
            let w = &self.w1[j * self.hidden..j * self.hidden + h];
            for (a, w) in acc.iter_mut().zip(w) {
                *a += v * w;
            }
        }
        let mut o = self.b2;
        for (a, w) in acc.iter().zip(&self.w2) {
            o += a.max(0.0) * w;
        }
        o
    }

    /// Shapes and numbers that must agree (for the model-file check).
    pub fn check(&self, width: usize) -> Result<(), String> {
        if self.inputs != width {
            return Err(format!("{} inputs for a spec of {width} features", self.inputs));
        }
        if self.hidden == 0 || self.hidden > MAX_HIDDEN {
            return Err(format!("{} hidden units: 1..={MAX_HIDDEN}", self.hidden));
        }
        if self.w1.len() != self.inputs * self.hidden || self.b1.len() != self.hidden || self.w2.len() != self.hidden {
            return Err(format!(
                "{} / {} / {} weights for {} inputs × {} hidden units",
                self.w1.len(),
                self.b1.len(),
                self.w2.len(),
                self.inputs,
                self.hidden
            ));
        }
        let finite = self.w1.iter().chain(&self.b1).chain(&self.w2).chain([&self.b2]);
        if !finite.into_iter().all(|v| v.is_finite()) {
            return Err("non-finite weight".into());
        }
        Ok(())
    }
}

impl Predict for MlpModel {
    fn decision(&self, x: &[f64]) -> f64 {
        self.decision_f32(x) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn computes_relu_layers_input_major() {
        // Two inputs, two hidden units: h0 = relu(x0 − x1), h1 = relu(x1 − 1); out = h0 − 2·h1 + 0.5.
        let m = MlpModel {
            inputs: 2,
            hidden: 2,
            w1: vec![1.0, 0.0, -1.0, 1.0],
            b1: vec![0.0, -1.0],
            w2: vec![1.0, -2.0],
            b2: 0.5,
            epochs: 0,
        };
        assert_eq!(m.decision_f32(&[3.0, 1.0]), 2.0 + 0.0 + 0.5);
        assert_eq!(m.decision_f32(&[1.0, 3.0]), 0.0 - 4.0 + 0.5);
        assert!(m.predict_row(&[3.0, 1.0]) && !m.predict_row(&[1.0, 3.0]));
        assert!(m.check(2).is_ok());
        assert!(m.check(3).unwrap_err().contains("2 inputs"));
        let bad = MlpModel {
            b2: f32::NAN,
            ..m.clone()
        };
        assert!(bad.check(2).is_err());
    }
}

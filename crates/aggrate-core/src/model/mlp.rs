//! A small perceptron, the non-linear estimator: `decision = w2 · ReLU(x·W1 + b1) + b2 (+ skip·x)`
//! on the raw feature row x (the training scaler is folded into W1, b1 and the skip path when the
//! model is made).
//!
//! Why non-linear: across receivers the gap that marks a frame start is not a fixed multiple of
//! anything one line can express — a per-MPDU receiver with interrupt moderation has large gaps
//! inside frames that a batching-free receiver never shows — so the model has to combine a
//! gap's rank within its receiver's recent history with the receiver's load and scale
//! (`features` module docs, context rows).
//!
//! Inference is f32 and input-major, so the hidden layer is one contiguous multiply-add per input
//! (vectorised by the compiler; 8 and 16 hidden units have paths laid out for it). The last
//! `slow_inputs` inputs (a context row's horizon summary, refreshed every few packets) enter
//! first, as a [`MlpBase`]: the online estimator keeps it while they stay the same and only adds
//! the fast inputs per packet. The offline scorer computes the very same sums in the same order,
//! so both decide identically.

use serde::{Deserialize, Serialize};

use crate::model::Predict;

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
    /// A linear path from the inputs straight to the output (empty: none): the decision is
    /// `skip · x` plus the hidden layer's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skip: Vec<f32>,
    /// Trailing inputs that change slowly (summed first; see the module docs).
    #[serde(default)]
    pub slow_inputs: usize,
    /// Training epochs run.
    pub epochs: u32,
    /// A receiver's operating point as a function of its load, subtracted from the decision
    /// (`aggrate calibrate`; none as trained).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_offset: Option<LoadOffset>,
}

/// An offset on the decision that follows one slow input — the receiver context's mean log-gap
/// (`lmean`), which tracks the receiver's load: piecewise linear through `knots` (by increasing
/// input value), constant beyond the first and last. It enters with the slow inputs (the
/// [`MlpBase`]), so it costs nothing per packet.
///
/// Why a curve and not one number: a receiver's best threshold moves with its load, and not the
/// same way on every receiver (a per-MPDU path on timer ticks wants a higher one at 200 Mb/s and
/// a lower one at 400), so `calibrate` sets one per calibrated rate and interpolates between.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoadOffset {
    /// The input it follows (one of the slow inputs).
    pub input: usize,
    /// `[input value, offset]` pairs, input values strictly increasing.
    pub knots: Vec<[f64; 2]>,
}

/// Most knots of a [`LoadOffset`].
pub const MAX_KNOTS: usize = 64;

impl LoadOffset {
    /// The offset at input value `v` (the first knot's below it, the last's above; NaN gives
    /// the first knot's).
    pub fn at(&self, v: f64) -> f64 {
        let k = &self.knots;
        let Some(first) = k.first() else { return 0.0 };
        if v.is_nan() || v <= first[0] {
            return first[1];
        }
        // Knots are few (one per calibrated rate): a scan.
        for w in k.windows(2) {
            let ([x0, t0], [x1, t1]) = (w[0], w[1]);
            if v <= x1 {
                return t0 + (t1 - t0) * (v - x0) / (x1 - x0);
            }
        }
        k[k.len() - 1][1]
    }
}

/// Most hidden units (keeps inference within the per-packet budget and the stack buffer).
pub const MAX_HIDDEN: usize = 64;

/// The slow inputs' share of a decision: hidden pre-activations from the biases and the slow
/// inputs, and their part of the skip path.
#[derive(Clone, Debug, PartialEq)]
pub struct MlpBase {
    /// The slow inputs it was computed from (their bits, `key_len` of them), to tell when it is
    /// stale. No allocation: a base is remade every few packets online.
    key: [u64; MAX_SLOW],
    key_len: usize,
    hid: [f32; MAX_HIDDEN],
    lin: f32,
}

/// Most slow inputs.
pub const MAX_SLOW: usize = 8;

impl MlpModel {
    /// The base for a row whose slow inputs (the last `slow_inputs` values) are `slow`.
    pub fn base(&self, slow: &[f64]) -> MlpBase {
        let h = self.hidden.min(MAX_HIDDEN);
        let mut hid = [0f32; MAX_HIDDEN];
        hid[..h].copy_from_slice(&self.b1[..h]);
        let mut lin = 0f32;
        let off = self.inputs.saturating_sub(slow.len());
        for (i, &v) in slow.iter().enumerate() {
            let j = off + i;
            let v = v as f32;
            if let Some(w) = self.w1.get(j * self.hidden..j * self.hidden + h) {
                for (a, w) in hid[..h].iter_mut().zip(w) {
                    *a += v * w;
                }
            }
            lin += v * self.skip.get(j).copied().unwrap_or(0.0);
        }
        if let Some(o) = &self.load_offset {
            if let Some(&v) = o.input.checked_sub(off).and_then(|i| slow.get(i)) {
                lin -= o.at(v) as f32;
            }
        }
        let mut key = [0u64; MAX_SLOW];
        for (k, v) in key.iter_mut().zip(slow) {
            *k = v.to_bits();
        }
        MlpBase {
            key,
            key_len: slow.len().min(MAX_SLOW),
            hid,
            lin,
        }
    }

    /// Whether `base` was made from these slow inputs.
    pub fn base_fits(base: &MlpBase, slow: &[f64]) -> bool {
        base.key_len == slow.len() && base.key.iter().zip(slow).all(|(k, v)| *k == v.to_bits())
    }

    /// The decision from the fast inputs (the first `inputs − slow_inputs` values) and a base.
    #[inline]
    pub fn finish(&self, fast: &[f64], base: &MlpBase) -> f32 {
        match self.hidden {
            16 => self.finish_n::<16>(fast, base),
            8 => self.finish_n::<8>(fast, base),
            _ => self.finish_any(fast, base),
        }
    }

    /// Decision value in f32 (what both the offline scorer and the online estimator compute).
    #[inline]
    pub fn decision_f32(&self, x: &[f64]) -> f32 {
        let split = self.inputs.saturating_sub(self.slow_inputs).min(x.len());
        let base = self.base(&x[split..]);
        self.finish(&x[..split], &base)
    }

    fn finish_any(&self, fast: &[f64], base: &MlpBase) -> f32 {
        let h = self.hidden.min(MAX_HIDDEN);
        let mut acc = base.hid;
        for (&v, w) in fast.iter().zip(self.w1.chunks_exact(self.hidden.max(1))) {
            let v = v as f32;
            for (a, w) in acc[..h].iter_mut().zip(w) {
                *a += v * w;
            }
        }
        let mut o = self.b2;
        for (a, w) in acc[..h].iter().zip(&self.w2) {
            o += a.max(0.0) * w;
        }
        o + self.fast_linear(fast) + base.lin
    }

    /// H hidden units as one fixed-width array per accumulator (the compiler keeps each in
    /// H/4 SIMD registers and loads each input's weights as whole vectors; the earlier layout in
    /// groups of four with copied chunks spilled the accumulators to the stack and reloaded them
    /// lane by lane, a store-forwarding stall per input), the inputs in pairs into two
    /// accumulator sets (even and odd inputs: two independent chains of adds, half as long as
    /// one), each input converted once for the hidden layer and the skip path, and a tree for
    /// the output sum.
    #[inline]
    fn finish_n<const H: usize>(&self, fast: &[f64], base: &MlpBase) -> f32 {
        // Whole rows of H weights (no bounds checks inside the loops); `check` makes
        // `w1.len() == inputs · hidden` and `skip` empty or one per input.
        let (rows, _) = self.w1.as_chunks::<H>();
        let n = fast.len().min(rows.len());
        let (fast, rows) = (&fast[..n], &rows[..n]);
        let no_skip = [0f32; 2];
        let mut a: [f32; H] = *base.hid.first_chunk::<H>().unwrap_or(&[0.0; H]);
        let mut b = [0f32; H];
        let mut lin = [0f32; 2];
        let (pairs, odd) = fast.as_chunks::<2>();
        let (wpairs, wodd) = rows.as_chunks::<2>();
        let (spairs, sodd) = self.skip.get(..n).unwrap_or(&[]).as_chunks::<2>();
        for (k, (v, w)) in pairs.iter().zip(wpairs).enumerate() {
            let (v0, v1) = (v[0] as f32, v[1] as f32);
            for l in 0..H {
                a[l] += v0 * w[0][l];
                b[l] += v1 * w[1][l];
            }
            let s = spairs.get(k).unwrap_or(&no_skip);
            lin[0] += v0 * s[0];
            lin[1] += v1 * s[1];
        }
        // An odd input count: the last input into the even set.
        if let (Some(&v), Some(w)) = (odd.first(), wodd.first()) {
            let v = v as f32;
            for l in 0..H {
                a[l] += v * w[l];
            }
            lin[0] += v * sodd.first().copied().unwrap_or(0.0);
        }
        let w2: &[f32; H] = self.w2.first_chunk::<H>().unwrap_or(&[0.0; H]);
        let mut s = [0f32; 4];
        for l in 0..H {
            s[l % 4] += (a[l] + b[l]).max(0.0) * w2[l];
        }
        self.b2 + ((s[0] + s[1]) + (s[2] + s[3])) + (lin[0] + lin[1]) + base.lin
    }

    #[inline]
    fn fast_linear(&self, fast: &[f64]) -> f32 {
        let mut lin = [0f32; 2];
        for (j, (&v, s)) in fast.iter().zip(&self.skip).enumerate() {
            lin[j & 1] += v as f32 * s;
        }
        lin[0] + lin[1]
    }

    /// Shapes and numbers that must agree (for the model-file check).
    pub fn check(&self, width: usize) -> Result<(), String> {
        if self.inputs != width {
            return Err(format!("{} inputs for a spec of {width} features", self.inputs));
        }
        if self.hidden == 0 || self.hidden > MAX_HIDDEN {
            return Err(format!("{} hidden units: 1..={MAX_HIDDEN}", self.hidden));
        }
        if self.slow_inputs > self.inputs || self.slow_inputs > MAX_SLOW {
            return Err(format!(
                "{} slow inputs of {} (at most {MAX_SLOW})",
                self.slow_inputs, self.inputs
            ));
        }
        if self.w1.len() != self.inputs * self.hidden
            || self.b1.len() != self.hidden
            || self.w2.len() != self.hidden
            || !(self.skip.is_empty() || self.skip.len() == self.inputs)
        {
            return Err(format!(
                "{} / {} / {} / {} weights for {} inputs × {} hidden units",
                self.w1.len(),
                self.b1.len(),
                self.w2.len(),
                self.skip.len(),
                self.inputs,
                self.hidden
            ));
        }
        let finite = self
            .w1
            .iter()
            .chain(&self.b1)
            .chain(&self.w2)
            .chain(&self.skip)
            .chain([&self.b2]);
        if !finite.into_iter().all(|v| v.is_finite()) {
            return Err("non-finite weight".into());
        }
        match &self.load_offset {
            Some(o) => self.check_offset(o),
            None => Ok(()),
        }
    }

    /// Whether `o` can be this model's load offset: it follows one of the slow inputs, with
    /// 1..=[`MAX_KNOTS`] finite knots by strictly increasing input value (the shapes checked
    /// first, by [`MlpModel::check`]).
    pub fn check_offset(&self, o: &LoadOffset) -> Result<(), String> {
        let first_slow = self.inputs.saturating_sub(self.slow_inputs);
        if !(first_slow..self.inputs).contains(&o.input) {
            return Err(format!(
                "load_offset follows input {}, which is not one of the slow inputs {first_slow}..{}",
                o.input, self.inputs
            ));
        }
        if o.knots.is_empty() || o.knots.len() > MAX_KNOTS {
            return Err(format!("load_offset has {} knots: 1..={MAX_KNOTS}", o.knots.len()));
        }
        if !o.knots.iter().flatten().all(|v| v.is_finite()) || o.knots.windows(2).any(|w| w[1][0] <= w[0][0]) {
            return Err("load_offset knots must be finite with strictly increasing input values".into());
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

    fn small() -> MlpModel {
        // Two inputs, two hidden units: h0 = relu(x0 − x1), h1 = relu(x1 − 1); out = h0 − 2·h1 + 0.5.
        MlpModel {
            inputs: 2,
            hidden: 2,
            w1: vec![1.0, 0.0, -1.0, 1.0],
            b1: vec![0.0, -1.0],
            w2: vec![1.0, -2.0],
            b2: 0.5,
            skip: Vec::new(),
            slow_inputs: 0,
            epochs: 0,
            load_offset: None,
        }
    }

    #[test]
    fn computes_relu_layers_input_major() {
        let m = small();
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
        let with_skip = MlpModel {
            skip: vec![0.25, 0.0],
            ..m.clone()
        };
        assert_eq!(with_skip.decision_f32(&[3.0, 1.0]), 2.5 + 0.75);
        // The second input as a slow one: same decisions, and a base is reusable.
        let slow = MlpModel {
            slow_inputs: 1,
            ..with_skip.clone()
        };
        assert_eq!(slow.decision_f32(&[3.0, 1.0]), with_skip.decision_f32(&[3.0, 1.0]));
        let base = slow.base(&[1.0]);
        assert!(MlpModel::base_fits(&base, &[1.0]) && !MlpModel::base_fits(&base, &[1.5]));
        assert_eq!(slow.finish(&[3.0], &base), slow.decision_f32(&[3.0, 1.0]));
        assert_eq!(slow.finish(&[2.0], &base), slow.decision_f32(&[2.0, 1.0]));
    }

    #[test]
    fn unrolled_widths_agree_with_the_general_path() {
        for h in [8usize, 16, 5] {
            let d = 7;
            let m = MlpModel {
                inputs: d,
                hidden: h,
                w1: (0..d * h).map(|i| ((i * 37 % 11) as f32 - 5.0) / 7.0).collect(),
                b1: (0..h).map(|i| (i as f32 - 2.0) / 3.0).collect(),
                w2: (0..h).map(|i| ((i * 5 % 7) as f32 - 3.0) / 4.0).collect(),
                b2: 0.1,
                skip: (0..d).map(|i| i as f32 / 10.0).collect(),
                slow_inputs: 3,
                epochs: 0,
                load_offset: None,
            };
            for r in 0..50 {
                let x: Vec<f64> = (0..d).map(|j| ((r * 13 + j * 7) % 17) as f64 / 3.0 - 2.0).collect();
                let split = d - 3;
                let base = m.base(&x[split..]);
                let fast = m.finish_any(&x[..split], &base);
                let unrolled = m.finish(&x[..split], &base);
                assert!((fast - unrolled).abs() < 1e-4, "h {h}: {fast} vs {unrolled}");
            }
        }
    }

    #[test]
    fn a_load_offset_follows_its_slow_input_piecewise_linearly() {
        let o = LoadOffset {
            input: 1,
            knots: vec![[1.0, 0.5], [3.0, -1.5], [4.0, 2.5]],
        };
        // Hand-computed: flat outside, linear between the knots.
        for (v, want) in [
            (0.0, 0.5),
            (1.0, 0.5),
            (2.0, -0.5),
            (3.0, -1.5),
            (3.5, 0.5),
            (4.0, 2.5),
            (9.0, 2.5),
            (f64::NAN, 0.5),
        ] {
            assert!((o.at(v) - want).abs() < 1e-12, "at {v}: {} vs {want}", o.at(v));
        }
        // In the model: the decision moves by exactly the offset at the row's slow input, and the
        // base carries it (the online estimator's path equals the offline one).
        let plain = MlpModel {
            slow_inputs: 1,
            ..small()
        };
        let shifted = MlpModel {
            load_offset: Some(o.clone()),
            ..plain.clone()
        };
        assert!(shifted.check(2).is_ok());
        for x in [[3.0, 1.0], [1.0, 3.0], [2.0, 2.0], [0.5, 3.5]] {
            let want = plain.decision_f32(&x) - o.at(x[1]) as f32;
            assert!((shifted.decision_f32(&x) - want).abs() < 1e-6, "{x:?}");
            let base = shifted.base(&x[1..]);
            assert_eq!(shifted.finish(&x[..1], &base), shifted.decision_f32(&x));
        }
        // It must follow a slow input, with sorted finite knots.
        let bad = |o: LoadOffset| {
            MlpModel {
                load_offset: Some(o),
                ..plain.clone()
            }
            .check(2)
            .unwrap_err()
        };
        assert!(bad(LoadOffset { input: 0, ..o.clone() }).contains("not one of the slow inputs"));
        assert!(bad(LoadOffset {
            input: 1,
            knots: vec![]
        })
        .contains("knots"));
        assert!(bad(LoadOffset {
            input: 1,
            knots: vec![[2.0, 0.0], [1.0, 0.0]]
        })
        .contains("increasing"));
        assert!(bad(LoadOffset {
            input: 1,
            knots: vec![[1.0, f64::INFINITY]]
        })
        .contains("finite"));
        // It survives the model file.
        let json = serde_json::to_string(&shifted).unwrap();
        assert_eq!(serde_json::from_str::<MlpModel>(&json).unwrap(), shifted);
        assert!(!serde_json::to_string(&plain).unwrap().contains("load_offset"));
    }
}

//! Training the perceptron ([`MlpModel`]): minibatch Adam on the (class-weighted) logistic loss
//! with decoupled weight decay, in f32, on standardised rows; the scaler is folded into the first
//! layer at the end so the model takes raw rows.
//!
//! Deterministic: initial weights and the row order of every epoch come from a ChaCha8 RNG seeded
//! by [`MlpParams::seed`]; one thread. Each epoch visits at most `max_rows_per_epoch` rows (a
//! fresh random subset when the data is larger), so training time does not grow with the
//! dataset past that point.

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::{Error, Scaler};
use crate::dataset::{Dataset, RowSet};
use crate::model::mlp::{MlpModel, MAX_HIDDEN};

/// Hyper-parameters of the perceptron.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct MlpParams {
    /// Hidden units (1..=64).
    pub hidden: usize,
    /// Passes.
    pub epochs: u32,
    /// Rows per step.
    pub batch: usize,
    /// Adam step size (decays linearly to a tenth over the epochs).
    pub lr: f64,
    /// Decoupled weight decay per step (× lr).
    pub weight_decay: f64,
    /// Weight the classes equally.
    pub balanced: bool,
    /// Rows visited per epoch at most.
    pub max_rows_per_epoch: usize,
    /// Seed of the initial weights and the row order.
    pub seed: u64,
    /// Add a linear path from the inputs to the output (not decayed): the hidden layer then
    /// models what a line misses.
    pub skip: bool,
    /// Trailing inputs that change slowly (a context row's horizon summary), recorded in the
    /// model so the online estimator can keep their share (see [`MlpModel`]).
    pub slow_inputs: usize,
    /// How the weights are fitted: minibatch Adam (`epochs`, `batch`, `lr`), or full-batch
    /// L-BFGS (`max_iter`; what a cluster runs, one aggregation per evaluation).
    #[serde(default)]
    pub solver: MlpSolver,
    /// L-BFGS: accepted steps at most.
    #[serde(default = "default_max_iter")]
    pub max_iter: usize,
}

fn default_max_iter() -> usize {
    200
}

/// The perceptron's optimiser.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MlpSolver {
    /// Minibatch Adam with decoupled weight decay, in f32 (the default; one machine).
    #[default]
    Adam,
    /// Full-batch L-BFGS on the loss plus an L2 penalty, sums in f64 (`python -m aggrate.spark`).
    Lbfgs,
}

impl Default for MlpParams {
    fn default() -> Self {
        MlpParams {
            hidden: 16,
            epochs: 4,
            batch: 256,
            lr: 3e-3,
            weight_decay: 1e-4,
            balanced: false,
            max_rows_per_epoch: 1_000_000,
            seed: 1,
            skip: false,
            slow_inputs: 0,
            solver: MlpSolver::Adam,
            max_iter: default_max_iter(),
        }
    }
}

/// Checked [`MlpParams`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ValidMlpParams(MlpParams);

impl ValidMlpParams {
    /// The parameters.
    pub fn get(&self) -> &MlpParams {
        &self.0
    }
}

impl MlpParams {
    /// Check ranges.
    pub fn check(self) -> Result<ValidMlpParams, Error> {
        let bad = |name, value, allowed| Err(Error::BadParam { name, value, allowed });
        if !(1..=MAX_HIDDEN).contains(&self.hidden) {
            return bad("hidden", self.hidden as f64, "1..=64");
        }
        if !(1..=1000).contains(&self.epochs) {
            return bad("epochs", self.epochs as f64, "1..=1000");
        }
        if !(1..=65_536).contains(&self.batch) {
            return bad("batch", self.batch as f64, "1..=65536");
        }
        if !(self.lr > 0.0 && self.lr <= 1.0) {
            return bad("lr", self.lr, "> 0 and <= 1");
        }
        if !(self.weight_decay >= 0.0 && self.weight_decay < 1.0) {
            return bad("weight_decay", self.weight_decay, ">= 0 and < 1");
        }
        if self.max_rows_per_epoch < self.batch {
            return bad("max_rows_per_epoch", self.max_rows_per_epoch as f64, ">= batch");
        }
        if !(1..=10_000).contains(&self.max_iter) {
            return bad("max_iter", self.max_iter as f64, "1..=10000");
        }
        Ok(ValidMlpParams(self))
    }
}

/// Where each parameter of a perceptron lives in one vector: W1 (unit-major, h × d), b1 (h),
/// w2 (h), b2 (1), then the skip path (d, or none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Inputs.
    pub d: usize,
    /// Hidden units.
    pub h: usize,
    /// Whether the linear skip path is there.
    pub skip: bool,
}

impl Layout {
    /// Offsets of b1, w2, b2 and the skip path.
    pub fn offsets(&self) -> (usize, usize, usize, usize) {
        let (h, d) = (self.h, self.d);
        (h * d, h * d + h, h * d + 2 * h, h * d + 2 * h + 1)
    }

    /// Parameters in all.
    pub fn params(&self) -> usize {
        self.offsets().3 + if self.skip { self.d } else { 0 }
    }

    /// The initial weights, drawn from `rng`: Glorot-uniform layers, b1 = 0.01, b2 the log-odds
    /// of `pos` starts in `n` rows, the skip path zero.
    pub fn init(&self, rng: &mut ChaCha8Rng, n: usize, pos: usize) -> Vec<f32> {
        let (o_b1, o_w2, o_b2, _) = self.offsets();
        let mut w = vec![0f32; self.params()];
        let lim1 = (6.0 / self.d as f64).sqrt();
        for x in &mut w[..o_b1] {
            *x = ((rng.random::<f64>() * 2.0 - 1.0) * lim1) as f32;
        }
        for x in &mut w[o_b1..o_w2] {
            *x = 0.01;
        }
        let lim2 = (6.0 / (self.h as f64 + 1.0)).sqrt();
        for x in &mut w[o_w2..o_b2] {
            *x = ((rng.random::<f64>() * 2.0 - 1.0) * lim2) as f32;
        }
        w[o_b2] = ((pos as f64) / ((n - pos) as f64)).ln() as f32;
        w
    }

    /// Which parameters are decayed (W1 and w2).
    pub fn decay_mask(&self) -> Vec<bool> {
        let (o_b1, o_w2, o_b2, _) = self.offsets();
        (0..self.params())
            .map(|i| i < o_b1 || (o_w2..o_b2).contains(&i))
            .collect()
    }

    /// The model of parameters `w` fitted on rows standardised by `scaler`: the scaler folded
    /// into the first layer (unit k sees Σ_j w_kj (x_j − μ_j)/σ_j + b_k) and the skip path, so
    /// the model takes raw rows. Non-finite weights are an error naming `lr` (the step size that
    /// let them diverge).
    pub fn model(
        &self,
        w: &[f32],
        scaler: &Scaler,
        slow_inputs: usize,
        epochs: u32,
        lr: f64,
    ) -> Result<MlpModel, Error> {
        let (d, h) = (self.d, self.h);
        let (o_b1, o_w2, o_b2, o_skip) = self.offsets();
        let mut w1 = vec![0f32; d * h];
        let mut b1 = vec![0f32; h];
        for k in 0..h {
            let mut b = w[o_b1 + k] as f64;
            for j in 0..d {
                let wf = w[k * d + j] as f64 / scaler.std[j];
                w1[j * h + k] = wf as f32;
                b -= wf * scaler.mean[j];
            }
            b1[k] = b as f32;
        }
        let mut b2 = w[o_b2] as f64;
        let mut skip = Vec::new();
        if self.skip {
            for j in 0..d {
                let wf = w[o_skip + j] as f64 / scaler.std[j];
                skip.push(wf as f32);
                b2 -= wf * scaler.mean[j];
            }
        }
        let model = MlpModel {
            inputs: d,
            hidden: h,
            w1,
            b1,
            w2: w[o_w2..o_b2].to_vec(),
            b2: b2 as f32,
            skip,
            slow_inputs: slow_inputs.min(d),
            epochs,
            load_offset: None,
        };
        if model.check(d).is_err() {
            return Err(Error::BadParam {
                name: "lr",
                value: lr,
                allowed: "small enough that training does not diverge (weights became non-finite)",
            });
        }
        Ok(model)
    }
}

struct Adam {
    m: Vec<f32>,
    v: Vec<f32>,
    t: i32,
}

impl Adam {
    fn new(n: usize) -> Adam {
        Adam {
            m: vec![0.0; n],
            v: vec![0.0; n],
            t: 0,
        }
    }
    fn step(&mut self, w: &mut [f32], g: &[f32], lr: f32, decay: f32, decay_mask: &[bool]) {
        self.t += 1;
        let (b1, b2) = (0.9f32, 0.999f32);
        let c1 = 1.0 - b1.powi(self.t);
        let c2 = 1.0 - b2.powi(self.t);
        for i in 0..w.len() {
            self.m[i] = b1 * self.m[i] + (1.0 - b1) * g[i];
            self.v[i] = b2 * self.v[i] + (1.0 - b2) * g[i] * g[i];
            let mh = self.m[i] / c1;
            let vh = self.v[i] / c2;
            if decay_mask[i] {
                w[i] -= lr * decay * w[i];
            }
            w[i] -= lr * mh / (vh.sqrt() + 1e-8);
        }
    }
}

/// Fit a perceptron on the rows `rows` of `data`.
///
/// Longer than the house's 120 lines on purpose: the training kernel (standardise, initialise,
/// then per epoch the shuffled mini-batches' forward pass, back-propagation in two lanes and the
/// Adam step) over buffers allocated once; split, each piece would take the same buffers and
/// the epoch's order would no longer read top to bottom.
pub fn fit_mlp(data: &Dataset, rows: &RowSet, p: &ValidMlpParams) -> Result<MlpModel, Error> {
    if p.get().solver == MlpSolver::Lbfgs {
        return super::lbfgs::fit_mlp_lbfgs(data, rows, p);
    }
    let p = p.get();
    let n = rows.len();
    let pos = rows.iter().filter(|&i| data.y[i]).count();
    if n < 2 {
        return Err(Error::TooFewRows { rows: n, need: 2 });
    }
    if pos == 0 || pos == n {
        return Err(Error::OneClass {
            rows: n,
            positives: pos,
        });
    }
    let d = data.d;
    let h = p.hidden;
    let scaler = super::fit_scaler_set(data, rows);
    let (w_pos, w_neg) = if p.balanced {
        (n as f32 / (2.0 * pos as f32), n as f32 / (2.0 * (n - pos) as f32))
    } else {
        (1.0, 1.0)
    };
    let mut rng = ChaCha8Rng::seed_from_u64(p.seed);
    let layout = Layout { d, h, skip: p.skip };
    let (o_b1, o_w2, o_b2, o_skip) = layout.offsets();
    let np = layout.params();
    let mut w = layout.init(&mut rng, n, pos);
    let decay_mask = layout.decay_mask();
    let mut adam = Adam::new(np);
    let mut order: Vec<usize> = rows.iter().collect();
    let mut grad = vec![0f32; np];
    let mut z = vec![0f32; d];
    let mut zb = vec![0f64; d];
    let mut pre = vec![0f32; h];
    let per_epoch = p.max_rows_per_epoch.min(n);
    let total_steps = (p.epochs as usize * per_epoch).div_ceil(p.batch).max(1);
    let mut step = 0usize;
    for _ in 0..p.epochs {
        // Fisher–Yates on the first `per_epoch` positions: a fresh random subset in random order.
        for i in 0..per_epoch {
            let j = i + rng.random_range(0..n - i);
            order.swap(i, j);
        }
        for chunk in order[..per_epoch].chunks(p.batch) {
            grad.iter_mut().for_each(|g| *g = 0.0);
            for &r in chunk {
                scaler.standardize(data.row(r), &mut zb);
                for (a, b) in z.iter_mut().zip(&zb) {
                    *a = *b as f32;
                }
                let mut out = w[o_b2];
                for (a, b) in w[o_skip..].iter().zip(&z) {
                    out += a * b;
                }
                for k in 0..h {
                    let wk = &w[k * d..(k + 1) * d];
                    let mut s = w[o_b1 + k];
                    for (a, b) in wk.iter().zip(&z) {
                        s += a * b;
                    }
                    pre[k] = s;
                    out += s.max(0.0) * w[o_w2 + k];
                }
                let y = data.y[r];
                let prob = 1.0 / (1.0 + (-out).exp());
                let g = (prob - if y { 1.0 } else { 0.0 }) * if y { w_pos } else { w_neg };
                grad[o_b2] += g;
                for (a, b) in grad[o_skip..].iter_mut().zip(&z) {
                    *a += g * b;
                }
                for k in 0..h {
                    if pre[k] > 0.0 {
                        grad[o_w2 + k] += g * pre[k];
                        let gh = g * w[o_w2 + k];
                        grad[o_b1 + k] += gh;
                        let gk = &mut grad[k * d..(k + 1) * d];
                        for (a, b) in gk.iter_mut().zip(&z) {
                            *a += gh * b;
                        }
                    }
                }
            }
            let inv = 1.0 / chunk.len() as f32;
            grad.iter_mut().for_each(|g| *g *= inv);
            let frac = step as f64 / total_steps as f64;
            let lr = (p.lr * (1.0 - 0.9 * frac)) as f32;
            adam.step(&mut w, &grad, lr, p.weight_decay as f32, &decay_mask);
            step += 1;
        }
    }
    layout.model(&w, &scaler, p.slow_inputs, p.epochs, p.lr)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::train::Predict;

    /// Rows of two features where the class is an XOR of the signs: no line separates it.
    pub(in crate::train) fn xor_rows(n: usize, seed: u64) -> Dataset {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut d = Dataset::new(2);
        for _ in 0..n {
            let a = rng.random::<f64>() * 2.0 - 1.0;
            let b = rng.random::<f64>() * 2.0 - 1.0;
            d.push(&[a * 10.0 + 50.0, b], (a > 0.0) != (b > 0.0), 0, 100.0, 1);
        }
        d
    }

    #[test]
    fn learns_what_a_line_cannot_and_is_deterministic() {
        let data = xor_rows(20_000, 3);
        let p = MlpParams {
            hidden: 8,
            epochs: 20,
            ..MlpParams::default()
        }
        .check()
        .unwrap();
        let all = RowSet::all(data.len());
        let m = fit_mlp(&data, &all, &p).unwrap();
        let test = xor_rows(2_000, 4);
        let acc = (0..test.len())
            .filter(|&i| m.predict_row(test.row(i)) == test.y[i])
            .count() as f64
            / test.len() as f64;
        assert!(acc > 0.95, "held-out accuracy {acc}");
        assert_eq!(m, fit_mlp(&data, &all, &p).unwrap(), "same seed, same model");
        let other = fit_mlp(&data, &all, &MlpParams { seed: 2, ..*p.get() }.check().unwrap()).unwrap();
        assert_ne!(m, other);
        // A logistic model on the same rows stays near chance.
        let lp = crate::train::LogisticParams::default().check().unwrap();
        let lm = crate::train::fit_logistic(&data, &lp).unwrap();
        let lacc = (0..test.len())
            .filter(|&i| lm.predict_row(test.row(i)) == test.y[i])
            .count() as f64
            / test.len() as f64;
        assert!(lacc < 0.7, "logistic accuracy {lacc}");
    }

    #[test]
    fn params_are_checked_and_one_class_is_refused() {
        assert!(MlpParams {
            hidden: 0,
            ..MlpParams::default()
        }
        .check()
        .is_err());
        assert!(MlpParams {
            lr: f64::NAN,
            ..MlpParams::default()
        }
        .check()
        .is_err());
        let mut d = Dataset::new(1);
        for i in 0..10 {
            d.push(&[i as f64], false, 0, 1.0, 1);
        }
        let p = MlpParams::default().check().unwrap();
        assert!(matches!(fit_mlp(&d, &RowSet::all(10), &p), Err(Error::OneClass { .. })));
    }
}

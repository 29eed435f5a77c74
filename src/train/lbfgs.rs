//! The perceptron trained full-batch: L-BFGS on the mean class-weighted logistic loss plus an L2
//! penalty, every step one pass over all rows whose sums add across any split of the rows.
//!
//! Minibatch Adam ([`super::fit_mlp`]'s default) takes thousands of small steps: the right tool on
//! one machine, the wrong one on a cluster, where each step would be a job. Here each evaluation
//! is one pass — [`mlp_sums`] over some rows, added up by the caller — so `aggrate train --model
//! mlp --solver lbfgs` runs it on this machine's threads and `python -m aggrate.spark train` as
//! one Spark aggregation per evaluation, through the same [`MlpLbfgs`] steps. Sums are in f64,
//! so adding them in another order moves the model by rounding only.

use std::collections::VecDeque;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::mlp::{Layout, ValidMlpParams};
use super::{Error, Scaler};
use crate::model::mlp::MlpModel;

/// Correction pairs L-BFGS keeps.
const MEMORY: usize = 10;
/// Stop when the largest gradient entry is below this.
const GTOL: f64 = 1e-7;
/// Stop when a step lowers the objective by less than this share of it.
const FTOL: f64 = 1e-10;

/// Limited-memory BFGS as a state machine: [`Lbfgs::ask`] names the point whose objective and
/// gradient it needs next, [`Lbfgs::tell`] takes them. Backtracking (Armijo) line search from a
/// unit step; the first direction is the gradient scaled to unit length. Deterministic.
#[derive(Clone, Debug)]
pub struct Lbfgs {
    x: Vec<f64>,
    trial: Vec<f64>,
    f: f64,
    g: Vec<f64>,
    mem: VecDeque<(Vec<f64>, Vec<f64>, f64)>,
    dir: Vec<f64>,
    slope: f64,
    t: f64,
    started: bool,
    iterations: usize,
    evaluations: usize,
    max_iter: usize,
    done: bool,
}

impl Lbfgs {
    /// From `x0`, at most `max_iter` accepted steps.
    pub fn new(x0: Vec<f64>, max_iter: usize) -> Lbfgs {
        let n = x0.len();
        Lbfgs {
            trial: x0.clone(),
            x: x0,
            f: f64::INFINITY,
            g: vec![0.0; n],
            mem: VecDeque::new(),
            dir: vec![0.0; n],
            slope: 0.0,
            t: 1.0,
            started: false,
            iterations: 0,
            evaluations: 0,
            max_iter,
            done: false,
        }
    }

    /// The point to evaluate next, or `None` when done.
    pub fn ask(&self) -> Option<&[f64]> {
        (!self.done).then_some(&self.trial[..])
    }

    /// The best point so far and its objective.
    pub fn best(&self) -> (&[f64], f64) {
        (&self.x, self.f)
    }

    /// Accepted steps and evaluations so far.
    pub fn counts(&self) -> (usize, usize) {
        (self.iterations, self.evaluations)
    }

    /// The objective `f` and gradient `g` at the point [`Lbfgs::ask`] named.
    pub fn tell(&mut self, f: f64, g: Vec<f64>) {
        if self.done {
            return;
        }
        self.evaluations += 1;
        if !self.started {
            self.started = true;
            (self.f, self.g) = (f, g);
            if !f.is_finite() || max_abs(&self.g) < GTOL {
                self.done = true;
            } else {
                self.direction();
            }
            return;
        }
        if !(f.is_finite() && f <= self.f + 1e-4 * self.t * self.slope) {
            self.t *= 0.5;
            if self.t < 1e-12 {
                self.done = true;
            } else {
                self.place_trial();
            }
            return;
        }
        let s: Vec<f64> = self.trial.iter().zip(&self.x).map(|(a, b)| a - b).collect();
        let y: Vec<f64> = g.iter().zip(&self.g).map(|(a, b)| a - b).collect();
        let sy = dot(&s, &y);
        if sy > 1e-12 * dot(&y, &y).sqrt() * dot(&s, &s).sqrt() && sy > 0.0 {
            if self.mem.len() == MEMORY {
                self.mem.pop_front();
            }
            self.mem.push_back((s, y, 1.0 / sy));
        }
        let drop = self.f - f;
        std::mem::swap(&mut self.x, &mut self.trial);
        (self.f, self.g) = (f, g);
        self.iterations += 1;
        if self.iterations >= self.max_iter || max_abs(&self.g) < GTOL || drop <= FTOL * f.abs().max(1.0) {
            self.done = true;
        } else {
            self.direction();
        }
    }

    /// The two-loop recursion's direction from the current gradient, a unit trial step.
    fn direction(&mut self) {
        let mut q = self.g.clone();
        let mut alpha = Vec::with_capacity(self.mem.len());
        for (s, y, rho) in self.mem.iter().rev() {
            let a = rho * dot(s, &q);
            q.iter_mut().zip(y).for_each(|(qi, yi)| *qi -= a * yi);
            alpha.push(a);
        }
        let gamma = match self.mem.back() {
            Some((s, y, _)) => dot(s, y) / dot(y, y),
            None => 1.0 / dot(&self.g, &self.g).sqrt(),
        };
        q.iter_mut().for_each(|v| *v *= gamma);
        for ((s, y, rho), a) in self.mem.iter().zip(alpha.iter().rev()) {
            let b = rho * dot(y, &q);
            q.iter_mut().zip(s).for_each(|(qi, si)| *qi += (a - b) * si);
        }
        self.dir = q.iter().map(|v| -v).collect();
        self.slope = dot(&self.g, &self.dir);
        if self.slope.is_nan() || self.slope >= 0.0 {
            // Not a descent direction (curvature pairs gone stale): start over from the gradient.
            self.mem.clear();
            let scale = 1.0 / dot(&self.g, &self.g).sqrt();
            self.dir = self.g.iter().map(|v| -v * scale).collect();
            self.slope = dot(&self.g, &self.dir);
        }
        self.t = 1.0;
        self.place_trial();
    }

    fn place_trial(&mut self) {
        for ((t, x), d) in self.trial.iter_mut().zip(&self.x).zip(&self.dir) {
            *t = x + self.t * d;
        }
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn max_abs(v: &[f64]) -> f64 {
    v.iter().fold(0.0f64, |a, x| a.max(x.abs()))
}

/// The sums of one pass of the perceptron over some rows: Σ class-weighted log loss and its
/// gradient in the parameters (the layout's order). Sums over disjoint rows add.
#[derive(Clone, Debug, PartialEq)]
pub struct MlpSums {
    /// Σ loss.
    pub loss: f64,
    /// Σ gradient.
    pub g: Vec<f64>,
}

impl MlpSums {
    /// Zeros for a layout.
    pub fn zeros(layout: &Layout) -> MlpSums {
        MlpSums {
            loss: 0.0,
            g: vec![0.0; layout.params()],
        }
    }

    /// Add another part's sums.
    pub fn add(&mut self, o: &MlpSums) {
        self.loss += o.loss;
        self.g.iter_mut().zip(&o.g).for_each(|(a, b)| *a += b);
    }
}

/// [`MlpSums`] of `rows` (feature row, label) at parameters `w` on standardised inputs.
pub fn mlp_sums<'a>(
    rows: impl Iterator<Item = (&'a [f64], bool)>,
    scaler: &Scaler,
    layout: &Layout,
    w: &[f64],
    weights: (f64, f64),
) -> MlpSums {
    let mut out = MlpSums::zeros(layout);
    let (d, h) = (layout.d, layout.h);
    if w.len() != layout.params() || scaler.mean.len() != d {
        return out;
    }
    let (o_b1, o_w2, o_b2, o_skip) = layout.offsets();
    let mut z = vec![0.0; d];
    let mut pre = vec![0.0; h];
    for (x, y) in rows {
        scaler.standardize(x, &mut z);
        let mut s = w[o_b2] + dot(&w[o_skip..], &z);
        for k in 0..h {
            pre[k] = w[o_b1 + k] + dot(&w[k * d..(k + 1) * d], &z);
            s += pre[k].max(0.0) * w[o_w2 + k];
        }
        let (sign, cw) = if y { (-s, weights.0) } else { (s, weights.1) };
        out.loss += cw * (sign.max(0.0) + (-sign.abs()).exp().ln_1p());
        let prob = 1.0 / (1.0 + (-s).exp());
        let go = cw * (prob - if y { 1.0 } else { 0.0 });
        let g = &mut out.g;
        g[o_b2] += go;
        for (a, b) in g[o_skip..].iter_mut().zip(&z) {
            *a += go * b;
        }
        for k in 0..h {
            if pre[k] > 0.0 {
                g[o_w2 + k] += go * pre[k];
                let gh = go * w[o_w2 + k];
                g[o_b1 + k] += gh;
                for (a, b) in g[k * d..(k + 1) * d].iter_mut().zip(&z) {
                    *a += gh * b;
                }
            }
        }
    }
    out
}

/// The perceptron's full-batch fit as steps: the initial weights from the seed (as the Adam fit
/// draws them), then L-BFGS on `Σ loss / n + λ/2 · ‖W1, w2‖²` (λ = the weight decay; biases and
/// the skip path are not penalised), asking for [`MlpSums`] over all `n` training rows at each
/// point.
pub struct MlpLbfgs {
    layout: Layout,
    n: f64,
    lambda: f64,
    weights: (f64, f64),
    mask: Vec<bool>,
    opt: Lbfgs,
    p: ValidMlpParams,
}

impl MlpLbfgs {
    /// For `n` training rows of width `d` with `pos` frame starts.
    pub fn new(p: &ValidMlpParams, d: usize, n: usize, pos: usize) -> Result<MlpLbfgs, Error> {
        if n < 2 {
            return Err(Error::TooFewRows { rows: n, need: 2 });
        }
        if pos == 0 || pos == n {
            return Err(Error::OneClass {
                rows: n,
                positives: pos,
            });
        }
        let q = p.get();
        let layout = Layout {
            d,
            h: q.hidden,
            skip: q.skip,
        };
        let mut rng = ChaCha8Rng::seed_from_u64(q.seed);
        let w0: Vec<f64> = layout.init(&mut rng, n, pos).iter().map(|&v| v as f64).collect();
        let weights = if q.balanced {
            (n as f64 / (2.0 * pos as f64), n as f64 / (2.0 * (n - pos) as f64))
        } else {
            (1.0, 1.0)
        };
        Ok(MlpLbfgs {
            mask: layout.decay_mask(),
            layout,
            n: n as f64,
            lambda: q.weight_decay,
            weights,
            opt: Lbfgs::new(w0, q.max_iter),
            p: *p,
        })
    }

    /// The parameter layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Class weights `(positive, negative)` the sums must use.
    pub fn class_weights(&self) -> (f64, f64) {
        self.weights
    }

    /// Parameters at which to sum next; `None` when done.
    pub fn ask(&self) -> Option<&[f64]> {
        self.opt.ask()
    }

    /// The sums over all training rows at the parameters [`MlpLbfgs::ask`] named.
    pub fn tell(&mut self, sums: MlpSums) {
        let Some(w) = self.opt.ask() else { return };
        let mut f = sums.loss / self.n;
        let mut g: Vec<f64> = sums.g.iter().map(|v| v / self.n).collect();
        for ((gi, wi), m) in g.iter_mut().zip(w).zip(&self.mask) {
            if *m {
                f += 0.5 * self.lambda * wi * wi;
                *gi += self.lambda * wi;
            }
        }
        self.opt.tell(f, g);
    }

    /// Accepted steps, evaluations, and the objective at the best point.
    pub fn progress(&self) -> (usize, usize, f64) {
        let (i, e) = self.opt.counts();
        (i, e, self.opt.best().1)
    }

    /// The model at the best point, the scaler folded into its first layer.
    pub fn model(&self, scaler: &Scaler) -> Result<MlpModel, Error> {
        let f = self.opt.best().1;
        if !f.is_finite() {
            return Err(Error::BadParam {
                name: "objective",
                value: f,
                allowed: "finite: the loss summed to NaN or infinity (NaN or infinite values in the rows)",
            });
        }
        let w: Vec<f32> = self.opt.best().0.iter().map(|&v| v as f32).collect();
        let q = self.p.get();
        self.layout
            .model(&w, scaler, q.slow_inputs, self.opt.counts().0 as u32, q.lr)
    }
}

/// The full-batch fit on this machine: every evaluation's sums over `rows` in fixed chunks,
/// added in chunk order (the same model whatever the thread count).
pub(super) fn fit_mlp_lbfgs(
    data: &crate::dataset::Dataset,
    rows: &crate::dataset::RowSet,
    p: &ValidMlpParams,
) -> Result<MlpModel, Error> {
    const CHUNKS: usize = 8;
    let n = rows.len();
    let pos = rows.iter().filter(|&i| data.y[i]).count();
    let mut fit = MlpLbfgs::new(p, data.d, n, pos)?;
    let scaler = super::fit_scaler_set(data, rows);
    let chunk = n.div_ceil(CHUNKS);
    let threads = crate::parallel::all_cores().clamp(1, CHUNKS);
    while let Some(w) = fit.ask() {
        let w = w.to_vec();
        let (layout, weights) = (*fit.layout(), fit.class_weights());
        let mut parts: Vec<Option<MlpSums>> = vec![None; CHUNKS];
        crate::parallel::for_each(
            CHUNKS,
            threads,
            |c| {
                let it = rows
                    .spans(c * chunk, (c + 1) * chunk)
                    .flatten()
                    .map(|i| (data.row(i), data.y[i]));
                mlp_sums(it, &scaler, &layout, &w, weights)
            },
            |c, s| parts[c] = Some(s),
        );
        let mut total = MlpSums::zeros(&layout);
        for part in parts.iter().flatten() {
            total.add(part);
        }
        fit.tell(total);
    }
    fit.model(&scaler)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lbfgs_finds_the_minimum_of_a_badly_scaled_quadratic() {
        // f = Σ c_i (x_i − i)², condition number 1e4.
        let c = [1.0, 10.0, 100.0, 1e4];
        let mut opt = Lbfgs::new(vec![0.0; 4], 200);
        while let Some(x) = opt.ask() {
            let f: f64 = x.iter().enumerate().map(|(i, v)| c[i] * (v - i as f64).powi(2)).sum();
            let g: Vec<f64> = x.iter().enumerate().map(|(i, v)| 2.0 * c[i] * (v - i as f64)).collect();
            opt.tell(f, g);
        }
        let (x, f) = opt.best();
        for (i, v) in x.iter().enumerate() {
            assert!((v - i as f64).abs() < 1e-5, "x = {x:?}");
        }
        assert!(f < 1e-8);
        let (iters, evals) = opt.counts();
        assert!(iters < 60 && evals < 120, "{iters} steps, {evals} evaluations");
    }

    #[test]
    fn sums_split_anywhere_add_up_to_the_whole() {
        let layout = Layout { d: 3, h: 4, skip: true };
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let w: Vec<f64> = layout.init(&mut rng, 10, 3).iter().map(|&v| v as f64).collect();
        let x: Vec<f64> = (0..60).map(|i| ((i * 37 % 11) as f64) - 5.0).collect();
        let y: Vec<bool> = (0..20).map(|i| i % 3 == 0).collect();
        let scaler = Scaler::fit_rows(&x, 3);
        let rows = |a: usize, b: usize| x[a * 3..b * 3].chunks_exact(3).zip(y[a..b].iter().copied());
        let whole = mlp_sums(rows(0, 20), &scaler, &layout, &w, (1.0, 1.0));
        let mut parts = mlp_sums(rows(0, 7), &scaler, &layout, &w, (1.0, 1.0));
        parts.add(&mlp_sums(rows(7, 20), &scaler, &layout, &w, (1.0, 1.0)));
        assert!((whole.loss - parts.loss).abs() < 1e-12 && whole.loss > 0.0);
        for (a, b) in whole.g.iter().zip(&parts.g) {
            assert!((a - b).abs() < 1e-12);
        }
        // The gradient is the loss's: a finite difference on one first-layer weight.
        let mut w2 = w.clone();
        w2[1] += 1e-6;
        let up = mlp_sums(rows(0, 20), &scaler, &layout, &w2, (1.0, 1.0)).loss;
        let fd = (up - whole.loss) / 1e-6;
        assert!(
            (fd - whole.g[1]).abs() < 1e-4 * whole.g[1].abs().max(1.0),
            "{fd} vs {}",
            whole.g[1]
        );
    }

    #[test]
    fn full_batch_perceptron_learns_xor_and_is_deterministic() {
        use crate::dataset::RowSet;
        use crate::train::mlp::tests::xor_rows as rows;
        use crate::train::{fit_mlp, MlpParams, MlpSolver, Predict};
        let data = rows(4_000, 3);
        let p = MlpParams {
            hidden: 8,
            solver: MlpSolver::Lbfgs,
            max_iter: 300,
            ..MlpParams::default()
        }
        .check()
        .unwrap();
        let all = RowSet::all(data.len());
        let m = fit_mlp(&data, &all, &p).unwrap();
        let test = rows(2_000, 4);
        let acc = (0..test.len())
            .filter(|&i| m.predict_row(test.row(i)) == test.y[i])
            .count() as f64
            / 2000.0;
        assert!(acc > 0.95, "held-out accuracy {acc}");
        assert_eq!(m, fit_mlp(&data, &all, &p).unwrap(), "same seed, same model");
        assert!(m.epochs > 10, "{} L-BFGS steps", m.epochs);
    }
}

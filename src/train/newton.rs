//! The logistic model's Newton solver as a state machine, and the sums one pass adds up.
//!
//! [`Newton`] asks for a pass at its current coefficients ([`Newton::ask`]) and takes the sums
//! of that pass ([`Newton::tell`]): the gradient, the Hessian when the step needs one, and the
//! loss. Who adds the sums up is the caller's business — `fit_logistic` runs the pass on this
//! machine's threads, `python -m aggrate.spark train` runs it as one Spark aggregation over a
//! cluster's partitions ([`logistic_sums`] on each, added by Spark) — so the steps, the damping,
//! the stopping rule and the model are the same code on both.

use super::{bfgs_update, cholesky_solve, LogisticParams, Scaler};

/// The sums of one pass over some rows at coefficients β (standardised, bias last):
/// Σ ∂loss/∂β (`g`, m values), Σ ∂²loss/∂β² (`h`, m×m row-major, symmetric; zeros when the
/// pass skipped it) and Σ loss (`loss`; 0 when not asked). Sums over disjoint rows add.
#[derive(Clone, Debug, PartialEq)]
pub struct PassSums {
    /// Hessian sum (m×m).
    pub h: Vec<f64>,
    /// Gradient sum (m).
    pub g: Vec<f64>,
    /// Loss sum.
    pub loss: f64,
}

impl PassSums {
    /// Zeros for `d` features (m = d + 1).
    pub fn zeros(d: usize) -> PassSums {
        PassSums {
            h: vec![0.0; (d + 1) * (d + 1)],
            g: vec![0.0; d + 1],
            loss: 0.0,
        }
    }
}

/// Add the pass sums of `rows` (feature row, label) into `out` (the Hessian's lower triangle
/// only, when `hessian`; [`symmetrize`] completes it), with `f(s, y) = (∂loss/∂s, ∂²loss/∂s²)`
/// and `loss` (summed when given). `inv`: 1/σ per column; `z`: scratch of d + 1.
#[allow(clippy::too_many_arguments)]
pub(super) fn accumulate<'a>(
    rows: impl Iterator<Item = (&'a [f64], bool)>,
    mean: &[f64],
    inv: &[f64],
    beta: &[f64],
    f: impl Fn(f64, bool) -> (f64, f64),
    loss: Option<&dyn Fn(f64, bool) -> f64>,
    hessian: bool,
    z: &mut [f64],
    out: &mut PassSums,
) {
    let d = mean.len();
    let m = d + 1;
    for (x, y) in rows {
        for (((zj, x), mu), iv) in z.iter_mut().zip(x).zip(mean).zip(inv) {
            *zj = (x - mu) * iv;
        }
        z[d] = 1.0;
        let s: f64 = z.iter().zip(beta).map(|(a, b)| a * b).sum();
        let (r, wgt) = f(s, y);
        if let Some(l) = loss {
            out.loss += l(s, y);
        }
        if r == 0.0 && wgt == 0.0 {
            continue;
        }
        if !hessian {
            for (ga, za) in out.g.iter_mut().zip(z.iter()) {
                *ga += r * za;
            }
            continue;
        }
        for a in 0..m {
            out.g[a] += r * z[a];
            let wa = wgt * z[a];
            let row = &mut out.h[a * m..a * m + a + 1];
            for (hb, zb) in row.iter_mut().zip(&z[..=a]) {
                *hb += wa * zb;
            }
        }
    }
}

/// Copy the lower triangle of the m×m `h` onto its upper one.
pub(super) fn symmetrize(h: &mut [f64], m: usize) {
    for a in 0..m {
        for b in 0..a {
            h[b * m + a] = h[a * m + b];
        }
    }
}

/// The sums of one pass over `n` row-major rows `x` (width d = `scaler.mean.len()`) with labels
/// `y`, for class weights `(w_pos, w_neg)`: what one partition of a cluster contributes to a
/// [`Newton`] step (the Hessian complete and symmetric, the loss always summed).
pub fn logistic_sums(
    x: &[f64],
    y: &[bool],
    scaler: &Scaler,
    beta: &[f64],
    weights: (f64, f64),
    hessian: bool,
) -> PassSums {
    let d = scaler.mean.len();
    let mut out = PassSums::zeros(d);
    if d == 0 || beta.len() != d + 1 {
        return out;
    }
    let inv: Vec<f64> = scaler.std.iter().map(|s| 1.0 / s).collect();
    let mut z = vec![0.0; d + 1];
    let loss = super::logistic_loss(weights.0, weights.1);
    accumulate(
        x.chunks_exact(d).zip(y.iter().copied()),
        &scaler.mean,
        &inv,
        beta,
        super::logistic_derivs(weights.0, weights.1),
        Some(&loss),
        hessian,
        &mut z,
        &mut out,
    );
    symmetrize(&mut out.h, d + 1);
    out
}

/// The last full Newton step, for backtracking: where it left from, the objective there, the
/// slope along the step, the step and the fraction of it taken.
struct LineSearch {
    beta: Vec<f64>,
    objective: f64,
    slope: f64,
    dir: Vec<f64>,
    t: f64,
}

/// Newton steps from a start until the largest change is below `tol`.
///
/// Full Newton steps are damped by backtracking (Armijo) on the objective, which the next pass
/// computes along with the gradient: pure Newton can cycle on logistic loss from a start where
/// many rows are saturated. `frozen`: a Hessian (L2 included) reused for the steps — chord
/// Newton, whose passes need the gradient only — and refined after each step by BFGS from the
/// gradient change, so the steps converge superlinearly; `freeze_first`: freeze the first full
/// pass's Hessian (warm starts, which are close to the optimum). A frozen step that does not
/// contract fast switches back to full Newton. The fixed point is the same (gradient zero).
pub struct Newton {
    p: LogisticParams,
    beta: Vec<f64>,
    frozen: Option<Vec<f64>>,
    freeze_first: bool,
    last_full: Option<Vec<f64>>,
    last_step: f64,
    passes: usize,
    /// The last step taken and the gradient before it (for BFGS).
    prev: Option<(Vec<f64>, Vec<f64>)>,
    origin: Option<LineSearch>,
    done: bool,
    /// A pass's sums were not finite (NaN or infinite features): stopped, no step taken.
    failed: bool,
}

impl Newton {
    /// A solver from `beta` (d + 1 values, bias last, standardised coordinates). A cold start is
    /// `vec![0.0; d + 1]`, no frozen Hessian, `freeze_first = false`: damped full Newton.
    pub fn new(p: LogisticParams, beta: Vec<f64>, frozen: Option<Vec<f64>>, freeze_first: bool) -> Newton {
        Newton {
            p,
            beta,
            frozen,
            freeze_first,
            last_full: None,
            last_step: f64::INFINITY,
            passes: 0,
            prev: None,
            origin: None,
            done: false,
            failed: false,
        }
    }

    /// The next pass wanted: at these coefficients, with the Hessian (`true`) or the gradient
    /// only; `None` once converged (or out of passes).
    pub fn ask(&self) -> Option<(&[f64], bool)> {
        (!self.done && self.passes < self.p.max_iter).then_some((&self.beta[..], self.frozen.is_none()))
    }

    /// The current coefficients.
    pub fn beta(&self) -> &[f64] {
        &self.beta
    }

    /// Passes taken.
    pub fn passes(&self) -> usize {
        self.passes
    }

    /// Whether the last step was below `tol`.
    pub fn converged(&self) -> bool {
        self.done && !self.failed
    }

    /// Whether a pass's sums were not finite (the rows hold NaN or infinite features): the
    /// solver stopped there and its coefficients are not a fit.
    pub fn failed(&self) -> bool {
        self.failed
    }

    /// The Hessian of the last full pass (without L2), once there was one.
    pub fn into_parts(self) -> (Vec<f64>, usize, Option<Vec<f64>>) {
        (self.beta, self.passes, self.last_full)
    }

    /// Take the sums of the pass [`Newton::ask`] asked for (the Hessian complete and
    /// symmetric; the loss when a full pass), and step.
    pub fn tell(&mut self, sums: PassSums) {
        if self.done || self.passes >= self.p.max_iter {
            return;
        }
        self.passes += 1;
        if !(sums.loss.is_finite() && sums.g.iter().chain(&sums.h).all(|v| v.is_finite())) {
            (self.done, self.failed) = (true, true);
            return;
        }
        let p = self.p;
        let m = self.beta.len();
        let d = m - 1;
        let PassSums { mut h, mut g, loss } = sums;
        let full = self.frozen.is_none();
        let objective = loss + 0.5 * p.l2 * self.beta[..d].iter().map(|w| w * w).sum::<f64>();
        if full {
            if let Some(o) = &mut self.origin {
                let sufficient = objective <= o.objective - 1e-4 * o.t * o.slope;
                if !sufficient && o.t > 1e-4 {
                    o.t *= 0.5;
                    for ((b, b0), dj) in self.beta.iter_mut().zip(&o.beta).zip(&o.dir) {
                        *b = b0 - o.t * dj;
                    }
                    return;
                }
            }
            self.last_full = Some(h.clone());
        }
        for (gj, bj) in g[..d].iter_mut().zip(&self.beta) {
            *gj += p.l2 * bj;
        }
        match &mut self.frozen {
            Some(fh) => {
                if let Some((s, g0)) = &self.prev {
                    let y: Vec<f64> = g.iter().zip(g0).map(|(a, b)| a - b).collect();
                    bfgs_update(fh, s, &y);
                }
                h = fh.clone();
            }
            None => {
                for j in 0..d {
                    h[j * m + j] += p.l2;
                }
                h[d * m + d] += 1e-9;
                if self.freeze_first {
                    self.frozen = Some(h.clone());
                }
            }
        }
        let grad = g.clone();
        if !cholesky_solve(&mut h, &mut g, m) {
            self.done = true;
            return;
        }
        let dir = g;
        let step = dir.iter().fold(0.0f64, |a, v| a.max(v.abs()));
        // Near the optimum Newton converges quadratically and the objective's rounding would
        // only confuse the line search.
        self.origin = (full && step > 1e-3).then(|| LineSearch {
            beta: self.beta.clone(),
            objective,
            slope: grad.iter().zip(&dir).map(|(a, b)| a * b).sum(),
            dir: dir.clone(),
            t: 1.0,
        });
        for (bj, dj) in self.beta.iter_mut().zip(&dir) {
            *bj -= dj;
        }
        if step < p.tol {
            self.done = true;
            return;
        }
        self.prev = Some((dir.iter().map(|v| -v).collect(), grad));
        if self.frozen.is_some() && self.last_step.is_finite() {
            let rate = step / self.last_step;
            if rate > 0.5 {
                // Not contracting: full Newton from here.
                self.frozen = None;
                self.freeze_first = false;
            } else if rate > 0.05 && (p.tol / step).ln() / rate.ln() > 6.0 {
                // Contracting slowly (the optimum moved far): one full pass refreshes the
                // frozen Hessian, cheaper than many more gradient passes.
                self.frozen = None;
            }
        }
        self.last_step = step;
    }
}

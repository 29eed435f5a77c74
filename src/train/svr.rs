//! RBF ε-SVR by SMO: the slot-level correction of the aggregation level.
//!
//! Why our own solver: smartcore 0.7's SVR is 4.5–8× slower than scikit-learn (libsvm) and keeps
//! its support vectors private (measured when the stack was chosen), so a fitted model could not be exported.
//! This is the dual problem libsvm solves for ε-SVR (2n box-constrained variables, one equality
//! constraint) with second-order working-set selection (Fan, Chen & Lin, JMLR 2005). Slot data is
//! small (one row per 100 ms slot: a few hundred to a few thousand rows), so the kernel matrix is
//! computed once and kept whole (f32, n ≤ [`MAX_SVR_ROWS`]) instead of an LRU row cache.
//! Deterministic: no randomness, ties broken by index.

use super::{Error, Scaler, SvrModel, SvrParams, ValidSvrParams};

/// Rows above which the whole-kernel solver refuses (n² f32 = 400 MB at 10,000).
pub const MAX_SVR_ROWS: usize = 10_000;

/// Fit an RBF ε-SVR on row-major `x` (`n × d`) and targets `y`.
pub fn fit_svr(x: &[f64], d: usize, y: &[f64], p: &ValidSvrParams) -> Result<SvrModel, Error> {
    let p = *p.get();
    let n = y.len();
    if d == 0 || x.len() != n * d {
        return Err(Error::Width {
            got: x.len(),
            want: n * d,
        });
    }
    if n < 2 {
        return Err(Error::TooFewRows { rows: n, need: 2 });
    }
    if n > MAX_SVR_ROWS {
        return Err(Error::BadParam {
            name: "svr rows",
            value: n as f64,
            allowed: "at most 10000 (slot data; the kernel matrix is kept whole)",
        });
    }
    if let Some(v) = y.iter().chain(x).find(|v| !v.is_finite()) {
        return Err(Error::BadParam {
            name: "svr input",
            value: *v,
            allowed: "finite numbers",
        });
    }
    let scaler = Scaler::fit_rows(x, d);
    let mut z = vec![0.0; n * d];
    for i in 0..n {
        scaler.standardize(&x[i * d..(i + 1) * d], &mut z[i * d..(i + 1) * d]);
    }
    // Kernel matrix, f32 (libsvm also caches Q in single precision).
    let mut k = vec![0.0f32; n * n];
    for i in 0..n {
        let zi = &z[i * d..(i + 1) * d];
        k[i * n + i] = 1.0;
        for j in 0..i {
            let zj = &z[j * d..(j + 1) * d];
            let dist: f64 = zi.iter().zip(zj).map(|(a, b)| (a - b) * (a - b)).sum();
            let v = (-p.gamma * dist).exp() as f32;
            k[i * n + j] = v;
            k[j * n + i] = v;
        }
    }
    let sol = smo(&k, n, y, &p);
    let mut support = Vec::new();
    let mut coef = Vec::new();
    for i in 0..n {
        let c = sol.alpha[i] - sol.alpha[i + n];
        if c != 0.0 {
            support.extend_from_slice(&z[i * d..(i + 1) * d]);
            coef.push(c);
        }
    }
    Ok(SvrModel {
        scaler,
        gamma: p.gamma,
        support,
        coef,
        b: -sol.rho,
        params: p,
        iterations: sol.iterations,
    })
}

/// Out-of-fold predictions: for each fold (row indices), fit on the rows of the other folds and
/// predict the fold's rows. Rows in no fold get NaN.
pub fn cv_predict_svr(
    x: &[f64],
    d: usize,
    y: &[f64],
    folds: &[Vec<usize>],
    p: &ValidSvrParams,
) -> Result<Vec<f64>, Error> {
    let n = y.len();
    let mut out = vec![f64::NAN; n];
    let mut in_test = vec![false; n];
    let mut tx = Vec::new();
    let mut ty = Vec::new();
    for test in folds {
        test.iter().for_each(|&i| in_test[i] = true);
        tx.clear();
        ty.clear();
        for i in (0..n).filter(|&i| !in_test[i]) {
            tx.extend_from_slice(&x[i * d..(i + 1) * d]);
            ty.push(y[i]);
        }
        test.iter().for_each(|&i| in_test[i] = false);
        let m = fit_svr(&tx, d, &ty, p)?;
        for &i in test {
            out[i] = m.predict(&x[i * d..(i + 1) * d]);
        }
    }
    Ok(out)
}

struct Solution {
    alpha: Vec<f64>,
    rho: f64,
    iterations: usize,
}

const TAU: f64 = 1e-12;
/// Iterations between shrinking passes (libsvm uses min(l, 1000)).
const SHRINK_EVERY: usize = 200;

/// libsvm's ε-SVR dual: variables t < n are α (sign +1), t ≥ n are α* (sign −1);
/// Q(s, t) = sign_s·sign_t·K(s mod n, t mod n); linear term ε − y (α), ε + y (α*).
///
/// Longer than the house's 120 lines on purpose: one solver loop (working-set selection,
/// two-variable update, gradient update, shrinking, unshrinking) over state that every step
/// reads and writes; split into functions it would pass the same eight slices to each, and the
/// step order that makes it equal libsvm's would no longer read top to bottom.
fn smo(k: &[f32], n: usize, y: &[f64], p: &SvrParams) -> Solution {
    let l = 2 * n;
    let c = p.c;
    let sign = |t: usize| if t < n { 1.0 } else { -1.0 };
    let kk = |s: usize, t: usize| k[(s % n) * n + (t % n)] as f64;
    let mut alpha = vec![0.0f64; l];
    // Gradient of ½βᵀQβ + pᵀβ at β = 0 is p.
    let mut g: Vec<f64> = (0..l)
        .map(|t| if t < n { p.epsilon - y[t] } else { p.epsilon + y[t - n] })
        .collect();
    let mut iterations = 0;
    let mut act_pos: Vec<usize> = (0..n).collect();
    let mut act_neg: Vec<usize> = (0..n).collect();
    let mut since_shrink = 0usize;
    while iterations < p.max_iter {
        // i: the most violating index in I_up (largest −y_t·G_t). The two halves (α with
        // sign +1, α* with sign −1) are scanned separately over their active lists: no modulo
        // or sign per element, and variables shrunk away (at a bound, gradient pointing out of
        // the box) are skipped. The gradient stays exact for all variables.
        let mut gmax = f64::NEG_INFINITY;
        let mut i = usize::MAX;
        let (ga, gb) = g.split_at(n);
        let (aa, ab) = alpha.split_at(n);
        for &t in &act_pos {
            if aa[t] < c && -ga[t] > gmax {
                gmax = -ga[t];
                i = t;
            }
        }
        for &t in &act_neg {
            if ab[t] > 0.0 && gb[t] > gmax {
                gmax = gb[t];
                i = t + n;
            }
        }
        // j: in I_low, the largest second-order decrease of the objective.
        let mut gmax2 = f64::NEG_INFINITY;
        let mut j = usize::MAX;
        let mut best = f64::INFINITY;
        if i != usize::MAX {
            let ki = &k[(i % n) * n..(i % n + 1) * n];
            let mut scan = |t: usize, v: f64, kit: f32| {
                // v = y_t·G_t; the pair's decrease is −diff²/(2 − 2K).
                gmax2 = gmax2.max(v);
                let diff = gmax + v;
                if diff > 0.0 {
                    let a = (2.0 - 2.0 * kit as f64).max(TAU);
                    let obj = -diff * diff / a;
                    if obj < best {
                        best = obj;
                        j = t;
                    }
                }
            };
            for &t in &act_pos {
                if aa[t] > 0.0 {
                    scan(t, ga[t], ki[t]);
                }
            }
            for &t in &act_neg {
                if ab[t] < c {
                    scan(t + n, -gb[t], ki[t]);
                }
            }
        }
        let converged = i == usize::MAX || j == usize::MAX || gmax + gmax2 < p.tol;
        if converged {
            if act_pos.len() + act_neg.len() == l {
                break;
            }
            // Optimal on the active set: check everything once more.
            act_pos = (0..n).collect();
            act_neg = (0..n).collect();
            since_shrink = 0;
            continue;
        }
        since_shrink += 1;
        if since_shrink >= SHRINK_EVERY {
            since_shrink = 0;
            // libsvm's rule: a variable at a bound whose gradient is beyond the current
            // extremes will not be selected soon.
            act_pos.retain(|&t| !((aa[t] >= c && -ga[t] > gmax) || (aa[t] <= 0.0 && ga[t] > gmax2)));
            act_neg.retain(|&t| !((ab[t] >= c && -gb[t] > gmax2) || (ab[t] <= 0.0 && gb[t] > gmax)));
        }
        iterations += 1;
        let (ai_old, aj_old) = (alpha[i], alpha[j]);
        let qij = sign(i) * sign(j) * kk(i, j);
        // Q_ii = Q_jj = 1 for the RBF kernel.
        if sign(i) != sign(j) {
            let quad = (2.0 + 2.0 * qij).max(TAU);
            let delta = (-g[i] - g[j]) / quad;
            let diff = alpha[i] - alpha[j];
            alpha[i] += delta;
            alpha[j] += delta;
            if diff > 0.0 {
                if alpha[j] < 0.0 {
                    alpha[j] = 0.0;
                    alpha[i] = diff;
                }
            } else if alpha[i] < 0.0 {
                alpha[i] = 0.0;
                alpha[j] = -diff;
            }
            if diff > 0.0 {
                if alpha[i] > c {
                    alpha[i] = c;
                    alpha[j] = c - diff;
                }
            } else if alpha[j] > c {
                alpha[j] = c;
                alpha[i] = c + diff;
            }
        } else {
            let quad = (2.0 - 2.0 * qij).max(TAU);
            let delta = (g[i] - g[j]) / quad;
            let sum = alpha[i] + alpha[j];
            alpha[i] -= delta;
            alpha[j] += delta;
            if sum > c {
                if alpha[i] > c {
                    alpha[i] = c;
                    alpha[j] = sum - c;
                }
            } else if alpha[j] < 0.0 {
                alpha[j] = 0.0;
                alpha[i] = sum;
            }
            if sum > c {
                if alpha[j] > c {
                    alpha[j] = c;
                    alpha[i] = sum - c;
                }
            } else if alpha[i] < 0.0 {
                alpha[i] = 0.0;
                alpha[j] = sum;
            }
        }
        let (di, dj) = (alpha[i] - ai_old, alpha[j] - aj_old);
        let (si, sj) = (sign(i), sign(j));
        let (ri, rj) = (&k[(i % n) * n..(i % n + 1) * n], &k[(j % n) * n..(j % n + 1) * n]);
        for t in 0..n {
            // Q(i, t) = s_i·s_t·K; the α* half has s_t = −1.
            let upd = si * di * ri[t] as f64 + sj * dj * rj[t] as f64;
            g[t] += upd;
            g[t + n] -= upd;
        }
    }
    // ρ: mean of y_t·G_t over free variables, else the middle of the feasible interval.
    let (mut ub, mut lb, mut sum, mut free) = (f64::INFINITY, f64::NEG_INFINITY, 0.0, 0usize);
    for t in 0..l {
        let yg = sign(t) * g[t];
        let at_upper = alpha[t] >= c;
        let at_lower = alpha[t] <= 0.0;
        if at_upper {
            if sign(t) < 0.0 {
                ub = ub.min(yg);
            } else {
                lb = lb.max(yg);
            }
        } else if at_lower {
            if sign(t) > 0.0 {
                ub = ub.min(yg);
            } else {
                lb = lb.max(yg);
            }
        } else {
            free += 1;
            sum += yg;
        }
    }
    let rho = if free > 0 { sum / free as f64 } else { (ub + lb) / 2.0 };
    Solution { alpha, rho, iterations }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(c: f64, gamma: f64, epsilon: f64) -> ValidSvrParams {
        SvrParams {
            c,
            gamma,
            epsilon,
            ..SvrParams::default()
        }
        .check()
        .unwrap()
    }

    #[test]
    fn fits_a_smooth_function_within_the_tube() {
        // y = sin(x) on 200 points: a wide C and a tube of 0.05 must fit within ~0.1.
        let x: Vec<f64> = (0..200).map(|i| i as f64 / 20.0).collect();
        let y: Vec<f64> = x.iter().map(|v| v.sin()).collect();
        let m = fit_svr(&x, 1, &y, &params(100.0, 1.0, 0.05)).unwrap();
        let worst = x
            .iter()
            .zip(&y)
            .map(|(xv, yv)| (m.predict(&[*xv]) - yv).abs())
            .fold(0.0, f64::max);
        assert!(worst < 0.1, "worst error {worst}");
        assert!(m.n_support() < 200, "every point a support vector: tube ignored");
        // Dual feasibility: Σ coef = 0 and |coef| ≤ C.
        let s: f64 = m.coef.iter().sum();
        assert!(s.abs() < 1e-6, "Σ(α − α*) = {s}");
        assert!(m.coef.iter().all(|c| c.abs() <= 100.0 + 1e-9));
    }

    #[test]
    fn wide_tube_gives_a_constant() {
        // All targets inside the tube around their mean: no support vectors needed.
        let x: Vec<f64> = (0..50).map(|i| i as f64).collect();
        let y: Vec<f64> = (0..50).map(|i| 10.0 + (i % 3) as f64 * 0.1).collect();
        let m = fit_svr(&x, 1, &y, &params(1.0, 0.5, 1.0)).unwrap();
        for v in &x {
            assert!((m.predict(&[*v]) - 10.1).abs() < 1.0);
        }
    }

    #[test]
    fn bad_input_is_an_error() {
        assert!(SvrParams {
            c: 0.0,
            ..SvrParams::default()
        }
        .check()
        .is_err());
        assert!(fit_svr(&[1.0, 2.0], 1, &[1.0], &params(1.0, 1.0, 0.1)).is_err());
        assert!(fit_svr(&[1.0, f64::NAN], 1, &[1.0, 2.0], &params(1.0, 1.0, 0.1)).is_err());
        assert!(fit_svr(&[1.0], 1, &[1.0], &params(1.0, 1.0, 0.1)).is_err());
    }
}

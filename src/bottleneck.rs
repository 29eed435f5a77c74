//! Training and judging the bottleneck classifier ([`BottleneckClassifier`]): a backhaul
//! bottleneck that switches on and off on a seeded [`Schedule`] (on the virtual clock in
//! [`crate::sim`], through `tc` in the testbed), the classifier's features and P(backhaul) per
//! report as [`Row`]s labelled from the schedule, a logistic fit on them ([`train`]) and the
//! verdict ([`score`]): F1 over the reports past each switch's allowance and the detection delay
//! of every switch.
//!
//! [`BottleneckClassifier`]: crate::control::BottleneckClassifier

use std::fmt::Write as _;
use std::path::Path;

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use crate::control::{BottleneckWeights, BOTTLENECK_FEATURES};

/// Errors.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A rows file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A rows file line is not a row.
    #[error("{path}:{line}: {what}")]
    Parse {
        /// The file.
        path: String,
        /// 1-based line.
        line: usize,
        /// What is wrong.
        what: String,
    },
    /// Too few rows of a class to fit.
    #[error("{0}")]
    Data(String),
    /// The fit failed.
    #[error(transparent)]
    Train(#[from] crate::train::Error),
}

/// A change of the backhaul: from `at_s` (seconds from the run's start) it sends at most
/// `mbps`, or at line rate (`None`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Switch {
    /// When (s).
    pub at_s: f64,
    /// The backhaul's rate from then (Mb/s; `None`: no bottleneck there).
    pub mbps: Option<f64>,
}

/// When the backhaul bottleneck is on, and at what rate.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Schedule {
    /// In time order.
    pub switches: Vec<Switch>,
}

impl Schedule {
    /// Off until `first_s`, then on and off in turn until `duration_s`, each spell lasting a
    /// uniform draw from `dwell_s`, each on-spell at a uniform draw from `mbps`. Seeded.
    pub fn seeded(seed: u64, duration_s: f64, first_s: f64, dwell_s: (f64, f64), mbps: (f64, f64)) -> Schedule {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut switches = Vec::new();
        let mut t = first_s;
        let mut on = true;
        while t < duration_s {
            let rate = rng.random_range(mbps.0..=mbps.1);
            switches.push(Switch {
                at_s: t,
                mbps: on.then_some(rate),
            });
            t += rng.random_range(dwell_s.0..=dwell_s.1);
            on = !on;
        }
        Schedule { switches }
    }

    /// The backhaul's rate at `t_s` (`None`: off).
    pub fn at(&self, t_s: f64) -> Option<f64> {
        self.switches
            .iter()
            .take_while(|s| s.at_s <= t_s)
            .last()
            .and_then(|s| s.mbps)
    }

    /// The label of a report over `[start_s, end_s]`: the backhaul was on for more than half of
    /// it.
    pub fn label(&self, start_s: f64, end_s: f64) -> bool {
        let len = end_s - start_s;
        if len <= 0.0 {
            return self.at(end_s).is_some();
        }
        let mut on = 0.0;
        let mut t = start_s;
        let mut state = self.at(start_s).is_some();
        for s in self.switches.iter().filter(|s| s.at_s > start_s && s.at_s < end_s) {
            if state {
                on += s.at_s - t;
            }
            t = s.at_s;
            state = s.mbps.is_some();
        }
        if state {
            on += end_s - t;
        }
        on * 2.0 > len
    }

    /// The last switch at or before `t_s`.
    fn last_before(&self, t_s: f64) -> Option<&Switch> {
        self.switches.iter().take_while(|s| s.at_s <= t_s).last()
    }
}

/// One report as the sender's classifier saw it.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// The run it came from.
    pub run: u32,
    /// When the sender took it (s from the run's start).
    pub at_s: f64,
    /// The report's interval (s from the run's start, the receiver's clock).
    pub start_s: f64,
    /// Its end.
    pub end_s: f64,
    /// The classifier's features after it.
    pub features: [f64; BOTTLENECK_FEATURES],
    /// P(backhaul) the classifier in the loop gave.
    pub prob: f64,
    /// The class the loop acted on: "backhaul" needs P > 0.5 and the rates apart in the
    /// newest report ([`upstream_evidence`]), outside start-up.
    pub class: bool,
    /// The schedule's truth.
    pub label: bool,
}

const HEADER: &str = "run,at_s,start_s,end_s,label,prob,class";

/// Write rows as CSV (`run,at_s,start_s,end_s,label,prob,f0,…`).
pub fn write_rows(path: &Path, rows: &[Row]) -> Result<(), Error> {
    let mut s = String::from(HEADER);
    for i in 0..BOTTLENECK_FEATURES {
        let _ = write!(s, ",f{i}");
    }
    s.push('\n');
    for r in rows {
        let _ = write!(
            s,
            "{},{:.6},{:.6},{:.6},{},{:.6},{}",
            r.run, r.at_s, r.start_s, r.end_s, r.label as u8, r.prob, r.class as u8
        );
        for f in r.features {
            let _ = write!(s, ",{f:.6}");
        }
        s.push('\n');
    }
    std::fs::write(path, s).map_err(|source| Error::Io {
        path: path.display().to_string(),
        source,
    })
}

/// A file's name (for errors) and its text.
fn read_text(path: &Path) -> Result<(String, String), Error> {
    let name = path.display().to_string();
    match std::fs::read_to_string(path) {
        Ok(text) => Ok((name, text)),
        Err(source) => Err(Error::Io { path: name, source }),
    }
}

/// Read rows written by [`write_rows`].
pub fn read_rows(path: &Path) -> Result<Vec<Row>, Error> {
    let (name, text) = read_text(path)?;
    let mut lines = text.lines().enumerate();
    match lines.next() {
        Some((_, h)) if h.starts_with(HEADER) => {}
        _ => {
            return Err(Error::Parse {
                path: name,
                line: 1,
                what: format!("not a bottleneck rows file (header must start {HEADER})"),
            })
        }
    }
    let mut rows = Vec::new();
    for (i, line) in lines {
        let bad = |what: String| Error::Parse {
            path: name.clone(),
            line: i + 1,
            what,
        };
        let v: Vec<&str> = line.split(',').collect();
        if v.len() != 7 + BOTTLENECK_FEATURES {
            return Err(bad(format!("{} fields, expected {}", v.len(), 7 + BOTTLENECK_FEATURES)));
        }
        let num = |k: usize| -> Result<f64, Error> {
            v[k].parse::<f64>()
                .ok()
                .filter(|x| x.is_finite())
                .ok_or_else(|| bad(format!("field {} ({:?}) is not a finite number", k + 1, v[k])))
        };
        let mut features = [0.0; BOTTLENECK_FEATURES];
        for (j, f) in features.iter_mut().enumerate() {
            *f = num(7 + j)?;
        }
        rows.push(Row {
            run: v[0]
                .parse()
                .map_err(|_| bad(format!("run {:?} is not a number", v[0])))?,
            at_s: num(1)?,
            start_s: num(2)?,
            end_s: num(3)?,
            label: num(4)? != 0.0,
            prob: num(5)?,
            class: num(6)? != 0.0,
            features,
        });
    }
    Ok(rows)
}

/// What a weights file holds: the weights, marked so that another JSON file is refused.
#[derive(Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct WeightsFile {
    kind: String,
    weights: BottleneckWeights,
}

const WEIGHTS_KIND: &str = "aggrate-bottleneck-weights";

/// Write the classifier's weights as JSON.
pub fn write_weights(path: &Path, w: &BottleneckWeights) -> Result<(), Error> {
    let f = WeightsFile {
        kind: WEIGHTS_KIND.into(),
        weights: *w,
    };
    let text = serde_json::to_string_pretty(&f).map_err(|e| Error::Data(e.to_string()))?;
    std::fs::write(path, text + "\n").map_err(|source| Error::Io {
        path: path.display().to_string(),
        source,
    })
}

/// Read weights written by [`write_weights`]: every weight finite, or an error naming the file
/// and what is wrong.
pub fn read_weights(path: &Path) -> Result<BottleneckWeights, Error> {
    let (name, text) = read_text(path)?;
    let bad = |line: usize, what: String| Error::Parse {
        path: name.clone(),
        line,
        what,
    };
    let f: WeightsFile = serde_json::from_str(&text).map_err(|e| {
        bad(
            e.line(),
            format!("not bottleneck classifier weights ({e}; expected {{\"kind\": \"{WEIGHTS_KIND}\", \"weights\": {{\"w\": [{BOTTLENECK_FEATURES} numbers], \"bias\": number}}}})"),
        )
    })?;
    if f.kind != WEIGHTS_KIND {
        return Err(bad(1, format!("kind {:?}, expected {WEIGHTS_KIND:?}", f.kind)));
    }
    if let Some(j) = f.weights.w.iter().position(|x| !x.is_finite()) {
        return Err(bad(1, format!("weight {j} is not finite")));
    }
    if !f.weights.bias.is_finite() {
        return Err(bad(1, "the bias is not finite".into()));
    }
    Ok(f.weights)
}

/// The rows of a sender's step log (`send --log`, whose times are the host's realtime clock in
/// ns), times made relative to `t0_ns` (the run's start, when its schedule's time 0 was) and
/// labelled from `sched`. Steps without a report interval (none yet) and start-up steps (where
/// the classifier does not steer) are left out.
pub fn rows_from_send_log(path: &Path, run: u32, t0_ns: u64, sched: &Schedule) -> Result<Vec<Row>, Error> {
    let (name, text) = read_text(path)?;
    let mut lines = text.lines().enumerate();
    let header: Vec<&str> = lines.next().map(|(_, h)| h.split(',').collect()).unwrap_or_default();
    let col = |c: &str| header.iter().position(|h| *h == c);
    let (Some(t), Some(starting), Some(class), Some(p), Some(a), Some(z), Some(f0)) = (
        col("t_ns"),
        col("starting"),
        col("bottleneck"),
        col("p_backhaul"),
        col("report_start_ns"),
        col("report_end_ns"),
        col("f0"),
    ) else {
        return Err(Error::Parse {
            path: name,
            line: 1,
            what: "not a sender's step log with the bottleneck classifier's columns (send --log)".into(),
        });
    };
    let secs = |ns: u64| (ns as f64 - t0_ns as f64) / 1e9;
    let mut rows = Vec::new();
    for (i, line) in lines {
        let v: Vec<&str> = line.split(',').collect();
        let bad = |what: String| Error::Parse {
            path: name.clone(),
            line: i + 1,
            what,
        };
        if v.len() < f0 + BOTTLENECK_FEATURES {
            return Err(bad(format!(
                "{} fields, expected {}",
                v.len(),
                f0 + BOTTLENECK_FEATURES
            )));
        }
        let int = |k: usize| {
            v[k].parse::<u64>()
                .map_err(|_| bad(format!("field {} ({:?}) is not a time", k + 1, v[k])))
        };
        let num = |k: usize| {
            v[k].parse::<f64>()
                .ok()
                .filter(|x| x.is_finite())
                .ok_or_else(|| bad(format!("field {} ({:?}) is not a finite number", k + 1, v[k])))
        };
        let (start, end) = (int(a)?, int(z)?);
        // Start-up steps: the classifier does not steer there.
        if end == 0 || v[starting] != "0" {
            continue;
        }
        let mut features = [0.0; BOTTLENECK_FEATURES];
        for (j, x) in features.iter_mut().enumerate() {
            *x = num(f0 + j)?;
        }
        let (start_s, end_s) = (secs(start), secs(end));
        rows.push(Row {
            run,
            at_s: secs(int(t)?),
            start_s,
            end_s,
            features,
            prob: num(p)?,
            class: v[class] == "Backhaul",
            label: sched.label(start_s, end_s),
        });
    }
    Ok(rows)
}

/// The send rate over time in a sender's step log (`send --log`): `(s from t0_ns, Mb/s)` of
/// station 0, the columns found by name.
pub fn send_rates(path: &Path, t0_ns: u64) -> Result<Vec<(f64, f64)>, Error> {
    let (name, text) = read_text(path)?;
    let header: Vec<&str> = text.lines().next().unwrap_or_default().split(',').collect();
    let col = |c: &str| header.iter().position(|h| *h == c);
    let (Some(t), Some(rate)) = (col("t_ns"), col("rate_mbps_0")) else {
        return Err(Error::Parse {
            path: name,
            line: 1,
            what: "no t_ns and rate_mbps_0 columns (not a sender's step log, send --log)".into(),
        });
    };
    Ok(text
        .lines()
        .skip(1)
        .filter_map(|l| {
            let v: Vec<&str> = l.split(',').collect();
            let at: u64 = v.get(t)?.parse().ok()?;
            let mbps: f64 = v.get(rate)?.parse().ok()?;
            Some(((at as f64 - t0_ns as f64) / 1e9, mbps))
        })
        .collect())
}

/// The loop's class for a row under weights `w` (as [`crate::control::PiController`] decides
/// after start-up, with the default backhaul probe), the loop having taken the row before for
/// the backhaul or not (`was_backhaul`): P > 0.5 and [`crate::control::loop_evidence`].
pub fn decide(w: &BottleneckWeights, r: &Row, was_backhaul: bool) -> bool {
    let probe = crate::control::probe_for(crate::control::PiParams::default().backhaul_probe, r.end_s - r.start_s);
    probability(w, &r.features) > 0.5 && crate::control::loop_evidence(&r.features, probe, was_backhaul)
}

/// The rows with the classes the loop would have taken under `w` ([`decide`], row after row,
/// each run from the WLAN's class).
pub fn replay(w: &BottleneckWeights, rows: &[Row]) -> Vec<Row> {
    let mut prev: Option<(u32, bool)> = None;
    rows.iter()
        .map(|r| {
            let was = prev.is_some_and(|(run, c)| run == r.run && c);
            let class = decide(w, r, was);
            prev = Some((r.run, class));
            Row { class, ..r.clone() }
        })
        .collect()
}

/// P(backhaul) of a feature vector under `w`.
pub fn probability(w: &BottleneckWeights, f: &[f64; BOTTLENECK_FEATURES]) -> f64 {
    let s: f64 = f.iter().zip(&w.w).map(|(x, w)| x * w).sum::<f64>() + w.bias;
    1.0 / (1.0 + (-s).exp())
}

/// Fit the logistic classifier on `rows` (the train module's IRLS on standardised features,
/// L2 `l2`), its scaler folded into raw-feature weights as the core runs them.
pub fn train(rows: &[Row], l2: f64) -> Result<BottleneckWeights, Error> {
    let pos = rows.iter().filter(|r| r.label).count();
    if pos < 10 || rows.len() - pos < 10 {
        return Err(Error::Data(format!(
            "{} reports, {pos} behind a backhaul bottleneck: at least 10 of each class are needed",
            rows.len()
        )));
    }
    let mut data = crate::dataset::Dataset::new(BOTTLENECK_FEATURES);
    for r in rows {
        data.push(&r.features, r.label, r.run, f32::NAN, 0);
    }
    let p = crate::train::LogisticParams {
        l2,
        ..crate::train::LogisticParams::default()
    }
    .check()?;
    let m = crate::train::fit_logistic(&data, &p)?;
    // w·(x − μ)/σ + b = (w/σ)·x + (b − Σ w μ/σ).
    let mut out = BottleneckWeights {
        w: [0.0; BOTTLENECK_FEATURES],
        bias: m.b,
    };
    for j in 0..BOTTLENECK_FEATURES {
        out.w[j] = m.w[j] / m.scaler.std[j];
        out.bias -= m.w[j] * m.scaler.mean[j] / m.scaler.std[j];
    }
    Ok(out)
}

/// The verdict on a classifier over labelled runs.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Score {
    /// Reports scored (those past each switch's allowance).
    pub reports: usize,
    /// Of them behind the backhaul.
    pub backhaul: usize,
    /// F1 of "backhaul" over the scored reports.
    pub f1: f64,
    /// Precision.
    pub precision: f64,
    /// Recall.
    pub recall: f64,
    /// Switches in the runs (on and off).
    pub switches: usize,
    /// Switches the classifier followed before the next one.
    pub detected: usize,
    /// Detection delay per detected switch: from the switch to the first report the sender took
    /// after it that carries the new class (ms).
    pub delay_ms: Vec<f64>,
    /// Of them, the switches on (the backhaul becomes the bottleneck).
    pub delay_on_ms: Vec<f64>,
    /// And off.
    pub delay_off_ms: Vec<f64>,
}

impl Score {
    /// A row of `testbed bottleneck`'s Markdown table: reports, F1, precision, recall, switches
    /// detected, delay p50, on: max, off: p50, off: max.
    pub fn markdown_row(&self, name: &str) -> String {
        format!(
            "| {name} | {} | {:.3} | {:.3} | {:.3} | {}/{} | {:.0} | {:.0} | {:.0} | {:.0} |\n",
            self.reports,
            self.f1,
            self.precision,
            self.recall,
            self.detected,
            self.switches,
            self.delay_p50_ms(),
            max(&self.delay_on_ms),
            median(&self.delay_off_ms),
            max(&self.delay_off_ms)
        )
    }

    /// The largest detection delay (ms; NaN without detections).
    pub fn delay_max_ms(&self) -> f64 {
        max(&self.delay_ms)
    }
    /// The median detection delay (ms; NaN without detections).
    pub fn delay_p50_ms(&self) -> f64 {
        median(&self.delay_ms)
    }
}

/// The largest of `v` (NaN when empty).
pub fn max(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::NAN, f64::max)
}

/// The median of `v` (the upper one for an even count; NaN when empty).
pub fn median(v: &[f64]) -> f64 {
    let mut d = v.to_vec();
    d.sort_by(f64::total_cmp);
    d.get(d.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Judge the classes `class(row)` over `runs` (rows and the run's schedule): F1 over the reports
/// taken more than `allowance_s` after the last switch, and per switch its detection delay.
pub fn score(runs: &[(&[Row], &Schedule)], allowance_s: f64, class: impl Fn(&Row) -> bool) -> Score {
    let (mut tp, mut fp, mut fneg) = (0usize, 0usize, 0usize);
    let mut s = Score::default();
    for (rows, sched) in runs {
        for r in rows.iter() {
            if sched
                .last_before(r.at_s)
                .is_some_and(|w| r.at_s - w.at_s <= allowance_s)
            {
                continue;
            }
            s.reports += 1;
            s.backhaul += r.label as usize;
            match (class(r), r.label) {
                (true, true) => tp += 1,
                (true, false) => fp += 1,
                (false, true) => fneg += 1,
                (false, false) => {}
            }
        }
        let last = rows.last().map_or(0.0, |r| r.at_s);
        for (k, w) in sched.switches.iter().enumerate() {
            let next = sched.switches.get(k + 1).map_or(f64::INFINITY, |n| n.at_s);
            if w.at_s > last {
                break;
            }
            s.switches += 1;
            let on = w.mbps.is_some();
            if let Some(r) = rows
                .iter()
                .filter(|r| r.at_s >= w.at_s && r.at_s < next)
                .find(|r| class(r) == on)
            {
                s.detected += 1;
                let ms = (r.at_s - w.at_s) * 1e3;
                s.delay_ms.push(ms);
                if on {
                    s.delay_on_ms.push(ms);
                } else {
                    s.delay_off_ms.push(ms);
                }
            }
        }
    }
    s.precision = tp as f64 / (tp + fp).max(1) as f64;
    s.recall = tp as f64 / (tp + fneg).max(1) as f64;
    s.f1 = if tp == 0 {
        0.0
    } else {
        2.0 * s.precision * s.recall / (s.precision + s.recall)
    };
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schedule_alternates_and_labels_by_the_larger_part() {
        let s = Schedule::seeded(7, 30.0, 5.0, (2.0, 4.0), (50.0, 100.0));
        assert_eq!(s, Schedule::seeded(7, 30.0, 5.0, (2.0, 4.0), (50.0, 100.0)), "seeded");
        assert!(s.switches.len() >= 6 && s.switches[0].at_s == 5.0);
        for (k, w) in s.switches.iter().enumerate() {
            assert_eq!(w.mbps.is_some(), k % 2 == 0);
            assert!(w.mbps.is_none_or(|m| (50.0..=100.0).contains(&m)));
        }
        assert_eq!(s.at(4.9), None);
        assert!(s.at(5.0).is_some());
        let off = s.switches[1].at_s;
        assert!(s.label(off - 0.04, off + 0.01), "on for 40 of 50 ms");
        assert!(!s.label(off - 0.01, off + 0.04));
    }

    #[test]
    fn score_counts_delays_and_skips_the_allowance() {
        let sched = Schedule {
            switches: vec![
                Switch {
                    at_s: 1.0,
                    mbps: Some(50.0),
                },
                Switch { at_s: 2.0, mbps: None },
            ],
        };
        let row = |at: f64, label: bool| Row {
            run: 0,
            at_s: at,
            start_s: at - 0.05,
            end_s: at,
            features: [0.0; BOTTLENECK_FEATURES],
            prob: 0.0,
            class: false,
            label,
        };
        let rows: Vec<Row> = (1..60)
            .map(|k| row(k as f64 * 0.05, sched.label(k as f64 * 0.05 - 0.05, k as f64 * 0.05)))
            .collect();
        // A classifier that answers 60 ms late: every switch detected at 100 ms (the second
        // report after it), perfect past a 100 ms allowance, and not without one.
        let late = |r: &Row| sched.at(r.at_s - 0.06).is_some();
        let s = score(&[(&rows, &sched)], 0.1, late);
        assert_eq!((s.switches, s.detected), (2, 2));
        assert!(s.delay_ms.iter().all(|d| (d - 100.0).abs() < 1e-6), "{s:?}");
        assert_eq!((s.delay_on_ms.len(), s.delay_off_ms.len()), (1, 1));
        assert_eq!(s.f1, 1.0);
        assert!(score(&[(&rows, &sched)], 0.0, late).f1 < 1.0);
        // Never saying "backhaul": the on switch is missed, F1 0.
        let never = score(&[(&rows, &sched)], 0.1, |_| false);
        assert_eq!((never.detected, never.f1), (1, 0.0));
    }

    /// A step log's send rate by column name, from the run's time 0; a file without the
    /// columns is refused with its name.
    #[test]
    fn send_rates_read_the_log_by_column_name() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("send.csv");
        std::fs::write(&p, "x,t_ns,rate_mbps_0\n1,2000000000,30.5\n2,2500000000,45\nbad\n").unwrap();
        assert_eq!(send_rates(&p, 1_000_000_000).unwrap(), [(1.0, 30.5), (1.5, 45.0)]);
        std::fs::write(&p, "t_ns,rate\n1,2\n").unwrap();
        let e = send_rates(&p, 0).unwrap_err().to_string();
        assert!(e.contains("send.csv") && e.contains("rate_mbps_0"), "{e}");
    }

    /// The replay decides as the loop: rates apart start an episode, the delay alone holds it
    /// (never starts one), agreeing rates with the queue gone end it; each run starts afresh.
    #[test]
    fn the_replay_holds_an_episode_while_the_queue_stays() {
        let w = BottleneckWeights {
            w: [0.0; BOTTLENECK_FEATURES],
            bias: 10.0,
        };
        // (run, shortfall, delay above the path's own in ms)
        let rows: Vec<Row> = [
            (0, 0.0, 5.0),
            (0, 0.04, 3.0),
            (0, 0.0, 3.0),
            (0, 0.0, 0.2),
            (0, 0.0, 3.0),
            (1, 0.0, 3.0),
        ]
        .iter()
        .enumerate()
        .map(|(k, &(run, short, excess))| {
            let mut features = [0.0; BOTTLENECK_FEATURES];
            features[1] = short;
            features[3] = excess / 10.0;
            Row {
                run,
                at_s: k as f64 * 0.05,
                start_s: k as f64 * 0.05 - 0.05,
                end_s: k as f64 * 0.05,
                features,
                prob: 1.0,
                class: false,
                label: true,
            }
        })
        .collect();
        let classes: Vec<bool> = replay(&w, &rows).iter().map(|r| r.class).collect();
        assert_eq!(classes, [false, true, true, false, false, false]);
    }

    #[test]
    fn training_separates_and_folds_the_scaler() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let rows: Vec<Row> = (0..400)
            .map(|k| {
                let label = k % 2 == 0;
                let mut f = [0.0; BOTTLENECK_FEATURES];
                for x in f.iter_mut() {
                    *x = rng.random_range(0.0..1.0);
                }
                // The newest level: low behind the backhaul.
                f[0] = if label {
                    rng.random_range(0.1..0.5)
                } else {
                    rng.random_range(0.6..1.2)
                };
                Row {
                    run: 0,
                    at_s: k as f64,
                    start_s: 0.0,
                    end_s: 0.0,
                    features: f,
                    prob: 0.0,
                    class: false,
                    label,
                }
            })
            .collect();
        let w = train(&rows, 0.01).unwrap();
        assert!(rows.iter().all(|r| (probability(&w, &r.features) > 0.5) == r.label));
        assert!(w.w[0] < 0.0, "a low level means backhaul: {w:?}");
        assert!(matches!(train(&rows[..5], 0.01), Err(Error::Data(_))));
    }
}

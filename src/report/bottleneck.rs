//! `aggrate testbed bottleneck`'s verdict: the rows, the weights fitted on the training runs,
//! F1 and detection delay in the loop and replayed offline (Markdown + JSON), and two plots of
//! the first held-out run.

use std::path::{Path, PathBuf};

use super::{plot, write_file, WriteError};
use crate::bottleneck::{self as bn, Row, Schedule};

/// One run: its rows, the backhaul's switches as made, the realtime clock at their time 0 (ns).
pub type Run = (Vec<Row>, Schedule, u64);

/// What the runs were (for the verdict's text and JSON).
#[derive(Clone, Debug)]
pub struct Setting<'a> {
    /// The testbed, in words.
    pub testbed: String,
    /// Runs, the first `train` of them for training.
    pub runs: u32,
    /// Training runs.
    pub train: u32,
    /// Seconds per run.
    pub duration_s: u32,
    /// Report interval (ms).
    pub interval_ms: u64,
    /// The backhaul's rates (Mb/s), lowest and highest.
    pub backhaul_mbps: (f64, f64),
    /// Its dwell times (s), shortest and longest.
    pub dwell_s: (f64, f64),
    /// Reports this soon after a switch are left out of F1 (ms).
    pub allowance_ms: u64,
    /// The weights the loop ran ("shipped" or a file).
    pub weights_in_loop: String,
    /// Where the runs' logs are (`run_K/send.csv`) and the verdict goes.
    pub dir: &'a Path,
}

/// The verdict could not be made.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Rows, weights or a log.
    #[error(transparent)]
    Rows(#[from] bn::Error),
    /// Writing a file or a chart.
    #[error(transparent)]
    Write(#[from] WriteError),
}

/// Write `rows.csv`, `weights.json` (with training runs), `bottleneck.md`, `bottleneck.json` and
/// the two plots; returns the Markdown and the files written.
pub fn write(s: &Setting<'_>, runs: &[Run]) -> Result<(String, Vec<PathBuf>), Error> {
    let all: Vec<Row> = runs.iter().flat_map(|r| r.0.clone()).collect();
    bn::write_rows(&s.dir.join("rows.csv"), &all)?;
    let mut written = vec![s.dir.join("rows.csv")];
    let held: Vec<(&[Row], &Schedule)> = runs
        .iter()
        .skip(s.train as usize)
        .map(|r| (r.0.as_slice(), &r.1))
        .collect();
    let allowance = s.allowance_ms as f64 / 1e3;
    let in_loop = bn::score(&held, allowance, |r| r.class);
    let ((lo, hi), (d0, d1)) = (s.backhaul_mbps, s.dwell_s);
    let mut report = serde_json::json!({
        "setting": s.testbed,
        "runs": s.runs,
        "training_runs": s.train,
        "duration_s": s.duration_s,
        "interval_ms": s.interval_ms,
        "backhaul_mbps": [lo, hi],
        "dwell_s": [d0, d1],
        "allowance_ms": s.allowance_ms,
        "weights_in_loop": s.weights_in_loop,
        "in_loop": in_loop,
    });
    let mut md = format!(
        "# Bottleneck classifier on the testbed\n\n{}; {} runs of {} s, reports every {} ms, the \
         backhaul {lo}–{hi} Mb/s on and off every {d0}–{d1} s; F1 over the held-out runs' reports \
         more than {} ms after a switch; detection delay from the switch to the first report \
         the sender took with the new class.\n\n| classifier | reports | F1 | precision | recall | \
         switches detected | delay p50 (ms) | on: max (ms) | off: p50 (ms) | off: max (ms) |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        s.testbed, s.runs, s.duration_s, s.interval_ms, s.allowance_ms
    );
    md += &in_loop.markdown_row("in the loop");
    if s.train > 0 {
        let train: Vec<Row> = runs.iter().take(s.train as usize).flat_map(|r| r.0.clone()).collect();
        let w = bn::train(&train, 0.01)?;
        bn::write_weights(&s.dir.join("weights.json"), &w)?;
        written.push(s.dir.join("weights.json"));
        // The new weights replayed over the held-out reports as the loop decides, row after row.
        let replayed: Vec<(Vec<Row>, &Schedule)> = held
            .iter()
            .map(|(rows, sched)| (bn::replay(&w, rows), *sched))
            .collect();
        let replayed: Vec<(&[Row], &Schedule)> = replayed.iter().map(|(r, s)| (r.as_slice(), *s)).collect();
        let trained = bn::score(&replayed, allowance, |r| r.class);
        md += &trained.markdown_row("trained (offline on the same reports)");
        report["trained_offline"] = serde_json::json!(trained);
        report["weights"] = serde_json::json!(w);
    }
    written.push(write_file(s.dir, "bottleneck.md", md.clone().into_bytes())?);
    let json = serde_json::to_string_pretty(&report).unwrap_or_default() + "\n";
    written.push(write_file(s.dir, "bottleneck.json", json.into_bytes())?);
    written.extend(plots(s, runs)?);
    Ok((md, written))
}

/// The first held-out run: the sender's rate against the backhaul's, and the classifier.
fn plots(s: &Setting<'_>, runs: &[Run]) -> Result<Vec<PathBuf>, Error> {
    let Some((rows, sched, t0_ns)) = runs.get(s.train as usize) else {
        return Ok(Vec::new());
    };
    let rate = bn::send_rates(&s.dir.join(format!("run_{}/send.csv", s.train)), *t0_ns)?;
    let bh: Vec<(f64, f64)> = rows.iter().map(|r| (r.at_s, sched.at(r.at_s).unwrap_or(0.0))).collect();
    let (rate_png, class_png) = (s.dir.join("bottleneck_rate.png"), s.dir.join("bottleneck_class.png"));
    plot::lines(
        &rate_png,
        "aggrate behind a backhaul that switches (held-out run)",
        "time (s)",
        "Mb/s",
        &[
            plot::Series::new("send rate", rate),
            plot::Series::new("backhaul (0: off)", bh),
        ],
        None,
    )
    .map_err(WriteError::from)?;
    let p: Vec<(f64, f64)> = rows.iter().map(|r| (r.at_s, r.prob)).collect();
    let class: Vec<(f64, f64)> = rows
        .iter()
        .map(|r| (r.at_s, r.class as u8 as f64 * 0.98 + 0.01))
        .collect();
    let truth: Vec<(f64, f64)> = rows.iter().map(|r| (r.at_s, r.label as u8 as f64)).collect();
    plot::lines(
        &class_png,
        "Bottleneck classifier in the loop (held-out run)",
        "time (s)",
        "P(backhaul)",
        &[
            plot::Series::new("P(backhaul)", p),
            plot::Series::new("the loop's class (backhaul high)", class),
            plot::Series::new("backhaul on (truth)", truth),
        ],
        Some((-0.05, 1.05)),
    )
    .map_err(WriteError::from)?;
    Ok(vec![rate_png, class_png])
}

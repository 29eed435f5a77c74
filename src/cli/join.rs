//! `aggrate join`: a live run's receiver reports (`recv --log`) against what the AP sent
//! (`ap --truth`), per report interval.

use std::path::PathBuf;

use anyhow::{Context, Result};

use aggrate::livelog::{join, read_reports, read_truth};

use super::progress::Ui;
use super::Exit;

#[derive(Debug, clap::Args)]
pub(crate) struct JoinArgs {
    /// The AP's truth log (`aggrate ap --truth FILE`).
    #[arg(long)]
    pub(crate) truth: PathBuf,
    /// The receiver's report log (`aggrate recv --log FILE`).
    #[arg(long)]
    pub(crate) reports: PathBuf,
    /// The station the receiver is (its index in `ap --stations`).
    #[arg(long, default_value_t = 0)]
    pub(crate) station: u16,
    /// Leave out the receiver's first reports (the sender's start-up ramp). Default: the first
    /// half of the reports with packets (the steady state is the second half, as `sim` scores).
    #[arg(long)]
    pub(crate) skip: Option<usize>,
    /// The target level the sender held (`send --target`).
    #[arg(long, default_value_t = 32.0)]
    pub(crate) target: f64,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub(crate) json: bool,
}

pub(crate) fn run(_ui: &Ui, a: JoinArgs) -> Result<Exit> {
    let truth = read_truth(&a.truth).map_err(|e| super::InputError(e.to_string()))?;
    let reports = read_reports(&a.reports).map_err(|e| super::InputError(e.to_string()))?;
    // Reports after the sender stopped carry nothing.
    let reports: Vec<_> = match reports.iter().rposition(|r| r.packets > 0) {
        Some(last) => reports[..=last].to_vec(),
        None => Vec::new(),
    };
    let first = reports.iter().position(|r| r.packets > 0).unwrap_or(0);
    let skip = a.skip.unwrap_or(first + (reports.len() - first) / 2);
    let j = join(&truth, &reports, a.station, skip, (&a.truth, &a.reports))
        .map_err(|e| super::InputError(e.to_string()))
        .context("joining the logs")?;
    let true_mean = j.level.or(j.frame_count).map_or(f64::NAN, |e| e.truth_mean);
    let off = (true_mean - a.target) / a.target;
    if a.json {
        outln!(
            "{}",
            serde_json::json!({
                "intervals": j.pairs.len(),
                "skipped": skip,
                "true_level_mean": true_mean,
                "target": a.target,
                "true_level_vs_target": off,
                "level": j.level,
                "frame_count": j.frame_count,
                "release_p50_us": j.release_p50_us,
                "release_p99_us": j.release_p99_us,
                "merged_share": j.merged_share,
            })
        );
        return Ok(Exit::Ok);
    }
    let pct = |e: &Option<aggrate::metrics::LevelError>| {
        e.map_or("–".into(), |e| {
            format!(
                "mean {:.1}, bias {:+.1} %, median |error| {:.1} %, p95 {:.1} %",
                e.estimate_mean,
                e.bias * 100.0,
                e.mae_rel_median * 100.0,
                e.err_rel_p95 * 100.0
            )
        })
    };
    outln!(
        "{} intervals of station {} joined (the first {skip} reports left out)",
        j.pairs.len(),
        a.station
    );
    outln!(
        "true μ_N (AP): {true_mean:.1}, {:+.1} % from the target {}",
        off * 100.0,
        a.target
    );
    outln!("steered level: {}", pct(&j.level));
    outln!("frame count:   {}", pct(&j.frame_count));
    outln!(
        "AP release error: median {:.0} µs, worst p99 {:.0} µs; {:.1} % of A-MPDUs left less than {} µs after the previous one (one burst to any receiver)",
        j.release_p50_us,
        j.release_p99_us,
        j.merged_share * 100.0,
        aggrate::wlan::live::MERGE_GAP.as_micros()
    );
    Ok(Exit::Ok)
}

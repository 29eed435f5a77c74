//! μ_N per report interval, as a receiver would report it, against the truth: each capture's
//! packets (with a receiver's kernel times joined, when given) replayed in receive order through
//! the same [`OnlineEstimator`] `aggrate recv` runs, its reports paired with the true MPDUs ÷
//! A-MPDUs of the same intervals from the radiotap labels ([`crate::metrics`]).
//!
//! Both levels are scored: the one a controller steers by ([`AggReport::level`]: from airtime
//! when the PHY rate is known) and the frame count (packets ÷ predicted starts).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use crate::capture::filter::FlowFilter;
use crate::metrics::{truth_per_interval, LevelError, LevelPair};
use crate::model::ModelFile;
use crate::pipeline::{capture_rows, Input, RowsOptions};
use crate::progress::NoProgress;
use crate::runtime::{AggReport, OnlineEstimator, RxPacket};
use crate::time::Ts;

/// Why a capture could not be replayed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading its rows (damage, no ground truth, a kernel log sharing nothing with it, …).
    #[error(transparent)]
    Rows(#[from] crate::pipeline::Error),
    /// The model cannot run online.
    #[error("{}: the model cannot run as an online estimator: {what}", path.display())]
    Estimator {
        /// The capture.
        path: PathBuf,
        /// Why.
        what: String,
    },
}

/// One report interval of a replayed capture.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct IntervalRow {
    /// Interval start (receive clock, ns).
    pub start_ns: u64,
    /// Packets the estimator received in it.
    pub packets: u64,
    /// True A-MPDUs starting in it.
    pub ampdus: u64,
    /// True μ_N.
    pub truth: f64,
    /// The level a controller steers by.
    pub level: f64,
    /// Packets ÷ predicted frames.
    pub count: f64,
    /// The airtime relation's level alone (NaN without a PHY rate).
    pub airtime: f64,
    /// The learned level's trees alone, before [`crate::level::combine`] (NaN without them).
    pub trees: f64,
    /// The interval's features for the learned level (columns of `eval.intervals.csv`).
    #[serde(skip)]
    pub features: Option<crate::level::LevelFeatures>,
}

/// One capture's intervals and scores.
#[derive(Clone, Debug, Serialize)]
pub struct CaptureLevels {
    /// The capture.
    pub path: PathBuf,
    /// Its receive path, when known.
    pub receiver: Option<String>,
    /// Its send rate, from the file name.
    pub rate_mbps: Option<f64>,
    /// Every interval with packets.
    pub intervals: Vec<IntervalRow>,
    /// The steered level against the truth.
    pub level: Option<LevelError>,
    /// The frame count against the truth.
    pub count: Option<LevelError>,
}

/// A packet as the estimator gets it: receive time, first of its A-MPDU, IP length, PHY rate,
/// sequence number.
type Received = (Ts, bool, u32, Option<u64>, Option<u32>);

/// Replay `input` through an estimator of `file` reporting every `interval`, and score it.
/// Errors as reading rows does (damage, no ground truth, a kernel log sharing nothing with the
/// capture).
pub fn replay_levels(
    input: &Input,
    file: &ModelFile,
    interval: Duration,
    filter: &FlowFilter,
    keep_going: bool,
) -> Result<CaptureLevels, Error> {
    let opts = RowsOptions {
        spec: file.spec,
        filter: *filter,
        seq_offset: 0,
        keep_going,
        kernel: input.kernel.clone(),
    };
    let mut pkts: Vec<Received> = Vec::new();
    let out = capture_rows(&input.path, &opts, &mut NoProgress, |m, _| {
        pkts.push((m.host, m.first_of_frame, m.ip_len, m.phy_rate_bps, m.seq))
    })?;
    out.check()?;
    // Receive order (a kernel log can reorder what the sniffer saw).
    pkts.sort_by_key(|p| p.0);
    let mut est = OnlineEstimator::from_model(file, interval).map_err(|e| Error::Estimator {
        path: input.path.clone(),
        what: e.to_string(),
    })?;
    let mut reports: Vec<AggReport> = Vec::new();
    for &(host, _, len, phy, seq) in &pkts {
        est.push(&RxPacket {
            host,
            seq: seq.map(u64::from),
            sent: None,
            len,
            tsft: None,
            phy_rate_bps: phy,
        });
        while let Some(r) = est.poll_report(host) {
            reports.push(r);
        }
    }
    if let Some(&(last, ..)) = pkts.last() {
        let end = last + interval;
        while let Some(r) = est.poll_report(end) {
            reports.push(r);
        }
    }
    let truth = truth_per_interval(pkts.iter().map(|p| (p.0, p.1)), interval);
    let intervals: Vec<IntervalRow> = truth
        .iter()
        .filter_map(|&(start, mpdus, ampdus)| {
            let r = reports.iter().find(|r| r.start == start)?;
            Some(IntervalRow {
                start_ns: start.as_nanos(),
                packets: r.packets,
                ampdus,
                truth: mpdus as f64 / ampdus.max(1) as f64,
                level: r.level(),
                count: r.mean_agg,
                airtime: r.airtime_agg.unwrap_or(f64::NAN),
                trees: r.trees_agg.unwrap_or(f64::NAN),
                features: r.features,
            })
        })
        .collect();
    let score = |pick: fn(&IntervalRow) -> f64| {
        let pairs: Vec<LevelPair> = intervals
            .iter()
            .map(|i| LevelPair {
                start: Ts(i.start_ns),
                estimate: pick(i),
                truth: i.truth,
                ampdus: i.ampdus,
            })
            .collect();
        LevelError::of(&pairs)
    };
    Ok(CaptureLevels {
        path: input.path.clone(),
        receiver: input.receiver.clone(),
        rate_mbps: crate::pipeline::rate_from_name(&input.path),
        level: score(|i| i.level),
        count: score(|i| i.count),
        intervals,
    })
}

/// The scores of several captures' intervals together.
pub fn pooled(captures: &[CaptureLevels]) -> (Option<LevelError>, Option<LevelError>) {
    let pairs = |pick: fn(&IntervalRow) -> f64| -> Vec<LevelPair> {
        captures
            .iter()
            .flat_map(|c| c.intervals.iter())
            .map(|i| LevelPair {
                start: Ts(i.start_ns),
                estimate: pick(i),
                truth: i.truth,
                ampdus: i.ampdus,
            })
            .collect()
    };
    (LevelError::of(&pairs(|i| i.level)), LevelError::of(&pairs(|i| i.count)))
}

/// A capture's name for tables.
pub fn short_name(p: &Path) -> String {
    p.file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

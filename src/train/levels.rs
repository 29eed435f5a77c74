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
use crate::pipeline::air::OthersAir;
use crate::pipeline::{capture_rows_heard, Input, RowsOptions};
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
    /// The share of the interval others took, as the frames of others in the capture show it
    /// (a sniffer's capture; 0 when it holds nobody else's frames, as a station's own capture
    /// does).
    pub others_share: f64,
    /// The steered level with that share given to the estimator as a survey (the steered level
    /// when the share is 0).
    pub level_surveyed: f64,
    /// The airtime level with that share (NaN without a PHY rate).
    pub airtime_surveyed: f64,
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
    /// The steered level with the sniffed share as a survey, against the truth (the steered
    /// level's when the capture holds nobody else's frames).
    pub level_surveyed: Option<LevelError>,
    /// Others' frames the sniffer heard without a rate (no radiotap rate, HT or VHT field):
    /// their air is not in `others_share`.
    pub others_without_rate: u64,
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
    let mut others = OthersAir::default();
    let out = capture_rows_heard(
        &input.path,
        &opts,
        &mut NoProgress,
        |m, _| pkts.push((m.host, m.first_of_frame, m.ip_len, m.phy_rate_bps, m.seq)),
        Some(&mut others),
    )?;
    out.check()?;
    // Receive order (a kernel log can reorder what the sniffer saw).
    pkts.sort_by_key(|p| p.0);
    let estimator = || {
        OnlineEstimator::from_model(file, interval).map_err(|e| Error::Estimator {
            path: input.path.clone(),
            what: e.to_string(),
        })
    };
    let reports = replay(estimator()?, &pkts, interval, |_| 0.0);
    // A sniffer's capture: the same packets again, the estimator told before each report what
    // share of its interval others took (as a channel survey would).
    let busy = others.spans();
    let share_of = |start: Ts| busy.share(start, start + interval);
    let surveyed = if busy.is_empty() {
        Vec::new()
    } else {
        let starts: Vec<Ts> = reports.iter().map(|r| r.start).collect();
        replay(estimator()?, &pkts, interval, |k| {
            starts.get(k).map_or(0.0, |&s| share_of(s))
        })
    };
    let truth = truth_per_interval(pkts.iter().map(|p| (p.0, p.1)), interval);
    let intervals: Vec<IntervalRow> = truth
        .iter()
        .filter_map(|&(start, mpdus, ampdus)| {
            let k = reports.iter().position(|r| r.start == start)?;
            let r = &reports[k];
            // Nobody else heard: the survey would say 0, which is what the first replay told it.
            let sv = if busy.is_empty() {
                Some(r)
            } else {
                surveyed.get(k).filter(|s| s.start == start)
            };
            Some(IntervalRow {
                start_ns: start.as_nanos(),
                packets: r.packets,
                ampdus,
                truth: mpdus as f64 / ampdus.max(1) as f64,
                level: r.level(),
                count: r.mean_agg,
                airtime: r.airtime_agg.unwrap_or(f64::NAN),
                trees: r.trees_agg.unwrap_or(f64::NAN),
                others_share: sv.map_or(f64::NAN, |_| share_of(start)),
                level_surveyed: sv.map_or(f64::NAN, |s| s.level()),
                airtime_surveyed: sv.and_then(|s| s.airtime_agg).unwrap_or(f64::NAN),
                features: r.features,
            })
        })
        .collect();
    let score = |pick: fn(&IntervalRow) -> f64| score(&intervals, pick);
    Ok(CaptureLevels {
        path: input.path.clone(),
        receiver: input.receiver.clone(),
        rate_mbps: crate::pipeline::rate_from_name(&input.path),
        level: score(|i| i.level),
        count: score(|i| i.count),
        level_surveyed: score(|i| i.level_surveyed),
        others_without_rate: others.without_rate(),
        intervals,
    })
}

/// The estimator's reports over `pkts` (in receive order), `share(k)` set as the survey's share
/// of others before the `k`-th report is taken.
fn replay(
    mut est: OnlineEstimator,
    pkts: &[Received],
    interval: Duration,
    share: impl Fn(usize) -> f64,
) -> Vec<AggReport> {
    let mut reports: Vec<AggReport> = Vec::new();
    let take = |est: &mut OnlineEstimator, now: Ts, reports: &mut Vec<AggReport>| loop {
        est.set_others_share(share(reports.len()));
        match est.poll_report(now) {
            Some(r) => reports.push(r),
            None => break,
        }
    };
    for &(host, _, len, phy, seq) in pkts {
        est.push(&RxPacket {
            host,
            seq: seq.map(u64::from),
            sent: None,
            len,
            tsft: None,
            phy_rate_bps: phy,
        });
        take(&mut est, host, &mut reports);
    }
    if let Some(&(last, ..)) = pkts.last() {
        take(&mut est, last + interval, &mut reports);
    }
    reports
}

/// `pick`'s estimate of each interval against its truth.
fn score<'a>(rows: impl IntoIterator<Item = &'a IntervalRow>, pick: fn(&IntervalRow) -> f64) -> Option<LevelError> {
    let pairs: Vec<LevelPair> = rows
        .into_iter()
        .map(|i| LevelPair {
            start: Ts(i.start_ns),
            estimate: pick(i),
            truth: i.truth,
            ampdus: i.ampdus,
        })
        .collect();
    LevelError::of(&pairs)
}

/// The scores of several captures' intervals together.
pub fn pooled(captures: &[CaptureLevels]) -> (Option<LevelError>, Option<LevelError>) {
    let all = || captures.iter().flat_map(|c| c.intervals.iter());
    (score(all(), |i| i.level), score(all(), |i| i.count))
}

/// A capture's name for tables.
pub fn short_name(p: &Path) -> String {
    p.file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Bins of others' share of the air, as a sniffer's capture shows it, for [`by_contention`]:
/// (upper edge, name).
pub const CONTENTION_BINS: [(f64, &str); 5] = [
    (0.005, "none heard (< 0.5 %)"),
    (0.05, "0.5–5 %"),
    (0.15, "5–15 %"),
    (0.30, "15–30 %"),
    (f64::INFINITY, "30 % and more"),
];

/// μ_N's error over the intervals whose sniffed share of others falls in one bin of
/// [`CONTENTION_BINS`].
#[derive(Clone, Debug, Serialize)]
pub struct ContentionRow {
    /// The bin's name.
    pub others: &'static str,
    /// Mean share of others over its intervals.
    pub share_mean: f64,
    /// The steered level, as a receiver without a survey reports it.
    pub level: Option<LevelError>,
    /// The steered level with the sniffed share as its survey.
    pub level_surveyed: Option<LevelError>,
    /// The airtime level alone.
    pub airtime: Option<LevelError>,
    /// The airtime level with the sniffed share.
    pub airtime_surveyed: Option<LevelError>,
    /// The frame count.
    pub count: Option<LevelError>,
}

/// The intervals by the share of the air others took in them, as the captures show it (0 in a
/// capture that holds nobody else's frames): one row per bin with intervals scored.
pub fn by_contention(captures: &[CaptureLevels]) -> Vec<ContentionRow> {
    let rows: Vec<&IntervalRow> = captures
        .iter()
        .flat_map(|c| c.intervals.iter())
        .filter(|i| i.others_share.is_finite())
        .collect();
    let mut out = Vec::new();
    let mut lo = f64::NEG_INFINITY;
    for (hi, name) in CONTENTION_BINS {
        let bin: Vec<&IntervalRow> = rows
            .iter()
            .copied()
            .filter(|i| i.others_share >= lo && i.others_share < hi)
            .collect();
        lo = hi;
        let score = |pick: fn(&IntervalRow) -> f64| score(bin.iter().copied(), pick);
        let level = score(|i| i.level);
        if level.is_none() {
            continue;
        }
        out.push(ContentionRow {
            others: name,
            share_mean: bin.iter().map(|i| i.others_share).sum::<f64>() / bin.len() as f64,
            level,
            level_surveyed: score(|i| i.level_surveyed),
            airtime: score(|i| i.airtime),
            airtime_surveyed: score(|i| i.airtime_surveyed),
            count: score(|i| i.count),
        });
    }
    out
}

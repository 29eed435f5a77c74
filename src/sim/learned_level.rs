//! Training the learned level ([`crate::level`]): closed-loop runs of the emulator across
//! receive paths and the other traffic a channel carries, one row per report interval (the
//! receiver's [`LevelFeatures`], its airtime level, the interval's true μ_N), gradient-boosted
//! trees fitted to `ln(truth ÷ airtime level)`, and cross-validation that holds out a whole
//! receive path or a whole kind of other traffic at a time.
//!
//! The runs are steered by the airtime level at targets drawn from 6–58, so the rows cover levels
//! from one to the Block Ack window with and without others on the channel (steered by the
//! airtime level alone, others push the true level above the target: exactly the rows the
//! learned level must correct). Everything is seeded: the same plan gives the same rows and the
//! same trees.
//!
//! Why trees of our own instead of smartcore's `RandomForestRegressor`: the fitted trees must
//! become plain data in `aggrate-core` (which has no smartcore) and be walked per report
//! interval without allocation; smartcore keeps its nodes private. The fitter below is the usual
//! histogram gradient boosting (features binned at quantiles once, per-level gradient
//! histograms, complete trees of fixed depth).

use std::time::Duration;

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use super::{EstimatorKind, SimConfig, Steer};
use crate::level::{feature_names, LevelFeatures, LevelModel, Tree, LEVEL_FEATURES};
use crate::metrics::{LevelError, LevelPair};
use crate::model::ModelFile;
use crate::time::Ts;
use crate::wlan::noise::NoisePreset;
use crate::wlan::{Arrivals, WlanConfig};

/// A receive path of the plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Receiver {
    /// One of the presets (`none`, `laptop`, `phone`).
    Preset(NoisePreset),
    /// A random receive path drawn from this seed.
    Random(u64),
}

impl Receiver {
    /// Its name in tables (`random` for every drawn one: they are held out together).
    pub fn name(&self) -> String {
        match self {
            Receiver::Preset(p) => format!("{p:?}").to_ascii_lowercase(),
            Receiver::Random(_) => "random".into(),
        }
    }
}

/// The other traffic of a run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Others {
    /// Kind (held out together in cross-validation).
    pub kind: OthersKind,
    /// How many.
    pub n: u32,
    /// Offered load of each (Mb/s; unused when saturated).
    pub mbps: f64,
}

/// Kinds of other traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OthersKind {
    /// Nobody else.
    None,
    /// Stations sending single frames, Poisson.
    Station,
    /// A neighbouring network's AP aggregating its downlink (A-MPDUs of up to 32).
    NeighbourAp,
    /// A saturated neighbour (always a frame queued; A-MPDUs of up to 8).
    Saturated,
    /// On/off bursts (a video stream's chunks: 300 ms on, 700 ms off; A-MPDUs of up to 16).
    Bursty,
}

impl OthersKind {
    /// All kinds.
    pub const ALL: [OthersKind; 5] = [
        OthersKind::None,
        OthersKind::Station,
        OthersKind::NeighbourAp,
        OthersKind::Saturated,
        OthersKind::Bursty,
    ];

    /// Name in tables.
    pub fn name(self) -> &'static str {
        match self {
            OthersKind::None => "none",
            OthersKind::Station => "station",
            OthersKind::NeighbourAp => "neighbour-ap",
            OthersKind::Saturated => "saturated",
            OthersKind::Bursty => "bursty",
        }
    }
}

impl Others {
    /// Set the WLAN's contenders.
    pub fn apply(&self, w: &mut WlanConfig) {
        w.contenders = if self.kind == OthersKind::None { 0 } else { self.n };
        w.contender_rate_mbps = self.mbps;
        (w.contender_ampdu, w.contender_arrivals) = match self.kind {
            OthersKind::None | OthersKind::Station => (1, Arrivals::Poisson),
            OthersKind::NeighbourAp => (32, Arrivals::Poisson),
            OthersKind::Saturated => (8, Arrivals::Saturated),
            OthersKind::Bursty => (
                16,
                Arrivals::OnOff {
                    on_ms: 300.0,
                    off_ms: 700.0,
                },
            ),
        };
    }

    /// `kind n×mbps` for tables.
    pub fn label(&self) -> String {
        match self.kind {
            OthersKind::None => "none".into(),
            OthersKind::Saturated => format!("{} × saturated", self.n),
            k => format!("{} × {} Mb/s {}", self.n, self.mbps, k.name()),
        }
    }
}

/// One closed-loop run of the plan.
#[derive(Clone, Copy, Debug)]
pub struct Run {
    /// Receive path.
    pub receiver: Receiver,
    /// Other traffic.
    pub others: Others,
    /// VHT MCS (2 SS, 80 MHz).
    pub mcs: u8,
    /// The airtime-steered loop's target.
    pub target: f64,
    /// A fixed send rate instead of a loop (Mb/s): the open-loop rows a capture at a constant
    /// rate gives, from an idle AP to an overloaded one.
    pub fixed_mbps: Option<f64>,
    /// Report interval (ms).
    pub interval_ms: u64,
    /// Seed.
    pub seed: u64,
}

impl Run {
    /// Virtual seconds it lasts: a loop [`RUN_SECONDS`], a fixed rate [`FIXED_SECONDS`].
    pub fn seconds(&self) -> f64 {
        if self.fixed_mbps.is_some() {
            FIXED_SECONDS
        } else {
            RUN_SECONDS
        }
    }

    /// The start-up its rows leave out: a loop's settling, a fixed rate's first queue.
    pub fn warmup_s(&self) -> f64 {
        if self.fixed_mbps.is_some() {
            0.5
        } else {
            WARMUP_S
        }
    }
}

/// Fixed-rate runs per fixed-rate draw of [`plan`], each [`FIXED_SECONDS`] long: a fixed rate
/// needs no settling, and its rows are alike within a run, so four short runs at four rates and
/// MCS give the fit four operating points where one long run gave one (at equal emulator time).
pub const FIXED_SPLIT: usize = 4;

/// Virtual seconds of a fixed-rate run.
pub const FIXED_SECONDS: f64 = RUN_SECONDS / FIXED_SPLIT as f64;

/// A random receive path of the plan from its seed: even seeds from the default ranges, odd ones
/// from ranges where MPDU-by-MPDU hand-off and interrupt moderation are the rule (80 % each, 30 %
/// and 60 % by default) — NICs that hand each MPDU over as it is decoded, behind coalescing, are
/// common, and beside others they are where the level read lowest (`datasets/contended.toml`,
/// `contended_kernel.toml`: 22 of 42 real-kernel cells passing with the default ranges alone, 33
/// with these). Drawing half from `datasets/receivers.toml`'s ranges instead (more timers and
/// buses) cost 5 of 280 quiet-channel points and gained nothing beside others.
pub fn random_receiver(seed: u64) -> Option<crate::wlan::noise::ReceivePath> {
    if seed % 2 == 1 {
        let per_mpdu = crate::wlan::noise::RandomReceiver {
            p_per_mpdu: 0.8,
            p_moderation: 0.8,
            ..Default::default()
        };
        return NoisePreset::Random.resolve(seed, Some(&per_mpdu));
    }
    NoisePreset::Random.resolve(seed, None)
}

/// The plan of round `round` (0: steered by the airtime level; 1: by the first round's learned
/// level) — [`plan`] with the seed moved on per round.
pub fn plan_round(seed: u64, per_cell: usize, round: u64) -> Vec<Run> {
    plan(seed.wrapping_add(round.wrapping_mul(0x9E37_79B9_7F4A_7C15)), per_cell)
}

/// The plan: for every receive path (the presets and `random` draws) and every kind of other
/// traffic, `per_cell` runs with MCS, target (or, in half of them, a fixed send rate of
/// 50–650 Mb/s), load and interval drawn from `seed`.
pub fn plan(seed: u64, per_cell: usize) -> Vec<Run> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let receivers = [
        NoisePreset::None,
        NoisePreset::Laptop,
        NoisePreset::Phone,
        NoisePreset::Random,
    ];
    let mut runs = Vec::new();
    for r in receivers {
        for kind in OthersKind::ALL {
            // Random receive paths are many: twice the runs, so that the fit meets more of them;
            // four times on a quiet channel, where a receive path's own timer is the only thing
            // that lengthens gaps (and the trees must learn that it is not others' air).
            let runs_here = match (r, kind) {
                (NoisePreset::Random, OthersKind::None) => 4 * per_cell,
                (NoisePreset::Random, _) => 2 * per_cell,
                _ => per_cell,
            };
            for _ in 0..runs_here {
                let receiver = match r {
                    NoisePreset::Random => Receiver::Random(rng.random()),
                    p => Receiver::Preset(p),
                };
                let (n, mbps) = match kind {
                    OthersKind::None => (0, 0.0),
                    OthersKind::Station => (rng.random_range(1..=3), [2.0, 5.0, 10.0, 20.0][rng.random_range(0..4)]),
                    OthersKind::NeighbourAp => (1, [10.0, 20.0, 50.0, 100.0][rng.random_range(0..4)]),
                    OthersKind::Saturated => (rng.random_range(1..=2), 0.0),
                    OthersKind::Bursty => (rng.random_range(1..=2), [5.0, 10.0, 25.0][rng.random_range(0..3)]),
                };
                let fixed = rng.random_bool(0.5);
                for k in 0..if fixed { FIXED_SPLIT } else { 1 } {
                    let receiver = match (r, k) {
                        (NoisePreset::Random, 1..) => Receiver::Random(rng.random()),
                        _ => receiver,
                    };
                    runs.push(Run {
                        receiver,
                        others: Others { kind, n, mbps },
                        mcs: rng.random_range(4..=9),
                        target: rng.random_range(6.0..58.0f64).round(),
                        fixed_mbps: fixed.then(|| rng.random_range(50.0..650.0f64).round()),
                        interval_ms: if rng.random_bool(0.75) { 100 } else { 500 },
                        seed: rng.random(),
                    });
                }
            }
        }
    }
    runs
}

/// One report interval.
#[derive(Clone, Copy, Debug)]
pub struct Row {
    /// The receiver's features.
    pub features: LevelFeatures,
    /// Its airtime level.
    pub airtime: f64,
    /// Its frame count.
    pub count: f64,
    /// The interval's true μ_N.
    pub truth: f64,
    /// True A-MPDUs in it.
    pub ampdus: u64,
    /// Index of its run in the plan.
    pub run: usize,
}

/// Why rows could not be made.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A run failed.
    #[error("run {run} ({what}): {source}")]
    Run {
        /// Index.
        run: usize,
        /// Its settings.
        what: String,
        /// Why.
        source: crate::sim::Error,
    },
    /// No rows.
    #[error("no report interval had a level to learn from")]
    Empty,
}

/// Virtual seconds each run lasts, and the start-up left out.
pub const RUN_SECONDS: f64 = 16.0;
const WARMUP_S: f64 = 2.0;

/// Run the plan on `threads` threads with the per-packet model `model`, calling
/// `progress(done, total)`. The loops steer by the airtime level, or by the learned level
/// `steer_by` (a second round: rows where a learned level holds the loop, the operating points
/// it meets when shipped); rows record their run's index plus `run_offset`.
pub fn collect(
    runs: &[Run],
    model: &ModelFile,
    steer_by: Option<&LevelModel>,
    run_offset: usize,
    threads: usize,
    mut progress: impl FnMut(usize, usize),
) -> Result<Vec<Row>, Error> {
    let mut per: Vec<Option<Result<Vec<Row>, crate::sim::Error>>> = (0..runs.len()).map(|_| None).collect();
    let mut done = 0;
    crate::parallel::for_each(
        runs.len(),
        threads,
        |i| {
            let r = runs[i];
            let mut wlan = WlanConfig::vht_stations(&[r.mcs]);
            r.others.apply(&mut wlan);
            let cfg = SimConfig {
                wlan,
                noise: match r.receiver {
                    Receiver::Preset(p) => p.resolve(r.seed, None),
                    Receiver::Random(s) => random_receiver(s),
                },
                estimator: EstimatorKind::Model(Box::new(ModelFile {
                    level: steer_by.cloned(),
                    ..model.clone()
                })),
                control: match r.fixed_mbps {
                    None => crate::control::PiParams {
                        target: r.target,
                        ..Default::default()
                    },
                    Some(x) => crate::control::PiParams {
                        initial_mbps: x,
                        min_mbps: x,
                        max_mbps: x,
                        // No queue guard: the rate is the run's, whatever the delay.
                        queue_guard_ms: 0.0,
                        ..Default::default()
                    },
                },
                interval: Duration::from_millis(r.interval_ms),
                duration_s: r.seconds(),
                seed: r.seed,
                steer: if steer_by.is_some() {
                    Steer::Level
                } else {
                    Steer::Airtime
                },
                ..SimConfig::default()
            };
            crate::sim::run(&cfg, |_| {}).map(|res| {
                res.series
                    .iter()
                    .filter(|s| s.t >= r.warmup_s() && s.true_agg > 0.0 && s.airtime_agg > 0.0)
                    .filter_map(|s| {
                        s.features.map(|features| Row {
                            features,
                            airtime: s.airtime_agg,
                            count: s.count_agg,
                            truth: s.true_agg,
                            ampdus: s.true_ampdus,
                            run: run_offset + i,
                        })
                    })
                    .collect::<Vec<Row>>()
            })
        },
        |i, rows| {
            per[i] = Some(rows);
            done += 1;
            progress(done, runs.len());
        },
    );
    let mut out = Vec::new();
    for (i, r) in per.into_iter().enumerate() {
        match r {
            Some(Ok(rows)) => out.extend(rows),
            Some(Err(source)) => {
                return Err(Error::Run {
                    run: i,
                    what: format!("{runs:?}", runs = runs[i]),
                    source,
                })
            }
            None => {
                return Err(Error::Run {
                    run: i,
                    what: "a worker stopped".into(),
                    source: crate::sim::Error::Bad {
                        field: "worker",
                        value: 0.0,
                        allowed: "no panic",
                    },
                })
            }
        }
    }
    if out.is_empty() {
        return Err(Error::Empty);
    }
    Ok(out)
}

/// Boosting settings.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct GbdtParams {
    /// Trees.
    pub trees: usize,
    /// Depth of each.
    pub depth: u8,
    /// Learning rate (shrinkage).
    pub learning_rate: f32,
    /// Fewest rows in a leaf.
    pub min_leaf: usize,
    /// Quantile bins per feature.
    pub bins: usize,
    /// The prediction's clamp (ln of the ratio to the airtime level).
    pub clamp: [f32; 2],
}

impl Default for GbdtParams {
    fn default() -> Self {
        GbdtParams {
            trees: 300,
            depth: 5,
            learning_rate: 0.05,
            min_leaf: 40,
            bins: 48,
            // The airtime level is the least the station can be at (others only lengthen the
            // cycle): the learned level stays above 0.78 of it whatever a receive path it never
            // saw makes of the features; at most 20 times it.
            clamp: [-0.25, 3.0],
        }
    }
}

/// The target of a row: ln(truth ÷ airtime level).
fn target(r: &Row) -> f32 {
    (r.truth / r.airtime.max(1.0)).ln() as f32
}

/// Fit trees on `rows` (each weighted `w`).
pub fn fit(rows: &[&Row], w: &[f32], p: &GbdtParams) -> LevelModel {
    let n = rows.len();
    let y: Vec<f32> = rows.iter().map(|r| target(r)).collect();
    let wsum: f32 = w.iter().sum::<f32>().max(1e-9);
    let base = y.iter().zip(w).map(|(y, w)| y * w).sum::<f32>() / wsum;
    // Bin edges per feature at quantiles; each row's bin per feature.
    let mut edges: Vec<Vec<f32>> = Vec::with_capacity(LEVEL_FEATURES);
    let mut binned = vec![0u8; n * LEVEL_FEATURES];
    for f in 0..LEVEL_FEATURES {
        let mut v: Vec<f32> = rows.iter().map(|r| r.features.0[f]).collect();
        v.sort_by(f32::total_cmp);
        let mut e: Vec<f32> = (1..p.bins).map(|k| v[(k * (n - 1)) / p.bins]).collect();
        e.dedup();
        for (i, r) in rows.iter().enumerate() {
            let x = r.features.0[f];
            binned[i * LEVEL_FEATURES + f] = e.partition_point(|&t| t < x) as u8;
        }
        edges.push(e);
    }
    let internal = (1usize << p.depth) - 1;
    let mut pred = vec![base; n];
    let mut node = vec![0usize; n];
    let mut trees = Vec::with_capacity(p.trees);
    let nb = p.bins + 1;
    for _ in 0..p.trees {
        let g: Vec<f32> = (0..n).map(|i| y[i] - pred[i]).collect();
        let mut feature = vec![0u16; internal];
        // A node that does not split sends every row left (JSON has no infinity).
        let mut threshold = vec![f32::MAX; internal];
        node.iter_mut().for_each(|k| *k = 0);
        for level in 0..p.depth as usize {
            let first = (1usize << level) - 1;
            let width = 1usize << level;
            // Per node of this level, per feature, per bin: (Σ w·g, Σ w, rows).
            let mut hist = vec![(0f64, 0f64, 0u32); width * LEVEL_FEATURES * nb];
            for i in 0..n {
                let k = node[i] - first;
                let row = &binned[i * LEVEL_FEATURES..(i + 1) * LEVEL_FEATURES];
                let (wg, ww) = ((w[i] * g[i]) as f64, w[i] as f64);
                for (f, &b) in row.iter().enumerate() {
                    let h = &mut hist[(k * LEVEL_FEATURES + f) * nb + b as usize];
                    h.0 += wg;
                    h.1 += ww;
                    h.2 += 1;
                }
            }
            for k in 0..width {
                let mut best: Option<(f64, usize, usize)> = None;
                for f in 0..LEVEL_FEATURES {
                    let h = &hist[(k * LEVEL_FEATURES + f) * nb..(k * LEVEL_FEATURES + f + 1) * nb];
                    let (tg, tw, tn) = h
                        .iter()
                        .fold((0.0, 0.0, 0u32), |a, b| (a.0 + b.0, a.1 + b.1, a.2 + b.2));
                    let (mut lg, mut lw, mut ln) = (0.0, 0.0, 0u32);
                    for (b, hb) in h.iter().enumerate().take(edges[f].len()) {
                        lg += hb.0;
                        lw += hb.1;
                        ln += hb.2;
                        let (rg, rw, rn) = (tg - lg, tw - lw, tn - ln);
                        if (ln as usize) < p.min_leaf || (rn as usize) < p.min_leaf || lw <= 0.0 || rw <= 0.0 {
                            continue;
                        }
                        let gain = lg * lg / lw + rg * rg / rw - tg * tg / tw;
                        if best.is_none_or(|x| gain > x.0) {
                            best = Some((gain, f, b));
                        }
                    }
                }
                if let Some((_, f, b)) = best.filter(|x| x.0 > 1e-12) {
                    feature[first + k] = f as u16;
                    threshold[first + k] = edges[f][b];
                }
            }
            for i in 0..n {
                let k = node[i];
                let f = feature[k] as usize;
                node[i] = if rows[i].features.0[f] <= threshold[k] {
                    2 * k + 1
                } else {
                    2 * k + 2
                };
            }
        }
        let mut sums = vec![(0f64, 0f64); internal + 1];
        for i in 0..n {
            let j = node[i] - internal;
            sums[j].0 += (w[i] * g[i]) as f64;
            sums[j].1 += w[i] as f64;
        }
        let leaf: Vec<f32> = sums
            .iter()
            .map(|&(s, ww)| {
                if ww > 0.0 {
                    (s / ww) as f32 * p.learning_rate
                } else {
                    0.0
                }
            })
            .collect();
        for i in 0..n {
            pred[i] += leaf[node[i] - internal];
        }
        trees.push(Tree {
            feature,
            threshold,
            leaf,
        });
    }
    LevelModel {
        features: feature_names(),
        depth: p.depth,
        base,
        trees,
        clamp: p.clamp,
        rule: crate::level::LevelRule::Floor,
        training: serde_json::Value::Null,
    }
}

/// Weights that give every (receiver, kind) cell the same total: no cell's row count decides
/// the fit.
pub fn cell_weights(rows: &[&Row], runs: &[Run]) -> Vec<f32> {
    let key = |r: &Row| (runs[r.run].receiver.name(), runs[r.run].others.kind);
    let mut count = std::collections::BTreeMap::new();
    for r in rows {
        *count.entry(key(r)).or_insert(0usize) += 1;
    }
    rows.iter().map(|r| 1000.0 / count[&key(r)] as f32).collect()
}

/// How the held-out part of a fold is chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum HoldOut {
    /// A whole receive path at a time.
    Receiver,
    /// A whole kind of other traffic at a time.
    OthersKind,
}

/// One (receiver, others) cell of a cross-validation.
#[derive(Clone, Debug, Serialize)]
pub struct CellScore {
    /// Receive path.
    pub receiver: String,
    /// Kind of other traffic.
    pub others: &'static str,
    /// The learned level, held out.
    pub learned: Option<LevelError>,
    /// The airtime level alone.
    pub airtime: Option<LevelError>,
    /// The frame count.
    pub count: Option<LevelError>,
}

/// Held-out scores per cell: for each value of the held-out key, fit on every other and score
/// the held-out rows; and each row's held-out prediction (`ln(level ÷ airtime level)` of the
/// trees alone, before [`crate::level::combine`]), by row.
pub fn cross_validate(rows: &[Row], runs: &[Run], by: HoldOut, p: &GbdtParams) -> (Vec<CellScore>, Vec<f32>) {
    let key = |r: &Row| -> String {
        match by {
            HoldOut::Receiver => runs[r.run].receiver.name(),
            HoldOut::OthersKind => runs[r.run].others.kind.name().to_string(),
        }
    };
    let mut keys: Vec<String> = rows.iter().map(key).collect();
    keys.sort();
    keys.dedup();
    let mut pairs: std::collections::BTreeMap<(String, OthersKind), [Vec<LevelPair>; 3]> = Default::default();
    let mut held_out = vec![0f32; rows.len()];
    for k in &keys {
        let train: Vec<&Row> = rows.iter().filter(|r| &key(r) != k).collect();
        let w = cell_weights(&train, runs);
        let m = fit(&train, &w, p);
        for (i, r) in rows.iter().enumerate().filter(|(_, r)| &key(r) == k) {
            let run = &runs[r.run];
            let e = pairs
                .entry((run.receiver.name(), run.others.kind))
                .or_insert_with(|| [Vec::new(), Vec::new(), Vec::new()]);
            let pair = |estimate: f64| LevelPair {
                start: Ts(i as u64),
                estimate,
                truth: r.truth,
                ampdus: r.ampdus,
            };
            held_out[i] = m.predict(&r.features);
            e[0].push(pair(learned(&m, r)));
            e[1].push(pair(r.airtime));
            e[2].push(pair(r.count));
        }
    }
    let cells = pairs
        .into_iter()
        .map(|((receiver, kind), [l, a, c])| CellScore {
            receiver,
            others: kind.name(),
            learned: LevelError::of(&l),
            airtime: LevelError::of(&a),
            count: LevelError::of(&c),
        })
        .collect();
    (cells, held_out)
}

/// The learned level of a row, as the online estimator reports it ([`crate::level::combine`]).
pub fn learned(m: &LevelModel, r: &Row) -> f64 {
    crate::level::combine(
        m.level(r.airtime, &r.features),
        r.airtime,
        (r.count > 0.0).then_some(r.count),
        64.0,
        m.rule,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(x0: f32, truth: f64, run: usize) -> Row {
        let mut f = LevelFeatures::default();
        f.0[5] = x0;
        Row {
            features: f,
            airtime: 10.0,
            // A count above both: the trees' level is the median.
            count: 40.0,
            truth,
            ampdus: 50,
            run,
        }
    }

    #[test]
    fn trees_learn_a_step_in_one_feature() {
        // Truth doubles the airtime level where feature 5 exceeds 0.5.
        let rows: Vec<Row> = (0..400)
            .map(|i| {
                let x = i as f32 / 400.0;
                row(x, if x > 0.5 { 20.0 } else { 10.0 }, 0)
            })
            .collect();
        let refs: Vec<&Row> = rows.iter().collect();
        let m = fit(
            &refs,
            &vec![1.0; rows.len()],
            &GbdtParams {
                trees: 100,
                depth: 2,
                learning_rate: 0.2,
                min_leaf: 5,
                bins: 32,
                clamp: [-2.0, 2.0],
            },
        );
        m.check().unwrap();
        let lo = learned(&m, &row(0.2, 0.0, 0));
        let hi = learned(&m, &row(0.8, 0.0, 0));
        assert!((lo - 10.0).abs() < 0.5 && (hi - 20.0).abs() < 1.0, "{lo} {hi}");
    }

    #[test]
    fn the_plan_is_seeded_and_covers_every_cell() {
        let (a, b) = (plan(7, 2), plan(7, 2));
        // A draw is one loop run or FIXED_SPLIT short fixed-rate runs.
        let draws = |runs: &[Run]| {
            let fixed = runs.iter().filter(|r| r.fixed_mbps.is_some()).count();
            assert_eq!(fixed % FIXED_SPLIT, 0);
            runs.len() - fixed + fixed / FIXED_SPLIT
        };
        assert_eq!(draws(&a), (3 * 5 + 2 * 4 + 4) * 2, "random receive paths get more runs");
        assert!(a.len() > draws(&a), "some draws are fixed rates, split in short runs");
        assert!(a.iter().zip(&b).all(|(x, y)| x.seed == y.seed && x.target == y.target));
        assert!(plan(8, 2).iter().zip(&a).any(|(x, y)| x.seed != y.seed));
        for k in OthersKind::ALL {
            let want = if k == OthersKind::None { 14 } else { 10 };
            let of_kind: Vec<Run> = a.iter().filter(|r| r.others.kind == k).copied().collect();
            assert_eq!(draws(&of_kind), want);
        }
        for r in &a {
            let (secs, warm) = if r.fixed_mbps.is_some() {
                (FIXED_SECONDS, 0.5)
            } else {
                (RUN_SECONDS, WARMUP_S)
            };
            assert_eq!((r.seconds(), r.warmup_s()), (secs, warm));
        }
        // A fixed-rate draw's short runs: each its own rate and MCS (random receive paths their own too).
        let fixed: Vec<&Run> = a.iter().filter(|r| r.fixed_mbps.is_some()).collect();
        assert!(fixed
            .chunks(FIXED_SPLIT)
            .any(|g| g.iter().any(|r| r.fixed_mbps != g[0].fixed_mbps)));
    }
}

/// What steers a loop of the loop table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LoopSteer {
    /// MAC timestamps (the upper bound: a receiver that sees the radio).
    Mac,
    /// The receiver's level: the learned level.
    Learned,
    /// The airtime level alone.
    Airtime,
    /// The frame count alone.
    FrameCount,
}

impl LoopSteer {
    /// All, in table order.
    pub const ALL: [LoopSteer; 4] = [
        LoopSteer::Mac,
        LoopSteer::Learned,
        LoopSteer::Airtime,
        LoopSteer::FrameCount,
    ];
}

/// One cell of the loop table: a closed loop at the target on one receive path with one kind of
/// other traffic, steered four ways.
#[derive(Clone, Debug, Serialize)]
pub struct LoopRow {
    /// Receive path.
    pub receiver: String,
    /// Other traffic.
    pub others: String,
    /// Per [`LoopSteer::ALL`]: true μ_N, rate (Mb/s), one-way delay mean and p95 (ms), lost.
    pub loops: Vec<LoopResult>,
}

/// One loop of a cell.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct LoopResult {
    /// What steered it.
    pub steer: LoopSteer,
    /// True μ_N (second half).
    pub true_agg: f64,
    /// Received rate (Mb/s).
    pub rate_mbps: f64,
    /// One-way delay, mean (ms).
    pub delay_mean_ms: f64,
    /// One-way delay, p95 (ms).
    pub delay_p95_ms: f64,
    /// Packets lost.
    pub lost: u64,
}

/// The cells of the loop table: receive paths × other traffic.
pub fn loop_cells() -> Vec<(Receiver, Others)> {
    let others = [
        Others {
            kind: OthersKind::None,
            n: 0,
            mbps: 0.0,
        },
        Others {
            kind: OthersKind::Station,
            n: 1,
            mbps: 5.0,
        },
        Others {
            kind: OthersKind::Station,
            n: 2,
            mbps: 5.0,
        },
        Others {
            kind: OthersKind::Station,
            n: 1,
            mbps: 20.0,
        },
        Others {
            kind: OthersKind::Saturated,
            n: 1,
            mbps: 0.0,
        },
        Others {
            kind: OthersKind::NeighbourAp,
            n: 1,
            mbps: 50.0,
        },
        Others {
            kind: OthersKind::Bursty,
            n: 1,
            mbps: 25.0,
        },
    ];
    let receivers = [
        Receiver::Preset(NoisePreset::Laptop),
        Receiver::Preset(NoisePreset::Phone),
        Receiver::Random(7),
    ];
    receivers
        .iter()
        .flat_map(|&r| others.iter().map(move |&o| (r, o)))
        .collect()
}

/// Run the loop table: every cell of [`loop_cells`] steered every way of [`LoopSteer::ALL`],
/// `seconds` virtual seconds each at the study's target, with `model` (its learned level for
/// [`LoopSteer::Learned`]).
pub fn loop_table(
    model: &ModelFile,
    seconds: f64,
    seed: u64,
    threads: usize,
    mut progress: impl FnMut(usize, usize),
) -> Result<Vec<LoopRow>, crate::sim::Error> {
    let cells = loop_cells();
    let jobs: Vec<(usize, LoopSteer)> = (0..cells.len())
        .flat_map(|c| LoopSteer::ALL.iter().map(move |&s| (c, s)))
        .collect();
    let mut results: Vec<Option<Result<LoopResult, crate::sim::Error>>> = (0..jobs.len()).map(|_| None).collect();
    let mut done = 0;
    crate::parallel::for_each(
        jobs.len(),
        threads,
        |j| {
            let (c, steer) = jobs[j];
            let (receiver, others) = cells[c];
            let mut wlan = WlanConfig::vht_stations(&[9]);
            others.apply(&mut wlan);
            let cfg = SimConfig {
                wlan,
                noise: match receiver {
                    Receiver::Preset(p) => p.resolve(seed, None),
                    Receiver::Random(s) => NoisePreset::Random.resolve(s, None),
                },
                estimator: match steer {
                    LoopSteer::Mac => EstimatorKind::Mac,
                    _ => EstimatorKind::Model(Box::new(model.clone())),
                },
                steer: match steer {
                    LoopSteer::FrameCount => Steer::FrameCount,
                    LoopSteer::Airtime => Steer::Airtime,
                    LoopSteer::Mac | LoopSteer::Learned => Steer::Level,
                },
                duration_s: seconds,
                seed,
                ..SimConfig::default()
            };
            crate::sim::run(&cfg, |_| {}).map(|r| {
                let s = r.stations[0];
                LoopResult {
                    steer,
                    true_agg: s.mean_agg,
                    rate_mbps: s.rate_mbps,
                    delay_mean_ms: s.delay_ms_mean,
                    delay_p95_ms: s.delay_ms_p95,
                    lost: s.lost,
                }
            })
        },
        |j, r| {
            results[j] = Some(r);
            done += 1;
            progress(done, jobs.len());
        },
    );
    let mut rows: Vec<LoopRow> = cells
        .iter()
        .map(|(r, o)| LoopRow {
            receiver: match r {
                Receiver::Random(s) => format!("random (seed {s})"),
                r => r.name(),
            },
            others: o.label(),
            loops: Vec::new(),
        })
        .collect();
    for (j, r) in results.into_iter().enumerate() {
        let r = r.ok_or(crate::sim::Error::Bad {
            field: "worker",
            value: j as f64,
            allowed: "no panic",
        })??;
        rows[jobs[j].0].loops.push(r);
    }
    Ok(rows)
}

//! A model's operating point for a receiver **without its labels**: simulated receivers whose
//! packet timing looks like this one's stand in for it (`aggrate calibrate --no-labels`,
//! `train --group-by receiver --self-calibrate`).
//!
//! Why: held out of training, the shipped model ranks a new receiver's packets about as well as
//! the receiver's own model, but its decision threshold is off (models/README.md), and a labelled
//! stretch of the receiver needs a sniffer next to it. What the receiver *does* have is its own
//! receive times, and their distribution says a lot about its receive path: a timer tick puts
//! the gaps at multiples of its period, per-MPDU hand-off makes a run of equal small gaps, a
//! backlog moves the whole distribution down. So: emulate a bank of receive paths drawn from
//! the random ranges (`wlan::noise::RandomReceiver`) at the receiver's load, where the labels
//! come free from the emulator; summarise every run's gaps ([`GapStats`]: quantiles of the log
//! gap and its autocorrelation); take the `k` runs nearest the receiver's own summary; and set
//! the threshold that is best on *their* labelled rows. Measured leave one receiver out on
//! `datasets/receivers.toml` (models/README.md), it gets about half of what the labelled
//! calibration does: 32 → 36 of 50 receivers pass the strict test (labelled: 39). A capture
//! the bank has nothing like ([`Likeness::max_distance`]) keeps the model's own threshold: on
//! real-kernel paths in no training set a far bank's threshold cost up to 0.23 F1.

use std::ops::Range;

use serde::Serialize;

use crate::dataset::Dataset;
use crate::features::{FeatureSpec, GapWindow};
use crate::model::{EstimatorModel, LoadOffset};
use crate::progress::Progress;
use crate::time::Ts;
use crate::train::calibrate::{best_threshold_weighted, load_input, median_load, without_offset};
use crate::train::Predict;
use crate::wlan::manifest::{DatasetManifest, PlannedReceiver};

/// The bank the CLI uses unless given another (`datasets/bank.toml`): the paper's WLAN through
/// receive paths drawn from the random ranges of `datasets/receivers.toml`, with another seed.
pub const DEFAULT_BANK: &str = include_str!("../../datasets/bank.toml");

/// Neighbours whose rows set the threshold, unless told otherwise.
pub const DEFAULT_K: usize = 20;

/// Farthest a capture's nearest bank run may lie (standardised distance, [`Bank::nearest`]) for
/// the bank to set its threshold, unless told otherwise; farther, the model keeps its own.
/// Chosen leave one receiver out on `datasets/receivers.toml` (models/README.md): the emulated
/// receivers lie within about 2 of the bank, the real-kernel paths 2–8 away, and beyond about
/// 3 the bank's threshold cost more than it gave. For the emulated bank; a bank of measured
/// receivers takes none by default (the CLI's `--measured`, `--bank-dataset`,
/// `--self-calibrate-on-training`): there, the same measurement found no limit better (36 of
/// 56 pass with failing points 37, against 35 and 40 with a limit of 3; the test receivers
/// alike).
pub const DEFAULT_MAX_DISTANCE: f64 = 3.0;

pub use aggrate_core::selfcal::{
    fingerprint, BankSummary, GapStats, Likeness, SummaryRun, BIN_WIDTH, FAMILIAR_DISTANCE, LAGS, MAX_SUMMARY_BYTES,
    MIN_GAPS, QUANTILES, STATS, SUMMARY_FORMAT,
};

/// One emulated run of a bank.
#[derive(Clone, Debug, Serialize)]
pub struct BankRun {
    /// Receiver name (`random-NN`).
    pub receiver: String,
    /// Send rate.
    pub rate_mbps: f64,
    /// Its gap summary.
    pub stats: GapStats,
    /// Its rows in [`Bank::data`] (empty until emulated with rows).
    #[serde(skip)]
    pub rows: Range<usize>,
    /// Its emulation job (the bank's plan).
    #[serde(skip)]
    job: usize,
    /// Its rows' decisions under one model, binned ([`BankSummary`]): `[bin, starts, others]`
    /// per non-empty bin. Stands in for `rows` in a bank read from a summary.
    #[serde(skip)]
    hist: Vec<[i64; 3]>,
}

/// Emulated receivers with labelled rows, to calibrate on by likeness ([`self_calibrate`]).
///
/// [`summarise`] emulates every run but keeps only its [`GapStats`]; [`Bank::fill`] emulates the
/// runs a calibration needs again (the same seeds: the same rows) and keeps their rows, so the
/// memory is that of the neighbours, not of the whole bank ([`build`] keeps every run's rows).
#[derive(Clone, Debug, Default)]
pub struct Bank {
    /// Rows of the runs emulated with rows (group = run index), in the model's feature layout.
    pub data: Dataset,
    /// The runs (a run without rows yet has an empty `rows`).
    pub runs: Vec<BankRun>,
    /// What each run emulates (receiver, rate, scenario), by [`BankRun::job`].
    jobs: Vec<(String, f64, crate::wlan::run::ValidScenario)>,
    /// The rows' layout.
    spec: FeatureSpec,
    /// Receivers whose runs are not matched ([`Bank::exclude`]).
    excluded: Vec<String>,
    /// A bank read from a [`BankSummary`]: the model it was summarised for ([`fingerprint`])
    /// and its decision bins' width. Its runs lend binned decisions instead of rows, for that
    /// model only.
    summarised_for: Option<SummaryOf>,
}

/// What a bank read from a [`BankSummary`] was summarised for.
#[derive(Clone, Debug)]
struct SummaryOf {
    /// The model's [`fingerprint`].
    fingerprint: String,
    /// The model's name, for messages.
    model_name: String,
    /// Width of the decision bins.
    bin_width: f64,
}

/// Why a bank cannot be built or used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The bank manifest is not valid.
    #[error("bank manifest: {0}")]
    Manifest(#[from] crate::wlan::config::ConfigError),
    /// A bank receiver is a real-kernel path (those need the testbed, not the emulator).
    #[error("bank receiver {0} is a real-kernel path: a bank holds emulated receive paths only")]
    KernelReceiver(String),
    /// No send rate to emulate at.
    #[error("no send rate to build the bank at")]
    NoRates,
    /// The features cannot be computed.
    #[error(transparent)]
    Label(#[from] crate::label::Error),
    /// A run of the receiver is too short to summarise.
    #[error("run {run} of the receiver has {gaps} gaps; its timing summary needs {MIN_GAPS} or more")]
    ShortRun {
        /// Run index (capture order).
        run: usize,
        /// Its gaps.
        gaps: usize,
    },
    /// No bank run is at a usable rate.
    #[error("the bank has no run at {0} Mb/s or near it")]
    NoRunAtRate(f64),
    /// The neighbours' rows hold no frame start.
    #[error("the bank runs nearest the receiver at {0} Mb/s hold no frame start")]
    NoStarts(f64),
    /// A decision is not a number (the model does not fit the rows).
    #[error("the model's decision on bank row {0} is not a number")]
    NotANumber(usize),
    /// The threshold cannot be written into the model.
    #[error(transparent)]
    Shift(#[from] crate::model::ParamError),
    /// A run of the receiver has no send rate to find bank runs at.
    #[error("run {run} of the receiver has no send rate (name the capture `…_<rate>mbps` or give the rate)")]
    NoRate {
        /// Run index (capture order).
        run: usize,
    },
    /// A neighbour was summarised but not emulated with rows ([`Bank::fill`]).
    #[error("bank run {0} at {1} Mb/s has no rows: fill the bank with the neighbours first")]
    NoRows(String, f64),
    /// A bank summary was made for another model.
    #[error(
        "the bank summary was made for model {summary} ({name}), not this one ({model}): its decisions are that model's; summarise the dataset again for this model"
    )]
    OtherModel {
        /// Fingerprint the summary was made for.
        summary: String,
        /// That model's name.
        name: String,
        /// This model's fingerprint.
        model: String,
    },
    /// A bank summary is not valid.
    #[error("bank summary: {0}")]
    Summary(String),
    /// Bytes that are not a bank summary at all.
    #[error("not a bank summary: {0}")]
    NotASummary(String),
}

/// Decisions, their labels and how many rows each stands for ([`best_threshold_weighted`]).
pub(crate) type Pool = (Vec<f64>, Vec<bool>, Vec<u64>);

/// One run of the receiver and its nearest bank runs.
struct Match {
    run: Range<usize>,
    rate: f64,
    bank_rate: f64,
    nearest: Vec<(usize, f64)>,
}

/// Parse a bank manifest (a dataset manifest: its `train_rates_mbps` are replaced by the rates
/// asked for when the bank is built).
pub fn parse_manifest(text: &str) -> Result<DatasetManifest, toml::de::Error> {
    toml::from_str(text)
}

/// Emulate `manifest`'s receivers at each of `rates` (its own rates are ignored) on `threads`
/// threads and keep every run's rows, in `spec`'s layout ([`summarise`], then [`Bank::fill`]
/// with every run). Deterministic for the manifest's seed: the thread count changes nothing.
pub fn build(
    manifest: &DatasetManifest,
    rates: &[f64],
    spec: &FeatureSpec,
    threads: usize,
    progress: &mut dyn Progress,
) -> Result<Bank, Error> {
    let mut bank = summarise(manifest, rates, spec, threads, progress)?;
    let all: Vec<usize> = (0..bank.runs.len()).collect();
    bank.fill(&all, threads, progress);
    Ok(bank)
}

/// Emulate `manifest`'s receivers at each of `rates` like [`build`], but keep only each run's
/// summary: memory for the summaries, whatever the bank's size. [`Bank::fill`] adds the rows
/// of the runs a calibration needs ([`Bank::neighbours_of`]).
pub fn summarise(
    manifest: &DatasetManifest,
    rates: &[f64],
    spec: &FeatureSpec,
    threads: usize,
    progress: &mut dyn Progress,
) -> Result<Bank, Error> {
    let mut bank = plan(manifest, rates, spec)?;
    let all: Vec<usize> = (0..bank.jobs.len()).collect();
    let mut stats: Vec<(usize, GapStats)> = Vec::with_capacity(all.len());
    progress.start("emulating the calibration bank", all.len() as u64);
    emulate(&bank.jobs, &all, spec, threads, &mut |i, rows| {
        // The rows are dropped here, as each run comes in.
        if let Some(s) = GapStats::of(&rows.host) {
            stats.push((i, s));
        }
        progress.inc();
    });
    progress.finish();
    stats.sort_unstable_by_key(|(i, _)| *i);
    bank.runs = stats
        .into_iter()
        .map(|(job, stats)| BankRun {
            receiver: bank.jobs[job].0.clone(),
            rate_mbps: bank.jobs[job].1,
            stats,
            rows: 0..0,
            job,
            hist: Vec::new(),
        })
        .collect();
    Ok(bank)
}

/// The bank's runs, planned: `manifest`'s receivers at each of `rates`, checked.
fn plan(manifest: &DatasetManifest, rates: &[f64], spec: &FeatureSpec) -> Result<Bank, Error> {
    let mut rates: Vec<f64> = rates.iter().copied().filter(|r| r.is_finite() && *r > 0.0).collect();
    rates.sort_unstable_by(f64::total_cmp);
    rates.dedup();
    if rates.is_empty() {
        return Err(Error::NoRates);
    }
    let m = DatasetManifest {
        train_rates_mbps: rates,
        eval_rates_mbps: Vec::new(),
        ..manifest.clone()
    };
    let mut jobs = Vec::new();
    for p in m.expand()? {
        let receiver = match &p.receiver {
            Some(PlannedReceiver::Kernel { name, .. }) => return Err(Error::KernelReceiver(name.clone())),
            Some(PlannedReceiver::Model(r)) => r.name.clone(),
            None => "base".to_string(),
        };
        let scn = p.scenario.clone().check()?;
        jobs.push((receiver, p.rate_mbps, scn));
    }
    Ok(Bank {
        data: Dataset::new(spec.width()),
        runs: Vec::new(),
        jobs,
        spec: *spec,
        excluded: Vec::new(),
        summarised_for: None,
    })
}

/// Emulate `jobs[idx]` on `threads` threads, handing each run's rows to `done(job, rows)` on
/// this thread as they come in (in any order).
fn emulate(
    jobs: &[(String, f64, crate::wlan::run::ValidScenario)],
    idx: &[usize],
    spec: &FeatureSpec,
    threads: usize,
    done: &mut dyn FnMut(usize, Dataset),
) {
    crate::parallel::for_each(
        idx.len(),
        threads,
        |k| {
            let (_, rate, scn) = &jobs[idx[k]];
            emulate_rows(scn, *rate, spec)
        },
        |k, rows| done(idx[k], rows),
    );
}

/// Labelled rows of one emulated run's first station, as a capture of it would give: a row per
/// packet the receive path delivered, in MAC order, its label "first packet of its A-MPDU that
/// reached the receiver" (what labelling the written capture yields).
fn emulate_rows(scn: &crate::wlan::run::ValidScenario, rate: f64, spec: &FeatureSpec) -> Dataset {
    let mut data = Dataset::new(spec.width());
    let mut window = GapWindow::new(spec);
    let mut frame: Option<u32> = None;
    let mut frame_open = false;
    crate::wlan::run::run(
        scn,
        |d, host| {
            if d.sta.0 != 0 {
                return;
            }
            if frame != Some(d.ampdu_ref) {
                frame = Some(d.ampdu_ref);
                frame_open = false;
            }
            let Some(h) = host else { return };
            let start = !frame_open;
            frame_open = true;
            if let Some(x) = window.push(h) {
                let level = d.count.min(spec.n_max.max(1));
                data.push_at(h, x, start, 0, rate as f32, level);
            }
        },
        |_| {},
    );
    data
}

/// A run's nearest bank receiver ([`Bank::likeness_of`]).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Nearest {
    /// The run's group (its first row's: the capture, as the CLI reads them).
    pub group: u32,
    /// Send rate of the run.
    pub rate_mbps: f64,
    /// The bank rate its nearest run was taken at.
    pub bank_rate_mbps: f64,
    /// That run's receiver.
    pub receiver: String,
    /// Its distance (standardised, as [`Bank::nearest`]).
    pub distance: f64,
}

impl Nearest {
    /// Whether the run lies within [`FAMILIAR_DISTANCE`] of its nearest bank receiver (no
    /// neighbour at all, a NaN distance, never does).
    pub fn familiar(&self) -> bool {
        self.distance <= FAMILIAR_DISTANCE
    }

    /// As reports give it (`aggrate eval`'s `training_likeness`, the Python package's): the
    /// `capture` as the caller names it, the rates, the nearest receiver, its distance and
    /// whether that is [`Nearest::familiar`].
    pub fn to_json(&self, capture: serde_json::Value) -> serde_json::Value {
        serde_json::json!({
            "capture": capture,
            "rate_mbps": self.rate_mbps,
            "nearest": self.receiver,
            "bank_rate_mbps": self.bank_rate_mbps,
            "distance": self.distance,
            "familiar": self.familiar(),
        })
    }
}

/// How the bank set one run's operating point.
#[derive(Clone, Debug, Serialize)]
pub struct SelfRun {
    /// Send rate of the receiver's run.
    pub rate_mbps: f64,
    /// The bank rate its neighbours were taken at.
    pub bank_rate_mbps: f64,
    /// The neighbours: bank receiver names, nearest first.
    pub neighbours: Vec<String>,
    /// Distance to the nearest (the summary's standardised Euclidean distance).
    pub distance: f64,
    /// The threshold best on the neighbours' rows (0, the model's own, when the run is too far
    /// from the bank: `too_far`).
    pub threshold: f64,
    /// The nearest bank run was farther than [`Likeness::max_distance`]: the bank does not
    /// look like this run, so its threshold was not taken.
    pub too_far: bool,
    /// Where it is placed: the run's median load (`lmean`), for a perceptron on a context.
    pub load: Option<f64>,
}

/// What [`self_calibrate`] did.
#[derive(Clone, Debug, Serialize)]
pub struct SelfCalibration {
    /// Neighbours per run, and how near the nearest must be.
    pub likeness: Likeness,
    /// One threshold for every load (models without a receiver context).
    pub threshold: Option<f64>,
    /// The threshold per load, `[load, threshold]`, by load.
    pub knots: Vec<[f64; 2]>,
    /// Per run of the receiver.
    pub runs: Vec<SelfRun>,
}

/// Set `model`'s operating point for the receiver whose rows are `target` **without reading
/// their labels**: for each run (capture) of it, the `k` bank runs at the nearest bank rate
/// whose [`GapStats`] are closest to the run's (each number standardised by its spread over the
/// bank's runs at that rate) lend their labelled rows, and the threshold best on them is the
/// run's. A perceptron on a receiver context gets it at the run's median load, interpolated
/// between ([`LoadOffset`], as `calibrate` does); other models one threshold, best on the
/// neighbours of every run pooled. A run whose nearest bank run lies farther than
/// `like.max_distance` keeps the model's own threshold at its load (and is left out of the
/// pool): the bank is not like it, and measured on real-kernel paths a far bank's threshold
/// cost more than it gave. Any earlier load offset is replaced. A run's rate is its rows' rate
/// tag (`target.rate_mbps`); a run without one is refused.
pub fn self_calibrate(
    target: &Dataset,
    model: &EstimatorModel,
    spec: &FeatureSpec,
    bank: &Bank,
    like: Likeness,
) -> Result<(EstimatorModel, SelfCalibration), Error> {
    let k = like.k.max(1);
    let model = without_offset(model);
    if let Some(of) = &bank.summarised_for {
        let this = fingerprint(&model, spec);
        if of.fingerprint != this {
            return Err(Error::OtherModel {
                summary: of.fingerprint.clone(),
                name: of.model_name.clone(),
                model: this,
            });
        }
    }
    let li = load_input(&model, spec);
    let mut runs = Vec::new();
    let mut pooled: Pool = (Vec::new(), Vec::new(), Vec::new());
    let mut knots: Vec<[f64; 2]> = Vec::new();
    for Match {
        run,
        rate,
        bank_rate,
        nearest,
    } in bank.matches(target, k)?
    {
        let distance = nearest.first().map_or(f64::NAN, |n| n.1);
        let load = li.map(|li| median_load(run.clone().map(|i| target.row(i)[li]).collect()));
        let too_far = !like.admits(distance);
        // Too far: the model's own threshold (0) at this load, and nothing in the pool.
        let threshold = if too_far {
            0.0
        } else {
            let (dec, y, w) = bank.decisions(&model, &nearest)?;
            let (t, _) = best_threshold_weighted(&dec, &y, &w).ok_or(Error::NoStarts(rate))?;
            pooled.0.extend(dec);
            pooled.1.extend(y);
            pooled.2.extend(w);
            t
        };
        if let Some(x) = load.filter(|x| x.is_finite()) {
            knots.push([x, threshold]);
        }
        runs.push(SelfRun {
            rate_mbps: rate,
            bank_rate_mbps: bank_rate,
            neighbours: nearest.iter().map(|&(b, _)| bank.runs[b].receiver.clone()).collect(),
            distance,
            threshold,
            too_far,
            load,
        });
    }
    let mut out = model.clone();
    let threshold = match (&mut out, li) {
        (EstimatorModel::Mlp(m), Some(li)) if !knots.is_empty() => {
            knots = merge_knots(knots);
            m.load_offset = Some(LoadOffset {
                input: li,
                knots: knots.clone(),
            });
            None
        }
        _ => {
            // Every run too far: the model's own threshold.
            let t = if pooled.0.is_empty() {
                0.0
            } else {
                best_threshold_weighted(&pooled.0, &pooled.1, &pooled.2)
                    .ok_or(Error::NoStarts(f64::NAN))?
                    .0
            };
            out.shift(t)?;
            knots.clear();
            Some(t)
        }
    };
    Ok((
        out,
        SelfCalibration {
            likeness: Likeness { k, ..like },
            threshold,
            knots,
            runs,
        },
    ))
}

/// The receivers of `bank` ranked by how alike they time packets to `target`'s captures,
/// without labels: for each run of `target`, every receiver's nearest run at the bank rate
/// nearest the run's ([`Bank::nearest`]: [`GapStats`] standardised by their spread there), and
/// per receiver the mean of those distances over `target`'s runs — nearest first. A receiver
/// missing at some run's rate is ranked by the runs it has, after every receiver seen at all of
/// them. `train --like` weights its training receivers so.
pub fn rank_receivers(bank: &Bank, target: &Dataset) -> Result<Vec<(String, f64)>, Error> {
    let matches = bank.matches(target, bank.runs.len())?;
    // Per receiver: (sum of distances, runs of target it was seen at).
    let mut by: Vec<(String, f64, usize)> = Vec::new();
    for m in &matches {
        let mut seen: Vec<&str> = Vec::new();
        // `nearest` is sorted: a receiver's first run is its nearest at this rate.
        for &(b, d) in &m.nearest {
            let name = bank.runs[b].receiver.as_str();
            if seen.contains(&name) {
                continue;
            }
            seen.push(name);
            match by.iter_mut().find(|e| e.0 == name) {
                Some(e) => {
                    e.1 += d;
                    e.2 += 1;
                }
                None => by.push((name.to_string(), d, 1)),
            }
        }
    }
    // Seen at more of the target's runs first (at most one per run), then nearer.
    let mut out: Vec<(String, f64, usize)> = by.into_iter().map(|(n, s, c)| (n, s / c as f64, c)).collect();
    out.sort_by(|a, b| b.2.cmp(&a.2).then(a.1.total_cmp(&b.1)).then(a.0.cmp(&b.0)));
    Ok(out.into_iter().map(|(n, d, _)| (n, d)).collect())
}

/// The whole label-free calibration: [`summarise`] `manifest`'s bank at the rates of `target`'s
/// runs, emulate with rows only the runs that will lend theirs ([`Bank::neighbours_of`],
/// [`Bank::fill`]: memory for `k` runs per capture), and [`self_calibrate`].
#[allow(clippy::too_many_arguments)]
pub fn calibrate_without_labels(
    target: &Dataset,
    model: &EstimatorModel,
    spec: &FeatureSpec,
    manifest: &DatasetManifest,
    like: Likeness,
    threads: usize,
    progress: &mut dyn Progress,
) -> Result<(EstimatorModel, SelfCalibration), Error> {
    let rates: Vec<f64> = target.rate_mbps.iter().map(|&r| r as f64).collect();
    let mut bank = summarise(manifest, &rates, spec, threads, progress)?;
    let need = bank.neighbours_of(target, like)?;
    bank.fill(&need, threads, progress);
    self_calibrate(target, model, spec, &bank, like)
}

/// Knots by load; runs of one load share the mean of their thresholds; at most the model's
/// knot limit (the lowest loads kept).
fn merge_knots(mut knots: Vec<[f64; 2]>) -> Vec<[f64; 2]> {
    knots.sort_unstable_by(|a, b| a[0].total_cmp(&b[0]));
    let mut out: Vec<([f64; 2], usize)> = Vec::new();
    for [x, t] in knots {
        match out.last_mut() {
            Some((k, n)) if k[0] == x => {
                k[1] += t;
                *n += 1;
            }
            _ => out.push(([x, t], 1)),
        }
    }
    let mut v: Vec<[f64; 2]> = out.into_iter().map(|([x, t], n)| [x, t / n as f64]).collect();
    v.truncate(crate::model::mlp::MAX_KNOTS);
    v
}

impl Bank {
    /// Keep `rows` as run `r`'s rows.
    fn keep_rows(&mut self, r: usize, rows: Dataset) {
        let start = self.data.len();
        self.data.append(&Dataset {
            group: vec![r as u32; rows.len()],
            ..rows
        });
        self.runs[r].rows = start..self.data.len();
    }

    /// `model`'s decisions on the rows of the bank runs `nearest`, their labels and how many rows
    /// each stands for: a row once; a summarised run's bin centre once per label, with its count.
    pub(crate) fn decisions(&self, model: &EstimatorModel, nearest: &[(usize, f64)]) -> Result<Pool, Error> {
        let (mut dec, mut y, mut w) = (Vec::new(), Vec::new(), Vec::new());
        for &(b, _) in nearest {
            let run = &self.runs[b];
            if let Some(of) = &self.summarised_for {
                let (d, l, n) = aggrate_core::selfcal::pool_of_bins([run.hist.as_slice()], of.bin_width);
                dec.extend(d);
                y.extend(l);
                w.extend(n);
                continue;
            }
            if run.rows.is_empty() {
                return Err(Error::NoRows(run.receiver.clone(), run.rate_mbps));
            }
            for i in run.rows.clone() {
                let d = model.decision(self.data.row(i));
                if d.is_nan() {
                    return Err(Error::NotANumber(i));
                }
                dec.push(d);
                y.push(self.data.y[i]);
                w.push(1);
            }
        }
        Ok((dec, y, w))
    }

    /// A bank of labelled captures already read — no emulation, no rows kept: one run per run of
    /// `data` (a capture at one rate), named by its receiver (`receiver_of_group[group]` into
    /// `names`). Runs too short to summarise are left out. For [`rank_receivers`].
    pub fn of_captures(data: &Dataset, receiver_of_group: &[u32], names: &[String]) -> Bank {
        let all: Vec<usize> = (0..data.len()).collect();
        Bank::of_captures_among(data, &all, receiver_of_group, names)
    }

    /// [`Bank::of_captures`] of the runs among `rows` only.
    pub fn of_captures_among(data: &Dataset, rows: &[usize], receiver_of_group: &[u32], names: &[String]) -> Bank {
        Bank {
            runs: summarise_captures(data, rows, receiver_of_group, names)
                .into_iter()
                .map(|(_, run)| run)
                .collect(),
            ..Bank::default()
        }
    }

    /// A bank of labelled captures already read, *with* their rows: one run per run (a capture
    /// at one rate) among `rows` of `data`, named by its receiver, its summary from all its
    /// rows and every `stride`-th of them kept to calibrate on. Receivers measured rather than
    /// emulated — real kernel receive paths among them — lend their rows to
    /// [`self_calibrate`] as an emulated bank's do. Runs too short to summarise are left out.
    pub fn of_captures_with_rows(
        data: &Dataset,
        rows: &[usize],
        receiver_of_group: &[u32],
        names: &[String],
        stride: usize,
    ) -> Bank {
        let mut kept: Vec<usize> = Vec::new();
        let mut runs = Vec::new();
        for (at, mut run) in summarise_captures(data, rows, receiver_of_group, names) {
            let start = kept.len();
            kept.extend(rows[at].iter().step_by(stride.max(1)));
            run.rows = start..kept.len();
            runs.push(run);
        }
        Bank {
            data: data.select(&kept),
            runs,
            ..Bank::default()
        }
    }

    /// Leave the runs of `receivers` out of every match from now on (e.g. the receiver being
    /// calibrated, in a bank of measured receivers that holds it); an empty list takes them
    /// all back.
    pub fn exclude(&mut self, receivers: Vec<String>) {
        self.excluded = receivers;
    }

    /// For each run of `target` (at its rows' rate tag), the `k` bank runs nearest it.
    fn matches(&self, target: &Dataset, k: usize) -> Result<Vec<Match>, Error> {
        let all: Vec<usize> = (0..target.len()).collect();
        let mut out = Vec::new();
        for (ri, run) in target.runs(&all).into_iter().enumerate() {
            let stats = GapStats::of(&target.host[run.clone()]).ok_or(Error::ShortRun {
                run: ri,
                gaps: run.len().saturating_sub(1),
            })?;
            let rate = target.rate_mbps[run.start] as f64;
            if !rate.is_finite() {
                return Err(Error::NoRate { run: ri });
            }
            let (bank_rate, nearest) = self.nearest(rate, &stats, k.max(1)).ok_or(Error::NoRunAtRate(rate))?;
            out.push(Match {
                run,
                rate,
                bank_rate,
                nearest,
            });
        }
        Ok(out)
    }

    /// For each run of `target` (at its rows' rate tag, [`GapStats`] from its receive times —
    /// no label read): the bank rate its nearest bank run was taken at, that run's receiver and
    /// its distance ([`Bank::nearest`]). How much like the bank's receivers a receiver times
    /// packets: measured on the shipped model and its training receivers, the test receivers'
    /// points within 1 of them never failed the strict test, and a third of those farther did
    /// (models/README.md).
    pub fn likeness_of(&self, target: &Dataset) -> Result<Vec<Nearest>, Error> {
        Ok(self
            .matches(target, 1)?
            .into_iter()
            .map(|m| {
                let (receiver, distance) = m
                    .nearest
                    .first()
                    .map_or((String::new(), f64::NAN), |&(b, d)| (self.runs[b].receiver.clone(), d));
                Nearest {
                    group: target.group[m.run.start],
                    rate_mbps: m.rate,
                    bank_rate_mbps: m.bank_rate,
                    receiver,
                    distance,
                }
            })
            .collect())
    }

    /// The bank runs [`self_calibrate`] will take rows from for `target` (sorted, distinct).
    /// Runs of `target` too far from the bank (`like.max_distance`) need none.
    pub fn neighbours_of(&self, target: &Dataset, like: Likeness) -> Result<Vec<usize>, Error> {
        let mut v: Vec<usize> = self
            .matches(target, like.k)?
            .into_iter()
            .filter(|m| m.nearest.first().is_some_and(|n| like.admits(n.1)))
            .flat_map(|m| m.nearest.into_iter().map(|(b, _)| b))
            .collect();
        v.sort_unstable();
        v.dedup();
        Ok(v)
    }

    /// Emulate the runs `which` (indices into `runs`) that have no rows yet, again with the
    /// same seeds, and keep their rows.
    pub fn fill(&mut self, which: &[usize], threads: usize, progress: &mut dyn Progress) {
        let todo: Vec<usize> = which
            .iter()
            .copied()
            .filter(|&r| r < self.runs.len() && self.runs[r].rows.is_empty())
            .collect();
        let jobs: Vec<usize> = todo.iter().map(|&r| self.runs[r].job).collect();
        let mut parts: Vec<(usize, Dataset)> = Vec::with_capacity(jobs.len());
        progress.start("emulating the nearest bank receivers with rows", jobs.len() as u64);
        let spec = self.spec;
        emulate(&self.jobs, &jobs, &spec, threads, &mut |job, rows| {
            parts.push((job, rows));
            progress.inc();
        });
        progress.finish();
        parts.sort_unstable_by_key(|(job, _)| *job);
        for (job, rows) in parts {
            if let Some(r) = todo.iter().copied().find(|&r| self.runs[r].job == job) {
                self.keep_rows(r, rows);
            }
        }
    }

    /// Whether run `i` takes part in matches (its receiver is not excluded).
    fn matched(&self, i: usize) -> bool {
        !self.excluded.contains(&self.runs[i].receiver)
    }

    /// The bank's send rates, ascending.
    pub fn rates(&self) -> Vec<f64> {
        let mut r: Vec<f64> = (0..self.runs.len())
            .filter(|&i| self.matched(i))
            .map(|i| self.runs[i].rate_mbps)
            .collect();
        r.sort_unstable_by(f64::total_cmp);
        r.dedup();
        r
    }

    /// The bank rate nearest `rate` and, at it, the `k` runs whose summaries are nearest `s`
    /// (index, distance), nearest first ([`aggrate_core::selfcal::nearest_among`]: each number
    /// divided by its spread over the runs at that rate). `None` when the bank has no run.
    pub fn nearest(&self, rate: f64, s: &GapStats, k: usize) -> Option<(f64, Vec<(usize, f64)>)> {
        let at = self
            .rates()
            .into_iter()
            .min_by(|a, b| (a - rate).abs().total_cmp(&(b - rate).abs()))?;
        let cands: Vec<(usize, &GapStats)> = (0..self.runs.len())
            .filter(|&i| self.runs[i].rate_mbps == at && self.matched(i))
            .map(|i| (i, &self.runs[i].stats))
            .collect();
        Some((at, aggrate_core::selfcal::nearest_among(&cands, s, k)))
    }
}

/// The shipped model's training receivers (`datasets/receivers.toml`) summarised for it, embedded
/// (`models/mlp8_m5_ctx1024.bank.json.xz`, from `aggrate dataset summarise data/receivers`).
const SHIPPED_SUMMARY: &[u8] = include_bytes!("../../models/mlp8_m5_ctx1024.bank.json.xz");

/// The embedded [`SHIPPED_SUMMARY`], decompressed and parsed.
pub fn shipped_summary() -> Result<BankSummary, Error> {
    parse_summary(SHIPPED_SUMMARY, true).map_err(|e| Error::Summary(format!("embedded summary: {e}")))
}

/// The bank of the shipped model's training receivers ([`shipped_summary`]) when `model` (with
/// `spec`) is the shipped model or a calibrated copy of it; `None` for any other model, of whose
/// training receivers nothing is known here.
pub fn shipped_bank_for(model: &EstimatorModel, spec: &FeatureSpec) -> Result<Option<Bank>, Error> {
    let s = shipped_summary()?;
    if s.model != fingerprint(model, spec) {
        return Ok(None);
    }
    Bank::of_summary(&s).map(Some)
}

/// A [`BankSummary`] from its JSON, xz-compressed when `xz`; at most [`MAX_SUMMARY_BYTES`]
/// uncompressed (more is refused, not read).
pub fn parse_summary(bytes: &[u8], xz: bool) -> Result<BankSummary, Error> {
    use std::io::Read;
    let text = if xz {
        let mut out = Vec::new();
        xz2::read::XzDecoder::new(bytes)
            .take(MAX_SUMMARY_BYTES + 1)
            .read_to_end(&mut out)
            .map_err(|e| Error::NotASummary(format!("not an xz stream: {e}")))?;
        out
    } else {
        bytes.to_vec()
    };
    if text.len() as u64 > MAX_SUMMARY_BYTES {
        return Err(Error::NotASummary(format!(
            "more than {MAX_SUMMARY_BYTES} bytes of JSON"
        )));
    }
    serde_json::from_slice(&text).map_err(|e| Error::NotASummary(e.to_string()))
}

impl Bank {
    /// The runs among `rows` of `data` (named as in [`Bank::of_captures_with_rows`]) summarised
    /// for `model` ([`BankSummary`]): every row's decision, binned by its label. `from` names
    /// the data for the reader. Runs too short to summarise are left out.
    #[allow(clippy::too_many_arguments)]
    pub fn summary(
        data: &Dataset,
        rows: &[usize],
        receiver_of_group: &[u32],
        names: &[String],
        model: &EstimatorModel,
        spec: &FeatureSpec,
        model_name: &str,
        from: Vec<String>,
    ) -> Result<BankSummary, Error> {
        let plain = without_offset(model);
        let mut runs = Vec::new();
        for (at, run) in summarise_captures(data, rows, receiver_of_group, names) {
            let mut bins: std::collections::BTreeMap<i64, [i64; 2]> = Default::default();
            for &i in &rows[at] {
                let d = plain.decision(data.row(i));
                if d.is_nan() {
                    return Err(Error::NotANumber(i));
                }
                // `as` saturates: a decision beyond ±1.8e17 bins shares the end bin.
                let b = (d / BIN_WIDTH).floor() as i64;
                bins.entry(b).or_default()[usize::from(!data.y[i])] += 1;
            }
            runs.push(SummaryRun {
                receiver: run.receiver,
                rate_mbps: run.rate_mbps,
                stats: run.stats.0.to_vec(),
                bins: bins.into_iter().map(|(b, [p, n])| [b, p, n]).collect(),
            });
        }
        Ok(BankSummary {
            format: SUMMARY_FORMAT.to_string(),
            model: fingerprint(model, spec),
            model_name: model_name.to_string(),
            from,
            bin_width: BIN_WIDTH,
            runs,
        })
    }

    /// The bank a [`BankSummary`] describes, checked: each field that is wrong is named. It
    /// calibrates the summary's model only ([`self_calibrate`] refuses another).
    pub fn of_summary(s: &BankSummary) -> Result<Bank, Error> {
        let checked = aggrate_core::selfcal::SummaryBank::of(s).map_err(|e| Error::Summary(e.to_string()))?;
        Ok(Bank {
            runs: checked
                .runs
                .into_iter()
                .map(|r| BankRun {
                    receiver: r.receiver,
                    rate_mbps: r.rate_mbps,
                    stats: r.stats,
                    rows: 0..0,
                    job: 0,
                    hist: r.bins,
                })
                .collect(),
            summarised_for: Some(SummaryOf {
                fingerprint: checked.fingerprint,
                model_name: checked.model_name,
                bin_width: checked.bin_width,
            }),
            ..Bank::default()
        })
    }
}

/// The runs (captures at one rate) among `rows` of `data` as bank runs without rows yet: each
/// with its positions in `rows`, its receiver (`receiver_of_group[group]` into `names`), rate and
/// gap summary from all its rows. Runs too short to summarise, of no receiver or of no finite
/// rate are left out.
fn summarise_captures(
    data: &Dataset,
    rows: &[usize],
    receiver_of_group: &[u32],
    names: &[String],
) -> Vec<(Range<usize>, BankRun)> {
    data.runs(rows)
        .into_iter()
        .filter_map(|at| {
            let first = rows[at.start];
            let host: Vec<Ts> = rows[at.clone()].iter().map(|&i| data.host[i]).collect();
            let stats = GapStats::of(&host)?;
            let name = receiver_of_group
                .get(data.group[first] as usize)
                .and_then(|&r| names.get(r as usize))?;
            let rate_mbps = data.rate_mbps[first] as f64;
            rate_mbps.is_finite().then(|| {
                let run = BankRun {
                    receiver: name.clone(),
                    rate_mbps,
                    stats,
                    rows: 0..0,
                    job: 0,
                    hist: Vec::new(),
                };
                (at, run)
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn times(gaps_us: &[u64]) -> Vec<Ts> {
        let mut t = 1_000_000u64;
        let mut v = vec![Ts(t)];
        for g in gaps_us {
            t += g * 1000;
            v.push(Ts(t));
        }
        v
    }

    #[test]
    fn gap_stats_by_hand() {
        // 100 gaps: 50 of 9.9 µs and 50 of 99.9 µs, alternating → ln 10 and ln 100 exactly.
        assert!(GapStats::of(&times(&[50; MIN_GAPS - 1])).is_none(), "too few gaps");
        assert!(GapStats::of(&times(&[50; MIN_GAPS])).is_some());
        let host: Vec<Ts> = {
            let mut t = 0u64;
            let mut v = vec![Ts(0)];
            for i in 0..100 {
                t += if i % 2 == 0 { 9_900 } else { 99_900 };
                v.push(Ts(t));
            }
            v
        };
        let s = GapStats::of(&host).unwrap();
        let (lo, hi) = (10f64.ln(), 100f64.ln());
        assert!((s.0[0] - lo).abs() < 1e-12 && (s.0[12] - hi).abs() < 1e-12, "{:?}", s.0);
        // The median falls between the two halves: numpy's interpolation gives their midpoint.
        assert!((s.0[6] - (lo + hi) / 2.0).abs() < 1e-12, "{}", s.0[6]);
        // Alternating: lag-1 autocorrelation ≈ −1, lag 2 and 4 ≈ +1 (99 and 98 of 100 terms).
        assert!((s.0[13] + 0.99).abs() < 1e-9, "{}", s.0[13]);
        assert!((s.0[14] - 0.98).abs() < 1e-9, "{}", s.0[14]);
        assert!((s.0[15] - 0.96).abs() < 1e-9, "{}", s.0[15]);
        // Constant gaps: no spread, autocorrelation 0 (not NaN).
        let flat = GapStats::of(&times(&[50; 80])).unwrap();
        assert!(flat.0.iter().all(|v| v.is_finite()));
        assert_eq!(flat.0[13], 0.0);
        // A time before the previous one is a zero gap: three of them are the lowest 1 %.
        let mut back = times(&[50; 80]);
        for i in [20, 40, 60] {
            back[i] = Ts(back[i - 1].0 - 5);
        }
        assert!((GapStats::of(&back).unwrap().0[0] - 0.1f64.ln()).abs() < 1e-12);
    }

    /// The nearest bank run alone, however far.
    const ONE: Likeness = Likeness {
        k: 1,
        max_distance: f64::INFINITY,
    };

    /// Rows of the newest gap alone (µs).
    fn one_gap() -> FeatureSpec {
        FeatureSpec {
            m: 1,
            sigma: false,
            ..FeatureSpec::default()
        }
    }

    /// Rows of a run of 4-packet frames: `inside` µs between a frame's packets, `before` µs
    /// before each frame's first; feature 0 is the gap (µs), labels as given by `label`.
    fn frames(d: &mut Dataset, group: u32, rate: f32, inside: u64, before: u64, label: impl Fn(bool) -> bool) {
        let mut t = 1_000_000_000u64;
        for i in 0..400 {
            let start = i % 4 == 0;
            let gap = if start { before } else { inside };
            t += gap * 1000;
            d.push_at(Ts(t), &[gap as f64], label(start), group, rate, 4);
        }
    }

    /// The threshold comes from the bank run that times packets like the receiver, and the
    /// receiver's own labels are never read (here they are all wrong).
    #[test]
    fn self_calibration_takes_the_threshold_of_the_receiver_that_times_alike() {
        use crate::model::ThresholdModel;
        let spec = one_gap();
        let mut bank = Bank {
            data: Dataset::new(1),
            ..Bank::default()
        };
        for (g, (name, inside, before)) in [("tight", 20, 60), ("loose", 150, 400)].into_iter().enumerate() {
            let start = bank.data.len();
            frames(&mut bank.data, g as u32, 300.0, inside, before, |s| s);
            bank.runs.push(BankRun {
                receiver: name.into(),
                rate_mbps: 300.0,
                stats: GapStats::of(&bank.data.host[start..]).unwrap(),
                rows: start..bank.data.len(),
                job: 0,
                hist: Vec::new(),
            });
        }
        let model = EstimatorModel::Threshold(ThresholdModel { threshold_us: 100.0 });
        let mut target = Dataset::new(1);
        frames(&mut target, 0, 290.0, 22, 58, |_| false);
        let (m, c) = self_calibrate(&target, &model, &spec, &bank, ONE).unwrap();
        let EstimatorModel::Threshold(t) = m else {
            panic!("kind changed")
        };
        assert!(t.threshold_us > 20.0 && t.threshold_us < 60.0, "{}", t.threshold_us);
        assert_eq!(c.runs.len(), 1);
        assert_eq!(c.runs[0].neighbours, ["tight"]);
        assert_eq!((c.runs[0].rate_mbps, c.runs[0].bank_rate_mbps), (290.0, 300.0));
        assert!(c.knots.is_empty() && c.threshold.is_some());
        // Labels flipped: the same result.
        let mut flipped = target.clone();
        flipped.y.iter_mut().for_each(|y| *y = !*y);
        let (m2, _) = self_calibrate(&flipped, &model, &spec, &bank, ONE).unwrap();
        assert_eq!(m2, EstimatorModel::Threshold(t));
        // A receiver like the loose one gets its threshold, at the bank rate nearest its own.
        let mut loose = Dataset::new(1);
        frames(&mut loose, 0, 310.0, 160, 380, |_| false);
        let (m3, c3) = self_calibrate(&loose, &model, &spec, &bank, ONE).unwrap();
        let EstimatorModel::Threshold(t3) = m3 else {
            panic!("kind changed")
        };
        assert!(
            t3.threshold_us > 150.0 && t3.threshold_us < 400.0,
            "{}",
            t3.threshold_us
        );
        assert_eq!(c3.runs[0].rate_mbps, 310.0);
        assert!(!c3.runs[0].too_far && c3.runs[0].distance > 0.0);
        // The same receiver, when the nearest bank run must lie nearer than it does: the bank
        // is not like it, and the model keeps its own threshold.
        let near = Likeness {
            max_distance: c3.runs[0].distance * 0.9,
            ..ONE
        };
        let (m4, c4) = self_calibrate(&loose, &model, &spec, &bank, near).unwrap();
        assert_eq!(m4, model);
        assert!(c4.runs[0].too_far && c4.runs[0].threshold == 0.0 && c4.threshold == Some(0.0));
        let need = bank.neighbours_of(&loose, near).unwrap();
        assert!(need.is_empty(), "a run too far lends no rows: {need:?}");
        assert_eq!(bank.neighbours_of(&loose, ONE).unwrap(), [1]);
        // Too short a run to summarise, and no rate at all, are refused.
        let mut short = Dataset::new(1);
        (0..10).for_each(|i| short.push_at(Ts(i * 1000), &[1.0], false, 0, 300.0, 1));
        assert!(matches!(
            self_calibrate(&short, &model, &spec, &bank, ONE),
            Err(Error::ShortRun { run: 0, gaps: 9 })
        ));
        let mut untagged = Dataset::new(1);
        frames(&mut untagged, 0, f32::NAN, 160, 380, |_| false);
        assert!(matches!(
            self_calibrate(&untagged, &model, &spec, &bank, ONE),
            Err(Error::NoRate { run: 0 })
        ));
        assert!(matches!(
            self_calibrate(&loose, &model, &spec, &Bank::default(), ONE),
            Err(Error::NoRunAtRate(r)) if r == 310.0
        ));
    }

    /// The bank emulates every receiver at the rates asked (not the manifest's), labels the
    /// first packet of each A-MPDU, and does not depend on the thread count; a real-kernel
    /// receiver is refused.
    #[test]
    fn build_emulates_the_receivers_at_the_rates_asked() {
        let text = r#"
name = "b"
seed = 5
packets = 1500
train_rates_mbps = [50]
[[receivers]]
random = 2
[[receivers]]
preset = "laptop"
"#;
        let m = parse_manifest(text).unwrap();
        let spec = FeatureSpec::default();
        let one = build(&m, &[400.0, 200.0, 400.0], &spec, 1, &mut crate::progress::NoProgress).unwrap();
        assert_eq!(one.runs.len(), 6, "3 receivers × 2 rates");
        assert_eq!(one.rates(), [200.0, 400.0]);
        let names: Vec<&str> = one.runs.iter().map(|r| r.receiver.as_str()).collect();
        assert_eq!(
            names,
            ["random-01", "random-01", "random-02", "random-02", "laptop", "laptop"]
        );
        for (g, r) in one.runs.iter().enumerate() {
            assert!(r.rows.len() > 1000, "{} rows", r.rows.len());
            assert!(one.data.group[r.rows.clone()].iter().all(|&x| x == g as u32));
            assert!(one.data.rate_mbps[r.rows.clone()]
                .iter()
                .all(|&x| x as f64 == r.rate_mbps));
            // Frames of more than one packet at these rates: fewer starts than rows, but some.
            let starts = one.data.y[r.rows.clone()].iter().filter(|&&y| y).count();
            assert!(starts > 10 && starts < r.rows.len(), "{starts} of {}", r.rows.len());
            assert_eq!(r.stats, GapStats::of(&one.data.host[r.rows.clone()]).unwrap());
        }
        let two = build(&m, &[200.0, 400.0], &spec, 2, &mut crate::progress::NoProgress).unwrap();
        assert_eq!(one.data.x, two.data.x);
        assert_eq!(one.data.y, two.data.y);
        // Summaries alone, then the rows of two runs: the same summaries and the same rows.
        let mut lean = summarise(&m, &[200.0, 400.0], &spec, 2, &mut crate::progress::NoProgress).unwrap();
        assert!(lean.data.is_empty() && lean.runs.iter().all(|r| r.rows.is_empty()));
        let stats: Vec<GapStats> = lean.runs.iter().map(|r| r.stats).collect();
        assert_eq!(stats, one.runs.iter().map(|r| r.stats).collect::<Vec<_>>());
        lean.fill(&[4, 1, 4], 2, &mut crate::progress::NoProgress);
        for r in [1, 4] {
            let (a, b) = (lean.runs[r].rows.clone(), one.runs[r].rows.clone());
            assert_eq!(
                lean.data.x[a.start * spec.width()..a.end * spec.width()],
                one.data.x[b.start * spec.width()..b.end * spec.width()]
            );
            assert_eq!(lean.data.y[a], one.data.y[b]);
        }
        assert!(lean.runs[0].rows.is_empty(), "only the runs asked for");
        let kernel = parse_manifest(&text.replace("preset = \"laptop\"", "kernel = \"gro\"")).unwrap();
        assert!(matches!(
            build(&kernel, &[200.0], &spec, 1, &mut crate::progress::NoProgress),
            Err(Error::KernelReceiver(n)) if n == "veth-gro"
        ));
        assert!(matches!(
            build(&m, &[f64::NAN], &spec, 1, &mut crate::progress::NoProgress),
            Err(Error::NoRates)
        ));
    }

    /// A bank of three hand-made runs: the nearest is the one whose timing matches, whatever
    /// the run order; a run at another rate is not considered.
    #[test]
    fn nearest_picks_the_run_that_times_alike_at_the_nearest_rate() {
        let spec = one_gap();
        let mut bank = Bank {
            data: Dataset::new(spec.width()),
            ..Bank::default()
        };
        let runs: [(&str, f64, u64, u64); 4] = [
            ("fast", 300.0, 5, 80),
            ("slow", 300.0, 40, 400),
            ("mid", 300.0, 20, 200),
            ("slow-at-100", 100.0, 40, 400),
        ];
        for (name, rate, a, b) in runs {
            let gaps: Vec<u64> = (0..200).map(|i| if i % 4 == 0 { b } else { a }).collect();
            bank.runs.push(BankRun {
                receiver: name.into(),
                rate_mbps: rate,
                stats: GapStats::of(&times(&gaps)).unwrap(),
                rows: 0..0,
                job: 0,
                hist: Vec::new(),
            });
        }
        let probe: Vec<u64> = (0..300).map(|i| if i % 4 == 0 { 390 } else { 41 }).collect();
        let s = GapStats::of(&times(&probe)).unwrap();
        let (at, nn) = bank.nearest(280.0, &s, 2).unwrap();
        assert_eq!(at, 300.0);
        assert_eq!(bank.runs[nn[0].0].receiver, "slow");
        assert_eq!(bank.runs[nn[1].0].receiver, "mid");
        assert!(nn[0].1 < nn[1].1);
        let (at, nn) = bank.nearest(120.0, &s, 5).unwrap();
        assert_eq!((at, nn.len()), (100.0, 1));
        assert!(Bank::default().nearest(100.0, &s, 1).is_none());
    }

    /// Captures as rows: one run per (gaps, group, rate), host times from `times`.
    fn captures(runs: &[(Vec<u64>, u32, f32)]) -> Dataset {
        let mut d = Dataset::new(1);
        for (gaps, group, rate) in runs {
            for t in times(gaps) {
                d.push_at(t, &[0.0], false, *group, *rate, 1);
            }
        }
        d
    }

    #[test]
    fn receivers_rank_by_how_alike_they_time_packets() {
        let pattern = |a: u64, b: u64| -> Vec<u64> { (0..200).map(|i| if i % 4 == 0 { b } else { a }).collect() };
        // Three receivers at 100 and 300 Mb/s (groups 0–5); "slow" has no 100 Mb/s capture.
        let train = captures(&[
            (pattern(5, 80), 0, 100.0),
            (pattern(5, 80), 1, 300.0),
            (pattern(20, 200), 2, 100.0),
            (pattern(20, 200), 3, 300.0),
            (pattern(40, 400), 4, 300.0),
            (pattern(40, 400)[..10].to_vec(), 5, 300.0), // too short to summarise: left out
        ]);
        let names: Vec<String> = ["fast", "mid", "slow"].map(String::from).to_vec();
        let of_group = [0, 0, 1, 1, 2, 2];
        let bank = Bank::of_captures(&train, &of_group, &names);
        assert_eq!(bank.runs.len(), 5);
        assert_eq!(bank.runs[4].receiver, "slow");
        // The target times packets like "mid" at both rates: mid first at distance 0; slow,
        // seen at one of the two rates only, after fast whatever its distance.
        let target = captures(&[(pattern(20, 200), 0, 100.0), (pattern(20, 200), 1, 300.0)]);
        let ranked = rank_receivers(&bank, &target).unwrap();
        let order: Vec<&str> = ranked.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(order, ["mid", "fast", "slow"]);
        assert!(ranked[0].1.abs() < 1e-9, "{ranked:?}");
        assert!(ranked[1].1 > 0.0);
        // Like "slow" at 300 Mb/s: slow first.
        let target = captures(&[(pattern(41, 390), 0, 300.0)]);
        assert_eq!(rank_receivers(&bank, &target).unwrap()[0].0, "slow");
        // A target capture too short to summarise is an error naming the run.
        let short = captures(&[(pattern(20, 200)[..10].to_vec(), 0, 300.0)]);
        assert!(matches!(
            rank_receivers(&bank, &short),
            Err(Error::ShortRun { run: 0, .. })
        ));
    }

    /// Measured receivers as a bank with rows: each run keeps every other row, contiguous, and
    /// its summary from all of them; an excluded receiver is never matched, and a self-
    /// calibration on the bank takes the threshold of the receiver that times packets alike.
    /// Three measured receivers at 300 Mb/s, one run each (groups 0–2): "tight" and its twin
    /// "tight-too" (20 / 21 µs inside a frame, 60 / 61 before it) and "loose" (150, 400); every
    /// row.
    fn three_receivers() -> (Dataset, Vec<String>, Vec<usize>) {
        let mut data = Dataset::new(1);
        for (g, (inside, before)) in [(20, 60), (150, 400), (21, 61)].into_iter().enumerate() {
            frames(&mut data, g as u32, 300.0, inside, before, |s| s);
        }
        let names: Vec<String> = ["tight", "loose", "tight-too"].map(String::from).to_vec();
        let rows: Vec<usize> = (0..data.len()).collect();
        (data, names, rows)
    }

    #[test]
    fn measured_receivers_lend_their_rows_and_an_excluded_one_is_never_matched() {
        use crate::model::ThresholdModel;
        let (data, names, rows) = three_receivers();
        let mut bank = Bank::of_captures_with_rows(&data, &rows, &[0, 1, 2], &names, 2);
        assert_eq!(bank.runs.len(), 3);
        assert_eq!(bank.data.len(), 3 * 200, "every other row of 400 per run");
        assert_eq!(bank.runs[1].rows, 200..400);
        assert_eq!(bank.runs[1].receiver, "loose");
        // Every other row, in order: frame starts (every 4th row) land on every other kept row.
        assert!(bank.data.y[200..400].iter().step_by(2).all(|&y| y));
        assert!(
            bank.runs[0].stats.0 == GapStats::of(&data.host[0..400]).unwrap().0,
            "summary from all rows"
        );
        // A receiver like "tight" (its own run in the bank): nearest is itself, at distance 0 …
        let mut target = Dataset::new(1);
        frames(&mut target, 0, 300.0, 20, 60, |_| false);
        let s = GapStats::of(&target.host).unwrap();
        assert_eq!(bank.runs[bank.nearest(300.0, &s, 1).unwrap().1[0].0].receiver, "tight");
        // … excluded, its twin is; with both excluded, the far one; all three: no match.
        bank.exclude(vec!["tight".into()]);
        assert_eq!(
            bank.runs[bank.nearest(300.0, &s, 1).unwrap().1[0].0].receiver,
            "tight-too"
        );
        bank.exclude(vec!["tight".into(), "tight-too".into()]);
        assert_eq!(bank.runs[bank.nearest(300.0, &s, 3).unwrap().1[0].0].receiver, "loose");
        assert_eq!(bank.nearest(300.0, &s, 3).unwrap().1.len(), 1);
        bank.exclude(names.clone());
        assert!(bank.nearest(300.0, &s, 1).is_none());
        // Self-calibrated with "tight" excluded: the twin's threshold (between 21 and 61 µs),
        // not the far receiver's; the target's own (all wrong) labels are not read.
        bank.exclude(vec!["tight".into()]);
        // Its likeness: the nearest receiver and distance per run, in the run's group.
        let mut target_g = target.clone();
        target_g.group.iter_mut().for_each(|g| *g = 7);
        assert_eq!(
            bank.likeness_of(&target_g).unwrap(),
            vec![Nearest {
                group: 7,
                rate_mbps: 300.0,
                bank_rate_mbps: 300.0,
                receiver: "tight-too".into(),
                distance: bank.nearest(300.0, &s, 1).unwrap().1[0].1,
            }]
        );
        let model = EstimatorModel::Threshold(ThresholdModel { threshold_us: 1000.0 });
        let like = Likeness {
            k: 1,
            max_distance: f64::INFINITY,
        };
        let (m, c) = self_calibrate(&target, &model, &one_gap(), &bank, like).unwrap();
        assert_eq!(c.runs[0].neighbours, ["tight-too"]);
        assert!(m.decision(&[60.0]) > 0.0 && m.decision(&[21.0]) < 0.0, "{m:?}");
    }

    /// A summary lends what the rows do: the same neighbours, and a threshold within half a
    /// decision bin of the rows' own; it round-trips through JSON; it calibrates its own model
    /// only; a broken one is refused naming the field.
    #[test]
    fn a_summary_calibrates_as_its_rows_do_and_only_its_model() {
        use crate::model::ThresholdModel;
        let (data, names, rows) = three_receivers();
        let model = EstimatorModel::Threshold(ThresholdModel { threshold_us: 1000.0 });
        let spec = one_gap();
        let summary = Bank::summary(
            &data,
            &rows,
            &[0, 1, 2],
            &names,
            &model,
            &spec,
            "thr",
            vec!["rx".into()],
        )
        .unwrap();
        assert_eq!(summary.runs.len(), 3);
        assert_eq!(summary.model, fingerprint(&model, &spec));
        // Run "loose": 100 starts at 400 µs, 300 others at 150 µs → two bins.
        let loose = &summary.runs[1];
        assert_eq!(loose.receiver, "loose");
        let bin = |gap: f64| ((gap - 1000.0) / BIN_WIDTH).floor() as i64;
        assert_eq!(loose.bins, vec![[bin(150.0), 0, 300], [bin(400.0), 100, 0]]);
        let back: BankSummary = serde_json::from_str(&serde_json::to_string(&summary).unwrap()).unwrap();
        assert_eq!(back, summary);
        let mut binned = Bank::of_summary(&back).unwrap();
        let mut rowed = Bank::of_captures_with_rows(&data, &rows, &[0, 1, 2], &names, 1);
        let mut target = Dataset::new(1);
        frames(&mut target, 0, 300.0, 20, 60, |_| false);
        let like = Likeness {
            k: 1,
            max_distance: f64::INFINITY,
        };
        for bank in [&mut binned, &mut rowed] {
            bank.exclude(vec!["tight".into()]);
        }
        let (mb, cb) = self_calibrate(&target, &model, &spec, &binned, like).unwrap();
        let (mr, cr) = self_calibrate(&target, &model, &spec, &rowed, like).unwrap();
        assert_eq!(cb.runs[0].neighbours, cr.runs[0].neighbours);
        assert_eq!(cb.runs[0].distance, cr.runs[0].distance);
        assert!(
            (cb.runs[0].threshold - cr.runs[0].threshold).abs() <= BIN_WIDTH / 2.0 + 1e-9,
            "{} vs {}",
            cb.runs[0].threshold,
            cr.runs[0].threshold
        );
        for m in [&mb, &mr] {
            assert!(m.decision(&[61.0]) > 0.0 && m.decision(&[21.0]) < 0.0, "{m:?}");
        }
        // Another model: refused, naming the one it was made for.
        let other = EstimatorModel::Threshold(ThresholdModel { threshold_us: 500.0 });
        match self_calibrate(&target, &other, &spec, &binned, like) {
            Err(e @ Error::OtherModel { .. }) => assert!(e.to_string().contains("(thr)"), "{e}"),
            r => panic!("{r:?}"),
        }
        // The same model on another feature layout is another model too.
        assert_ne!(fingerprint(&model, &FeatureSpec::default()), summary.model);
        // Broken summaries, each named by its field.
        let broken = |f: &dyn Fn(&mut BankSummary), field: &str| {
            let mut s = summary.clone();
            f(&mut s);
            match Bank::of_summary(&s) {
                Err(e @ Error::Summary(_)) => assert!(e.to_string().contains(field), "{e} lacks {field}"),
                r => panic!("{field}: {r:?}"),
            }
        };
        broken(&|s| s.format = "x".into(), "format");
        broken(&|s| s.bin_width = 0.0, "bin_width");
        broken(&|s| s.runs.clear(), "no runs");
        broken(&|s| s.runs[1].stats.pop().map(drop).unwrap_or(()), "runs[1].stats");
        broken(&|s| s.runs[2].stats[3] = f64::NAN, "runs[2].stats[3]");
        broken(&|s| s.runs[0].rate_mbps = -1.0, "runs[0].rate_mbps");
        broken(&|s| s.runs[0].bins[0][2] = -5, "runs[0].bins");
        broken(&|s| s.runs[1].bins[0][2] = i64::MAX, "more than");
        // Not JSON of a summary, compressed or not; the size limit holds before parsing.
        assert!(parse_summary(b"{}", false)
            .unwrap_err()
            .to_string()
            .contains("not a bank summary"));
        assert!(parse_summary(b"{}", true)
            .unwrap_err()
            .to_string()
            .contains("not an xz stream"));
        let json = serde_json::to_vec(&summary).unwrap();
        assert_eq!(parse_summary(&json, false).unwrap(), summary);
    }

    /// Weighted rows choose what the same rows repeated choose.
    #[test]
    fn weighted_threshold_is_the_repeated_rows_threshold() {
        let dec = [3.0, 2.0, 1.0, 0.5, -1.0];
        let y = [true, false, true, false, false];
        let w = [2u64, 3, 5, 1, 0];
        let (mut rd, mut ry) = (Vec::new(), Vec::new());
        for i in 0..dec.len() {
            for _ in 0..w[i] {
                rd.push(dec[i]);
                ry.push(y[i]);
            }
        }
        let a = best_threshold_weighted(&dec, &y, &w).unwrap();
        let b = crate::train::calibrate::best_threshold(&rd, &ry).unwrap();
        assert_eq!(a.1, b.1);
        // Called: 3.0, 2.0, 1.0 (7 starts of 7, 3 false) → between 1.0 and 0.5 (−1.0 weighs nothing).
        assert_eq!(a.0, 0.75);
        assert_eq!((a.1.tp, a.1.fp, a.1.fn_, a.1.tn), (7, 3, 0, 1));
        assert!(best_threshold_weighted(&dec, &y, &w[..4]).is_none(), "lengths differ");
        assert!(best_threshold_weighted(&dec, &[false; 5], &w).is_none(), "no start");
    }

    /// The embedded summary is the shipped model's: a retrained shipped model without a fresh
    /// summary fails here, not at a user's calibration.
    #[test]
    fn the_embedded_summary_is_the_shipped_models() {
        let file = crate::model::ModelFile::shipped().unwrap();
        let s = shipped_summary().unwrap();
        assert_eq!(
            s.model,
            fingerprint(&file.model, &file.spec),
            "re-run `aggrate dataset summarise`"
        );
        let bank = Bank::of_summary(&s).unwrap();
        let receivers: std::collections::BTreeSet<&str> = bank.runs.iter().map(|r| r.receiver.as_str()).collect();
        assert!(receivers.len() >= 50, "{receivers:?}");
        assert!(receivers.iter().any(|r| r.starts_with("veth-shape")), "{receivers:?}");
        assert!(bank.rates().len() >= 6, "{:?}", bank.rates());
    }
}

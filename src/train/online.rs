//! Online self-calibration: the label-free calibration of `calibrate --no-labels --measured`
//! ([`bank::self_calibrate`](super::bank::self_calibrate)) run by a receiver on its own receive
//! times while it estimates, so that `recv --self-calibrate` moves the shipped model's operating
//! point towards the receiver's without a capture, a sniffer or a second step.
//!
//! It keeps the receive times of the last [`WINDOW_GAPS`] gaps (a fixed buffer; nothing grows
//! with the stream). When a window is full it is summarised as a capture is ([`GapStats`], the
//! received rate, the median load `lmean` of the model's context rows), the bank runs nearest it
//! at the nearest bank rate lend their decisions, and the threshold best on them becomes a knot
//! of the model's [`LoadOffset`] at that load — the same knot the offline calibration makes of
//! a capture. Knots of one load are averaged over the last [`KNOT_MEMORY`] windows, so a receiver
//! that changes is followed; a window that mixes rates (the received rate of its halves differs
//! by more than [`STEADY`]) or spans a pause longer than [`MAX_GAP`] is not used, since the bank
//! holds runs at one rate each.
//!
//! The caller applies [`OnlineCalibrator::offset`] with
//! [`OnlineEstimator::set_load_offset`](crate::runtime::OnlineEstimator::set_load_offset)
//! after each window that returns a [`Step`]; the per-packet cost is a push into the buffer.

use std::time::Duration;

use serde::Serialize;

use crate::features::{FeatureSpec, GapWindow};
use crate::model::mlp::MAX_KNOTS;
use crate::model::{EstimatorModel, LoadOffset, ModelFile};
use crate::runtime::OnlineEstimator;
use crate::time::Ts;
use crate::train::bank::{self, Bank, GapStats, Likeness};
use crate::train::calibrate::{best_threshold_weighted, load_input, median_load, without_offset};

/// Bank runs nearest a window that lend it their decisions (as `calibrate --no-labels
/// --measured`'s default).
pub const DEFAULT_K: usize = 5;

/// Farthest the nearest bank run may lie from a window for its threshold to be taken when the
/// receiver's WLAN is not known to be the training one: the distance within which the shipped
/// model holds on receivers it never saw ([`FAMILIAR_DISTANCE`](super::bank::FAMILIAR_DISTANCE)).
/// Measured in the closed loop (models/README.md, "Its operating point for your receiver"; the
/// full table in its git history): at another WLAN
/// (VHT MCS 4, 7, 8), where the measured receivers' gaps mislead, it keeps the model's own
/// threshold where no limit doubled the runs that queue; at the training WLAN no limit is
/// better (on the real-kernel test receivers it is where the gain is; [`DistanceLimit::ByPhy`]).
pub const DEFAULT_MAX_DISTANCE: f64 = super::bank::FAMILIAR_DISTANCE;

/// How near a window's nearest training receiver must lie for its threshold to be taken.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub enum DistanceLimit {
    /// By the receiver's PHY rate: no limit when it is the training WLAN's (the measured bank's
    /// own WLAN, where calibrate --measured takes none either), [`DEFAULT_MAX_DISTANCE`] when it
    /// is another or not known.
    ByPhy,
    /// This limit (standardised distance; infinity: none).
    Fixed(f64),
}

impl DistanceLimit {
    /// A limit given by a user (`--max-distance`, Python's `max_distance`): `None` is
    /// [`DistanceLimit::ByPhy`]; a fixed one must be 0 or more.
    pub fn given(max_distance: Option<f64>) -> Result<DistanceLimit, Error> {
        max_distance.map_or(DistanceLimit::ByPhy, DistanceLimit::Fixed).check()
    }

    /// The limit, if it is one: a fixed distance must be 0 or more (infinity: none).
    pub fn check(self) -> Result<DistanceLimit, Error> {
        match self {
            DistanceLimit::Fixed(d) if d.is_nan() || d < 0.0 => Err(Error::BadDistance(d)),
            l => Ok(l),
        }
    }

    /// The limit for a receiver whose PHY rate is `phy_bps` (if known), running `file`.
    pub fn resolve(self, file: &ModelFile, phy_bps: Option<u64>) -> f64 {
        match self {
            DistanceLimit::Fixed(d) => d,
            DistanceLimit::ByPhy => match (training_phy_bps(file), phy_bps) {
                // Within 1 %: a PHY rate said in Mb/s with a decimal or two.
                (Some(t), Some(p)) if (t as f64 - p as f64).abs() <= 0.01 * t as f64 => f64::INFINITY,
                _ => DEFAULT_MAX_DISTANCE,
            },
        }
    }
}

/// The PHY rate of the WLAN `file` was trained over (its `training_wlan`, short guard interval as
/// the datasets use), if it says.
pub fn training_phy_bps(file: &ModelFile) -> Option<u64> {
    let w: crate::wlan::manifest::WlanSettings =
        serde_json::from_value(file.metrics.get("training_wlan")?.clone()).ok()?;
    crate::phy::vht_rate_bps(w.mcs?, w.nss?, crate::phy::Bandwidth::from_mhz(w.bw_mhz?)?, true)
}

/// Gaps per calibration window: 0.4 s at 500 Mb/s of 1,500-byte packets, 2 s at 100 Mb/s. A
/// capture of the bank holds about 20,000; the summary's quantiles over 16,384 gaps are within
/// a few hundredths of a spread of the whole capture's.
pub const WINDOW_GAPS: usize = 16_384;

/// Windows a knot averages over (the newest count most when a receiver changes).
pub const KNOT_MEMORY: u32 = 8;

/// Largest relative difference between the received rates of a window's two halves for the
/// window to count as one rate.
pub const STEADY: f64 = 0.25;

/// A longer gap (a pause, a new session) starts the window again.
pub const MAX_GAP: Duration = Duration::from_secs(1);

/// Bytes of IPv4 and UDP headers added to a datagram's length to get the IP length the bank's
/// rates count (its runs are tagged with their offered load of IP packets).
pub const IP_UDP_HEADERS: u64 = 28;

/// Why an online calibrator cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No bank of this model's training receivers.
    #[error(
        "no summary of this model's training receivers: online self-calibration needs the shipped model (or a calibrated copy of it)"
    )]
    NoBank,
    /// The model has no load offset to set.
    #[error("online self-calibration sets a perceptron's load offset; this model has none (only a perceptron on a receiver context)")]
    NoLoad,
    /// A distance limit that is not a distance.
    #[error("distance limit {0}: 0 or more (inf: no limit)")]
    BadDistance(f64),
    /// The bank.
    #[error(transparent)]
    Bank(#[from] bank::Error),
}

/// What one window did.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Step {
    /// Windows summarised so far (this one included).
    pub window: u64,
    /// Received rate over the window (Mb/s of IP packets).
    pub rate_mbps: f64,
    /// The bank rate its neighbours were taken at.
    pub bank_rate_mbps: f64,
    /// The window's median load (`lmean`), where its knot sits.
    pub load: f64,
    /// The nearest bank run's receiver and distance (standardised, as `calibrate` reports).
    pub nearest: String,
    /// Its distance.
    pub distance: f64,
    /// The threshold best on the neighbours (0 when the bank is too far: the model's own).
    pub threshold: f64,
    /// The nearest bank run lay beyond the likeness limit: the model's own threshold was kept.
    pub too_far: bool,
    /// Knots in the offset now.
    pub knots: usize,
}

/// A knot being learned: its load, the sum of its last thresholds and how many (≤ [`KNOT_MEMORY`]),
/// and the window that last touched it.
#[derive(Clone, Copy, Debug)]
struct Knot {
    load: f64,
    sum: f64,
    n: u32,
    touched: u64,
}

/// The online self-calibrator of one receiver (see the module docs).
#[derive(Clone, Debug)]
pub struct OnlineCalibrator {
    bank: Bank,
    model: EstimatorModel,
    spec: FeatureSpec,
    like: Likeness,
    load_input: usize,
    /// Receive times of the window so far: at most `WINDOW_GAPS + 1`.
    times: Vec<Ts>,
    /// IP bytes received in each half of the window.
    bytes: [u64; 2],
    knots: Vec<Knot>,
    windows: u64,
    skipped: u64,
    too_far: u64,
    last: Option<Step>,
}

/// What an [`OnlineCalibrator`] did over a run (`recv`'s and `sim`'s JSON, Python's
/// `calibration()`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Summary {
    /// Windows used.
    pub windows: u64,
    /// Windows not used (mixed rates, a failed summary).
    pub skipped: u64,
    /// Used windows whose nearest training receiver lay beyond the limit (the model's own
    /// threshold kept there).
    pub too_far: u64,
    /// The last used window.
    pub last: Option<Step>,
    /// The operating point now (`[load, threshold]` knots; empty before the first window).
    pub knots: Vec<[f64; 2]>,
}

impl OnlineCalibrator {
    /// A calibrator for the shipped model (or a calibrated copy of it) on its embedded bank of
    /// measured training receivers.
    pub fn for_model(file: &ModelFile, like: Likeness) -> Result<OnlineCalibrator, Error> {
        let bank = bank::shipped_bank_for(&file.model, &file.spec)?.ok_or(Error::NoBank)?;
        OnlineCalibrator::new(bank, &file.model, file.spec, like)
    }

    /// [`OnlineCalibrator::for_model`] for a receiver whose PHY rate is `phy_bps` (if known),
    /// [`DEFAULT_K`] neighbours and the distance `limit` resolved for it (a fixed limit must be
    /// 0 or more): what `recv`, `sim` and Python's estimator run.
    pub fn for_receiver(
        file: &ModelFile,
        limit: DistanceLimit,
        phy_bps: Option<u64>,
    ) -> Result<OnlineCalibrator, Error> {
        let like = Likeness {
            k: DEFAULT_K,
            max_distance: limit.check()?.resolve(file, phy_bps),
        };
        OnlineCalibrator::for_model(file, like)
    }

    /// A calibrator on any bank that can lend `model` its decisions (a summary made for it, or
    /// a bank with rows).
    pub fn new(
        bank: Bank,
        model: &EstimatorModel,
        spec: FeatureSpec,
        like: Likeness,
    ) -> Result<OnlineCalibrator, Error> {
        let model = without_offset(model);
        let load_input = load_input(&model, &spec).ok_or(Error::NoLoad)?;
        Ok(OnlineCalibrator {
            bank,
            model,
            spec,
            like,
            load_input,
            times: Vec::with_capacity(WINDOW_GAPS + 1),
            bytes: [0; 2],
            knots: Vec::new(),
            windows: 0,
            skipped: 0,
            too_far: 0,
            last: None,
        })
    }

    /// Windows not used (mixed rates, no frame start among the neighbours' rows).
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// What it did so far.
    pub fn summary(&self) -> Summary {
        Summary {
            windows: self.windows,
            skipped: self.skipped,
            too_far: self.too_far,
            last: self.last.clone(),
            knots: self.offset().map(|o| o.knots).unwrap_or_default(),
        }
    }

    /// [`OnlineCalibrator::push`], and when a window was used, `est` takes the new operating
    /// point at once; the window's step is returned.
    pub fn feed(&mut self, est: &mut OnlineEstimator, host: Ts, len: u32) -> Option<&Step> {
        self.push(host, len)?;
        // Finite knots by increasing load on the model's own load input: not refused.
        let _ = est.set_load_offset(self.offset());
        self.last.as_ref()
    }

    /// One accepted data packet: its receive time and datagram length. Returns what the window
    /// did when this packet completed one that was used; then apply [`OnlineCalibrator::offset`].
    pub fn push(&mut self, host: Ts, len: u32) -> Option<Step> {
        if let Some(&last) = self.times.last() {
            if host.saturating_since(last) > MAX_GAP {
                self.restart();
            }
        }
        let half = (self.times.len() > WINDOW_GAPS / 2) as usize;
        self.bytes[half] += len as u64 + IP_UDP_HEADERS;
        self.times.push(host);
        if self.times.len() <= WINDOW_GAPS {
            return None;
        }
        let step = self.window();
        self.restart();
        if step.is_none() {
            self.skipped += 1;
        }
        step
    }

    fn restart(&mut self) {
        self.times.clear();
        self.bytes = [0; 2];
    }

    /// Received rate (Mb/s of IP packets) over times `t` carrying `bytes` (the first packet's
    /// bytes arrived before the span began, as a rate's first packet does).
    fn rate(t: &[Ts], bytes: u64) -> f64 {
        let span = match (t.first(), t.last()) {
            (Some(a), Some(b)) => b.saturating_since(*a).as_nanos(),
            _ => 0,
        };
        if span == 0 {
            return f64::NAN;
        }
        bytes as f64 * 8.0 / span as f64 * 1e3
    }

    fn window(&mut self) -> Option<Step> {
        let t = &self.times;
        let mid = WINDOW_GAPS / 2 + 1;
        let (a, b) = (
            Self::rate(&t[..mid], self.bytes[0]),
            Self::rate(&t[mid - 1..], self.bytes[1]),
        );
        let rate = Self::rate(t, self.bytes[0] + self.bytes[1]);
        if !(a.is_finite() && b.is_finite() && rate.is_finite()) || (a - b).abs() > STEADY * a.max(b) {
            return None;
        }
        let stats = GapStats::of(t)?;
        let (bank_rate, nearest) = self.bank.nearest(rate, &stats, self.like.k)?;
        let (first, distance) = *nearest.first()?;
        let too_far = !self.like.admits(distance);
        let threshold = if too_far {
            0.0
        } else {
            let (dec, y, w) = self.bank.decisions(&self.model, &nearest).ok()?;
            best_threshold_weighted(&dec, &y, &w)?.0
        };
        // The window's load as the offline calibration takes a capture's: the median of its
        // context rows' `lmean`.
        let mut gw = GapWindow::new(&self.spec);
        let loads: Vec<f64> = t
            .iter()
            .filter_map(|&h| gw.push(h).map(|row| row[self.load_input]))
            .collect();
        if loads.is_empty() {
            return None;
        }
        let load = median_load(loads);
        if !load.is_finite() || !threshold.is_finite() {
            return None;
        }
        self.windows += 1;
        self.too_far += u64::from(too_far);
        self.learn(load, threshold);
        let step = Step {
            window: self.windows,
            rate_mbps: rate,
            bank_rate_mbps: bank_rate,
            load,
            nearest: self.bank.runs[first].receiver.clone(),
            distance,
            threshold,
            too_far,
            knots: self.knots.len(),
        };
        self.last = Some(step.clone());
        Some(step)
    }

    fn learn(&mut self, load: f64, threshold: f64) {
        let now = self.windows;
        if let Some(k) = self.knots.iter_mut().find(|k| k.load == load) {
            if k.n >= KNOT_MEMORY {
                // The mean of the last KNOT_MEMORY, approximately: the oldest share makes room.
                k.sum -= k.sum / k.n as f64;
                k.n -= 1;
            }
            k.sum += threshold;
            k.n += 1;
            k.touched = now;
            return;
        }
        if self.knots.len() >= MAX_KNOTS {
            // The load not seen longest gives way.
            if let Some(i) = (0..self.knots.len()).min_by_key(|&i| self.knots[i].touched) {
                self.knots.swap_remove(i);
            }
        }
        self.knots.push(Knot {
            load,
            sum: threshold,
            n: 1,
            touched: now,
        });
        self.knots.sort_unstable_by(|a, b| a.load.total_cmp(&b.load));
    }

    /// The operating point learned so far (`None` before the first window).
    pub fn offset(&self) -> Option<LoadOffset> {
        if self.knots.is_empty() {
            return None;
        }
        Some(LoadOffset {
            input: self.load_input,
            knots: self.knots.iter().map(|k| [k.load, k.sum / k.n as f64]).collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shipped(max_distance: f64) -> OnlineCalibrator {
        let file = ModelFile::shipped().unwrap();
        OnlineCalibrator::for_model(
            &file,
            Likeness {
                k: DEFAULT_K,
                max_distance,
            },
        )
        .unwrap()
    }

    /// Receive times of A-MPDUs of `per` packets `inside` ns apart, `between` ns from the last
    /// packet of one to the first of the next, from `t0`.
    fn frames(t0: u64, n: usize, per: usize, inside: u64, between: u64) -> Vec<Ts> {
        let mut t = t0;
        (0..n)
            .map(|i| {
                t += if i % per == 0 { between } else { inside };
                Ts(t)
            })
            .collect()
    }

    #[test]
    fn a_steady_window_sets_one_knot_at_its_load() {
        let mut c = shipped(f64::INFINITY);
        // 32 packets 10 µs apart, 600 µs between: 32 × 1,500 B per 910 µs = 422 Mb/s.
        let t = frames(0, WINDOW_GAPS + 1, 32, 10_000, 600_000);
        let mut steps = Vec::new();
        for (i, &h) in t.iter().enumerate() {
            let s = c.push(h, 1472);
            if i < WINDOW_GAPS {
                assert!(s.is_none(), "no step before the window is full ({i})");
            }
            steps.extend(s);
        }
        assert_eq!(steps.len(), 1);
        let s = &steps[0];
        assert!((s.rate_mbps - 422.0).abs() < 5.0, "{s:?}");
        assert_eq!(s.bank_rate_mbps, 400.0);
        assert!(!s.too_far && s.threshold.is_finite(), "{s:?}");
        // The mean gap is 910/32 = 28.4 µs: lmean is the log of its bin's centre.
        assert!((s.load - 28.4f64.ln()).abs() < 0.05, "{s:?}");
        let o = c.offset().unwrap();
        assert_eq!(o.knots, vec![[s.load, s.threshold]]);
        assert_eq!(o.input, ModelFile::shipped().unwrap().spec.width() - 1);
        // The next window starts empty.
        assert!(c.times.is_empty());
    }

    #[test]
    fn far_from_every_training_receiver_the_model_keeps_its_threshold() {
        // Far: the same window, and a limit below its distance.
        let mut c = shipped(0.0);
        let mut step = None;
        for h in frames(0, WINDOW_GAPS + 1, 32, 10_000, 600_000) {
            step = step.or(c.push(h, 1472));
        }
        let s = step.unwrap();
        assert!(s.too_far && s.distance > 0.0, "{s:?}");
        assert_eq!(s.threshold, 0.0);
        assert_eq!(c.offset().unwrap().knots, vec![[s.load, 0.0]]);
    }

    #[test]
    fn mixed_rates_and_pauses_are_not_summarised() {
        let mut c = shipped(f64::INFINITY);
        // The first half at 422 Mb/s, the second at a third of it: one window, not used.
        let a = frames(0, WINDOW_GAPS / 2 + 1, 32, 10_000, 600_000);
        let b = frames(a[a.len() - 1].0, WINDOW_GAPS / 2, 32, 30_000, 1_800_000);
        for h in a.into_iter().chain(b) {
            assert!(c.push(h, 1472).is_none());
        }
        assert_eq!((c.skipped(), c.offset()), (1, None));
        // A pause of over a second starts the window again: no step until a full window after it.
        let a = frames(10_000_000_000, 10_000, 32, 10_000, 600_000);
        let b = frames(a[a.len() - 1].0 + 2_000_000_000, WINDOW_GAPS + 1, 32, 10_000, 600_000);
        let n = a.len();
        let steps: Vec<usize> = a
            .into_iter()
            .chain(b)
            .enumerate()
            .filter_map(|(i, h)| c.push(h, 1472).map(|_| i))
            .collect();
        assert_eq!(steps, vec![n + WINDOW_GAPS]);
    }

    #[test]
    fn knots_follow_the_last_windows_and_stay_bounded() {
        let mut c = shipped(f64::INFINITY);
        for _ in 0..KNOT_MEMORY {
            c.learn(3.0, 1.0);
        }
        for _ in 0..KNOT_MEMORY {
            c.learn(3.0, 0.0);
        }
        // Each new window takes an eighth of the mean's weight: (7/8)^8 of the ones is left.
        let v = c.offset().unwrap().knots[0][1];
        assert!((v - (7f64 / 8.0).powi(8)).abs() < 1e-12, "{v}");
        // More loads than knots: the load not seen longest gives way; knots stay sorted.
        for i in 0..(MAX_KNOTS + 10) {
            c.windows += 1;
            c.learn(1.0 + i as f64 * 0.01, i as f64);
        }
        let k = c.offset().unwrap().knots;
        assert_eq!(k.len(), MAX_KNOTS);
        assert!(k.windows(2).all(|w| w[0][0] < w[1][0]));
        assert!(!k.iter().any(|x| x[0] == 3.0), "the oldest load went first");
        // The estimator takes what the calibrator makes.
        let file = ModelFile::shipped().unwrap();
        let mut e = crate::runtime::OnlineEstimator::from_model(&file, Duration::from_millis(500)).unwrap();
        e.set_load_offset(c.offset()).unwrap();
    }

    #[test]
    fn a_model_without_a_bank_or_a_load_is_refused() {
        let file = ModelFile::from_json(
            include_str!("../../models/logistic_m20_sigma.json"),
            "models/logistic_m20_sigma.json",
        )
        .unwrap();
        let like = Likeness::default();
        assert!(matches!(OnlineCalibrator::for_model(&file, like), Err(Error::NoBank)));
        let bank = bank::shipped_bank_for(
            &ModelFile::shipped().unwrap().model,
            &ModelFile::shipped().unwrap().spec,
        )
        .unwrap()
        .unwrap();
        assert!(matches!(
            OnlineCalibrator::new(bank, &file.model, file.spec, like),
            Err(Error::NoLoad)
        ));
    }

    #[test]
    fn the_limit_follows_the_receivers_phy_rate() {
        let file = ModelFile::shipped().unwrap();
        // VHT MCS 9, 2 SS, 80 MHz, short GI: 866.7 Mb/s.
        assert_eq!(training_phy_bps(&file), Some(866_666_667));
        let by = DistanceLimit::ByPhy;
        assert_eq!(by.resolve(&file, Some(866_700_000)), f64::INFINITY);
        assert_eq!(by.resolve(&file, Some(650_000_000)), DEFAULT_MAX_DISTANCE);
        assert_eq!(by.resolve(&file, None), DEFAULT_MAX_DISTANCE);
        assert_eq!(DistanceLimit::Fixed(2.5).resolve(&file, Some(866_700_000)), 2.5);
        // What a user gives is checked once, for recv, sim and Python alike.
        assert_eq!(DistanceLimit::given(None).unwrap(), by);
        assert_eq!(DistanceLimit::given(Some(0.0)).unwrap(), DistanceLimit::Fixed(0.0));
        for bad in [f64::NAN, -1.0] {
            assert!(matches!(DistanceLimit::given(Some(bad)), Err(Error::BadDistance(_))));
            let r = OnlineCalibrator::for_receiver(&file, DistanceLimit::Fixed(bad), None);
            assert!(matches!(r, Err(Error::BadDistance(_))));
        }
        // A model that does not say its training WLAN: the limit.
        let mut other = file.clone();
        other.metrics = serde_json::json!({});
        assert_eq!(by.resolve(&other, Some(866_700_000)), DEFAULT_MAX_DISTANCE);
    }
}

//! Rate control from aggregation reports.
//!
//! The reference study's loop ([`PiController`]): every report interval Δ,
//!
//! ```text
//! x ← x + K·(N_ε − μ_N),   K = K0 / n
//! ```
//!
//! with x the send rate in **Mb/s**, μ_N and N_ε in **MPDUs per A-MPDU**, so K is in Mb/s per
//! MPDU per update (K0 = 1, n = stations sharing the loop). The sum of past errors is the
//! integral term: x itself integrates, and the proportional part is the step. The rate is
//! clamped to `[min_mbps, max_mbps]` and the integration stops at the clamps (anti-windup).
//! The initial rate is `initial_mbps` (default 20 Mb/s: little aggregation even on a slow MCS).
//! From there a start-up phase multiplies the rate by `startup_factor` (1.5) per update while
//! μ_N < N_ε/2 (like TCP slow start, without the overshoot of doubling); the integral loop takes
//! over from the first report at or above N_ε/2 and never hands back. With K0 = 1 alone, the
//! ramp from 20 to ~580 Mb/s (VHT MCS 9, 2 SS, 80 MHz) would take ~30 updates.
//!
//! A [`BottleneckClassifier`] (the study's: logistic, over the last n = 5 reports and the loss
//! over the last p = 100 packets; weights trained on testbed runs with a backhaul that switches
//! on and off) tells when the bottleneck is upstream of the AP: the level is low because little
//! arrives, not because the loop sends little. Then the loop does not integrate (it would wind
//! up against a level it cannot reach): it follows what arrives, sending the receive rate
//! × (1 + probe) while the one-way delay stays within 3 ms of the path's own and × (1 − probe)
//! while a queue upstream drains: the upstream queue stays short but never quite empties, so
//! behind the backhaul every report shows the receive rate off the send rate by the probe, one
//! way or the other — and the first report in which they agree shows that the backhaul went. For [`RECENT_BACKHAUL`] reports after, the rate
//! rises by at most the probe per report. The first report (which may cover a part-filled
//! interval) never says "backhaul"; a backhaul ends start-up. The loop acts on "backhaul" only
//! when the newest report shows the two rates apart by half the probe or more
//! ([`upstream_evidence`]) — or, once an episode runs, while the mean one-way delay stays 1 ms
//! above the path's own (the queue upstream has not emptied; the rates met by chance): behind a
//! backhaul the probe keeps them apart, so the first report in which they agree with the queue
//! gone ends the episode, and a low level or a delay alone never starts one. In start-up the
//! bar is half the start-up step instead of half the probe.
//!
//! When reports stop (lost feedback), [`RateController::on_silence`] decays the rate
//! geometrically towards `min_mbps`.
//!
//! **Queue guard.** A level estimate that reads low (the airtime level under traffic it was not
//! told of, a frame count that invents starts) lets the loop overshoot until the AP's queue
//! stands. An A-MPDU level below the Block Ack window queues at most a few ms at any PHY rate, so
//! a report whose 95th-percentile one-way delay lies more than `queue_guard_ms` (10 ms) above the
//! lowest mean delay of the last [`GUARD_WINDOW`] reports (the path's own delay: the clocks of
//! the two hosts need not agree, only keep their offset) is a standing queue whatever the level
//! says — if the mean delay is half that far up too (a queue delays every packet; an AP that
//! releases some bursts late raises the p95 alone) — the loop steps as if the level were twice
//! the target (taking at most half the rate per report), until the delay falls.
//!
//! Several stations: [`AirtimeSplit`] drives the station with the highest PHY rate μ_R with
//! the loop and gives each other station x_j = x_i*·μ_R,j/μ_R,i* — equal airtime shares. A
//! receiver's airtime level ([`crate::airtime`]) knows only its own station's traffic; with
//! several stations behind the AP the split, which knows every station's delivery rate and PHY
//! rate, solves the cell's airtime relation ([`AirtimeParams::cell_levels`]) and steers by the
//! larger of that and the receiver's level ([`AirtimeSplit::set_cell`]).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::airtime::{AirtimeParams, Measured};
use crate::runtime::AggReport;
use crate::time::Ts;

pub mod bottleneck_weights;

/// A send rate.
#[derive(Clone, Copy, Debug, Default, PartialEq, PartialOrd, Serialize, Deserialize)]
pub struct Rate {
    /// Mb/s.
    pub mbps: f64,
}

impl Rate {
    /// Bits per second.
    pub fn bps(self) -> f64 {
        self.mbps * 1e6
    }
    /// Time to send `bytes` at this rate (at least 1 ns; a zero, negative or NaN rate sends
    /// nothing: 1 s).
    pub fn interval(self, bytes: u32) -> Duration {
        if self.mbps.is_nan() || self.mbps <= 0.0 {
            return Duration::from_secs(1);
        }
        Duration::from_nanos(((bytes as f64 * 8.0 / self.bps()) * 1e9).max(1.0) as u64)
    }
}

/// Something that sets a send rate from receiver reports.
pub trait RateController {
    /// A report arrived at `now`.
    fn on_report(&mut self, now: Ts, report: &AggReport);
    /// No report for `silent` (at `now`): the feedback path may be gone.
    fn on_silence(&mut self, now: Ts, silent: Duration);
    /// The current rate.
    fn rate(&self) -> Rate;
}

/// Parameters of [`PiController`].
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PiParams {
    /// N_ε: target aggregation level (MPDUs).
    pub target: f64,
    /// K0 (Mb/s per MPDU per update).
    pub k0: f64,
    /// n: stations sharing the loop (K = K0 / n).
    pub stations: u32,
    /// Start rate (Mb/s).
    pub initial_mbps: f64,
    /// Lower clamp (Mb/s).
    pub min_mbps: f64,
    /// Upper clamp (Mb/s).
    pub max_mbps: f64,
    /// Rate kept per silent report interval when feedback stops (0..1).
    pub silence_decay: f64,
    /// Backhaul-limited: the send rate per report is the receive rate × (1 + probe) while the
    /// queue upstream is short, × (1 − probe) while it drains; for [`RECENT_BACKHAUL`]
    /// reports after, the rate rises by at most the probe per report (see the module docs).
    pub backhaul_probe: f64,
    /// Start-up: rate multiplier per update while μ_N < N_ε/2 (1 = no start-up phase).
    pub startup_factor: f64,
    /// Queue guard (ms; 0 = off): a report's p95 one-way delay this far above the lowest recent
    /// mean delay is a standing queue (see the module docs).
    pub queue_guard_ms: f64,
}

impl Default for PiParams {
    fn default() -> Self {
        PiParams {
            target: 32.0,
            k0: 1.0,
            stations: 1,
            initial_mbps: 20.0,
            min_mbps: 1.0,
            max_mbps: 2000.0,
            silence_decay: 0.5,
            backhaul_probe: 0.05,
            startup_factor: 1.5,
            queue_guard_ms: 10.0,
        }
    }
}

/// Errors of controller parameters (field names `control.…`).
pub use crate::model::ParamError;

impl PiParams {
    /// Check ranges.
    pub fn check(self) -> Result<PiParams, ParamError> {
        let err = |field, value, allowed| Err(ParamError { field, value, allowed });
        if !(self.target > 0.0 && self.target <= 1024.0) {
            return err("control.target", self.target, "in (0, 1024]");
        }
        if !(self.k0 > 0.0 && self.k0.is_finite()) {
            return err("control.k0", self.k0, "> 0");
        }
        if self.stations == 0 {
            return err("control.stations", 0.0, ">= 1");
        }
        if !(self.min_mbps > 0.0 && self.min_mbps <= self.max_mbps && self.max_mbps.is_finite()) {
            return err("control.min_mbps", self.min_mbps, "0 < min_mbps <= max_mbps < ∞");
        }
        if !(self.initial_mbps >= self.min_mbps && self.initial_mbps <= self.max_mbps) {
            return err("control.initial_mbps", self.initial_mbps, "within [min_mbps, max_mbps]");
        }
        if !(0.0..1.0).contains(&self.silence_decay) {
            return err("control.silence_decay", self.silence_decay, "in [0, 1)");
        }
        if !(1.0..=4.0).contains(&self.startup_factor) {
            return err("control.startup_factor", self.startup_factor, "in [1, 4]");
        }
        if !(self.queue_guard_ms.is_finite() && self.queue_guard_ms >= 0.0) {
            return err("control.queue_guard_ms", self.queue_guard_ms, "finite, >= 0 (0: off)");
        }
        if !(0.0..=0.2).contains(&self.backhaul_probe) {
            return err("control.backhaul_probe", self.backhaul_probe, "in [0, 0.2]");
        }
        Ok(self)
    }
}

/// Where the bottleneck is, as far as the receiver's reports tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Bottleneck {
    /// The WLAN (or none yet): the aggregation signal is meaningful.
    Wlan,
    /// Upstream of the AP: losses with low aggregation.
    Backhaul,
}

/// Reports the bottleneck classifier looks back over (the study's n).
pub const BOTTLENECK_REPORTS: usize = 5;
/// Features per report: level ÷ N_ε, shortfall and surplus of the receive rate against the
/// send rate, one-way delay above the path's own (see [`BottleneckClassifier::features`]).
pub const BOTTLENECK_PER_REPORT: usize = 4;
/// Features of the bottleneck classifier: [`BOTTLENECK_PER_REPORT`] per report for the last
/// [`BOTTLENECK_REPORTS`] (newest first), then the loss over the last p = 100 packets.
pub const BOTTLENECK_FEATURES: usize = BOTTLENECK_PER_REPORT * BOTTLENECK_REPORTS + 1;

/// Whether the newest report in `features` ([`BottleneckClassifier::features`]) shows what arrives
/// apart from what was sent by at least half the loop's backhaul probe for the report (`probe`,
/// a fraction): without that, no bottleneck upstream binds (see [`PiController`]'s use of it).
pub fn upstream_evidence(features: &[f64; BOTTLENECK_FEATURES], probe: f64) -> bool {
    features[1].max(features[2]) > probe / 2.0
}

/// Whether the loop may act on "backhaul" after the newest report in `features`: the rates apart
/// by half of `bar` ([`upstream_evidence`]; the probe, or in start-up the start-up step), or — when
/// the loop took the last report for the backhaul (`was_backhaul`) — the one-way delay still
/// [`BACKHAUL_HOLD_MS`] above the path's own (the queue upstream has not emptied).
pub fn loop_evidence(features: &[f64; BOTTLENECK_FEATURES], bar: f64, was_backhaul: bool) -> bool {
    upstream_evidence(features, bar) || (was_backhaul && features[3] * 10.0 > BACKHAUL_HOLD_MS)
}

/// The loop's backhaul probe for a report interval of `secs` (the probe parameter is per 50 ms).
pub fn probe_for(backhaul_probe: f64, secs: f64) -> f64 {
    backhaul_probe * (PROBE_INTERVAL_S / secs).clamp(0.0, 1.0)
}

/// A logistic bottleneck classifier's weights on the raw features
/// ([`BottleneckClassifier::features`]): P(backhaul) = σ(w·f + bias).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct BottleneckWeights {
    /// One weight per feature.
    pub w: [f64; BOTTLENECK_FEATURES],
    /// Bias.
    pub bias: f64,
}

impl Default for BottleneckWeights {
    fn default() -> Self {
        bottleneck_weights::SHIPPED
    }
}

/// A report's receive rate in the sender's units (Mb/s of IP bytes: the report counts UDP
/// payload, 28 bytes of IPv4 + UDP header less per packet); NaN for an empty interval.
fn rx_ip_mbps(r: &AggReport) -> f64 {
    let secs = r.end.saturating_since(r.start).as_secs_f64();
    if secs > 0.0 && r.rx_rate_bps.is_finite() {
        (r.rx_rate_bps + r.packets as f64 * 28.0 * 8.0 / secs) / 1e6
    } else {
        f64::NAN
    }
}

/// The features of one report, before it enters the window: what the classifier sees of it.
fn report_features(r: &AggReport, target: f64, sent_mbps: f64, owd_base_ms: f64) -> [f64; BOTTLENECK_PER_REPORT] {
    let level = r.level();
    let level = if level.is_finite() {
        (level / target).clamp(0.0, 2.0)
    } else {
        1.0
    };
    // The receive rate in the sender's units: IP bytes (the report counts UDP payload; 28 bytes of
    // IPv4 + UDP header per packet).
    let rx = rx_ip_mbps(r);
    let ratio = if rx.is_finite() && sent_mbps > 0.0 {
        rx / sent_mbps
    } else {
        1.0
    };
    let excess = match r.owd_mean_ms {
        Some(m) if m.is_finite() && owd_base_ms.is_finite() => ((m - owd_base_ms) / 10.0).clamp(0.0, 3.0),
        _ => 0.0,
    };
    [
        level,
        (1.0 - ratio).clamp(0.0, 1.0),
        (ratio - 1.0).clamp(0.0, 1.0),
        excess,
    ]
}

/// The study's bottleneck classifier: a logistic model over the last n = 5 reports and the loss
/// over the last p = 100 packets (an exponentially weighted estimate), trained on testbed runs
/// in which a backhaul bottleneck switches on and off (`aggrate testbed bottleneck`; the shipped
/// weights and how they were made: `control/bottleneck_weights.rs`). Per report it sees the level
/// against N_ε (low behind a backhaul: the AP's queue is empty), the receive rate against the
/// send rate (short of it while a queue upstream fills; above it while one drains), and the
/// one-way delay above the path's own (a queue somewhere). Before five reports have come the
/// window holds neutral reports (at the target, rates equal, no queue).
#[derive(Clone, Debug)]
pub struct BottleneckClassifier {
    weights: BottleneckWeights,
    target: f64,
    window: [[f64; BOTTLENECK_PER_REPORT]; BOTTLENECK_REPORTS],
    loss_ewma: f64,
    prob: f64,
    interval: (Ts, Ts),
}

impl BottleneckClassifier {
    /// With weights and the aggregation target N_ε.
    pub fn new(weights: BottleneckWeights, target: f64) -> Self {
        BottleneckClassifier {
            weights,
            target,
            window: [[1.0, 0.0, 0.0, 0.0]; BOTTLENECK_REPORTS],
            loss_ewma: 0.0,
            prob: 0.0,
            interval: (Ts::ZERO, Ts::ZERO),
        }
    }

    /// Update with a report that came while the sender sent at `sent_mbps` (IP bytes), the
    /// path's own one-way delay being `owd_base_ms` (NaN: unknown); returns the class.
    pub fn on_report(&mut self, r: &AggReport, sent_mbps: f64, owd_base_ms: f64) -> Bottleneck {
        // Loss over the last p = 100 packets: weight the interval's loss rate by how many of
        // the last 100 packets it holds.
        // In f64: a peer's counts near 2^64 cannot overflow a sum there.
        let n = r.packets as f64 + r.lost as f64;
        let w = (n / 100.0).min(1.0);
        if r.loss_rate.is_finite() {
            self.loss_ewma = (1.0 - w) * self.loss_ewma + w * r.loss_rate.clamp(0.0, 1.0);
        }
        self.interval = (r.start, r.end);
        self.window.rotate_right(1);
        self.window[0] = report_features(r, self.target, sent_mbps, owd_base_ms);
        let f = self.features();
        let s: f64 = f.iter().zip(&self.weights.w).map(|(x, w)| x * w).sum::<f64>() + self.weights.bias;
        self.prob = 1.0 / (1.0 + (-s).exp());
        self.class()
    }

    /// The features the last report left: per report, newest first, `[level ÷ N_ε (0..2),
    /// shortfall (1 − rx/sent, 0..1), surplus (rx/sent − 1, 0..1), one-way delay above the
    /// path's own ÷ 10 ms (0..3)]`, then the loss over the last 100 packets (0..1).
    pub fn features(&self) -> [f64; BOTTLENECK_FEATURES] {
        let mut f = [0.0; BOTTLENECK_FEATURES];
        for (k, r) in self.window.iter().enumerate() {
            f[k * BOTTLENECK_PER_REPORT..(k + 1) * BOTTLENECK_PER_REPORT].copy_from_slice(r);
        }
        f[BOTTLENECK_FEATURES - 1] = self.loss_ewma;
        f
    }

    /// The receiver's interval (start, end) the last report covered.
    pub fn interval(&self) -> (Ts, Ts) {
        self.interval
    }

    /// P(backhaul) after the last report.
    pub fn probability(&self) -> f64 {
        self.prob
    }

    /// The current class.
    pub fn class(&self) -> Bottleneck {
        if self.prob > 0.5 {
            Bottleneck::Backhaul
        } else {
            Bottleneck::Wlan
        }
    }

    /// Loss estimate over the last p packets.
    pub fn loss(&self) -> f64 {
        self.loss_ewma
    }
}

/// Reports after a backhaul-limited one during which the rate rises by the probe step at most.
pub const RECENT_BACKHAUL: u32 = 10;

/// Backhaul-limited: one-way delay above the path's own (ms) from which the queue upstream is
/// drained (the rate goes below the receive rate).
const BACKHAUL_QUEUE_MS: f64 = 3.0;

/// Backhaul-limited: one-way delay above the path's own (ms) that keeps an episode going through
/// a report in which the rates agree ([`loop_evidence`]).
pub const BACKHAUL_HOLD_MS: f64 = 1.0;

/// The report interval the backhaul probe is given for: at longer intervals it is scaled down.
const PROBE_INTERVAL_S: f64 = 0.05;

/// Reports over which the queue guard takes the path's own delay (the lowest mean one-way
/// delay): 64, 32 s at the default interval.
pub const GUARD_WINDOW: usize = 64;

/// The study's integral controller with clamps, anti-windup, silence decay and the backhaul
/// freeze (see the module docs).
#[derive(Clone, Debug)]
pub struct PiController {
    p: PiParams,
    x: f64,
    bottleneck: BottleneckClassifier,
    /// The class the loop acted on after the last report (see [`PiController::bottleneck`]).
    class: Bottleneck,
    updates: u64,
    /// The level the last report stepped the loop by (after the queue guard; NaN: none yet, or a
    /// backhaul-limited report).
    last_level: f64,
    startup: bool,
    /// Reports since the last backhaul-limited one (u32::MAX: never).
    since_backhaul: u32,
    /// Mean one-way delays of the last reports (ring; NaN: none yet).
    owd_recent: [f64; GUARD_WINDOW],
    owd_next: usize,
    guarded: u64,
}

impl PiController {
    /// From checked parameters.
    pub fn new(p: PiParams) -> Result<Self, ParamError> {
        let p = p.check()?;
        Ok(PiController {
            x: p.initial_mbps,
            bottleneck: BottleneckClassifier::new(BottleneckWeights::default(), p.target),
            class: Bottleneck::Wlan,
            startup: p.startup_factor > 1.0,
            p,
            updates: 0,
            last_level: f64::NAN,
            since_backhaul: u32::MAX,
            owd_recent: [f64::NAN; GUARD_WINDOW],
            owd_next: 0,
            guarded: 0,
        })
    }

    /// Reports the queue guard took as a standing queue.
    pub fn guarded(&self) -> u64 {
        self.guarded
    }

    /// Take a report's mean one-way delay into the window; the path's own delay: the lowest
    /// mean of the window (NaN: none yet).
    fn owd_base(&mut self, r: &AggReport) -> f64 {
        if let Some(mean) = r.owd_mean_ms.filter(|v| v.is_finite()) {
            self.owd_recent[self.owd_next] = mean;
            self.owd_next = (self.owd_next + 1) % GUARD_WINDOW;
        }
        let base = self
            .owd_recent
            .iter()
            .copied()
            .filter(|v| !v.is_nan())
            .fold(f64::INFINITY, f64::min);
        if base.is_finite() {
            base
        } else {
            f64::NAN
        }
    }

    /// The level to step by: the report's, or twice the target when its delay shows a standing
    /// queue over the path's own delay `base` (the queue guard).
    fn guard(&mut self, r: &AggReport, base: f64) -> f64 {
        let level = r.level();
        // A standing queue delays every packet: the mean rises with the p95. Bursts that a
        // loaded host's AP releases late raise the p95 alone (live over loopback: p95 > 10 ms
        // above the path's own at a mean of 2–3 ms), and stepping as if the level were 2·N_ε then
        // cuts K0·N_ε = 32 Mb/s per report — at a start-up rate of 30 Mb/s, to the clamp.
        let (p95, mean) = (r.owd_p95_ms.unwrap_or(f64::NAN), r.owd_mean_ms.unwrap_or(f64::NAN));
        let g = self.p.queue_guard_ms;
        if g > 0.0 && base.is_finite() && p95 - base > g && mean - base > g / 2.0 {
            self.guarded += 1;
            level.max(2.0 * self.p.target)
        } else {
            level
        }
    }

    /// Use these bottleneck classifier weights from now on (the window and loss so far kept).
    pub fn set_bottleneck_weights(&mut self, w: BottleneckWeights) {
        self.bottleneck.weights = w;
    }

    /// The bottleneck classifier: its features and P(backhaul) after the last report.
    pub fn classifier(&self) -> &BottleneckClassifier {
        &self.bottleneck
    }

    /// K = K0 / n.
    pub fn gain(&self) -> f64 {
        self.p.k0 / self.p.stations as f64
    }

    /// The bottleneck class after the last report.
    pub fn bottleneck(&self) -> Bottleneck {
        self.class
    }

    /// Reports handled.
    pub fn updates(&self) -> u64 {
        self.updates
    }

    /// In the start-up phase.
    pub fn starting(&self) -> bool {
        self.startup
    }

    /// The level the last report stepped the loop by: the report's (for several stations the
    /// cell's, see [`AirtimeSplit::level_of`]), or twice the target when the queue guard took
    /// it as a standing queue; NaN before the first report and while the bottleneck is
    /// upstream.
    pub fn last_level(&self) -> f64 {
        self.last_level
    }

    /// Apply one update from a level μ_N (MPDUs). A level that is not finite changes nothing.
    pub fn step(&mut self, level: f64) {
        if !level.is_finite() {
            return;
        }
        if self.startup && level < self.p.target / 2.0 {
            self.set(self.x * self.p.startup_factor);
            return;
        }
        self.startup = false;
        let x = self.x + self.gain() * (self.p.target - level);
        // Anti-windup: x is the integrator; clamping it stops integration at the limits.
        self.x = x.clamp(self.p.min_mbps, self.p.max_mbps);
    }

    /// Set the rate directly (clamped; NaN changes nothing).
    pub fn set(&mut self, mbps: f64) {
        if !mbps.is_nan() {
            self.x = mbps.clamp(self.p.min_mbps, self.p.max_mbps);
        }
    }
}

impl RateController for PiController {
    fn on_report(&mut self, _now: Ts, r: &AggReport) {
        self.updates += 1;
        let base = self.owd_base(r);
        // The probe is per 50 ms of report: at longer intervals a smaller step per report, so
        // the queue upstream grows by the same ≤ 2.5 ms per report.
        let secs = r.end.saturating_since(r.start).as_secs_f64();
        let probe = probe_for(self.p.backhaul_probe, secs);
        // The first report may cover a part-filled interval: it never says "backhaul". (The
        // start-up ramp does not move the rates apart: each report is compared with the rate
        // sent over its interval.) A backhaul ends start-up. And a bottleneck upstream that
        // binds shows in the rates: behind it the loop's probe keeps
        // what arrives apart from what is sent, one way or the other, in every report; a report
        // in which they agree is the WLAN's whatever the window says (so the first clean report
        // after the backhaul goes ends the episode, and a low level alone never starts one).
        //
        // In start-up the bar is the start-up step's, not the probe's: the ramp multiplies the
        // rate by `startup_factor` per report, so a backhaul it crosses leaves what arrives short
        // of what is sent by more than half the step within two reports, while on a WLAN far from
        // full (a low level, as behind a backhaul) a late AP or the interval's edges move the
        // rates apart by far less. (Live over loopback, a 0.5 % bar at 500 ms reports took the
        // first 30 Mb/s for a backhaul and held the rate there.)
        let class = self.bottleneck.on_report(r, self.x, base);
        let bar = if self.startup {
            probe.max(1.0 - 1.0 / self.p.startup_factor)
        } else {
            probe
        };
        //
        // An episode also goes on through a report in which the rates agree while the delay stays
        // BACKHAUL_HOLD_MS above the path's own: the queue upstream has not emptied, so the
        // backhaul is still there (the rates met by chance: the tbf's bursts, an A-MPDU across
        // the interval's edge). When a backhaul goes, its queue drains at once (on the testbed
        // the first report after held ≤ 0.8 ms): the going is still seen in that report.
        let evidence = loop_evidence(&self.bottleneck.features(), bar, self.class == Bottleneck::Backhaul);
        let class = if self.updates <= 1 || !evidence {
            Bottleneck::Wlan
        } else {
            class
        };
        self.class = class;
        match class {
            Bottleneck::Wlan => {
                let (before, guarded) = (self.x, self.guarded);
                let level = self.guard(r, base);
                self.last_level = level;
                self.step(level);
                // The guard's step (K0·N_ε) takes at most half the rate: at 500 Mb/s it is 6 %,
                // at a start-up rate of 30 Mb/s it would be all of it.
                if self.guarded > guarded {
                    self.set(self.x.max(before / 2.0));
                }
                // Shortly after a backhaul limit, rise by the probe step at most: the classifier
                // may have let go early, and the level behind a backhaul is low.
                if self.since_backhaul < RECENT_BACKHAUL {
                    self.since_backhaul += 1;
                    self.set(self.x.min(before * (1.0 + self.p.backhaul_probe)));
                }
            }
            Bottleneck::Backhaul => {
                self.last_level = f64::NAN;
                self.startup = false;
                // Follow what arrives: a little above it while the queue upstream is short (so
                // the loop learns at once when the backhaul goes), below it while that queue
                // drains. The integrator is the rate itself: nothing winds up.
                let rx = rx_ip_mbps(r);
                if rx > 0.0 && rx.is_finite() {
                    // A queue upstream shows in the delay *and* in the rates: less arrives than
                    // is sent while it fills, more while it drains. A delay with the rates
                    // agreeing is no queue of ours (a late AP, a noisy path): draining then
                    // would only follow our own rate down.
                    let apart = (rx / self.x - 1.0).abs() > probe / 2.0;
                    let queued = apart
                        && r.owd_mean_ms
                            .is_some_and(|m| base.is_finite() && m - base > BACKHAUL_QUEUE_MS);
                    let f = if queued { 1.0 - probe } else { 1.0 + probe };
                    self.set(rx * f);
                }
                self.since_backhaul = 0;
            }
        }
    }

    fn on_silence(&mut self, _now: Ts, _silent: Duration) {
        self.startup = false;
        self.set(self.x * self.p.silence_decay);
    }

    fn rate(&self) -> Rate {
        Rate { mbps: self.x }
    }
}

/// Equal-airtime rates for several stations from one loop (see the module docs).
#[derive(Clone, Debug)]
pub struct AirtimeSplit {
    loop_: PiController,
    phy: Vec<f64>,
    rates: Vec<f64>,
    driven: usize,
    cell: Option<Cell>,
}

/// What [`AirtimeSplit`] needs to solve the cell's airtime relation: the airtime parameters and
/// the IP length of the sender's packets.
#[derive(Clone, Debug, PartialEq)]
pub struct Cell {
    /// Airtime of an exchange.
    pub airtime: AirtimeParams,
    /// IP length of each packet the sender sends (bytes).
    pub ip_len: f64,
}

impl AirtimeSplit {
    /// For `stations` stations; `p.stations` is set to their number (K = K0 / n).
    pub fn new(mut p: PiParams, stations: usize) -> Result<Self, ParamError> {
        p.stations = stations.max(1) as u32;
        let loop_ = PiController::new(p)?;
        let x = loop_.rate().mbps;
        Ok(AirtimeSplit {
            loop_,
            phy: vec![0.0; stations.max(1)],
            rates: vec![x; stations.max(1)],
            driven: 0,
            cell: None,
        })
    }

    /// Steer several stations by the cell's airtime relation too (`None`: by the receivers'
    /// levels alone). With one station it changes nothing.
    pub fn set_cell(&mut self, cell: Option<Cell>) {
        self.cell = cell;
    }

    /// The driven station's level from the cell's airtime relation: every report needs its
    /// packets, interval and μ_R.
    fn cell_level(&self, reports: &[AggReport], driven: usize) -> Option<f64> {
        let c = self.cell.as_ref()?;
        if reports.len() < 2 {
            return None;
        }
        let loads: Vec<Measured> = reports
            .iter()
            .map(|r| {
                let secs = r.end.saturating_since(r.start).as_secs_f64();
                Measured {
                    pkt_rate: if secs > 0.0 { r.packets as f64 / secs } else { f64::NAN },
                    ip_len: c.ip_len,
                    phy_bps: r.phy_rate_bps.unwrap_or(f64::NAN),
                    others_share: 0.0,
                }
            })
            .collect();
        c.airtime.cell_levels(&loads, 0.0).get(driven).copied().flatten()
    }

    /// One report per station (same interval). Reports without μ_R keep the last known μ_R.
    pub fn on_reports(&mut self, now: Ts, reports: &[AggReport]) {
        for (i, r) in reports.iter().enumerate().take(self.phy.len()) {
            // Only a finite, positive μ_R counts (inf / inf would make the split NaN).
            if let Some(phy) = r.phy_rate_bps.filter(|v| v.is_finite() && *v > 0.0) {
                self.phy[i] = phy;
            }
        }
        let best = (0..self.phy.len())
            .max_by(|&a, &b| self.phy[a].total_cmp(&self.phy[b]).then(b.cmp(&a)))
            .unwrap_or(0);
        self.driven = best;
        if let Some(r) = reports.get(best) {
            let mut r = *r;
            r.corrected_agg = Some(self.level_of(reports, best));
            self.loop_.on_report(now, &r);
        }
        self.spread();
    }

    /// The loop's rate (Mb/s, before the split).
    pub fn loop_rate(&self) -> f64 {
        self.loop_.x
    }

    /// Hold the loop's rate at `mbps` at most (an application-limited sender may let the loop
    /// lower its rate, never raise it).
    pub fn cap_loop_rate(&mut self, mbps: f64) {
        if self.loop_.x > mbps {
            self.loop_.set(mbps);
            self.spread();
        }
    }

    /// Feedback lost for every station.
    pub fn on_silence(&mut self, now: Ts, silent: Duration) {
        self.loop_.on_silence(now, silent);
        self.spread();
    }

    fn spread(&mut self) {
        let x = self.loop_.rate().mbps;
        let r_star = self.phy[self.driven];
        let (lo, hi) = (self.loop_.p.min_mbps, self.loop_.p.max_mbps);
        for (j, rate) in self.rates.iter_mut().enumerate() {
            let share = if r_star > 0.0 && self.phy[j] > 0.0 {
                x * self.phy[j] / r_star
            } else {
                x
            };
            // Within the clamps whatever the reports said (a NaN share falls back to x).
            *rate = if share.is_nan() { x } else { share.clamp(lo, hi) };
        }
    }

    /// Rate of station `j`.
    pub fn rate(&self, j: usize) -> Rate {
        Rate {
            mbps: self.rates.get(j).copied().unwrap_or(0.0),
        }
    }

    /// The level station `i` is steered by, from one report per station of one interval: its
    /// receiver's level, or the cell's airtime level when that is higher (several stations and
    /// [`Self::set_cell`]).
    pub fn level_of(&self, reports: &[AggReport], i: usize) -> f64 {
        let own = reports.get(i).map_or(0.0, AggReport::level);
        match self.cell_level(reports, i) {
            Some(cell) => cell.max(own).min(1024.0),
            None => own,
        }
    }

    /// The station the loop drives (highest μ_R).
    pub fn driven(&self) -> usize {
        self.driven
    }

    /// The loop.
    pub fn controller(&self) -> &PiController {
        &self.loop_
    }

    /// Use these bottleneck classifier weights in the loop from now on.
    pub fn set_bottleneck_weights(&mut self, w: BottleneckWeights) {
        self.loop_.set_bottleneck_weights(w);
    }
}

/// A sender's rate control as a closed loop drives it: receivers' reports and per-packet
/// acknowledgements in, a pacing rate and a send window out. [`AirtimeSplit`] (the study's
/// aggregation-target controller) implements it, and so does the loss-based Cubic baseline the
/// virtual-clock loop compares it with (`aggrate::sim`), so both run the same loop.
pub trait Controller {
    /// One report per station (in station order) arrived at `now`.
    fn on_reports(&mut self, now: Ts, reports: &[AggReport]);
    /// No feedback for `silent` at `now`.
    fn on_silence(&mut self, now: Ts, silent: Duration);
    /// A packet to station `sta` was acknowledged at `now`; `lost`: the receiver saw a gap before
    /// it. Only window-based controllers use acknowledgements.
    fn on_ack(&mut self, now: Ts, sta: usize, lost: bool);
    /// Whether the controller needs per-packet acknowledgements.
    fn wants_acks(&self) -> bool;
    /// Whether station `sta` may send another packet with `inflight` unacknowledged.
    fn may_send(&self, sta: usize, inflight: u64) -> bool;
    /// The controller's rate toward `sta` (for a window: the window per round trip).
    fn rate(&self, sta: usize) -> Rate;
    /// The rate packets to `sta` are paced at (default: [`Controller::rate`]).
    fn pacing_rate(&self, sta: usize) -> Rate {
        self.rate(sta)
    }
}

/// Per-station pacing clocks and in-flight counts: when each station may send next at its
/// controller's pacing rate, and which station goes next. The transport's [`Sender`] and the
/// virtual loop's loss-based baseline pace through this one type, so that they differ only in
/// their [`Controller`].
///
/// A station sends at its scheduled time; the next is scheduled one packet's interval at the
/// pacing rate after it, from the scheduled time rather than from a late wake-up (so waking late
/// does not lower the rate), but a station later than `max_credit` starts afresh from now (no
/// burst to catch up). Of the stations due, the one scheduled earliest goes first (the lowest
/// at equal times).
///
/// [`Sender`]: crate::transport::Sender
#[derive(Clone, Debug)]
pub struct Pacer {
    next: Vec<Ts>,
    inflight: Vec<u64>,
    max_credit: Duration,
}

impl Pacer {
    /// `n` stations, each first due at `start`; lateness up to `max_credit` is made up.
    pub fn new(n: usize, start: Ts, max_credit: Duration) -> Pacer {
        Pacer {
            next: vec![start; n],
            inflight: vec![0; n],
            max_credit,
        }
    }

    /// The station to send next and when (never before `clock`): among those `ctl` lets send
    /// with their packets in flight and that are `ready`, the one scheduled earliest.
    pub fn next_due(&self, clock: Ts, ctl: &dyn Controller, ready: impl Fn(usize) -> bool) -> Option<(Ts, usize)> {
        (0..self.next.len())
            .filter(|&i| ready(i) && ctl.may_send(i, self.inflight[i]))
            .min_by_key(|&i| self.next[i])
            .map(|i| (self.next[i].max(clock), i))
    }

    /// Station `i` sent a packet of `bytes` at `now` (at or after its time), paced at `rate`.
    pub fn sent(&mut self, i: usize, now: Ts, rate: Rate, bytes: u32) {
        let base = if now.saturating_since(self.next[i]) > self.max_credit {
            now
        } else {
            self.next[i]
        };
        self.next[i] = base + rate.interval(bytes);
        self.inflight[i] += 1;
    }

    /// When station `i` is next due.
    pub fn next(&self, i: usize) -> Ts {
        self.next[i]
    }

    /// Station `i` has nothing to send at `now`: its next send is not before now (a station idle
    /// for a while starts afresh, no burst to make up the idle time).
    pub fn idle(&mut self, i: usize, now: Ts) {
        self.next[i] = self.next[i].max(now);
    }

    /// One of station `i`'s packets left the flight (acknowledged).
    pub fn acked(&mut self, i: usize) {
        self.inflight[i] = self.inflight[i].saturating_sub(1);
    }

    /// Station `i`'s packets in flight.
    pub fn inflight(&self, i: usize) -> u64 {
        self.inflight[i]
    }

    /// Set station `i`'s packets in flight (losses found otherwise than by acknowledgement).
    pub fn set_inflight(&mut self, i: usize, n: u64) {
        self.inflight[i] = n;
    }
}

impl Controller for AirtimeSplit {
    fn on_reports(&mut self, now: Ts, reports: &[AggReport]) {
        AirtimeSplit::on_reports(self, now, reports);
    }
    fn on_silence(&mut self, now: Ts, silent: Duration) {
        AirtimeSplit::on_silence(self, now, silent);
    }
    fn on_ack(&mut self, _: Ts, _: usize, _: bool) {}
    fn wants_acks(&self) -> bool {
        false
    }
    fn may_send(&self, _: usize, _: u64) -> bool {
        true
    }
    fn rate(&self, sta: usize) -> Rate {
        AirtimeSplit::rate(self, sta)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A window of two packets at 12 Mb/s (1,500 bytes: 1 ms apart).
    struct Window;
    impl Controller for Window {
        fn on_reports(&mut self, _: Ts, _: &[AggReport]) {}
        fn on_silence(&mut self, _: Ts, _: Duration) {}
        fn on_ack(&mut self, _: Ts, _: usize, _: bool) {}
        fn wants_acks(&self) -> bool {
            true
        }
        fn may_send(&self, _: usize, inflight: u64) -> bool {
            inflight < 2
        }
        fn rate(&self, _: usize) -> Rate {
            Rate { mbps: 12.0 }
        }
    }

    #[test]
    fn the_pacer_makes_up_lateness_within_its_credit_and_serves_the_earliest_first() {
        let ms = |m: u64| Ts(m * 1_000_000);
        let r = Rate { mbps: 12.0 };
        let mut p = Pacer::new(2, ms(0), Duration::from_millis(2));
        // Both due at 0: station 0 first; then station 1, still due at 0 though sent at 0.5 ms.
        assert_eq!(p.next_due(ms(0), &Window, |_| true), Some((ms(0), 0)));
        p.sent(0, ms(0), r, 1500);
        assert_eq!(p.next_due(ms(0), &Window, |_| true), Some((ms(0), 1)));
        p.sent(1, Ts(500_000), r, 1500);
        // Paced from the scheduled time: station 1 is due at 1 ms, not 1.5.
        assert_eq!((p.next(0), p.next(1)), (ms(1), ms(1)));
        // Both windows are full: nobody may send until an acknowledgement.
        p.sent(0, ms(1), r, 1500);
        p.sent(1, ms(1), r, 1500);
        assert_eq!(p.next_due(ms(5), &Window, |_| true), None);
        p.acked(1);
        assert_eq!(p.inflight(1), 1);
        assert_eq!(p.next_due(ms(5), &Window, |_| true), Some((ms(5), 1)));
        // 3 ms late, more than the 2 ms of credit: paced afresh from now.
        p.sent(1, ms(5), r, 1500);
        assert_eq!(p.next(1), ms(6));
        // 1 ms late, within it: from the scheduled time.
        p.acked(1);
        p.sent(1, ms(7), r, 1500);
        assert_eq!(p.next(1), ms(7));
        // `ready` leaves a station out.
        p.set_inflight(0, 0);
        assert_eq!(p.next_due(ms(0), &Window, |i| i == 0), Some((ms(2), 0)));
    }

    fn report(level: f64, packets: u64, lost: u64, rx_mbps: f64) -> AggReport {
        AggReport {
            frames: 10,
            packets,
            mean_agg: level,
            lost,
            loss_rate: lost as f64 / (lost + packets).max(1) as f64,
            rx_rate_bps: rx_mbps * 1e6,
            ..AggReport::default()
        }
    }

    #[test]
    fn integrates_the_error_with_clamps() {
        let mut s = PiController::new(PiParams::default()).unwrap();
        s.on_report(Ts::ZERO, &report(2.0, 1000, 0, 20.0));
        assert_eq!(s.rate().mbps, 30.0, "start-up: ×1.5 while μ_N < N_ε/2");
        s.on_report(Ts::ZERO, &report(17.0, 1000, 0, 30.0));
        assert!(!s.starting());
        assert_eq!(s.rate().mbps, 45.0, "then the integral loop: 30 + (32 − 17)");
        let mut c = PiController::new(PiParams {
            startup_factor: 1.0,
            ..PiParams::default()
        })
        .unwrap();
        assert_eq!(c.rate().mbps, 20.0);
        c.on_report(Ts::ZERO, &report(2.0, 1000, 0, 20.0));
        assert_eq!(c.rate().mbps, 50.0, "20 + 1·(32 − 2)");
        c.on_report(Ts::ZERO, &report(40.0, 1000, 0, 50.0));
        assert_eq!(c.rate().mbps, 42.0);
        for _ in 0..1000 {
            c.on_report(Ts::ZERO, &report(64.0, 1000, 0, 50.0));
        }
        assert_eq!(c.rate().mbps, 1.0, "clamped at min, no windup below it");
        c.on_report(Ts::ZERO, &report(31.0, 1000, 0, 1.0));
        assert_eq!(c.rate().mbps, 2.0, "leaves the clamp at once");
        let two = PiController::new(PiParams {
            stations: 2,
            ..PiParams::default()
        })
        .unwrap();
        assert_eq!(two.gain(), 0.5);
    }

    /// A report over 50 ms in which `rx_ip` Mb/s of IP bytes (1,500-byte packets) arrived.
    fn report_50ms(level: f64, rx_ip: f64, owd_ms: f64) -> AggReport {
        let packets = (rx_ip * 1e6 * 0.05 / 8.0 / 1500.0).round() as u64;
        AggReport {
            start: Ts(0),
            end: Ts(50_000_000),
            frames: 10,
            packets,
            mean_agg: level,
            rx_rate_bps: rx_ip * 1e6 - packets as f64 * 28.0 * 8.0 / 0.05,
            owd_mean_ms: Some(owd_ms),
            owd_p95_ms: Some(owd_ms + 0.5),
            ..AggReport::default()
        }
    }

    fn forced(backhaul: bool) -> BottleneckWeights {
        BottleneckWeights {
            w: [0.0; BOTTLENECK_FEATURES],
            bias: if backhaul { 10.0 } else { -10.0 },
        }
    }

    /// The loop's mechanics behind a backhaul, whatever the classifier's weights: it follows
    /// what arrives (a little above while the queue upstream is short, below while it drains),
    /// rises by at most the probe per report for a while after; the first report never says
    /// "backhaul", a backhaul ends start-up.
    #[test]
    fn behind_a_backhaul_the_loop_follows_what_arrives() {
        let mut c = PiController::new(PiParams::default()).unwrap();
        c.set_bottleneck_weights(forced(true));
        // The first report (a part-filled interval, here 10 of 20 Mb/s): never "backhaul".
        c.on_report(Ts::ZERO, &report_50ms(2.0, 10.0, 1.0));
        assert!(c.starting() && c.classifier().class() == Bottleneck::Backhaul);
        assert_eq!(c.bottleneck(), Bottleneck::Wlan, "the loop's class");
        assert_eq!(c.rate().mbps, 30.0, "start-up ramps");
        // The ramp keeps what arrives equal to what was sent: the class stays the WLAN's.
        c.on_report(Ts::ZERO, &report_50ms(2.0, 30.0, 1.0));
        assert!(c.starting() && c.bottleneck() == Bottleneck::Wlan);
        assert_eq!(c.rate().mbps, 45.0);
        // In start-up the bar is half the ×1.5 step, not the probe's: 4 % short of what was sent
        // (a late AP, the interval's edges at a low rate) is still the WLAN's.
        c.on_report(Ts::ZERO, &report_50ms(2.0, 43.2, 3.0));
        assert!(c.starting() && c.bottleneck() == Bottleneck::Wlan);
        assert_eq!(c.rate().mbps, 67.5);
        // Less arrives than was sent (30 of 67.5): a backhaul ends start-up.
        c.on_report(Ts::ZERO, &report_50ms(2.0, 30.0, 1.0));
        assert!(!c.starting() && c.bottleneck() == Bottleneck::Backhaul);
        assert!((c.rate().mbps - 31.5).abs() < 1e-6, "{}", c.rate().mbps);
        let mut c = PiController::new(PiParams {
            initial_mbps: 300.0,
            startup_factor: 1.0,
            ..PiParams::default()
        })
        .unwrap();
        c.set_bottleneck_weights(forced(true));
        c.on_report(Ts::ZERO, &report_50ms(32.0, 300.0, 1.0));
        assert_eq!(
            (c.bottleneck(), c.rate().mbps),
            (Bottleneck::Wlan, 300.0),
            "the first report"
        );
        c.on_report(Ts::ZERO, &report_50ms(3.0, 150.0, 1.0));
        assert!((c.rate().mbps - 157.5).abs() < 1e-6, "{}", c.rate().mbps);
        assert!(c.last_level().is_nan());
        // A queue upstream (delay 5 ms over the path's own 1 ms): below what arrives.
        c.on_report(Ts::ZERO, &report_50ms(3.0, 150.0, 6.0));
        assert!((c.rate().mbps - 142.5).abs() < 1e-6, "{}", c.rate().mbps);
        // The rates agree by chance while the queue upstream stays (8 ms over the path's own):
        // the episode goes on; with the rates agreeing it is not drained, the rate steps up.
        c.on_report(Ts::ZERO, &report_50ms(3.0, 142.5, 9.0));
        assert_eq!(c.bottleneck(), Bottleneck::Backhaul);
        assert!((c.rate().mbps - 142.5 * 1.05).abs() < 1e-6, "{}", c.rate().mbps);
        // The rates agree and the queue has gone: no bottleneck upstream binds, whatever the
        // weights say — the WLAN's class, and the loop integrates again, rising by 5 % per report
        // at most for RECENT_BACKHAUL reports, then freely.
        let x = c.rate().mbps;
        c.on_report(Ts::ZERO, &report_50ms(3.0, x, 1.5));
        assert_eq!(c.bottleneck(), Bottleneck::Wlan);
        assert!((c.rate().mbps - x * 1.05).abs() < 1e-6, "{}", c.rate().mbps);
        c.set_bottleneck_weights(forced(false));
        let mut x = c.rate().mbps;
        for _ in 1..RECENT_BACKHAUL {
            c.on_report(Ts::ZERO, &report_50ms(3.0, x, 1.0));
            assert!((c.rate().mbps - x * 1.05).abs() < 1e-6, "{} after {x}", c.rate().mbps);
            x = c.rate().mbps;
        }
        c.on_report(Ts::ZERO, &report_50ms(3.0, x, 1.0));
        assert!((c.rate().mbps - (x + 29.0)).abs() < 1e-6, "x + (32 - 3)");
    }

    /// The shipped weights: at the target with the rates equal, the WLAN; behind a backhaul
    /// (level low, what arrives short of what is sent, a queue growing upstream), the backhaul;
    /// a WLAN that is full (what arrives short, the level high) stays the WLAN's.
    #[test]
    fn the_shipped_classifier_tells_the_backhaul_from_the_wlan() {
        let k = |reports: &[AggReport], sent: f64| {
            let mut c = BottleneckClassifier::new(BottleneckWeights::default(), 32.0);
            for r in reports {
                c.on_report(r, sent, 1.0);
            }
            c.class()
        };
        assert_eq!(k(&[report_50ms(32.0, 300.0, 1.0); 5], 300.0), Bottleneck::Wlan);
        let behind: Vec<AggReport> = (0..5).map(|i| report_50ms(4.0, 150.0, 1.0 + 4.0 * i as f64)).collect();
        assert_eq!(k(&behind, 300.0), Bottleneck::Backhaul);
        let full: Vec<AggReport> = (0..5).map(|i| report_50ms(60.0, 280.0, 1.0 + 4.0 * i as f64)).collect();
        assert_eq!(k(&full, 300.0), Bottleneck::Wlan);
    }

    /// A level that reads at the target while the delay climbs 10 ms above the path's own is a
    /// standing queue: the loop backs off; when the delay falls it integrates again. Off at 0.
    #[test]
    fn the_queue_guard_backs_off_from_a_standing_queue() {
        let at = |owd: f64, p95: f64| AggReport {
            owd_mean_ms: Some(owd),
            owd_p95_ms: Some(p95),
            ..report(31.0, 20_000, 0, 500.0)
        };
        let p = PiParams {
            initial_mbps: 500.0,
            startup_factor: 1.0,
            ..PiParams::default()
        };
        let mut c = PiController::new(p).unwrap();
        // The path's own delay: 40 ms one way (another host's clock offset included), jitter 3 ms.
        for _ in 0..10 {
            c.on_report(Ts::ZERO, &at(40.0, 43.0));
        }
        assert_eq!(c.guarded(), 0);
        assert!((c.rate().mbps - 510.0).abs() < 1e-9, "integrates (32 - 31) per report");
        // A queue: p95 12 ms above the lowest mean delay. The step is as if the level were 64.
        c.on_report(Ts::ZERO, &at(48.0, 52.5));
        assert_eq!(c.guarded(), 1);
        assert!((c.rate().mbps - (510.0 - 32.0)).abs() < 1e-9, "{}", c.rate().mbps);
        // Delay spikes without a queue (a late AP): the p95 12 ms up, the mean 2 ms: no guard.
        c.on_report(Ts::ZERO, &at(42.0, 52.5));
        assert_eq!(c.guarded(), 1);
        assert!((c.rate().mbps - (510.0 - 32.0 + 1.0)).abs() < 1e-9, "{}", c.rate().mbps);
        // Drained: back to integrating.
        c.on_report(Ts::ZERO, &at(40.5, 44.0));
        assert!((c.rate().mbps - 480.0).abs() < 1e-9, "{}", c.rate().mbps);
        // At a low rate the guard's step takes half the rate, not all of it.
        let mut low = PiController::new(PiParams {
            initial_mbps: 30.0,
            ..p
        })
        .unwrap();
        low.on_report(Ts::ZERO, &at(40.0, 43.0));
        low.on_report(Ts::ZERO, &at(48.0, 52.5));
        assert_eq!((low.guarded(), low.rate().mbps), (1, 15.5), "31 halved");
        // Off.
        let mut off = PiController::new(PiParams {
            queue_guard_ms: 0.0,
            ..p
        })
        .unwrap();
        off.on_report(Ts::ZERO, &at(40.0, 40.0));
        off.on_report(Ts::ZERO, &at(80.0, 90.0));
        assert_eq!(off.guarded(), 0);
        assert!(PiParams {
            queue_guard_ms: f64::NAN,
            ..p
        }
        .check()
        .is_err());
        assert!(PiParams {
            queue_guard_ms: -1.0,
            ..p
        }
        .check()
        .is_err());
    }

    #[test]
    fn silence_decays_and_split_follows_phy_rates() {
        let mut c = PiController::new(PiParams {
            initial_mbps: 400.0,
            ..PiParams::default()
        })
        .unwrap();
        c.on_silence(Ts::ZERO, Duration::from_secs(1));
        assert_eq!(c.rate().mbps, 200.0);
        let mut s = AirtimeSplit::new(
            PiParams {
                startup_factor: 1.0,
                ..PiParams::default()
            },
            3,
        )
        .unwrap();
        let mut r = [AggReport::default(); 3];
        for (i, phy) in [400e6, 800e6, 200e6].into_iter().enumerate() {
            r[i].phy_rate_bps = Some(phy);
            r[i].mean_agg = 10.0;
        }
        s.on_reports(Ts::ZERO, &r);
        assert_eq!(s.driven(), 1);
        let x = s.rate(1).mbps;
        assert!((x - (20.0 + 22.0 / 3.0)).abs() < 1e-9, "K = 1/3");
        assert!((s.rate(0).mbps - x / 2.0).abs() < 1e-9);
        assert!((s.rate(2).mbps - x / 4.0).abs() < 1e-9);
        assert!(PiParams {
            min_mbps: 0.0,
            ..PiParams::default()
        }
        .check()
        .is_err());
    }
}

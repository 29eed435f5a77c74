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
//! A [`Bottleneck`] classifier looks at loss over the last p = 100 packets and the recent
//! aggregation: loss while μ_N stays well below N_ε means the queue is not the AP's (a backhaul
//! bottleneck). Then the loop freezes integration and sets the rate just below the measured
//! receive rate (draining the upstream queue); for the next 40 reports it rises by at most that
//! step per update, so it neither winds up nor keeps a queue upstream.
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
//! says: the loop steps as if the level were twice the target, until the delay falls.
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
    /// Loss over the last p packets above which a low μ_N means a bottleneck elsewhere.
    pub backhaul_loss: f64,
    /// Step (fraction of the rate) below the receive rate when backhaul-limited, and the largest
    /// rise per update for a while after.
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
            backhaul_loss: 0.01,
            backhaul_probe: 0.02,
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
        if !(0.0..=1.0).contains(&self.backhaul_loss) || !(0.0..=1.0).contains(&self.backhaul_probe) {
            return err(
                "backhaul_loss",
                self.backhaul_loss,
                "backhaul_loss and backhaul_probe in [0, 1]",
            );
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

/// Classifies the bottleneck from recent loss and aggregation: loss over the last p packets
/// (an exponentially weighted estimate, p = 100) above a threshold while μ_N is below half of
/// N_ε. It stays "backhaul" for `hold` reports after the last such report (recent state).
#[derive(Clone, Debug)]
pub struct BottleneckClassifier {
    threshold: f64,
    target: f64,
    loss_ewma: f64,
    hold: u32,
    left: u32,
}

impl BottleneckClassifier {
    /// With a loss threshold and the aggregation target N_ε.
    pub fn new(threshold: f64, target: f64) -> Self {
        BottleneckClassifier {
            threshold,
            target,
            loss_ewma: 0.0,
            hold: 6,
            left: 0,
        }
    }

    /// Update with a report; returns the class.
    pub fn on_report(&mut self, r: &AggReport) -> Bottleneck {
        // Loss over the last p = 100 packets: weight the interval's loss rate by how many of
        // the last 100 packets it holds.
        // In f64: a peer's counts near 2^64 cannot overflow a sum there.
        let n = r.packets as f64 + r.lost as f64;
        let w = (n / 100.0).min(1.0);
        self.loss_ewma = (1.0 - w) * self.loss_ewma + w * r.loss_rate;
        if self.loss_ewma > self.threshold && r.level() < self.target / 2.0 {
            self.left = self.hold;
        } else {
            self.left = self.left.saturating_sub(1);
        }
        self.class()
    }

    /// The current class.
    pub fn class(&self) -> Bottleneck {
        if self.left > 0 {
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
const RECENT_BACKHAUL: u32 = 40;

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
            bottleneck: BottleneckClassifier::new(p.backhaul_loss, p.target),
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

    /// The level to step by: the report's, or twice the target when its delay shows a standing
    /// queue (the queue guard).
    fn guard(&mut self, r: &AggReport) -> f64 {
        let level = r.level();
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
        match r.owd_p95_ms {
            Some(p95) if self.p.queue_guard_ms > 0.0 && base.is_finite() && p95 - base > self.p.queue_guard_ms => {
                self.guarded += 1;
                level.max(2.0 * self.p.target)
            }
            _ => level,
        }
    }

    /// K = K0 / n.
    pub fn gain(&self) -> f64 {
        self.p.k0 / self.p.stations as f64
    }

    /// The bottleneck class after the last report.
    pub fn bottleneck(&self) -> Bottleneck {
        self.bottleneck.class()
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
        match self.bottleneck.on_report(r) {
            Bottleneck::Wlan => {
                let before = self.x;
                let level = self.guard(r);
                self.last_level = level;
                self.step(level);
                // Shortly after a backhaul limit, rise only by the probe step: the aggregation
                // signal stays low behind such a bottleneck and would wind the rate up.
                if self.since_backhaul < RECENT_BACKHAUL {
                    self.since_backhaul += 1;
                    self.set(self.x.min(before * (1.0 + self.p.backhaul_probe)));
                }
            }
            Bottleneck::Backhaul => {
                self.last_level = f64::NAN;
                self.startup = false;
                // First report of an episode: drop just below what arrives, so the upstream
                // queue drains. Later ones (the class is held for a few reports): hold.
                if self.since_backhaul != 0 {
                    let rx = r.rx_rate_bps / 1e6;
                    let held = if rx > 0.0 && rx.is_finite() {
                        rx.min(self.x)
                    } else {
                        self.x
                    };
                    self.set(held * (1.0 - self.p.backhaul_probe));
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

    #[test]
    fn backhaul_losses_with_low_aggregation_freeze_the_loop() {
        let mut c = PiController::new(PiParams {
            initial_mbps: 300.0,
            ..PiParams::default()
        })
        .unwrap();
        // 200 Mb/s arrive, 1/3 lost upstream, aggregation low.
        c.on_report(Ts::ZERO, &report(3.0, 8000, 4000, 200.0));
        assert_eq!(c.bottleneck(), Bottleneck::Backhaul);
        assert!((c.rate().mbps - 196.0).abs() < 1e-9, "just below the receive rate");
        // Loss stops, aggregation stays low: the rate creeps up by 2 % at most per update.
        for _ in 0..10 {
            c.on_report(Ts::ZERO, &report(3.0, 8000, 0, 196.0));
        }
        assert!(c.rate().mbps <= 196.0 * 1.02f64.powi(10) + 1e-6, "{}", c.rate().mbps);
        // Losses at high aggregation are the WLAN's: the loop integrates.
        let mut w = PiController::new(PiParams::default()).unwrap();
        w.on_report(Ts::ZERO, &report(60.0, 8000, 400, 500.0));
        assert_eq!(w.bottleneck(), Bottleneck::Wlan);
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
        // Drained: back to integrating.
        c.on_report(Ts::ZERO, &at(40.5, 44.0));
        assert!((c.rate().mbps - 479.0).abs() < 1e-9, "{}", c.rate().mbps);
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

//! Senders side by side through one emulated downlink ([`Downlink`]): the kernel's TCP with a
//! chosen congestion control (`iperf3 -C cubic|bbr`, one flow per station), measured the same
//! way for every sender — goodput at the receiver, the time each packet spent in the AP (its
//! queue and the air: the one-way delay the downlink adds, on one clock), retransmissions, the
//! AP's true aggregation level and how late it released its bursts.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;

use super::downlink::Downlink;
use super::owd::Captures;
use super::{run, Error};
use crate::bottleneck::{Schedule, Switch};
use crate::metrics::LevelError;
use crate::wlan::live::{Released, TruthRow};
use crate::wlan::ValidWlanConfig;

/// Delay percentiles (ms).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct DelayMs {
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
}

impl DelayMs {
    /// Of sorted delays in ns (the rank [`Histogram::quantile`] takes); NaN for none.
    pub fn of_sorted_ns(ns: &[u64]) -> DelayMs {
        if ns.is_empty() {
            return DelayMs {
                mean: f64::NAN,
                p50: f64::NAN,
                p95: f64::NAN,
                p99: f64::NAN,
            };
        }
        let q = |p: f64| ns[(((ns.len() - 1) as f64 * p).round() as usize).min(ns.len() - 1)] as f64 / 1e6;
        DelayMs {
            mean: ns.iter().map(|&d| d as f64).sum::<f64>() / ns.len() as f64 / 1e6,
            p50: q(0.5),
            p95: q(0.95),
            p99: q(0.99),
        }
    }

    /// Of the values counted in `h` (its unit: `h.step`); NaN for none.
    pub fn of(h: &Histogram, scale: f64) -> DelayMs {
        DelayMs {
            mean: h.mean() * scale,
            p50: h.quantile(0.5) * scale,
            p95: h.quantile(0.95) * scale,
            p99: h.quantile(0.99) * scale,
        }
    }
}

/// Counts of values in equal bins from 0 (the last bin holds everything beyond): fixed memory,
/// no allocation per value — the AP's thread records into it for every packet it releases.
#[derive(Clone, Debug)]
pub struct Histogram {
    /// Bin width.
    pub step: f64,
    bins: Vec<u64>,
    sum: f64,
    n: u64,
}

impl Histogram {
    /// `bins` bins of width `step`.
    pub fn new(step: f64, bins: usize) -> Histogram {
        Histogram {
            step,
            bins: vec![0; bins.max(1)],
            sum: 0.0,
            n: 0,
        }
    }
    /// Count `x` (negative counts as 0).
    pub fn add(&mut self, x: f64) {
        let x = x.max(0.0);
        let last = self.bins.len() - 1;
        self.bins[((x / self.step) as usize).min(last)] += 1;
        self.sum += x;
        self.n += 1;
    }
    /// Values counted.
    pub fn len(&self) -> u64 {
        self.n
    }
    /// None counted.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }
    /// Mean (NaN for none).
    pub fn mean(&self) -> f64 {
        if self.n == 0 {
            f64::NAN
        } else {
            self.sum / self.n as f64
        }
    }
    /// The `q` quantile, as the middle of its bin (NaN for none).
    pub fn quantile(&self, q: f64) -> f64 {
        if self.n == 0 {
            return f64::NAN;
        }
        let rank = ((self.n - 1) as f64 * q.clamp(0.0, 1.0)).round() as u64;
        let mut seen = 0;
        for (i, &c) in self.bins.iter().enumerate() {
            seen += c;
            if seen > rank {
                return (i as f64 + 0.5) * self.step;
            }
        }
        (self.bins.len() as f64 - 0.5) * self.step
    }
}

/// One sender's row toward one station.
#[derive(Clone, Debug, Serialize)]
pub struct FlowRow {
    /// The sender (`tcp-cubic`, `tcp-bbr`).
    pub sender: String,
    /// Station.
    pub station: usize,
    /// Goodput at the receiver (Mb/s).
    pub goodput_mbps: f64,
    /// One-way delay per packet from the server's egress to the station's ingress (ms),
    /// matched between captures at both ends on one host clock ([`super::owd`]): a backhaul's
    /// queue, the AP's queue, the air time and both hosts' forwarding.
    pub owd_ms: DelayMs,
    /// Packets the server's capture saw leave for the station that its capture never saw
    /// arrive (lost on the way, or queued when the run ended).
    pub owd_unmatched: u64,
    /// Time in the AP per packet, as the AP measured it: its queue and air time (ms).
    pub ap_delay_ms: DelayMs,
    /// Retransmitted segments (TCP).
    pub retransmits: Option<u64>,
    /// Datagrams missing at the receiver (aggrate).
    pub lost: Option<u64>,
    /// Packets released to the station.
    pub packets: u64,
    /// The AP's true mean aggregation level (MPDUs per A-MPDU).
    pub true_level: f64,
    /// The receiver's estimated level — what the sender steers by — against the AP's truth per
    /// report interval (aggrate).
    pub estimated: Option<LevelError>,
    /// The receiver's frame count (packets ÷ predicted frame starts) against the same truth.
    pub frame_count: Option<LevelError>,
    /// Share of the A-MPDUs of all stations.
    pub ampdu_share: f64,
    /// Share of the air the AP spent on this station's A-MPDUs, of all stations': each A-MPDU's
    /// fixed exchange (EDCA, preamble, Block Ack) and its MPDUs at the station's PHY rate, from
    /// the standard's timing (`airtime::AirtimeParams`) for what the AP sent.
    pub airtime_share: f64,
}

/// One run of one sender: its rows and the AP's counters.
#[derive(Clone, Debug, Serialize)]
pub struct SenderRun {
    /// Per station.
    pub flows: Vec<FlowRow>,
    /// Packets the AP dropped: at a full queue, and by CoDel.
    pub ap_dropped: u64,
    /// Largest 99th percentile of the AP's release error over the run's intervals (µs): above
    /// [`RELEASE_P99_LIMIT_US`] the host, not the emulated WLAN, set the timing.
    pub release_p99_us: f64,
    /// The release error exceeded the limit.
    pub cpu_bound: bool,
    /// Share of the medium's busy time the stations' own transmissions took (the uplink: TCP
    /// ACKs, aggrate's feedback; 0 when the uplink does not cross the air).
    pub uplink_air_share: f64,
    /// Share of the AP's core (core 0) that the hypervisor took during the run (steal time,
    /// `/proc/stat`): on a virtual machine, the usual reason for a late burst.
    pub ap_core_steal: Option<f64>,
    /// Rate and delay over time, per station and [`SERIES_STEP`].
    pub series: Vec<SeriesPoint>,
    /// What the one-way-delay captures missed or could not match, a sentence each.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// Core 0's (steal, total) ticks from `/proc/stat`.
fn core0_ticks() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|l| l.starts_with("cpu0 "))?;
    let v: Vec<u64> = line.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal (guest ticks are within user).
    Some((*v.get(7)?, v.iter().take(8).sum()))
}

/// The steal share of core 0 between two readings.
fn steal_share(a: Option<(u64, u64)>, b: Option<(u64, u64)>) -> Option<f64> {
    let ((s0, t0), (s1, t1)) = (a?, b?);
    (t1 > t0).then(|| s1.saturating_sub(s0) as f64 / (t1 - t0) as f64)
}

/// Release error (p99) above which a run is flagged.
pub const RELEASE_P99_LIMIT_US: f64 = 100.0;

/// Delay bins: 10 µs up to 2 s.
const DELAY_BIN_MS: f64 = 0.01;
const DELAY_BINS: usize = 200_000;
/// Release error bins: 1 µs up to 100 ms.
const LATE_BINS: usize = 100_000;

/// A child process killed and reaped on drop.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// aggrate's senders: the shipped level, the AP's A-MPDU marks (the upper bound), the airtime
/// level alone, the frame count alone.
pub const AGGRATE_SENDERS: [&str; 4] = ["aggrate", "aggrate-mac", "aggrate-airtime", "aggrate-count"];

/// One entry of `testbed run --senders`: a kernel TCP congestion control (`cubic`, `bbr`, …) or
/// aggrate's sender (`aggrate`, `aggrate-mac`: with MAC-level marks, `aggrate-airtime` /
/// `aggrate-count`: steered by the airtime level / the frame count alone), and the AP's queue
/// after `@` (`fifo` or `codel`; none: the testbed's).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SenderSpec {
    /// The congestion control, or one of [`AGGRATE_SENDERS`].
    pub cc: String,
    /// The AP's queue for this run: `Some(true)` CoDel, `Some(false)` FIFO.
    pub codel: Option<bool>,
}

impl SenderSpec {
    /// Parse `spec`; a kernel congestion control is checked with [`check_tcp`].
    pub fn parse(spec: &str) -> Result<SenderSpec, Error> {
        let bad = |allowed| Error::Plan {
            flag: "--senders",
            value: spec.to_string(),
            allowed,
        };
        let (cc, codel) = match spec.split_once('@') {
            None => (spec, None),
            Some((cc, "fifo")) => (cc, Some(false)),
            Some((cc, "codel")) => (cc, Some(true)),
            Some(_) => return Err(bad("the AP's queue after @ is fifo or codel")),
        };
        if !cc.starts_with("aggrate") {
            check_tcp(cc)?;
        } else if !AGGRATE_SENDERS.contains(&cc) {
            return Err(bad(
                "aggrate's senders are aggrate, aggrate-mac, aggrate-airtime and aggrate-count",
            ));
        }
        Ok(SenderSpec {
            cc: cc.to_string(),
            codel,
        })
    }

    /// Whether it is aggrate's sender.
    pub fn is_aggrate(&self) -> bool {
        self.cc.starts_with("aggrate")
    }

    /// What aggrate's receivers steer by (`recv --steer`): `aggrate-airtime` the airtime level
    /// alone, `aggrate-count` the frame count alone; the others the model's level (or the
    /// AP's marks).
    pub fn steer(&self) -> Option<&'static str> {
        match self.cc.as_str() {
            "aggrate-airtime" => Some("airtime"),
            "aggrate-count" => Some("frame-count"),
            _ => None,
        }
    }

    /// Its name in the table: `tcp-cubic`, `aggrate @codel`, ….
    pub fn name(&self) -> String {
        let label = match self.codel {
            Some(true) => " @codel",
            Some(false) => " @fifo",
            None => "",
        };
        let tcp = if self.is_aggrate() { "" } else { "tcp-" };
        format!("{tcp}{}{label}", self.cc)
    }

    /// The folder of an aggrate run's logs: `aggrate`, `aggrate-codel`, ….
    pub fn dir_name(&self) -> String {
        match self.codel {
            Some(true) => format!("{}-codel", self.cc),
            Some(false) => format!("{}-fifo", self.cc),
            None => self.cc.clone(),
        }
    }
}

/// What to add to a warning about a late AP: the hypervisor's share of the AP's core (`steal`),
/// when it took any.
pub fn steal_note(steal: Option<f64>) -> String {
    match steal {
        Some(s) if s >= 0.005 => format!(
            " (the hypervisor took {:.1}% of the AP's core: a virtual machine's vCPU is not always running)",
            s * 100.0
        ),
        _ => String::new(),
    }
}

/// Check that `iperf3` runs and that the kernel offers congestion control `cc` (loading its
/// module if need be): a clear error naming what to install or do otherwise.
pub fn check_tcp(cc: &str) -> Result<(), Error> {
    if Command::new("iperf3").arg("--version").output().is_err() {
        return Err(Error::Missing {
            what: "iperf3".into(),
            fix: "install it: apt-get install iperf3".into(),
        });
    }
    let avail = |f: &str| std::fs::read_to_string(f).unwrap_or_default();
    let offered = |cc: &str| {
        avail("/proc/sys/net/ipv4/tcp_available_congestion_control")
            .split_whitespace()
            .any(|c| c == cc)
    };
    if !offered(cc) {
        let _ = Command::new("modprobe").arg(format!("tcp_{cc}")).output();
    }
    if !offered(cc) {
        return Err(Error::Missing {
            what: format!("TCP congestion control `{cc}`"),
            fix: format!(
                "the kernel offers: {} (load tcp_{cc} with modprobe, or choose one of those)",
                avail("/proc/sys/net/ipv4/tcp_available_congestion_control").trim()
            ),
        });
    }
    Ok(())
}

/// What the AP measured over one sender's run.
struct Measured {
    stats: crate::wlan::live::ApStats,
    truth: Vec<TruthRow>,
    /// Per station: time in the AP (ms).
    delays: Vec<Histogram>,
    /// Release error (µs).
    late: Histogram,
    steal: Option<f64>,
    /// Per station, per [`SERIES_STEP`]: (bytes released, sum of the delays in ms, packets).
    series: Vec<Vec<(u64, f64, u64)>>,
    /// Per station: PHY rate (b/s).
    phy_bps: Vec<f64>,
    /// One-way delays from the captures at both ends.
    owd: super::owd::Matched,
    /// The host's clock (`CLOCK_REALTIME`, ns) when the AP started: the series' time 0.
    t0_ns: u64,
}

/// The time step of a run's series (rate and delay over time).
pub const SERIES_STEP: Duration = Duration::from_millis(100);

/// What the AP's thread records for every packet it releases: fixed memory, no allocation per
/// packet.
struct Sink {
    delays: Vec<Histogram>,
    late: Histogram,
    series: Vec<Vec<(u64, f64, u64)>>,
}

impl Sink {
    /// For `n` stations and a run of `secs` (and the AP's 30 s of grace).
    fn new(n: usize, secs: u32) -> Sink {
        let steps = ((secs as u64 + 30) * 1000 / SERIES_STEP.as_millis() as u64) as usize;
        Sink {
            delays: vec![Histogram::new(DELAY_BIN_MS, DELAY_BINS); n],
            late: Histogram::new(1.0, LATE_BINS),
            series: vec![vec![(0, 0.0, 0); steps]; n],
        }
    }

    fn add(&mut self, r: &Released) {
        let ms = r.held.as_secs_f64() * 1e3;
        if let Some(h) = self.delays.get_mut(r.station) {
            h.add(ms);
        }
        if let Some(late) = r.late {
            self.late.add(late.as_secs_f64() * 1e6);
        }
        let k = ((r.arrived + r.held).as_nanos() / SERIES_STEP.as_nanos()) as usize;
        if let Some(b) = self.series.get_mut(r.station).and_then(|s| s.get_mut(k)) {
            b.0 += r.len as u64;
            b.1 += ms;
            b.2 += 1;
        }
    }
}

/// One station's rate and delay in one step of a run.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct SeriesPoint {
    /// Step start (s since the AP started).
    pub t_s: f64,
    /// Station.
    pub station: usize,
    /// IP bytes released to the station in the step (Mb/s).
    pub rate_mbps: f64,
    /// Mean time in the AP of those packets (ms; NaN for none).
    pub delay_ms: f64,
    /// Packets released.
    pub packets: u64,
    /// Mean one-way delay of the packets that reached the station in the step (ms, from the
    /// captures at both ends; NaN for none).
    pub owd_ms: f64,
    /// Packets that mean is of.
    pub owd_packets: u64,
}

impl Measured {
    /// Per station (A-MPDUs, MPDUs) over the run.
    fn per_station(&self) -> Vec<(u64, u64)> {
        let mut per_sta = vec![(0u64, 0u64); self.delays.len()];
        for r in &self.truth {
            if let Some(t) = per_sta.get_mut(r.station as usize) {
                t.0 += r.ampdus;
                t.1 += r.mpdus;
            }
        }
        per_sta
    }

    /// Per station: the air its A-MPDUs took (µs), from the standard's timing for the A-MPDUs,
    /// MPDUs and bytes the AP sent it (RTS/CTS as the AP uses it above the threshold).
    fn airtime_us(&self, per_sta: &[(u64, u64)]) -> Vec<f64> {
        let p = crate::airtime::AirtimeParams::default();
        per_sta
            .iter()
            .enumerate()
            .map(|(i, &(ampdus, mpdus))| {
                let bytes: u64 = self.series.get(i).map_or(0, |s| s.iter().map(|b| b.0).sum());
                let phy = self.phy_bps.get(i).copied().unwrap_or(0.0);
                if ampdus == 0 || mpdus == 0 || phy <= 0.0 {
                    return 0.0;
                }
                let ip_len = bytes as f64 / mpdus as f64;
                let n = mpdus as f64 / ampdus as f64;
                ampdus as f64 * p.exchange_us(n, ip_len, phy)
            })
            .collect()
    }

    /// The rows of sender `sender`, from each station's (goodput, retransmissions, lost,
    /// estimated level).
    fn rows(self, sender: &str, flows: Vec<FlowSide>) -> SenderRun {
        let per_sta = self.per_station();
        let total_ampdus: u64 = per_sta.iter().map(|t| t.0).sum();
        let airtime = self.airtime_us(&per_sta);
        let total_air: f64 = airtime.iter().sum();
        let release_p99_us = self.late.quantile(0.99);
        let step = SERIES_STEP.as_secs_f64();
        // Up to the last step with a packet.
        let last = self
            .series
            .iter()
            .filter_map(|s| s.iter().rposition(|b| b.2 > 0))
            .max()
            .map_or(0, |k| k + 1);
        // Per station and step: (sum of one-way delays in ns, packets), by arrival.
        let step_ns = SERIES_STEP.as_nanos() as u64;
        let owd_steps: Vec<Vec<(u128, u64)>> = self
            .series
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let mut v = vec![(0u128, 0u64); s.len()];
                for &(at, d) in self.owd.delays.get(i).map_or(&[][..], |d| &d[..]) {
                    let k = (at.saturating_sub(self.t0_ns) / step_ns) as usize;
                    if let Some(b) = v.get_mut(k) {
                        b.0 += u128::from(d);
                        b.1 += 1;
                    }
                }
                v
            })
            .collect();
        let series = self
            .series
            .iter()
            .zip(&owd_steps)
            .enumerate()
            .flat_map(|(i, (s, o))| {
                s[..last.min(s.len())]
                    .iter()
                    .zip(o)
                    .enumerate()
                    .map(move |(k, (b, o))| SeriesPoint {
                        t_s: k as f64 * step,
                        station: i,
                        rate_mbps: b.0 as f64 * 8.0 / step / 1e6,
                        delay_ms: if b.2 > 0 { b.1 / b.2 as f64 } else { f64::NAN },
                        packets: b.2,
                        owd_ms: if o.1 > 0 {
                            o.0 as f64 / o.1 as f64 / 1e6
                        } else {
                            f64::NAN
                        },
                        owd_packets: o.1,
                    })
            })
            .collect();
        let flows = flows
            .into_iter()
            .enumerate()
            .map(|(i, f)| FlowRow {
                sender: sender.to_string(),
                station: i,
                goodput_mbps: f.goodput_mbps,
                owd_ms: DelayMs::of_sorted_ns(&self.owd.sorted_delays(i)),
                owd_unmatched: self.owd.unmatched.get(i).copied().unwrap_or(0),
                ap_delay_ms: DelayMs::of(&self.delays[i], 1.0),
                retransmits: f.retransmits,
                lost: f.lost,
                packets: per_sta[i].1,
                true_level: per_sta[i].1 as f64 / per_sta[i].0.max(1) as f64,
                estimated: f.estimated,
                frame_count: f.frame_count,
                ampdu_share: per_sta[i].0 as f64 / total_ampdus.max(1) as f64,
                airtime_share: if total_air > 0.0 {
                    airtime[i] / total_air
                } else {
                    f64::NAN
                },
            })
            .collect();
        SenderRun {
            flows,
            ap_dropped: self.stats.dropped + self.stats.dropped_aqm,
            release_p99_us,
            cpu_bound: release_p99_us > RELEASE_P99_LIMIT_US,
            uplink_air_share: if self.stats.busy_ns > 0 {
                self.stats.uplink_airtime_ns as f64 / self.stats.busy_ns as f64
            } else {
                0.0
            },
            ap_core_steal: self.steal,
            series,
            notes: self.owd.notes.clone(),
        }
    }
}

/// What a sender's own tools say about one station's flow.
#[derive(Clone, Debug, Default)]
struct FlowSide {
    goodput_mbps: f64,
    retransmits: Option<u64>,
    lost: Option<u64>,
    estimated: Option<LevelError>,
    frame_count: Option<LevelError>,
}

/// Serve the downlink (truth per `interval`) while `body` runs the sender; what the AP measured.
fn measure<T>(
    d: &Downlink,
    wlan: &ValidWlanConfig,
    seed: u64,
    secs: u32,
    interval: Duration,
    body: impl FnOnce() -> Result<T, Error>,
) -> Result<(T, Measured), Error> {
    let sink = Arc::new(Mutex::new(Sink::new(d.station_ip.len(), secs)));
    let into = sink.clone();
    let on_release = Box::new(move |r: &Released| {
        if let Ok(mut s) = into.lock() {
            s.add(r);
        }
    });
    let stop = Arc::new(AtomicBool::new(false));
    let limit = Duration::from_secs(secs as u64 + 30);
    let captures = Captures::start(d)?;
    let ticks0 = core0_ticks();
    let t0_ns = realtime_ns();
    let ap = d.serve(wlan.clone(), seed, limit, interval, stop.clone(), on_release)?;
    let result = body();
    let steal = steal_share(ticks0, core0_ticks());
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (stats, truth) = ap.join().map_err(|_| Error::Io {
        what: "the AP thread",
        source: std::io::Error::other("panicked"),
    })??;
    let out = result?;
    let owd = captures.finish()?;
    let sink = std::mem::replace(
        &mut *sink.lock().map_err(|_| Error::Io {
            what: "the AP's delays",
            source: std::io::Error::other("poisoned"),
        })?,
        Sink::new(0, 0),
    );
    Ok((
        out,
        Measured {
            stats,
            truth,
            delays: sink.delays,
            late: sink.late,
            steal,
            series: sink.series,
            phy_bps: (0..d.station_ip.len())
                .map(|i| wlan.modes().get(i).and_then(|m| m.rate_bps()).unwrap_or(0) as f64)
                .collect(),
            owd,
            t0_ns,
        },
    ))
}

/// Run kernel TCP with congestion control `cc` from the server to every station (one iperf3
/// flow each) for `secs`, through the AP emulating `wlan`.
pub fn tcp_run(d: &Downlink, wlan: &ValidWlanConfig, cc: &str, secs: u32, seed: u64) -> Result<SenderRun, Error> {
    check_tcp(cc)?;
    let (flows, m) = measure(d, wlan, seed, secs, Duration::from_millis(100), || {
        tcp_flows(d, cc, secs)
    })?;
    let flows = flows
        .into_iter()
        .map(|(goodput_mbps, retransmits)| FlowSide {
            goodput_mbps,
            retransmits,
            ..FlowSide::default()
        })
        .collect();
    Ok(m.rows(&format!("tcp-{cc}"), flows))
}

/// What an aggrate run is: aggrate's sender in the server's namespace and one `aggrate recv` per
/// station (the shipped estimator on the station's kernel receive times, told its PHY rate), run
/// from the executable `exe` with a fresh random key for `secs`, reports every `interval`; `dir`
/// keeps the receivers' logs (`recv_K.csv`) and the AP's truth (`ap_truth.csv`). Besides
/// sending, optionally a backhaul that switches on a schedule and the sender's bottleneck
/// classifier weights.
#[derive(Clone, Copy, Debug)]
pub struct AggrateRun<'a> {
    /// The aggrate executable.
    pub exe: &'a Path,
    /// Seconds.
    pub secs: u32,
    /// Report interval.
    pub interval: Duration,
    /// Seed of the AP's emulator.
    pub seed: u64,
    /// Where the logs go.
    pub dir: &'a Path,
    /// The backhaul switches on this schedule (off: `tc tbf` at 10 Gb/s, so that what is queued
    /// when it goes drains instead of being dropped), and is removed after.
    pub schedule: Option<&'a Schedule>,
    /// `send --bottleneck-weights`.
    pub weights: Option<&'a Path>,
    /// `recv --steer` (`airtime`, `frame-count`; none: the model's level).
    pub steer: Option<&'a str>,
}

impl<'a> AggrateRun<'a> {
    /// A plain run: no backhaul, the shipped weights.
    pub fn new(exe: &'a Path, secs: u32, interval: Duration, seed: u64, dir: &'a Path) -> AggrateRun<'a> {
        AggrateRun {
            exe,
            secs,
            interval,
            seed,
            dir,
            schedule: None,
            weights: None,
            steer: None,
        }
    }
}

/// The backhaul's switches as they happened.
#[derive(Clone, Debug)]
pub struct Switched {
    /// The host's realtime clock (ns) at the schedule's time 0.
    pub t0_ns: u64,
    /// Each switch at the time `tc` had made it (s from `t0_ns`).
    pub applied: Schedule,
}

/// `CLOCK_REALTIME` now (ns): the clock `send --log` writes.
fn realtime_ns() -> u64 {
    crate::transport::io::realtime().as_nanos()
}

/// Switch the backhaul on `sched` until it ends or `done` is set.
fn switch_backhaul(d: &Downlink, sched: &Schedule, done: &AtomicBool) -> Result<Switched, Error> {
    let t0_ns = realtime_ns();
    let start = std::time::Instant::now();
    let mut applied = Schedule::default();
    for w in &sched.switches {
        let due = start + Duration::from_secs_f64(w.at_s);
        while std::time::Instant::now() < due {
            if done.load(std::sync::atomic::Ordering::Relaxed) {
                return Ok(Switched { t0_ns, applied });
            }
            std::thread::sleep(
                due.saturating_duration_since(std::time::Instant::now())
                    .min(Duration::from_millis(10)),
            );
        }
        d.set_backhaul(Some(w.mbps.unwrap_or(10_000.0)))?;
        applied.switches.push(Switch {
            at_s: (realtime_ns() as f64 - t0_ns as f64) / 1e9,
            mbps: w.mbps,
        });
    }
    Ok(Switched { t0_ns, applied })
}

/// Run `run` through the AP emulating `wlan`: the receivers' estimated level joined with the
/// AP's truth per interval, and with a schedule the backhaul's switches as they happened.
pub fn aggrate_run(
    d: &Downlink,
    wlan: &ValidWlanConfig,
    run: &AggrateRun,
) -> Result<(SenderRun, Option<Switched>), Error> {
    let AggrateRun {
        exe,
        secs,
        interval,
        seed,
        dir,
        ..
    } = *run;
    if !exe.is_file() {
        return Err(Error::Missing {
            what: format!("the aggrate executable {}", exe.display()),
            fix: "build it (cargo build) or give its path".into(),
        });
    }
    std::fs::create_dir_all(dir).map_err(super::io("creating the run's directory"))?;
    let key = random_key_hex()?;
    let logs: Vec<PathBuf> = (0..d.station_ip.len())
        .map(|i| dir.join(format!("recv_{i}.csv")))
        .collect();
    let ((sent, switched), m) = measure(d, wlan, seed, secs, interval, || {
        let done = AtomicBool::new(false);
        let done = &done;
        std::thread::scope(|s| {
            let switcher = run
                .schedule
                .map(|sched| s.spawn(move || switch_backhaul(d, sched, done)));
            let sent = aggrate_flows(d, wlan, run, &key, &logs);
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            let switched = switcher
                .map(|h| {
                    h.join().map_err(|_| Error::Io {
                        what: "the backhaul's switch thread",
                        source: std::io::Error::other("panicked"),
                    })?
                })
                .transpose();
            if run.schedule.is_some() {
                d.set_backhaul(None)?;
            }
            Ok((sent?, switched?))
        })
    })?;
    let truth_path = dir.join("ap_truth.csv");
    let mut text = format!("{}\n", crate::livelog::TRUTH_HEADER);
    for r in &m.truth {
        text += &crate::livelog::truth_line(r);
        text.push('\n');
    }
    std::fs::write(&truth_path, text).map_err(super::io("writing the AP's truth"))?;
    let mut all = Vec::new();
    for (i, log) in logs.iter().enumerate() {
        all.push(crate::livelog::read_reports(log).map_err(|e| Error::Command {
            cmd: format!("aggrate recv (station {i})"),
            status: "no readable report log".into(),
            stderr: e.to_string(),
        })?);
    }
    let phy: Vec<f64> = (0..logs.len())
        .map(|i| wlan.modes()[i].rate_bps().unwrap_or(0) as f64)
        .collect();
    let steered = steered_levels(&all, &phy);
    let mut flows = Vec::new();
    for (i, (log, reports)) in logs.iter().zip(&steered).enumerate() {
        // From the first report with data to the last (the receivers outlive the sender by a
        // second or two), the ramp included as TCP's slow start is in iperf3's figure.
        let live: Vec<_> = reports.iter().filter(|r| r.packets > 0).collect();
        let span_s = match (live.first(), live.last()) {
            (Some(a), Some(b)) if b.end_ns > a.start_ns => (b.end_ns - a.start_ns) as f64 / 1e9,
            _ => f64::NAN,
        };
        let packets: u64 = live.iter().map(|r| r.packets).sum();
        let joined = crate::livelog::join(&m.truth, reports, i as u16, 2, (&truth_path, log)).ok();
        flows.push(FlowSide {
            goodput_mbps: packets as f64 * sent.payload as f64 * 8.0 / span_s / 1e6,
            retransmits: None,
            lost: Some(reports.iter().map(|r| r.lost).sum()),
            estimated: joined.as_ref().and_then(|j| j.level),
            frame_count: joined.and_then(|j| j.frame_count),
        });
    }
    Ok((
        m.rows(if d.ampdu_marks() { "aggrate-mac" } else { "aggrate" }, flows),
        switched,
    ))
}

/// The level the sender steered each station by, interval by interval, in place of each
/// receiver's own: the sender's [`AirtimeSplit::level_of`] on every receiver's report of that
/// interval — with several stations the larger of the receiver's level and the cell's airtime
/// relation, which no one receiver sees (its own level counts only its own station's airtime).
/// Intervals some receiver did not report keep the receiver's level. One station: unchanged.
///
/// [`AirtimeSplit::level_of`]: crate::control::AirtimeSplit::level_of
fn steered_levels(logs: &[Vec<crate::livelog::ReportRow>], phy_bps: &[f64]) -> Vec<Vec<crate::livelog::ReportRow>> {
    use crate::control::{AirtimeSplit, Cell, PiParams};
    use crate::runtime::AggReport;
    let Ok(mut split) = AirtimeSplit::new(PiParams::default(), logs.len()) else {
        return logs.to_vec();
    };
    split.set_cell(Some(Cell {
        airtime: crate::airtime::AirtimeParams::default(),
        ip_len: (AGGRATE_SIZE + 28) as f64,
    }));
    let report = |r: &crate::livelog::ReportRow, phy: f64| AggReport {
        start: crate::time::Ts(r.start_ns),
        end: crate::time::Ts(r.end_ns),
        packets: r.packets,
        mean_agg: r.frame_count,
        corrected_agg: Some(r.level),
        phy_rate_bps: Some(phy),
        ..AggReport::default()
    };
    let mut out = logs.to_vec();
    for (i, rows) in out.iter_mut().enumerate() {
        for row in rows.iter_mut() {
            let same: Option<Vec<AggReport>> = logs
                .iter()
                .zip(phy_bps)
                .map(|(l, &phy)| l.iter().find(|r| r.start_ns == row.start_ns).map(|r| report(r, phy)))
                .collect();
            if let Some(reports) = same.filter(|_| row.packets > 0) {
                row.level = split.level_of(&reports, i);
            }
        }
    }
    out
}

/// What the aggrate sender was set to.
struct Sent {
    /// Payload bytes per datagram (what goodput counts).
    payload: usize,
}

/// Datagram size `aggrate send` is given (one MPDU of a 1500-byte MTU).
const AGGRATE_SIZE: usize = 1472;

/// Run `aggrate recv` in every station's namespace and `aggrate send` in the server's until it
/// ends (`run.secs`); the receivers stop a second later.
fn aggrate_flows(
    d: &Downlink,
    wlan: &ValidWlanConfig,
    run: &AggrateRun,
    key: &str,
    logs: &[PathBuf],
) -> Result<Sent, Error> {
    let AggrateRun {
        exe,
        secs,
        interval,
        weights,
        steer,
        ..
    } = *run;
    let ms = interval.as_millis().to_string();
    let mut receivers = Vec::new();
    for (i, ns) in d.station_ns.iter().enumerate() {
        let phy = wlan.modes()[i].rate_bps().unwrap_or(0) as f64 / 1e6;
        let mut recv = d.command(ns, &exe.to_string_lossy());
        recv.env("AGGRATE_KEY", key)
            .args(["-q", "recv", "--listen", "0.0.0.0:9000", "--phy-mbps"])
            .arg(format!("{phy:.1}"))
            .args(d.ampdu_marks().then_some("--ap-marks"))
            .args(steer.map(|s| ["--steer", s]).into_iter().flatten())
            .args(["--interval-ms", &ms, "--duration"])
            .arg((secs + 2).to_string())
            .arg("--log")
            .arg(&logs[i])
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        // With other transmitters on the channel, the receivers read its survey (as a station
        // reads its driver's): the airtime level counts the air others take.
        if wlan.config().contenders > 0 {
            recv.arg("--survey-file").arg(&d.survey_file.0);
        }
        let child = recv.spawn().map_err(super::io("starting aggrate recv"))?;
        receivers.push(Reaped(child));
    }
    wait_udp(d, 9000)?;
    // Beside the receivers' logs (one per station, so there is a first).
    let send_log = logs.first().map(|l| l.with_file_name("send.csv")).unwrap_or_default();
    let to: Vec<String> = d.station_ip.iter().map(|ip| format!("{ip}:9000")).collect();
    let sender = d
        .command(&d.server_ns, &exe.to_string_lossy())
        .env("AGGRATE_KEY", key)
        .args(["-q", "send", "--to", &to.join(","), "--size"])
        .arg(AGGRATE_SIZE.to_string())
        .arg("--log")
        .arg(send_log)
        .args(
            weights
                .map(|w| [std::ffi::OsStr::new("--bottleneck-weights"), w.as_os_str()])
                .into_iter()
                .flatten(),
        )
        .args(["--interval-ms", &ms, "--duration"])
        .arg(secs.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(super::io("running aggrate send"))?;
    if !sender.status.success() {
        return Err(Error::Command {
            cmd: "aggrate send".into(),
            status: sender.status.to_string(),
            stderr: String::from_utf8_lossy(&sender.stderr).into_owned(),
        });
    }
    for (i, mut r) in receivers.into_iter().enumerate() {
        let status = wait_bounded(&mut r.0, Duration::from_secs(10));
        if !status.is_some_and(|s| s.success()) {
            let mut err = String::new();
            if let Some(e) = r.0.stderr.as_mut() {
                let _ = e.read_to_string(&mut err);
            }
            return Err(Error::Command {
                cmd: format!("aggrate recv (station {i})"),
                status: status.map_or("did not end".into(), |s| s.to_string()),
                stderr: err,
            });
        }
    }
    Ok(Sent {
        payload: AGGRATE_SIZE - crate::transport::wire::DATA_HEADER_LEN,
    })
}

/// Wait at most `limit` for `c` to end.
fn wait_bounded(c: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let t0 = std::time::Instant::now();
    while t0.elapsed() < limit {
        if let Ok(Some(s)) = c.try_wait() {
            return Some(s);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// Wait (at most 5 s) until something listens on UDP `port` in every station's namespace.
fn wait_udp(d: &Downlink, port: u16) -> Result<(), Error> {
    for ns in &d.station_ns {
        wait_socket(ns, "-Hlun", port)?;
    }
    Ok(())
}

/// A random pre-shared key, hex, from the kernel's generator.
fn random_key_hex() -> Result<String, Error> {
    let mut k = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut k))
        .map_err(super::io("reading /dev/urandom"))?;
    Ok(k.iter().map(|b| format!("{b:02x}")).collect())
}

/// One iperf3 flow per station for `secs`; per station (goodput Mb/s, retransmissions).
fn tcp_flows(d: &Downlink, cc: &str, secs: u32) -> Result<Vec<(f64, Option<u64>)>, Error> {
    let mut servers = Vec::new();
    for ns in &d.station_ns {
        let child = d
            .command(ns, "iperf3")
            .args(["-s", "-p", "5201"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(super::io("starting iperf3 -s"))?;
        servers.push(Reaped(child));
        wait_socket(ns, "-Hltn", 5201)?;
    }
    let mut clients = Vec::new();
    for ip in &d.station_ip {
        clients.push(client(d, &ip.to_string(), cc, secs)?);
    }
    let mut out = Vec::new();
    for (i, mut c) in clients.into_iter().enumerate() {
        // Until the client ends (iperf3 stops itself after `secs`, or fails at once).
        let mut text = String::new();
        if let Some(o) = c.0.stdout.as_mut() {
            let _ = o.read_to_string(&mut text);
        }
        let j: serde_json::Value = serde_json::from_str(&text).map_err(|e| Error::Command {
            cmd: format!("iperf3 -c {} -C {cc}", d.station_ip[i]),
            status: "unreadable output".into(),
            stderr: e.to_string(),
        })?;
        if let Some(e) = j["error"].as_str() {
            return Err(Error::Command {
                cmd: format!("iperf3 -c {} -C {cc}", d.station_ip[i]),
                status: "failed".into(),
                stderr: e.to_string(),
            });
        }
        let end = &j["end"];
        out.push((
            end["sum_received"]["bits_per_second"].as_f64().unwrap_or(0.0) / 1e6,
            end["sum_sent"]["retransmits"].as_u64(),
        ));
    }
    drop(servers);
    Ok(out)
}

/// Start an iperf3 client in the server's namespace toward `ip` (whose server listens).
fn client(d: &Downlink, ip: &str, cc: &str, secs: u32) -> Result<Reaped, Error> {
    let child = d
        .command(&d.server_ns, "iperf3")
        .args(["-c", ip, "-p", "5201", "-J", "-C", cc, "-t"])
        .arg(secs.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(super::io("starting iperf3 -c"))?;
    Ok(Reaped(child))
}

/// Wait (at most 5 s) until something listens in `ns` on `port` (`ss` flags: TCP `-Hltn`, UDP
/// `-Hlun`).
fn wait_socket(ns: &str, flags: &str, port: u16) -> Result<(), Error> {
    let filter = format!("sport = :{port}");
    for _ in 0..100 {
        if run("ip", &["netns", "exec", ns, "ss", flags, &filter]).is_ok_and(|o| !o.trim().is_empty()) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(Error::Command {
        cmd: format!("ip netns exec {ns} ss {flags} '{filter}'"),
        status: format!("nothing listening on port {port} after 5 s"),
        stderr: String::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sender_specs_name_their_queue_and_refuse_others() {
        let a = SenderSpec::parse("aggrate-mac@codel").unwrap();
        assert_eq!(
            (a.cc.as_str(), a.codel, a.is_aggrate()),
            ("aggrate-mac", Some(true), true)
        );
        assert_eq!(
            (a.name(), a.dir_name()),
            ("aggrate-mac @codel".into(), "aggrate-mac-codel".into())
        );
        assert_eq!(SenderSpec::parse("aggrate").unwrap().name(), "aggrate");
        let steer = |s: &str| SenderSpec::parse(s).unwrap().steer();
        assert_eq!(
            [
                steer("aggrate"),
                steer("aggrate-mac"),
                steer("aggrate-airtime"),
                steer("aggrate-count@codel")
            ],
            [None, None, Some("airtime"), Some("frame-count")]
        );
        for (spec, says) in [
            ("aggrate@red", "fifo or codel"),
            ("aggrate-x", "aggrate-airtime and aggrate-count"),
        ] {
            let e = SenderSpec::parse(spec).unwrap_err().to_string();
            assert!(e.contains("--senders") && e.contains(spec) && e.contains(says), "{e}");
        }
    }

    #[test]
    fn delay_percentiles_are_of_the_counted_values() {
        let mut h = Histogram::new(1.0, 200);
        for x in (1..=100).rev() {
            h.add(x as f64);
        }
        h.add(1e9);
        let d = DelayMs::of(&h, 2.0);
        // Bin middles, scaled; the outlier lands in the last bin.
        assert_eq!((d.p50, d.p95, d.p99), (103.0, 193.0, 201.0));
        assert_eq!(h.quantile(1.0), 199.5);
        assert!(DelayMs::of(&Histogram::new(1.0, 10), 1.0).p99.is_nan());
    }

    #[test]
    fn steal_is_a_share_of_the_ticks_between_readings() {
        assert_eq!(steal_share(Some((10, 1000)), Some((60, 2000))), Some(0.05));
        assert_eq!(steal_share(Some((10, 1000)), Some((10, 1000))), None);
        assert_eq!(steal_share(None, Some((10, 1000))), None);
        // This machine's /proc/stat reads.
        let (steal, total) = core0_ticks().unwrap();
        assert!(steal <= total && total > 0);
    }
}

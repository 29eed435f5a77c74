//! Closed loop on a virtual clock: senders → (backhaul) → [`WlanSim`] → kernel-timestamp noise →
//! per-station [`OnlineEstimator`] → reports (after a feedback delay) → rate control.
//!
//! Fully deterministic for a seed: every random stream is derived from it, and events at equal
//! times are taken in a fixed order. Two senders share the path, both driven by a
//! [`Controller`](crate::control::Controller) (`control`): the aggregation-target loop ([`SenderKind::Aggrate`]:
//! [`AirtimeSplit`](crate::control::AirtimeSplit) over
//! [`PiController`](crate::control::PiController)) and a loss-based baseline
//! ([`SenderKind::Cubic`]: a Cubic window per station, RFC 8312 growth, β = 0.7, acknowledged per
//! packet after the feedback delay), to compare rate and delay on the same emulated WLAN.
//!
//! The aggregation-target sender is the transport itself: its sans-IO [`Sender`] (which owns the
//! `AirtimeSplit`) paces the stations and one [`Receiver`] per station runs the estimator,
//! exchanging real datagrams (session handshake, HMAC tags, feedback reports) — data through the
//! emulated WLAN, hellos and feedback over the feedback delay. The Cubic baseline paces through
//! the same [`Pacer`](crate::control::Pacer) as the `Sender` (its window counts packets in flight
//! there), so the two differ only in their controller; it has no wire format: its
//! acknowledgements are events.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use crate::control::PiParams;
use crate::features::FeatureSpec;
use crate::model::ModelFile;
use crate::runtime::{AggReport, Mode, OnlineEstimator, RxPacket};
use crate::time::Ts;
use crate::train::online::{OnlineCalibrator, Summary};
use crate::transport::{reliable, wire, Receiver, Sender, SenderStats};
use crate::wlan::noise::{model_for, NoiseModel, Ppdu, ReceivePath};
use crate::wlan::traffic::{Backhaul, BackhaulConfig};
use crate::wlan::{Packet, StaId, WlanConfig, WlanSim};

mod cubic;
pub mod learned_level;
use cubic::Baseline;

/// Which sender.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SenderKind {
    /// Holds the aggregation level at N_ε (the study's controller).
    Aggrate,
    /// A loss-based Cubic-like window (baseline).
    Cubic,
}

/// Where the receivers' frame starts come from.
#[derive(Clone, Debug)]
pub enum EstimatorKind {
    /// MAC timestamps (ground truth).
    Mac,
    /// A trained model on the (noisy) kernel timestamps.
    Model(Box<ModelFile>),
}

/// A closed-loop run.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// The WLAN (its `stations` are the receivers).
    pub wlan: WlanConfig,
    /// The stations' receive path (`None`: host time = MAC time).
    pub noise: Option<ReceivePath>,
    /// Frame-start source.
    pub estimator: EstimatorKind,
    /// Controller parameters (`stations` is set from the WLAN).
    pub control: PiParams,
    /// Sender.
    pub sender: SenderKind,
    /// Optional bottleneck link before the AP.
    pub backhaul: Option<BackhaulConfig>,
    /// The backhaul's rate switches on and off on this schedule (its queue and delay from
    /// `backhaul`, or 1,000 packets and none); the run then keeps the sender's bottleneck
    /// classifier's rows ([`SimResult::bottleneck`]).
    pub backhaul_schedule: Option<crate::bottleneck::Schedule>,
    /// Weights of the sender's bottleneck classifier (`None`: the shipped ones).
    pub bottleneck_weights: Option<crate::control::BottleneckWeights>,
    /// Report interval Δ.
    pub interval: Duration,
    /// Receiver → sender delay of reports and acknowledgements.
    pub feedback_delay: Duration,
    /// IP length of every packet.
    pub packet_len: u16,
    /// Virtual seconds.
    pub duration_s: f64,
    /// Seed of every random stream.
    pub seed: u64,
    /// Each receiver sets its model's operating point from its own receive times while it runs
    /// ([`OnlineCalibrator`]: the shipped model's embedded bank of measured receivers, as
    /// `recv --self-calibrate`); only with [`EstimatorKind::Model`] and the aggregation-target
    /// sender. `Some` with how near a window's nearest training receiver must be for its
    /// threshold to be taken (by each station's PHY rate, or fixed).
    pub self_calibrate: Option<crate::train::online::DistanceLimit>,
    /// What the aggregation-target sender steers by.
    pub steer: Steer,
    /// Each receiver reads a channel survey every report interval (as `iw dev … survey dump`
    /// gives: the medium's busy time less its own station's exchanges) and its airtime level
    /// counts that share of the channel as taken by others (`recv --others-share`).
    pub survey: bool,
    /// Each station's data carries a reliable stream ([`crate::transport::reliable`]: an
    /// endless seeded byte stream, delivered in order and checked byte by byte), at the rate the
    /// controller sets; only with the aggregation-target sender. The result's
    /// [`SimResult::bulk`] says what it delivered and spent.
    pub bulk: bool,
}

/// What the aggregation-target sender steers by.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Steer {
    /// The receivers' level as they report it ([`AggReport::level`]): the learned level when
    /// the model file carries one ([`crate::level`]), else the airtime level; the default.
    #[default]
    Level,
    /// The level from airtime alone (each receiver's, and the cell's with several stations),
    /// where the PHY rate is known ([`crate::runtime::LevelConfig`]), even when the model
    /// carries a learned level.
    Airtime,
    /// The receivers' frame counts alone (packets ÷ predicted starts): the study's estimator.
    FrameCount,
}

impl Steer {
    /// Set a receiver's estimator to report what this steers by (its report's level):
    /// the frame count alone (no airtime relation; a slot-SVR model still corrects it), the
    /// airtime level alone (no learned level), or as it is. `sim`'s stations and `recv --steer` both go through here.
    pub fn apply(self, est: &mut OnlineEstimator) -> Result<(), crate::runtime::Error> {
        match self {
            Steer::FrameCount => est.set_level_config(crate::runtime::LevelConfig {
                airtime: None,
                ..est.level_config().clone()
            }),
            Steer::Airtime => est.set_level_model(None),
            Steer::Level => Ok(()),
        }
    }
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            wlan: WlanConfig::default(),
            noise: None,
            estimator: EstimatorKind::Mac,
            control: PiParams::default(),
            sender: SenderKind::Aggrate,
            backhaul: None,
            backhaul_schedule: None,
            bottleneck_weights: None,
            interval: Duration::from_millis(500),
            feedback_delay: Duration::from_millis(2),
            packet_len: 1500,
            duration_s: 60.0,
            seed: 1,
            self_calibrate: None,
            steer: Steer::Level,
            survey: false,
            bulk: false,
        }
    }
}

/// Errors of a run's configuration.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// WLAN settings.
    #[error(transparent)]
    Wlan(#[from] crate::wlan::ConfigError),
    /// Controller settings.
    #[error(transparent)]
    Control(#[from] crate::control::ParamError),
    /// Estimator settings.
    #[error(transparent)]
    Estimator(#[from] crate::runtime::Error),
    /// Noise settings.
    #[error(transparent)]
    Noise(#[from] crate::wlan::noise::NoiseError),
    /// Online self-calibration cannot run with this model.
    #[error("self-calibration: {0}")]
    SelfCalibrate(#[from] crate::train::online::Error),
    /// A run setting out of range.
    #[error("{field} = {value}: {allowed}")]
    Bad {
        /// The setting.
        field: &'static str,
        /// Its value.
        value: f64,
        /// What is allowed.
        allowed: &'static str,
    },
}

/// One sample of the time series (per station per report tick).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Sample {
    /// Virtual time (s).
    pub t: f64,
    /// Station.
    pub sta: u16,
    /// Send rate (Mb/s).
    pub rate_mbps: f64,
    /// μ_N the sender last heard: the level it steers by ([`AggReport::level`]).
    pub mean_agg: f64,
    /// The same report's frame count: packets ÷ frames the receiver closed.
    pub count_agg: f64,
    /// The same report's airtime level (0 without one).
    pub airtime_agg: f64,
    /// The same report's features for the learned level.
    #[serde(skip)]
    pub features: Option<crate::level::LevelFeatures>,
    /// Truth: the share of the interval the channel was busy with anything but this station's
    /// own exchanges (others' traffic, other stations, collisions), as an ideal survey reads it.
    pub others_share: f64,
    /// True μ_N of the interval the report covers (MPDUs ÷ A-MPDUs by MAC time; 0 without).
    pub true_agg: f64,
    /// True A-MPDUs in it.
    pub true_ampdus: u64,
    /// Mean one-way delay (ms) in the last report.
    pub delay_ms: f64,
    /// AP queue (packets) at the tick.
    pub queue: usize,
    /// Packets lost (cumulative).
    pub lost: u64,
}

/// One station over the second half of the run.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct StationResult {
    /// VHT MCS.
    pub mcs: u8,
    /// PHY rate (Mb/s).
    pub phy_mbps: f64,
    /// Received rate (Mb/s).
    pub rate_mbps: f64,
    /// True mean A-MPDU size (MPDUs per A-MPDU).
    pub mean_agg: f64,
    /// Mean μ_N the receiver's estimator reported (what the sender holds at the target; equal
    /// to `mean_agg` for an exact estimator).
    pub estimated_agg: f64,
    /// The level the sender steered by against the truth, per report interval (second half).
    pub level_error: Option<crate::metrics::LevelError>,
    /// The receiver's frame count (packets ÷ predicted starts) against the truth, per interval.
    pub count_error: Option<crate::metrics::LevelError>,
    /// Mean one-way delay, send to kernel receive (ms).
    pub delay_ms_mean: f64,
    /// 95th percentile one-way delay (ms).
    pub delay_ms_p95: f64,
    /// Share of the downlink airtime.
    pub airtime_share: f64,
    /// Packets lost (AP queue, retries, backhaul).
    pub lost: u64,
}

/// A run's result.
#[derive(Clone, Debug, Serialize)]
pub struct SimResult {
    /// Sender kind.
    pub sender: SenderKind,
    /// Per station, second half of the run.
    pub stations: Vec<StationResult>,
    /// Sum of received rates (Mb/s), second half.
    pub total_mbps: f64,
    /// The transport's counters (aggregation-target sender: hellos, sessions, data sent,
    /// feedback accepted and refused); none for the Cubic baseline.
    pub transport: Option<SenderStats>,
    /// Data the receivers refused (bad tag, no session), summed over stations.
    pub receiver_dropped: u64,
    /// Online self-calibration ([`SimConfig::self_calibrate`]), per station: what it did.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub self_calibration: Vec<Summary>,
    /// Time series.
    #[serde(skip)]
    pub series: Vec<Sample>,
    /// With a backhaul schedule: every report the sender's bottleneck classifier took after
    /// start-up, labelled from the schedule.
    #[serde(skip)]
    pub bottleneck: Vec<crate::bottleneck::Row>,
    /// With [`SimConfig::bulk`], per station: the reliable stream's delivery.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub bulk: Vec<BulkResult>,
}

/// A station's reliable stream in a run ([`SimConfig::bulk`]).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct BulkResult {
    /// Stream bytes delivered in order over the second half, as a rate (Mb/s).
    pub goodput_mbps: f64,
    /// Stream bytes delivered in all.
    pub delivered_bytes: u64,
    /// Every delivered byte was the one sent there.
    pub exact: bool,
    /// Data-frame and parity bytes sent ÷ new stream bytes sent − 1 (repairs and parity).
    pub overhead: f64,
    /// The sender's counters.
    pub sender: crate::transport::reliable::BulkSenderStats,
}

/// Byte `pos` of a station's endless stream in [`SimConfig::bulk`] runs (one multiply per
/// byte: checking 500 Mb/s of it costs the run little).
fn stream_byte(pos: u64) -> u8 {
    ((pos >> 3).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> ((pos & 7) * 8)) as u8
}

/// A station's endless stream: how far it was offered and delivered, and whether every byte
/// was right.
#[derive(Clone, Debug, Default)]
struct Stream {
    offered: u64,
    delivered: u64,
    delivered_half: u64,
    exact: bool,
}

/// Station `sta`'s estimate (`pick`) against the truth over the report intervals of the second
/// half.
fn level_error(
    series: &[Sample],
    sta: usize,
    half: Ts,
    pick: impl Fn(&Sample) -> f64,
) -> Option<crate::metrics::LevelError> {
    let pairs: Vec<crate::metrics::LevelPair> = series
        .iter()
        .filter(|x| x.sta as usize == sta && x.t > half.as_secs_f64())
        .map(|x| crate::metrics::LevelPair {
            start: Ts((x.t * 1e9) as u64),
            estimate: pick(x),
            truth: x.true_agg,
            ampdus: x.true_ampdus,
        })
        .collect();
    crate::metrics::LevelError::of(&pairs)
}

fn derive(seed: u64, stream: u64) -> ChaCha8Rng {
    let mut r = ChaCha8Rng::seed_from_u64(seed);
    r.set_stream(stream);
    r
}

/// The aggregation-target sender as it runs live: the transport's sans-IO [`Sender`] (its
/// [`AirtimeSplit`](crate::control::AirtimeSplit) paces the stations) and one [`Receiver`] per station, exchanging real
/// datagrams — hellos and feedback over the feedback delay, data through the emulated WLAN.
struct Wire {
    sender: Sender,
    receivers: Vec<Receiver>,
    /// Data datagrams inside the WLAN, by station and sequence number (the WLAN carries sizes).
    in_wlan: Vec<BTreeMap<u32, Vec<u8>>>,
    /// Data datagrams sent per station (the WLAN packet's sequence number).
    sent: Vec<u32>,
    /// Hellos on their way to a receiver: (arrival, station, bytes).
    down: VecDeque<(Ts, usize, Vec<u8>)>,
    /// Hello-acks and feedback on their way to the sender.
    up: VecDeque<(Ts, usize, Vec<u8>)>,
    /// With [`SimConfig::bulk`]: each station's stream (empty without).
    streams: Vec<Stream>,
    chunk: Vec<u8>,
}

/// Where the virtual sender's datagrams come from (the receivers only answer this address).
const SENDER_ADDR: std::net::SocketAddr =
    std::net::SocketAddr::V4(std::net::SocketAddrV4::new(std::net::Ipv4Addr::new(192, 0, 2, 1), 7000));

/// Data datagrams kept for the WLAN per station at most (older ones were dropped in the WLAN).
const MAX_IN_WLAN: usize = 1 << 16;

impl Wire {
    /// The transport for `cfg`: a fixed key and seeds, so the loop is deterministic (tags are
    /// still made and checked); each receiver runs its station's estimator and knows its PHY
    /// rate.
    fn new(cfg: &SimConfig, stations: &[Station], phy: &[f64]) -> Result<Wire, Error> {
        let n = stations.len();
        let payload = (cfg.packet_len as usize)
            .checked_sub(28 + wire::DATA_HEADER_LEN)
            .ok_or(Error::Bad {
                field: "packet_len",
                value: cfg.packet_len as f64,
                allowed: "at least 72 bytes (IP/UDP and the data header)",
            })?;
        let psk = wire::Psk::new(b"aggrate sim: the virtual loop's pre-shared key").map_err(|_| Error::Bad {
            field: "psk",
            value: 0.0,
            allowed: "16..=1024 bytes",
        })?;
        let seed = |k: u64| {
            let mut b = [0u8; 32];
            b[..8].copy_from_slice(&cfg.seed.to_le_bytes());
            b[8..16].copy_from_slice(&k.to_le_bytes());
            b
        };
        let mut sender = Sender::new(psk.clone(), seed(0), n, payload, cfg.control, cfg.interval, Ts::ZERO)?;
        if let Some(w) = cfg.bottleneck_weights {
            sender.set_bottleneck_weights(w);
        }
        sender.set_cell_airtime(cfg.steer != Steer::FrameCount);
        let bulk = crate::transport::bulk_config(payload + wire::DATA_HEADER_LEN, 1).map_err(|_| Error::Bad {
            field: "packet_len",
            value: cfg.packet_len as f64,
            allowed: "room for the reliable frame's header",
        });
        let mut receivers: Vec<Receiver> = stations
            .iter()
            .enumerate()
            .map(|(i, st)| {
                let mut r = Receiver::new(psk.clone(), seed(1 + i as u64), st.est.clone());
                r.phy_rate_bps = Some(phy[i] as u64);
                r
            })
            .collect();
        let mut streams = Vec::new();
        if cfg.bulk {
            let bulk = bulk?;
            for (i, r) in receivers.iter_mut().enumerate() {
                let e = |_| Error::Bad {
                    field: "packet_len",
                    value: cfg.packet_len as f64,
                    allowed: "room for the reliable frame's header",
                };
                sender.set_bulk(i, reliable::BulkSender::new(bulk.clone()).map_err(e)?);
                r.set_bulk(reliable::BulkReceiver::new(bulk.clone()).map_err(e)?);
                streams.push(Stream {
                    exact: true,
                    ..Stream::default()
                });
            }
        }
        Ok(Wire {
            sender,
            receivers,
            in_wlan: vec![BTreeMap::new(); n],
            sent: vec![0; n],
            down: VecDeque::new(),
            up: VecDeque::new(),
            streams,
            chunk: Vec::new(),
        })
    }

    /// Offer each station's stream what its window has room for.
    fn feed(&mut self) {
        for (i, st) in self.streams.iter_mut().enumerate() {
            let Some(b) = self.sender.bulk_mut(i) else { continue };
            let room = b.room().min(1 << 16);
            if room == 0 {
                continue;
            }
            self.chunk.clear();
            self.chunk
                .extend((st.offered..st.offered + room as u64).map(stream_byte));
            st.offered += b.offer(&self.chunk) as u64;
        }
    }

    /// Take what station `sta`'s stream delivered in order, checking every byte.
    fn drain(&mut self, sta: usize, second_half: bool) {
        let (Some(st), Some(b)) = (self.streams.get_mut(sta), self.receivers[sta].bulk_mut()) else {
            return;
        };
        while let Some(bytes) = b.read() {
            let at = st.delivered;
            st.exact &= bytes.iter().zip(at..).all(|(&x, pos)| x == stream_byte(pos));
            st.delivered += bytes.len() as u64;
            if second_half {
                st.delivered_half += bytes.len() as u64;
            }
        }
    }

    /// What the sender transmits at `now`: data into `out` as (station, WLAN packet), its bytes
    /// kept for the receiver; hellos onto the control path, like the feedback.
    fn transmit(&mut self, now: Ts, cfg: &SimConfig, out: &mut Vec<(usize, Packet)>) {
        self.feed();
        self.sender.handle_timeout(now);
        while let Some(t) = self.sender.poll_transmit(now) {
            let b = self.sender.buffer()[..t.len].to_vec();
            if matches!(wire::peek(&b), Ok((wire::Kind::Data, _, _))) {
                self.sent[t.station] += 1;
                let seq = self.sent[t.station];
                let kept = &mut self.in_wlan[t.station];
                kept.insert(seq, b);
                if kept.len() > MAX_IN_WLAN {
                    kept.pop_first();
                }
                out.push((
                    t.station,
                    Packet {
                        seq,
                        len: cfg.packet_len,
                        sent: now,
                    },
                ));
            } else {
                self.down.push_back((now + cfg.feedback_delay, t.station, b));
            }
        }
    }

    /// Station `sta`'s receiver's answers due at `now`, put on the way back to the sender.
    fn answers(&mut self, sta: usize, now: Ts, delay: Duration) {
        while let Some((n, _)) = self.receivers[sta].poll_transmit(now) {
            let b = self.receivers[sta].buffer()[..n].to_vec();
            self.up.push_back((now + delay, sta, b));
        }
    }
}

struct Station {
    noise: Box<dyn NoiseModel>,
    rx: VecDeque<RxPacket>,
    est: OnlineEstimator,
    last: AggReport,
    lost_total: u64,
    // Second-half accumulators.
    bytes: u64,
    delays: Vec<f32>,
    mpdus: u64,
    ampdus: u64,
    expect_seq: u64,
    backhaul_lost: u64,
    // The open report interval's truth (by MAC time).
    iv_ampdus: u64,
    iv_mpdus: u64,
}

/// The sender side of the loop: the transport (aggregation target) or the baseline.
enum Side {
    Aggrate(Box<Wire>),
    Cubic(Baseline),
}

/// What happens next in the loop. At equal times the first in this order wins (the order
/// [`Loop::next`] looks in), which keeps a run deterministic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Event {
    /// A report interval ends: receivers report, the series takes a sample.
    Tick,
    /// The sender may transmit (the baseline: to this station; the transport picks its own).
    Send(usize),
    /// A hello reaches a receiver over the control path.
    Down,
    /// A hello-ack or feedback reaches the sender.
    Up,
    /// A packet leaves the backhaul into the AP's queue.
    ToAp,
    /// The WLAN has a timer due.
    Wlan,
    /// This station's receive path hands a packet up.
    Rx(usize),
    /// This station's receiver has an acknowledgement due (its reliable stream's timers).
    Answer(usize),
    /// A baseline acknowledgement reaches the sender.
    Ack,
}

/// One run's state between events.
struct Loop<'c> {
    cfg: &'c SimConfig,
    n: usize,
    phy: Vec<f64>,
    sim: WlanSim<ChaCha8Rng>,
    side: Side,
    backhaul: Option<Backhaul>,
    stations: Vec<Station>,
    /// Online self-calibration per station (empty without).
    cals: Vec<OnlineCalibrator>,
    /// Packets on the backhaul: (arrival at the AP, station, packet).
    to_ap: VecDeque<(Ts, usize, Packet)>,
    next_tick: Ts,
    /// The channel's counters at the last tick: busy, and each station's own exchanges (the
    /// series' truth of others' share, and the receivers' survey with `survey`).
    air_last: (u64, Vec<u64>),
    series: Vec<Sample>,
    /// The next switch of the backhaul schedule.
    switch_next: usize,
    /// The sender's controller updates seen, and the rows they made.
    updates_seen: u64,
    rows: Vec<crate::bottleneck::Row>,
    air_half: Vec<u64>,
    drops_half: Vec<u64>,
    half: Ts,
    clock: Ts,
    // Reused buffers: no allocation per event.
    hosts: Vec<Option<Ts>>,
    batch: Vec<crate::wlan::Delivery>,
    out: Vec<(usize, Packet)>,
}

/// Run the closed loop.
pub fn run(cfg: &SimConfig, mut progress: impl FnMut(f64)) -> Result<SimResult, Error> {
    let mut l = Loop::new(cfg)?;
    let end = Ts((cfg.duration_s * 1e9) as u64);
    l.half = Ts(end.as_nanos() / 2);
    let mut steps = 0u64;
    loop {
        let (now, event) = l.next();
        l.clock = now;
        if now >= end {
            break;
        }
        steps += 1;
        if steps.is_multiple_of(1 << 16) {
            progress(now.as_secs_f64());
        }
        match event {
            Event::Tick => l.on_tick(now),
            Event::Send(sta) => l.on_send(now, sta),
            Event::Down => l.on_down(now),
            Event::Up => l.on_up(now),
            Event::ToAp => l.on_to_ap(),
            Event::Wlan => l.sim.handle_timeout(now),
            Event::Rx(sta) => l.on_rx(now, sta),
            Event::Answer(sta) => {
                if let Side::Aggrate(w) = &mut l.side {
                    w.answers(sta, now, cfg.feedback_delay);
                }
            }
            Event::Ack => {
                if let Side::Cubic(b) = &mut l.side {
                    b.on_ack(now);
                }
            }
        }
        l.deliver(now);
        if let Side::Cubic(b) = &mut l.side {
            b.forget_lost(l.stations.iter().map(|s| (s.expect_seq, s.rx.len() as u64)));
        }
    }
    progress(cfg.duration_s);
    Ok(l.finish(end))
}

impl<'c> Loop<'c> {
    fn new(cfg: &'c SimConfig) -> Result<Self, Error> {
        if !(cfg.duration_s > 0.0 && cfg.duration_s <= 86_400.0) {
            return Err(Error::Bad {
                field: "duration_s",
                value: cfg.duration_s,
                allowed: "in (0, 86400] s",
            });
        }
        if cfg.packet_len < 64 {
            return Err(Error::Bad {
                field: "packet_len",
                value: cfg.packet_len as f64,
                allowed: "at least 64 bytes",
            });
        }
        let wlan = cfg.wlan.clone().check()?;
        let n = wlan.config().stations.len();
        let phy: Vec<f64> = wlan.modes().iter().map(|m| m.rate_bps().unwrap_or(0) as f64).collect();
        let sim = WlanSim::new(wlan, derive(cfg.seed, 1));
        let backhaul = match (&cfg.backhaul, &cfg.backhaul_schedule) {
            (Some(b), _) => {
                b.check()?;
                Some(Backhaul::new(b))
            }
            (None, Some(_)) => Some(Backhaul::new(&BackhaulConfig {
                queue: 1000,
                ..BackhaulConfig::default()
            })),
            (None, None) => None,
        };
        let noise = cfg.noise.clone().map(|p| p.check()).transpose()?;
        let stations: Vec<Station> = (0..n)
            .map(|i| -> Result<Station, Error> {
                let mut est = match &cfg.estimator {
                    EstimatorKind::Mac => OnlineEstimator::new(Mode::Mac, FeatureSpec::default(), cfg.interval)?,
                    EstimatorKind::Model(f) => OnlineEstimator::from_model(f, cfg.interval)?,
                };
                cfg.steer.apply(&mut est)?;
                Ok(Station {
                    noise: model_for(noise.as_ref(), derive(cfg.seed, 100 + i as u64)),
                    rx: VecDeque::new(),
                    est,
                    last: AggReport::default(),
                    lost_total: 0,
                    bytes: 0,
                    delays: Vec::new(),
                    mpdus: 0,
                    ampdus: 0,
                    expect_seq: 0,
                    backhaul_lost: 0,
                    iv_ampdus: 0,
                    iv_mpdus: 0,
                })
            })
            .collect::<Result<_, _>>()?;
        let cals: Vec<OnlineCalibrator> = match (&cfg.estimator, cfg.self_calibrate) {
            (EstimatorKind::Model(f), Some(limit)) if cfg.sender == SenderKind::Aggrate => phy
                .iter()
                .map(|&p| crate::train::online::for_receiver(f, limit, Some(p as u64)))
                .collect::<Result<_, _>>()?,
            (_, Some(_)) => {
                return Err(Error::Bad {
                    field: "self_calibrate",
                    value: 1.0,
                    allowed: "needs a model estimator and the aggregation-target sender",
                })
            }
            _ => Vec::new(),
        };
        let side = match cfg.sender {
            SenderKind::Aggrate => Side::Aggrate(Box::new(Wire::new(cfg, &stations, &phy)?)),
            SenderKind::Cubic => Side::Cubic(Baseline::new(
                n,
                cfg.feedback_delay * 2 + Duration::from_millis(1),
                cfg.packet_len,
            )),
        };
        Ok(Loop {
            cfg,
            n,
            phy,
            sim,
            side,
            backhaul,
            stations,
            cals,
            to_ap: VecDeque::new(),
            next_tick: Ts::ZERO + cfg.interval,
            air_last: (0, vec![0; n]),
            series: Vec::new(),
            switch_next: 0,
            updates_seen: 0,
            rows: Vec::new(),
            air_half: vec![0; n],
            drops_half: vec![0; n],
            half: Ts::ZERO,
            clock: Ts::ZERO,
            hosts: Vec::new(),
            batch: Vec::new(),
            out: Vec::new(),
        })
    }

    /// The earliest event (ties: [`Event`]'s order).
    fn next(&self) -> (Ts, Event) {
        let mut next = (self.next_tick, Event::Tick);
        let mut consider = |at: Option<Ts>, e: Event| {
            if let Some(at) = at.filter(|&at| at < next.0) {
                next = (at, e);
            }
        };
        match &self.side {
            Side::Aggrate(w) => {
                consider(Some(w.sender.poll_timeout().max(self.clock)), Event::Send(0));
                consider(w.down.front().map(|d| d.0), Event::Down);
                consider(w.up.front().map(|u| u.0), Event::Up);
            }
            Side::Cubic(b) => {
                if let Some((at, sta)) = b.next_send(self.clock) {
                    consider(Some(at), Event::Send(sta));
                }
            }
        }
        consider(self.to_ap.front().map(|p| p.0), Event::ToAp);
        consider(self.sim.poll_timeout(), Event::Wlan);
        for (i, s) in self.stations.iter().enumerate() {
            consider(s.rx.front().map(|p| p.host), Event::Rx(i));
        }
        if let Side::Aggrate(w) = &self.side {
            for (i, r) in w.receivers.iter().enumerate() {
                // Never before now: an ack it cannot send yet (no session) waits for the next
                // event rather than spinning.
                let due = r.bulk().and_then(|b| b.poll_timeout());
                consider(
                    due.map(|t| t.max(self.clock + Duration::from_micros(1))),
                    Event::Answer(i),
                );
            }
        }
        if let Side::Cubic(b) = &self.side {
            consider(b.next_ack(), Event::Ack);
        }
        next
    }

    /// Report tick: receivers report; the sender hears after the feedback delay. The series
    /// takes each station's sample: the level the sender steers by (from all of this interval's
    /// reports: the cell's airtime relation needs every station's) and the interval's truth.
    fn on_tick(&mut self, now: Ts) {
        let (n, cfg) = (self.n, self.cfg);
        let steered: Vec<Option<f64>> = match &mut self.side {
            Side::Aggrate(w) => {
                for i in 0..n {
                    w.answers(i, now, cfg.feedback_delay);
                }
                let reports: Vec<AggReport> = w
                    .receivers
                    .iter()
                    .zip(&self.stations)
                    .map(|(rx, st)| rx.last_report().copied().unwrap_or(st.last))
                    .collect();
                (0..n).map(|i| Some(w.sender.level_of(&reports, i))).collect()
            }
            Side::Cubic(_) => vec![None; n],
        };
        let others_share = self.others_shares();
        if cfg.survey {
            self.survey(&others_share);
        }
        for (i, steered) in steered.into_iter().enumerate() {
            let s = &mut self.stations[i];
            let mut r = s.last;
            match &self.side {
                // The receiver reports on its own timer (the same interval boundaries): its
                // feedback leaves now.
                Side::Aggrate(w) => {
                    if let Some(x) = w.receivers[i].last_report() {
                        r = *x;
                    }
                }
                Side::Cubic(_) => {
                    while let Some(x) = s.est.poll_report(now) {
                        r = x;
                    }
                }
            }
            if r.phy_rate_bps.is_none() {
                r.phy_rate_bps = Some(self.phy[i]);
            }
            s.last = r;
            let (ampdus, mpdus) = (std::mem::take(&mut s.iv_ampdus), std::mem::take(&mut s.iv_mpdus));
            self.series.push(Sample {
                t: now.as_secs_f64(),
                sta: i as u16,
                count_agg: r.mean_agg,
                airtime_agg: r.airtime_agg.unwrap_or(0.0),
                features: r.features,
                others_share: others_share[i],
                true_agg: if ampdus > 0 { mpdus as f64 / ampdus as f64 } else { 0.0 },
                true_ampdus: ampdus,
                rate_mbps: match &self.side {
                    Side::Aggrate(w) => w.sender.rate(i).mbps,
                    Side::Cubic(b) => b.rate(i).mbps,
                },
                mean_agg: steered.unwrap_or_else(|| r.level()),
                delay_ms: r.owd_mean_ms.unwrap_or(0.0),
                queue: self.sim.queue_len(StaId(i as u16)),
                lost: s.lost_total,
            });
        }
        let half = self.half;
        if now == half || (now > half && now.saturating_sub(cfg.interval) < half) {
            for (i, st) in self.sim.stats().iter().enumerate() {
                self.air_half[i] = st.airtime_ns;
                self.drops_half[i] = st.dropped_queue + st.dropped_aqm + st.dropped_retry;
            }
        }
        self.next_tick = self.next_tick + cfg.interval;
    }

    /// Per station, the share of the interval since the last tick the channel was busy with
    /// anything but its own exchanges (what a channel survey reads).
    fn others_shares(&mut self) -> Vec<f64> {
        let busy = self.sim.busy_ns();
        let own: Vec<u64> = self.sim.stats().iter().map(|s| s.airtime_ns).collect();
        let span = self.cfg.interval.as_nanos().max(1) as f64;
        let (last_busy, last_own) = &self.air_last;
        let shares = own
            .iter()
            .zip(last_own)
            .map(|(o, lo)| (busy - last_busy).saturating_sub(o - lo) as f64 / span)
            .collect();
        self.air_last = (busy, own);
        shares
    }

    /// Each receiver reads the channel survey: the share of the interval others took.
    fn survey(&mut self, shares: &[f64]) {
        for (i, &share) in shares.iter().enumerate() {
            match &mut self.side {
                Side::Aggrate(w) => w.receivers[i].estimator_mut().set_others_share(share),
                Side::Cubic(_) => self.stations[i].est.set_others_share(share),
            }
        }
    }

    /// What leaves the sender now goes onto the backhaul (or is lost there).
    fn on_send(&mut self, now: Ts, sta: usize) {
        let cfg = self.cfg;
        self.out.clear();
        match &mut self.side {
            Side::Aggrate(w) => w.transmit(now, cfg, &mut self.out),
            Side::Cubic(b) => {
                let p = b.send(now, sta);
                self.out.push((sta, p));
            }
        }
        if let (Some(sched), Some(b)) = (&cfg.backhaul_schedule, &mut self.backhaul) {
            while let Some(w) = sched
                .switches
                .get(self.switch_next)
                .filter(|w| w.at_s <= now.as_secs_f64())
            {
                b.set_rate(w.mbps.unwrap_or(cfg.backhaul.as_ref().map_or(1e6, |c| c.rate_mbps)));
                self.switch_next += 1;
            }
        }
        for (sta, pkt) in self.out.drain(..) {
            let at = match &mut self.backhaul {
                Some(b) => b.push(now, cfg.packet_len),
                None => Some(now),
            };
            match at {
                Some(a) => self.to_ap.push_back((a, sta, pkt)),
                None => {
                    let s = &mut self.stations[sta];
                    s.lost_total += 1;
                    if now >= self.half {
                        s.backhaul_lost += 1;
                    }
                }
            }
        }
    }

    fn on_down(&mut self, now: Ts) {
        if let Side::Aggrate(w) = &mut self.side {
            if let Some((_, sta, b)) = w.down.pop_front() {
                let _ = w.receivers[sta].handle_datagram(now, SENDER_ADDR, &b);
                w.answers(sta, now, self.cfg.feedback_delay);
            }
        }
    }

    fn on_up(&mut self, now: Ts) {
        if let Side::Aggrate(w) = &mut self.side {
            if let Some((_, sta, b)) = w.up.pop_front() {
                // Refused feedback is counted in the sender's stats.
                let _ = w.sender.handle_datagram(now, sta, &b);
                if let Some(sched) = &self.cfg.backhaul_schedule {
                    let (c, _) = w.sender.control();
                    if c.updates() > self.updates_seen && !c.starting() {
                        self.updates_seen = c.updates();
                        let k = c.classifier();
                        let (a, z) = k.interval();
                        let (a, z) = (a.as_secs_f64(), z.as_secs_f64());
                        self.rows.push(crate::bottleneck::Row {
                            run: 0,
                            at_s: now.as_secs_f64(),
                            start_s: a,
                            end_s: z,
                            features: k.features(),
                            prob: k.probability(),
                            class: c.bottleneck() == crate::control::Bottleneck::Backhaul,
                            label: sched.label(a, z),
                        });
                    }
                }
            }
        }
    }

    fn on_to_ap(&mut self) {
        let (a, sta, pkt) = self.to_ap.pop_front().expect("peeked");
        self.sim.handle_timeout(a);
        if self.sim.enqueue(a, StaId(sta as u16), pkt).is_err() {
            self.stations[sta].lost_total += 1;
        }
    }

    /// Station `who`'s receive path hands up its next packet.
    fn on_rx(&mut self, now: Ts, who: usize) {
        let cfg = self.cfg;
        let s = &mut self.stations[who];
        let p = s.rx.pop_front().expect("peeked");
        match &mut self.side {
            Side::Aggrate(w) => {
                if let Some(b) = p.seq.and_then(|q| w.in_wlan[who].remove(&(q as u32))) {
                    let _ = w.receivers[who].handle_calibrated(p.host, SENDER_ADDR, &b, p.tsft, self.cals.get_mut(who));
                    w.drain(who, now >= self.half);
                    w.answers(who, now, cfg.feedback_delay);
                }
            }
            Side::Cubic(_) => {
                s.est.push(&p);
            }
        }
        let seq = p.seq.unwrap_or(0);
        let lost = seq > s.expect_seq + 1 && s.expect_seq > 0;
        s.expect_seq = s.expect_seq.max(seq);
        if now >= self.half {
            s.bytes += p.len as u64;
            if let Some(sent) = p.sent {
                s.delays.push(now.saturating_since(sent).as_secs_f32() * 1e3);
            }
        }
        if let Side::Cubic(b) = &mut self.side {
            b.received(now, who, lost, cfg.feedback_delay);
        }
    }

    /// This step's deliveries → kernel times (each station's receive path) → receive queues.
    fn deliver(&mut self, now: Ts) {
        self.batch.clear();
        while let Some(d) = self.sim.poll_delivery() {
            self.batch.push(d);
        }
        let (stations, hosts, phy, half) = (&mut self.stations, &mut self.hosts, &self.phy, self.half);
        crate::wlan::for_each_ampdu(&self.batch, |ampdu| {
            let d0 = ampdu[0];
            let sta = d0.sta.0 as usize;
            let s = &mut stations[sta];
            s.noise.on_ppdu(
                Ppdu {
                    start: d0.ppdu_start,
                    end: d0.mac_time,
                    n: ampdu.len(),
                    mpdu_of: &[],
                },
                hosts,
            );
            if d0.mac_time >= half {
                s.ampdus += 1;
                s.mpdus += ampdu.len() as u64;
            }
            s.iv_ampdus += 1;
            s.iv_mpdus += ampdu.len() as u64;
            for (d, h) in ampdu.iter().zip(hosts.iter()) {
                // A packet the receive path dropped never reaches the estimator.
                let Some(h) = h else { continue };
                s.rx.push_back(RxPacket {
                    host: (*h).max(now),
                    seq: Some(d.packet.seq as u64),
                    sent: Some(d.packet.sent),
                    len: d.packet.len as u32,
                    tsft: Some(d.tsft),
                    phy_rate_bps: Some(phy[sta] as u64),
                });
            }
        });
    }

    /// The second half's results.
    fn finish(mut self, end: Ts) -> SimResult {
        let half = self.half;
        let secs = (end.as_nanos() - half.as_nanos()) as f64 / 1e9;
        let stats = self.sim.stats();
        let air: Vec<u64> = stats
            .iter()
            .zip(&self.air_half)
            .map(|(s, h)| s.airtime_ns - h)
            .collect();
        let air_total: u64 = air.iter().sum();
        let series = std::mem::take(&mut self.series);
        let wlan = self.sim.config().config();
        let results: Vec<StationResult> = self
            .stations
            .iter_mut()
            .enumerate()
            .map(|(i, s)| {
                let (mean, p95) = mean_p95(&mut s.delays);
                StationResult {
                    mcs: wlan.stations[i].mcs,
                    phy_mbps: self.phy[i] / 1e6,
                    rate_mbps: s.bytes as f64 * 8.0 / secs / 1e6,
                    mean_agg: if s.ampdus > 0 {
                        s.mpdus as f64 / s.ampdus as f64
                    } else {
                        0.0
                    },
                    estimated_agg: {
                        let (sum, k) = series
                            .iter()
                            .filter(|x| x.sta as usize == i && x.t >= half.as_secs_f64() && x.mean_agg > 0.0)
                            .fold((0.0, 0usize), |(s, k), x| (s + x.mean_agg, k + 1));
                        sum / k.max(1) as f64
                    },
                    level_error: level_error(&series, i, half, |x| x.mean_agg),
                    count_error: level_error(&series, i, half, |x| x.count_agg),
                    delay_ms_mean: mean,
                    delay_ms_p95: p95,
                    airtime_share: if air_total > 0 {
                        air[i] as f64 / air_total as f64
                    } else {
                        0.0
                    },
                    lost: (stats[i].dropped_queue + stats[i].dropped_aqm + stats[i].dropped_retry)
                        .saturating_sub(self.drops_half[i])
                        + s.backhaul_lost,
                }
            })
            .collect();
        let wire = match &self.side {
            Side::Aggrate(w) => Some(w),
            Side::Cubic(_) => None,
        };
        SimResult {
            sender: self.cfg.sender,
            total_mbps: results.iter().map(|r| r.rate_mbps).sum(),
            stations: results,
            transport: wire.map(|w| w.sender.stats()),
            receiver_dropped: wire.map_or(0, |w| w.receivers.iter().map(|r| r.stats().dropped).sum()),
            self_calibration: self.cals.iter().map(OnlineCalibrator::summary).collect(),
            series,
            bottleneck: std::mem::take(&mut self.rows),
            bulk: wire.map_or_else(Vec::new, |w| {
                w.streams
                    .iter()
                    .enumerate()
                    .map(|(i, st)| {
                        let b = w.sender.bulk(i).map(|b| b.stats()).unwrap_or_default();
                        BulkResult {
                            goodput_mbps: st.delivered_half as f64 * 8.0 / secs / 1e6,
                            delivered_bytes: st.delivered,
                            exact: st.exact,
                            overhead: (b.repair_bytes + b.parity_bytes) as f64 / b.new_bytes.max(1) as f64,
                            sender: b,
                        }
                    })
                    .collect()
            }),
        }
    }
}

/// Mean and 95th percentile of one-way delays (ms); 0 without any.
fn mean_p95(delays: &mut [f32]) -> (f64, f64) {
    if delays.is_empty() {
        return (0.0, 0.0);
    }
    let mean = delays.iter().map(|d| *d as f64).sum::<f64>() / delays.len() as f64;
    let k = ((delays.len() as f64 * 0.95) as usize).min(delays.len() - 1);
    (mean, *delays.select_nth_unstable_by(k, |a, b| a.total_cmp(b)).1 as f64)
}

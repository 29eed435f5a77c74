//! Offline driver: traffic → backhaul → [`WlanSim`] → kernel-noise model, on a virtual clock.
//!
//! [`run`] jumps from event to event (no real time) and hands every delivered MPDU, with its
//! kernel receive time, to a sink closure; the CLI's sink writes captures. Deterministic: one
//! seed fixes traffic, emulator and noise (each from its own derived RNG stream).

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::config::{bad, ConfigError, ValidWlanConfig, WlanConfig};
use super::noise::{model_for, NoiseModel, NoisePreset, Ppdu, RandomReceiver, ReceivePath, ValidReceivePath};
use super::traffic::{Backhaul, BackhaulConfig, FlowConfig, Source};
use super::{Delivery, OtherPpdu, Packet, StaId, StaStats, WlanSim};
use crate::capture::writer::{build_amsdu_frame, build_frame, build_protected_frame, FrameSpec, Msdu};
use crate::time::Ts;

/// Everything one emulator run needs (the TOML config of `aggrate simulate`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Scenario {
    /// Seed of every random choice.
    pub seed: u64,
    /// Seconds of traffic.
    pub duration_s: f64,
    /// The WLAN.
    pub wlan: WlanConfig,
    /// Flows (server → station).
    pub flows: Vec<FlowConfig>,
    /// Optional backhaul link in front of the AP.
    pub backhaul: Option<BackhaulConfig>,
    /// Receive-path preset (`random`: drawn from `random_receiver` with the run's seed).
    pub noise_preset: NoisePreset,
    /// An explicit receive path (replaces the preset).
    pub noise: Option<ReceivePath>,
    /// Ranges that `noise_preset = "random"` draws from (default: [`RandomReceiver::default`]).
    pub random_receiver: Option<RandomReceiver>,
    /// The captures are a sniffer's on the channel: besides the station's own frames they hold
    /// the contenders' (other networks' protected data frames, stamped at their PPDU's end), from
    /// which `aggrate eval` measures the air others took. Off: a station's own monitor
    /// interface, which records its own frames only.
    pub sniffer: bool,
}

impl Default for Scenario {
    fn default() -> Self {
        Scenario {
            seed: 1,
            duration_s: 5.0,
            wlan: WlanConfig::default(),
            flows: vec![FlowConfig::default()],
            backhaul: None,
            noise_preset: NoisePreset::Phone,
            noise: None,
            random_receiver: None,
            sniffer: false,
        }
    }
}

/// A checked scenario.
#[derive(Clone, Debug)]
pub struct ValidScenario {
    /// The scenario as given.
    pub scenario: Scenario,
    /// Checked WLAN.
    pub wlan: ValidWlanConfig,
    /// The receive path in force, the same for every station (`None` = host time is the PPDU
    /// end).
    pub noise: Option<ValidReceivePath>,
}

impl Scenario {
    /// Check every field before any work starts.
    pub fn check(self) -> Result<ValidScenario, ConfigError> {
        if !(self.duration_s > 0.0 && self.duration_s <= 86_400.0) {
            return Err(bad("duration_s", self.duration_s, "> 0 and <= 86400 s"));
        }
        let wlan = self.wlan.clone().check()?;
        if self.flows.is_empty() {
            return Err(bad("flows", 0, "at least one flow"));
        }
        for (i, f) in self.flows.iter().enumerate() {
            f.check(i, self.wlan.stations.len())?;
        }
        if let Some(b) = &self.backhaul {
            b.check()?;
        }
        let path = match (&self.noise, self.noise_preset) {
            (Some(p), _) => Some(p.clone()),
            (None, NoisePreset::Random) => {
                if let Some(r) = &self.random_receiver {
                    r.check()
                        .map_err(|e| bad(format!("random_receiver.{}", e.field), e.value, e.allowed))?;
                }
                NoisePreset::Random.resolve(self.seed, self.random_receiver.as_ref())
            }
            (None, preset) => preset.path(),
        };
        let noise = match path {
            Some(p) => Some(
                p.check()
                    .map_err(|e| bad(format!("noise.{}", e.field), e.value, e.allowed))?,
            ),
            None => None,
        };
        Ok(ValidScenario {
            scenario: self,
            wlan,
            noise,
        })
    }
}

/// Per-station results of a run.
#[derive(Clone, Debug, Serialize)]
pub struct StaSummary {
    /// Station.
    pub sta: u16,
    /// PHY rate (Mb/s).
    pub phy_mbps: f64,
    /// Packets offered by its flows.
    pub offered: u64,
    /// Offered rate (Mb/s, IP bytes, over the run's duration).
    pub offered_mbps: f64,
    /// Packets delivered.
    pub delivered: u64,
    /// Received rate (Mb/s, IP bytes, over the run's duration).
    pub received_mbps: f64,
    /// A-MPDUs received.
    pub ampdus: u64,
    /// Mean packets per A-MPDU (MPDUs, unless A-MSDUs carry several packets each).
    pub mean_agg: f64,
    /// Largest A-MPDU (packets).
    pub max_agg: u16,
    /// Mean one-way delay (send → MAC receive), ms.
    pub delay_ms_mean: f64,
    /// Share of the medium time used by this station's exchanges.
    pub airtime_share: f64,
    /// Emulator counters.
    pub stats: StaStats,
}

/// Results of a run.
#[derive(Clone, Debug, Serialize)]
pub struct RunSummary {
    /// Per station.
    pub stations: Vec<StaSummary>,
    /// Packets dropped by the backhaul queue.
    pub backhaul_dropped: u64,
    /// Packets the stations' receive paths dropped (socket queue full).
    pub receiver_dropped: u64,
    /// The receive path in force (`None`: host time = PPDU end).
    pub receiver: Option<ReceivePath>,
    /// Collisions with contending stations.
    pub collisions: u64,
    /// Frames the contenders got through.
    pub contender_frames: u64,
    /// Medium time of the contenders' exchanges that got through (s): what a sniffer's capture
    /// shows of others' air (a [`Scenario::sniffer`]'s run; `None` otherwise).
    pub others_air_s: Option<f64>,
    /// Virtual time simulated (s).
    pub simulated_s: f64,
    /// Packets delivered in all.
    pub delivered: u64,
}

fn derive(seed: u64, stream: u64) -> ChaCha8Rng {
    let mut r = ChaCha8Rng::seed_from_u64(seed);
    r.set_stream(stream);
    r
}

/// Run a scenario, calling `sink(delivery, kernel_time)` for every received MPDU in order of
/// MAC time (`None`: the receive path dropped it), and `progress(virtual_now)` now and then.
pub fn run(scn: &ValidScenario, sink: impl FnMut(&Delivery, Option<Ts>), progress: impl FnMut(Ts)) -> RunSummary {
    let mut sink = sink;
    run_heard(
        scn,
        |h| {
            if let Heard::Delivery(d, host) = h {
                sink(d, host)
            }
        },
        progress,
    )
}

/// What a run hands its sink ([`run_heard`]).
#[derive(Clone, Copy, Debug)]
pub enum Heard<'a> {
    /// A received MPDU and its kernel receive time (`None`: the receive path dropped it).
    Delivery(&'a Delivery, Option<Ts>),
    /// A contender's PPDU that got through (only when the scenario is a [`Scenario::sniffer`]'s).
    Other(&'a OtherPpdu),
}

/// [`run`], with the contenders' PPDUs as well when the scenario is a [`Scenario::sniffer`]'s
/// (each handed over as it ends, between the deliveries).
pub fn run_heard(scn: &ValidScenario, mut sink: impl FnMut(Heard<'_>), mut progress: impl FnMut(Ts)) -> RunSummary {
    let s = &scn.scenario;
    let n_sta = scn.wlan.config().stations.len();
    let mut sim = WlanSim::new(scn.wlan.clone(), derive(s.seed, 1));
    sim.set_record_others(s.sniffer);
    let mut traffic_rng = derive(s.seed, 2);
    let mut sources: Vec<Source> = s
        .flows
        .iter()
        .map(|f| Source::new(f.clone(), &mut traffic_rng))
        .collect();
    let mut backhaul = s.backhaul.as_ref().map(Backhaul::new);
    let mut noise: Vec<Box<dyn NoiseModel>> = (0..n_sta)
        .map(|i| model_for(scn.noise.as_ref(), derive(s.seed, 100 + i as u64)))
        .collect();
    let end = Ts((s.duration_s * 1e9) as u64);
    let hard_end = end + std::time::Duration::from_secs(2);
    let mut offered = vec![0u64; n_sta];
    let mut delay_sum = vec![0f64; n_sta];
    let mut max_agg = vec![0u16; n_sta];
    let mut pending: Option<(Ts, u16, Packet)> = None;
    let mut batch: Vec<Delivery> = Vec::new();
    let mut hosts: Vec<Option<Ts>> = Vec::new();
    let mut mpdu_of: Vec<u16> = Vec::new();
    let mut events = 0u64;
    let mut others_air_ns = 0u64;
    let mut now = Ts::ZERO;
    loop {
        while pending.is_none() {
            let Some(i) = (0..sources.len())
                .filter(|&i| sources[i].peek().is_some_and(|t| t < end))
                .min_by_key(|&i| sources[i].peek())
            else {
                break;
            };
            let src = &mut sources[i];
            let (t, seq) = src.pop(&mut traffic_rng).expect("peeked");
            let (sta, len) = (src.sta(), src.ip_len());
            offered[sta as usize] += 1;
            let at_ap = match &mut backhaul {
                Some(b) => b.push(t, len),
                None => Some(t),
            };
            if let Some(a) = at_ap {
                pending = Some((a, sta, Packet { seq, len, sent: t }));
            }
        }
        let to = sim.poll_timeout();
        match (pending, to) {
            (Some((a, sta, pkt)), to) if to.is_none_or(|t| a <= t) => {
                now = a;
                sim.handle_timeout(a);
                let _ = sim.enqueue(a, StaId(sta), pkt);
                pending = None;
            }
            (_, Some(t)) if t <= hard_end => {
                now = t;
                sim.handle_timeout(t);
            }
            _ => break,
        }
        while let Some(o) = sim.poll_other() {
            others_air_ns += o.exchange_end.saturating_since(o.start).as_nanos() as u64;
            sink(Heard::Other(&o));
        }
        batch.clear();
        while let Some(d) = sim.poll_delivery() {
            batch.push(d);
        }
        super::for_each_ampdu(&batch, |ampdu| {
            let d0 = ampdu[0];
            let sta = d0.sta.0 as usize;
            mpdu_of.clear();
            if d0.mpdus as usize != ampdu.len() {
                mpdu_of.extend(ampdu.iter().map(|d| d.mpdu));
            }
            noise[sta].on_ppdu(
                Ppdu {
                    start: d0.ppdu_start,
                    end: d0.mac_time,
                    n: ampdu.len(),
                    mpdu_of: &mpdu_of,
                },
                &mut hosts,
            );
            max_agg[sta] = max_agg[sta].max(ampdu.len() as u16);
            for (d, h) in ampdu.iter().zip(&hosts) {
                delay_sum[sta] += d.mac_time.saturating_since(d.packet.sent).as_secs_f64();
                sink(Heard::Delivery(d, *h));
            }
        });
        events += 1;
        if events.is_multiple_of(4096) {
            progress(now);
        }
    }
    progress(now);
    let stations = station_summaries(scn, &sim.stats(), &offered, &delay_sum, &max_agg);
    RunSummary {
        delivered: stations.iter().map(|x| x.delivered).sum(),
        stations,
        backhaul_dropped: backhaul.map_or(0, |b| b.dropped),
        receiver_dropped: noise.iter().map(|n| n.dropped()).sum(),
        receiver: scn.noise.as_ref().map(|p| p.path().clone()),
        collisions: sim.collisions(),
        contender_frames: sim.contender_frames(),
        others_air_s: s.sniffer.then_some(others_air_ns as f64 * 1e-9),
        simulated_s: now.as_secs_f64(),
    }
}

/// Per station: what was offered and delivered, the aggregation, delay and airtime share.
fn station_summaries(
    scn: &ValidScenario,
    stats: &[super::StaStats],
    offered: &[u64],
    delay_sum: &[f64],
    max_agg: &[u16],
) -> Vec<StaSummary> {
    let s = &scn.scenario;
    let total_air: u64 = stats.iter().map(|x| x.airtime_ns).sum();
    let dur = s.duration_s;
    stats
        .iter()
        .enumerate()
        .map(|(i, st)| StaSummary {
            sta: i as u16,
            phy_mbps: scn.wlan.modes()[i].rate_bps().unwrap_or(0) as f64 / 1e6,
            offered: offered[i],
            offered_mbps: offered_bytes(s, i, offered[i]) * 8.0 / dur / 1e6,
            delivered: st.delivered,
            received_mbps: st.bytes as f64 * 8.0 / dur / 1e6,
            ampdus: st.ampdus,
            mean_agg: if st.ampdus > 0 {
                st.delivered as f64 / st.ampdus as f64
            } else {
                0.0
            },
            max_agg: max_agg[i],
            delay_ms_mean: if st.delivered > 0 {
                delay_sum[i] / st.delivered as f64 * 1e3
            } else {
                0.0
            },
            airtime_share: if total_air > 0 {
                st.airtime_ns as f64 / total_air as f64
            } else {
                0.0
            },
            stats: *st,
        })
        .collect::<Vec<_>>()
}

fn offered_bytes(s: &Scenario, sta: usize, packets: u64) -> f64 {
    // Flows to one station share a packet size in practice; use the first flow's.
    let len = s
        .flows
        .iter()
        .find(|f| f.sta as usize == sta)
        .map_or(1500, |f| f.ip_len);
    packets as f64 * len as f64
}

/// One station's deliveries as the frames its monitor interface records: one frame per MPDU, the
/// packets of an A-MSDU together in one frame stamped with the first one's kernel time. Packets
/// the receive path dropped are left out of their frame (an MPDU none of whose packets reached
/// the receiver is not written).
#[derive(Debug, Default)]
pub struct MpduFrames {
    pending: Vec<(Delivery, Ts)>,
    msdus: Vec<Msdu>,
}

impl MpduFrames {
    /// Add the next delivery of this station (in delivery order). When it completes its MPDU,
    /// the frame's first `snaplen` bytes are in `buf` and the frame's time and full length are
    /// returned.
    pub fn push(
        &mut self,
        d: &Delivery,
        host: Option<Ts>,
        channel_mhz: u16,
        snaplen: usize,
        buf: &mut Vec<u8>,
    ) -> Option<(Ts, usize)> {
        if d.msdu.1 <= 1 {
            self.pending.clear();
            let h = host?;
            return Some((h, build_frame(&frame_spec(d, channel_mhz), snaplen, buf)));
        }
        if d.msdu.0 == 0 {
            self.pending.clear();
        }
        if let Some(h) = host {
            self.pending.push((*d, h));
        }
        if !d.last_of_mpdu() {
            return None;
        }
        let (first, at) = *self.pending.first()?;
        self.msdus.clear();
        self.msdus.extend(self.pending.iter().map(|(x, _)| Msdu {
            ip_len: x.packet.len,
            seq: x.packet.seq,
            sent_ns: x.packet.sent.as_nanos(),
        }));
        let mut spec = frame_spec(&first, channel_mhz);
        spec.last = d.mpdu + 1 == d.mpdus;
        let full = build_amsdu_frame(&spec, &self.msdus, snaplen, buf);
        self.pending.clear();
        Some((at, full))
    }
}

/// Addresses the emulator writes into captures.
pub mod addr {
    /// The AP (BSSID).
    pub const BSSID: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
    /// Station `i`'s MAC.
    pub fn sta_mac(i: u16) -> [u8; 6] {
        [0x02, 0, 0, 0, 0x01, (i + 1) as u8]
    }
    /// The server's IP.
    pub const SERVER_IP: [u8; 4] = [10, 0, 0, 1];
    /// Station `i`'s IP.
    pub fn sta_ip(i: u16) -> [u8; 4] {
        [10, 0, 1, (i + 1) as u8]
    }
    /// UDP ports.
    pub const SPORT: u16 = 40_000;
    /// UDP destination port.
    pub const DPORT: u16 = 5001;
    /// Contender `i`: the AP of another network (a neighbouring AP) or a station of one.
    pub fn contender_mac(i: u16) -> [u8; 6] {
        [0x02, 0, 0, 0, 0x02, (i + 1) as u8]
    }
    /// The peer contender `i` sends to: its station (a neighbouring AP) or its AP.
    pub fn contender_peer_mac(i: u16) -> [u8; 6] {
        [0x02, 0, 0, 0, 0x03, (i + 1) as u8]
    }
    /// Contender `i` as a station of the AP's own network (it sends to [`BSSID`]).
    pub fn own_contender_mac(i: u16) -> [u8; 6] {
        [0x02, 0, 0, 0, 0x04, (i + 1) as u8]
    }
}

/// Who a sniffer sees sending the contenders' frames (their addresses).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OtherSenders {
    /// Neighbouring networks' APs aggregating their downlinks (to their stations).
    NeighbourAps,
    /// Neighbouring networks' stations (to their APs).
    NeighbourStations,
    /// Stations of the AP's own network, uploading to it.
    OwnStations,
}

impl OtherSenders {
    /// The senders a WLAN's contender settings describe.
    pub fn of(c: &super::WlanConfig) -> OtherSenders {
        match (c.contender_bss, c.contender_ampdu > 1) {
            (super::ContenderBss::Own, _) => OtherSenders::OwnStations,
            (super::ContenderBss::Other, true) => OtherSenders::NeighbourAps,
            (super::ContenderBss::Other, false) => OtherSenders::NeighbourStations,
        }
    }
}

/// Another network's PPDU as a sniffer on the channel records it: one protected data frame per
/// MPDU, all stamped at the PPDU's end (a sniffer's receive time), radiotap TSFT at its start.
/// Who sends them is [`OtherSenders`]: neighbouring APs to their stations, neighbouring stations
/// to their APs, or the AP's own stations to it.
#[derive(Debug, Default)]
pub struct OtherFrames {
    seq: Vec<u16>,
    next_ref: u32,
}

impl OtherFrames {
    /// Render `o`'s frames (first `snaplen` bytes each) and hand each to `emit(time, bytes,
    /// full_length)`.
    pub fn write(
        &mut self,
        o: &OtherPpdu,
        senders: OtherSenders,
        channel_mhz: u16,
        snaplen: usize,
        buf: &mut Vec<u8>,
        mut emit: impl FnMut(Ts, &[u8], usize),
    ) {
        let i = o.contender as usize;
        if self.seq.len() <= i {
            self.seq.resize(i + 1, 0);
        }
        // A-MPDU references of their own, apart from the AP's (which count up from 0).
        self.next_ref = self.next_ref.wrapping_add(1);
        let (me, peer) = (addr::contender_mac(o.contender), addr::contender_peer_mac(o.contender));
        // (station, BSSID, to the AP)
        let (sta, bssid, to_ds) = match senders {
            OtherSenders::NeighbourAps => (peer, me, false),
            OtherSenders::NeighbourStations => (me, peer, true),
            OtherSenders::OwnStations => (addr::own_contender_mac(o.contender), addr::BSSID, true),
        };
        for k in 0..o.frames {
            let spec = FrameSpec {
                tsft_us: o.start.as_nanos() / 1000,
                ampdu_ref: 0x8000_0000 | self.next_ref,
                last: k + 1 == o.frames,
                vht: o.mode.vht,
                mcs: radiotap_mcs(&o.mode),
                nss: o.mode.nss,
                bw_mhz: o.mode.bw.mhz() as u16,
                short_gi: o.mode.short_gi,
                channel_mhz,
                sta,
                bssid,
                dot11_seq: self.seq[i],
                retry: false,
                ip_src: [0; 4],
                ip_dst: [0; 4],
                sport: 0,
                dport: 0,
                ip_len: o.ip_len,
                seq: 0,
                sent_ns: 0,
            };
            self.seq[i] = (self.seq[i] + 1) & 0x0fff;
            let full = build_protected_frame(&spec, to_ds, snaplen, buf);
            emit(o.end, buf, full);
        }
    }
}

/// The MCS a radiotap header carries for `m`: VHT's per-stream index, or HT's index over all
/// streams.
fn radiotap_mcs(m: &super::timing::PhyMode) -> u8 {
    if m.vht {
        m.mcs
    } else {
        (m.nss - 1) * 8 + m.mcs
    }
}

/// The capture frame of a delivery.
pub fn frame_spec(d: &Delivery, channel_mhz: u16) -> FrameSpec {
    FrameSpec {
        tsft_us: d.tsft.as_micros(),
        ampdu_ref: d.ampdu_ref,
        last: d.mpdu + 1 == d.mpdus,
        vht: d.mode.vht,
        mcs: radiotap_mcs(&d.mode),
        nss: d.mode.nss,
        bw_mhz: d.mode.bw.mhz() as u16,
        short_gi: d.mode.short_gi,
        channel_mhz,
        sta: addr::sta_mac(d.sta.0),
        bssid: addr::BSSID,
        dot11_seq: d.dot11_seq,
        retry: d.retry,
        ip_src: addr::SERVER_IP,
        ip_dst: addr::sta_ip(d.sta.0),
        sport: addr::SPORT,
        dport: addr::DPORT,
        ip_len: d.packet.len,
        seq: d.packet.seq,
        sent_ns: d.packet.sent.as_nanos(),
    }
}

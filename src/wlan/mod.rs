//! 802.11ac downlink emulator: an AP with per-station queues building A-MPDUs under EDCA, as a
//! sans-IO state machine on an explicit clock.
//!
//! Inputs: [`WlanSim::enqueue`] (a packet reaches the AP at `now`) and
//! [`WlanSim::handle_timeout`]. Outputs: [`WlanSim::poll_delivery`] (an MPDU received by its
//! station at the end of its PPDU, with TSFT, A-MPDU reference, PHY mode) and
//! [`WlanSim::poll_timeout`] (the next instant something happens). Time is the caller's [`Ts`];
//! randomness (backoff, MPDU errors, contender arrivals) comes from the seeded RNG passed in, so a
//! run replays bit for bit. Timing formulas and a worked saturation example are in [`timing`].
//!
//! Model: one best-effort EDCA function at the AP serves the stations round robin; each
//! transmit opportunity sends one A-MPDU to one station holding everything queued for it, up to
//! `max_ampdu_mpdus` (block-ack window), `max_ampdu_bytes` and `max_ppdu_us` of PPDU. PSDUs above
//! the RTS threshold are preceded by RTS/CTS. With `amsdu_max_msdus` > 1 each MPDU packs up to
//! that many queued packets into an A-MSDU (within `amsdu_max_bytes`); the A-MPDU limits count
//! MPDUs, a delivery is one packet and says which MPDU it came in. Optional per-MPDU errors requeue the MPDU at the
//! head of its queue (retry flag set) until the retry limit. Optional contending stations run
//! their own EDCA with Poisson arrivals of single-MPDU frames; equal backoff ends collide.
//!
//! Uplink: what a station sends the AP ([`WlanSim::enqueue_uplink`]: TCP ACKs, a receiver's
//! feedback) waits in the station's own queue and goes out in the station's own transmit
//! opportunities — an EDCA function per station contending with the AP's and the contenders',
//! an A-MPDU of what it holds under the same limits, at its PHY mode, Block Ack after — and
//! reaches the AP at its PPDU's end ([`WlanSim::poll_uplink`]). So the uplink takes air the
//! downlink then lacks, and collides. Uplink MPDUs draw no errors.

pub mod codel;
pub mod config;
pub mod live;
pub mod manifest;
pub mod noise;
pub mod run;
pub mod timing;
pub mod traffic;
pub mod write;

use std::collections::VecDeque;
use std::time::Duration;

use rand::{Rng, RngExt};

pub use config::{
    Arrivals, ConfigError, ContenderBss, RateAdaptation, StationConfig, TsftAt, ValidWlanConfig, WlanConfig,
};
use timing::{PhyMode, SIFS, SLOT};

use crate::time::{Ts, Tsft};

/// Index of a station (0-based, in configuration order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct StaId(pub u16);

/// A packet handed to the AP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Packet {
    /// Application sequence number (written into the UDP payload).
    pub seq: u32,
    /// IP length in bytes.
    pub len: u16,
    /// Send time at the origin (written into the UDP payload).
    pub sent: Ts,
}

/// A packet received by its station (one per IP packet: an A-MSDU MPDU yields several).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Delivery {
    /// Receiving station.
    pub sta: StaId,
    /// The packet.
    pub packet: Packet,
    /// When it entered the AP queue.
    pub enqueued: Ts,
    /// PPDU start.
    pub ppdu_start: Ts,
    /// PPDU end: when the station's radio has the whole A-MPDU (the MAC receive time).
    pub mac_time: Ts,
    /// Radio TSFT (same for all MPDUs of the A-MPDU).
    pub tsft: Tsft,
    /// A-MPDU reference number.
    pub ampdu_ref: u32,
    /// Position in the A-MPDU, counting packets (0-based).
    pub index: u16,
    /// Packets delivered in the A-MPDU (its aggregation level as a receiver sees it).
    pub count: u16,
    /// Position of its MPDU among the A-MPDU's delivered MPDUs (0-based).
    pub mpdu: u16,
    /// MPDUs delivered in the A-MPDU.
    pub mpdus: u16,
    /// Position in its MPDU's A-MSDU and the A-MSDU's packets (`(0, 1)`: no A-MSDU).
    pub msdu: (u16, u16),
    /// PHY mode.
    pub mode: PhyMode,
    /// 802.11 sequence number (of its MPDU).
    pub dot11_seq: u16,
    /// Sent before (retry flag).
    pub retry: bool,
}

impl Delivery {
    /// Last packet of its A-MPDU.
    pub fn last(&self) -> bool {
        self.index + 1 == self.count
    }
    /// Last packet of its MPDU.
    pub fn last_of_mpdu(&self) -> bool {
        self.msdu.0 + 1 == self.msdu.1
    }
}

/// Split a batch of deliveries (as polled, in order) into its A-MPDUs: runs of equal
/// `ampdu_ref`, each handed to `f` as a slice.
pub fn for_each_ampdu(batch: &[Delivery], mut f: impl FnMut(&[Delivery])) {
    let mut i = 0;
    while i < batch.len() {
        let r = batch[i].ampdu_ref;
        let j = (i..batch.len())
            .find(|&j| batch[j].ampdu_ref != r)
            .unwrap_or(batch.len());
        f(&batch[i..j]);
        i = j;
    }
}

/// Why a packet was not queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Dropped {
    /// The station's queue is full.
    #[error("queue of station {} full", .0 .0)]
    QueueFull(StaId),
    /// No such station.
    #[error("no station {}", .0 .0)]
    NoSuchStation(StaId),
}

/// Counters of one station.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct StaStats {
    /// Packets delivered.
    pub delivered: u64,
    /// MPDUs delivered (fewer than packets when A-MSDUs carry several).
    pub mpdus: u64,
    /// IP bytes delivered.
    pub bytes: u64,
    /// A-MPDUs sent.
    pub ampdus: u64,
    /// Drops at a full queue.
    pub dropped_queue: u64,
    /// Drops by the queue discipline (CoDel).
    #[serde(skip_serializing_if = "is_zero")]
    pub dropped_aqm: u64,
    /// Drops after the retry limit.
    pub dropped_retry: u64,
    /// Medium time of exchanges to this station (ns).
    pub airtime_ns: u64,
    /// Of which lost in collisions (ns).
    #[serde(skip_serializing_if = "is_zero")]
    pub collided_airtime_ns: u64,
    /// Current queue length.
    pub queued: u64,
    /// Packets the station sent the AP (uplink).
    #[serde(skip_serializing_if = "is_zero")]
    pub uplink_packets: u64,
    /// A-MPDUs the station sent the AP.
    #[serde(skip_serializing_if = "is_zero")]
    pub uplink_ampdus: u64,
    /// Medium time of the station's own exchanges (ns; its collisions not counted).
    #[serde(skip_serializing_if = "is_zero")]
    pub uplink_airtime_ns: u64,
    /// Uplink packets dropped at the station's full queue.
    #[serde(skip_serializing_if = "is_zero")]
    pub uplink_dropped: u64,
}

fn is_zero(x: &u64) -> bool {
    *x == 0
}

#[derive(Clone, Copy, Debug)]
struct Queued {
    pkt: Packet,
    enq: Ts,
    retries: u8,
    /// Set at the first transmission; packets of one A-MSDU share it and stay together when
    /// their MPDU is retried.
    dot11_seq: Option<u16>,
}

/// A packet of the A-MPDU on the air.
#[derive(Clone, Copy, Debug)]
struct InFlight {
    q: Queued,
    /// Its MPDU arrived.
    ok: bool,
    /// Its MPDU's position in the A-MPDU.
    mpdu: u16,
}

#[derive(Clone, Copy, Debug)]
struct Edcaf {
    backoff: u32,
    cw: u32,
}

#[derive(Clone, Debug)]
struct Contender {
    edcaf: Edcaf,
    queue: u64,
    head_avail: Ts,
    next_arrival: Ts,
    /// On/off arrivals: where this contender's cycle starts (ns, drawn from the seed).
    phase_ns: u64,
}

/// A saturated contender's queue: never runs out in any run.
const SATURATED: u64 = 1 << 62;

/// A station's own transmissions to the AP: its queue and EDCA function.
#[derive(Clone, Debug)]
struct Uplink {
    queue: VecDeque<Queued>,
    edcaf: Edcaf,
    /// When the head of the queue became available (`None`: nothing queued).
    avail: Option<Ts>,
}

/// A packet a station sent that the AP received (the uplink).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct UplinkDelivery {
    /// Sending station.
    pub sta: StaId,
    /// The packet.
    pub packet: Packet,
    /// When it was queued at the station.
    pub enqueued: Ts,
    /// When the AP received it (its PPDU's end).
    pub received: Ts,
}

#[derive(Clone, Debug)]
struct Exchange {
    ppdu_end: Ts,
    end: Ts,
    delivered: bool,
    ap_success: Option<bool>,
    /// Contenders that sent, whether they got through, and how many frames they sent.
    contenders: Vec<(usize, bool, u64)>,
    /// Stations that sent on the uplink, and whether they got through.
    uplink: Vec<(usize, bool)>,
    /// Packets of the uplink A-MPDU that got through.
    uplink_packets: usize,
}

/// A contender's PPDU that got through, as a sniffer on the channel hears it (recorded only when
/// asked: [`WlanSim::set_record_others`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OtherPpdu {
    /// Which contender sent it.
    pub contender: u16,
    /// PPDU start.
    pub start: Ts,
    /// PPDU end.
    pub end: Ts,
    /// End of its exchange: the PPDU, SIFS and the Ack or Block Ack (the medium time a channel
    /// survey counts busy is from `start` to here).
    pub exchange_end: Ts,
    /// Frames in it (more than one: an A-MPDU).
    pub frames: u16,
    /// IP length of each frame (bytes).
    pub ip_len: u16,
    /// Its PHY format.
    pub mode: timing::PhyMode,
}

/// The emulator.
pub struct WlanSim<R: Rng> {
    cfg: ValidWlanConfig,
    rng: R,
    queues: Vec<VecDeque<Queued>>,
    next_dot11_seq: Vec<u16>,
    stats: Vec<StaStats>,
    rr: usize,
    ap: Edcaf,
    ap_avail: Option<Ts>,
    contenders: Vec<Contender>,
    contender_mean_gap_ns: f64,
    uplink: Vec<Uplink>,
    uplink_out: VecDeque<UplinkDelivery>,
    idle_since: Ts,
    aifs: Duration,
    exchange: Option<Exchange>,
    ampdu: Vec<InFlight>,
    ampdu_sta: usize,
    /// PSDU bytes of the A-MPDU being built.
    ampdu_psdu: usize,
    ampdu_meta: (Ts, Ts),
    next_ref: u32,
    out: VecDeque<Delivery>,
    collisions: u64,
    contender_frames: u64,
    busy_ns: u64,
    /// Contenders' PPDUs not yet taken by [`WlanSim::poll_other`] (`None`: not recorded).
    others_out: Option<VecDeque<OtherPpdu>>,
    /// Current PHY mode per station (moves under rate adaptation).
    mode: Vec<timing::PhyMode>,
    /// Next rate-adaptation step per station.
    next_ra: Vec<Option<Ts>>,
    /// CoDel's state per station (used under [`codel::Aqm::Codel`]).
    codel: Vec<codel::Codel>,
}

impl<R: Rng> WlanSim<R> {
    /// A new emulator; the medium is idle from time zero.
    pub fn new(cfg: ValidWlanConfig, mut rng: R) -> Self {
        let c = cfg.config();
        let n = c.stations.len();
        let mut gap = if c.contenders > 0 {
            c.contender_bytes as f64 * 8.0 / (c.contender_rate_mbps * 1e6) * 1e9
        } else {
            0.0
        };
        if let config::Arrivals::OnOff { on_ms, off_ms } = c.contender_arrivals {
            // The same mean load, offered during the on periods only.
            gap *= on_ms / (on_ms + off_ms);
        }
        let contenders = (0..c.contenders)
            .map(|_| {
                let edcaf = Edcaf {
                    backoff: 0,
                    cw: c.cw_min,
                };
                match c.contender_arrivals {
                    config::Arrivals::Saturated => Contender {
                        edcaf,
                        queue: SATURATED,
                        head_avail: Ts::ZERO,
                        next_arrival: Ts(u64::MAX / 4),
                        phase_ns: 0,
                    },
                    arrivals => {
                        let phase_ns = match arrivals {
                            config::Arrivals::OnOff { on_ms, off_ms } => {
                                (rng.random::<f64>() * (on_ms + off_ms) * 1e6) as u64
                            }
                            _ => 0,
                        };
                        let first = on_off_next(c.contender_arrivals, phase_ns, Ts(exp_ns(&mut rng, gap)));
                        Contender {
                            edcaf,
                            queue: 0,
                            head_avail: first,
                            next_arrival: first,
                            phase_ns,
                        }
                    }
                }
            })
            .collect();
        WlanSim {
            aifs: SIFS + SLOT * c.aifsn,
            queues: vec![VecDeque::new(); n],
            codel: vec![codel::Codel::default(); n],
            next_dot11_seq: vec![0; n],
            stats: vec![StaStats::default(); n],
            rr: 0,
            ap: Edcaf {
                backoff: 0,
                cw: c.cw_min,
            },
            ap_avail: None,
            contenders,
            contender_mean_gap_ns: gap,
            uplink: vec![
                Uplink {
                    queue: VecDeque::new(),
                    edcaf: Edcaf {
                        backoff: 0,
                        cw: c.cw_min,
                    },
                    avail: None,
                };
                n
            ],
            uplink_out: VecDeque::new(),
            idle_since: Ts::ZERO,
            exchange: None,
            ampdu: Vec::with_capacity(c.max_ampdu_mpdus as usize),
            ampdu_sta: 0,
            ampdu_psdu: 0,
            ampdu_meta: (Ts::ZERO, Ts::ZERO),
            next_ref: 0,
            out: VecDeque::new(),
            collisions: 0,
            contender_frames: 0,
            busy_ns: 0,
            others_out: None,
            mode: cfg.modes.clone(),
            next_ra: vec![None; n],
            cfg,
            rng,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &ValidWlanConfig {
        &self.cfg
    }

    /// Counters per station.
    pub fn stats(&self) -> Vec<StaStats> {
        let mut s = self.stats.clone();
        for (x, q) in s.iter_mut().zip(&self.queues) {
            x.queued = q.len() as u64;
        }
        s
    }

    /// Medium time of every exchange so far — the AP's, the contenders', collisions — as a
    /// station's channel survey counts busy time (ns).
    pub fn busy_ns(&self) -> u64 {
        self.busy_ns
    }

    /// Medium time of the exchanges of every station of this AP that got through so far — its
    /// A-MPDUs to them and theirs to it (ns): the cell's own share of the busy time, as a
    /// station's survey counts its own receive and transmit time (a collision is busy time, not
    /// a frame it received).
    pub fn cell_airtime_ns(&self) -> u64 {
        self.stats
            .iter()
            .map(|s| s.airtime_ns - s.collided_airtime_ns + s.uplink_airtime_ns)
            .sum()
    }

    /// Collisions so far.
    pub fn collisions(&self) -> u64 {
        self.collisions
    }

    /// Frames sent by contending stations.
    pub fn contender_frames(&self) -> u64 {
        self.contender_frames
    }

    /// Record the contenders' PPDUs that get through, for [`WlanSim::poll_other`] (what a
    /// sniffer on the channel writes into its capture besides this AP's frames). Off by default:
    /// whoever turns it on drains them, or they pile up.
    pub fn set_record_others(&mut self, on: bool) {
        self.others_out = on.then(VecDeque::new);
    }

    /// The next recorded contender PPDU (in order of their start).
    pub fn poll_other(&mut self) -> Option<OtherPpdu> {
        self.others_out.as_mut()?.pop_front()
    }

    /// Packets queued for `sta`.
    pub fn queue_len(&self, sta: StaId) -> usize {
        self.queues.get(sta.0 as usize).map_or(0, |q| q.len())
    }

    /// A packet reaches the AP at `now` (call [`WlanSim::handle_timeout`] for earlier
    /// deadlines first).
    pub fn enqueue(&mut self, now: Ts, sta: StaId, pkt: Packet) -> Result<(), Dropped> {
        let limit = self.cfg.config().queue_limit;
        let i = sta.0 as usize;
        let q = self.queues.get_mut(i).ok_or(Dropped::NoSuchStation(sta))?;
        if q.len() >= limit {
            self.stats[i].dropped_queue += 1;
            return Err(Dropped::QueueFull(sta));
        }
        q.push_back(Queued {
            pkt,
            enq: now,
            retries: 0,
            dot11_seq: None,
        });
        if self.ap_avail.is_none() {
            self.ap_avail = Some(now);
        }
        Ok(())
    }

    /// Next MPDU received by a station.
    pub fn poll_delivery(&mut self) -> Option<Delivery> {
        self.out.pop_front()
    }

    /// Station `sta` has a packet for the AP at `now` (the uplink; call
    /// [`WlanSim::handle_timeout`] for earlier deadlines first). Dropped when the station's
    /// queue holds `queue_limit` packets.
    pub fn enqueue_uplink(&mut self, now: Ts, sta: StaId, pkt: Packet) -> Result<(), Dropped> {
        let limit = self.cfg.config().queue_limit;
        let i = sta.0 as usize;
        // The medium is busy while an exchange runs (from its access to its Block Ack's end).
        let busy = self.exchange.is_some();
        let u = self.uplink.get_mut(i).ok_or(Dropped::NoSuchStation(sta))?;
        if u.queue.len() >= limit {
            self.stats[i].uplink_dropped += 1;
            return Err(Dropped::QueueFull(sta));
        }
        u.queue.push_back(Queued {
            pkt,
            enq: now,
            retries: 0,
            dot11_seq: None,
        });
        if u.avail.is_none() {
            u.avail = Some(now);
            // A frame that finds the medium busy and the station's backoff run out draws a new
            // backoff (802.11-2016 10.22.2.2): it must not take the medium at the first AIFS
            // after the exchange, ahead of everyone. (On an idle medium it goes after AIFS.)
            if busy && u.edcaf.backoff == 0 {
                u.edcaf.backoff = self.rng.random_range(0..=u.edcaf.cw);
            }
        }
        Ok(())
    }

    /// Next packet the AP received from a station.
    pub fn poll_uplink(&mut self) -> Option<UplinkDelivery> {
        self.uplink_out.pop_front()
    }

    /// Packets waiting in `sta`'s uplink queue.
    pub fn uplink_queue_len(&self, sta: StaId) -> usize {
        self.uplink.get(sta.0 as usize).map_or(0, |u| u.queue.len())
    }

    /// Station `i`'s next uplink A-MPDU: its packets, its time on the air should it collide
    /// (its RTS, or its PPDU), and without a collision its PPDU's end from the access and the
    /// exchange's rest after it (a Block Ack, or an ACK for one MPDU).
    fn uplink_timing(&self, i: usize, rts_threshold: usize) -> (usize, Duration, (Duration, Duration)) {
        let (k, psdu) = self.uplink_ampdu(i);
        let rts = psdu > rts_threshold;
        let dur = self.mode[i].ppdu_duration(psdu);
        let prot = if rts {
            timing::rts() + SIFS + timing::ack() + SIFS
        } else {
            Duration::ZERO
        };
        let after = if k == 1 {
            SIFS + timing::ack()
        } else {
            SIFS + timing::block_ack()
        };
        (k, if rts { timing::rts() } else { dur }, (prot + dur, after))
    }

    /// The packets (MPDUs) and PSDU bytes of station `i`'s next uplink A-MPDU, under the AP's
    /// limits.
    fn uplink_ampdu(&self, i: usize) -> (usize, usize) {
        let c = self.cfg.config();
        let (max_n, max_bytes, max_ppdu) = (
            c.max_ampdu_mpdus as usize,
            c.max_ampdu_bytes,
            Duration::from_micros(c.max_ppdu_us as u64),
        );
        let mode = self.mode[i];
        let (mut n, mut bytes) = (0usize, 0usize);
        for q in &self.uplink[i].queue {
            let sub = timing::subframe_len(q.pkt.len as usize);
            if n > 0 && (n >= max_n || bytes + sub > max_bytes || mode.ppdu_duration(bytes + sub) > max_ppdu) {
                break;
            }
            bytes += sub;
            n += 1;
        }
        (n, bytes)
    }

    /// When [`WlanSim::handle_timeout`] next has work (`None`: idle until the next enqueue).
    pub fn poll_timeout(&self) -> Option<Ts> {
        match &self.exchange {
            Some(x) => Some(if x.delivered { x.end } else { x.ppdu_end }),
            None => self.next_access().map(|(t, _)| t),
        }
    }

    fn t0(&self) -> Ts {
        self.idle_since + self.aifs
    }

    fn candidate(&self, e: &Edcaf, avail: Ts) -> Ts {
        let counted = self.t0() + SLOT * e.backoff;
        counted.max(avail)
    }

    fn next_access(&self) -> Option<(Ts, ())> {
        let mut best: Option<Ts> = self.ap_avail.map(|a| self.candidate(&self.ap, a));
        for c in &self.contenders {
            let avail = if c.queue > 0 { c.head_avail } else { c.next_arrival };
            let t = self.candidate(&c.edcaf, avail);
            best = Some(best.map_or(t, |b| b.min(t)));
        }
        for u in &self.uplink {
            if let Some(a) = u.avail {
                let t = self.candidate(&u.edcaf, a);
                best = Some(best.map_or(t, |b| b.min(t)));
            }
        }
        best.map(|t| (t, ()))
    }

    fn advance_contenders(&mut self, upto: Ts) {
        for i in 0..self.contenders.len() {
            while self.contenders[i].next_arrival <= upto {
                let gap = exp_ns(&mut self.rng, self.contender_mean_gap_ns);
                let arrivals = self.cfg.config().contender_arrivals;
                let c = &mut self.contenders[i];
                if c.queue == 0 {
                    c.head_avail = c.next_arrival;
                }
                c.queue += 1;
                c.next_arrival = on_off_next(arrivals, c.phase_ns, c.next_arrival + Duration::from_nanos(gap.max(1)));
            }
        }
    }

    /// Process everything due at or before `now`. Early calls do nothing; a `now` earlier than a
    /// previous one is treated as no time passing.
    pub fn handle_timeout(&mut self, now: Ts) {
        loop {
            if let Some(x) = &mut self.exchange {
                if !x.delivered {
                    if now < x.ppdu_end {
                        return;
                    }
                    x.delivered = true;
                    self.release_deliveries();
                    continue;
                }
                if now < x.end {
                    return;
                }
                self.finish_exchange();
                continue;
            }
            let Some((t, ())) = self.next_access() else { return };
            if t > now {
                return;
            }
            self.advance_contenders(t);
            self.start_exchange(t);
        }
    }

    /// Who transmits at `t` — the AP, contenders, stations on the uplink — with everyone's
    /// backoff counted down by the idle slots up to `t`.
    fn transmitters(&mut self, t: Ts) -> (bool, Vec<usize>, Vec<usize>) {
        let t0 = self.t0();
        let elapsed = if t >= t0 {
            (t.saturating_since(t0).as_nanos() / SLOT.as_nanos()) as u32
        } else {
            0
        };
        let ap_tx = self.ap_avail.is_some_and(|a| self.candidate(&self.ap, a) == t);
        let cont_tx: Vec<usize> = (0..self.contenders.len())
            .filter(|&i| {
                let c = &self.contenders[i];
                c.queue > 0 && self.candidate(&c.edcaf, c.head_avail) == t
            })
            .collect();
        let up_tx: Vec<usize> = (0..self.uplink.len())
            .filter(|&i| {
                let u = &self.uplink[i];
                u.avail.is_some_and(|a| self.candidate(&u.edcaf, a) == t)
            })
            .collect();
        self.ap.backoff = self.ap.backoff.saturating_sub(elapsed);
        for c in &mut self.contenders {
            c.edcaf.backoff = c.edcaf.backoff.saturating_sub(elapsed);
        }
        for u in &mut self.uplink {
            u.edcaf.backoff = u.edcaf.backoff.saturating_sub(elapsed);
        }
        (ap_tx, cont_tx, up_tx)
    }

    fn start_exchange(&mut self, t: Ts) {
        let (ap_tx, cont_tx, up_tx) = self.transmitters(t);
        if !ap_tx && cont_tx.is_empty() && up_tx.is_empty() {
            // A contender's counter ran out with nothing to send (its frame arrives later):
            // nothing starts; the medium stays idle.
            self.idle_since = t.saturating_sub(self.aifs);
            return;
        }
        let (rts_threshold, p) = {
            let c = self.cfg.config();
            (c.rts_threshold, c.mpdu_error_rate)
        };
        let ack = timing::ack();
        let mut on_air = Duration::ZERO; // longest transmission (collisions)
        let mut ppdu_end = t;
        let mut end_after_ppdu = SIFS + timing::block_ack();
        let collision = (ap_tx as usize + cont_tx.len() + up_tx.len()) > 1;
        if ap_tx {
            self.build_ampdu(t);
            let sta = self.ampdu_sta;
            let mode = self.mode[sta];
            let psdu = self.ampdu_psdu;
            let rts = psdu > rts_threshold;
            let prot = if rts {
                timing::rts() + SIFS + ack + SIFS
            } else {
                Duration::ZERO
            };
            let dur = mode.ppdu_duration(psdu);
            if collision {
                on_air = on_air.max(if rts { timing::rts() } else { dur });
            } else {
                let start = t + prot;
                ppdu_end = start + dur;
                if self.ampdu.last().is_some_and(|f| f.mpdu == 0) {
                    end_after_ppdu = SIFS + ack;
                }
                self.ampdu_meta = (start, ppdu_end);
            }
        }
        let (cont_frames, cont_ppdu, cont_after) = self.contender_ppdus(&cont_tx);
        if !cont_tx.is_empty() {
            on_air = on_air.max(cont_ppdu);
            if !collision {
                ppdu_end = t + cont_ppdu;
                end_after_ppdu = cont_after;
            }
        }
        let mut uplink_packets = 0;
        for &i in &up_tx {
            let (k, on, after) = self.uplink_timing(i, rts_threshold);
            if collision {
                on_air = on_air.max(on);
            } else {
                (ppdu_end, end_after_ppdu, uplink_packets) = (t + after.0, after.1, k);
            }
        }
        let mut ex = Exchange {
            ppdu_end,
            end: ppdu_end + end_after_ppdu,
            delivered: false,
            ap_success: None,
            contenders: Vec::new(),
            uplink: Vec::new(),
            uplink_packets,
        };
        if collision {
            self.collisions += 1;
            ex.ppdu_end = t + on_air;
            ex.end = ex.ppdu_end + SIFS + ack;
            if ap_tx {
                ex.ap_success = Some(false);
                self.ampdu.iter_mut().for_each(|f| f.ok = false);
            }
            ex.contenders = cont_tx.iter().zip(&cont_frames).map(|(&i, &k)| (i, false, k)).collect();
            ex.uplink = up_tx.iter().map(|&i| (i, false)).collect();
        } else if ap_tx {
            // One error draw per MPDU: an A-MSDU is lost or received whole.
            let mut any = false;
            let mut cur: Option<(u16, bool)> = None;
            for f in &mut self.ampdu {
                let ok = match cur {
                    Some((m, ok)) if m == f.mpdu => ok,
                    _ => p == 0.0 || !self.rng.random_bool(p),
                };
                cur = Some((f.mpdu, ok));
                f.ok = ok;
                any |= ok;
            }
            ex.ap_success = Some(any);
            self.stats[self.ampdu_sta].ampdus += 1;
        } else if !cont_tx.is_empty() {
            ex.contenders = cont_tx.iter().zip(&cont_frames).map(|(&i, &k)| (i, true, k)).collect();
            self.contender_frames += cont_frames.iter().sum::<u64>();
            self.record_others(&cont_tx, &cont_frames, t, ppdu_end, ex.end);
        } else if let Some(&i) = up_tx.first() {
            ex.uplink = vec![(i, true)];
            self.stats[i].uplink_ampdus += 1;
            self.stats[i].uplink_airtime_ns += ex.end.saturating_since(t).as_nanos() as u64;
        }
        if ap_tx {
            let air = ex.end.saturating_since(t).as_nanos() as u64;
            self.stats[self.ampdu_sta].airtime_ns += air;
            if collision {
                self.stats[self.ampdu_sta].collided_airtime_ns += air;
            }
        }
        self.busy_ns += ex.end.saturating_since(t).as_nanos() as u64;
        self.exchange = Some(ex);
    }

    /// Keep the contenders' PPDU that got through (`start`–`end`, its exchange over at
    /// `exchange_end`) for [`WlanSim::poll_other`], when asked to.
    fn record_others(&mut self, cont_tx: &[usize], frames: &[u64], start: Ts, end: Ts, exchange_end: Ts) {
        let Some(q) = self.others_out.as_mut() else { return };
        let c = self.cfg.config();
        q.extend(cont_tx.iter().zip(frames).map(|(&i, &k)| OtherPpdu {
            contender: i as u16,
            start,
            end,
            exchange_end,
            frames: k.min(u16::MAX as u64) as u16,
            ip_len: c.contender_bytes.min(u16::MAX as usize) as u16,
            mode: self.cfg.contender_mode,
        }));
    }

    /// The sending contenders' PPDUs: the frames each puts in its PPDU (up to its A-MPDU limit
    /// of what it has queued: a neighbouring AP aggregates, a station sends one), the longest
    /// PPDU, and what follows the PPDU when it goes alone (SIFS and an Ack, or a Block Ack).
    fn contender_ppdus(&self, cont_tx: &[usize]) -> (Vec<u64>, Duration, Duration) {
        let c = self.cfg.config();
        let frames: Vec<u64> = cont_tx
            .iter()
            .map(|&i| self.contenders[i].queue.clamp(1, c.contender_ampdu as u64))
            .collect();
        let longest = frames
            .iter()
            .map(|&k| {
                self.cfg
                    .contender_mode
                    .ppdu_duration(k as usize * timing::subframe_len(c.contender_bytes))
            })
            .max()
            .unwrap_or(Duration::ZERO);
        let after = SIFS
            + if frames.iter().any(|&k| k > 1) {
                timing::block_ack()
            } else {
                timing::ack()
            };
        (frames, longest, after)
    }

    /// Rate adaptation: step the station's MCS once its dwell time has passed.
    fn adapt_rate(&mut self, sta: usize, now: Ts) {
        let Some(ra) = self.cfg.config().stations[sta].rate_adaptation.clone() else {
            return;
        };
        let dwell = |rng: &mut R| Duration::from_nanos(exp_ns(rng, ra.dwell_ms * 1e6).min(u64::MAX / 4));
        match self.next_ra[sta] {
            None => self.next_ra[sta] = Some(now + dwell(&mut self.rng)),
            Some(t) if now >= t => {
                let ok = &self.cfg.ra_mcs[sta];
                let cur = self.mode[sta].mcs;
                let i = ok.iter().position(|&m| m == cur).unwrap_or(0);
                let up = self.rng.random_bool(0.5);
                let j = if up {
                    (i + 1).min(ok.len().saturating_sub(1))
                } else {
                    i.saturating_sub(1)
                };
                if let Some(&m) = ok.get(j) {
                    self.mode[sta].mcs = m;
                }
                self.next_ra[sta] = Some(now + dwell(&mut self.rng));
            }
            Some(_) => {}
        }
    }

    /// Take the next station's A-MPDU out of its queue (round robin over non-empty queues).
    fn build_ampdu(&mut self, now: Ts) {
        let n = self.queues.len();
        let c = self.cfg.config();
        let (max_n, max_bytes, max_ppdu) = (
            c.max_ampdu_mpdus as usize,
            c.max_ampdu_bytes,
            Duration::from_micros(c.max_ppdu_us as u64),
        );
        let sta = (0..n)
            .map(|k| (self.rr + k) % n)
            .find(|&s| !self.queues[s].is_empty())
            .unwrap_or(0);
        self.rr = (sta + 1) % n;
        self.ampdu_sta = sta;
        self.codel_drops(sta, now);
        self.ampdu.clear();
        self.adapt_rate(sta, now);
        let mode = self.mode[sta];
        let mut bytes = 0usize;
        let mut mpdus = 0usize;
        while !self.queues[sta].is_empty() {
            let (k, sub) = self.next_mpdu(sta);
            if mpdus > 0 && (mpdus >= max_n || bytes + sub > max_bytes || mode.ppdu_duration(bytes + sub) > max_ppdu) {
                break;
            }
            bytes += sub;
            let seq = match self.queues[sta][0].dot11_seq {
                Some(s) => s,
                None => {
                    let s = self.next_dot11_seq[sta];
                    self.next_dot11_seq[sta] = (s + 1) & 0x0fff;
                    s
                }
            };
            for _ in 0..k {
                let mut q = self.queues[sta].pop_front().expect("counted");
                q.dot11_seq = Some(seq);
                self.ampdu.push(InFlight {
                    q,
                    ok: false,
                    mpdu: mpdus as u16,
                });
            }
            mpdus += 1;
        }
        self.ampdu_psdu = bytes;
    }

    /// Under CoDel, the packets at the head of `sta`'s queue it drops as they leave at `now`
    /// (never a retried MPDU's, never the last two: the queue stays non-empty).
    fn codel_drops(&mut self, sta: usize, now: Ts) {
        let codel::Aqm::Codel { target_us, interval_us } = self.cfg.config().aqm else {
            return;
        };
        let (target, interval) = (
            Duration::from_micros(target_us as u64),
            Duration::from_micros(interval_us as u64),
        );
        while let Some(h) = self.queues[sta].front() {
            if h.dot11_seq.is_some() {
                return;
            }
            let sojourn = now.saturating_since(h.enq);
            let remaining = self.queues[sta].len() - 1;
            if !self.codel[sta].drop(now, sojourn, remaining, target, interval) {
                return;
            }
            self.queues[sta].pop_front();
            self.stats[sta].dropped_aqm += 1;
        }
    }

    /// The packets at the head of `sta`'s queue that form its next MPDU, and the MPDU's A-MPDU
    /// subframe length. A retried MPDU keeps its packets; a new one packs up to
    /// `amsdu_max_msdus` packets within `amsdu_max_bytes` (one packet: a plain MPDU).
    fn next_mpdu(&self, sta: usize) -> (usize, usize) {
        let c = self.cfg.config();
        let q = &self.queues[sta];
        let len = |i: usize| q[i].pkt.len as usize;
        let k = match q[0].dot11_seq {
            Some(s) => q.iter().take_while(|x| x.dot11_seq == Some(s)).count(),
            None => {
                let mut k = 1;
                while k < c.amsdu_max_msdus as usize
                    && k < q.len()
                    && q[k].dot11_seq.is_none()
                    && timing::amsdu_len((0..=k).map(len)) <= c.amsdu_max_bytes
                {
                    k += 1;
                }
                k
            }
        };
        let sub = if k == 1 {
            timing::subframe_len(len(0))
        } else {
            timing::amsdu_subframe_len((0..k).map(len))
        };
        (k, sub)
    }

    fn release_deliveries(&mut self) {
        let Some(x) = &self.exchange else { return };
        // An uplink A-MPDU that got through: its packets reach the AP at the PPDU's end.
        if let Some(&(i, true)) = x.uplink.first() {
            let (k, at) = (x.uplink_packets, x.ppdu_end);
            let u = &mut self.uplink[i];
            for q in u.queue.drain(..k.min(u.queue.len())) {
                self.uplink_out.push_back(UplinkDelivery {
                    sta: StaId(i as u16),
                    packet: q.pkt,
                    enqueued: q.enq,
                    received: at,
                });
            }
            self.stats[i].uplink_packets += k as u64;
            return;
        }
        if x.ap_success.is_none() || self.ampdu.is_empty() || !self.ampdu.iter().any(|f| f.ok) {
            return;
        }
        let sta = self.ampdu_sta;
        let (start, end) = self.ampdu_meta;
        let c = self.cfg.config();
        let tsft_ts = match c.tsft_at {
            TsftAt::Start => start,
            TsftAt::End => end,
        };
        let tsft = Tsft(tsft_ts.as_nanos() / 1000 + c.tsf_offset_us);
        let reference = self.next_ref;
        self.next_ref = self.next_ref.wrapping_add(1);
        // An MPDU's packets share its fate (one error draw per MPDU), so the delivered ones form
        // whole MPDUs; walk them in place (no list per A-MPDU).
        let count = self.ampdu.iter().filter(|f| f.ok).count() as u16;
        let mpdus = self
            .ampdu
            .iter()
            .enumerate()
            .filter(|&(i, f)| f.ok && (i == 0 || self.ampdu[i - 1].mpdu != f.mpdu))
            .count() as u16;
        let mode = self.mode[sta];
        let (mut index, mut mpdu, mut i) = (0u16, 0u16, 0usize);
        while i < self.ampdu.len() {
            let m = self.ampdu[i].mpdu;
            let k = self.ampdu[i..].iter().take_while(|f| f.mpdu == m).count();
            if !self.ampdu[i].ok {
                i += k;
                continue;
            }
            for (j, f) in self.ampdu[i..i + k].iter().enumerate() {
                let q = &f.q;
                self.stats[sta].delivered += 1;
                self.stats[sta].bytes += q.pkt.len as u64;
                self.out.push_back(Delivery {
                    sta: StaId(sta as u16),
                    packet: q.pkt,
                    enqueued: q.enq,
                    ppdu_start: start,
                    mac_time: end,
                    tsft,
                    ampdu_ref: reference,
                    index,
                    count,
                    mpdu,
                    mpdus,
                    msdu: (j as u16, k as u16),
                    mode,
                    dot11_seq: q.dot11_seq.unwrap_or(0),
                    retry: q.retries > 0,
                });
                index += 1;
            }
            self.stats[sta].mpdus += 1;
            mpdu += 1;
            i += k;
        }
    }

    fn finish_exchange(&mut self) {
        let Some(x) = self.exchange.take() else { return };
        let (retry_limit, cw_min, cw_max) = {
            let c = self.cfg.config();
            (c.retry_limit, c.cw_min, c.cw_max)
        };
        self.idle_since = x.end;
        if let Some(ok) = x.ap_success {
            // Failed MPDUs go back to the head of their queue, in order, unless out of retries.
            let sta = self.ampdu_sta;
            for InFlight {
                mut q, ok: delivered, ..
            } in self.ampdu.drain(..).rev()
            {
                if delivered {
                    continue;
                }
                q.retries = q.retries.saturating_add(1);
                if q.retries > retry_limit {
                    self.stats[sta].dropped_retry += 1;
                } else {
                    self.queues[sta].push_front(q);
                }
            }
            self.ap.cw = if ok { cw_min } else { (self.ap.cw * 2 + 1).min(cw_max) };
            self.ap.backoff = self.rng.random_range(0..=self.ap.cw);
        }
        for (i, ok, k) in x.contenders {
            let e = &mut self.contenders[i];
            if ok {
                e.queue = e.queue.saturating_sub(k);
                if e.queue < SATURATED / 2 && self.cfg.config().contender_arrivals == config::Arrivals::Saturated {
                    e.queue = SATURATED;
                }
                e.head_avail = x.end;
            }
            e.edcaf.cw = if ok { cw_min } else { (e.edcaf.cw * 2 + 1).min(cw_max) };
            e.edcaf.backoff = self.rng.random_range(0..=e.edcaf.cw);
        }
        // Stations' uplink: what got through left at its PPDU's end (release_deliveries); the
        // rest is sent again after a longer backoff.
        for (i, ok) in x.uplink {
            let u = &mut self.uplink[i];
            u.edcaf.cw = if ok { cw_min } else { (u.edcaf.cw * 2 + 1).min(cw_max) };
            u.edcaf.backoff = self.rng.random_range(0..=u.edcaf.cw);
            if ok {
                u.avail = (!u.queue.is_empty()).then_some(x.end);
            }
        }
        self.ap_avail = if self.queues.iter().any(|q| !q.is_empty()) {
            Some(x.end)
        } else {
            None
        };
    }
}

/// Exponential sample of mean `mean` by inversion, −ln(1 − U)·mean (0 for a mean ≤ 0, and then
/// no draw). The emulator's one exponential sampler (traffic, noise, contenders, rate
/// adaptation): inversion takes exactly one uniform per sample, which keeps every seeded
/// dataset (and the shipped model's) reproducible; `rand_distr`'s ziggurat `Exp` would draw a
/// different stream.
pub(crate) fn exp_sample<R: Rng>(rng: &mut R, mean: f64) -> f64 {
    if mean <= 0.0 {
        return 0.0;
    }
    -(1.0 - rng.random::<f64>()).ln() * mean
}

/// The first arrival time at or after `t` that on/off arrivals allow: `t` itself in an on
/// period (and for every other kind), else the start of the next on period.
fn on_off_next(arrivals: config::Arrivals, phase_ns: u64, t: Ts) -> Ts {
    let config::Arrivals::OnOff { on_ms, off_ms } = arrivals else {
        return t;
    };
    let (on, cycle) = ((on_ms * 1e6) as u64, ((on_ms + off_ms) * 1e6) as u64);
    if cycle == 0 || on >= cycle {
        return t;
    }
    let pos = (t.0.saturating_add(phase_ns)) % cycle;
    if pos < on {
        t
    } else {
        Ts(t.0.saturating_add(cycle - pos))
    }
}

/// [`exp_sample`] in whole ns; a mean ≤ 0 means "never" (a time far beyond any run).
fn exp_ns<R: Rng>(rng: &mut R, mean_ns: f64) -> u64 {
    if mean_ns <= 0.0 {
        return u64::MAX / 4;
    }
    exp_sample(rng, mean_ns) as u64
}

//! Receive paths: what a client's kernel stamps (`SO_TIMESTAMPNS`, or the app's own clock) after
//! its radio has received an A-MPDU — built from the mechanisms real receive paths are made of.
//!
//! A [`ReceivePath`] is a list of [`Stage`]s, each one mechanism with its own parameters:
//!
//! | stage | mechanism |
//! | --- | --- |
//! | [`PerMpduHandoff`] | MPDUs reach the host as they are decoded, during the PPDU, not at its end |
//! | [`Bus`] | a serialising hop between radio and host (USB, SDIO): one packet after another, each taking its transfer time |
//! | [`TimerTick`] | the driver (USB bus intervals, polling drivers) delivers only at timer ticks, with slack |
//! | [`Interrupt`] | interrupt moderation (fixed `rx-usecs`, or adaptive to the packet rate) and interrupt latency |
//! | [`Napi`] | NAPI polling: a poll budget with a pause when it runs out, GRO-style batch hand-off |
//! | [`ThreadedNapi`] | the poll runs in a kernel thread (threaded NAPI, ksoftirqd) that must be woken |
//! | [`PerPacket`] | the per-packet cost of the receive path, with jitter that grows with load |
//! | [`CpuContention`] | the receiving CPU is shared with another busy task (preemptions, waits at wake-up) |
//! | [`Stalls`] | scheduling stalls: Poisson arrivals, exponential or heavy-tailed (Pareto) lengths |
//! | [`SocketQueue`] | the socket's queue with its limit (drops counted), optionally stamped by the app at read |
//! | rate adaptation | lives in the emulator ([`super::config::RateAdaptation`]): MCS changes between A-MPDUs |
//!
//! The stages compose in the order packets meet them, whatever their order in the list: radio
//! hand-off → bus → timer ticks → interrupt → NAPI poll (thread wake-up, contention, stalls, per-packet
//! cost, GRO batches) → kernel timestamp → socket queue → app. Per packet, with `r` the time it is
//! ready for the host:
//!
//! 1. If the poll is idle at `r`, the packet raises an interrupt: it fires after the moderation
//!    delay, then `latency + Exp(jitter)`; a threaded poll adds its wake-up (and, under
//!    contention, a wait for the other task's slice). Packets ready before the poll has drained
//!    the queue join the running poll without a new interrupt.
//! 2. The poll processes packets one after another, each `us + Exp(jitter + load_jitter · load)`
//!    (load = recent packet rate in Mpackets/s). Every `budget` packets it pauses for `yield_us`.
//!    Stalls and contention preemptions stop it for their length.
//! 3. Without GRO the kernel stamps each packet when its processing ends; with GRO batches of
//!    `gro_batch`, the batch is stamped together when it is full or the poll finds no more packets
//!    (at the latest at the end of the PPDU).
//! 4. The socket queue holds stamped packets until the app reads them (`app_us` each, after a
//!    wake-up); a full queue drops the packet.
//!
//! Output times never decrease. All randomness comes from the seeded RNG the model owns.
//! [`NoisePreset`]s are fixed stage lists; [`RandomReceiver`] draws a receive path from stated
//! ranges, so that a dataset spans many receivers.

use std::collections::VecDeque;
use std::str::FromStr;
use std::time::Duration;

use rand::{Rng, RngExt};
use serde::{Deserialize, Serialize};

use crate::time::Ts;

/// One PPDU's packets, as the radio hands them to the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ppdu<'a> {
    /// First symbol of the PPDU.
    pub start: Ts,
    /// End of the PPDU (the MAC receive time of the whole A-MPDU).
    pub end: Ts,
    /// Packets in it.
    pub n: usize,
    /// The MPDU of each packet (0-based, non-decreasing) when A-MSDUs put several packets in one
    /// MPDU; empty: one packet per MPDU. A per-MPDU hand-off releases an MPDU's packets together.
    pub mpdu_of: &'a [u16],
}

/// Turns the MAC receive time of each A-MPDU into host timestamps of its MPDUs.
pub trait NoiseModel {
    /// Host times for the `ppdu.n` MPDUs of one A-MPDU, appended to `out` (cleared first);
    /// `None` for an MPDU the receive path dropped. Calls come in order of `ppdu.end`.
    fn on_ppdu(&mut self, ppdu: Ppdu<'_>, out: &mut Vec<Option<Ts>>);
    /// Packets dropped so far (socket queue full).
    fn dropped(&self) -> u64 {
        0
    }
}

// ---------------------------------------------------------------------------------------------
// Stages

/// MPDUs handed to the host as they are decoded (some drivers and firmwares release each MPDU of
/// an A-MPDU while the PPDU is still on the air instead of the whole A-MPDU at its end).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PerMpduHandoff {
    /// PHY preamble before the first MPDU (µs); MPDU i of n is ready at
    /// `start + preamble + (end − start − preamble)·(i+1)/n`.
    pub preamble_us: f64,
}

impl Default for PerMpduHandoff {
    fn default() -> Self {
        PerMpduHandoff { preamble_us: 40.0 }
    }
}

/// A serialising hop between the radio and the host — a USB or SDIO bus, a slower link: packets
/// cross it one after another in arrival order, each taking `per_packet_us` (its frame's
/// transfer time: 12.1 µs for a 1514-byte frame at 1 Gbit/s). A packet ready at `r` leaves at
/// `max(r, when the previous one left) + per_packet_us`, so an A-MPDU's packets leave that far
/// apart and, near the bus's rate, a backlog closes the gaps between A-MPDUs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Bus {
    /// Transfer time per packet (µs, > 0).
    pub per_packet_us: f64,
}

impl Default for Bus {
    fn default() -> Self {
        Bus { per_packet_us: 12.0 }
    }
}

/// Delivery at timer ticks: a packet ready at `r` is released at the next multiple of
/// `period_us`, plus that tick's slack, drawn uniformly from `[0, slack_us]` once per tick.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TimerTick {
    /// Tick period (µs, > 0).
    pub period_us: f64,
    /// Timer slack (µs).
    pub slack_us: f64,
}

impl Default for TimerTick {
    fn default() -> Self {
        TimerTick {
            period_us: 1000.0,
            slack_us: 50.0,
        }
    }
}

/// The NIC's interrupt: moderation, then latency.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Interrupt {
    /// Moderation (`ethtool -C rx-usecs`): the interrupt fires this long after the first packet
    /// that finds the poll idle.
    pub rx_usecs: f64,
    /// Adaptive moderation: the delay is `adaptive_packets / load` (µs per Mpacket/s), clamped to
    /// `[adaptive_min_us, adaptive_max_us]`, instead of `rx_usecs`.
    pub adaptive: bool,
    /// Adaptive: packets per interrupt aimed at.
    pub adaptive_packets: f64,
    /// Adaptive: shortest delay (µs).
    pub adaptive_min_us: f64,
    /// Adaptive: longest delay (µs).
    pub adaptive_max_us: f64,
    /// Fixed interrupt-to-poll latency (µs).
    pub latency_us: f64,
    /// Mean exponential extra latency (µs).
    pub jitter_us: f64,
}

impl Default for Interrupt {
    fn default() -> Self {
        Interrupt {
            rx_usecs: 0.0,
            adaptive: false,
            adaptive_packets: 16.0,
            adaptive_min_us: 0.0,
            adaptive_max_us: 200.0,
            latency_us: 5.0,
            jitter_us: 2.0,
        }
    }
}

/// NAPI polling and GRO batching.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Napi {
    /// Packets per poll before it yields (≥ 1).
    pub budget: u32,
    /// Pause when the budget runs out (µs).
    pub yield_us: f64,
    /// GRO-style batch hand-off: packets reach the stack (and are stamped) in batches of this
    /// many, or fewer when the poll runs dry (0 = one at a time).
    pub gro_batch: u32,
}

impl Default for Napi {
    fn default() -> Self {
        Napi {
            budget: 64,
            yield_us: 3.0,
            gro_batch: 0,
        }
    }
}

/// The poll runs in a kernel thread that has to be woken for every new poll.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ThreadedNapi {
    /// Fixed wake-up latency (µs).
    pub wake_us: f64,
    /// Mean exponential extra wake-up latency (µs).
    pub wake_jitter_us: f64,
}

impl Default for ThreadedNapi {
    fn default() -> Self {
        ThreadedNapi {
            wake_us: 10.0,
            wake_jitter_us: 10.0,
        }
    }
}

/// Per-packet cost of the receive path.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PerPacket {
    /// Fixed cost (µs).
    pub us: f64,
    /// Mean exponential extra (µs).
    pub jitter_us: f64,
    /// Extra mean per Mpacket/s of recent load (µs).
    pub load_jitter_us_per_mpps: f64,
}

impl Default for PerPacket {
    fn default() -> Self {
        PerPacket {
            us: 2.0,
            jitter_us: 0.5,
            load_jitter_us_per_mpps: 0.0,
        }
    }
}

/// The receiving CPU shared with another busy task (a CPU burner, an app).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CpuContention {
    /// Share of the CPU the other task takes (0 ≤ share ≤ 0.95).
    pub share: f64,
    /// Its scheduler slice (µs): a preemption lasts Exp(slice); with probability `share` a new
    /// poll first waits Uniform(0, slice).
    pub slice_us: f64,
}

impl Default for CpuContention {
    fn default() -> Self {
        CpuContention {
            share: 0.3,
            slice_us: 1000.0,
        }
    }
}

/// Scheduling stalls of the receive path.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Stalls {
    /// Stalls per second (Poisson).
    pub rate_hz: f64,
    /// Mean stall length (µs).
    pub mean_us: f64,
    /// 0: exponential lengths; α > 1: Pareto lengths with shape α and the same mean (heavy tail).
    pub tail_alpha: f64,
}

impl Default for Stalls {
    fn default() -> Self {
        Stalls {
            rate_hz: 2.0,
            mean_us: 300.0,
            tail_alpha: 0.0,
        }
    }
}

/// The socket's receive queue and the app reading it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SocketQueue {
    /// Packets the queue holds (0 = unlimited); a packet that finds it full is dropped.
    pub limit: u32,
    /// The app's cost per read (µs).
    pub app_us: f64,
    /// The app's wake-up latency when data arrives on an empty queue (µs, fixed + Exp(same)).
    pub app_wake_us: f64,
    /// Stamp at the app's read (a user-space clock) instead of the kernel's receive time.
    pub stamp_at_app: bool,
}

impl Default for SocketQueue {
    fn default() -> Self {
        SocketQueue {
            limit: 0,
            app_us: 2.0,
            app_wake_us: 10.0,
            stamp_at_app: false,
        }
    }
}

/// One mechanism of a receive path (see the module docs).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Stage {
    /// See [`PerMpduHandoff`].
    PerMpduHandoff(PerMpduHandoff),
    /// See [`Bus`].
    Bus(Bus),
    /// See [`TimerTick`].
    TimerTick(TimerTick),
    /// See [`Interrupt`].
    Interrupt(Interrupt),
    /// See [`Napi`].
    Napi(Napi),
    /// See [`ThreadedNapi`].
    ThreadedNapi(ThreadedNapi),
    /// See [`PerPacket`].
    PerPacket(PerPacket),
    /// See [`CpuContention`].
    CpuContention(CpuContention),
    /// See [`Stalls`].
    Stalls(Stalls),
    /// See [`SocketQueue`].
    SocketQueue(SocketQueue),
}

impl Stage {
    /// The `kind` tag.
    pub fn kind(&self) -> &'static str {
        match self {
            Stage::PerMpduHandoff(_) => "per_mpdu_handoff",
            Stage::Bus(_) => "bus",
            Stage::TimerTick(_) => "timer_tick",
            Stage::Interrupt(_) => "interrupt",
            Stage::Napi(_) => "napi",
            Stage::ThreadedNapi(_) => "threaded_napi",
            Stage::PerPacket(_) => "per_packet",
            Stage::CpuContention(_) => "cpu_contention",
            Stage::Stalls(_) => "stalls",
            Stage::SocketQueue(_) => "socket_queue",
        }
    }
}

/// A receive path: a name and its stages (an empty list = host time is the PPDU end).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReceivePath {
    /// A label (datasets group rows by it).
    pub name: String,
    /// The mechanisms, at most one of each kind.
    pub stages: Vec<Stage>,
}

/// A receive path whose numbers are out of range.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("receive path {path:?}: {field} = {value}: {allowed}")]
pub struct NoiseError {
    /// The path's name.
    pub path: String,
    /// Field, e.g. `napi.budget`.
    pub field: String,
    /// The value given.
    pub value: String,
    /// What is allowed.
    pub allowed: &'static str,
}

/// A checked [`ReceivePath`].
#[derive(Clone, Debug, PartialEq)]
pub struct ValidReceivePath {
    path: ReceivePath,
    handoff: Option<PerMpduHandoff>,
    bus: Option<Bus>,
    tick: Option<TimerTick>,
    irq: Interrupt,
    napi: Napi,
    threaded: Option<ThreadedNapi>,
    cost: PerPacket,
    contention: Option<CpuContention>,
    stalls: Option<Stalls>,
    socket: Option<SocketQueue>,
    /// No stage at all: host time = PPDU end.
    identity: bool,
}

impl ValidReceivePath {
    /// The path as given.
    pub fn path(&self) -> &ReceivePath {
        &self.path
    }
}

impl ReceivePath {
    /// A receive path from TOML text (`name`, `[[stages]]`; datasets/README.md), checked by
    /// [`ReceivePath::check`] when used.
    pub fn from_toml(text: &str) -> Result<ReceivePath, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    /// A named path with these stages.
    pub fn new(name: impl Into<String>, stages: Vec<Stage>) -> ReceivePath {
        ReceivePath {
            name: name.into(),
            stages,
        }
    }

    /// Check every number; the error names the stage field and the allowed range.
    pub fn check(self) -> Result<ValidReceivePath, NoiseError> {
        let err = |field: String, value: String, allowed: &'static str| NoiseError {
            path: self.name.clone(),
            field,
            value,
            allowed,
        };
        let mut seen: Vec<&'static str> = Vec::new();
        for s in &self.stages {
            if seen.contains(&s.kind()) {
                return Err(err("stages".into(), s.kind().into(), "at most one stage of each kind"));
            }
            seen.push(s.kind());
            for (name, v) in stage_numbers(s) {
                if !(v.is_finite() && v >= 0.0) {
                    return Err(err(
                        format!("{}.{name}", s.kind()),
                        v.to_string(),
                        "a finite number >= 0",
                    ));
                }
            }
            match s {
                Stage::TimerTick(t) if !(t.period_us >= 1.0 && t.period_us <= 1e6) => {
                    return Err(err(
                        "timer_tick.period_us".into(),
                        t.period_us.to_string(),
                        "1..=1000000 µs",
                    ));
                }
                Stage::Bus(b) if !(b.per_packet_us > 0.0 && b.per_packet_us <= 1e5) => {
                    return Err(err(
                        "bus.per_packet_us".into(),
                        b.per_packet_us.to_string(),
                        "> 0 and at most 100000 µs",
                    ));
                }
                Stage::Napi(n) if n.budget == 0 => {
                    return Err(err("napi.budget".into(), "0".into(), "at least 1 packet"));
                }
                Stage::Interrupt(i) if i.adaptive && i.adaptive_min_us > i.adaptive_max_us => {
                    return Err(err(
                        "interrupt.adaptive_min_us".into(),
                        i.adaptive_min_us.to_string(),
                        "at most adaptive_max_us",
                    ));
                }
                Stage::CpuContention(c) if c.share > 0.95 => {
                    return Err(err("cpu_contention.share".into(), c.share.to_string(), "0..=0.95"));
                }
                Stage::CpuContention(c) if c.slice_us <= 0.0 => {
                    return Err(err("cpu_contention.slice_us".into(), c.slice_us.to_string(), "> 0"));
                }
                Stage::Stalls(st) if st.tail_alpha != 0.0 && st.tail_alpha <= 1.05 => {
                    return Err(err(
                        "stalls.tail_alpha".into(),
                        st.tail_alpha.to_string(),
                        "0 (exponential) or > 1.05 (Pareto)",
                    ));
                }
                _ => {}
            }
        }
        let mut v = ValidReceivePath {
            handoff: None,
            bus: None,
            tick: None,
            irq: Interrupt {
                latency_us: 0.0,
                jitter_us: 0.0,
                ..Interrupt::default()
            },
            napi: Napi {
                budget: u32::MAX,
                yield_us: 0.0,
                gro_batch: 0,
            },
            threaded: None,
            cost: PerPacket {
                us: 0.0,
                jitter_us: 0.0,
                load_jitter_us_per_mpps: 0.0,
            },
            contention: None,
            stalls: None,
            socket: None,
            identity: self.stages.is_empty(),
            path: self.clone(),
        };
        for s in self.stages {
            match s {
                Stage::PerMpduHandoff(x) => v.handoff = Some(x),
                Stage::Bus(x) => v.bus = Some(x),
                Stage::TimerTick(x) => v.tick = Some(x),
                Stage::Interrupt(x) => v.irq = x,
                Stage::Napi(x) => v.napi = x,
                Stage::ThreadedNapi(x) => v.threaded = Some(x),
                Stage::PerPacket(x) => v.cost = x,
                Stage::CpuContention(x) => v.contention = (x.share > 0.0).then_some(x),
                Stage::Stalls(x) => v.stalls = (x.rate_hz > 0.0 && x.mean_us > 0.0).then_some(x),
                Stage::SocketQueue(x) => v.socket = Some(x),
            }
        }
        Ok(v)
    }
}

fn stage_numbers(s: &Stage) -> Vec<(&'static str, f64)> {
    match s {
        Stage::PerMpduHandoff(x) => vec![("preamble_us", x.preamble_us)],
        Stage::Bus(x) => vec![("per_packet_us", x.per_packet_us)],
        Stage::TimerTick(x) => vec![("period_us", x.period_us), ("slack_us", x.slack_us)],
        Stage::Interrupt(x) => vec![
            ("rx_usecs", x.rx_usecs),
            ("adaptive_packets", x.adaptive_packets),
            ("adaptive_min_us", x.adaptive_min_us),
            ("adaptive_max_us", x.adaptive_max_us),
            ("latency_us", x.latency_us),
            ("jitter_us", x.jitter_us),
        ],
        Stage::Napi(x) => vec![("yield_us", x.yield_us)],
        Stage::ThreadedNapi(x) => vec![("wake_us", x.wake_us), ("wake_jitter_us", x.wake_jitter_us)],
        Stage::PerPacket(x) => vec![
            ("us", x.us),
            ("jitter_us", x.jitter_us),
            ("load_jitter_us_per_mpps", x.load_jitter_us_per_mpps),
        ],
        Stage::CpuContention(x) => vec![("share", x.share), ("slice_us", x.slice_us)],
        Stage::Stalls(x) => vec![
            ("rate_hz", x.rate_hz),
            ("mean_us", x.mean_us),
            ("tail_alpha", x.tail_alpha),
        ],
        Stage::SocketQueue(x) => vec![("app_us", x.app_us), ("app_wake_us", x.app_wake_us)],
    }
}

// ---------------------------------------------------------------------------------------------
// Presets and random receivers

/// Named receive paths.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NoisePreset {
    /// Host time = MAC time (every MPDU of an A-MPDU at its PPDU end).
    None,
    /// A laptop NIC: per-A-MPDU interrupts, fast softirq, rare short stalls.
    Laptop,
    /// A phone: interrupt moderation, slow per-packet path, load-dependent jitter, stalls.
    Phone,
    /// A receive path drawn per run from [`RandomReceiver`]'s ranges (seeded by the run).
    Random,
}

impl FromStr for NoisePreset {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "none" => Ok(NoisePreset::None),
            "laptop" => Ok(NoisePreset::Laptop),
            "phone" => Ok(NoisePreset::Phone),
            "random" => Ok(NoisePreset::Random),
            _ => Err(format!("unknown noise preset {s:?}: use none, laptop, phone or random")),
        }
    }
}

impl NoisePreset {
    /// The preset's receive path (`Random` has none of its own: see [`RandomReceiver::draw`]).
    pub fn path(self) -> Option<ReceivePath> {
        let stages = match self {
            NoisePreset::None => Vec::new(),
            NoisePreset::Random => return None,
            NoisePreset::Laptop => vec![
                Stage::Interrupt(Interrupt {
                    rx_usecs: 0.0,
                    latency_us: 12.0,
                    jitter_us: 4.0,
                    ..Interrupt::default()
                }),
                Stage::Napi(Napi {
                    budget: 64,
                    yield_us: 3.0,
                    gro_batch: 0,
                }),
                Stage::PerPacket(PerPacket {
                    us: 1.5,
                    jitter_us: 0.5,
                    load_jitter_us_per_mpps: 5.0,
                }),
                Stage::Stalls(Stalls {
                    rate_hz: 2.0,
                    mean_us: 300.0,
                    tail_alpha: 0.0,
                }),
            ],
            NoisePreset::Phone => vec![
                Stage::Interrupt(Interrupt {
                    rx_usecs: 40.0,
                    latency_us: 30.0,
                    jitter_us: 15.0,
                    ..Interrupt::default()
                }),
                Stage::Napi(Napi {
                    budget: 64,
                    yield_us: 15.0,
                    gro_batch: 0,
                }),
                Stage::PerPacket(PerPacket {
                    us: 9.0,
                    jitter_us: 4.0,
                    load_jitter_us_per_mpps: 120.0,
                }),
                Stage::Stalls(Stalls {
                    rate_hz: 8.0,
                    mean_us: 1_500.0,
                    tail_alpha: 0.0,
                }),
            ],
        };
        let name = format!("{self:?}").to_ascii_lowercase();
        Some(ReceivePath::new(name, stages))
    }
}

impl NoisePreset {
    /// The receive path of a run seeded `seed`: the preset's, or for `Random` one drawn from
    /// `ranges` (default ranges when `None`) with an RNG seeded from `seed`.
    pub fn resolve(self, seed: u64, ranges: Option<&RandomReceiver>) -> Option<ReceivePath> {
        use rand::SeedableRng;
        match self {
            NoisePreset::Random => {
                let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
                rng.set_stream(200);
                let def = RandomReceiver::default();
                Some(ranges.unwrap_or(&def).draw(format!("random-{seed}"), &mut rng))
            }
            p => p.path(),
        }
    }
}

/// A closed range `[lo, hi]` drawn uniformly (or log-uniformly where a field says so).
pub type Range = [f64; 2];

/// The ranges [`NoisePreset::Random`] draws receive paths from: per stage the probability that
/// the receiver has it, and ranges for its parameters. The defaults span laptops, phones,
/// USB dongles and busy servers; each is documented in `datasets/README.md`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RandomReceiver {
    /// P(per-MPDU hand-off).
    pub p_per_mpdu: f64,
    /// Preamble (µs).
    pub preamble_us: Range,
    /// P(timer-driven delivery).
    pub p_timer: f64,
    /// Tick period (µs, log-uniform).
    pub tick_period_us: Range,
    /// Tick slack as a fraction of the period.
    pub tick_slack_frac: Range,
    /// P(interrupt moderation).
    pub p_moderation: f64,
    /// rx-usecs (µs).
    pub rx_usecs: Range,
    /// P(adaptive moderation | moderation).
    pub p_adaptive: f64,
    /// Interrupt latency (µs).
    pub irq_latency_us: Range,
    /// Interrupt jitter mean (µs).
    pub irq_jitter_us: Range,
    /// NAPI budgets to pick from.
    pub budgets: Vec<u32>,
    /// Pause when the budget runs out (µs).
    pub yield_us: Range,
    /// P(GRO batches).
    pub p_gro: f64,
    /// GRO batch sizes to pick from.
    pub gro_batches: Vec<u32>,
    /// P(threaded NAPI).
    pub p_threaded: f64,
    /// Thread wake-up (µs).
    pub wake_us: Range,
    /// Thread wake-up jitter mean (µs).
    pub wake_jitter_us: Range,
    /// Per-packet cost (µs, log-uniform).
    pub per_packet_us: Range,
    /// Per-packet jitter mean as a fraction of the cost.
    pub per_packet_jitter_frac: Range,
    /// Extra jitter per Mpacket/s (µs).
    pub load_jitter_us_per_mpps: Range,
    /// P(CPU contention).
    pub p_contention: f64,
    /// Share of the CPU taken by the other task.
    pub contention_share: Range,
    /// Its slice (µs).
    pub contention_slice_us: Range,
    /// P(stalls).
    pub p_stalls: f64,
    /// Stall rate (Hz).
    pub stall_rate_hz: Range,
    /// Stall mean (µs, log-uniform).
    pub stall_mean_us: Range,
    /// P(heavy-tailed stalls | stalls).
    pub p_heavy_tail: f64,
    /// Pareto shape of heavy-tailed stalls.
    pub tail_alpha: Range,
    /// P(socket queue model).
    pub p_socket: f64,
    /// P(app-side stamps | socket queue).
    pub p_app_stamp: f64,
    /// Socket queue limit (packets).
    pub socket_limit: Range,
    /// App per-read cost (µs).
    pub app_us: Range,
    /// App wake-up (µs).
    pub app_wake_us: Range,
    /// P(a serialising bus between radio and host). 0 by default, so that datasets made before
    /// it draw the very same receivers; drawn last, so that turning it on adds a bus to some
    /// receivers and leaves every other stage of every receiver as it was.
    pub p_bus: f64,
    /// The bus's transfer time per packet (µs, log-uniform; for 1514-byte frames 4 µs ≈ 3 Gbit/s,
    /// 18 µs ≈ 670 Mbit/s).
    pub bus_per_packet_us: Range,
}

impl Default for RandomReceiver {
    fn default() -> Self {
        RandomReceiver {
            p_per_mpdu: 0.3,
            preamble_us: [20.0, 60.0],
            p_timer: 0.12,
            tick_period_us: [125.0, 1000.0],
            tick_slack_frac: [0.0, 0.2],
            p_moderation: 0.6,
            rx_usecs: [8.0, 100.0],
            p_adaptive: 0.4,
            irq_latency_us: [2.0, 40.0],
            irq_jitter_us: [0.5, 20.0],
            budgets: vec![8, 16, 64, 64, 64, 300],
            yield_us: [1.0, 30.0],
            p_gro: 0.35,
            gro_batches: vec![8, 8, 16, 32, 64],
            p_threaded: 0.3,
            wake_us: [3.0, 40.0],
            wake_jitter_us: [1.0, 40.0],
            per_packet_us: [0.5, 12.0],
            per_packet_jitter_frac: [0.05, 0.6],
            load_jitter_us_per_mpps: [0.0, 150.0],
            p_contention: 0.25,
            contention_share: [0.1, 0.6],
            contention_slice_us: [300.0, 4000.0],
            p_stalls: 0.7,
            stall_rate_hz: [0.5, 20.0],
            stall_mean_us: [100.0, 3000.0],
            p_heavy_tail: 0.4,
            tail_alpha: [1.3, 3.0],
            p_socket: 0.3,
            p_app_stamp: 0.4,
            socket_limit: [256.0, 4096.0],
            app_us: [0.5, 5.0],
            app_wake_us: [3.0, 40.0],
            p_bus: 0.0,
            bus_per_packet_us: [4.0, 18.0],
        }
    }
}

fn uni<R: Rng>(rng: &mut R, r: Range) -> f64 {
    let (lo, hi) = (r[0].min(r[1]), r[0].max(r[1]));
    if hi <= lo {
        return lo;
    }
    lo + (hi - lo) * rng.random::<f64>()
}

fn log_uni<R: Rng>(rng: &mut R, r: Range) -> f64 {
    let (lo, hi) = (r[0].min(r[1]).max(1e-9), r[0].max(r[1]).max(1e-9));
    (lo.ln() + (hi.ln() - lo.ln()) * rng.random::<f64>()).exp()
}

fn pick<R: Rng>(rng: &mut R, v: &[u32], fallback: u32) -> u32 {
    if v.is_empty() {
        return fallback;
    }
    v[rng.random_range(0..v.len())]
}

impl RandomReceiver {
    /// Check probabilities and ranges.
    pub fn check(&self) -> Result<(), NoiseError> {
        let err = |field: &str, value: String, allowed: &'static str| NoiseError {
            path: "random".into(),
            field: field.into(),
            value,
            allowed,
        };
        let ps = [
            ("p_per_mpdu", self.p_per_mpdu),
            ("p_timer", self.p_timer),
            ("p_moderation", self.p_moderation),
            ("p_adaptive", self.p_adaptive),
            ("p_gro", self.p_gro),
            ("p_threaded", self.p_threaded),
            ("p_contention", self.p_contention),
            ("p_stalls", self.p_stalls),
            ("p_heavy_tail", self.p_heavy_tail),
            ("p_socket", self.p_socket),
            ("p_app_stamp", self.p_app_stamp),
            ("p_bus", self.p_bus),
        ];
        for (f, p) in ps {
            if !(0.0..=1.0).contains(&p) {
                return Err(err(f, p.to_string(), "a probability in 0..=1"));
            }
        }
        let ranges = [
            ("preamble_us", self.preamble_us),
            ("tick_period_us", self.tick_period_us),
            ("tick_slack_frac", self.tick_slack_frac),
            ("rx_usecs", self.rx_usecs),
            ("irq_latency_us", self.irq_latency_us),
            ("irq_jitter_us", self.irq_jitter_us),
            ("yield_us", self.yield_us),
            ("wake_us", self.wake_us),
            ("wake_jitter_us", self.wake_jitter_us),
            ("per_packet_us", self.per_packet_us),
            ("per_packet_jitter_frac", self.per_packet_jitter_frac),
            ("load_jitter_us_per_mpps", self.load_jitter_us_per_mpps),
            ("contention_share", self.contention_share),
            ("contention_slice_us", self.contention_slice_us),
            ("stall_rate_hz", self.stall_rate_hz),
            ("stall_mean_us", self.stall_mean_us),
            ("tail_alpha", self.tail_alpha),
            ("socket_limit", self.socket_limit),
            ("app_us", self.app_us),
            ("app_wake_us", self.app_wake_us),
            ("bus_per_packet_us", self.bus_per_packet_us),
        ];
        for (f, r) in ranges {
            if !(r[0].is_finite() && r[1].is_finite() && r[0] >= 0.0 && r[0] <= r[1]) {
                return Err(err(f, format!("{r:?}"), "[lo, hi] with 0 <= lo <= hi"));
            }
        }
        if self.tick_period_us[0] < 1.0 {
            return Err(err(
                "tick_period_us",
                format!("{:?}", self.tick_period_us),
                "periods >= 1 µs",
            ));
        }
        if self.contention_share[1] > 0.95 {
            return Err(err(
                "contention_share",
                format!("{:?}", self.contention_share),
                "shares <= 0.95",
            ));
        }
        if self.tail_alpha[0] <= 1.05 {
            return Err(err("tail_alpha", format!("{:?}", self.tail_alpha), "shapes > 1.05"));
        }
        if self.bus_per_packet_us[0] <= 0.0 || self.bus_per_packet_us[1] > 1e5 {
            return Err(err(
                "bus_per_packet_us",
                format!("{:?}", self.bus_per_packet_us),
                "times > 0 and at most 100000 µs",
            ));
        }
        if self.budgets.contains(&0) {
            return Err(err("budgets", format!("{:?}", self.budgets), "budgets >= 1"));
        }
        Ok(())
    }

    /// Draw one receive path named `name` (deterministic for a given RNG state).
    pub fn draw<R: Rng>(&self, name: impl Into<String>, rng: &mut R) -> ReceivePath {
        let mut st = Vec::new();
        if rng.random_bool(self.p_per_mpdu) {
            st.push(Stage::PerMpduHandoff(PerMpduHandoff {
                preamble_us: uni(rng, self.preamble_us),
            }));
        }
        if rng.random_bool(self.p_timer) {
            let period = log_uni(rng, self.tick_period_us);
            st.push(Stage::TimerTick(TimerTick {
                period_us: period,
                slack_us: period * uni(rng, self.tick_slack_frac),
            }));
        }
        let moderated = rng.random_bool(self.p_moderation);
        let adaptive = moderated && rng.random_bool(self.p_adaptive);
        let rx = if moderated { log_uni(rng, self.rx_usecs) } else { 0.0 };
        st.push(Stage::Interrupt(Interrupt {
            rx_usecs: rx,
            adaptive,
            adaptive_packets: uni(rng, [4.0, 48.0]),
            adaptive_min_us: 0.0,
            adaptive_max_us: rx.max(self.rx_usecs[1]),
            latency_us: uni(rng, self.irq_latency_us),
            jitter_us: uni(rng, self.irq_jitter_us),
        }));
        let gro = if rng.random_bool(self.p_gro) {
            pick(rng, &self.gro_batches, 8)
        } else {
            0
        };
        st.push(Stage::Napi(Napi {
            budget: pick(rng, &self.budgets, 64),
            yield_us: uni(rng, self.yield_us),
            gro_batch: gro,
        }));
        if rng.random_bool(self.p_threaded) {
            st.push(Stage::ThreadedNapi(ThreadedNapi {
                wake_us: uni(rng, self.wake_us),
                wake_jitter_us: uni(rng, self.wake_jitter_us),
            }));
        }
        let us = log_uni(rng, self.per_packet_us);
        st.push(Stage::PerPacket(PerPacket {
            us,
            jitter_us: us * uni(rng, self.per_packet_jitter_frac),
            load_jitter_us_per_mpps: uni(rng, self.load_jitter_us_per_mpps),
        }));
        if rng.random_bool(self.p_contention) {
            st.push(Stage::CpuContention(CpuContention {
                share: uni(rng, self.contention_share),
                slice_us: log_uni(rng, self.contention_slice_us),
            }));
        }
        if rng.random_bool(self.p_stalls) {
            let heavy = rng.random_bool(self.p_heavy_tail);
            st.push(Stage::Stalls(Stalls {
                rate_hz: uni(rng, self.stall_rate_hz),
                mean_us: log_uni(rng, self.stall_mean_us),
                tail_alpha: if heavy { uni(rng, self.tail_alpha) } else { 0.0 },
            }));
        }
        if rng.random_bool(self.p_socket) {
            st.push(Stage::SocketQueue(SocketQueue {
                limit: uni(rng, self.socket_limit).round() as u32,
                app_us: uni(rng, self.app_us),
                app_wake_us: uni(rng, self.app_wake_us),
                stamp_at_app: rng.random_bool(self.p_app_stamp),
            }));
        }
        // Last, so that the draws above do not depend on p_bus (see its docs). Not drawn at all
        // when off: the RNG is left as it was.
        if self.p_bus > 0.0 && rng.random_bool(self.p_bus) {
            st.push(Stage::Bus(Bus {
                per_packet_us: log_uni(rng, self.bus_per_packet_us),
            }));
        }
        ReceivePath::new(name, st)
    }
}

// ---------------------------------------------------------------------------------------------
// The model

/// The receive-path model described in the module docs.
pub struct Receiver<R: Rng> {
    p: ValidReceivePath,
    rng: R,
    /// When the poll has finished everything it was given (a packet ready by then joins it).
    cpu_free: Ts,
    in_poll: u32,
    next_stall: Ts,
    next_preempt: Ts,
    last_mac: Option<Ts>,
    load_mpps: f64,
    tick: Option<(u64, Duration)>,
    ready: Vec<Ts>,
    /// When the bus has carried the last packet it was given.
    bus_free: Ts,
    group: Vec<usize>,
    socket_reads: VecDeque<Ts>,
    app_free: Ts,
    last_out: Ts,
    dropped: u64,
}

use super::exp_sample as exp;

/// Pareto sample with shape `alpha` > 1 and mean `mean`.
fn pareto<R: Rng>(rng: &mut R, alpha: f64, mean: f64) -> f64 {
    let xm = mean * (alpha - 1.0) / alpha;
    xm / (1.0 - rng.random::<f64>()).powf(1.0 / alpha)
}

fn us(x: f64) -> Duration {
    Duration::from_nanos((x * 1000.0).clamp(0.0, 1e15) as u64)
}

impl<R: Rng> Receiver<R> {
    /// A model of a checked path with its own RNG.
    pub fn new(p: ValidReceivePath, mut rng: R) -> Self {
        let next_stall = match &p.stalls {
            Some(s) => Ts::ZERO + us(exp(&mut rng, 1e6 / s.rate_hz)),
            None => Ts(u64::MAX),
        };
        let mut r = Receiver {
            p,
            rng,
            cpu_free: Ts::ZERO,
            in_poll: 0,
            next_stall,
            next_preempt: Ts(u64::MAX),
            last_mac: None,
            load_mpps: 0.0,
            tick: None,
            ready: Vec::new(),
            bus_free: Ts::ZERO,
            group: Vec::new(),
            socket_reads: VecDeque::new(),
            app_free: Ts::ZERO,
            last_out: Ts::ZERO,
            dropped: 0,
        };
        r.next_preempt = r.draw_preempt(Ts::ZERO);
        r
    }

    /// Next preemption by the contending task, counted from `from`.
    fn draw_preempt(&mut self, from: Ts) -> Ts {
        match &self.p.contention {
            // Preemptions arrive at rate share / ((1 − share)·slice) while the path runs, each
            // lasting Exp(slice): the other task then holds `share` of the CPU.
            Some(c) => {
                let mean_gap = c.slice_us * (1.0 - c.share) / c.share;
                from + us(exp(&mut self.rng, mean_gap))
            }
            None => Ts(u64::MAX),
        }
    }

    /// `t` pushed past any stall or preemption that began by then.
    fn available(&mut self, mut t: Ts) -> Ts {
        loop {
            if t >= self.next_stall {
                let s = self.p.stalls.clone().unwrap_or_default();
                let len = if s.tail_alpha > 0.0 {
                    pareto(&mut self.rng, s.tail_alpha, s.mean_us)
                } else {
                    exp(&mut self.rng, s.mean_us)
                };
                t = t.max(self.next_stall + us(len));
                self.next_stall = t + us(exp(&mut self.rng, 1e6 / s.rate_hz.max(1e-9)));
                continue;
            }
            if t >= self.next_preempt {
                let slice = self.p.contention.as_ref().map_or(0.0, |c| c.slice_us);
                t = t.max(self.next_preempt + us(exp(&mut self.rng, slice)));
                self.next_preempt = self.draw_preempt(t);
                continue;
            }
            return t;
        }
    }

    /// Interrupt moderation delay for a new interrupt (µs).
    fn moderation_us(&self) -> f64 {
        let i = &self.p.irq;
        if i.adaptive {
            let d = if self.load_mpps > 1e-6 {
                i.adaptive_packets / self.load_mpps
            } else {
                i.adaptive_min_us
            };
            d.clamp(i.adaptive_min_us, i.adaptive_max_us)
        } else {
            i.rx_usecs
        }
    }

    fn tick(&mut self, r: Ts) -> Ts {
        let Some(t) = &self.p.tick else { return r };
        let period = (t.period_us * 1000.0).max(1.0) as u64;
        let slack_us = t.slack_us;
        let k = r.as_nanos().div_ceil(period);
        let slack = match self.tick {
            Some((kk, s)) if kk == k => s,
            _ => {
                let s = us(slack_us * self.rng.random::<f64>());
                self.tick = Some((k, s));
                s
            }
        };
        Ts(k.saturating_mul(period)) + slack
    }

    fn emit(&mut self, stamp: Ts) -> Option<Ts> {
        let stamp = stamp.max(self.last_out);
        self.last_out = stamp;
        let Some(s) = self.p.socket.clone() else {
            return Some(stamp);
        };
        while self.socket_reads.front().is_some_and(|&a| a <= stamp) {
            self.socket_reads.pop_front();
        }
        if s.limit > 0 && self.socket_reads.len() >= s.limit as usize {
            self.dropped += 1;
            return None;
        }
        let begin = if self.socket_reads.is_empty() && self.app_free <= stamp {
            stamp + us(s.app_wake_us + exp(&mut self.rng, s.app_wake_us))
        } else {
            self.app_free.max(stamp)
        };
        let read = begin + us(s.app_us);
        self.app_free = read;
        self.socket_reads.push_back(read);
        Some(if s.stamp_at_app { read } else { stamp })
    }
}

impl<R: Rng> NoiseModel for Receiver<R> {
    fn on_ppdu(&mut self, ppdu: Ppdu<'_>, out: &mut Vec<Option<Ts>>) {
        out.clear();
        let n = ppdu.n;
        if n == 0 {
            return;
        }
        if self.p.identity {
            out.extend(std::iter::repeat_n(Some(ppdu.end), n));
            return;
        }
        if let Some(last) = self.last_mac {
            let dt = ppdu.end.saturating_since(last).as_secs_f64().max(1e-6);
            self.load_mpps = 0.9 * self.load_mpps + 0.1 * (n as f64 / dt / 1e6);
        }
        self.last_mac = Some(ppdu.end);
        // When each MPDU is ready for the host.
        self.ready.clear();
        let grouped = ppdu.mpdu_of.len() == n;
        let mpdus = if grouped {
            ppdu.mpdu_of.last().map_or(n, |&m| m as usize + 1)
        } else {
            n
        };
        for i in 0..n {
            let r = match &self.p.handoff {
                Some(h) => {
                    let k = if grouped { ppdu.mpdu_of[i] as usize } else { i };
                    let dur = ppdu.end.saturating_since(ppdu.start).as_nanos() as f64;
                    let pre = (h.preamble_us * 1000.0).min(dur);
                    ppdu.start + Duration::from_nanos((pre + (dur - pre) * (k + 1) as f64 / mpdus as f64) as u64)
                }
                None => ppdu.end,
            };
            let r = match &self.p.bus {
                Some(b) => {
                    self.bus_free = r.max(self.bus_free) + us(b.per_packet_us);
                    self.bus_free
                }
                None => r,
            };
            let r = self.tick(r);
            self.ready.push(r);
        }
        let mut stamps: Vec<Ts> = Vec::with_capacity(n);
        let jitter_mean = self.p.cost.jitter_us + self.p.cost.load_jitter_us_per_mpps * self.load_mpps;
        self.group.clear();
        for i in 0..n {
            let r = self.ready[i];
            let mut t = if r > self.cpu_free {
                // The poll is idle: a new interrupt, a new poll.
                self.flush_group(&mut stamps);
                let fire = r + us(self.moderation_us());
                let mut start = fire + us(self.p.irq.latency_us + exp(&mut self.rng, self.p.irq.jitter_us));
                if let Some(th) = self.p.threaded.clone() {
                    start = start + us(th.wake_us + exp(&mut self.rng, th.wake_jitter_us));
                    if let Some(c) = self.p.contention.clone() {
                        if self.rng.random_bool(c.share.clamp(0.0, 1.0)) {
                            start = start + us(c.slice_us * self.rng.random::<f64>());
                        }
                    }
                }
                self.in_poll = 0;
                start
            } else {
                self.cpu_free
            };
            t = self.available(t);
            if self.in_poll >= self.p.napi.budget {
                self.flush_group(&mut stamps);
                t = self.available(t + us(self.p.napi.yield_us));
                self.in_poll = 0;
            }
            t = t + us(self.p.cost.us + exp(&mut self.rng, jitter_mean));
            self.in_poll += 1;
            self.cpu_free = t;
            stamps.push(t);
            if self.p.napi.gro_batch > 0 {
                self.group.push(i);
                let dry = i + 1 == n || self.ready[i + 1] > t;
                if self.group.len() >= self.p.napi.gro_batch as usize || dry {
                    self.flush_group(&mut stamps);
                }
            }
        }
        self.flush_group(&mut stamps);
        for s in stamps {
            let o = self.emit(s);
            out.push(o);
        }
    }

    fn dropped(&self) -> u64 {
        self.dropped
    }
}

impl<R: Rng> Receiver<R> {
    /// A GRO batch reaches the stack: every packet in it is stamped when the last one is done.
    fn flush_group(&mut self, stamps: &mut [Ts]) {
        if let Some(&last) = self.group.last() {
            let at = stamps[last];
            for &j in &self.group {
                stamps[j] = at;
            }
        }
        self.group.clear();
    }
}

/// Host time = MAC time.
pub struct NoNoise;

impl NoiseModel for NoNoise {
    fn on_ppdu(&mut self, ppdu: Ppdu<'_>, out: &mut Vec<Option<Ts>>) {
        out.clear();
        out.extend(std::iter::repeat_n(Some(ppdu.end), ppdu.n));
    }
}

/// A boxed model for `path` (`None`: host time = PPDU end) with its own RNG.
pub fn model_for<R: Rng + 'static>(path: Option<&ValidReceivePath>, rng: R) -> Box<dyn NoiseModel> {
    match path {
        Some(p) if !p.identity => Box::new(Receiver::new(p.clone(), rng)),
        _ => Box::new(NoNoise),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn rx(stages: Vec<Stage>) -> Receiver<ChaCha8Rng> {
        Receiver::new(
            ReceivePath::new("t", stages).check().unwrap(),
            ChaCha8Rng::seed_from_u64(1),
        )
    }

    fn ppdu(start_us: u64, end_us: u64, n: usize) -> Ppdu<'static> {
        Ppdu {
            start: Ts::from_micros(start_us),
            end: Ts::from_micros(end_us),
            n,
            mpdu_of: &[],
        }
    }

    fn run(r: &mut Receiver<ChaCha8Rng>, p: Ppdu<'_>) -> Vec<u64> {
        let mut out = Vec::new();
        r.on_ppdu(p, &mut out);
        out.into_iter().map(|t| t.map_or(u64::MAX, |t| t.as_nanos())).collect()
    }

    fn cost(us: f64) -> Stage {
        Stage::PerPacket(PerPacket {
            us,
            jitter_us: 0.0,
            load_jitter_us_per_mpps: 0.0,
        })
    }

    fn irq(rx_usecs: f64, latency_us: f64) -> Stage {
        Stage::Interrupt(Interrupt {
            rx_usecs,
            latency_us,
            jitter_us: 0.0,
            ..Interrupt::default()
        })
    }

    #[test]
    fn no_stage_is_the_ppdu_end() {
        let mut r = rx(vec![]);
        assert_eq!(run(&mut r, ppdu(0, 100, 3)), vec![100_000; 3]);
    }

    #[test]
    fn per_packet_cost_spaces_packets_after_the_interrupt() {
        // PPDU ends at 100 µs; interrupt after 10 µs moderation + 5 µs latency; 2 µs each.
        let mut r = rx(vec![irq(10.0, 5.0), cost(2.0)]);
        assert_eq!(run(&mut r, ppdu(0, 100, 3)), vec![117_000, 119_000, 121_000]);
        // The next PPDU finds the poll idle: a new interrupt.
        assert_eq!(run(&mut r, ppdu(200, 300, 2)), vec![317_000, 319_000]);
        // A PPDU ready while the poll is still busy joins it without a new interrupt.
        let mut r = rx(vec![irq(0.0, 0.0), cost(50.0)]);
        assert_eq!(run(&mut r, ppdu(0, 100, 2)), vec![150_000, 200_000]);
        assert_eq!(run(&mut r, ppdu(150, 180, 1)), vec![250_000]);
    }

    #[test]
    fn per_mpdu_handoff_releases_mpdus_during_the_ppdu() {
        // 4 MPDUs, PPDU 0–440 µs, preamble 40 µs: ready at 140, 240, 340, 440 µs.
        let mut r = rx(vec![
            Stage::PerMpduHandoff(PerMpduHandoff { preamble_us: 40.0 }),
            cost(1.0),
        ]);
        assert_eq!(run(&mut r, ppdu(0, 440, 4)), vec![141_000, 241_000, 341_000, 441_000]);
        // The same PPDU carrying 2 MPDUs of 2 packets each (A-MSDUs): an MPDU's packets are
        // ready together, at 240 and 440 µs; each still costs its 1 µs.
        let mut r = rx(vec![
            Stage::PerMpduHandoff(PerMpduHandoff { preamble_us: 40.0 }),
            cost(1.0),
        ]);
        let p = Ppdu {
            mpdu_of: &[0, 0, 1, 1],
            ..ppdu(0, 440, 4)
        };
        assert_eq!(run(&mut r, p), vec![241_000, 242_000, 441_000, 442_000]);
    }

    #[test]
    fn napi_budget_pauses_the_poll() {
        let mut r = rx(vec![
            irq(0.0, 0.0),
            cost(1.0),
            Stage::Napi(Napi {
                budget: 2,
                yield_us: 10.0,
                gro_batch: 0,
            }),
        ]);
        assert_eq!(
            run(&mut r, ppdu(0, 100, 5)),
            vec![101_000, 102_000, 113_000, 114_000, 125_000]
        );
    }

    #[test]
    fn gro_batches_are_stamped_together() {
        let mut r = rx(vec![
            irq(0.0, 0.0),
            cost(1.0),
            Stage::Napi(Napi {
                budget: 64,
                yield_us: 0.0,
                gro_batch: 3,
            }),
        ]);
        // 7 packets: batches of 3, 3 and the rest when the poll runs dry.
        assert_eq!(
            run(&mut r, ppdu(0, 100, 7)),
            vec![103_000, 103_000, 103_000, 106_000, 106_000, 106_000, 107_000]
        );
    }

    #[test]
    fn timer_ticks_hold_packets_to_the_next_tick() {
        let mut r = rx(vec![Stage::TimerTick(TimerTick {
            period_us: 250.0,
            slack_us: 0.0,
        })]);
        assert_eq!(run(&mut r, ppdu(0, 100, 2)), vec![250_000, 250_000]);
        assert_eq!(run(&mut r, ppdu(100, 240, 1)), vec![250_000]);
        assert_eq!(run(&mut r, ppdu(240, 260, 1)), vec![500_000]);
    }

    #[test]
    fn adaptive_moderation_follows_the_load() {
        let stages = |adaptive| {
            vec![
                Stage::Interrupt(Interrupt {
                    rx_usecs: 30.0,
                    adaptive,
                    adaptive_packets: 10.0,
                    adaptive_min_us: 0.0,
                    adaptive_max_us: 500.0,
                    latency_us: 0.0,
                    jitter_us: 0.0,
                }),
                cost(0.0),
            ]
        };
        let (mut a, mut f) = (rx(stages(true)), rx(stages(false)));
        // 100 packets every 1000 µs = 0.1 Mpackets/s: the load estimate (EWMA) climbs to 0.1 and
        // the adaptive delay 10 packets / 0.1 Mpps falls to 100 µs; fixed moderation stays 30 µs.
        let (mut first, mut last) = (0, 0);
        for k in 1..300u64 {
            let end = k * 1000;
            let p = ppdu(end - 900, end, 100);
            let fa = run(&mut a, p)[0] - end * 1000;
            assert_eq!(run(&mut f, p)[0] - end * 1000, 30_000);
            if k == 2 {
                first = fa;
            }
            last = fa;
        }
        assert_eq!(first, 500_000, "low load estimate early: capped at the maximum");
        assert!((last as f64 - 100_000.0).abs() < 1_000.0, "{last}");
    }

    #[test]
    fn stalls_and_contention_delay_but_never_reorder() {
        let mut r = rx(vec![
            irq(20.0, 10.0),
            cost(3.0),
            Stage::ThreadedNapi(ThreadedNapi::default()),
            Stage::CpuContention(CpuContention {
                share: 0.5,
                slice_us: 500.0,
            }),
            Stage::Stalls(Stalls {
                rate_hz: 50.0,
                mean_us: 1000.0,
                tail_alpha: 1.5,
            }),
        ]);
        let mut last = 0;
        let mut delays = Vec::new();
        for k in 0..5000u64 {
            let end = 1000 + k * 400;
            for t in run(&mut r, ppdu(end - 300, end, 20)) {
                assert!(t >= last, "time went back");
                assert!(t >= end * 1000);
                delays.push(t - end * 1000);
                last = t;
            }
        }
        delays.sort();
        let p99 = delays[delays.len() * 99 / 100];
        // Half the CPU goes to another task: the path falls far behind its 23 µs/packet floor.
        assert!(p99 > 1_000_000, "p99 delay {p99} ns");
    }

    #[test]
    fn socket_queue_drops_at_its_limit_and_app_stamps_later() {
        let sock = |stamp_at_app| {
            Stage::SocketQueue(SocketQueue {
                limit: 3,
                app_us: 10.0,
                app_wake_us: 0.0,
                stamp_at_app,
            })
        };
        let mut r = rx(vec![irq(0.0, 0.0), cost(1.0), sock(false)]);
        // 5 packets stamped 1 µs apart; the app reads one per 10 µs: the 4th and 5th find 3 queued.
        assert_eq!(
            run(&mut r, ppdu(0, 100, 5)),
            vec![101_000, 102_000, 103_000, u64::MAX, u64::MAX]
        );
        assert_eq!(r.dropped(), 2);
        let mut r = rx(vec![irq(0.0, 0.0), cost(1.0), sock(true)]);
        assert_eq!(run(&mut r, ppdu(0, 100, 2)), vec![111_000, 121_000]);
    }

    #[test]
    fn presets_and_random_draws_check_and_are_seeded() {
        for p in [NoisePreset::None, NoisePreset::Laptop, NoisePreset::Phone] {
            assert!(p.path().unwrap().check().is_ok());
        }
        assert!("tablet".parse::<NoisePreset>().is_err());
        assert_eq!("Random".parse::<NoisePreset>().unwrap(), NoisePreset::Random);
        let rr = RandomReceiver::default();
        rr.check().unwrap();
        let a = rr.draw("a", &mut ChaCha8Rng::seed_from_u64(7));
        let b = rr.draw("a", &mut ChaCha8Rng::seed_from_u64(7));
        assert_eq!(a, b);
        let kinds: std::collections::BTreeSet<&str> = (0..200u64)
            .flat_map(|s| rr.draw("x", &mut ChaCha8Rng::seed_from_u64(s)).stages)
            .map(|s| s.kind())
            .collect();
        assert_eq!(
            kinds.len(),
            9,
            "every stage kind but the bus (off by default) is drawn sometimes: {kinds:?}"
        );
        assert!(!kinds.contains("bus"));
        for s in 0..200u64 {
            rr.draw("x", &mut ChaCha8Rng::seed_from_u64(s)).check().unwrap();
        }
        // Turning the bus on adds it to some receivers and leaves every other stage as drawn.
        let with_bus = RandomReceiver {
            p_bus: 0.5,
            ..RandomReceiver::default()
        };
        with_bus.check().unwrap();
        let mut buses = 0;
        for s in 0..200u64 {
            let plain = rr.draw("x", &mut ChaCha8Rng::seed_from_u64(s)).stages;
            let mut bused = with_bus.draw("x", &mut ChaCha8Rng::seed_from_u64(s)).stages;
            if let Some(Stage::Bus(b)) = bused.last() {
                assert!((4.0..=18.0).contains(&b.per_packet_us), "{b:?}");
                bused.pop();
                buses += 1;
            }
            assert_eq!(plain, bused, "seed {s}");
        }
        assert!((60..=140).contains(&buses), "{buses} of 200 with p_bus = 0.5");
    }

    #[test]
    fn a_bus_spaces_packets_and_its_backlog_closes_the_gaps_between_ampdus() {
        // 12 µs per packet; interrupt at once, 1 µs each. PPDU ends at 100 µs with 3 packets:
        // they leave the bus at 112, 124, 136 µs, each finding the poll idle (+1 µs).
        let bus = || Stage::Bus(Bus { per_packet_us: 12.0 });
        let mut r = rx(vec![bus(), irq(0.0, 0.0), cost(1.0)]);
        assert_eq!(run(&mut r, ppdu(0, 100, 3)), vec![113_000, 125_000, 137_000]);
        // The next PPDU ends at 130 µs, before the bus is free (136): its packets wait and leave
        // at 148 and 160 — 12 µs after the last one, the same as inside an A-MPDU.
        assert_eq!(run(&mut r, ppdu(110, 130, 2)), vec![149_000, 161_000]);
        // With the bus idle again, a gap survives: PPDU at 400 µs leaves at 412.
        assert_eq!(run(&mut r, ppdu(300, 400, 1)), vec![413_000]);
        // Per-MPDU hand-off first, then the bus: MPDUs ready at 140 and 240 µs (preamble 40 µs
        // of a 0–240 µs PPDU), each crossing in 12 µs.
        let mut r = rx(vec![
            Stage::PerMpduHandoff(PerMpduHandoff { preamble_us: 40.0 }),
            bus(),
            irq(0.0, 0.0),
            cost(1.0),
        ]);
        assert_eq!(run(&mut r, ppdu(0, 240, 2)), vec![153_000, 253_000]);
        let e = ReceivePath::new("p", vec![Stage::Bus(Bus { per_packet_us: 0.0 })])
            .check()
            .unwrap_err();
        assert_eq!(e.field, "bus.per_packet_us");
        let bad = RandomReceiver {
            bus_per_packet_us: [0.0, 5.0],
            ..RandomReceiver::default()
        };
        assert_eq!(bad.check().unwrap_err().field, "bus_per_packet_us");
    }

    #[test]
    fn bad_numbers_are_refused_with_the_field() {
        let e = ReceivePath::new("p", vec![cost(-1.0)]).check().unwrap_err();
        assert_eq!(e.field, "per_packet.us");
        let e = ReceivePath::new(
            "p",
            vec![Stage::Napi(Napi {
                budget: 0,
                ..Napi::default()
            })],
        )
        .check()
        .unwrap_err();
        assert_eq!(e.field, "napi.budget");
        let e = ReceivePath::new("p", vec![cost(1.0), cost(2.0)]).check().unwrap_err();
        assert!(e.to_string().contains("at most one"), "{e}");
        let toml_text = "name = \"x\"\n[[stages]]\nkind = \"napi\"\nbudget = 8\ngro_batch = 8\n[[stages]]\nkind = \"per_packet\"\nus = 3.0\n";
        let p: ReceivePath = toml::from_str(toml_text).unwrap();
        assert_eq!(p.stages.len(), 2);
        let bad = "[[stages]]\nkind = \"napi\"\nbudgett = 8\n";
        assert!(
            toml::from_str::<ReceivePath>(bad).is_err(),
            "unknown fields are refused"
        );
    }
}

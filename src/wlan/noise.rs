//! Kernel receive-timestamp noise: what a client's kernel stamps (SO_TIMESTAMPNS) after its NIC
//! has received an A-MPDU.
//!
//! Model ([`KernelNoise`]), per PPDU that ends at MAC time `t`:
//! 1. **Interrupt moderation.** The first PPDU after the NIC's interrupt fired arms a timer;
//!    the interrupt fires `coalesce_us` later (0 = at once), and every PPDU that ends before it
//!    joins that batch.
//! 2. **Interrupt latency**: `irq_latency_us` plus an exponential extra of mean
//!    `irq_jitter_us`.
//! 3. **NAPI polling**: packets are stamped one after another, each `per_packet_us` plus an
//!    exponential extra of mean `per_packet_jitter_us + load_jitter_us_per_mpps · load` (load =
//!    recent packet rate in Mpackets/s); every `napi_budget` packets the poll yields for
//!    `napi_gap_us`. A packet cannot be stamped before the previous one is done, so under load
//!    the backlog smears A-MPDU boundaries.
//! 4. **Scheduling stalls**: a Poisson process (`stall_rate_hz`) of stalls with exponential
//!    length (`stall_mean_us`); packets waiting meanwhile come out in a burst.
//!
//! Output times never decrease. All randomness comes from the seeded RNG the model owns.

use std::str::FromStr;
use std::time::Duration;

use rand::{Rng, RngExt};
use serde::{Deserialize, Serialize};

use crate::time::Ts;

/// Turns the MAC receive time of each A-MPDU into kernel timestamps of its MPDUs.
pub trait NoiseModel {
    /// Host times for the `n` MPDUs of one A-MPDU whose PPDU ended at `mac_end`, appended to
    /// `out` (cleared first). Calls come in order of `mac_end`.
    fn on_ppdu(&mut self, mac_end: Ts, n: usize, out: &mut Vec<Ts>);
}

/// Parameters of [`KernelNoise`] (µs unless named otherwise).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NoiseParams {
    /// Interrupt moderation window.
    pub coalesce_us: f64,
    /// Fixed interrupt latency.
    pub irq_latency_us: f64,
    /// Mean exponential extra interrupt latency.
    pub irq_jitter_us: f64,
    /// Softirq time per packet.
    pub per_packet_us: f64,
    /// Mean exponential extra per packet.
    pub per_packet_jitter_us: f64,
    /// Extra mean per-packet jitter per Mpacket/s of recent load.
    pub load_jitter_us_per_mpps: f64,
    /// Packets per NAPI poll.
    pub napi_budget: u32,
    /// Pause between polls.
    pub napi_gap_us: f64,
    /// Scheduling stalls per second.
    pub stall_rate_hz: f64,
    /// Mean stall length.
    pub stall_mean_us: f64,
}

impl Default for NoiseParams {
    fn default() -> Self {
        NoisePreset::Laptop.params()
    }
}

/// Named noise settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NoisePreset {
    /// Host time = MAC time (every MPDU of an A-MPDU at its PPDU end).
    None,
    /// A laptop NIC: per-A-MPDU interrupts, fast softirq, rare short stalls.
    Laptop,
    /// A phone: interrupt moderation, slow per-packet path, load-dependent jitter, stalls.
    Phone,
}

impl FromStr for NoisePreset {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "none" => Ok(NoisePreset::None),
            "laptop" => Ok(NoisePreset::Laptop),
            "phone" => Ok(NoisePreset::Phone),
            _ => Err(format!("unknown noise preset {s:?}: use none, laptop or phone")),
        }
    }
}

impl NoisePreset {
    /// The preset's parameters.
    pub fn params(self) -> NoiseParams {
        match self {
            NoisePreset::None => NoiseParams {
                coalesce_us: 0.0,
                irq_latency_us: 0.0,
                irq_jitter_us: 0.0,
                per_packet_us: 0.0,
                per_packet_jitter_us: 0.0,
                load_jitter_us_per_mpps: 0.0,
                napi_budget: u32::MAX,
                napi_gap_us: 0.0,
                stall_rate_hz: 0.0,
                stall_mean_us: 0.0,
            },
            NoisePreset::Laptop => NoiseParams {
                coalesce_us: 0.0,
                irq_latency_us: 12.0,
                irq_jitter_us: 4.0,
                per_packet_us: 1.5,
                per_packet_jitter_us: 0.5,
                load_jitter_us_per_mpps: 5.0,
                napi_budget: 64,
                napi_gap_us: 3.0,
                stall_rate_hz: 2.0,
                stall_mean_us: 300.0,
            },
            NoisePreset::Phone => NoiseParams {
                coalesce_us: 40.0,
                irq_latency_us: 30.0,
                irq_jitter_us: 15.0,
                per_packet_us: 9.0,
                per_packet_jitter_us: 4.0,
                load_jitter_us_per_mpps: 120.0,
                napi_budget: 64,
                napi_gap_us: 15.0,
                stall_rate_hz: 8.0,
                stall_mean_us: 1_500.0,
            },
        }
    }
}

/// Errors in noise parameters.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("noise.{field} = {value}: must be a finite number >= 0{extra}")]
pub struct NoiseError {
    /// Field.
    pub field: &'static str,
    /// Value.
    pub value: f64,
    /// More.
    pub extra: &'static str,
}

impl NoiseParams {
    /// Check ranges.
    pub fn check(self) -> Result<NoiseParams, NoiseError> {
        let fields = [
            ("coalesce_us", self.coalesce_us),
            ("irq_latency_us", self.irq_latency_us),
            ("irq_jitter_us", self.irq_jitter_us),
            ("per_packet_us", self.per_packet_us),
            ("per_packet_jitter_us", self.per_packet_jitter_us),
            ("load_jitter_us_per_mpps", self.load_jitter_us_per_mpps),
            ("napi_gap_us", self.napi_gap_us),
            ("stall_rate_hz", self.stall_rate_hz),
            ("stall_mean_us", self.stall_mean_us),
        ];
        for (field, value) in fields {
            if !(value.is_finite() && value >= 0.0) {
                return Err(NoiseError {
                    field,
                    value,
                    extra: "",
                });
            }
        }
        if self.napi_budget == 0 {
            return Err(NoiseError {
                field: "napi_budget",
                value: 0.0,
                extra: " and at least 1",
            });
        }
        Ok(self)
    }
}

/// The kernel path model described in the module docs.
pub struct KernelNoise<R: Rng> {
    p: NoiseParams,
    rng: R,
    batch_fire: Option<Ts>,
    cpu_free: Ts,
    in_poll: u32,
    next_stall: Ts,
    last_mac: Option<Ts>,
    load_mpps: f64,
}

fn exp<R: Rng>(rng: &mut R, mean: f64) -> f64 {
    if mean <= 0.0 {
        return 0.0;
    }
    -(1.0 - rng.random::<f64>()).ln() * mean
}

fn us(x: f64) -> Duration {
    Duration::from_nanos((x * 1000.0).max(0.0) as u64)
}

impl<R: Rng> KernelNoise<R> {
    /// A model with checked parameters and its own RNG.
    pub fn new(p: NoiseParams, mut rng: R) -> Self {
        let first_stall = if p.stall_rate_hz > 0.0 {
            Ts(0) + us(exp(&mut rng, 1e6 / p.stall_rate_hz))
        } else {
            Ts(u64::MAX)
        };
        KernelNoise {
            p,
            rng,
            batch_fire: None,
            cpu_free: Ts::ZERO,
            in_poll: 0,
            next_stall: first_stall,
            last_mac: None,
            load_mpps: 0.0,
        }
    }
}

impl<R: Rng> NoiseModel for KernelNoise<R> {
    fn on_ppdu(&mut self, mac_end: Ts, n: usize, out: &mut Vec<Ts>) {
        out.clear();
        if let Some(last) = self.last_mac {
            let dt = mac_end.saturating_since(last).as_secs_f64().max(1e-6);
            let inst = n as f64 / dt / 1e6;
            self.load_mpps = 0.9 * self.load_mpps + 0.1 * inst;
        }
        self.last_mac = Some(mac_end);
        let p = &self.p;
        let mut start = match self.batch_fire {
            Some(fire) if p.coalesce_us > 0.0 && mac_end <= fire => self.cpu_free,
            _ => {
                let fire = mac_end + us(p.coalesce_us);
                self.batch_fire = Some(fire);
                self.in_poll = 0;
                fire + us(p.irq_latency_us + exp(&mut self.rng, p.irq_jitter_us))
            }
        };
        if start < self.cpu_free {
            start = self.cpu_free;
        }
        if start >= self.next_stall {
            let resume = self.next_stall + us(exp(&mut self.rng, p.stall_mean_us));
            start = start.max(resume);
            self.next_stall = start + us(exp(&mut self.rng, 1e6 / p.stall_rate_hz.max(1e-9)));
        }
        let mut t = start;
        let jitter_mean = p.per_packet_jitter_us + p.load_jitter_us_per_mpps * self.load_mpps;
        for _ in 0..n {
            if self.in_poll >= p.napi_budget {
                t = t + us(p.napi_gap_us);
                self.in_poll = 0;
            }
            t = t + us(p.per_packet_us + exp(&mut self.rng, jitter_mean));
            self.in_poll += 1;
            out.push(t);
        }
        self.cpu_free = t;
    }
}

/// Host time = MAC time.
pub struct NoNoise;

impl NoiseModel for NoNoise {
    fn on_ppdu(&mut self, mac_end: Ts, n: usize, out: &mut Vec<Ts>) {
        out.clear();
        out.extend(std::iter::repeat_n(mac_end, n));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn kernel_times_never_decrease_and_follow_mac_time() {
        let mut m = KernelNoise::new(NoisePreset::Phone.params(), rand_chacha::ChaCha8Rng::seed_from_u64(1));
        let mut out = Vec::new();
        let mut last = Ts::ZERO;
        for k in 0..2000u64 {
            let mac = Ts::from_micros(1000 + k * 300);
            m.on_ppdu(mac, 8, &mut out);
            assert_eq!(out.len(), 8);
            for &t in &out {
                assert!(t >= last && t >= mac, "host time before MAC time or going back");
                last = t;
            }
        }
        let mut n = NoNoise;
        n.on_ppdu(Ts(5), 3, &mut out);
        assert_eq!(out, vec![Ts(5); 3]);
    }

    #[test]
    fn presets_parse_and_check() {
        for name in ["none", "laptop", "phone", "PHONE"] {
            let p: NoisePreset = name.parse().unwrap();
            assert!(p.params().check().is_ok());
        }
        assert!("tablet".parse::<NoisePreset>().is_err());
        let bad = NoiseParams {
            per_packet_us: -1.0,
            ..NoiseParams::default()
        };
        assert_eq!(bad.check().unwrap_err().field, "per_packet_us");
    }
}

//! The aggregation level from airtime: how many MPDUs an A-MPDU must carry for a station to
//! receive packets at the rate it does, given what every A-MPDU costs on the air.
//!
//! # Why
//!
//! Packets ÷ predicted frame starts is only as good as the starts a receive path shows. A phone
//! whose per-packet processing runs through the gap between two A-MPDUs, a timer tick that
//! releases several A-MPDUs at once, a bus backlog — each hides starts and inflates the level;
//! a batch flushed in the middle of an A-MPDU invents one and deflates it. The level itself is
//! not hidden: it is fixed by the channel. An access point that is never idle (and at any level
//! above one it is not: the packets of the next A-MPDU queued while this one was on the air)
//! spends, per A-MPDU of `n` MPDUs, a fixed overhead `T_o` (AIFS, the mean backoff, RTS/CTS
//! when the PSDU exceeds the RTS threshold, the PHY preamble, SIFS and the Block Ack) plus
//! `n · t_p` of data (`t_p`: one A-MPDU subframe at the PHY rate). Receiving `λ` packets per
//! second over a channel of which others take the share `X`:
//!
//! ```text
//!   (λ / n) · (T_o + n · t_p) = 1 − X        ⇒        n = λ · T_o / (1 − X − λ · t_p)
//! ```
//!
//! `λ`, the packet size and the PHY rate are what every receiver measures exactly, whatever its
//! receive path does to the timing; `T_o` and `t_p` come from the standard (IEEE 802.11-2020
//! clauses 10.3 EDCA and 21 VHT PHY; the defaults are 5 GHz best-effort VHT). The same relation
//! is the fixed point the emulator's timing module works through (`wlan::timing` in the
//! `aggrate` crate): at 300 Mb/s on the paper's WLAN it gives 7.9 MPDUs per A-MPDU, ns-3
//! measured 7.78.
//!
//! # Where it holds and where it does not
//!
//! It needs the PHY rate (radiotap, the OS's link speed, or `recv --phy-mbps`) and the share of
//! the channel others take. A channel survey (`iw dev … survey dump`: busy time less the time
//! spent receiving this station's frames) measures that share; without one it is taken as zero,
//! and then the level is the *least* the station can be at: other traffic, other stations of
//! the same AP, retransmissions and collisions all lengthen the cycle and raise the true level.
//! At a level of one (an idle AP between packets) the relation gives less than one; the level is
//! then one. Near the channel's capacity (`1 − X − λ·t_p → 0`) it rises steeply and is capped
//! at the A-MPDU limits.
//!
//! Pure arithmetic: no clock, no state, no allocation.

use serde::{Deserialize, Serialize};

/// The airtime an A-MPDU exchange costs, beside its data (µs unless named). Defaults: 5 GHz
/// best-effort EDCA (slot 9, SIFS 16, AIFSN 3, CWmin 15), a VHT preamble with two spatial
/// streams (44 µs), a compressed Block Ack and RTS/CTS at 24 Mb/s, an RTS threshold of
/// 65,535 bytes — the settings of the study's ns-3 WLAN and of the emulator's defaults.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AirtimeParams {
    /// Slot time.
    pub slot_us: f64,
    /// SIFS.
    pub sifs_us: f64,
    /// AIFSN of the access category (AIFS = SIFS + AIFSN · slot).
    pub aifsn: f64,
    /// CWmin: the backoff is uniform in 0..=CWmin slots, CWmin/2 on average.
    pub cw_min: f64,
    /// PHY preamble of a data PPDU (VHT: 36 + 4 per long training field; 44 at 2 streams).
    pub preamble_us: f64,
    /// Block Ack (compressed, 32 bytes at 24 Mb/s: 32 µs).
    pub block_ack_us: f64,
    /// RTS (28 µs) + SIFS + CTS (28 µs) + SIFS, paid when the PSDU exceeds `rts_threshold`.
    pub rts_cts_us: f64,
    /// PSDUs longer than this are protected by RTS/CTS (bytes; 65,535 and above: never at these
    /// sizes for short A-MPDUs).
    pub rts_threshold: f64,
    /// Bytes an IP packet takes in an A-MPDU besides itself: delimiter 4 + QoS MAC header 26 +
    /// LLC/SNAP 8 + FCS 4 (then padded to 4 bytes).
    pub mpdu_overhead_bytes: f64,
    /// Service and tail bits of the data field, and half a symbol of rounding on average (µs).
    pub data_extra_us: f64,
    /// Most MPDUs in one A-MPDU (the Block Ack window).
    pub max_mpdus: f64,
    /// Longest PPDU (µs).
    pub max_ppdu_us: f64,
}

impl Default for AirtimeParams {
    fn default() -> Self {
        AirtimeParams {
            slot_us: 9.0,
            sifs_us: 16.0,
            aifsn: 3.0,
            cw_min: 15.0,
            preamble_us: 44.0,
            block_ack_us: 32.0,
            rts_cts_us: 28.0 + 16.0 + 28.0 + 16.0,
            rts_threshold: 65_535.0,
            mpdu_overhead_bytes: 4.0 + 26.0 + 8.0 + 4.0,
            data_extra_us: 1.8,
            max_mpdus: 64.0,
            max_ppdu_us: 5_484.0,
        }
    }
}

/// An airtime parameter out of range.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("airtime parameter {field} = {value}: {allowed}")]
pub struct ParamError {
    /// The field.
    pub field: &'static str,
    /// Its value.
    pub value: f64,
    /// What is allowed.
    pub allowed: &'static str,
}

/// One interval as a receiver measured it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Measured {
    /// Packets received per second over the time the station was receiving.
    pub pkt_rate: f64,
    /// Mean IP packet length (bytes).
    pub ip_len: f64,
    /// PHY rate of the station's frames (b/s).
    pub phy_bps: f64,
    /// Share of the channel's time taken by other transmissions (0 when unknown), in [0, 1).
    pub others_share: f64,
}

impl AirtimeParams {
    /// Checked: every duration finite and non-negative, sizes and limits positive.
    pub fn check(self) -> Result<AirtimeParams, ParamError> {
        let fields = [
            ("slot_us", self.slot_us, 0.0, 1e4),
            ("sifs_us", self.sifs_us, 0.0, 1e4),
            ("aifsn", self.aifsn, 0.0, 64.0),
            ("cw_min", self.cw_min, 0.0, 1e5),
            ("preamble_us", self.preamble_us, 0.0, 1e4),
            ("block_ack_us", self.block_ack_us, 0.0, 1e4),
            ("rts_cts_us", self.rts_cts_us, 0.0, 1e4),
            ("rts_threshold", self.rts_threshold, 0.0, f64::MAX),
            ("mpdu_overhead_bytes", self.mpdu_overhead_bytes, 0.0, 1e4),
            ("data_extra_us", self.data_extra_us, 0.0, 1e3),
            ("max_mpdus", self.max_mpdus, 1.0, 1024.0),
            ("max_ppdu_us", self.max_ppdu_us, 1.0, 1e5),
        ];
        for (field, value, lo, hi) in fields {
            if !(value.is_finite() && value >= lo && value <= hi) {
                return Err(ParamError {
                    field,
                    value,
                    allowed: "finite and within the physical range (see AirtimeParams)",
                });
            }
        }
        Ok(self)
    }

    /// Bytes one IP packet of `ip_len` takes in an A-MPDU (padded to 4).
    pub fn subframe_bytes(&self, ip_len: f64) -> f64 {
        ((ip_len + self.mpdu_overhead_bytes) / 4.0).ceil() * 4.0
    }

    /// Fixed airtime of one exchange without RTS/CTS (µs): AIFS, mean backoff, preamble, data
    /// extras, SIFS and Block Ack.
    pub fn fixed_us(&self) -> f64 {
        self.sifs_us
            + self.aifsn * self.slot_us
            + self.cw_min / 2.0 * self.slot_us
            + self.preamble_us
            + self.data_extra_us
            + self.sifs_us
            + self.block_ack_us
    }

    /// The mean A-MPDU size (MPDUs) at which an always-busy access point delivers `m`, or `None`
    /// when it cannot be told (no packets, no PHY rate, a share of 1, values not finite). At
    /// least 1; at most the A-MPDU limits (the Block Ack window and the longest PPDU), which is
    /// also the answer when the rate needs more than the channel has.
    ///
    /// **Near the RTS threshold** two levels can both be self-consistent: the unprotected one
    /// (A-MPDUs below the threshold) and the protected one (above it, each paying RTS/CTS, so
    /// more queues meanwhile). The access point then switches between the two regimes as the
    /// random backoff pushes single A-MPDUs across the threshold: the level of A-MPDU k follows
    /// `n_k = λ·(T_o + b_k + n_{k−1}·t_p)` with `b_k` the backoff, an AR(1) process with
    /// coefficient `a = λ·t_p` and standard deviation `λ·σ_b / √(1 − a²)` around each regime's
    /// level. The chance per A-MPDU of leaving each regime (a normal tail beyond the threshold)
    /// gives the share of time spent in each, and the level is their mix (see
    /// [`Self::level_with_count`] to place it from a frame count instead). Where only one regime
    /// is self-consistent, it is that one.
    pub fn level(&self, m: &Measured) -> Option<f64> {
        self.level_with_count(m, None)
    }

    /// [`Self::level`], but where both regimes hold and the unprotected regime is left often
    /// enough to matter (at least one A-MPDU in a thousand crosses the threshold), a frame count from the
    /// receive timing (`count`: packets ÷ frames) places the level between the two, clamped to
    /// them: the regime an access point sits in lasts hundreds of A-MPDUs, longer than a report
    /// interval's mix of the two can tell. A count that hides starts reads high and is held at
    /// the protected level; away from the threshold the count is not used at all.
    pub fn level_with_count(&self, m: &Measured, count: Option<f64>) -> Option<f64> {
        let ok = |v: f64| v.is_finite() && v > 0.0;
        if !(ok(m.pkt_rate) && ok(m.ip_len) && ok(m.phy_bps) && m.others_share.is_finite()) {
            return None;
        }
        let share = m.others_share.clamp(0.0, 1.0);
        if share >= 1.0 {
            return None;
        }
        let sub = self.subframe_bytes(m.ip_len);
        let t_p = sub * 8.0 / m.phy_bps; // s per MPDU
        let cap = self
            .max_mpdus
            .min(((self.max_ppdu_us * 1e-6 - self.preamble_us * 1e-6) / t_p).floor())
            .max(1.0);
        let free = 1.0 - share - m.pkt_rate * t_p;
        if free <= 0.0 {
            return Some(cap);
        }
        let solve = |rts: bool| -> f64 {
            let t_o = (self.fixed_us() + if rts { self.rts_cts_us } else { 0.0 }) * 1e-6;
            m.pkt_rate * t_o / free
        };
        let (plain, protected) = (solve(false), solve(true));
        let thr = self.rts_threshold / sub; // MPDUs
        let n = if plain > thr {
            protected
        } else if protected > thr {
            // Both regimes hold: the share of time in each from how often a backoff pushes an
            // A-MPDU across the threshold either way.
            let a = (m.pkt_rate * t_p).min(0.999);
            let cw = self.cw_min + 1.0;
            let sigma_b = self.slot_us * 1e-6 * ((cw * cw - 1.0) / 12.0).sqrt();
            let sigma = (m.pkt_rate * sigma_b / (1.0 - a * a).sqrt()).max(1e-9);
            let up = normal_tail((thr - plain) / sigma);
            let down = normal_tail((protected - thr) / sigma);
            let phi = if up + down > 0.0 { up / (up + down) } else { 0.5 };
            match count.filter(|c| c.is_finite() && *c > 0.0) {
                Some(c) if up >= 1e-3 => c.clamp(plain, protected),
                _ => (1.0 - phi) * plain + phi * protected,
            }
        } else {
            plain
        };
        Some(n.clamp(1.0, cap))
    }

    /// The levels of several stations one access point serves round robin (one A-MPDU per
    /// station with packets queued, in turn), from each station's delivery rate, packet size and
    /// PHY rate, with others (outside these stations) taking `others_share` of the channel.
    ///
    /// Every station with a queue gets an A-MPDU per round, so backlogged stations share one
    /// A-MPDU rate `F`, and a station receiving fewer packets than that sends one per A-MPDU:
    /// `Σ_j min(F, λ_j)·T_o + Σ_j λ_j·t_p,j = 1 − X`, solved for `F` by bisection; then
    /// `n_j = λ_j / min(F, λ_j)`. One station reduces to [`Self::level`] (without RTS/CTS: at a
    /// level where a PSDU crosses the RTS threshold a cell's levels are lower bounds). `None` for
    /// a station whose inputs are unusable; all `None` when none is usable.
    pub fn cell_levels(&self, stations: &[Measured], others_share: f64) -> Vec<Option<f64>> {
        let ok = |m: &Measured| {
            let pos = |v: f64| v.is_finite() && v > 0.0;
            pos(m.pkt_rate) && pos(m.ip_len) && pos(m.phy_bps)
        };
        let share = if others_share.is_finite() {
            others_share.clamp(0.0, 1.0)
        } else {
            0.0
        };
        let t_o = self.fixed_us() * 1e-6;
        let used: Vec<&Measured> = stations.iter().filter(|m| ok(m)).collect();
        if used.is_empty() || share >= 1.0 {
            return vec![None; stations.len()];
        }
        let t_p = |m: &Measured| self.subframe_bytes(m.ip_len) * 8.0 / m.phy_bps;
        let data: f64 = used.iter().map(|m| m.pkt_rate * t_p(m)).sum();
        let free = 1.0 - share - data;
        let cap = |m: &Measured| {
            self.max_mpdus
                .min(((self.max_ppdu_us - self.preamble_us) * 1e-6 / t_p(m)).floor())
                .max(1.0)
        };
        let load = |f: f64| used.iter().map(|m| f.min(m.pkt_rate) * t_o).sum::<f64>() - free;
        let f = if free <= 0.0 {
            0.0
        } else {
            let hi = used.iter().map(|m| m.pkt_rate).fold(0.0, f64::max);
            if load(hi) <= 0.0 {
                // Room for an A-MPDU per packet: every station at one.
                hi
            } else {
                let (mut lo, mut hi) = (0.0, hi);
                for _ in 0..100 {
                    let mid = 0.5 * (lo + hi);
                    if load(mid) > 0.0 {
                        hi = mid;
                    } else {
                        lo = mid;
                    }
                }
                0.5 * (lo + hi)
            }
        };
        stations
            .iter()
            .map(|m| {
                ok(m).then(|| {
                    let per = f.min(m.pkt_rate);
                    if per <= 0.0 {
                        cap(m)
                    } else {
                        (m.pkt_rate / per).clamp(1.0, cap(m))
                    }
                })
            })
            .collect()
    }

    /// A-MPDUs per second the access point sends at level `n` (inverse of [`Self::level`] for
    /// tests and tables).
    pub fn pkt_rate_at(&self, n: f64, ip_len: f64, phy_bps: f64, others_share: f64) -> f64 {
        n * (1.0 - others_share) / (self.exchange_us(n, ip_len, phy_bps) * 1e-6)
    }

    /// Airtime of one exchange carrying an A-MPDU of `n` MPDUs of `ip_len` bytes at `phy_bps`
    /// (µs): the fixed part, RTS/CTS when the PSDU exceeds the threshold, and the data.
    pub fn exchange_us(&self, n: f64, ip_len: f64, phy_bps: f64) -> f64 {
        let psdu = n * self.subframe_bytes(ip_len);
        let rts = if psdu > self.rts_threshold {
            self.rts_cts_us
        } else {
            0.0
        };
        self.fixed_us() + rts + psdu * 8.0 / phy_bps * 1e6
    }
}

/// P(Z > z) for a standard normal Z (Abramowitz and Stegun 7.1.26 for erfc: absolute error
/// below 1.5e-7; written here because `std` has no `erf`).
fn normal_tail(z: f64) -> f64 {
    let x = z.abs() / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.327_591_1 * x);
    let poly =
        t * (0.254_829_592 + t * (-0.284_496_736 + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    let erfc = poly * (-x * x).exp();
    if z >= 0.0 {
        0.5 * erfc
    } else {
        1.0 - 0.5 * erfc
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(pkt_rate: f64, share: f64) -> Measured {
        Measured {
            pkt_rate,
            ip_len: 1500.0,
            phy_bps: 866.7e6,
            others_share: share,
        }
    }

    /// The worked example of the emulator's timing module: 300 Mb/s of 1,500-byte packets on
    /// VHT MCS 9, 2 SS, 80 MHz, short GI gives 7.9 MPDUs per A-MPDU (ns-3 measured 7.78).
    #[test]
    fn the_paper_wlan_at_300_mbps() {
        let p = AirtimeParams::default().check().unwrap();
        let n = p.level(&at(300e6 / 12_000.0, 0.0)).unwrap();
        assert!((n - 7.9).abs() < 0.15, "{n}");
    }

    #[test]
    fn level_and_rate_are_inverse_and_the_level_grows_with_rate_and_share() {
        let p = AirtimeParams::default();
        let mut last = 0.0;
        for mbps in [50.0, 100.0, 200.0, 300.0, 400.0, 500.0, 550.0] {
            let n = p.level(&at(mbps * 1e6 / 12_000.0, 0.0)).unwrap();
            assert!(n >= last, "{mbps}: {n} < {last}");
            last = n;
            if n > 1.0 {
                let back = p.pkt_rate_at(n, 1500.0, 866.7e6, 0.0) * 12_000.0 / 1e6;
                assert!((back - mbps).abs() < 1e-6 * mbps, "{mbps} -> {n} -> {back}");
            }
        }
        // Others taking a fifth of the channel: a higher level for the same rate.
        let alone = p.level(&at(400e6 / 12_000.0, 0.0)).unwrap();
        let shared = p.level(&at(400e6 / 12_000.0, 0.2)).unwrap();
        assert!(shared > alone * 1.3, "{alone} {shared}");
        // A light load: one MPDU per A-MPDU at least.
        assert_eq!(p.level(&at(100.0, 0.0)), Some(1.0));
    }

    #[test]
    fn beyond_capacity_and_bad_inputs() {
        let p = AirtimeParams::default();
        // More than the PHY can carry: the A-MPDU limit.
        assert_eq!(p.level(&at(1e6, 0.0)), Some(64.0));
        assert_eq!(p.level(&at(30_000.0, 0.99)), Some(64.0));
        for bad in [
            at(f64::NAN, 0.0),
            at(0.0, 0.0),
            at(-5.0, 0.0),
            at(30_000.0, 1.0),
            at(30_000.0, f64::INFINITY),
            Measured {
                phy_bps: 0.0,
                ..at(30_000.0, 0.0)
            },
        ] {
            assert_eq!(p.level(&bad), None, "{bad:?}");
        }
        // A slow PHY: the longest PPDU caps the level below the Block Ack window.
        let slow = Measured {
            phy_bps: 6.5e6,
            ..at(400.0, 0.0)
        };
        let cap = p.level(&Measured { pkt_rate: 1e6, ..slow }).unwrap();
        assert!((1.0..4.0).contains(&cap), "{cap}");
        assert!(AirtimeParams {
            slot_us: f64::NAN,
            ..AirtimeParams::default()
        }
        .check()
        .is_err());
        assert!(AirtimeParams {
            max_mpdus: 0.0,
            ..AirtimeParams::default()
        }
        .check()
        .is_err());
    }

    /// One station: the cell relation is the single-station one (below the RTS threshold).
    /// Three stations at equal airtime shares: each one's level is what it would be alone on a
    /// third of the channel minus the others' overheads, and it matches a direct computation.
    #[test]
    fn cell_levels() {
        let p = AirtimeParams::default();
        let one = at(300e6 / 12_000.0, 0.0);
        let alone = p.level(&one).unwrap();
        let cell = p.cell_levels(&[one], 0.0)[0].unwrap();
        assert!((alone - cell).abs() < 1e-6 * alone, "{alone} {cell}");
        // Three stations at MCS 9 / 7 / 4 rates (866.7, 650, 390 Mb/s), rates proportional.
        let phy = [866.7e6, 650e6, 390e6];
        let st: Vec<Measured> = phy
            .iter()
            .map(|&b| Measured {
                pkt_rate: 190e6 * b / 866.7e6 / 12_000.0,
                ip_len: 1500.0,
                phy_bps: b,
                others_share: 0.0,
            })
            .collect();
        let lv = p.cell_levels(&st, 0.0);
        // Direct: F from the channel budget, n_j = λ_j / F.
        let data: f64 = st
            .iter()
            .map(|m| m.pkt_rate * p.subframe_bytes(1500.0) * 8.0 / m.phy_bps)
            .sum();
        let f = (1.0 - data) / (3.0 * p.fixed_us() * 1e-6);
        for (m, l) in st.iter().zip(&lv) {
            let want = m.pkt_rate / f;
            assert!((l.unwrap() - want).abs() < 1e-6 * want, "{l:?} {want}");
        }
        // Far above what one station alone would need at that rate.
        assert!(lv[0].unwrap() > 3.0 * p.level(&st[0]).unwrap());
        // A station receiving almost nothing sends one packet per A-MPDU and barely moves the
        // others; an unusable station is None and does not count.
        let mut with_idle = st.clone();
        with_idle.push(Measured {
            pkt_rate: 10.0,
            ..st[0]
        });
        with_idle.push(Measured {
            phy_bps: f64::NAN,
            ..st[0]
        });
        let lv2 = p.cell_levels(&with_idle, 0.0);
        assert_eq!(lv2[3], Some(1.0));
        assert_eq!(lv2[4], None);
        assert!((lv2[0].unwrap() - lv[0].unwrap()).abs() < 0.01 * lv[0].unwrap());
        // Beyond the channel: the limit.
        assert_eq!(p.cell_levels(&st, 0.9)[0], Some(64.0));
        assert_eq!(p.cell_levels(&[], 0.0), Vec::<Option<f64>>::new());
    }

    /// Above the RTS threshold the exchange pays RTS/CTS: once the unprotected level would
    /// exceed it, the level is the protected regime's, which is self-consistent there.
    #[test]
    fn rts_regime() {
        let p = AirtimeParams::default();
        let sub = p.subframe_bytes(1500.0);
        let mut crossed = false;
        for k in 0..200 {
            let rate = 40_000.0 + k as f64 * 100.0;
            let n = p.level(&at(rate, 0.0)).unwrap();
            let plain_rate = p.pkt_rate_at(p.rts_threshold / sub, 1500.0, 866.7e6, 0.0);
            if rate > plain_rate {
                crossed = true;
                let back = p.pkt_rate_at(n, 1500.0, 866.7e6, 0.0);
                assert!((back - rate).abs() < 1e-6 * rate || n == 64.0, "{rate} {n} {back}");
            }
        }
        assert!(crossed);
        // Where both regimes hold the level is their mix, between the two: 50,000 packets/s
        // (600 Mb/s) is 35 unprotected and 50 with RTS/CTS, the emulator's runs there 35–50.
        let m = at(50_000.0, 0.0);
        let mixed = p.level(&m).unwrap();
        assert!(mixed > 38.0 && mixed < 50.0, "{mixed}");
        // A count places it between the two, clamped.
        let m = at(50_000.0, 0.0);
        assert_eq!(p.level_with_count(&m, Some(44.0)), Some(44.0));
        assert!(p.level_with_count(&m, Some(200.0)).unwrap() > 49.0);
        assert!(p.level_with_count(&m, Some(2.0)).unwrap() < 36.0);
        // The operating point (a level near 32) is far from the threshold: the plain level,
        // whatever a count says.
        let m = at(47_000.0, 0.0);
        let plain = m.pkt_rate * p.fixed_us() * 1e-6 / (1.0 - m.pkt_rate * p.subframe_bytes(1500.0) * 8.0 / m.phy_bps);
        assert!((p.level(&m).unwrap() - plain).abs() < 1e-3, "{:?} {plain}", p.level(&m));
        assert_eq!(p.level_with_count(&m, Some(60.0)), p.level(&m));
    }

    #[test]
    fn normal_tail_matches_known_values() {
        for (z, want) in [
            (0.0, 0.5),
            (1.0, 0.158_655_25),
            (1.96, 0.024_997_9),
            (-1.0, 0.841_344_75),
            (5.0, 2.866_5e-7),
        ] {
            assert!((normal_tail(z) - want).abs() < 2e-7, "{z}: {}", normal_tail(z));
        }
    }
}

//! 802.11ac (VHT) and 802.11n (HT) PPDU and MAC timing, from the standard's formulas.
//!
//! All durations are integer nanoseconds ([`Duration`]). Inputs: PSDU lengths in bytes, MCS,
//! streams, bandwidth, guard interval. No clock, no state.
//!
//! # Derivation (IEEE 802.11-2020 clauses 17, 19, 21; 10.3 EDCA)
//!
//! * **Preamble.** VHT: L-STF 8 + L-LTF 8 + L-SIG 4 + VHT-SIG-A 8 + VHT-STF 4 + N_VHTLTF·4 +
//!   VHT-SIG-B 4 µs, N_VHTLTF = 1, 2, 4, 4, 6, 6, 8, 8 for 1–8 streams (36 + 4·N_LTF µs: 44 µs at
//!   2 SS). HT-mixed: L-STF 8 + L-LTF 8 + L-SIG 4 + HT-SIG 8 + HT-STF 4 + N_HTLTF·4 µs.
//! * **Data.** N_SYM = ⌈(8·PSDU + 16 service + 6·N_ES tail) / N_DBPS⌉ (BCC), N_DBPS from
//!   [`crate::phy`]; with short GI the data field lasts ⌈N_SYM·3.6 / 4⌉·4 µs (L-SIG counts 4 µs
//!   symbols), with long GI N_SYM·4 µs.
//! * **A-MPDU subframe.** 4-byte delimiter + MPDU (QoS data MAC header 26 + LLC/SNAP 8 + IP
//!   packet + FCS 4), padded to a multiple of 4 bytes.
//! * **Control frames** go at 24 Mb/s non-HT OFDM (the highest 5 GHz basic rate not above the
//!   data rate's non-HT reference): 20 µs preamble + ⌈(16 + 8·L + 6)/96⌉·4 µs — ACK and CTS
//!   (14 B) 28 µs, RTS (20 B) 28 µs, compressed BlockAck (32 B) 32 µs.
//! * **EDCA, best effort.** slot 9 µs, SIFS 16 µs, AIFSN 3 → AIFS 43 µs, CW 15…1023 (doubling
//!   after a failed exchange), backoff uniform in 0..=CW slots.
//!
//! **Worked example** (the ns-3 sample's settings: VHT MCS 9, 2 SS, 80 MHz, short GI, 1500 B IP
//! packets, RTS threshold 65,535 B): one MPDU subframe is 1,544 B; a 64-MPDU A-MPDU is 98,816 B
//! = 254 symbols = 916 µs of data + 44 µs preamble = 960 µs, above the RTS threshold, so an
//! exchange costs AIFS 43 + mean backoff 67.5 + RTS 28 + SIFS + CTS 28 + SIFS + 960 + SIFS + BA
//! 32 = 1,206.5 µs for 768,000 IP bits: **saturation throughput ≈ 637 Mb/s**. At 300 Mb/s
//! offered, the fixed point n = 300 Mb/s · cycle(n) / 12,000 bit (no RTS at this size) gives
//! n ≈ 7.9 MPDUs per A-MPDU (ns-3 measured 7.78).

use std::time::Duration;

use crate::phy::{self, Bandwidth};

/// Slot time (5 GHz OFDM).
pub const SLOT: Duration = Duration::from_micros(9);
/// SIFS (5 GHz OFDM).
pub const SIFS: Duration = Duration::from_micros(16);
/// Bits per 4 µs symbol of the 24 Mb/s control rate.
const CTRL_DBPS: u64 = 96;

/// MAC overhead of one QoS data MPDU carrying an IP packet: header 26 + LLC/SNAP 8 + FCS 4.
pub const MPDU_OVERHEAD: usize = 26 + 8 + 4;
/// A-MPDU delimiter.
pub const DELIMITER: usize = 4;

/// PHY format of a data PPDU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PhyMode {
    /// VHT (true) or HT (false).
    pub vht: bool,
    /// MCS (VHT 0–9; HT 0–7 per stream).
    pub mcs: u8,
    /// Spatial streams.
    pub nss: u8,
    /// Bandwidth.
    pub bw: Bandwidth,
    /// Short guard interval.
    pub short_gi: bool,
}

impl PhyMode {
    /// Data bits per OFDM symbol, if the combination is arithmetically valid.
    pub fn ndbps(&self) -> Option<u32> {
        let mcs = if self.vht { self.mcs } else { self.mcs % 8 };
        phy::data_bits_per_symbol(self.bw.vht_data_subcarriers(), mcs, self.nss)
    }
    /// PHY data rate in bit/s.
    pub fn rate_bps(&self) -> Option<u64> {
        if self.vht {
            phy::vht_rate_bps(self.mcs, self.nss, self.bw, self.short_gi)
        } else {
            phy::ht_rate_bps((self.nss - 1) * 8 + self.mcs % 8, self.bw, self.short_gi)
        }
    }
    /// BCC encoders (one per 600 Mb/s of long-GI rate).
    fn n_es(&self) -> u64 {
        let ndbps = self.ndbps().unwrap_or(1) as u64;
        (ndbps * 250_000).div_ceil(600_000_000).max(1)
    }
    /// Preamble duration.
    pub fn preamble(&self) -> Duration {
        let nss = self.nss.clamp(1, 8) as u64;
        let n_ltf = match nss {
            1 => 1,
            2 => 2,
            3 | 4 => 4,
            5 | 6 => 6,
            _ => 8,
        };
        if self.vht {
            Duration::from_micros(36 + 4 * n_ltf)
        } else {
            Duration::from_micros(32 + 4 * n_ltf)
        }
    }
    /// Duration of a PPDU carrying `psdu_bytes`.
    pub fn ppdu_duration(&self, psdu_bytes: usize) -> Duration {
        let ndbps = self.ndbps().unwrap_or(1).max(1) as u64;
        let bits = 8 * psdu_bytes as u64 + 16 + 6 * self.n_es();
        let nsym = bits.div_ceil(ndbps);
        let data_ns = if self.short_gi {
            (nsym * 3_600).div_ceil(4_000) * 4_000
        } else {
            nsym * 4_000
        };
        self.preamble() + Duration::from_nanos(data_ns)
    }
}

/// Bytes one IP packet of `ip_len` takes inside an A-MPDU (delimiter + MPDU + padding).
pub fn subframe_len(ip_len: usize) -> usize {
    (DELIMITER + MPDU_OVERHEAD + ip_len).next_multiple_of(4)
}

/// A-MSDU subframe header: destination 6 + source 6 + length 2.
pub const AMSDU_SUBHEADER: usize = 14;
/// LLC/SNAP header in front of each IP packet.
pub const LLC_SNAP: usize = 8;

/// Bytes of an A-MSDU carrying IP packets of `ip_lens`: each subframe is its 14-byte header,
/// LLC/SNAP and the packet, padded to 4 bytes except the last.
pub fn amsdu_len(ip_lens: impl IntoIterator<Item = usize>) -> usize {
    let mut total = 0usize;
    for l in ip_lens {
        total = total.next_multiple_of(4) + AMSDU_SUBHEADER + LLC_SNAP + l;
    }
    total
}

/// Length of the A-MPDU subframe of an MPDU carrying an A-MSDU of `ip_lens` (delimiter, QoS
/// data header 26, the A-MSDU, FCS 4, padded to 4 bytes).
pub fn amsdu_subframe_len(ip_lens: impl IntoIterator<Item = usize>) -> usize {
    (DELIMITER + 26 + amsdu_len(ip_lens) + 4).next_multiple_of(4)
}

/// Duration of a control frame of `bytes` (incl. FCS) at 24 Mb/s non-HT.
pub fn control_frame(bytes: usize) -> Duration {
    let nsym = (16 + 8 * bytes as u64 + 6).div_ceil(CTRL_DBPS);
    Duration::from_micros(20 + 4 * nsym)
}

/// ACK / CTS (14 B).
pub fn ack() -> Duration {
    control_frame(14)
}
/// RTS (20 B).
pub fn rts() -> Duration {
    control_frame(20)
}
/// Compressed BlockAck (32 B).
pub fn block_ack() -> Duration {
    control_frame(32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vht92() -> PhyMode {
        PhyMode {
            vht: true,
            mcs: 9,
            nss: 2,
            bw: Bandwidth::Mhz80,
            short_gi: true,
        }
    }

    #[test]
    fn ppdu_durations() {
        let m = vht92();
        assert_eq!(m.ndbps(), Some(3120));
        assert_eq!(m.preamble(), Duration::from_micros(44));
        assert_eq!(subframe_len(1500), 1544);
        // 64 × 1544 B: (790,528 + 16 + 6) / 3120 → 254 symbols → 914.4 µs → 916 µs (4 µs units).
        assert_eq!(m.ppdu_duration(64 * 1544), Duration::from_micros(44 + 916));
        // One subframe: 12,374 bits → 4 symbols → 14.4 → 16 µs.
        assert_eq!(m.ppdu_duration(1544), Duration::from_micros(60));
        let lgi = PhyMode { short_gi: false, ..m };
        assert_eq!(lgi.ppdu_duration(1544), Duration::from_micros(44 + 16));
        assert_eq!(
            (ack(), rts(), block_ack()),
            (
                Duration::from_micros(28),
                Duration::from_micros(28),
                Duration::from_micros(32)
            )
        );
    }
}

//! 802.11 PHY data rates, computed from first principles (IEEE 802.11-2020 clauses 19, 21, 27).
//!
//! rate = N_SD · N_BPSCS · R · N_SS / T_SYM, where
//! * N_SD — data subcarriers for the bandwidth (HT/VHT: 52, 108, 234, 468 for 20/40/80/160 MHz;
//!   HE: 234, 468, 980, 1960 with 12.8 µs symbols, or the RU's data tones),
//! * N_BPSCS and R — bits per subcarrier and code rate of the MCS (BPSK 1/2 … 1024-QAM 5/6),
//! * T_SYM — symbol time: 4.0 µs (HT/VHT long GI), 3.6 µs (short GI), 12.8 µs + 0.8/1.6/3.2 µs (HE).
//!
//! Inputs are MCS indices, stream counts, bandwidths and guard intervals; output is bit/s. Pure
//! functions, no clock. Example: VHT MCS 9, 2 SS, 80 MHz, short GI = 866.7 Mb/s.

use serde::{Deserialize, Serialize};

/// Channel (or, for HE, resource unit) width.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Bandwidth {
    /// 20 MHz.
    Mhz20,
    /// 40 MHz.
    Mhz40,
    /// 80 MHz.
    Mhz80,
    /// 160 MHz or 80+80 MHz.
    Mhz160,
}

impl Bandwidth {
    /// Width in MHz.
    pub fn mhz(self) -> u32 {
        match self {
            Bandwidth::Mhz20 => 20,
            Bandwidth::Mhz40 => 40,
            Bandwidth::Mhz80 => 80,
            Bandwidth::Mhz160 => 160,
        }
    }
    /// From a width in MHz (20, 40, 80, 160).
    pub fn from_mhz(mhz: u32) -> Option<Bandwidth> {
        Some(match mhz {
            20 => Bandwidth::Mhz20,
            40 => Bandwidth::Mhz40,
            80 => Bandwidth::Mhz80,
            160 => Bandwidth::Mhz160,
            _ => return None,
        })
    }
    /// HT/VHT data subcarriers N_SD.
    pub fn vht_data_subcarriers(self) -> u32 {
        match self {
            Bandwidth::Mhz20 => 52,
            Bandwidth::Mhz40 => 108,
            Bandwidth::Mhz80 => 234,
            Bandwidth::Mhz160 => 468,
        }
    }
    /// HE data subcarriers N_SD for a full-band SU PPDU (242/484/996/2×996-tone RU).
    pub fn he_data_subcarriers(self) -> u32 {
        match self {
            Bandwidth::Mhz20 => 234,
            Bandwidth::Mhz40 => 468,
            Bandwidth::Mhz80 => 980,
            Bandwidth::Mhz160 => 1960,
        }
    }
}

/// Modulation and code rate of an MCS: (bits per subcarrier per stream, rate numerator,
/// rate denominator). Index 0–11 as in VHT/HE; HT uses 0–7 per stream.
const MODULATION: [(u32, u32, u32); 12] = [
    (1, 1, 2),  // BPSK 1/2
    (2, 1, 2),  // QPSK 1/2
    (2, 3, 4),  // QPSK 3/4
    (4, 1, 2),  // 16-QAM 1/2
    (4, 3, 4),  // 16-QAM 3/4
    (6, 2, 3),  // 64-QAM 2/3
    (6, 3, 4),  // 64-QAM 3/4
    (6, 5, 6),  // 64-QAM 5/6
    (8, 3, 4),  // 256-QAM 3/4
    (8, 5, 6),  // 256-QAM 5/6
    (10, 3, 4), // 1024-QAM 3/4
    (10, 5, 6), // 1024-QAM 5/6
];

/// Data bits per OFDM symbol N_DBPS = N_SD · N_BPSCS · R · N_SS (may be fractional for
/// combinations the standard excludes; then `None`).
pub fn data_bits_per_symbol(n_sd: u32, mcs: u8, nss: u8) -> Option<u32> {
    let (bpscs, num, den) = *MODULATION.get(mcs as usize)?;
    let coded = n_sd * bpscs * nss as u32;
    (coded * num).is_multiple_of(den).then_some(coded * num / den)
}

fn rate_bps(n_sd: u32, mcs: u8, nss: u8, symbol_ns: u64) -> Option<u64> {
    let (bpscs, num, den) = *MODULATION.get(mcs as usize)?;
    let bits_num = n_sd as u64 * bpscs as u64 * nss as u64 * num as u64; // per symbol × den
                                                                         // bits/s = bits_num / den / (symbol_ns · 1e-9), rounded to the nearest bit/s
    let scaled = bits_num * 1_000_000_000;
    let d = den as u64 * symbol_ns;
    Some((scaled + d / 2) / d)
}

/// HT (802.11n) rate for MCS 0–31 (N_SS = mcs/8 + 1), 20 or 40 MHz.
pub fn ht_rate_bps(mcs: u8, bw: Bandwidth, short_gi: bool) -> Option<u64> {
    if mcs > 31 || !matches!(bw, Bandwidth::Mhz20 | Bandwidth::Mhz40) {
        return None;
    }
    let nss = mcs / 8 + 1;
    rate_bps(
        bw.vht_data_subcarriers(),
        mcs % 8,
        nss,
        if short_gi { 3_600 } else { 4_000 },
    )
}

/// VHT (802.11ac) rate for MCS 0–9, N_SS 1–8.
///
/// ```
/// use aggrate::phy::{vht_rate_bps, Bandwidth};
/// // 234 data subcarriers × 8 bits × 5/6 × 2 streams / 3.6 µs = 866.7 Mb/s
/// assert_eq!(vht_rate_bps(9, 2, Bandwidth::Mhz80, true), Some(866_666_667));
/// ```
/// `None` for out-of-range values. Combinations that
/// the standard excludes (see [`vht_mcs_valid`]) still get their arithmetic rate here, because
/// captures report what the radio used; the emulator checks validity separately.
pub fn vht_rate_bps(mcs: u8, nss: u8, bw: Bandwidth, short_gi: bool) -> Option<u64> {
    if mcs > 9 || !(1..=8).contains(&nss) {
        return None;
    }
    rate_bps(
        bw.vht_data_subcarriers(),
        mcs,
        nss,
        if short_gi { 3_600 } else { 4_000 },
    )
}

/// Whether a VHT MCS/NSS/bandwidth combination is allowed (IEEE 802.11-2020 21.5).
///
/// The rule: N_DBPS must be an integer and divide evenly among the N_ES BCC encoders (one per
/// ~600 Mb/s of long-GI rate). That excludes MCS 9 at 20 MHz for 1, 2, 4, 5, 7, 8 streams and
/// MCS 6 at 80 MHz for 3 and 7 streams. The standard's encoder tables use more encoders than the
/// 600 Mb/s rule for two combinations, which it therefore also excludes: 80 MHz 6 SS MCS 9 and
/// 160 MHz 3 SS MCS 9 (N_DBPS = 9360 with N_ES = 6 or 9 would leave fractional bits).
pub fn vht_mcs_valid(mcs: u8, nss: u8, bw: Bandwidth) -> bool {
    if mcs > 9 || !(1..=8).contains(&nss) {
        return false;
    }
    let n_sd = bw.vht_data_subcarriers();
    let Some(ndbps) = data_bits_per_symbol(n_sd, mcs, nss) else {
        return false;
    };
    let lgi_rate = ndbps as u64 * 1_000_000_000 / 4_000;
    let n_es = lgi_rate.div_ceil(600_000_000).max(1) as u32;
    let table_exception = matches!((bw, nss, mcs), (Bandwidth::Mhz80, 6, 9) | (Bandwidth::Mhz160, 3, 9));
    ndbps.is_multiple_of(n_es) && !table_exception
}

/// HE guard interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum HeGi {
    /// 0.8 µs.
    Us0_8,
    /// 1.6 µs.
    Us1_6,
    /// 3.2 µs.
    Us3_2,
}

impl HeGi {
    fn ns(self) -> u64 {
        match self {
            HeGi::Us0_8 => 800,
            HeGi::Us1_6 => 1_600,
            HeGi::Us3_2 => 3_200,
        }
    }
}

/// HE (802.11ax) SU rate for MCS 0–11, N_SS 1–8, with `n_sd` data tones (use
/// [`Bandwidth::he_data_subcarriers`] for a full-band PPDU). Symbol = 12.8 µs + GI.
pub fn he_rate_bps(mcs: u8, nss: u8, n_sd: u32, gi: HeGi) -> Option<u64> {
    if mcs > 11 || !(1..=8).contains(&nss) || n_sd == 0 {
        return None;
    }
    rate_bps(n_sd, mcs, nss, 12_800 + gi.ns())
}

/// HE data tones of the radiotap "data bandwidth/RU allocation" code (0–10); `None` if unknown.
pub fn he_ru_data_tones(code: u8) -> Option<u32> {
    Some(match code {
        0 => 234,
        1 => 468,
        2 => 980,
        3 => 1960,
        4 => 24,    // 26-tone RU
        5 => 48,    // 52-tone RU
        6 => 102,   // 106-tone RU
        7 => 234,   // 242-tone RU
        8 => 468,   // 484-tone RU
        9 => 980,   // 996-tone RU
        10 => 1960, // 2×996-tone RU
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mbps(bps: Option<u64>) -> f64 {
        bps.unwrap() as f64 / 1e6
    }

    #[test]
    fn known_rates_from_the_standard_tables() {
        // HT: MCS 7 20 MHz LGI 65, SGI 72.2; MCS 15 40 MHz SGI 300.
        assert_eq!(mbps(ht_rate_bps(7, Bandwidth::Mhz20, false)), 65.0);
        assert!((mbps(ht_rate_bps(7, Bandwidth::Mhz20, true)) - 72.222).abs() < 0.001);
        assert_eq!(mbps(ht_rate_bps(15, Bandwidth::Mhz40, true)), 300.0);
        assert_eq!(ht_rate_bps(7, Bandwidth::Mhz80, false), None);
        // VHT: MCS 9 2SS 80 MHz SGI = 866.7; MCS 0 1SS 20 LGI = 6.5; MCS 9 8SS 160 SGI = 6933.3.
        assert!((mbps(vht_rate_bps(9, 2, Bandwidth::Mhz80, true)) - 866.667).abs() < 0.001);
        assert_eq!(mbps(vht_rate_bps(0, 1, Bandwidth::Mhz20, false)), 6.5);
        assert!((mbps(vht_rate_bps(9, 8, Bandwidth::Mhz160, true)) - 6933.333).abs() < 0.001);
        // HE: MCS 11 2SS 80 MHz 0.8 µs = 1201.0; MCS 0 1SS 20 MHz 3.2 µs = 7.3.
        assert!((mbps(he_rate_bps(11, 2, 980, HeGi::Us0_8)) - 1200.98).abs() < 0.01);
        assert!((mbps(he_rate_bps(0, 1, 234, HeGi::Us3_2)) - 7.3125).abs() < 0.001);
    }

    #[test]
    fn vht_exclusions_match_the_standard() {
        use Bandwidth::*;
        // Excluded combinations listed in IEEE 802.11-2020 21.5.
        for (bw, nss, mcs) in [
            (Mhz20, 1, 9),
            (Mhz20, 2, 9),
            (Mhz20, 4, 9),
            (Mhz80, 3, 6),
            (Mhz80, 6, 9),
            (Mhz80, 7, 6),
            (Mhz160, 3, 9),
        ] {
            assert!(!vht_mcs_valid(mcs, nss, bw), "{bw:?} {nss} {mcs} should be invalid");
        }
        for (bw, nss, mcs) in [
            (Mhz20, 3, 9),
            (Mhz80, 2, 9),
            (Mhz80, 1, 9),
            (Mhz40, 1, 9),
            (Mhz160, 2, 9),
        ] {
            assert!(vht_mcs_valid(mcs, nss, bw), "{bw:?} {nss} {mcs} should be valid");
        }
    }
}

//! Emulator configuration: serde (TOML) structs, checked once into [`ValidWlanConfig`].

use serde::{Deserialize, Serialize};

use super::codel::Aqm;
use super::timing::PhyMode;
use crate::phy::{self, Bandwidth};

/// One station's link.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StationConfig {
    /// VHT (802.11ac) or HT (802.11n).
    pub vht: bool,
    /// MCS (VHT 0–9, HT 0–7 per stream).
    pub mcs: u8,
    /// Spatial streams (VHT 1–8, HT 1–4).
    pub nss: u8,
    /// Channel width in MHz (20, 40, 80, 160; HT: 20, 40).
    pub bw_mhz: u32,
    /// Short guard interval.
    pub short_gi: bool,
    /// Rate adaptation: the MCS moves between A-MPDUs (`None`: always `mcs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_adaptation: Option<RateAdaptation>,
}

impl Default for StationConfig {
    fn default() -> Self {
        StationConfig {
            vht: true,
            mcs: 9,
            nss: 2,
            bw_mhz: 80,
            short_gi: true,
            rate_adaptation: None,
        }
    }
}

/// A random walk of the MCS, as a rate-control algorithm (Minstrel, Intel's) produces on a
/// changing channel: starting at the station's `mcs`, after an exponential dwell of mean
/// `dwell_ms` the next A-MPDU goes one MCS up or down (within `[mcs_min, mcs_max]`, skipping MCSs
/// the PHY does not define for the station's width and streams).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateAdaptation {
    /// Lowest MCS.
    pub mcs_min: u8,
    /// Highest MCS.
    pub mcs_max: u8,
    /// Mean time between steps (ms).
    pub dwell_ms: f64,
}

impl WlanConfig {
    /// The default AP with one VHT station (2 SS, 80 MHz, short GI) per MCS in `mcs`.
    pub fn vht_stations(mcs: &[u8]) -> WlanConfig {
        let s = StationConfig::default();
        WlanConfig::vht_stations_with(mcs, s.nss, s.bw_mhz)
    }

    /// The default AP with one VHT station of `nss` streams on `bw_mhz` per MCS in `mcs`.
    pub fn vht_stations_with(mcs: &[u8], nss: u8, bw_mhz: u32) -> WlanConfig {
        WlanConfig {
            stations: mcs
                .iter()
                .map(|&mcs| StationConfig {
                    mcs,
                    nss,
                    bw_mhz,
                    ..StationConfig::default()
                })
                .collect(),
            ..WlanConfig::default()
        }
    }
}

/// Where the radio stamps TSFT inside the PPDU (drivers differ; readers must not care).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TsftAt {
    /// First symbol of the PPDU.
    Start,
    /// End of the PPDU (ns-3).
    End,
}

/// The AP's downlink model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WlanConfig {
    /// Stations, served round robin.
    pub stations: Vec<StationConfig>,
    /// Per-station AP queue limit (packets, drop-tail).
    pub queue_limit: usize,
    /// The queue discipline in front of the limit (FIFO by default; CoDel as a Linux AP).
    #[serde(skip_serializing_if = "Aqm::is_fifo")]
    pub aqm: Aqm,
    /// Most MPDUs per A-MPDU (block-ack window).
    pub max_ampdu_mpdus: u16,
    /// Most bytes per A-MPDU.
    pub max_ampdu_bytes: usize,
    /// Longest PPDU (µs).
    pub max_ppdu_us: u32,
    /// PSDUs longer than this are protected by RTS/CTS (bytes).
    pub rts_threshold: usize,
    /// EDCA CWmin.
    pub cw_min: u32,
    /// EDCA CWmax.
    pub cw_max: u32,
    /// EDCA AIFSN.
    pub aifsn: u32,
    /// Probability that one MPDU is lost (retransmitted in a later A-MPDU).
    pub mpdu_error_rate: f64,
    /// Retransmissions before an MPDU is dropped.
    pub retry_limit: u8,
    /// Contending uplink stations (single-MPDU frames, Poisson arrivals).
    pub contenders: u32,
    /// Offered load of each contender (Mb/s).
    pub contender_rate_mbps: f64,
    /// Contenders' IP packet size.
    pub contender_bytes: usize,
    /// Contenders' link.
    pub contender_phy: StationConfig,
    /// Most frames a contender sends in one transmit opportunity: above 1 it is a neighbouring
    /// network's AP aggregating its downlink (an A-MPDU of up to this many of its queued frames,
    /// answered by a Block Ack); 1 is a station sending single frames.
    #[serde(skip_serializing_if = "is_one")]
    pub contender_ampdu: u16,
    /// How the contenders' frames arrive.
    #[serde(skip_serializing_if = "Arrivals::is_poisson")]
    pub contender_arrivals: Arrivals,
    /// Whose network the contenders belong to: another one on the same channel (default) or
    /// this AP's own (other stations uploading to it). The medium is the same either way; a
    /// sniffer tells them apart by their addresses.
    #[serde(skip_serializing_if = "ContenderBss::is_other")]
    pub contender_bss: ContenderBss,
    /// Where TSFT is stamped.
    pub tsft_at: TsftAt,
    /// TSF at emulator time zero (µs).
    pub tsf_offset_us: u64,
    /// Channel centre frequency written to captures (MHz).
    pub channel_mhz: u16,
    /// Most IP packets per MPDU: above 1 the AP packs queued packets into A-MSDUs (inside the
    /// A-MPDU), as Linux and commercial APs do; 1 sends one packet per MPDU.
    pub amsdu_max_msdus: u16,
    /// Most bytes of one A-MSDU (subframe headers and padding included; 802.11ac allows 7,935
    /// or 11,454 less the MAC header).
    pub amsdu_max_bytes: usize,
}

impl Default for WlanConfig {
    fn default() -> Self {
        WlanConfig {
            stations: vec![StationConfig::default()],
            queue_limit: 1000,
            aqm: Aqm::Fifo,
            max_ampdu_mpdus: 64,
            max_ampdu_bytes: 1_048_575,
            max_ppdu_us: 5_484,
            rts_threshold: 65_535,
            cw_min: 15,
            cw_max: 1023,
            aifsn: 3,
            mpdu_error_rate: 0.0,
            retry_limit: 7,
            contenders: 0,
            contender_rate_mbps: 10.0,
            contender_bytes: 1500,
            contender_phy: StationConfig {
                mcs: 7,
                nss: 1,
                ..StationConfig::default()
            },
            contender_ampdu: 1,
            contender_arrivals: Arrivals::Poisson,
            contender_bss: ContenderBss::Other,
            tsft_at: TsftAt::Start,
            tsf_offset_us: 0,
            channel_mhz: 5210,
            amsdu_max_msdus: 1,
            amsdu_max_bytes: 7935,
        }
    }
}

fn is_one(v: &u16) -> bool {
    *v == 1
}

/// How a contender's frames arrive (its offered load is `contender_rate_mbps` in every kind but
/// the saturated one).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum Arrivals {
    /// Poisson arrivals at the offered load.
    #[default]
    Poisson,
    /// Always a frame queued: the contender takes whatever EDCA gives it.
    Saturated,
    /// On/off: Poisson arrivals during `on_ms`, none during `off_ms` (a video stream's chunks),
    /// the same mean load; each contender's phase is drawn from the seed.
    OnOff {
        /// Length of a burst (ms).
        on_ms: f64,
        /// Silence between bursts (ms).
        off_ms: f64,
    },
}

impl Arrivals {
    fn is_poisson(&self) -> bool {
        *self == Arrivals::Poisson
    }
}

impl std::str::FromStr for Arrivals {
    type Err = String;
    /// `poisson`, `saturated`, or `on-off:ON_MS/OFF_MS`.
    fn from_str(s: &str) -> Result<Arrivals, String> {
        let err =
            || format!("contender arrivals {s:?}: use poisson, saturated or on-off:ON_MS/OFF_MS (e.g. on-off:200/800)");
        match s {
            "poisson" => Ok(Arrivals::Poisson),
            "saturated" => Ok(Arrivals::Saturated),
            _ => {
                let rest = s.strip_prefix("on-off:").ok_or_else(err)?;
                let (on, off) = rest.split_once('/').ok_or_else(err)?;
                let on_ms: f64 = on.trim().parse().map_err(|_| err())?;
                let off_ms: f64 = off.trim().parse().map_err(|_| err())?;
                Ok(Arrivals::OnOff { on_ms, off_ms })
            }
        }
    }
}

/// Whose network the contenders belong to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ContenderBss {
    /// Another network on the same channel (its AP or its stations).
    #[default]
    Other,
    /// This AP's own: other stations of the network sending to the AP (an uplink).
    Own,
}

impl ContenderBss {
    fn is_other(&self) -> bool {
        *self == ContenderBss::Other
    }
}

impl std::str::FromStr for ContenderBss {
    type Err = String;
    /// `other` or `own`.
    fn from_str(s: &str) -> Result<ContenderBss, String> {
        match s {
            "other" => Ok(ContenderBss::Other),
            "own" => Ok(ContenderBss::Own),
            _ => Err(format!(
                "contender network {s:?}: use other (a neighbouring network) or own (stations of this AP's network sending to it)"
            )),
        }
    }
}

/// A configuration value out of range.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{field} = {value}: {allowed}")]
pub struct ConfigError {
    /// Field path, e.g. `stations[1].mcs`.
    pub field: String,
    /// The value given.
    pub value: String,
    /// What is allowed.
    pub allowed: String,
}

pub(crate) fn bad(field: impl Into<String>, value: impl ToString, allowed: impl Into<String>) -> ConfigError {
    ConfigError {
        field: field.into(),
        value: value.to_string(),
        allowed: allowed.into(),
    }
}

/// A checked configuration, with each station's PHY mode resolved.
#[derive(Clone, Debug, PartialEq)]
pub struct ValidWlanConfig {
    pub(crate) cfg: WlanConfig,
    pub(crate) modes: Vec<PhyMode>,
    /// Per station, the MCSs rate adaptation may use (empty: fixed).
    pub(crate) ra_mcs: Vec<Vec<u8>>,
    pub(crate) contender_mode: PhyMode,
}

impl ValidWlanConfig {
    /// The configuration.
    pub fn config(&self) -> &WlanConfig {
        &self.cfg
    }
    /// Resolved PHY mode of each station.
    pub fn modes(&self) -> &[PhyMode] {
        &self.modes
    }
}

fn check_station(s: &StationConfig, name: &str) -> Result<PhyMode, ConfigError> {
    let bw = Bandwidth::from_mhz(s.bw_mhz)
        .ok_or_else(|| bad(format!("{name}.bw_mhz"), s.bw_mhz, "one of 20, 40, 80, 160"))?;
    if s.vht {
        if !(1..=8).contains(&s.nss) {
            return Err(bad(format!("{name}.nss"), s.nss, "1..=8 for VHT"));
        }
        if s.mcs > 9 {
            return Err(bad(format!("{name}.mcs"), s.mcs, "0..=9 for VHT"));
        }
        if !phy::vht_mcs_valid(s.mcs, s.nss, bw) {
            let ok: Vec<String> = (0..=9)
                .filter(|m| phy::vht_mcs_valid(*m, s.nss, bw))
                .map(|m| m.to_string())
                .collect();
            return Err(bad(
                format!("{name}.mcs"),
                s.mcs,
                format!(
                    "not defined for VHT {} MHz with {} streams (allowed: {})",
                    s.bw_mhz,
                    s.nss,
                    ok.join(", ")
                ),
            ));
        }
    } else {
        if !(1..=4).contains(&s.nss) {
            return Err(bad(format!("{name}.nss"), s.nss, "1..=4 for HT"));
        }
        if s.mcs > 7 {
            return Err(bad(
                format!("{name}.mcs"),
                s.mcs,
                "0..=7 per stream for HT (streams via nss)",
            ));
        }
        if s.bw_mhz > 40 {
            return Err(bad(format!("{name}.bw_mhz"), s.bw_mhz, "20 or 40 for HT"));
        }
    }
    Ok(PhyMode {
        vht: s.vht,
        mcs: s.mcs,
        nss: s.nss,
        bw,
        short_gi: s.short_gi,
    })
}

/// The MCSs a station's rate adaptation may use.
fn check_rate_adaptation(s: &StationConfig, name: &str) -> Result<Vec<u8>, ConfigError> {
    let Some(ra) = &s.rate_adaptation else {
        return Ok(Vec::new());
    };
    let top = if s.vht { 9 } else { 7 };
    if ra.mcs_min > ra.mcs_max || ra.mcs_max > top || s.mcs < ra.mcs_min || s.mcs > ra.mcs_max {
        return Err(bad(
            format!("{name}.rate_adaptation"),
            format!("mcs_min {} .. mcs_max {} (mcs {})", ra.mcs_min, ra.mcs_max, s.mcs),
            format!("mcs_min <= mcs <= mcs_max <= {top}"),
        ));
    }
    if !(ra.dwell_ms.is_finite() && ra.dwell_ms >= 0.1) {
        return Err(bad(
            format!("{name}.rate_adaptation.dwell_ms"),
            ra.dwell_ms,
            ">= 0.1 ms",
        ));
    }
    let ok: Vec<u8> = (ra.mcs_min..=ra.mcs_max)
        .filter(|&m| {
            check_station(
                &StationConfig {
                    mcs: m,
                    rate_adaptation: None,
                    ..s.clone()
                },
                name,
            )
            .is_ok()
        })
        .collect();
    Ok(ok)
}

impl WlanConfig {
    /// Check every field; the error names the field and the allowed range.
    pub fn check(self) -> Result<ValidWlanConfig, ConfigError> {
        if self.stations.is_empty() || self.stations.len() > 64 {
            return Err(bad("stations", self.stations.len(), "1..=64 stations"));
        }
        let modes = self
            .stations
            .iter()
            .enumerate()
            .map(|(i, s)| check_station(s, &format!("stations[{i}]")))
            .collect::<Result<Vec<_>, _>>()?;
        let ra_mcs = self
            .stations
            .iter()
            .enumerate()
            .map(|(i, s)| check_rate_adaptation(s, &format!("stations[{i}]")))
            .collect::<Result<Vec<_>, _>>()?;
        let contender_mode = check_station(&self.contender_phy, "contender_phy")?;
        if self.queue_limit == 0 {
            return Err(bad("queue_limit", self.queue_limit, "at least 1 packet"));
        }
        if let Aqm::Codel { target_us, interval_us } = self.aqm {
            if target_us == 0 || interval_us <= target_us || interval_us > 10_000_000 {
                return Err(bad(
                    "aqm",
                    format!("codel target {target_us} µs, interval {interval_us} µs"),
                    "0 < target < interval <= 10 s",
                ));
            }
        }
        if !(1..=1024).contains(&self.max_ampdu_mpdus) {
            return Err(bad("max_ampdu_mpdus", self.max_ampdu_mpdus, "1..=1024"));
        }
        if !(1600..=6_500_631).contains(&self.max_ampdu_bytes) {
            return Err(bad("max_ampdu_bytes", self.max_ampdu_bytes, "1600..=6500631"));
        }
        if !(100..=10_000).contains(&self.max_ppdu_us) {
            return Err(bad("max_ppdu_us", self.max_ppdu_us, "100..=10000 µs (802.11ac: 5484)"));
        }
        if !(1..=1023).contains(&self.cw_min) || self.cw_max < self.cw_min || self.cw_max > 65_535 {
            return Err(bad(
                "cw_min/cw_max",
                format!("{}/{}", self.cw_min, self.cw_max),
                "1 <= cw_min <= cw_max <= 65535",
            ));
        }
        if !(1..=15).contains(&self.aifsn) {
            return Err(bad("aifsn", self.aifsn, "1..=15"));
        }
        if !(0.0..1.0).contains(&self.mpdu_error_rate) {
            return Err(bad("mpdu_error_rate", self.mpdu_error_rate, "0 <= p < 1"));
        }
        if self.contenders > 64 {
            return Err(bad("contenders", self.contenders, "0..=64"));
        }
        if self.contenders > 0
            && self.contender_arrivals != Arrivals::Saturated
            && !(self.contender_rate_mbps > 0.0 && self.contender_rate_mbps <= 10_000.0)
        {
            return Err(bad(
                "contender_rate_mbps",
                self.contender_rate_mbps,
                "0 < load <= 10000 Mb/s",
            ));
        }
        if !(1..=64).contains(&self.amsdu_max_msdus) {
            return Err(bad("amsdu_max_msdus", self.amsdu_max_msdus, "1..=64 (1: no A-MSDU)"));
        }
        if !(1600..=11_398).contains(&self.amsdu_max_bytes) {
            return Err(bad("amsdu_max_bytes", self.amsdu_max_bytes, "1600..=11398"));
        }
        if !(1..=64).contains(&self.contender_ampdu) {
            return Err(bad(
                "contender_ampdu",
                self.contender_ampdu,
                "1..=64 frames per transmit opportunity",
            ));
        }
        if let Arrivals::OnOff { on_ms, off_ms } = self.contender_arrivals {
            let ok = |v: f64| v.is_finite() && (0.1..=60_000.0).contains(&v);
            if !ok(on_ms) || !(off_ms == 0.0 || ok(off_ms)) {
                return Err(bad(
                    "contender_arrivals",
                    format!("on-off {on_ms}/{off_ms} ms"),
                    "on 0.1..=60000 ms, off 0 or 0.1..=60000 ms",
                ));
            }
        }
        if !(40..=7900).contains(&self.contender_bytes) {
            return Err(bad("contender_bytes", self.contender_bytes, "40..=7900"));
        }
        Ok(ValidWlanConfig {
            cfg: self,
            modes,
            ra_mcs,
            contender_mode,
        })
    }
}

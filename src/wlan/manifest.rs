//! Dataset manifests: one TOML file that expands into the emulator runs of a dataset.
//!
//! A manifest names a base [`Scenario`], the send rates to sweep (training and evaluation
//! points), how many packets each run carries, and optionally several station sets (MCS per
//! station). [`DatasetManifest::expand`] turns it into named, seeded runs; nothing here touches
//! files.

use serde::{Deserialize, Serialize};

use super::config::{bad, ConfigError, StationConfig};
use super::run::Scenario;
use super::traffic::FlowConfig;

/// What a run is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Training / cross-validation.
    Train,
    /// Held-out evaluation.
    Eval,
}

/// A dataset recipe (`datasets/*.toml`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatasetManifest {
    /// Dataset name (output folder).
    pub name: String,
    /// What it is.
    #[serde(default)]
    pub description: String,
    /// Seed of the first run; run k uses seed + k.
    pub seed: u64,
    /// Packets per run (all stations together); sets each run's duration.
    pub packets: u64,
    /// Send rates for training (Mb/s per station).
    pub train_rates_mbps: Vec<f64>,
    /// Send rates for evaluation only.
    #[serde(default)]
    pub eval_rates_mbps: Vec<f64>,
    /// Station sets: MCS per station; each set runs every rate. Empty: the base's stations.
    #[serde(default)]
    pub station_mcs: Vec<Vec<u8>>,
    /// Everything else (WLAN, noise, arrival process of the first flow, snap length via CLI).
    #[serde(default)]
    pub base: Scenario,
}

/// One emulator run of a dataset.
#[derive(Clone, Debug, PartialEq)]
pub struct PlannedRun {
    /// File stem, e.g. `paper_300mbps` (the rate tag is read back from it).
    pub name: String,
    /// Training or evaluation.
    pub role: Role,
    /// Send rate per station.
    pub rate_mbps: f64,
    /// The scenario.
    pub scenario: Scenario,
}

impl DatasetManifest {
    /// Expand into runs (each scenario still to be checked).
    pub fn expand(&self) -> Result<Vec<PlannedRun>, ConfigError> {
        if self.name.is_empty()
            || !self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(bad("name", &self.name, "non-empty, letters, digits, '_' or '-'"));
        }
        if self.packets == 0 || self.packets > 100_000_000 {
            return Err(bad("packets", self.packets, "1..=100000000"));
        }
        if self.train_rates_mbps.is_empty() && self.eval_rates_mbps.is_empty() {
            return Err(bad("train_rates_mbps", "[]", "at least one rate"));
        }
        let sets: Vec<Option<&Vec<u8>>> = if self.station_mcs.is_empty() {
            vec![None]
        } else {
            self.station_mcs.iter().map(Some).collect()
        };
        let rates = self
            .train_rates_mbps
            .iter()
            .map(|r| (*r, Role::Train))
            .chain(self.eval_rates_mbps.iter().map(|r| (*r, Role::Eval)));
        let rates: Vec<(f64, Role)> = rates.collect();
        let proto_flow = self.base.flows.first().cloned().unwrap_or_default();
        let proto_sta = self.base.wlan.stations.first().cloned().unwrap_or_default();
        let mut out = Vec::new();
        for set in &sets {
            for &(rate, role) in &rates {
                if !(rate > 0.0 && rate.is_finite()) {
                    return Err(bad("train_rates_mbps/eval_rates_mbps", rate, "> 0"));
                }
                let mut s = self.base.clone();
                let n = match set {
                    Some(mcs) => {
                        if mcs.is_empty() {
                            return Err(bad("station_mcs", "[]", "each set names at least one MCS"));
                        }
                        s.wlan.stations = mcs
                            .iter()
                            .map(|m| StationConfig {
                                mcs: *m,
                                ..proto_sta.clone()
                            })
                            .collect();
                        mcs.len()
                    }
                    None => s.wlan.stations.len(),
                };
                s.flows = (0..n)
                    .map(|i| FlowConfig {
                        sta: i as u16,
                        rate_mbps: rate,
                        ..proto_flow.clone()
                    })
                    .collect();
                let bits = self.packets as f64 * proto_flow.ip_len as f64 * 8.0;
                s.duration_s = bits / (rate * 1e6 * n as f64) + proto_flow.start_s;
                s.seed = self.seed + out.len() as u64;
                let rate_txt = if rate.fract() == 0.0 {
                    format!("{rate:.0}")
                } else {
                    format!("{rate}")
                };
                let name = match set {
                    Some(mcs) => format!(
                        "{}_{}sta_mcs{}_{}mbps",
                        self.name,
                        n,
                        mcs.iter().map(|m| m.to_string()).collect::<Vec<_>>().join("-"),
                        rate_txt
                    ),
                    None => format!("{}_{}mbps", self.name, rate_txt),
                };
                out.push(PlannedRun {
                    name,
                    role,
                    rate_mbps: rate,
                    scenario: s,
                });
            }
        }
        Ok(out)
    }
}

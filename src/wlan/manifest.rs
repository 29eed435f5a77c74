//! Dataset manifests: one TOML file that expands into the emulator runs of a dataset.
//!
//! A manifest names a base [`Scenario`], the send rates to sweep (training and evaluation
//! points), how many packets each run carries, optionally several station sets (MCS per
//! station), and optionally several receivers ([`ReceiverSpec`]: presets, random draws,
//! explicit stage lists, real-kernel paths), each of which runs every rate — so a dataset can
//! span receivers and a model can be judged on ones it did not see. [`DatasetManifest::expand`]
//! turns it into named, seeded runs; nothing here touches files.

use rand::SeedableRng;
use serde::{Deserialize, Serialize};

use super::config::{bad, ConfigError, StationConfig};
use super::noise::{NoisePreset, RandomReceiver, ReceivePath, Stage};
use super::run::Scenario;
use super::traffic::FlowConfig;

/// One receiver (or, with `random`, several) of a dataset. Exactly one of `preset`, `random`,
/// `stages` and `kernel` is given.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReceiverSpec {
    /// Name (default: the preset's name, `random-NN`, or `veth-…` from the kernel settings).
    #[serde(default)]
    pub name: Option<String>,
    /// A named receive path.
    #[serde(default)]
    pub preset: Option<NoisePreset>,
    /// This many receive paths drawn from the manifest's `random_receiver` ranges.
    #[serde(default)]
    pub random: Option<u32>,
    /// An explicit stage list.
    #[serde(default)]
    pub stages: Option<Vec<Stage>>,
    /// A real-kernel path (veth testbed, root): a comma list such as `gro,threaded,burner`
    /// (see `aggrate simulate --veth`).
    #[serde(default)]
    pub kernel: Option<String>,
}

/// Others on the channel for a dataset's runs (the base WLAN's contenders replaced): each entry
/// runs every receiver and rate. Defaults: no contenders, 10 Mb/s each, single frames, Poisson.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OthersSpec {
    /// Name in the runs' names (default from the settings: `quiet`, `sta2x5`, `ap1x50`,
    /// `sat1`, `burst1x25`, and with `up` in front for the AP's own stations: `up1x20`, …).
    pub name: Option<String>,
    /// Contending transmitters.
    pub contenders: u32,
    /// Offered load of each (Mb/s).
    pub contender_mbps: f64,
    /// Frames per transmit opportunity (above 1: a neighbouring network's AP aggregating).
    pub contender_ampdu: u16,
    /// How their frames arrive.
    pub contender_arrivals: super::config::Arrivals,
    /// Whose network they are in (`own`: stations uploading to the AP).
    pub contender_bss: super::config::ContenderBss,
}

impl Default for OthersSpec {
    fn default() -> Self {
        OthersSpec {
            name: None,
            contenders: 0,
            contender_mbps: 10.0,
            contender_ampdu: 1,
            contender_arrivals: super::config::Arrivals::Poisson,
            contender_bss: super::config::ContenderBss::Other,
        }
    }
}

impl OthersSpec {
    /// Its name: as given, or from the settings.
    pub fn name(&self) -> String {
        if let Some(n) = &self.name {
            return n.clone();
        }
        let mbps = if self.contender_mbps.fract() == 0.0 {
            format!("{:.0}", self.contender_mbps)
        } else {
            format!("{}", self.contender_mbps).replace('.', "p")
        };
        use super::config::{Arrivals, ContenderBss};
        let own = self.contender_bss == ContenderBss::Own;
        let up = if own { "up" } else { "" };
        // Poisson senders by what they are: neighbouring stations or APs, or the AP's own
        // stations sending single frames or A-MPDUs.
        let poisson = match (own, self.contender_ampdu > 1) {
            (false, false) => "sta",
            (false, true) => "ap",
            (true, false) => "up",
            (true, true) => "upagg",
        };
        match (self.contenders, self.contender_arrivals) {
            (0, _) => "quiet".into(),
            (n, Arrivals::Saturated) => format!("{up}sat{n}"),
            (n, Arrivals::OnOff { .. }) => format!("{up}burst{n}x{mbps}"),
            (n, Arrivals::Poisson) => format!("{poisson}{n}x{mbps}"),
        }
    }
}

/// A receiver after expansion.
#[derive(Clone, Debug, PartialEq)]
pub enum PlannedReceiver {
    /// The emulator's receive-path model.
    Model(ReceivePath),
    /// A real-kernel path: the `--veth` settings string.
    Kernel {
        /// Name.
        name: String,
        /// Settings.
        settings: String,
    },
}

impl PlannedReceiver {
    /// The receiver's name.
    pub fn name(&self) -> &str {
        match self {
            PlannedReceiver::Model(p) => &p.name,
            PlannedReceiver::Kernel { name, .. } => name,
        }
    }
}

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
    /// Receivers; each runs every rate (and station set). Empty: the base's receive path.
    #[serde(default)]
    pub receivers: Vec<ReceiverSpec>,
    /// Ranges for `random` receivers (default: [`RandomReceiver::default`]).
    #[serde(default)]
    pub random_receiver: Option<RandomReceiver>,
    /// Packets per run on a real-kernel receiver (they replay in real time; default `packets`).
    #[serde(default)]
    pub kernel_packets: Option<u64>,
    /// Others on the channel: each runs every receiver and rate (the base WLAN's contenders
    /// replaced; names `NAME_RECEIVER_OTHERS_RATEmbps`). Empty: the base's contenders.
    #[serde(default)]
    pub others: Vec<OthersSpec>,
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
    /// The scenario (its receive path set for model receivers).
    pub scenario: Scenario,
    /// The receiver (`None`: the base scenario's receive path).
    pub receiver: Option<PlannedReceiver>,
    /// The others on the channel, by name (`None`: the recipe has no `others`).
    pub others: Option<String>,
}

impl DatasetManifest {
    /// The receivers, expanded (random draws named `random-01` … from the manifest seed).
    pub fn planned_receivers(&self) -> Result<Vec<PlannedReceiver>, ConfigError> {
        let ranges = self.random_receiver.clone().unwrap_or_default();
        ranges
            .check()
            .map_err(|e| bad(format!("random_receiver.{}", e.field), e.value, e.allowed))?;
        let mut out: Vec<PlannedReceiver> = Vec::new();
        let mut drawn = 0u64;
        for (i, r) in self.receivers.iter().enumerate() {
            let field = format!("receivers[{i}]");
            let given = r.preset.is_some() as u8
                + r.random.is_some() as u8
                + r.stages.is_some() as u8
                + r.kernel.is_some() as u8;
            if given != 1 {
                return Err(bad(field, given, "exactly one of preset, random, stages, kernel"));
            }
            if let Some(p) = r.preset {
                let path = p.path().ok_or_else(|| {
                    bad(
                        format!("{field}.preset"),
                        "random",
                        "none, laptop or phone (use random = N)",
                    )
                })?;
                out.push(PlannedReceiver::Model(ReceivePath {
                    name: r.name.clone().unwrap_or(path.name.clone()),
                    ..path
                }));
            } else if let Some(n) = r.random {
                if n == 0 || n > 1000 {
                    return Err(bad(format!("{field}.random"), n, "1..=1000 draws"));
                }
                let stem = r.name.clone().unwrap_or_else(|| "random".into());
                for _ in 0..n {
                    drawn += 1;
                    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(self.seed);
                    rng.set_stream(10_000 + drawn);
                    out.push(PlannedReceiver::Model(
                        ranges.draw(format!("{stem}-{drawn:02}"), &mut rng),
                    ));
                }
            } else if let Some(st) = &r.stages {
                let name = r
                    .name
                    .clone()
                    .ok_or_else(|| bad(format!("{field}.name"), "none", "a name for a stage list"))?;
                out.push(PlannedReceiver::Model(ReceivePath::new(name, st.clone())));
            } else if let Some(k) = &r.kernel {
                let name = r.name.clone().unwrap_or_else(|| {
                    if k.is_empty() || k == "veth" {
                        "veth".into()
                    } else {
                        format!("veth-{}", k.replace([',', '='], "-"))
                    }
                });
                out.push(PlannedReceiver::Kernel {
                    name,
                    settings: k.clone(),
                });
            }
        }
        for (i, r) in out.iter().enumerate() {
            let name = r.name();
            if name.is_empty()
                || name.to_ascii_lowercase().contains("mbps")
                || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                return Err(bad(
                    format!("receivers[{i}].name"),
                    name,
                    "letters, digits, '_' or '-', without \"mbps\"",
                ));
            }
            if out[..i].iter().any(|o| o.name() == name) {
                return Err(bad(format!("receivers[{i}].name"), name, "unique names"));
            }
            if let PlannedReceiver::Model(p) = r {
                p.clone()
                    .check()
                    .map_err(|e| bad(format!("receivers[{i}].{}", e.field), e.value, e.allowed))?;
            }
        }
        Ok(out)
    }

    /// Expand into runs (each scenario still to be checked).
    pub fn expand(&self) -> Result<Vec<PlannedRun>, ConfigError> {
        let receivers: Vec<Option<PlannedReceiver>> = if self.receivers.is_empty() {
            vec![None]
        } else {
            self.planned_receivers()?.into_iter().map(Some).collect()
        };
        if let Some(k) = self.kernel_packets {
            if k == 0 || k > 10_000_000 {
                return Err(bad("kernel_packets", k, "1..=10000000"));
            }
        }
        let others: Vec<Option<&OthersSpec>> = if self.others.is_empty() {
            vec![None]
        } else {
            self.others.iter().map(Some).collect()
        };
        let names: Vec<String> = self.others.iter().map(OthersSpec::name).collect();
        for (i, n) in names.iter().enumerate() {
            if n.is_empty()
                || n.to_ascii_lowercase().contains("mbps")
                || !n.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            {
                return Err(bad(
                    format!("others[{i}].name"),
                    n,
                    "letters, digits or '-', without \"mbps\"",
                ));
            }
            if names[..i].contains(n) {
                return Err(bad(format!("others[{i}].name"), n, "a name no other entry has"));
            }
        }
        let mut out = Vec::new();
        for recv in &receivers {
            for oth in &others {
                let mut m = self.clone();
                let mut tag = String::new();
                match recv {
                    Some(PlannedReceiver::Model(p)) => {
                        m.base.noise = Some(p.clone());
                        tag = format!("{}_", p.name);
                    }
                    Some(PlannedReceiver::Kernel { name, .. }) => {
                        m.base.noise = None;
                        m.base.noise_preset = NoisePreset::None;
                        m.packets = self.kernel_packets.unwrap_or(self.packets);
                        tag = format!("{name}_");
                    }
                    None => {}
                }
                if let Some(o) = oth {
                    let w = &mut m.base.wlan;
                    w.contenders = o.contenders;
                    w.contender_rate_mbps = o.contender_mbps;
                    w.contender_ampdu = o.contender_ampdu;
                    w.contender_arrivals = o.contender_arrivals;
                    w.contender_bss = o.contender_bss;
                    tag = format!("{tag}{}_", o.name());
                }
                let first = out.len();
                for mut r in m.expand_rates(&tag)? {
                    r.scenario.seed = self.seed + (first + r.scenario.seed as usize) as u64;
                    r.receiver = recv.clone();
                    r.others = oth.map(OthersSpec::name);
                    out.push(r);
                }
            }
        }
        Ok(out)
    }

    /// Runs of one receiver: rates × station sets (seeds counted from 0; names `NAME_TAG…`).
    fn expand_rates(&self, tag: &str) -> Result<Vec<PlannedRun>, ConfigError> {
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
                s.seed = out.len() as u64;
                let rate_txt = if rate.fract() == 0.0 {
                    format!("{rate:.0}")
                } else {
                    format!("{rate}")
                };
                let name = match set {
                    Some(mcs) => format!(
                        "{}_{tag}{}sta_mcs{}_{}mbps",
                        self.name,
                        n,
                        mcs.iter().map(|m| m.to_string()).collect::<Vec<_>>().join("-"),
                        rate_txt
                    ),
                    None => format!("{}_{tag}{}mbps", self.name, rate_txt),
                };
                out.push(PlannedRun {
                    name,
                    role,
                    rate_mbps: rate,
                    scenario: s,
                    receiver: None,
                    others: None,
                });
            }
        }
        Ok(out)
    }
}

/// The WLAN a flow is sent over, as far as it is known (`None`: not known or not set): what a
/// model was trained on (`metrics.training_wlan`), what captures show, and what a calibration
/// bank is emulated at in place of its manifest's `[base]`. The gaps inside and between
/// A-MPDUs are the WLAN's airtimes, so these numbers decide whether two receivers' timings can
/// be compared (models/README.md, "Another WLAN").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WlanSettings {
    /// IP packet bytes of the flow.
    pub ip_len: Option<u16>,
    /// VHT MCS of the access point's frames.
    pub mcs: Option<u8>,
    /// Spatial streams.
    pub nss: Option<u8>,
    /// Channel width (MHz).
    pub bw_mhz: Option<u32>,
}

impl WlanSettings {
    /// The WLAN of `manifest`'s base: its first station and flow.
    pub fn of(manifest: &DatasetManifest) -> WlanSettings {
        let st = manifest.base.wlan.stations.first();
        WlanSettings {
            ip_len: manifest.base.flows.first().map(|f| f.ip_len),
            mcs: st.map(|s| s.mcs),
            nss: st.map(|s| s.nss),
            bw_mhz: st.map(|s| s.bw_mhz),
        }
    }

    /// Nothing known.
    pub fn is_empty(&self) -> bool {
        *self == WlanSettings::default()
    }

    /// Put what is set into `manifest`'s base (every station and flow), checked before any work:
    /// the error names the field.
    pub fn apply(&self, manifest: &mut DatasetManifest) -> Result<(), ConfigError> {
        let base = &mut manifest.base;
        for st in &mut base.wlan.stations {
            st.mcs = self.mcs.unwrap_or(st.mcs);
            st.nss = self.nss.unwrap_or(st.nss);
            st.bw_mhz = self.bw_mhz.unwrap_or(st.bw_mhz);
        }
        for f in &mut base.flows {
            f.ip_len = self.ip_len.unwrap_or(f.ip_len);
        }
        base.clone().check()?;
        Ok(())
    }

    /// In words, what is known, e.g. `VHT MCS 9, 2 SS, 80 MHz, 1500-byte packets`.
    pub fn describe(&self) -> String {
        let mut v = Vec::new();
        if let (Some(m), Some(n)) = (self.mcs, self.nss) {
            v.push(format!("VHT MCS {m}, {n} SS"));
        }
        if let Some(b) = self.bw_mhz {
            v.push(format!("{b} MHz"));
        }
        if let Some(l) = self.ip_len {
            v.push(format!("{l}-byte packets"));
        }
        v.join(", ")
    }

    /// How `other` differs where both are known: MCS, streams or width, or a packet size more
    /// than 10 % off (`self` is what a model was trained on).
    pub fn unlike(&self, other: &WlanSettings) -> Vec<String> {
        let mut v = Vec::new();
        let mut differ = |what: &str, a: Option<u32>, b: Option<u32>| {
            if let (Some(a), Some(b)) = (a, b) {
                if a != b {
                    v.push(format!("{what} {b} (trained on {a})"));
                }
            }
        };
        differ("MCS", self.mcs.map(u32::from), other.mcs.map(u32::from));
        differ("spatial streams", self.nss.map(u32::from), other.nss.map(u32::from));
        differ("width MHz", self.bw_mhz, other.bw_mhz);
        if let (Some(a), Some(b)) = (self.ip_len, other.ip_len) {
            if (a as f64 - b as f64).abs() > 0.1 * a as f64 {
                v.push(format!("{b}-byte packets (trained on {a})"));
            }
        }
        v
    }
}

/// What `aggrate dataset build` wrote: the dataset folder's `manifest.json`. One type for the
/// writer and every reader (`pipeline::inputs` reads it; the Python package and the Spark jobs
/// read the same JSON fields).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BuiltDataset {
    /// The recipe's name.
    pub name: String,
    /// Its description.
    pub description: String,
    /// The recipe file it was built from.
    pub manifest: String,
    /// The aggrate version that built it.
    pub aggrate_version: String,
    /// The recipe's seed.
    pub seed: u64,
    /// Snap length of the written frames, when set.
    pub snaplen: Option<u32>,
    /// The base receive-path preset.
    pub noise_preset: String,
    /// Packets per run.
    pub packets_per_run: u64,
    /// The runs.
    pub runs: Vec<BuiltRun>,
    /// Packets delivered in all.
    pub total_packets: u64,
}

/// Whose receive path a run's captures went through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReceiverKind {
    /// The emulator's receive-path model.
    Model,
    /// A real-kernel replay.
    Kernel,
}

/// One built run of a [`BuiltDataset`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BuiltRun {
    /// Run name.
    pub name: String,
    /// What it is for.
    pub role: Role,
    /// Offered rate (Mb/s).
    pub rate_mbps: f64,
    /// Seed.
    pub seed: u64,
    /// Duration (s).
    pub duration_s: f64,
    /// Receiver name (groups for `train --group-by receiver`).
    pub receiver: String,
    /// The emulator's receive-path model or a real-kernel replay.
    pub receiver_kind: ReceiverKind,
    /// The receive path's stages, or the kernel settings.
    pub receiver_path: serde_json::Value,
    /// Per station.
    pub stations: Vec<BuiltStation>,
    /// The others on the channel, by name (recipes with `others` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub others: Option<String>,
}

/// One station's capture of a [`BuiltRun`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BuiltStation {
    /// Station index.
    pub sta: u16,
    /// VHT MCS.
    pub mcs: u8,
    /// The capture's file name, in the dataset folder.
    pub file: String,
    /// Packets delivered.
    pub delivered: u64,
    /// A-MPDUs.
    pub ampdus: u64,
    /// Mean MPDUs per A-MPDU.
    pub mean_agg: f64,
    /// Received rate (Mb/s).
    pub received_mbps: f64,
}

impl BuiltRun {
    /// The record of planned run `r`, run as `scn`, summarised in `summary`, captured to `paths`
    /// (one per station).
    pub fn new(
        r: &PlannedRun,
        scn: &super::run::ValidScenario,
        summary: &super::run::RunSummary,
        paths: &[std::path::PathBuf],
    ) -> BuiltRun {
        let (receiver, receiver_kind, receiver_path) = match &r.receiver {
            Some(PlannedReceiver::Kernel { name, settings }) => {
                (name.clone(), ReceiverKind::Kernel, serde_json::json!(settings))
            }
            _ => match &scn.noise {
                Some(p) => (
                    p.path().name.clone(),
                    ReceiverKind::Model,
                    serde_json::json!(p.path().stages),
                ),
                None => ("none".to_string(), ReceiverKind::Model, serde_json::json!([])),
            },
        };
        BuiltRun {
            name: r.name.clone(),
            role: r.role,
            rate_mbps: r.rate_mbps,
            seed: r.scenario.seed,
            duration_s: r.scenario.duration_s,
            receiver,
            receiver_kind,
            receiver_path,
            stations: summary
                .stations
                .iter()
                .zip(paths)
                .map(|(s, p)| BuiltStation {
                    sta: s.sta,
                    mcs: r.scenario.wlan.stations[s.sta as usize].mcs,
                    file: p
                        .file_name()
                        .map(|f| f.to_string_lossy().into_owned())
                        .unwrap_or_default(),
                    delivered: s.delivered,
                    ampdus: s.ampdus,
                    mean_agg: s.mean_agg,
                    received_mbps: s.received_mbps,
                })
                .collect(),
            others: r.others.clone(),
        }
    }
}

#[cfg(test)]
mod built_tests {
    use super::*;

    #[test]
    fn a_built_manifest_reads_back_as_written_and_names_what_is_wrong() {
        let run = BuiltRun {
            name: "r".into(),
            role: Role::Eval,
            rate_mbps: 100.0,
            seed: 1,
            duration_s: 2.0,
            receiver: "veth".into(),
            receiver_kind: ReceiverKind::Kernel,
            receiver_path: serde_json::json!({"gro": true}),
            stations: vec![BuiltStation {
                sta: 0,
                mcs: 9,
                file: "r.pcapng".into(),
                delivered: 10,
                ampdus: 5,
                mean_agg: 2.0,
                received_mbps: 99.0,
            }],
            others: Some("sta1x5".into()),
        };
        let d = BuiltDataset {
            name: "d".into(),
            description: String::new(),
            manifest: "d.toml".into(),
            aggrate_version: "0".into(),
            seed: 7,
            snaplen: None,
            noise_preset: "none".into(),
            packets_per_run: 10,
            runs: vec![run],
            total_packets: 10,
        };
        let text = serde_json::to_string_pretty(&d).unwrap();
        assert!(text.contains("\"receiver_kind\": \"kernel\"") && text.contains("\"role\": \"eval\""));
        assert_eq!(serde_json::from_str::<BuiltDataset>(&text).unwrap(), d);
        assert!(text.contains("\"others\": \"sta1x5\""));
        let bad = text.replace("\"kernel\"", "\"kernal\"");
        let e = serde_json::from_str::<BuiltDataset>(&bad).unwrap_err().to_string();
        assert!(e.contains("kernal"), "{e}");
    }

    #[test]
    fn others_cross_every_receiver_and_rate_and_name_their_runs() {
        let m: DatasetManifest = toml::from_str(
            r#"
name = "c"
seed = 1
packets = 100
train_rates_mbps = [100, 200]
[[receivers]]
preset = "laptop"
[[receivers]]
preset = "phone"
[[others]]
contenders = 0
[[others]]
contenders = 2
contender_mbps = 5.0
[[others]]
contenders = 1
contender_mbps = 50.0
contender_ampdu = 32
[[others]]
contenders = 1
contender_arrivals = { kind = "saturated" }
[[others]]
contenders = 1
contender_mbps = 20.0
contender_ampdu = 16
contender_bss = "own"
"#,
        )
        .unwrap();
        let runs = m.expand().unwrap();
        assert_eq!(runs.len(), 2 * 5 * 2);
        let r = runs
            .iter()
            .find(|r| r.name == "c_phone_ap1x50_200mbps")
            .expect("named by receiver and others");
        assert_eq!(r.others.as_deref(), Some("ap1x50"));
        let w = &r.scenario.wlan;
        assert_eq!((w.contenders, w.contender_rate_mbps, w.contender_ampdu), (1, 50.0, 32));
        let q = runs.iter().find(|r| r.name == "c_laptop_quiet_100mbps").unwrap();
        assert_eq!(q.scenario.wlan.contenders, 0);
        assert!(runs.iter().any(|r| r.name == "c_laptop_sta2x5_100mbps"));
        assert!(runs.iter().any(|r| r.name == "c_laptop_sat1_100mbps"));
        let up = runs.iter().find(|r| r.name == "c_phone_upagg1x20_100mbps").unwrap();
        assert_eq!(up.scenario.wlan.contender_bss, super::super::ContenderBss::Own);
        assert_eq!(q.scenario.wlan.contender_bss, super::super::ContenderBss::Other);
        let mut seeds: Vec<u64> = runs.iter().map(|r| r.scenario.seed).collect();
        seeds.dedup();
        assert_eq!(seeds.len(), runs.len(), "every run its own seed");
        // Two entries with one name, and a name that would read as a rate, are refused by name.
        let mut twice = m.clone();
        twice.others.push(twice.others[1].clone());
        let e = twice.expand().unwrap_err().to_string();
        assert!(e.contains("others[5].name"), "{e}");
        let mut rate = m;
        rate.others[0].name = Some("5mbps".into());
        let e = rate.expand().unwrap_err().to_string();
        assert!(e.contains("others[0].name"), "{e}");
    }
}

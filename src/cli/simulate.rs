//! `aggrate simulate`: run the 802.11ac downlink emulator and write what each station's monitor
//! interface would record (radiotap captures with kernel receive times).

use std::path::PathBuf;

use anyhow::{bail, Context, Result};

use aggrate::testbed::KernelPath;
use aggrate::wlan::noise::{NoisePreset, ReceivePath};
use aggrate::wlan::run::Scenario;
use aggrate::wlan::traffic::{Arrival, BackhaulConfig, FlowConfig};
use aggrate::wlan::StationConfig;

use super::progress::Ui;
use super::{simulate_replayed, simulate_to, Exit};

#[derive(Debug, clap::Args)]
pub(crate) struct SimulateArgs {
    /// TOML scenario file (see datasets/README.md); flags below override it.
    #[arg(long)]
    pub(crate) config: Option<PathBuf>,
    /// Offered load per station (Mb/s).
    #[arg(long)]
    pub(crate) rate_mbps: Option<f64>,
    /// Seconds of traffic.
    #[arg(long)]
    pub(crate) duration: Option<f64>,
    /// VHT MCS per station (comma-separated; one value applies to all).
    #[arg(long, value_delimiter = ',')]
    pub(crate) mcs: Vec<u8>,
    /// Spatial streams.
    #[arg(long)]
    pub(crate) nss: Option<u8>,
    /// Channel width (MHz).
    #[arg(long)]
    pub(crate) bw: Option<u32>,
    /// Long guard interval (default: short).
    #[arg(long)]
    pub(crate) long_gi: bool,
    /// Stations.
    #[arg(long)]
    pub(crate) stations: Option<u16>,
    /// Arrival process: cbr, poisson, onoff.
    #[arg(long)]
    pub(crate) arrival: Option<String>,
    /// Receive path (kernel timestamp noise): none, laptop, phone, or random (drawn from the
    /// seed; see datasets/README.md).
    #[arg(long)]
    pub(crate) noise: Option<NoisePreset>,
    /// A receive path from a TOML file (`name`, `[[stages]]`; see datasets/README.md).
    #[arg(long, conflicts_with = "noise")]
    pub(crate) receiver: Option<PathBuf>,
    /// Backhaul rate in front of the AP (Mb/s).
    #[arg(long)]
    pub(crate) backhaul_mbps: Option<f64>,
    /// Seed.
    #[arg(long)]
    pub(crate) seed: Option<u64>,
    /// Pack up to K packets per MPDU as A-MSDUs inside the A-MPDUs (1: none).
    #[arg(long, value_name = "K")]
    pub(crate) amsdu: Option<u16>,
    /// Snap length of the written frames (default 128; with A-MSDUs 65535, so that every
    /// subframe can be read).
    #[arg(long)]
    pub(crate) snaplen: Option<u32>,
    /// Output capture (.pcapng or .pcap); with several stations, `NAME.staK.EXT` per station.
    #[arg(short, long)]
    pub(crate) output: PathBuf,
    /// Print the run summary as one JSON object on stdout.
    #[arg(long)]
    pub(crate) json: bool,
    /// Take kernel timestamps from this machine's real kernel instead of a noise model: replay
    /// the MAC delivery times as UDP over loopback in real time and record SO_TIMESTAMPNS
    /// (runs as long as the scenario; at most 120 s).
    #[arg(long)]
    pub(crate) kernel_replay: bool,
    /// Replay through a veth pair between two network namespaces (root) with these receive-path
    /// settings: a comma list of gro, threaded, rps, burner, per-mpdu, busy=µs, flush=µs,
    /// defer=N, tick=µs, payload=bytes, shape=Mbit/s (a token-bucket shaper before the host, as
    /// a USB or SDIO bus), burst=bytes (its depth) (`veth` for the defaults). Implies
    /// --kernel-replay.
    #[arg(long, conflicts_with = "kernel_path")]
    pub(crate) veth: Option<String>,
    /// As --veth, with the settings from a TOML file (testbed::KernelPath fields).
    #[arg(long)]
    pub(crate) kernel_path: Option<PathBuf>,
    /// Others on the channel (replace the config's contenders when --contenders is above 0).
    #[command(flatten)]
    pub(crate) others: super::common::OthersArgs,
    /// Write a sniffer's captures: the other networks' frames as well (protected data frames at
    /// their PPDU's end), from which `aggrate eval` measures the air others took.
    #[arg(long)]
    pub(crate) sniffer: bool,
}

/// Build the scenario: file (or defaults), then flags.
pub(crate) fn scenario(a: &SimulateArgs) -> Result<Scenario> {
    let mut s = match &a.config {
        Some(p) => {
            let text = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            toml::from_str::<Scenario>(&text).with_context(|| format!("{}: invalid scenario", p.display()))?
        }
        None => Scenario::default(),
    };
    if let Some(n) = a.stations {
        if n == 0 {
            bail!("--stations = 0: at least 1 station");
        }
        s.wlan.stations = vec![s.wlan.stations.first().cloned().unwrap_or_default(); n as usize];
        let rate = s.flows.first().map_or(100.0, |f| f.rate_mbps);
        let proto = s.flows.first().cloned().unwrap_or_default();
        s.flows = (0..n)
            .map(|i| FlowConfig {
                sta: i,
                rate_mbps: rate,
                ..proto.clone()
            })
            .collect();
    }
    let n = s.wlan.stations.len();
    if !a.mcs.is_empty() {
        if a.mcs.len() != 1 && a.mcs.len() != n {
            bail!(
                "--mcs has {} values for {n} stations: give one, or one per station",
                a.mcs.len()
            );
        }
        for (i, st) in s.wlan.stations.iter_mut().enumerate() {
            st.mcs = a.mcs[if a.mcs.len() == 1 { 0 } else { i }];
        }
    }
    for st in s.wlan.stations.iter_mut() {
        set_station(st, a);
    }
    if let Some(r) = a.rate_mbps {
        s.flows.iter_mut().for_each(|f| f.rate_mbps = r);
    }
    if let Some(kind) = &a.arrival {
        let arr = match kind.as_str() {
            "cbr" => Arrival::Cbr,
            "poisson" => Arrival::Poisson,
            "onoff" => Arrival::OnOff {
                on_ms: 50.0,
                off_ms: 50.0,
            },
            other => bail!("--arrival {other:?}: use cbr, poisson or onoff (traces go in a --config file)"),
        };
        s.flows.iter_mut().for_each(|f| f.arrival = arr.clone());
    }
    if let Some(d) = a.duration {
        s.duration_s = d;
    }
    if let Some(p) = a.noise {
        s.noise_preset = p;
        s.noise = None;
    }
    if let Some(path) = &a.receiver {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let rp = ReceivePath::from_toml(&text)
            .map_err(|e| anyhow::anyhow!("{}: invalid receive path: {e}", path.display()))?;
        s.noise = Some(rp);
    }
    if let Some(b) = a.backhaul_mbps {
        s.backhaul = Some(BackhaulConfig {
            rate_mbps: b,
            ..BackhaulConfig::default()
        });
    }
    if let Some(seed) = a.seed {
        s.seed = seed;
    }
    if let Some(k) = a.amsdu {
        s.wlan.amsdu_max_msdus = k;
    }
    if a.others.contenders > 0 {
        a.others.apply(&mut s.wlan);
    }
    s.sniffer |= a.sniffer;
    Ok(s)
}

fn set_station(st: &mut StationConfig, a: &SimulateArgs) {
    if let Some(nss) = a.nss {
        st.nss = nss;
    }
    if let Some(bw) = a.bw {
        st.bw_mhz = bw;
    }
    if a.long_gi {
        st.short_gi = false;
    }
}

/// The real-kernel receive path asked for by --veth / --kernel-path, if any.
pub(crate) fn kernel_path_arg(a: &SimulateArgs) -> Result<Option<KernelPath>> {
    if let Some(v) = &a.veth {
        return Ok(Some(v.parse::<KernelPath>().context("--veth")?));
    }
    if let Some(p) = &a.kernel_path {
        let text = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
        let kp: KernelPath = toml::from_str(&text).with_context(|| format!("{}: invalid kernel path", p.display()))?;
        kp.check().with_context(|| p.display().to_string())?;
        return Ok(Some(kp));
    }
    Ok(None)
}

pub(crate) fn run_cmd(ui: &Ui, a: SimulateArgs) -> Result<Exit> {
    let s = scenario(&a)?;
    let kernel = kernel_path_arg(&a)?;
    let (summary, paths) = if a.kernel_replay || kernel.is_some() {
        simulate_replayed(ui, s, &a.output, a.snaplen, kernel.as_ref())?
    } else {
        let scn = s.check().context("invalid scenario")?;
        simulate_to(ui, &scn, &a.output, a.snaplen)?
    };
    if a.json {
        outln!("{}", serde_json::to_string(&summary)?);
    }
    for (st, p) in summary.stations.iter().zip(&paths) {
        let mpdus = if st.stats.mpdus < st.stats.delivered && st.ampdus > 0 {
            format!(" in {:.2} MPDUs", st.stats.mpdus as f64 / st.ampdus as f64)
        } else {
            String::new()
        };
        ui.info(format!(
            "sta{} ({:.1} Mb/s PHY): offered {:.1} Mb/s, received {:.1} Mb/s, mean A-MPDU {:.2} packets{mpdus} (max {}), delay {:.2} ms, airtime {:.0}% → {}",
            st.sta,
            st.phy_mbps,
            st.offered_mbps,
            st.received_mbps,
            st.mean_agg,
            st.max_agg,
            st.delay_ms_mean,
            st.airtime_share * 100.0,
            p.display()
        ));
    }
    Ok(Exit::Ok)
}

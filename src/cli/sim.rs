//! `aggrate sim`: the closed loop (sender → emulated WLAN → receiver estimator → controller) on
//! a virtual clock. Prints a per-station table (or one JSON object with `--json`) over the
//! second half of the run, and writes the time series as CSV and PNG plots.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use aggrate::model::ModelFile;
use aggrate::sim::{run, EstimatorKind, SenderKind, SimConfig, SimResult};
use aggrate::wlan::noise::NoisePreset;
use aggrate::wlan::traffic::BackhaulConfig;
use aggrate::wlan::WlanConfig;

use super::progress::Ui;
use super::Exit;

/// Sender choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum SenderArg {
    /// Hold the aggregation level at the target.
    Aggrate,
    /// Loss-based Cubic-like window (baseline).
    Cubic,
}

#[derive(Debug, clap::Args)]
pub(crate) struct SimArgs {
    /// Stations (receivers).
    #[arg(long, default_value_t = 1)]
    pub(crate) stations: usize,
    /// VHT MCS per station (2 SS, 80 MHz, short GI); one value applies to all.
    #[arg(long, value_delimiter = ',', default_values_t = [9u8])]
    pub(crate) mcs: Vec<u8>,
    /// Virtual seconds.
    #[arg(long, default_value_t = 60.0)]
    pub(crate) duration: f64,
    /// Seed of every random stream.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// Sender.
    #[arg(long, value_enum, default_value_t = SenderArg::Aggrate)]
    pub(crate) sender: SenderArg,
    /// Run both senders on the same path and print them side by side.
    #[arg(long)]
    pub(crate) compare: bool,
    /// Kernel timestamp noise at the receivers: none, laptop or phone.
    #[arg(long, default_value = "none")]
    pub(crate) noise: NoisePreset,
    /// Estimate frame starts with this model (from kernel timestamps) instead of reading MAC
    /// timestamps.
    #[arg(long)]
    pub(crate) model: Option<PathBuf>,
    /// Target aggregation level N_ε.
    #[arg(long, default_value_t = 32.0)]
    pub(crate) target: f64,
    /// Report interval Δ (ms).
    #[arg(long, default_value_t = 500)]
    pub(crate) interval_ms: u64,
    /// A backhaul link before the AP at this rate (Mb/s).
    #[arg(long)]
    pub(crate) backhaul_mbps: Option<f64>,
    /// Each receiver sets the model's operating point from its own receive times while it runs
    /// (as `recv --self-calibrate`; the shipped model's embedded bank of measured receivers).
    /// Without --model, the shipped model.
    #[arg(long)]
    pub(crate) self_calibrate: bool,
    /// With --self-calibrate: a window whose nearest training receiver lies farther than this
    /// (standardised distance) keeps the model's own threshold at its load. Default: none at
    /// the model's training WLAN (VHT MCS 9, 2 SS, 80 MHz), 1 at any other.
    #[arg(long)]
    pub(crate) self_calibrate_max_distance: Option<f64>,
    #[command(flatten)]
    pub(crate) others: super::common::OthersArgs,
    /// The receivers read a channel survey each report interval (busy time less their own
    /// station's exchanges) and the airtime level counts it, as `recv --others-share` does.
    #[arg(long)]
    pub(crate) survey: bool,
    /// The receivers' receive path from a TOML file (`name`, `[[stages]]`; see
    /// datasets/README.md) instead of --noise.
    #[arg(long, conflicts_with = "noise")]
    pub(crate) receiver: Option<PathBuf>,
    /// What the aggregation-target sender steers by, with --model: `level` (the receivers'
    /// level: the learned level when the model carries one, else the airtime level), `airtime`
    /// (the level the delivery rate and PHY rate give, from each receiver and, with several
    /// stations, the cell) or `frame-count` (packets ÷ the model's predicted starts, the study's
    /// estimator).
    #[arg(long, value_enum, default_value_t = super::common::SteerArg::Level)]
    pub(crate) steer: super::common::SteerArg,
    /// The aggregation-target sender's data carries a reliable stream to each station (an
    /// endless seeded one, checked byte by byte): what reliable delivery costs the loop in rate
    /// and delay, and what it delivers.
    #[arg(long)]
    pub(crate) bulk: bool,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub(crate) json: bool,
    /// Output folder for the time series (CSV) and plots (PNG); without it only the table (or
    /// JSON) is printed and nothing is written.
    #[arg(short, long)]
    pub(crate) output: Option<PathBuf>,
}

impl SimArgs {
    /// Arguments as `aggrate sim` would parse `argv` (starting with "sim").
    pub(crate) fn from_argv(argv: &[String]) -> Result<SimArgs> {
        use clap::Parser;
        match super::Args::try_parse_from(std::iter::once("aggrate".to_string()).chain(argv.iter().cloned()))?.command {
            super::Command::Sim(a) => Ok(a),
            _ => bail!("internal: {argv:?} is not a sim command"),
        }
    }
}

pub(crate) fn config(a: &SimArgs, sender: SenderKind) -> Result<SimConfig> {
    if a.stations == 0 || a.stations > 64 {
        bail!("--stations = {}: 1..=64", a.stations);
    }
    let mcs = super::mcs_per_station(&a.mcs, a.stations)?;
    let estimator = match (&a.model, a.self_calibrate) {
        (Some(p), _) => EstimatorKind::Model(Box::new(ModelFile::load(p)?)),
        (None, true) => EstimatorKind::Model(Box::new(ModelFile::shipped()?)),
        (None, false) => EstimatorKind::Mac,
    };
    if a.self_calibrate && (a.compare || a.sender != SenderArg::Aggrate) {
        bail!(
            "--self-calibrate runs in the aggregation-target sender's receivers: not with --sender cubic or --compare"
        );
    }
    let noise = match &a.receiver {
        Some(p) => {
            let text = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            Some(
                aggrate::wlan::noise::ReceivePath::from_toml(&text)
                    .map_err(|e| anyhow::anyhow!("{}: invalid receive path: {e}", p.display()))?,
            )
        }
        None => a.noise.resolve(a.seed, None),
    };
    let mut wlan = WlanConfig::vht_stations(&mcs);
    a.others.apply(&mut wlan);
    let mut cfg = SimConfig {
        wlan,
        noise,
        survey: a.survey,
        estimator,
        sender,
        backhaul: a.backhaul_mbps.map(|r| BackhaulConfig {
            rate_mbps: r,
            queue: 200,
            delay_us: 1000,
        }),
        interval: Duration::from_millis(a.interval_ms),
        duration_s: a.duration,
        seed: a.seed,
        self_calibrate: match a.self_calibrate {
            true => Some(
                aggrate::train::online::DistanceLimit::given(a.self_calibrate_max_distance)
                    .context("--self-calibrate-max-distance")?,
            ),
            false => None,
        },
        steer: a.steer.into(),
        bulk: a.bulk,
        ..SimConfig::default()
    };
    cfg.control.target = a.target;
    Ok(cfg)
}

fn run_one(ui: &Ui, cfg: &SimConfig, label: &str) -> Result<SimResult> {
    let bar = ui.count_bar(
        cfg.duration_s.ceil() as u64,
        &format!("{label} [{{bar:30}}] {{pos}}/{{len}} virtual s, eta {{eta}}"),
    );
    let r = run(cfg, |t| bar.set_position(t as u64))?;
    bar.finish_and_clear();
    Ok(r)
}

pub(crate) fn run_cmd(ui: &Ui, a: SimArgs) -> Result<Exit> {
    a.others.note_bss(ui);
    let senders: Vec<SenderKind> = if a.compare {
        vec![SenderKind::Aggrate, SenderKind::Cubic]
    } else {
        vec![match a.sender {
            SenderArg::Aggrate => SenderKind::Aggrate,
            SenderArg::Cubic => SenderKind::Cubic,
        }]
    };
    if let Some(out) = &a.output {
        std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    }
    let mut results = Vec::new();
    for s in senders {
        let cfg = config(&a, s)?;
        let label = format!("{s:?}").to_lowercase();
        let r = run_one(ui, &cfg, &label)?;
        if let Some(out) = &a.output {
            aggrate::report::write_sim_series(out, &label, &r)?;
        }
        results.push(r);
    }
    if a.json {
        let v: Vec<serde_json::Value> = results.iter().map(serde_json::to_value).collect::<Result<_, _>>()?;
        if v.len() == 1 {
            outln!("{}", v[0]);
        } else {
            outln!("{}", serde_json::json!({ "runs": v }));
        }
    } else {
        outln!("| sender | station | MCS | PHY Mb/s | rate Mb/s | true μ_N | steered μ_N | its bias | frame-count bias | delay ms (mean) | delay ms (p95) | airtime | lost |");
        outln!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
        for r in &results {
            for (i, s) in r.stations.iter().enumerate() {
                let pct = |e: &Option<aggrate::metrics::LevelError>| {
                    e.map_or("–".to_string(), |e| format!("{:+.1} %", e.bias * 100.0))
                };
                outln!(
                    "| {:?} | {i} | {} | {:.0} | {:.1} | {:.1} | {:.1} | {} | {} | {:.2} | {:.2} | {:.3} | {} |",
                    r.sender,
                    s.mcs,
                    s.phy_mbps,
                    s.rate_mbps,
                    s.mean_agg,
                    s.estimated_agg,
                    pct(&s.level_error),
                    pct(&s.count_error),
                    s.delay_ms_mean,
                    s.delay_ms_p95,
                    s.airtime_share,
                    s.lost
                );
            }
            outln!("| {:?} | total | | | {:.1} | | | | | | | | |", r.sender, r.total_mbps);
            for (i, b) in r.bulk.iter().enumerate() {
                outln!(
                    "\nstation {i}'s reliable stream: {:.1} Mb/s delivered in order (second half), {} bytes in all, {}, overhead {:.2} % ({} NACK and {} timer repairs, {} parity frames)",
                    b.goodput_mbps,
                    b.delivered_bytes,
                    if b.exact { "every byte exact" } else { "BYTES DIFFER" },
                    b.overhead * 100.0,
                    b.sender.nack_repairs,
                    b.sender.rto_repairs,
                    b.sender.parity_frames
                );
            }
            for (i, c) in r.self_calibration.iter().enumerate() {
                let near = c.last.as_ref().map_or("none yet".to_string(), |s| {
                    format!(
                        "last window {:.0} Mb/s, nearest {} at {:.2}, threshold {:+.3}",
                        s.rate_mbps, s.nearest, s.distance, s.threshold
                    )
                });
                outln!(
                    "\nstation {i} self-calibrated over {} windows ({} too far, {} mixed-rate windows not used): {near}",
                    c.windows, c.too_far, c.skipped
                );
            }
        }
        if results.len() == 2 {
            let (o, c) = (&results[0], &results[1]);
            let delay = |r: &SimResult| {
                r.stations.iter().map(|s| s.delay_ms_mean).sum::<f64>() / r.stations.len().max(1) as f64
            };
            outln!(
                "\naggrate / cubic: rate {:.0} %, mean one-way delay {:.3}×",
                o.total_mbps / c.total_mbps.max(1e-9) * 100.0,
                delay(o) / delay(c).max(1e-9)
            );
        }
    }
    if let Some(out) = &a.output {
        ui.info(format!("wrote time series and plots to {}", out.display()));
    }
    Ok(Exit::Ok)
}

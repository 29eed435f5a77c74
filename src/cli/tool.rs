//! Hidden helper tools used by benchmarks and fixture recipes.

use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use pcap_file::pcap::{PcapPacket, PcapReader, PcapWriter};

use super::progress::Ui;
use super::Exit;

mod bench;
use bench::{estimator_rate, hostile, ingest_rate, pace_bench, self_calibrate, svr_cv};

#[derive(Debug, clap::Subcommand)]
pub(crate) enum ToolCommand {
    /// Write a plain pcap N times over, each copy shifted in time to follow the previous one
    /// (for memory-vs-size benchmarks).
    Repeat {
        /// Plain (uncompressed) pcap input.
        input: PathBuf,
        /// Copies.
        #[arg(short, default_value_t = 10)]
        n: u32,
        /// Output pcap.
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Time the library pipeline alone (read → decode → flow counts → de-duplicate → label →
    /// gap features, no output) on one core and print one JSON line.
    IngestRate {
        /// Capture file.
        input: PathBuf,
    },
    /// The bulk-transfer lab on the virtual clock: a 200,000 B/s link, 100 ms one way, 1 % of
    /// datagrams 10 ms late, random loss each way; the reliability layer with all mechanisms
    /// and with each one off in turn. Writes bulk_lab.md, .json and .png into the directory
    /// (docs/reliable.md holds the table).
    BulkLab {
        /// Output directory.
        #[arg(short, long, default_value = "bulk_lab")]
        output: PathBuf,
        /// Datagram sizes (UDP payload bytes), comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "1472,8972")]
        datagram: Vec<usize>,
        /// File sizes (bytes), comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "1000000,10000000")]
        files: Vec<usize>,
        /// Loss each way, comma-separated shares.
        #[arg(long, value_delimiter = ',', default_value = "0,0.02,0.05")]
        losses: Vec<f64>,
        /// Seed of the paths (the first of `--seeds`).
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Runs per row (seeds seed, seed + 1, ...): the table shows their mean, lowest goodput
        /// and highest overhead.
        #[arg(long, default_value_t = 5)]
        seeds: u32,
        /// All mechanisms only (no ablation rows).
        #[arg(long)]
        no_ablation: bool,
        /// Link rate, bytes per second (the lab's: 200,000).
        #[arg(long, default_value_t = 200_000.0)]
        rate: f64,
    },
    /// Sender pacing on loopback: a `Sender` held at a fixed rate sends 1500-byte datagrams to a
    /// local sink for a few seconds; prints the achieved rate and its ratio to the target.
    PaceBench {
        /// Target rate (Mb/s).
        #[arg(long, default_value_t = 1000.0)]
        mbps: f64,
        /// Seconds.
        #[arg(long, default_value_t = 3.0)]
        seconds: f64,
    },
    /// Write a hostile (valid, but state-hungry) radiotap capture, xz-compressed, for the
    /// memory benchmark `benches/hostile.sh`: `streams` (a new transmitter × TID per frame),
    /// `flows` (a new UDP 5-tuple per packet) or `open-frame` (one A-MPDU that never closes).
    Hostile {
        /// streams, flows or open-frame.
        kind: String,
        /// Packets.
        #[arg(short, default_value_t = 500_000)]
        n: u32,
        /// Output (.pcap.xz).
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Time the whole per-packet path of the online estimator (features, the model's decision,
    /// frames, the airtime level's counters, report polling) on a capture's packets, as `recv`
    /// runs it; print one JSON line (ns per packet, best of `repeat`). For
    /// `benches/estimator_vs_ort.sh`, which times ONNX Runtime on the same rows beside it.
    EstimatorRate {
        /// Capture file.
        input: PathBuf,
        /// Model file (default: the shipped model).
        #[arg(long)]
        model: Option<PathBuf>,
        /// Passes over the packets (the fastest counts).
        #[arg(long, default_value_t = 20)]
        repeat: u32,
    },
    /// Replay a capture's receive times through the estimator with `recv --self-calibrate`'s
    /// calibrator (the shipped model and its embedded bank, each packet fed as `recv` feeds it,
    /// 1,472-byte UDP payloads) and print one JSON line: what the calibrator did and each
    /// report's level. For the Python and C tests, which must learn the same.
    SelfCalibrate {
        /// Capture file.
        input: PathBuf,
        /// The link's PHY rate (Mb/s).
        #[arg(long)]
        phy_mbps: f64,
        /// Report interval (ms).
        #[arg(long, default_value_t = 100)]
        interval_ms: u64,
    },
    /// Redraw Figure 13 (a) from a sweep.json.
    ReplotSweep {
        /// sweep.json.
        json: PathBuf,
        /// Output PNG.
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Time the slot SVR's contiguous k-fold CV at one (C, γ, ε) on the slot rows of a
    /// `<model>.slots.csv` (written by `train --model svr`), single-threaded; print one JSON line.
    SvrCv {
        /// slots.csv.
        slots: PathBuf,
        /// Folds.
        #[arg(long, default_value_t = 20)]
        folds: usize,
        /// C.
        #[arg(long)]
        c: f64,
        /// γ.
        #[arg(long)]
        gamma: f64,
        /// ε.
        #[arg(long)]
        epsilon: f64,
    },
}

pub(crate) fn run(ui: &Ui, t: ToolCommand) -> Result<Exit> {
    match t {
        ToolCommand::BulkLab {
            output,
            datagram,
            files,
            losses,
            seed,
            seeds,
            no_ablation,
            rate,
        } => bulk_lab(
            ui,
            &output,
            &datagram,
            &files,
            &losses,
            (seed, seeds),
            (no_ablation, rate),
        ),
        ToolCommand::IngestRate { input } => ingest_rate(ui, &input),
        ToolCommand::PaceBench { mbps, seconds } => pace_bench(mbps, seconds),
        ToolCommand::EstimatorRate { input, model, repeat } => estimator_rate(&input, model.as_deref(), repeat),
        ToolCommand::SelfCalibrate {
            input,
            phy_mbps,
            interval_ms,
        } => self_calibrate(&input, phy_mbps, interval_ms),
        ToolCommand::Hostile { kind, n, output } => hostile(ui, &kind, n, &output),
        ToolCommand::ReplotSweep { json, output } => {
            replot(&json, &output)?;
            Ok(Exit::Ok)
        }
        ToolCommand::SvrCv {
            slots,
            folds,
            c,
            gamma,
            epsilon,
        } => svr_cv(&slots, folds, c, gamma, epsilon),
        ToolCommand::Repeat { input, n, output } => {
            let open = || -> Result<PcapReader<BufReader<File>>> {
                let f = File::open(&input).with_context(|| format!("opening {}", input.display()))?;
                PcapReader::new(BufReader::new(f)).with_context(|| format!("reading {}", input.display()))
            };
            // Span of the input, to shift each copy by.
            let (mut first, mut last) = (None, Duration::ZERO);
            let mut r = open()?;
            let header = r.header();
            while let Some(p) = r.next_packet() {
                let p = p.with_context(|| format!("reading {}", input.display()))?;
                first.get_or_insert(p.timestamp());
                last = last.max(p.timestamp());
            }
            let span = last.saturating_sub(first.unwrap_or_default()) + Duration::from_millis(1);
            let out = File::create(&output).with_context(|| format!("creating {}", output.display()))?;
            let mut w = PcapWriter::with_header(BufWriter::new(out), header)?;
            for k in 0..n {
                let mut r = open()?;
                while let Some(p) = r.next_packet() {
                    let p = p?;
                    let ts = p.timestamp() + span * k;
                    w.write_packet(&PcapPacket::new(ts, p.orig_len(), p.data())?)?;
                }
            }
            Ok(Exit::Ok)
        }
    }
}

/// Redraw panel (a) from a `sweep.json` (hidden tool).
pub(crate) fn replot(json: &std::path::Path, out: &std::path::Path) -> Result<()> {
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(json).with_context(|| format!("reading {}", json.display()))?)
            .with_context(|| format!("{}: not JSON", json.display()))?;
    let points: Vec<aggrate::report::sweep::Point> =
        serde_json::from_value(v["points"].clone()).with_context(|| format!("{}: field `points`", json.display()))?;
    aggrate::report::sweep::fig13a(&points, out)?;
    Ok(())
}

fn bulk_lab(
    ui: &Ui,
    dir: &std::path::Path,
    datagrams: &[usize],
    files: &[usize],
    losses: &[f64],
    (seed, seeds): (u64, u32),
    (no_ablation, rate): (bool, f64),
) -> Result<Exit> {
    if !(rate.is_finite() && (1_000.0..=1e10).contains(&rate)) {
        anyhow::bail!("--rate: {rate} B/s is not in [1000, 1e10]");
    }
    use aggrate::bulk::{table, Variant};
    if let Some(l) = losses.iter().find(|l| !(0.0..1.0).contains(*l)) {
        anyhow::bail!("--losses: {l} is not a share in [0, 1)");
    }
    let mut rows = Vec::new();
    for &d in datagrams {
        // The ablation at the lab's datagram size only; the other sizes with everything on.
        let variants: &[Variant] = if d == datagrams[0] && !no_ablation {
            &Variant::ALL
        } else {
            &[Variant::All]
        };
        rows.extend(table(losses, files, variants, (d, rate), seed, seeds)?);
    }
    let (md, written) = aggrate::report::bulk::write(dir, &rows)?;
    outln!("{md}");
    for p in written {
        ui.info(format!("wrote {}", p.display()));
    }
    Ok(Exit::Ok)
}

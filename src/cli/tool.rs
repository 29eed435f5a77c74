//! Hidden helper tools used by benchmarks and fixture recipes.

use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use pcap_file::pcap::{PcapPacket, PcapReader, PcapWriter};

use super::progress::Ui;
use super::Exit;

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
}

pub(crate) fn run(ui: &Ui, t: ToolCommand) -> Result<Exit> {
    match t {
        ToolCommand::IngestRate { input } => ingest_rate(ui, &input),
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

#[allow(clippy::disallowed_methods)] // the CLI may read the clock: this is a benchmark
fn ingest_rate(ui: &Ui, input: &std::path::Path) -> Result<Exit> {
    use aggrate::capture::filter::FlowCounts;
    use aggrate::dataset::RowExtractor;
    use aggrate::features::FeatureSpec;

    let start = std::time::Instant::now();
    let mut counts = FlowCounts::default();
    let mut ex = RowExtractor::new(FeatureSpec::default(), 0)?;
    let mut acc = 0.0f64;
    let mut sink = |_: &aggrate::dataset::RowMeta, x: &[f64]| acc += x[0];
    let out = super::ingest::for_each_record(ui, input, false, |r| {
        counts.push(r);
        if r.l3.is_some_and(|l| l.flow.proto == 17) {
            ex.push(r, Some(r.host), &mut sink);
        }
    })?;
    ex.finish(&mut sink);
    let secs = start.elapsed().as_secs_f64();
    let records = out.records;
    out.into_result()?;
    println!(
        "{}",
        serde_json::json!({
            "records": records,
            "flows": counts.sorted().len(),
            "rows": ex.rows_out,
            "seconds": secs,
            "checksum": acc,
        })
    );
    Ok(Exit::Ok)
}

//! `aggrate inspect`: one pass over a capture → link type, flows, and the selected flow's
//! aggregation summary (human table or one JSON object).

use std::io::Write;
use std::path::PathBuf;

use anyhow::Result;

use aggrate::pipeline::summary::Inspection as Report;

use super::progress::{ByteBars, Ui};
use super::{Exit, FlowArgs};

#[derive(Debug, clap::Args)]
pub(crate) struct InspectArgs {
    /// Capture file (pcap or pcapng, optionally .gz / .xz).
    pub(crate) capture: PathBuf,
    /// Print exactly one JSON object on stdout.
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) flow: FlowArgs,
}

pub(crate) fn run(ui: &Ui, a: InspectArgs) -> Result<Exit> {
    let (report, read) = aggrate::pipeline::summary::inspect(
        &a.capture,
        a.flow.filter(),
        describe_filter(&a.flow),
        a.flow.n_max,
        a.flow.keep_going,
        &mut ByteBars::new(ui),
    )?;
    ui.read_report(&a.capture, &read);
    for c in &report.caps_hit {
        ui.warn(format!("{}: cap hit: {c}", a.capture.display()));
    }
    if let Some(s) = &report.selected_flow {
        ui.info(format!("selected flow: {s} ({})", report.selection));
    }
    let mut out = std::io::stdout().lock();
    if a.json {
        serde_json::to_writer(&mut out, &report)?;
        writeln!(out)?;
    } else {
        print_human(&mut out, &report)?;
    }
    out.flush()?;
    drop(out);
    read.fatal_damage(&a.capture)?;
    // A readable capture is described and is not an error, whatever it holds.
    if report.packets == 0 {
        ui.info(format!(
            "{}: {}",
            report.file,
            if report.records == 0 {
                "the capture holds no packets".to_string()
            } else {
                format!("no aggregation summary ({})", report.selection)
            }
        ));
    }
    Ok(Exit::Ok)
}

fn describe_filter(f: &FlowArgs) -> String {
    let mut parts = Vec::new();
    if let Some(m) = f.mac {
        parts.push(format!("mac {}", aggrate::capture::dot11::fmt_mac(&m)));
    }
    if let Some(ip) = f.ip {
        parts.push(format!("ip {ip}"));
    }
    if let Some(p) = f.port {
        parts.push(format!("port {p}"));
    }
    if let Some(p) = f.proto {
        parts.push(format!("proto {p}"));
    }
    parts.join(", ")
}

fn mbps(bps: u64) -> String {
    format!("{:.1} Mb/s", bps as f64 / 1e6)
}

fn print_human(out: &mut impl Write, r: &Report) -> std::io::Result<()> {
    writeln!(
        out,
        "capture      {} ({}, {}, {})",
        r.file,
        r.format,
        r.compression,
        r.link_type.as_deref().unwrap_or("no packets")
    )?;
    writeln!(
        out,
        "records      {}{}",
        r.records,
        if r.damaged_skipped > 0 {
            format!(" ({} damaged, skipped)", r.damaged_skipped)
        } else {
            String::new()
        }
    )?;
    let t = &r.frame_types;
    if t.data + t.management + t.control + t.extension > 0 || r.frames_skipped > 0 {
        writeln!(
            out,
            "802.11       {} data, {} management, {} control frames; {} skipped (cannot carry a flow); TSFT on {}, A-MPDU status on {} records",
            t.data, t.management, t.control, r.frames_skipped, r.tsft_records, r.ampdu_records
        )?;
    }
    writeln!(
        out,
        "flows        {} IP flows{}",
        r.flows_total,
        if r.flows_total > r.flows.len() {
            format!(", largest {}:", r.flows.len())
        } else {
            ":".into()
        }
    )?;
    for f in &r.flows {
        writeln!(out, "  {:<52} {:>10} packets {:>14} bytes", f.flow, f.packets, f.bytes)?;
    }
    writeln!(
        out,
        "selected     {} ({})",
        r.selected_flow.as_deref().unwrap_or("-"),
        r.selection
    )?;
    writeln!(out, "packets      {}", r.packets)?;
    match (r.frames, r.mean_agg, r.median_agg, r.max_agg) {
        (Some(fr), Some(mean), Some(med), Some(max)) => {
            writeln!(out, "frames       {fr} A-MPDUs")?;
            writeln!(out, "aggregation  mean {mean:.2}  median {med}  max {max}")?;
        }
        _ => writeln!(
            out,
            "frames       unknown: no radiotap TSFT / A-MPDU status (no ground truth)"
        )?,
    }
    let rates: Vec<String> = r.phy_rates_bps.iter().map(|&b| mbps(b)).collect();
    writeln!(
        out,
        "phy rates    {}",
        if rates.is_empty() { "-".into() } else { rates.join(", ") }
    )?;
    writeln!(
        out,
        "received     {:.2} Mb/s over {:.3} s",
        r.received_mbps, r.duration_s
    )?;
    writeln!(out, "duplicates   {} retransmissions dropped", r.duplicates_dropped)?;
    if let Some(e) = &r.error {
        writeln!(out, "INCOMPLETE   {e}")?;
    }
    Ok(())
}

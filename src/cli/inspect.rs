//! `aggrate inspect`: one pass over a capture → link type, flows, and the selected flow's
//! aggregation summary (human table or one JSON object).

use std::io::Write;
use std::path::PathBuf;

use anyhow::Result;

use aggrate::pipeline::summary::{FrameTypes, Summariser};

use super::for_each_record;
use super::progress::Ui;
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

#[derive(serde::Serialize)]
struct FlowRow {
    flow: String,
    packets: u64,
    bytes: u64,
}

#[derive(serde::Serialize)]
struct Report {
    file: String,
    format: String,
    compression: String,
    link_type: Option<String>,
    records: u64,
    damaged_skipped: u64,
    flows_total: usize,
    flows: Vec<FlowRow>,
    selected_flow: Option<String>,
    selection: String,
    ground_truth: bool,
    packets: u64,
    /// MPDUs of the selected flow (fewer than packets when MPDUs carry A-MSDUs).
    mpdus: u64,
    frames: Option<u64>,
    mean_agg: Option<f64>,
    median_agg: Option<f64>,
    max_agg: Option<u16>,
    phy_rates_bps: Vec<u64>,
    received_mbps: f64,
    duration_s: f64,
    duplicates_dropped: u64,
    /// 802.11 frames by type (records without an 802.11 header are not counted).
    frame_types: FrameTypes,
    /// Frames skipped undecoded because they cannot carry a flow (short control or management
    /// frames, frames cut by the snap length).
    frames_skipped: u64,
    /// Records with TSFT / with A-MPDU status in their radiotap header.
    tsft_records: u64,
    ampdu_records: u64,
    /// Caps on state that were hit (each named with its limit and what it cost).
    caps_hit: Vec<String>,
    /// Records whose timestamp fraction was ≥ 1 s, normalised as tshark does.
    timestamps_fixed: u64,
    /// Records of pcapng interfaces with link types aggrate does not decode (in `records`, skipped).
    other_link_records: u64,
    /// False whenever reading stopped before the end of the file (also with --keep-going).
    complete: bool,
    /// Bytes of the file not read when reading stopped early.
    unread_bytes: u64,
    error: Option<String>,
}

pub(crate) fn run(ui: &Ui, a: InspectArgs) -> Result<Exit> {
    let mut sum = Summariser::new(a.flow.filter(), describe_filter(&a.flow), a.flow.n_max)?;
    let outcome = for_each_record(ui, &a.capture, a.flow.keep_going, |r| sum.push(r))?;
    let s = sum.finish();
    let gt = s.ground_truth;
    let summary = s.summary.as_ref();
    let caps_hit = s.caps_hit.clone();
    for c in &caps_hit {
        ui.warn(format!("{}: cap hit: {c}", a.capture.display()));
    }
    let report = Report {
        file: a.capture.display().to_string(),
        format: format!("{:?}", outcome.format).to_lowercase(),
        compression: format!("{:?}", outcome.compression).to_lowercase(),
        link_type: outcome.link.map(|l| format!("{} ({})", l.name(), l.number())),
        records: outcome.records + outcome.other_link_packets,
        damaged_skipped: outcome.skipped,
        flows_total: s.flows.len(),
        flows: s
            .flows
            .iter()
            .take(10)
            .map(|(f, p, b)| FlowRow {
                flow: f.to_string(),
                packets: *p,
                bytes: *b,
            })
            .collect(),
        selected_flow: s.selected.map(|f| f.to_string()),
        selection: s.selection.clone(),
        ground_truth: gt,
        packets: summary.map_or(0, |s| s.packets),
        mpdus: s.mpdus,
        frames: summary.filter(|_| gt).map(|s| s.frames),
        mean_agg: summary.filter(|_| gt).map(|s| s.mean_agg),
        median_agg: summary.filter(|_| gt).map(|s| s.median_agg),
        max_agg: summary.filter(|_| gt).map(|s| s.max_agg),
        phy_rates_bps: summary.map(|s| s.phy_rates_bps.clone()).unwrap_or_default(),
        received_mbps: summary.map_or(0.0, |s| s.received_mbps),
        duration_s: summary.map_or(0.0, |s| s.duration_s),
        duplicates_dropped: s.duplicates_dropped,
        frame_types: s.frame_types,
        frames_skipped: s.frames_skipped,
        tsft_records: s.tsft_records,
        ampdu_records: s.ampdu_records,
        caps_hit,
        timestamps_fixed: outcome.timestamps_fixed,
        other_link_records: outcome.other_link_packets,
        complete: outcome.damage.is_none(),
        unread_bytes: outcome.unread_bytes,
        error: outcome.damage.as_ref().map(|e| format!("{}: {e}", a.capture.display())),
    };
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
    outcome.fatal_damage(&a.capture)?;
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

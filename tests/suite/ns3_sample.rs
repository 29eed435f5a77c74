//! The ns-3.37 802.11ac sample: ground truth as tshark counts it (62,500 flow packets in 8,037
//! A-MPDUs, mean 7.78, max 17, 300.05 Mb/s), through the library and through the CLI.

use crate::common;

use aggrate::capture::filter::{largest_udp_flow, FlowCounts, FlowFilter};
use aggrate::capture::io::open_path;
use aggrate::capture::PacketRecord;
use aggrate::features::{FeatureSpec, GapWindow};
use aggrate::label::{label_frames, Dedup};
use common::{aggrate, data, text};

fn flow_packets() -> Vec<PacketRecord> {
    let recs: Vec<PacketRecord> = open_path(&data("ns3_vht_mcs9_2ss_300mbps.pcap.xz"))
        .unwrap()
        .reader
        .map(|r| r.unwrap())
        .collect();
    let mut counts = FlowCounts::default();
    recs.iter().for_each(|r| counts.push(r));
    let flow = largest_udp_flow(&counts, &FlowFilter::default()).unwrap();
    assert_eq!(flow.dport, 5001);
    let f = FlowFilter {
        flow: Some(flow),
        ..FlowFilter::default()
    };
    let mut dedup = Dedup::default();
    recs.into_iter().filter(|r| f.matches(r) && dedup.keep(r)).collect()
}

#[test]
fn library_counts_match_tshark() {
    let pkts = flow_packets();
    assert_eq!(pkts.len(), 62_500);
    let labels = label_frames(&pkts, 64).unwrap();
    assert_eq!(labels.frames.len(), 8_037);
    assert_eq!(labels.first_of_frame.iter().filter(|&&y| y).count(), 8_037);
    let total: u64 = labels.frames.iter().map(|f| f.packets as u64).sum();
    assert_eq!(total, 62_500);
    let mean = total as f64 / labels.frames.len() as f64;
    assert!((mean - 7.78).abs() < 0.005, "mean {mean}");
    assert_eq!(labels.frames.iter().map(|f| f.level).max(), Some(17));
    // Every frame is one A-MPDU reference, at VHT MCS 9 2SS 80 MHz SGI.
    assert!(labels
        .frames
        .iter()
        .all(|f| f.ampdu_ref.is_some() && f.phy_rate_bps == Some(866_666_667)));
    // All packets of a frame share its TSFT here (ns-3 stamps the PPDU end).
    for (p, id) in pkts.iter().zip(&labels.frame_id) {
        assert_eq!(p.tsft(), labels.frames[*id as usize].tsft);
    }
    // A cap below the largest frame caps levels.
    let capped = label_frames(&pkts, 8).unwrap();
    assert_eq!(capped.frames.iter().map(|f| f.level).max(), Some(8));
}

#[test]
fn gap_rows_on_the_sample_are_sane() {
    let pkts = flow_packets();
    let spec = FeatureSpec::default();
    let mut w = GapWindow::new(&spec);
    let labels = label_frames(&pkts, 64).unwrap();
    let mut rows = 0;
    for (p, y) in pkts.iter().zip(&labels.first_of_frame) {
        if let Some(x) = w.push(p.host) {
            rows += 1;
            assert_eq!(x.len(), 21);
            assert!(x.iter().all(|v| v.is_finite() && *v >= 0.0));
            // Host time = TSFT here, so inside an A-MPDU the gap is exactly 0 and a new frame
            // starts after a positive gap.
            assert_eq!(x[0] > 0.0, *y);
        }
    }
    assert_eq!(rows, 62_500 - 20);
}

#[test]
fn cli_inspect_json_reports_the_sample() {
    let dir = tempfile::tempdir().unwrap();
    let out = aggrate(
        dir.path(),
        &[
            "inspect",
            data("ns3_vht_mcs9_2ss_300mbps.pcap.xz").to_str().unwrap(),
            "--json",
        ],
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout.lines().count(), 1, "exactly one JSON object: {stdout}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["packets"], 62_500);
    assert_eq!(v["frames"], 8_037);
    assert!((v["mean_agg"].as_f64().unwrap() - 7.78).abs() < 0.005);
    assert_eq!(v["max_agg"], 17);
    assert!((v["received_mbps"].as_f64().unwrap() - 300.05).abs() < 0.01);
    assert_eq!(v["phy_rates_bps"], serde_json::json!([866_666_667u64]));
    assert!(
        stderr.contains("selected flow udp") || stderr.contains("selected flow: udp"),
        "{stderr}"
    );
}

#[test]
fn cli_features_writes_one_row_per_packet() {
    let dir = tempfile::tempdir().unwrap();
    let cap = data("ns3_vht_mcs9_2ss_300mbps.pcap.xz");
    let out = aggrate(
        dir.path(),
        &[
            "features",
            cap.to_str().unwrap(),
            "-o",
            "f.csv",
            "--m",
            "5",
            "--port",
            "5001",
        ],
    );
    let (_, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let csv = std::fs::read_to_string(dir.path().join("f.csv")).unwrap();
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    assert_eq!(header.last(), Some(&"sigma_us"));
    assert!(header.contains(&"gap_us_5") && !header.contains(&"gap_us_6"));
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 62_500 - 5);
    let col = |n: &str| header.iter().position(|h| *h == n).unwrap();
    let (y, lvl, rate) = (col("y"), col("agg_level"), col("rate_mbps"));
    assert!(rows.iter().all(|r| r[rate] == "300.0"), "rate tag from the file name");
    // Starts in the table = frames whose first packet has a row.
    let starts = rows.iter().filter(|r| r[y] == "true").count();
    assert!((8_030..=8_037).contains(&starts), "{starts}");
    assert!(rows.iter().all(|r| (1..=17).contains(&r[lvl].parse::<u32>().unwrap())));

    // Parquet too, same row count (read back through the file size being non-trivial and the
    // magic bytes; contents are checked by the notebooks later).
    let out = aggrate(
        dir.path(),
        &["-q", "features", cap.to_str().unwrap(), "-o", "f.parquet"],
    );
    assert!(out.status.success());
    let pq = std::fs::read(dir.path().join("f.parquet")).unwrap();
    assert!(pq.starts_with(b"PAR1") && pq.ends_with(b"PAR1") && pq.len() > 100_000);
    assert!(text(&out).1.is_empty(), "-q prints nothing");
}

//! Labelling details: retransmitted duplicates, TSFT fallback, gzip input, Parquet contents.

use crate::common;

use aggrate::capture::{decode, LinkType, PacketRecord};
use aggrate::label::{label_frames, Dedup};
use aggrate::time::Ts;
use common::{aggrate, pcap_bytes, radiotap_udp, text};

fn rec(n: u64, frame: &[u8]) -> PacketRecord {
    decode(
        n,
        0,
        LinkType::Radiotap,
        Ts(n * 1000),
        frame.len() as u32,
        frame.len() as u32,
        frame,
    )
    .unwrap()
}

#[test]
fn retransmitted_duplicates_are_dropped_but_first_tries_kept() {
    let mut d = Dedup::default();
    let a = rec(1, &radiotap_udp(100, Some(1), 0, 10, false));
    let b = rec(2, &radiotap_udp(100, Some(1), 1, 11, false));
    let a_again = rec(3, &radiotap_udp(200, Some(2), 0, 10, true)); // retry of 10: duplicate
    let c_retry = rec(4, &radiotap_udp(200, Some(2), 2, 12, true)); // retry, but 12 never seen
    let b_no_retry_flag = rec(5, &radiotap_udp(200, Some(2), 1, 11, false)); // same seq, no retry flag
    assert!(d.keep(&a) && d.keep(&b));
    assert!(!d.keep(&a_again));
    assert!(d.keep(&c_retry));
    assert!(
        d.keep(&b_no_retry_flag),
        "without the retry flag a repeated sequence number is a new MPDU"
    );
    assert_eq!(d.dropped, 1);
}

#[test]
fn tsft_groups_frames_without_ampdu_status() {
    // No A-MPDU status: runs of equal TSFT (and PHY rate) are frames.
    let tsfts = [10u64, 10, 10, 20, 30, 30];
    let pkts: Vec<PacketRecord> = tsfts
        .iter()
        .enumerate()
        .map(|(i, t)| rec(i as u64 + 1, &radiotap_udp(*t, None, i as u32, i as u16, false)))
        .collect();
    let l = label_frames(&pkts, 64).unwrap();
    assert_eq!(l.frames.iter().map(|f| f.packets).collect::<Vec<_>>(), vec![3, 1, 2]);
    assert_eq!(l.first_of_frame, vec![true, false, false, true, true, false]);
    // A reference, when present, wins over TSFT: different TSFTs, one frame.
    let pkts: Vec<PacketRecord> = (0..4)
        .map(|i| rec(i + 1, &radiotap_udp(100 + i * 150, Some(7), i as u32, i as u16, false)))
        .collect();
    assert_eq!(label_frames(&pkts, 64).unwrap().frames.len(), 1);
}

#[test]
fn kernel_only_capture_has_no_ground_truth() {
    let dir = tempfile::tempdir().unwrap();
    // Raw-IP packets: host times only.
    let mut pkts = Vec::new();
    for s in 0..30u32 {
        let mut v = vec![0x45, 0, 0, 32, 0, 1, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2];
        v.extend_from_slice(&[0x1b, 0x58, 0x13, 0x89, 0, 12, 0, 0]);
        v.extend_from_slice(&s.to_be_bytes());
        pkts.push((s as u64 * 50, v));
    }
    let refs: Vec<(u64, &[u8])> = pkts.iter().map(|(t, p)| (*t, &p[..])).collect();
    std::fs::write(dir.path().join("k.pcap"), pcap_bytes(101, &refs)).unwrap();
    let out = aggrate(dir.path(), &["inspect", "k.pcap", "--json"]);
    let (o, e) = text(&out);
    assert!(out.status.success(), "{e}");
    let v: serde_json::Value = serde_json::from_str(o.trim()).unwrap();
    assert_eq!(v["ground_truth"], false);
    assert_eq!(v["packets"], 30);
    assert!(v["frames"].is_null() && v["mean_agg"].is_null());
    let out = aggrate(dir.path(), &["features", "k.pcap", "-o", "k.csv"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(text(&out).1.contains("no ground truth"), "{}", text(&out).1);
}

#[test]
#[cfg(feature = "tables")]
fn gzip_input_and_parquet_contents() {
    use polars::prelude::{ParquetReader, SerReader};
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    // 3 A-MPDUs of 4, 2 and 5 packets, gzip-compressed.
    let mut pkts = Vec::new();
    let mut seq = 0u32;
    for (k, n) in [4u32, 2, 5].iter().enumerate() {
        for _ in 0..*n {
            pkts.push((
                1000 * k as u64 + seq as u64,
                radiotap_udp(5000 + 1000 * k as u64, Some(k as u32), seq, seq as u16, false),
            ));
            seq += 1;
        }
    }
    let refs: Vec<(u64, &[u8])> = pkts.iter().map(|(t, p)| (*t, &p[..])).collect();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&pcap_bytes(127, &refs)).unwrap();
    std::fs::write(dir.path().join("g_150mbps.pcap.gz"), gz.finish().unwrap()).unwrap();
    let out = aggrate(
        dir.path(),
        &[
            "features",
            "g_150mbps.pcap.gz",
            "--m",
            "1",
            "--no-sigma",
            "-o",
            "g.parquet",
        ],
    );
    assert!(out.status.success(), "{}", text(&out).1);
    let df = ParquetReader::new(std::fs::File::open(dir.path().join("g.parquet")).unwrap())
        .finish()
        .unwrap();
    assert_eq!(df.height(), 10); // 11 packets, the first has no gap
    let names: Vec<String> = df.get_column_names().iter().map(|s| s.to_string()).collect();
    assert!(names.contains(&"gap_us_1".to_string()) && !names.contains(&"sigma_us".to_string()));
    let y: Vec<Option<bool>> = (0..df.height())
        .map(|i| df.column("y").unwrap().bool().unwrap().get(i))
        .collect();
    assert_eq!(y.iter().filter(|v| **v == Some(true)).count(), 2);
    let lvl: Vec<Option<u32>> = (0..df.height())
        .map(|i| df.column("agg_level").unwrap().u32().unwrap().get(i))
        .collect();
    assert_eq!(
        lvl.iter().map(|v| v.unwrap()).collect::<Vec<_>>(),
        vec![4, 4, 4, 2, 2, 5, 5, 5, 5, 5]
    );
    let rate = df.column("rate_mbps").unwrap().f64().unwrap().get(0);
    assert_eq!(rate, Some(150.0));
    let gaps: Vec<f64> = df
        .column("gap_us_1")
        .unwrap()
        .f64()
        .unwrap()
        .into_no_null_iter()
        .collect();
    assert_eq!(gaps[..3], [1.0, 1.0, 1.0]);
    assert_eq!(gaps[3], 1001.0); // seq 4 at 1000 + 4 µs after seq 3 at 3 µs
}

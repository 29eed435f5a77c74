//! State that hostile (valid) captures could grow without bound is capped, counted and named:
//! the retransmission filter's transmitter × TID streams, the flows `inspect` summarises, the
//! rows of a frame that never closes, kernel logs and xz dictionaries. Captures come from
//! `aggrate tool hostile` (the same generator `benches/hostile.sh` measures peak RSS with).

use crate::common;

use std::path::Path;

use common::{aggrate, text};

fn hostile(d: &Path, kind: &str, n: u32) -> String {
    let name = format!("{kind}.pcap.xz");
    let o = aggrate(d, &["-q", "tool", "hostile", kind, "-n", &n.to_string(), "-o", &name]);
    assert!(o.status.success(), "{}", text(&o).1);
    name
}

fn inspect(d: &Path, f: &str) -> (serde_json::Value, String) {
    let o = aggrate(d, &["inspect", "--json", f]);
    assert!(o.status.success(), "{}", text(&o).1);
    let (out, err) = text(&o);
    (serde_json::from_str(out.trim()).unwrap(), err)
}

#[test]
fn a_new_transmitter_per_packet_hits_the_filter_cap_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let f = hostile(d, "streams", 5000);
    let (j, err) = inspect(d, &f);
    assert_eq!(j["records"], 5000);
    assert_eq!(j["packets"], 5000, "every packet still counted: {j}");
    let caps = j["caps_hit"].as_array().unwrap();
    assert_eq!(caps.len(), 1, "{j}");
    let c = caps[0].as_str().unwrap();
    assert!(
        c.contains("4096 transmitter × TID streams") && c.contains("unfiltered: 904"),
        "{c}"
    );
    assert!(err.contains("cap hit: retransmission filter"), "{err}");
}

#[test]
fn a_new_flow_per_packet_hits_the_summary_cap() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let f = hostile(d, "flows", 5000);
    let (j, err) = inspect(d, &f);
    assert_eq!(j["flows_total"], 5000, "every flow still counted");
    let c = j["caps_hit"][0].as_str().unwrap();
    assert!(
        c.starts_with("flows summarised: 4096") && c.contains("not summarised: 904"),
        "{c}"
    );
    assert!(err.contains("cap hit: flows summarised"), "{err}");
}

#[test]
fn a_frame_that_never_closes_is_closed_at_the_row_cap() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let f = hostile(d, "open-frame", 40_000);
    let o = aggrate(d, &["features", &f, "--port", "5001", "-o", "rows.csv"]);
    assert!(o.status.success(), "{}", text(&o).1);
    let err = text(&o).1;
    assert!(
        err.contains("cap hit: 2 frames still open after 16384 rows were closed there"),
        "{err}"
    );
    // Nothing computed was lost: every packet past the first window is a row.
    let rows = std::fs::read_to_string(d.join("rows.csv")).unwrap().lines().count() - 1;
    assert_eq!(rows, 40_000 - 20);
}

#[test]
fn an_xz_stream_asking_for_a_huge_dictionary_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // 1 GiB dictionary: its decoder would need ~1 GiB of memory.
    let mut opts = xz2::stream::LzmaOptions::new_preset(6).unwrap();
    opts.dict_size(1 << 30);
    let stream =
        xz2::stream::Stream::new_stream_encoder(xz2::stream::Filters::new().lzma2(&opts), xz2::stream::Check::Crc64)
            .unwrap();
    let mut enc = xz2::write::XzEncoder::new_stream(Vec::new(), stream);
    std::io::Write::write_all(&mut enc, &[0u8; 1000]).unwrap();
    std::fs::write(d.join("big.pcap.xz"), enc.finish().unwrap()).unwrap();
    let o = aggrate(d, &["inspect", "big.pcap.xz"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o).1);
    assert!(text(&o).1.contains("memory limit"), "{}", text(&o).1);
}

//! Damaged input gives a clear error naming the file and the byte offset / packet, a non-zero
//! exit, never a panic; what was read before the damage is kept, and --keep-going reads past
//! packet-level damage.

use crate::common;

use std::path::Path;

use common::{aggrate, ns3_pcap, pcap_bytes, radiotap_udp, text};

fn write(dir: &Path, name: &str, bytes: &[u8]) -> String {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p.to_str().unwrap().to_string()
}

fn fails_with(dir: &Path, args: &[&str], needles: &[&str]) -> (String, String) {
    let out = aggrate(dir, args);
    let (o, e) = text(&out);
    assert_eq!(
        out.status.code(),
        Some(3),
        "exit code for {args:?}: stdout {o} stderr {e}"
    );
    assert!(!e.contains("panicked"), "{e}");
    for n in needles {
        assert!(e.contains(n), "stderr lacks {n:?}: {e}");
    }
    (o, e)
}

#[test]
fn empty_garbage_and_wrong_magic() {
    let d = tempfile::tempdir().unwrap();
    let p = write(d.path(), "empty.pcap", b"");
    fails_with(
        d.path(),
        &["inspect", &p],
        &["empty.pcap", "empty file", "byte offset 0"],
    );
    let p = write(d.path(), "garbage.pcap", &[0x42u8; 300]);
    fails_with(
        d.path(),
        &["inspect", &p],
        &[
            "garbage.pcap",
            "not a pcap or pcapng file",
            "0x42424242",
            "byte offset 0",
        ],
    );
    let p = write(d.path(), "z.pcap", &[0x28, 0xb5, 0x2f, 0xfd, 0, 0, 0, 0]);
    fails_with(d.path(), &["inspect", &p], &["z.pcap", "zstd"]);
    let p = write(d.path(), "short.pcap", &[0xd4, 0xc3]);
    fails_with(d.path(), &["inspect", &p], &["short.pcap"]);
    // A pcap header cut short.
    let p = write(d.path(), "hdr.pcap", &pcap_bytes(127, &[])[..10]);
    fails_with(d.path(), &["inspect", &p], &["hdr.pcap", "header"]);
    let missing = d.path().join("nope.pcap");
    let out = aggrate(d.path(), &["inspect", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).1.contains("nope.pcap"));
}

#[test]
fn header_only_capture_has_no_rows() {
    let d = tempfile::tempdir().unwrap();
    let p = write(d.path(), "hollow.pcap", &pcap_bytes(127, &[]));
    fails_with(d.path(), &["features", &p, "-o", "x.csv"], &["hollow.pcap"]);
}

#[test]
fn unsupported_link_type() {
    let d = tempfile::tempdir().unwrap();
    let p = write(d.path(), "ppp.pcap", &pcap_bytes(9, &[(1, &[1, 2, 3])]));
    fails_with(d.path(), &["inspect", &p], &["ppp.pcap", "unsupported link type 9"]);
}

#[test]
fn truncated_capture_keeps_what_was_read() {
    let d = tempfile::tempdir().unwrap();
    let full = std::fs::read(ns3_pcap(d.path())).unwrap();
    // Walk the records to find the start of record 1001, then cut inside it.
    let mut off = 24usize;
    for _ in 0..1000 {
        let incl = u32::from_le_bytes(full[off + 8..off + 12].try_into().unwrap()) as usize;
        off += 16 + incl;
    }
    let p = write(d.path(), "cut.pcap", &full[..off + 30]);
    let (stdout, _) = fails_with(
        d.path(),
        &["inspect", &p, "--json"],
        &["cut.pcap", "packet 1001", &format!("byte offset {off}"), "truncated"],
    );
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(v["records"], 1000);
    assert_eq!(v["complete"], false);
    assert!(v["packets"].as_u64().unwrap() > 500);

    // Features: rows before the damage are written.
    fails_with(
        d.path(),
        &["features", &p, "-o", "cut.csv"],
        &["cut.pcap", "packet 1001"],
    );
    let rows = std::fs::read_to_string(d.path().join("cut.csv"))
        .unwrap()
        .lines()
        .count();
    assert!(rows > 500, "{rows} rows kept");

    // --keep-going: a warning and exit 0.
    let out = aggrate(d.path(), &["inspect", &p, "--keep-going"]);
    assert!(out.status.success());
    assert!(text(&out).1.contains("warning"));
}

#[test]
fn radiotap_length_past_the_packet() {
    let d = tempfile::tempdir().unwrap();
    let good1 = radiotap_udp(1000, Some(1), 0, 0, false);
    let mut bad = radiotap_udp(1000, Some(1), 1, 1, false);
    let caplen = bad.len();
    bad[2..4].copy_from_slice(&((caplen + 10) as u16).to_le_bytes());
    let good2 = radiotap_udp(2000, Some(2), 2, 2, false);
    let good3 = radiotap_udp(2000, Some(2), 3, 3, false);
    let bytes = pcap_bytes(127, &[(1000, &good1), (1001, &bad), (2000, &good2), (2001, &good3)]);
    let p = write(d.path(), "rt.pcap", &bytes);
    let bad_offset = 24 + 16 + good1.len();
    let (stdout, _) = fails_with(
        d.path(),
        &["inspect", &p, "--json"],
        &[
            "rt.pcap",
            "packet 2",
            &format!("byte offset {bad_offset}"),
            "radiotap length",
        ],
    );
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(v["records"], 1);
    let out = aggrate(d.path(), &["inspect", &p, "--json", "--keep-going"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("skipped"));
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(v["records"], 3);
    assert_eq!(v["damaged_skipped"], 1);
    assert_eq!(v["frames"], 2);
}

#[test]
fn corrupt_pcapng_block() {
    let d = tempfile::tempdir().unwrap();
    let mut ng = std::fs::read(common::data("radiotap_fields.pcapng")).unwrap();
    // Find the third block (after SHB and IDB) and break its length fields.
    let shb = u32::from_le_bytes(ng[4..8].try_into().unwrap()) as usize;
    let idb = u32::from_le_bytes(ng[shb + 4..shb + 8].try_into().unwrap()) as usize;
    let at = shb + idb;
    let epb_len = u32::from_le_bytes(ng[at + 4..at + 8].try_into().unwrap()) as usize;
    let second = at + epb_len;
    ng[second + 4..second + 8].copy_from_slice(&7u32.to_le_bytes());
    let p = write(d.path(), "bad.pcapng", &ng);
    let (stdout, _) = fails_with(
        d.path(),
        &["inspect", &p, "--json"],
        &["bad.pcapng", "packet 2", &format!("byte offset {second}")],
    );
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(v["records"], 1);
}

/// The live commands' smaller traps: a key file that is a FIFO (it used to hang in `open`), a
/// report interval or rate the loop cannot run at, a device as the file to send, and AP ports
/// that would wrap past 65535. Each ends at once with an error naming the flag or file.
#[test]
fn live_flags_and_files_that_cannot_work_are_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("k");
    let o = aggrate(dir.path(), &["keygen", key.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o).1);
    let fifo = dir.path().join("fifo");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let k = key.to_str().unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["send", "--to", "127.0.0.1:9", "--key-file", fifo.to_str().unwrap()],
            "not a regular file",
        ),
        (
            vec!["send", "--to", "127.0.0.1:9", "--key-file", k, "--interval-ms", "0"],
            "--interval-ms 0",
        ),
        (
            vec![
                "send",
                "--to",
                "127.0.0.1:9",
                "--key-file",
                k,
                "--interval-ms",
                "18446744073709551615",
            ],
            "--interval-ms",
        ),
        (
            vec![
                "send",
                "--to",
                "127.0.0.1:9",
                "--key-file",
                k,
                "--max-rate-mbps",
                "1e-300",
            ],
            "--max-rate-mbps",
        ),
        (
            vec!["send", "--to", "127.0.0.1:9", "--key-file", k, "--file", "/dev/zero"],
            "not a regular file",
        ),
        (
            vec![
                "ap",
                "--listen",
                "127.0.0.1:65535",
                "--stations",
                "127.0.0.1:1,127.0.0.1:2",
            ],
            "65536",
        ),
    ];
    for (args, needle) in cases {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_aggrate"))
            .current_dir(dir.path())
            .args(&args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Polled every 20 ms, at most 500 times: 10 s.
        let mut polls = 0;
        while child.try_wait().unwrap().is_none() {
            polls += 1;
            if polls > 500 {
                let _ = child.kill();
                panic!("{args:?} still running after 10 s");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let o = child.wait_with_output().unwrap();
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success() && e.contains(needle) && !e.contains("panicked"),
            "{args:?}: {e}"
        );
    }
}

//! Receiver-side link types (Ethernet, raw IP, Linux SLL/SLL2, bare 802.11) decode to the same
//! 5-tuple and payload as tshark sees; kernel timestamps join to ground truth by sequence number.

use crate::common;

use std::io::BufReader;

use aggrate::capture::open_capture;
use common::{aggrate, ipv4_udp, pcap_bytes, radiotap_udp, text, tshark_fields};

fn ipv6_udp(seq: u32) -> Vec<u8> {
    let mut v = vec![0x60, 0, 0, 0, 0, 20, 17, 64];
    v.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    v.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    v.extend_from_slice(&common::udp_seq(seq));
    v
}

fn framed(linktype: u32, ip: &[u8]) -> Vec<u8> {
    let et: [u8; 2] = if ip[0] >> 4 == 6 { [0x86, 0xdd] } else { [0x08, 0x00] };
    let mut v = Vec::new();
    match linktype {
        1 => {
            v.extend_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1]);
            v.extend_from_slice(&et);
        }
        113 => {
            v.extend_from_slice(&[0, 0, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0]);
            v.extend_from_slice(&et);
        }
        276 => {
            v.extend_from_slice(&et);
            v.extend_from_slice(&[0, 0, 0, 0, 0, 2, 0, 1, 0, 0, 6, 2, 0, 0, 0, 0, 1, 0]);
        }
        105 => {
            v.extend_from_slice(&[
                0x08, 0x02, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 3, 0x10, 0,
            ]);
            v.extend_from_slice(&[0xaa, 0xaa, 3, 0, 0, 0]);
            v.extend_from_slice(&et);
        }
        _ => {}
    }
    v.extend_from_slice(ip);
    v
}

#[test]
fn every_link_type_matches_tshark() {
    let dir = tempfile::tempdir().unwrap();
    for (lt, v6) in [
        (1, false),
        (1, true),
        (101, false),
        (228, false),
        (229, true),
        (113, false),
        (276, true),
        (105, false),
    ] {
        let pkts: Vec<Vec<u8>> = (0..5u32)
            .map(|s| framed(lt, &if v6 { ipv6_udp(s + 10) } else { ipv4_udp(s + 10) }))
            .collect();
        let refs: Vec<(u64, &[u8])> = pkts.iter().enumerate().map(|(i, p)| (i as u64 * 100, &p[..])).collect();
        let bytes = pcap_bytes(lt, &refs);
        let path = dir.path().join(format!("lt{lt}_{v6}.pcap"));
        std::fs::write(&path, &bytes).unwrap();
        let ours: Vec<_> = open_capture(BufReader::new(&bytes[..]))
            .unwrap()
            .map(|r| r.unwrap())
            .collect();
        let t = tshark_fields(
            &path,
            &[
                "ip.src",
                "ipv6.src",
                "ip.dst",
                "ipv6.dst",
                "udp.srcport",
                "udp.dstport",
                "udp.payload",
            ],
        );
        assert_eq!(t.len(), 5, "link type {lt}");
        for (r, row) in ours.iter().zip(&t) {
            let l3 = r.l3.unwrap_or_else(|| panic!("link type {lt}: no IP decoded"));
            let src = if v6 { &row[1] } else { &row[0] };
            let dst = if v6 { &row[3] } else { &row[2] };
            assert_eq!(&l3.flow.src.to_string(), src, "link type {lt}");
            assert_eq!(&l3.flow.dst.to_string(), dst, "link type {lt}");
            assert_eq!(l3.flow.sport.to_string(), row[4]);
            assert_eq!(l3.flow.dport.to_string(), row[5]);
            let payload: String = l3.payload[..l3.payload_captured as usize]
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            assert!(
                row[6].replace(':', "").starts_with(&payload),
                "link type {lt}: {payload} vs {}",
                row[6]
            );
            assert_eq!(
                r.payload_seq(0),
                Some(u32::from_str_radix(&row[6].replace(':', "")[..8], 16).unwrap())
            );
        }
    }
}

/// A sniffer capture (radiotap, TSFT) and a receiver capture (SLL, kernel times) of the same 40
/// packets in 10 A-MPDUs: features take their gaps from the kernel side, labels from the sniffer.
#[test]
fn kernel_timestamps_join_by_sequence_number() {
    let dir = tempfile::tempdir().unwrap();
    let mut truth = Vec::new();
    let mut kernel = Vec::new();
    let mut csv = String::from("seq,host_ns\n");
    for seq in 0..40u32 {
        let frame = seq / 4;
        truth.push((
            1_000_000 + frame as u64 * 500,
            radiotap_udp(5000 + frame as u64 * 500, Some(frame), seq, seq as u16, false),
        ));
        if seq != 17 {
            // The kernel saw packet 17 lost; its times are 3 µs apart inside a frame.
            let host_us = 2_000_000 + frame as u64 * 500 + (seq % 4) as u64 * 3;
            kernel.push((host_us, framed(113, &ipv4_udp(seq))));
            csv.push_str(&format!("{seq},{}\n", host_us * 1000));
        }
    }
    let t: Vec<(u64, &[u8])> = truth.iter().map(|(t, p)| (*t, &p[..])).collect();
    let k: Vec<(u64, &[u8])> = kernel.iter().map(|(t, p)| (*t, &p[..])).collect();
    std::fs::write(dir.path().join("truth.pcap"), pcap_bytes(127, &t)).unwrap();
    std::fs::write(dir.path().join("kernel.pcap"), pcap_bytes(113, &k)).unwrap();
    std::fs::write(dir.path().join("kernel.csv"), csv).unwrap();

    for kernel_file in ["kernel.pcap", "kernel.csv"] {
        let out = aggrate(
            dir.path(),
            &[
                "features",
                "truth.pcap",
                "--kernel",
                kernel_file,
                "--m",
                "2",
                "-o",
                "j.csv",
            ],
        );
        let (_, err) = text(&out);
        assert!(out.status.success(), "{err}");
        assert!(
            err.contains(&format!(
                "joined 39 packets with {kernel_file}; 1 capture packets without a kernel time, 0 log entries without a capture packet"
            )),
            "{err}"
        );
        let table = std::fs::read_to_string(dir.path().join("j.csv")).unwrap();
        let mut lines = table.lines();
        let h: Vec<&str> = lines.next().unwrap().split(',').collect();
        let col = |n: &str| h.iter().position(|x| *x == n).unwrap();
        let rows: Vec<Vec<String>> = lines.map(|l| l.split(',').map(String::from).collect()).collect();
        assert_eq!(rows.len(), 39 - 2);
        for r in &rows {
            let seq: u64 = r[col("seq")].parse().unwrap();
            let host: u64 = r[col("host_ns")].parse().unwrap();
            assert_eq!(
                host,
                (2_000_000 + (seq / 4) * 500 + (seq % 4) * 3) * 1000,
                "kernel time used"
            );
            assert_eq!(r[col("y")] == "true", seq.is_multiple_of(4), "label from the sniffer");
            let gap: f64 = r[col("gap_us_1")].parse().unwrap();
            assert!(
                if seq.is_multiple_of(4) {
                    gap > 400.0
                } else {
                    gap == 3.0 || (seq == 18 && gap == 6.0)
                },
                "seq {seq} gap {gap}"
            );
            let lvl: u32 = r[col("agg_level")].parse().unwrap();
            assert_eq!(lvl, 4);
        }
    }
}

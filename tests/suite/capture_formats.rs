//! Captures real tools write that are valid but were refused: no UDP flow, a header-only file,
//! the FCS-length bits in the pcap link-type field, short control frames beside a flow, and a
//! flow shorter than one window. Fixtures are hand-packed here; tshark checks the record counts.

use crate::common;

use std::path::Path;

use common::{aggrate, pcap_bytes, radiotap_udp, text, tshark_fields};

fn inspect_json(d: &Path, f: &str) -> serde_json::Value {
    let o = aggrate(d, &["inspect", "--json", f]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o).1);
    serde_json::from_str(text(&o).0.trim()).unwrap()
}

fn tshark_records(p: &Path) -> usize {
    tshark_fields(p, &["frame.number"]).len()
}

/// A 12-byte 802.11 ACK (10-byte header + 2 stray bytes) behind a radiotap header whose Flags
/// say the frame ends in an FCS: 8 bytes after removing it, too short for any header.
fn short_ack() -> Vec<u8> {
    let mut f = vec![0u8, 0, 9, 0, 0x02, 0, 0, 0, 0x10];
    f.extend_from_slice(&[0xd4, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0]);
    f
}

#[test]
fn a_header_only_capture_is_described_and_features_refuses_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("hollow.pcap"), pcap_bytes(127, &[])).unwrap();
    let o = aggrate(d, &["inspect", "hollow.pcap"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o).1);
    assert!(text(&o).1.contains("holds no packets"));
    let o = aggrate(d, &["features", "hollow.pcap", "-o", "x.csv"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o).1);
}

#[test]
fn a_capture_without_a_udp_flow_is_described_with_exit_0() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Only control frames: two short ACKs.
    std::fs::write(
        d.join("acks.pcap"),
        pcap_bytes(127, &[(1, &short_ack()), (2, &short_ack())]),
    )
    .unwrap();
    let j = inspect_json(d, "acks.pcap");
    assert_eq!(j["records"], 2);
    assert_eq!(
        j["records"].as_u64().unwrap() as usize,
        tshark_records(&d.join("acks.pcap"))
    );
    assert_eq!(j["frames_skipped"], 2, "{j}");
    assert_eq!(j["selected_flow"], serde_json::Value::Null);
    assert_eq!(j["selection"], "no UDP or TCP flow in the capture");
}

#[test]
fn a_short_control_frame_beside_the_flow_is_skipped_not_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let frames: Vec<Vec<u8>> = (0..30u32)
        .map(|i| radiotap_udp(100 * (i as u64 / 5), Some(i / 5), i, i as u16, false))
        .collect();
    let mut pk: Vec<(u64, &[u8])> = frames
        .iter()
        .enumerate()
        .map(|(i, f)| (i as u64 * 10, &f[..]))
        .collect();
    let ack = short_ack();
    pk.insert(7, (65, &ack));
    std::fs::write(d.join("mixed.pcap"), pcap_bytes(127, &pk)).unwrap();
    let j = inspect_json(d, "mixed.pcap");
    assert_eq!(j["records"], 31);
    assert_eq!(tshark_records(&d.join("mixed.pcap")), 31);
    assert_eq!(j["frames_skipped"], 1);
    assert_eq!(j["packets"], 30);
    assert_eq!(j["frames"], 6);
    assert_eq!(j["complete"], true);
    let o = aggrate(d, &["features", "mixed.pcap", "--m", "5", "-o", "rows.csv"]);
    assert!(o.status.success(), "{}", text(&o).1);
}

#[test]
fn the_link_type_field_is_masked_and_its_fcs_length_honoured() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // 0x3000007F: radiotap with bits above the low 16 set (airodump-ng writes such headers;
    // libpcap and tshark read the low 16 bits, the FCS length needs bit 26).
    let frames: Vec<Vec<u8>> = (0..10u32)
        .map(|i| radiotap_udp(100, Some(1), i, i as u16, false))
        .collect();
    let pk: Vec<(u64, &[u8])> = frames.iter().map(|f| (1, &f[..])).collect();
    std::fs::write(d.join("rt.pcap"), pcap_bytes(0x3000_007F, &pk)).unwrap();
    let j = inspect_json(d, "rt.pcap");
    assert!(j["link_type"].as_str().unwrap().contains("127"), "{j}");
    assert_eq!(j["packets"], 10);
    assert_eq!(tshark_records(&d.join("rt.pcap")), 10);
    // 802.11 (105) with "FCS present, 2 × 16 bits": each packet ends in 4 FCS bytes that are not
    // frame bytes; the UDP flow is read the same with or without them.
    let bare: Vec<Vec<u8>> = frames
        .iter()
        .map(|f| {
            let rt = u16::from_le_bytes([f[2], f[3]]) as usize;
            let mut v = f[rt..].to_vec();
            v.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
            v
        })
        .collect();
    let pk: Vec<(u64, &[u8])> = bare.iter().map(|f| (1, &f[..])).collect();
    std::fs::write(d.join("fcs.pcap"), pcap_bytes(105 | 0x0400_0000 | 2 << 28, &pk)).unwrap();
    let j = inspect_json(d, "fcs.pcap");
    assert!(j["link_type"].as_str().unwrap().contains("105"), "{j}");
    assert_eq!(j["flows"][0]["packets"], 10, "{j}");
    let ts = tshark_fields(&d.join("fcs.pcap"), &["udp.dstport"]);
    assert_eq!(ts.len(), 10);
    assert!(ts.iter().all(|r| r[0] == "5001"), "{ts:?}");
}

#[test]
fn features_refuses_a_flow_shorter_than_one_window() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let frames: Vec<Vec<u8>> = (0..8u32)
        .map(|i| radiotap_udp(100 * i as u64, Some(i), i, i as u16, false))
        .collect();
    let pk: Vec<(u64, &[u8])> = frames
        .iter()
        .enumerate()
        .map(|(i, f)| (i as u64 * 10, &f[..]))
        .collect();
    std::fs::write(d.join("short.pcap"), pcap_bytes(127, &pk)).unwrap();
    let o = aggrate(d, &["features", "short.pcap", "-o", "rows.csv"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o).1);
    assert!(
        text(&o)
            .1
            .contains("has 8 packets, too short for one row: m = 20 needs at least 21"),
        "{}",
        text(&o).1
    );
}

#[test]
fn a_fraction_of_a_second_past_one_is_carried_as_tshark_does() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let frames: Vec<Vec<u8>> = (0..30u32)
        .map(|i| radiotap_udp(100 * i as u64, Some(i), i, i as u16, false))
        .collect();
    // Microsecond field 1,000,046 on record 3 (as airodump-ng writes): pcap_bytes takes µs.
    let mut bytes = pcap_bytes(127, &frames.iter().map(|f| (10_000_000, &f[..])).collect::<Vec<_>>());
    let rec3 = 24 + 2 * (16 + frames[0].len());
    bytes[rec3 + 4..rec3 + 8].copy_from_slice(&1_000_046u32.to_le_bytes());
    std::fs::write(d.join("airodump.pcap"), &bytes).unwrap();
    let j = inspect_json(d, "airodump.pcap");
    assert_eq!(j["records"], 30);
    assert_eq!(j["timestamps_fixed"], 1);
    assert_eq!(j["complete"], true);
    // tshark reads every record and takes the record as 1.000046 s after the one before (it
    // prints seconds and nanoseconds as they are: "0.1000046000" is 0 s + 1,000,046,000 ns).
    let ts = tshark_fields(&d.join("airodump.pcap"), &["frame.time_delta"]);
    assert_eq!(ts.len(), 30);
    let (sec, ns) = ts[2][0].split_once('.').unwrap();
    let delta = sec.parse::<f64>().unwrap() + ns.parse::<f64>().unwrap() * 1e-9;
    assert!((delta - 1.000046).abs() < 1e-9, "{:?}", ts[2]);
    // Our time for it is the same instant (src/capture/pcap.rs checks the value itself).
    let mut r = aggrate::capture::io::open_path(&d.join("airodump.pcap"))
        .unwrap()
        .reader;
    let times: Vec<u64> = (&mut r).map(|x| x.unwrap().host.as_nanos()).collect();
    assert_eq!(times[2] - times[1], 1_000_046_000);
}

#[test]
fn keep_going_says_incomplete_when_reading_stopped_early() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let frames: Vec<Vec<u8>> = (0..30u32)
        .map(|i| radiotap_udp(100 * i as u64, Some(i), i, i as u16, false))
        .collect();
    let mut bytes = pcap_bytes(127, &frames.iter().map(|f| (1, &f[..])).collect::<Vec<_>>());
    // Record 11 claims 100 MB: container damage.
    let rec11 = 24 + 10 * (16 + frames[0].len());
    bytes[rec11 + 8..rec11 + 12].copy_from_slice(&100_000_000u32.to_le_bytes());
    std::fs::write(d.join("damaged.pcap"), &bytes).unwrap();
    let o = aggrate(d, &["inspect", "--json", "--keep-going", "damaged.pcap"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o).1);
    let j: serde_json::Value = serde_json::from_str(text(&o).0.trim()).unwrap();
    assert_eq!(j["records"], 10);
    assert_eq!(j["complete"], false, "{j}");
    assert!(j["unread_bytes"].as_u64().unwrap() > 0, "{j}");
    assert!(j["error"].as_str().unwrap().contains("packet 11"), "{j}");
}

fn pcapng(ifaces: &[u16], packets: &[(u32, &[u8])]) -> Vec<u8> {
    let mut v = Vec::new();
    let block = |v: &mut Vec<u8>, ty: u32, body: &[u8]| {
        let len = 12 + body.len() as u32;
        v.extend_from_slice(&ty.to_le_bytes());
        v.extend_from_slice(&len.to_le_bytes());
        v.extend_from_slice(body);
        v.extend_from_slice(&len.to_le_bytes());
    };
    let mut shb = 0x1A2B3C4Du32.to_le_bytes().to_vec();
    shb.extend_from_slice(&[1, 0, 0, 0]);
    shb.extend_from_slice(&(-1i64).to_le_bytes());
    block(&mut v, 0x0A0D0D0A, &shb);
    for lt in ifaces {
        let mut idb = lt.to_le_bytes().to_vec();
        idb.extend_from_slice(&[0, 0]);
        idb.extend_from_slice(&65535u32.to_le_bytes());
        block(&mut v, 1, &idb);
    }
    for (i, (iface, data)) in packets.iter().enumerate() {
        let mut epb = Vec::new();
        for x in [
            *iface,
            0,
            1_000_000 + i as u32 * 10,
            data.len() as u32,
            data.len() as u32,
        ] {
            epb.extend_from_slice(&x.to_le_bytes());
        }
        epb.extend_from_slice(data);
        while epb.len() % 4 != 0 {
            epb.push(0);
        }
        block(&mut v, 6, &epb);
    }
    v
}

#[test]
fn a_multi_interface_pcapng_reads_the_interfaces_it_can() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let frames: Vec<Vec<u8>> = (0..12u32)
        .map(|i| radiotap_udp(100 * (i as u64 / 4), Some(i / 4), i, i as u16, false))
        .collect();
    // Interface 0: USB (link type 220), interface 1: radiotap; interleaved.
    let usb = [0u8; 48];
    let mut pk: Vec<(u32, &[u8])> = Vec::new();
    for f in &frames {
        pk.push((0, &usb));
        pk.push((1, f));
    }
    std::fs::write(d.join("multi.pcapng"), pcapng(&[220, 127], &pk)).unwrap();
    let j = inspect_json(d, "multi.pcapng");
    assert_eq!(j["records"], 24, "{j}");
    assert_eq!(tshark_records(&d.join("multi.pcapng")), 24);
    assert_eq!(j["other_link_records"], 12);
    assert_eq!(j["packets"], 12);
    assert_eq!(j["frames"], 3);
    assert_eq!(j["complete"], true);
}

/// `radiotap_udp` turned into an 802.11s mesh data frame: 4 addresses, Mesh Control Present in
/// QoS control, a Mesh Control field with `ext` address-extension bytes (0, 6 or 12).
fn mesh_udp(i: u32, ext: usize) -> Vec<u8> {
    let f = radiotap_udp(100 * (i as u64 / 3), Some(i / 3), i, i as u16, false);
    let rt = u16::from_le_bytes([f[2], f[3]]) as usize;
    let mut v = f[..rt].to_vec();
    let mac = &f[rt..];
    v.extend_from_slice(&[0x88, 0x03]); // QoS data, ToDS + FromDS
    v.extend_from_slice(&mac[2..24]); // duration, addresses 1–3, sequence control
    v.extend_from_slice(&[0, 0, 0, 0, 0, 4]); // address 4
    v.extend_from_slice(&[0x00, 0x01]); // QoS: TID 0, Mesh Control Present
    let mode = match ext {
        0 => 0u8,
        6 => 1,
        _ => 2,
    };
    v.extend_from_slice(&[mode, 31, i as u8, 0, 0, 0]); // flags, TTL, mesh sequence
    v.extend(std::iter::repeat_n(0x02u8, ext)); // address extension
    v.extend_from_slice(&mac[26..]); // LLC/SNAP, IP, UDP
    v
}

#[test]
fn mesh_data_frames_are_decoded() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let frames: Vec<Vec<u8>> = (0..12u32).map(|i| mesh_udp(i, [0, 6, 12][i as usize % 3])).collect();
    let pk: Vec<(u64, &[u8])> = frames.iter().enumerate().map(|(i, f)| (i as u64, &f[..])).collect();
    std::fs::write(d.join("mesh.pcap"), pcap_bytes(127, &pk)).unwrap();
    let j = inspect_json(d, "mesh.pcap");
    assert_eq!(j["packets"], 12, "{j}");
    assert_eq!(j["frames"], 4);
    let ts = tshark_fields(&d.join("mesh.pcap"), &["udp.dstport", "wlan.sa"]);
    assert_eq!(ts.iter().filter(|r| r[0] == "5001").count(), 12, "{ts:?}");
    assert_eq!(j["flows"][0]["packets"], 12);
}

/// `radiotap_udp` as a TCP segment of `payload` bytes with sequence number `tcp_seq`.
fn radiotap_tcp(i: u32, tcp_seq: u32, payload: usize) -> Vec<u8> {
    let f = radiotap_udp(100 * (i as u64 / 4), Some(i / 4), 0, i as u16, false);
    let rt = u16::from_le_bytes([f[2], f[3]]) as usize;
    let ip = rt + 26 + 8; // radiotap, QoS data header, LLC/SNAP
    let mut v = f[..ip].to_vec();
    let total = (20 + 20 + payload) as u16;
    let mut iph = f[ip..ip + 20].to_vec();
    iph[2..4].copy_from_slice(&total.to_be_bytes());
    iph[9] = 6; // TCP
    v.extend_from_slice(&iph);
    v.extend_from_slice(&80u16.to_be_bytes());
    v.extend_from_slice(&40000u16.to_be_bytes());
    v.extend_from_slice(&tcp_seq.to_be_bytes());
    v.extend_from_slice(&1u32.to_be_bytes()); // ack
    v.extend_from_slice(&[0x50, 0x10, 0xff, 0xff, 0, 0, 0, 0]); // data offset 5, ACK
    v.extend(std::iter::repeat_n(0x61u8, payload));
    v
}

#[test]
fn a_tcp_download_is_a_first_class_flow_joined_by_tcp_sequence() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // 40 data segments of 1,000 bytes in A-MPDUs of 4, and two bare ACKs in the same direction.
    let mut frames: Vec<Vec<u8>> = (0..40u32).map(|i| radiotap_tcp(i, 5_000 + 1_000 * i, 1000)).collect();
    frames.insert(10, radiotap_tcp(9, 15_000, 0));
    frames.insert(30, radiotap_tcp(28, 33_000, 0));
    let pk: Vec<(u64, &[u8])> = frames
        .iter()
        .enumerate()
        .map(|(i, f)| (100 + i as u64 * 10, &f[..]))
        .collect();
    std::fs::write(d.join("tcp.pcap"), pcap_bytes(127, &pk)).unwrap();
    let j = inspect_json(d, "tcp.pcap");
    assert_eq!(j["selection"], "largest TCP flow (no UDP flow)", "{j}");
    assert!(j["selected_flow"].as_str().unwrap().starts_with("tcp "), "{j}");
    assert_eq!(j["packets"], 40, "data segments only: {j}");
    assert_eq!(j["frames"], 10);
    // Rows keyed by the TCP sequence number, as tshark reads it.
    let o = aggrate(d, &["features", "tcp.pcap", "--m", "5", "-o", "rows.csv"]);
    assert!(o.status.success(), "{}", text(&o).1);
    let csv = std::fs::read_to_string(d.join("rows.csv")).unwrap();
    let head: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let seq_col = head.iter().position(|c| *c == "seq").unwrap();
    let seqs: Vec<u32> = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(seq_col).unwrap().parse().unwrap())
        .collect();
    assert_eq!(seqs.len(), 40 - 5);
    let ts = tshark_fields(&d.join("tcp.pcap"), &["tcp.seq_raw", "tcp.len"]);
    let data: Vec<u32> = ts
        .iter()
        .filter(|r| r[1] != "0")
        .map(|r| r[0].parse().unwrap())
        .collect();
    assert_eq!(&data[5..], &seqs[..]);
    // A receiver's kernel log keyed by TCP sequence joins to the sniffer's records.
    let log: String = (0..40u32)
        .map(|i| format!("{},{}\n", 5_000 + 1_000 * i, 1_000_000 + 37 * i as u64))
        .collect();
    std::fs::write(d.join("rx.csv"), format!("seq,host_ns\n{log}")).unwrap();
    let o = aggrate(
        d,
        &[
            "features",
            "tcp.pcap",
            "--m",
            "5",
            "--kernel",
            "rx.csv",
            "-o",
            "joined.csv",
        ],
    );
    assert!(o.status.success(), "{}", text(&o).1);
    let joined = std::fs::read_to_string(d.join("joined.csv")).unwrap();
    assert_eq!(joined.lines().count() - 1, 35);
    assert!(
        joined.contains(",1000185,"),
        "kernel time of segment 5 as host_ns: {}",
        &joined[..300]
    );
}

/// An MPDU carrying the UDP packets `seqs` as an A-MSDU (QoS control bit 7), in A-MPDU `ampdu`.
fn amsdu_mpdu(ampdu: u32, dot11_seq: u16, seqs: &[u32]) -> Vec<u8> {
    let f = radiotap_udp(100 * ampdu as u64, Some(ampdu), 0, dot11_seq, false);
    let rt = u16::from_le_bytes([f[2], f[3]]) as usize;
    let mut v = f[..rt + 26].to_vec();
    v[rt + 24] |= 0x80; // A-MSDU present
    let n = seqs.len();
    for (k, s) in seqs.iter().enumerate() {
        let one = radiotap_udp(0, None, *s, 0, false);
        let r = u16::from_le_bytes([one[2], one[3]]) as usize;
        let msdu = &one[r + 26..]; // LLC/SNAP + IP + UDP
        v.extend_from_slice(&[0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 3]); // DA, SA
        v.extend_from_slice(&(msdu.len() as u16).to_be_bytes());
        v.extend_from_slice(msdu);
        if k + 1 < n {
            while !(v.len() - rt - 26).is_multiple_of(4) {
                v.push(0);
            }
        }
    }
    v
}

#[test]
fn a_msdus_in_a_mpdus_count_packets_mpdus_and_a_mpdus_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // 4 A-MPDUs × 3 MPDUs × 2 or 3 packets (A-MSDUs) = 4 × 8 = 32 packets in 12 MPDUs.
    let mut frames = Vec::new();
    let mut seq = 0u32;
    for a in 0..4u32 {
        for m in 0..3u16 {
            let k = if m == 1 { 2 } else { 3 };
            let seqs: Vec<u32> = (seq..seq + k).collect();
            seq += k;
            let mut f = amsdu_mpdu(a, a as u16 * 3 + m, &seqs);
            if m == 2 {
                // the last subframe of its A-MPDU: radiotap A-MPDU flags "last known" (0x0004)
                // and "last" (0x0008), on every packet of this A-MSDU
                let rt_flags = 8 + 8 + 1 + 3 + 4; // after TSFT, Flags and A-MPDU reference
                f[rt_flags] |= 0x0c;
            }
            frames.push(f);
        }
    }
    let pk: Vec<(u64, &[u8])> = frames
        .iter()
        .enumerate()
        .map(|(i, f)| (100 + i as u64, &f[..]))
        .collect();
    std::fs::write(d.join("amsdu.pcap"), pcap_bytes(127, &pk)).unwrap();
    let j = inspect_json(d, "amsdu.pcap");
    assert_eq!(j["records"], 12, "records are MPDUs: {j}");
    assert_eq!(j["packets"], 32, "{j}");
    assert_eq!(j["mpdus"], 12, "{j}");
    assert_eq!(j["frames"], 4, "{j}");
    assert_eq!(j["max_agg"], 8, "the level counts packets: {j}");
    // tshark: 12 records, 32 UDP packets with the same sequence numbers in the same order.
    let ts = tshark_fields(&d.join("amsdu.pcap"), &["udp.dstport", "data.data"]);
    assert_eq!(ts.len(), 12);
    let theirs: usize = ts
        .iter()
        .map(|r| r[0].split(',').filter(|p| *p == "5001").count())
        .sum();
    assert_eq!(theirs, 32);
    let mut r = aggrate::capture::io::open_path(&d.join("amsdu.pcap")).unwrap().reader;
    let ours: Vec<(u64, u32, (u16, u16))> = (&mut r)
        .map(|x| x.unwrap())
        .map(|x| (x.number, x.payload_seq(0).unwrap(), x.msdu))
        .collect();
    assert_eq!(ours.len(), 32);
    assert_eq!(
        ours.iter().map(|x| x.1).collect::<Vec<_>>(),
        (0..32).collect::<Vec<u32>>()
    );
    assert_eq!(
        ours[3],
        (2, 3, (0, 2)),
        "record 2 is an A-MSDU of 2, its first packet seq 3"
    );
    assert_eq!(ours[4], (2, 4, (1, 2)));
}

#[test]
fn emulated_a_msdus_in_a_mpdus_round_trip() {
    // The emulator packs up to 4 packets per MPDU; what it says it sent is what inspect and
    // tshark read back: packets, MPDUs and A-MPDUs, exactly.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let o = aggrate(
        d,
        &[
            "-q",
            "simulate",
            "--amsdu",
            "4",
            "--rate-mbps",
            "400",
            "--duration",
            "0.1",
            "--noise",
            "none",
            "--seed",
            "5",
            "--json",
            "-o",
            "am.pcapng",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o).1);
    let sum: serde_json::Value = serde_json::from_str(text(&o).0.trim()).unwrap();
    let st = &sum["stations"][0];
    let (packets, mpdus, ampdus) = (
        st["delivered"].as_u64().unwrap(),
        st["stats"]["mpdus"].as_u64().unwrap(),
        st["stats"]["ampdus"].as_u64().unwrap(),
    );
    assert!(mpdus * 2 < packets, "A-MSDUs were built: {st}");
    let j = inspect_json(d, "am.pcapng");
    assert_eq!(j["records"], mpdus, "{j}");
    assert_eq!(j["mpdus"], mpdus, "{j}");
    assert_eq!(j["packets"], packets, "{j}");
    assert_eq!(j["frames"], ampdus, "{j}");
    assert_eq!(j["max_agg"], st["max_agg"], "the level counts packets: {j}");
    assert_eq!(j["frames_skipped"], 0, "{j}");
    let ts = tshark_fields(
        &d.join("am.pcapng"),
        &[
            "_ws.malformed",
            "wlan.qos.amsdupresent",
            "udp.dstport",
            "radiotap.ampdu.reference",
        ],
    );
    assert_eq!(ts.len() as u64, mpdus);
    assert!(ts.iter().all(|r| r[0].is_empty()), "tshark finds no malformed frame");
    let theirs: u64 = ts
        .iter()
        .map(|r| r[2].split(',').filter(|p| *p == "5001").count() as u64)
        .sum();
    assert_eq!(theirs, packets);
    let refs: std::collections::BTreeSet<&str> = ts.iter().map(|r| r[3].as_str()).collect();
    assert_eq!(refs.len() as u64, ampdus);
    assert!(
        ts.iter().any(|r| r[1] == "1" || r[1] == "True"),
        "A-MSDU bit set: {:?}",
        &ts[0]
    );
}

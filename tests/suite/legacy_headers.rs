//! PPI (192), AVS (163) and Prism (119) radio headers, hand-packed around the same 802.11 UDP
//! frames, mapped onto the radiotap record and cross-checked field by field against tshark's
//! normalised `wlan_radio.*` fields (TSFT, data rate, frequency, signal) and its UDP decode.

use crate::common;

use std::path::Path;

use aggrate::capture::io::open_path;
use common::{aggrate, pcap_bytes, radiotap_udp, text, tshark_fields};

/// The 802.11 frame (no radio header) of packet `i`: 3 packets per A-MPDU.
fn dot11(i: u32) -> Vec<u8> {
    let f = radiotap_udp(0, None, i, i as u16, false);
    let rt = u16::from_le_bytes([f[2], f[3]]) as usize;
    f[rt..].to_vec()
}

fn tsft(i: u32) -> u64 {
    1_000_000 + 500 * (i as u64 / 3)
}

fn ppi(i: u32) -> Vec<u8> {
    let mut common = Vec::new();
    common.extend_from_slice(&tsft(i).to_le_bytes());
    common.extend_from_slice(&0u16.to_le_bytes()); // flags
    common.extend_from_slice(&108u16.to_le_bytes()); // 54 Mb/s
    common.extend_from_slice(&5180u16.to_le_bytes());
    common.extend_from_slice(&0x0140u16.to_le_bytes());
    common.extend_from_slice(&[0, 0, (-40i8) as u8, (-95i8) as u8]);
    let mut mac = Vec::new();
    let last = i % 3 == 2;
    mac.extend_from_slice(&(0x10u32 | if last { 0 } else { 0x20 }).to_le_bytes());
    mac.extend_from_slice(&(i / 3 + 7).to_le_bytes()); // A-MPDU ID
    mac.extend_from_slice(&[0, 0, 0, 0]);
    let len = 8 + 4 + common.len() + 4 + mac.len();
    let mut v = vec![0u8, 0];
    v.extend_from_slice(&(len as u16).to_le_bytes());
    v.extend_from_slice(&105u32.to_le_bytes());
    v.extend_from_slice(&2u16.to_le_bytes());
    v.extend_from_slice(&(common.len() as u16).to_le_bytes());
    v.extend_from_slice(&common);
    v.extend_from_slice(&3u16.to_le_bytes());
    v.extend_from_slice(&(mac.len() as u16).to_le_bytes());
    v.extend_from_slice(&mac);
    v.extend_from_slice(&dot11(i));
    v
}

fn avs(i: u32) -> Vec<u8> {
    let mut v = Vec::new();
    for x in [0x8021_1001u32, 64] {
        v.extend_from_slice(&x.to_be_bytes());
    }
    v.extend_from_slice(&tsft(i).to_be_bytes());
    v.extend_from_slice(&(tsft(i) * 1000).to_be_bytes()); // host time
                                                          // PHY type (OFDM 5 GHz), channel 36, 54 Mb/s (100 kb/s units), antenna, priority, SSI type
                                                          // dBm, signal, noise, preamble, encoding.
    for x in [8u32, 36, 540, 0, 0, 2, (-40i32) as u32, (-95i32) as u32, 0, 0] {
        v.extend_from_slice(&x.to_be_bytes());
    }
    v.extend_from_slice(&dot11(i));
    v
}

fn prism(i: u32) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&0x44u32.to_le_bytes());
    v.extend_from_slice(&144u32.to_le_bytes());
    let mut dev = [0u8; 16];
    dev[..5].copy_from_slice(b"wlan0");
    v.extend_from_slice(&dev);
    let values = [
        (tsft(i) * 1000) as u32, // host time
        tsft(i) as u32,          // MAC time
        36,                      // channel
        (-40i32) as u32,         // RSSI (dBm, as Wireshark reads it)
        0,                       // SQ
        60,                      // signal (raw)
        (-95i32) as u32,         // noise
        108,                     // rate, 500 kb/s
        0,                       // is TX
        dot11(i).len() as u32,   // frame length
    ];
    for (k, val) in values.iter().enumerate() {
        v.extend_from_slice(&(0x0001_0044u32 + 0x0001_0000 * k as u32).to_le_bytes());
        v.extend_from_slice(&0u16.to_le_bytes()); // status: present
        v.extend_from_slice(&4u16.to_le_bytes());
        v.extend_from_slice(&val.to_le_bytes());
    }
    v.extend_from_slice(&dot11(i));
    v
}

fn check(d: &Path, name: &str, link: u32, build: fn(u32) -> Vec<u8>) {
    let frames: Vec<Vec<u8>> = (0..9).map(build).collect();
    let pk: Vec<(u64, &[u8])> = frames
        .iter()
        .enumerate()
        .map(|(i, f)| (i as u64 * 10, &f[..]))
        .collect();
    let p = d.join(name);
    std::fs::write(&p, pcap_bytes(link, &pk)).unwrap();
    let theirs = tshark_fields(
        &p,
        &[
            "wlan_radio.timestamp",
            "wlan_radio.data_rate",
            "wlan_radio.frequency",
            "wlan_radio.signal_dbm",
            "udp.dstport",
        ],
    );
    assert_eq!(theirs.len(), 9, "{name}");
    let ours: Vec<_> = open_path(&p).unwrap().reader.map(|r| r.unwrap()).collect();
    assert_eq!(ours.len(), 9);
    for (i, (t, o)) in theirs.iter().zip(&ours).enumerate() {
        let rt = o.radio.expect("a radio header");
        let field = |v: Option<String>, k: usize, what: &str| {
            if !t[k].is_empty() {
                assert_eq!(v.as_deref(), Some(t[k].as_str()), "{name} packet {i}: {what}");
            }
        };
        field(rt.tsft.map(|v| v.to_string()), 0, "TSFT");
        field(rt.rate_500k.map(|v| format!("{}", v as f64 / 2.0)), 1, "rate");
        field(rt.channel_mhz.map(|v| v.to_string()), 2, "frequency");
        field(rt.signal_dbm.map(|v| v.to_string()), 3, "signal");
        assert!(!t[0].is_empty(), "{name}: tshark shows a timestamp");
        assert_eq!(t[4], "5001", "{name}: tshark decodes the UDP");
        assert_eq!(o.l3.map(|l| l.flow.dport), Some(5001), "{name} packet {i}: our UDP");
    }
    let o = aggrate(d, &["inspect", "--json", name]);
    assert!(o.status.success(), "{name}: {}", text(&o).1);
    let j: serde_json::Value = serde_json::from_str(text(&o).0.trim()).unwrap();
    assert_eq!(j["packets"], 9, "{name}: {j}");
    assert_eq!(j["frames"], 3, "{name}: three A-MPDUs by TSFT / A-MPDU ID: {j}");
}

#[test]
fn ppi_avs_and_prism_match_tshark_field_by_field() {
    let dir = tempfile::tempdir().unwrap();
    check(dir.path(), "ppi.pcap", 192, ppi);
    check(dir.path(), "avs.pcap", 163, avs);
    check(dir.path(), "prism.pcap", 119, prism);
}

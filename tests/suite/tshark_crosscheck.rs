//! Cross-check our capture parsing against tshark, packet by packet.

use crate::common;

use std::io::BufReader;
use std::path::Path;

use aggrate::capture::{open_capture, PacketRecord};
use common::{data, ns3_pcap, tshark_fields};

fn ours(path: &Path) -> Vec<PacketRecord> {
    let f = std::fs::File::open(path).unwrap();
    open_capture(BufReader::new(f)).unwrap().map(|r| r.unwrap()).collect()
}

fn num<T: std::str::FromStr>(s: &str) -> Option<T> {
    let s = s.split(',').next()?.trim();
    if s.is_empty() {
        return None;
    }
    if let Some(h) = s.strip_prefix("0x") {
        return u64::from_str_radix(h, 16).ok()?.to_string().parse().ok();
    }
    s.parse().ok()
}

const FIELDS: &[&str] = &[
    "frame.number",
    "frame.len",
    "radiotap.length",
    "radiotap.mactime",
    "radiotap.ampdu.reference",
    "radiotap.vht.mcs.0",
    "radiotap.vht.nss.0",
    "radiotap.vht.bw",
    "radiotap.mcs.index",
    "radiotap.he.data_3.data_mcs",
    "radiotap.he.data_6.nsts",
    "radiotap.dbm_antsignal",
    "radiotap.dbm_antnoise",
    "radiotap.channel.freq",
    "radiotap.flags.fcs",
    "wlan.seq",
    "radiotap.mcs.gi",
    "radiotap.vht.gi",
];

fn compare_radiotap_fixture(name: &str) {
    let path = data(name);
    let t = tshark_fields(&path, FIELDS);
    let o = ours(&path);
    assert_eq!(t.len(), 16, "{name}: tshark packets");
    assert_eq!(o.len(), t.len(), "{name}: packet count");
    for (row, r) in t.iter().zip(&o) {
        let n: u64 = num(&row[0]).unwrap();
        let ctx = format!("{name} packet {n}");
        assert_eq!(r.number, n, "{ctx}");
        assert_eq!(Some(r.len), num(&row[1]), "{ctx}: frame.len");
        let rt = r.radio.unwrap_or_else(|| panic!("{ctx}: no radiotap"));
        assert_eq!(Some(rt.len), num(&row[2]), "{ctx}: radiotap.length");
        assert_eq!(rt.tsft, num(&row[3]), "{ctx}: TSFT");
        assert_eq!(rt.ampdu.map(|a| a.reference), num(&row[4]), "{ctx}: A-MPDU reference");
        assert_eq!(rt.vht.map(|v| v.mcs), num(&row[5]), "{ctx}: VHT MCS");
        assert_eq!(rt.vht.map(|v| v.nss), num(&row[6]), "{ctx}: VHT NSS");
        // tshark prints the raw VHT bandwidth code; ours is MHz.
        let bw_code: Option<u8> = num(&row[7]);
        let expect_bw = bw_code.map(|c| match c {
            0 => 20,
            1..=3 => 40,
            4..=10 => 80,
            _ => 160,
        });
        assert_eq!(rt.vht.and_then(|v| v.bw_mhz), expect_bw, "{ctx}: VHT bandwidth");
        assert_eq!(rt.ht.and_then(|h| h.index), num(&row[8]), "{ctx}: HT MCS");
        assert_eq!(rt.he.and_then(|h| h.mcs), num(&row[9]), "{ctx}: HE MCS");
        assert_eq!(rt.he.map(|h| h.nsts), num(&row[10]), "{ctx}: HE NSTS");
        assert_eq!(rt.signal_dbm, num(&row[11]), "{ctx}: antenna signal");
        assert_eq!(rt.noise_dbm, num(&row[12]), "{ctx}: antenna noise");
        assert_eq!(rt.channel_mhz, num(&row[13]), "{ctx}: channel");
        assert_eq!(rt.has_fcs(), num::<u8>(&row[14]) == Some(1), "{ctx}: FCS flag");
        assert_eq!(
            r.dot11.and_then(|d| d.seq),
            num(&row[15]),
            "{ctx}: 802.11 sequence number"
        );
        let gi: Option<u8> = num(&row[16]).or(num(&row[17]));
        if let Some(gi) = gi {
            assert_eq!(rt.short_gi(), gi == 1, "{ctx}: guard interval");
        }
    }
}

#[test]
fn radiotap_pcap_fixture_matches_tshark() {
    compare_radiotap_fixture("radiotap_fields.pcap");
}

#[test]
fn radiotap_pcapng_fixture_matches_tshark() {
    compare_radiotap_fixture("radiotap_fields.pcapng");
}

#[test]
fn pcap_and_pcapng_fixtures_decode_alike() {
    let a = ours(&data("radiotap_fields.pcap"));
    let b = ours(&data("radiotap_fields.pcapng"));
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(
            (x.host, x.radio, x.dot11, x.l3, x.len),
            (y.host, y.radio, y.dot11, y.l3, y.len)
        );
    }
}

#[test]
fn ns3_sample_matches_tshark_on_every_packet() {
    let dir = tempfile::tempdir().unwrap();
    let p = ns3_pcap(dir.path());
    let t = tshark_fields(
        &p,
        &[
            "frame.len",
            "radiotap.mactime",
            "radiotap.ampdu.reference",
            "wlan.seq",
            "udp.dstport",
            "ip.len",
            "wlan.fc.retry",
        ],
    );
    let o = ours(&p);
    assert_eq!(t.len(), o.len());
    assert_eq!(o.len(), 70_582);
    for (i, (row, r)) in t.iter().zip(&o).enumerate() {
        let ctx = format!("packet {}", i + 1);
        assert_eq!(Some(r.len), num(&row[0]), "{ctx}");
        assert_eq!(r.radio.and_then(|x| x.tsft), num(&row[1]), "{ctx}: TSFT");
        assert_eq!(
            r.radio.and_then(|x| x.ampdu).map(|a| a.reference),
            num(&row[2]),
            "{ctx}: ref"
        );
        assert_eq!(r.dot11.and_then(|d| d.seq), num(&row[3]), "{ctx}: seq");
        assert_eq!(r.l3.map(|l| l.flow.dport), num(&row[4]), "{ctx}: udp port");
        assert_eq!(r.l3.map(|l| l.ip_len), num(&row[5]), "{ctx}: ip.len");
        assert_eq!(
            r.dot11.map(|d| d.retry()),
            num::<String>(&row[6]).map(|s| s == "1" || s == "True"),
            "{ctx}: retry"
        );
    }
}

//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `tests/data/<name>`.
pub fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name)
}

/// The ns-3 sample, decompressed into `dir`.
pub fn ns3_pcap(dir: &Path) -> PathBuf {
    let mut raw = Vec::new();
    let f = std::fs::File::open(data("ns3_vht_mcs9_2ss_300mbps.pcap.xz")).unwrap();
    xz2::read::XzDecoder::new(f).read_to_end(&mut raw).unwrap();
    let p = dir.join("ns3.pcap");
    std::fs::write(&p, raw).unwrap();
    p
}

/// Run the built `aggrate` binary in `dir`.
pub fn aggrate(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_aggrate"))
        .current_dir(dir)
        .args(args)
        .output()
        .expect("running aggrate")
}

/// stdout / stderr as text.
pub fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Run tshark with `-T fields`; one Vec of column strings per packet. (PPI A-MPDU reassembly is
/// off so that every subframe is decoded on its own, as aggrate reads it.)
pub fn tshark_fields(path: &Path, fields: &[&str]) -> Vec<Vec<String>> {
    let mut cmd = Command::new("tshark");
    cmd.args(["-o", "ppi.reassemble:FALSE"])
        .arg("-n")
        .arg("-r")
        .arg(path)
        .args(["-T", "fields", "-E", "separator=/t", "-E", "occurrence=a"]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = cmd
        .output()
        .expect("tshark is not installed: run scripts/test.sh, which installs it");
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| l.split('\t').map(str::to_string).collect())
        .collect()
}

/// Minimal classic-pcap writer for hand-built test captures (µs timestamps).
pub fn pcap_bytes(linktype: u32, packets: &[(u64, &[u8])]) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&0xa1b2c3d4u32.to_le_bytes());
    v.extend_from_slice(&2u16.to_le_bytes());
    v.extend_from_slice(&4u16.to_le_bytes());
    v.extend_from_slice(&0i32.to_le_bytes());
    v.extend_from_slice(&0u32.to_le_bytes());
    v.extend_from_slice(&65535u32.to_le_bytes());
    v.extend_from_slice(&linktype.to_le_bytes());
    for (ts_us, data) in packets {
        v.extend_from_slice(&((ts_us / 1_000_000) as u32).to_le_bytes());
        v.extend_from_slice(&((ts_us % 1_000_000) as u32).to_le_bytes());
        v.extend_from_slice(&(data.len() as u32).to_le_bytes());
        v.extend_from_slice(&(data.len() as u32).to_le_bytes());
        v.extend_from_slice(data);
    }
    v
}

/// A radiotap (TSFT, Flags, A-MPDU status) + 802.11 QoS data (FromDS) + LLC/SNAP + IPv4 + UDP
/// frame to port 5001 whose payload starts with `seq` (big-endian u32).
pub fn radiotap_udp(tsft: u64, ampdu_ref: Option<u32>, seq: u32, dot11_seq: u16, retry: bool) -> Vec<u8> {
    let mut rt = vec![0u8, 0, 0, 0];
    let present: u32 = 1 | 1 << 1 | if ampdu_ref.is_some() { 1 << 20 } else { 0 };
    rt.extend_from_slice(&present.to_le_bytes());
    rt.extend_from_slice(&tsft.to_le_bytes()); // offset 8, aligned
    rt.push(0); // flags
    if let Some(r) = ampdu_ref {
        while rt.len() % 4 != 0 {
            rt.push(0);
        }
        rt.extend_from_slice(&r.to_le_bytes());
        rt.extend_from_slice(&0u16.to_le_bytes());
        rt.extend_from_slice(&[0, 0]);
    }
    let l = rt.len() as u16;
    rt[2..4].copy_from_slice(&l.to_le_bytes());
    let mut f = rt;
    f.extend_from_slice(&[0x88, 0x02 | if retry { 0x08 } else { 0 }, 0, 0]);
    f.extend_from_slice(&[0, 0, 0, 0, 0, 2]); // addr1 = station
    f.extend_from_slice(&[0, 0, 0, 0, 0, 1]); // addr2 = AP
    f.extend_from_slice(&[0, 0, 0, 0, 0, 3]); // addr3 = SA
    f.extend_from_slice(&(dot11_seq << 4).to_le_bytes());
    f.extend_from_slice(&[0, 0]); // QoS
    f.extend_from_slice(&[0xaa, 0xaa, 3, 0, 0, 0, 0x08, 0x00]);
    let payload_len = 20usize;
    let total = 20 + 8 + payload_len;
    f.extend_from_slice(&[0x45, 0, (total >> 8) as u8, total as u8, 0, 0, 0x40, 0, 64, 17, 0, 0]);
    f.extend_from_slice(&[10, 1, 1, 1, 192, 168, 1, 2]);
    f.extend_from_slice(&49153u16.to_be_bytes());
    f.extend_from_slice(&5001u16.to_be_bytes());
    f.extend_from_slice(&((8 + payload_len) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(&seq.to_be_bytes());
    f.extend_from_slice(&[0u8; 16]);
    f
}

/// IPv4/UDP 10.0.0.1:7000 → 10.0.0.2:5001 with a 4-byte sequence number payload (+8 bytes).
pub fn ipv4_udp(seq: u32) -> Vec<u8> {
    let total = 20 + 8 + 12;
    let mut v = vec![
        0x45,
        0,
        0,
        total as u8,
        0,
        1,
        0x40,
        0,
        64,
        17,
        0,
        0,
        10,
        0,
        0,
        1,
        10,
        0,
        0,
        2,
    ];
    v.extend_from_slice(&udp_seq(seq));
    v
}

/// UDP 7000 → 5001 carrying `seq` (big endian) and 8 more bytes (20 bytes, checksum 0).
pub fn udp_seq(seq: u32) -> Vec<u8> {
    let mut v = Vec::with_capacity(20);
    v.extend_from_slice(&7000u16.to_be_bytes());
    v.extend_from_slice(&5001u16.to_be_bytes());
    v.extend_from_slice(&20u16.to_be_bytes());
    v.extend_from_slice(&[0, 0]);
    v.extend_from_slice(&seq.to_be_bytes());
    v.extend_from_slice(&[0xab; 8]);
    v
}

/// A free UDP port on loopback (bound and released: another process may take it first, which
/// a live test's bind would then report).
pub fn port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A room for the real-time tests of one file: tests of the same file may share it (as they did
/// when each file was a test binary of its own), tests of another file wait until it is empty.
/// So two files' replays and live loops never share the host's cores and clock.
pub struct Room(&'static str);

static ROOM: std::sync::Mutex<(Option<&'static str>, usize)> = std::sync::Mutex::new((None, 0));
static ROOM_FREED: std::sync::Condvar = std::sync::Condvar::new();

/// Enter `name`'s room (use `module_path!()`), waiting while another file's tests hold it.
pub fn room(name: &'static str) -> Room {
    let mut g = ROOM.lock().unwrap_or_else(|e| e.into_inner());
    while g.0.is_some_and(|n| n != name) {
        g = ROOM_FREED.wait(g).unwrap_or_else(|e| e.into_inner());
    }
    g.0 = Some(name);
    g.1 += 1;
    Room(name)
}

impl Drop for Room {
    fn drop(&mut self) {
        let mut g = ROOM.lock().unwrap_or_else(|e| e.into_inner());
        g.1 -= 1;
        if g.1 == 0 {
            g.0 = None;
            ROOM_FREED.notify_all();
        }
    }
}

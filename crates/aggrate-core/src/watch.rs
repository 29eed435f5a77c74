//! A watcher: the online estimator on whatever IP traffic an interface receives (`aggrate
//! watch`), not only aggrate's own datagrams — kernel TCP, a video stream, anything.
//!
//! In: each received packet from its IP header on (a cooked packet socket's view: no link
//! header) with the kernel's receive time (`CLOCK_REALTIME`, the stamp `recv`'s socket gets).
//! Out: one [`AggReport`] per report interval, on the same grid as `recv`'s reports and the AP's
//! truth (`ap --truth`), so `aggrate join` scores a watcher against the AP: the level the sender
//! would steer by (the airtime level when the PHY rate is known), the frame count, the receive
//! rate in IP bytes, and — for aggrate's own data packets only — one-way delay and losses from
//! their headers. Those headers are read **without the key** ([`peek_data`]): a forged packet
//! can make a watcher print anything, so nothing steers by what it reads.
//!
//! Merged packets: with GRO on, the kernel hands up one packet of up to 64 KB for a run of TCP
//! segments that arrived together. It counts here as ⌈IP length / MTU⌉ packets of at most the
//! MTU, at the one time it got: the packet rate and bytes stay right; the gaps inside the run are
//! gone, as they are for any receiver on that path.
//!
//! No IO and no clock: the caller reads the socket (`aggrate::transport::io::run_watcher`) and
//! passes times in.

use std::time::Duration;

use serde::Serialize;

use crate::model::ModelFile;
use crate::runtime::{AggReport, Error, LevelConfig, OnlineEstimator, RxPacket};
use crate::transport::wire::{peek_data, Data};
use crate::Ts;

/// What a watcher saw besides its reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct WatchStats {
    /// IP packets fed to the estimator (a merged packet counts as the packets it holds).
    pub packets: u64,
    /// Received packets longer than the MTU (merged by GRO), each split as the module says.
    pub merged: u64,
    /// Packets that were not IPv4 or IPv6, or too short for their header: skipped.
    pub not_ip: u64,
    /// Packets the kernel did not stamp: skipped (a made-up time would be a wrong gap).
    pub unstamped: u64,
    /// Packets the interface sent (a packet socket sees both directions): skipped.
    pub outgoing: u64,
    /// Of the packets, aggrate data packets (their send time and sequence number read).
    pub aggrate_data: u64,
    /// Packets the listening socket dropped (its buffer full: the watcher fell behind), as the
    /// caller reports them ([`Watcher::set_socket_drops`]). Reports then read a lower rate and
    /// level than the link's.
    pub socket_drops: u64,
}

/// An IP packet's length and, for an aggrate data packet over UDP, its unverified header.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct IpPacket {
    /// IP length (header included), from the IP header: what the air carried.
    pub len: u32,
    /// Sequence number and send time of an aggrate data packet (unverified).
    pub data: Option<Data>,
}

/// Parse the start of an IPv4 or IPv6 packet (`None`: neither, or cut short of its header).
/// IPv6 extension headers are not followed: a UDP payload is looked for only right after the
/// fixed header.
pub fn parse_ip(b: &[u8]) -> Option<IpPacket> {
    let (len, proto, payload) = match b.first()? >> 4 {
        4 => {
            let ihl = usize::from(b.first()? & 0x0f) * 4;
            if ihl < 20 || b.len() < ihl {
                return None;
            }
            (u32::from(u16::from_be_bytes([b[2], b[3]])), b[9], ihl)
        }
        6 => {
            if b.len() < 40 {
                return None;
            }
            (40 + u32::from(u16::from_be_bytes([b[4], b[5]])), b[6], 40)
        }
        _ => return None,
    };
    let data = if proto == 17 {
        b.get(payload + 8..).and_then(peek_data)
    } else {
        None
    };
    Some(IpPacket {
        len: len.max(b.len().min(u32::MAX as usize) as u32),
        data,
    })
}

/// The online estimator fed from an interface (see the module docs).
#[derive(Clone, Debug)]
pub struct Watcher {
    est: OnlineEstimator,
    mtu: u32,
    stats: WatchStats,
}

/// Smallest MTU a watcher accepts (IPv6's minimum link MTU).
pub const MIN_MTU: u32 = 1280;

impl Watcher {
    /// A watcher with `model`'s estimator, reports every `interval`, the link's PHY rate when
    /// known (b/s; without it the level is the frame count), merged packets split at `mtu`.
    pub fn new(model: &ModelFile, interval: Duration, phy_rate_bps: Option<u64>, mtu: u32) -> Result<Watcher, Error> {
        if !(MIN_MTU..=65_535).contains(&mtu) {
            return Err(Error::Mismatch {
                field: "mtu",
                what: format!("{mtu} bytes: {MIN_MTU}..=65535"),
            });
        }
        let mut est = OnlineEstimator::from_model(model, interval)?;
        // Lengths are IP lengths here (recv's are UDP payloads, 28 bytes short).
        est.set_level_config(LevelConfig {
            phy_rate_bps,
            ..LevelConfig::default()
        })?;
        Ok(Watcher {
            est,
            mtu,
            stats: WatchStats::default(),
        })
    }

    /// One packet the interface received at `kernel` (`None`: not stamped), from its IP header
    /// on; `outgoing`: the interface sent it.
    pub fn handle(&mut self, kernel: Option<Ts>, outgoing: bool, packet: &[u8]) {
        let s = &mut self.stats;
        if outgoing {
            s.outgoing += 1;
            return;
        }
        let Some(host) = kernel else {
            s.unstamped += 1;
            return;
        };
        let Some(ip) = parse_ip(packet) else {
            s.not_ip += 1;
            return;
        };
        if ip.data.is_some() {
            s.aggrate_data += 1;
        }
        let parts = ip.len.div_ceil(self.mtu).max(1);
        if parts > 1 {
            s.merged += 1;
        }
        let mut left = ip.len;
        for k in 0..parts {
            let len = left.min(self.mtu);
            left -= len;
            self.est.push(&RxPacket {
                host,
                // A merged run's header is its first segment's.
                seq: ip.data.filter(|_| k == 0).map(|d| d.seq),
                sent: ip.data.filter(|_| k == 0).map(|d| d.sent),
                len,
                ..RxPacket::default()
            });
        }
        s.packets += u64::from(parts);
    }

    /// The next finished report at `now` (see [`OnlineEstimator::poll_report`]).
    pub fn poll_report(&mut self, now: Ts) -> Option<AggReport> {
        self.est.poll_report(now)
    }

    /// The listening socket's drop count so far (kept as the largest seen).
    pub fn set_socket_drops(&mut self, n: u64) {
        self.stats.socket_drops = self.stats.socket_drops.max(n);
    }

    /// Counters so far.
    pub fn stats(&self) -> WatchStats {
        self.stats
    }

    /// The report interval.
    pub fn interval(&self) -> Duration {
        self.est.interval()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::wire::{emit_data, Psk, SessionKeys, NONCE_LEN};

    fn ipv4(total: u16, proto: u8, payload: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; 20];
        b[0] = 0x45;
        b[2..4].copy_from_slice(&total.to_be_bytes());
        b[9] = proto;
        b.extend_from_slice(payload);
        b
    }

    #[test]
    fn ip_lengths_and_aggrate_headers_are_read_without_a_key() {
        // A TCP segment: its IP length, no data header.
        let tcp = ipv4(1500, 6, &[0; 40]);
        assert_eq!(parse_ip(&tcp), Some(IpPacket { len: 1500, data: None }));
        // An aggrate data packet inside UDP: sequence number and send time come out.
        let psk = Psk::new(b"0123456789abcdef-test-key").unwrap();
        let keys = SessionKeys::derive(&psk, 7, 0, &[1; NONCE_LEN], &[2; NONCE_LEN]);
        let mut d = Vec::new();
        let want = Data {
            seq: 77,
            sent: Ts(1_000_000_123),
        };
        emit_data(&mut d, &keys, &want, 100);
        let mut udp = vec![0u8; 8];
        udp.extend_from_slice(&d);
        let p = ipv4((20 + udp.len()) as u16, 17, &udp);
        assert_eq!(parse_ip(&p).unwrap().data, Some(want));
        // The same bytes over TCP are not read as a header; other UDP neither.
        assert_eq!(parse_ip(&ipv4(200, 6, &udp)).unwrap().data, None);
        assert_eq!(parse_ip(&ipv4(200, 17, &[0; 60])).unwrap().data, None);
        // IPv6: 40 bytes of header plus its payload length.
        let mut v6 = vec![0u8; 40];
        v6[0] = 0x60;
        v6[4..6].copy_from_slice(&1000u16.to_be_bytes());
        v6[6] = 6;
        assert_eq!(parse_ip(&v6).unwrap().len, 1040);
        // Not IP, or cut inside the header.
        assert_eq!(parse_ip(&[]), None);
        assert_eq!(parse_ip(&[0x15; 30]), None);
        assert_eq!(parse_ip(&tcp[..19]), None);
        assert_eq!(parse_ip(&v6[..39]), None);
        // A header length below 20 bytes.
        let mut bad = tcp.clone();
        bad[0] = 0x44;
        assert_eq!(parse_ip(&bad), None);
    }

    #[test]
    fn bursts_become_reports_and_merged_packets_count_whole() {
        let model = ModelFile::shipped().unwrap();
        let mut w = Watcher::new(&model, Duration::from_millis(100), None, 1500).unwrap();
        let pkt = ipv4(1500, 6, &[0; 40]);
        // Bursts of 8 packets 12 µs apart every 400 µs, for 0.3 s.
        let mut reports = Vec::new();
        for i in 0..6_000u64 {
            let host = Ts::from_micros(1_000_000 + i / 8 * 400 + i % 8 * 12);
            w.handle(Some(host), false, &pkt);
            reports.extend(w.poll_report(host));
        }
        assert!(reports.len() >= 2, "{reports:?}");
        let r = &reports[1];
        assert!((r.mean_agg - 8.0).abs() < 0.5, "{r:?}");
        // In IP bytes: 8 × 1,500 B per 400 µs = 240 Mb/s.
        assert!((r.rx_rate_bps / 1e6 - 240.0).abs() < 5.0, "{r:?}");
        let before = w.stats();
        // A 64 KB GRO packet counts as 44 packets; sent, unstamped and non-IP packets not at all.
        w.handle(Some(Ts::from_millis(3_000)), false, &ipv4(65_000, 6, &[0; 40]));
        w.handle(Some(Ts::from_millis(3_000)), true, &pkt);
        w.handle(None, false, &pkt);
        w.handle(Some(Ts::from_millis(3_000)), false, &[0u8; 64]);
        let s = w.stats();
        assert_eq!(s.packets - before.packets, 44);
        assert_eq!((s.merged, s.outgoing, s.unstamped, s.not_ip), (1, 1, 1, 1));
        assert!(Watcher::new(&model, Duration::from_millis(100), None, 500).is_err());
    }
}

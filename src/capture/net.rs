//! Checked views of the layers above the link: LLC/SNAP, Ethernet, Linux SLL/SLL2, IPv4, IPv6,
//! UDP and TCP. Each function takes a byte slice and returns what it found or `None`; nothing
//! here panics on any input.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::le;

/// IP protocol number of UDP.
pub const PROTO_UDP: u8 = 17;
/// IP protocol number of TCP.
pub const PROTO_TCP: u8 = 6;

/// Bytes of transport payload kept per record.
pub const PAYLOAD_PREFIX: usize = 12;

/// A transport 5-tuple.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct FiveTuple {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// IP protocol (17 UDP, 6 TCP, others with zero ports).
    pub proto: u8,
    /// Source port (0 when not UDP/TCP).
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
}

impl std::fmt::Display for FiveTuple {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let p = match self.proto {
            PROTO_UDP => "udp".to_string(),
            PROTO_TCP => "tcp".to_string(),
            n => format!("proto {n}"),
        };
        let host = |a: &IpAddr, port: u16| match a {
            IpAddr::V4(a) => format!("{a}:{port}"),
            IpAddr::V6(a) => format!("[{a}]:{port}"),
        };
        write!(
            f,
            "{p} {} -> {}",
            host(&self.src, self.sport),
            host(&self.dst, self.dport)
        )
    }
}

/// What the network and transport layers hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct L3 {
    /// 5-tuple.
    pub flow: FiveTuple,
    /// IP total length (header + payload) from the IP header.
    pub ip_len: u32,
    /// Transport payload length from the headers (UDP length − 8, or IP length − headers).
    pub payload_len: u32,
    /// First bytes of the transport payload (as far as captured).
    pub payload: [u8; PAYLOAD_PREFIX],
    /// How many of `payload` were captured.
    pub payload_captured: u8,
    /// TCP sequence number (TCP only): the key that pairs a sniffer's record with a receiver's
    /// when the payload carries no sequence number of its own.
    pub tcp_seq: Option<u32>,
}

/// LLC/SNAP header (RFC 1042 or bridge tunnel) → EtherType and the rest.
pub fn llc_snap(b: &[u8]) -> Option<(u16, &[u8])> {
    let h = b.get(..8)?;
    if h[0] == 0xaa && h[1] == 0xaa && h[2] == 0x03 && h[3] == 0 && h[4] == 0 && (h[5] == 0 || h[5] == 0xf8) {
        Some((le::be16(h, 6)?, &b[8..]))
    } else {
        None
    }
}

/// Ethernet II (with up to two VLAN tags) → EtherType and the rest.
pub fn ethernet(b: &[u8]) -> Option<(u16, &[u8])> {
    let mut et = le::be16(b, 12)?;
    let mut off = 14;
    for _ in 0..2 {
        if et == 0x8100 || et == 0x88a8 {
            et = le::be16(b, off + 2)?;
            off += 4;
        }
    }
    Some((et, b.get(off..)?))
}

/// Linux cooked capture v1 (link type 113) → EtherType and the rest.
pub fn sll(b: &[u8]) -> Option<(u16, &[u8])> {
    Some((le::be16(b, 14)?, b.get(16..)?))
}

/// Linux cooked capture v2 (link type 276) → EtherType and the rest.
pub fn sll2(b: &[u8]) -> Option<(u16, &[u8])> {
    Some((le::be16(b, 0)?, b.get(20..)?))
}

/// Raw IP: EtherType from the version nibble.
pub fn raw_ip_ethertype(b: &[u8]) -> Option<u16> {
    match b.first()? >> 4 {
        4 => Some(0x0800),
        6 => Some(0x86dd),
        _ => None,
    }
}

/// Parse IPv4/IPv6 + UDP/TCP from an EtherType and its payload.
pub fn ip(ethertype: u16, b: &[u8]) -> Option<L3> {
    let (src, dst, proto, ip_len, l4, l4_len) = match ethertype {
        0x0800 => {
            let h = b.get(..20)?;
            if h[0] >> 4 != 4 {
                return None;
            }
            let ihl = (h[0] & 0x0f) as usize * 4;
            let total = le::be16(h, 2)? as usize;
            if ihl < 20 || total < ihl {
                return None;
            }
            let frag_off = le::be16(h, 6)? & 0x1fff;
            let src = Ipv4Addr::new(h[12], h[13], h[14], h[15]);
            let dst = Ipv4Addr::new(h[16], h[17], h[18], h[19]);
            let proto = if frag_off == 0 { h[9] } else { 0 };
            (
                IpAddr::V4(src),
                IpAddr::V4(dst),
                proto,
                total,
                b.get(ihl..).unwrap_or(&[]),
                total - ihl,
            )
        }
        0x86dd => {
            let h = b.get(..40)?;
            if h[0] >> 4 != 6 {
                return None;
            }
            let plen = le::be16(h, 4)? as usize;
            let mut next = h[6];
            let src: [u8; 16] = h[8..24].try_into().ok()?;
            let dst: [u8; 16] = h[24..40].try_into().ok()?;
            let mut off = 40;
            // Hop-by-hop, routing, destination options: skip by their length.
            for _ in 0..4 {
                if !matches!(next, 0 | 43 | 60) {
                    break;
                }
                let nh = *b.get(off)?;
                let len = (*b.get(off + 1)? as usize + 1) * 8;
                next = nh;
                off += len;
            }
            let l4_len = (plen + 40).saturating_sub(off);
            (
                IpAddr::V6(Ipv6Addr::from(src)),
                IpAddr::V6(Ipv6Addr::from(dst)),
                next,
                plen + 40,
                b.get(off..).unwrap_or(&[]),
                l4_len,
            )
        }
        _ => return None,
    };
    let tcp_seq = if proto == PROTO_TCP { le::be32(l4, 4) } else { None };
    let (sport, dport, payload, payload_len) = match proto {
        PROTO_UDP => {
            let sport = le::be16(l4, 0);
            let dport = le::be16(l4, 2);
            let ulen = le::be16(l4, 4).map(|l| (l as usize).saturating_sub(8));
            match (sport, dport) {
                (Some(s), Some(d)) => (
                    s,
                    d,
                    l4.get(8..).unwrap_or(&[]),
                    ulen.unwrap_or(l4_len.saturating_sub(8)),
                ),
                _ => (0, 0, &[][..], 0),
            }
        }
        PROTO_TCP => {
            let doff = l4.get(12).map(|b| (b >> 4) as usize * 4).unwrap_or(0);
            match (le::be16(l4, 0), le::be16(l4, 2)) {
                (Some(s), Some(d)) if doff >= 20 => (s, d, l4.get(doff..).unwrap_or(&[]), l4_len.saturating_sub(doff)),
                _ => (0, 0, &[][..], 0),
            }
        }
        _ => (0, 0, &[][..], 0),
    };
    let mut prefix = [0u8; PAYLOAD_PREFIX];
    // Never read past what the headers say the payload is (captures may carry padding or FCS).
    let n = payload.len().min(payload_len).min(PAYLOAD_PREFIX);
    prefix[..n].copy_from_slice(&payload[..n]);
    Some(L3 {
        flow: FiveTuple {
            src,
            dst,
            proto,
            sport,
            dport,
        },
        ip_len: ip_len as u32,
        payload_len: payload_len as u32,
        payload: prefix,
        payload_captured: n as u8,
        tcp_seq,
    })
}

impl L3 {
    /// Big-endian u32 at `offset` in the payload prefix, when captured.
    pub fn payload_be32(&self, offset: usize) -> Option<u32> {
        if offset + 4 > self.payload_captured as usize {
            return None;
        }
        le::be32(&self.payload, offset)
    }
    /// Big-endian u64 at `offset` in the payload prefix, when captured.
    pub fn payload_be64(&self, offset: usize) -> Option<u64> {
        let hi = self.payload_be32(offset)? as u64;
        let lo = self.payload_be32(offset + 4)? as u64;
        Some(hi << 32 | lo)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn udp4(payload: &[u8]) -> Vec<u8> {
        let total = 20 + 8 + payload.len();
        let mut v = vec![0x45, 0, (total >> 8) as u8, total as u8, 0, 0, 0x40, 0, 64, 17, 0, 0];
        v.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
        v.extend_from_slice(&[0x13, 0x89, 0x13, 0x8a]);
        let ulen = 8 + payload.len();
        v.extend_from_slice(&[(ulen >> 8) as u8, ulen as u8, 0, 0]);
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn udp_over_ipv4() {
        let mut p = udp4(&[0, 0, 0, 7, 1, 2, 3, 4, 5, 6, 7, 8, 9, 9]);
        p.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef]); // trailing FCS-like bytes
        let l3 = ip(0x0800, &p).unwrap();
        assert_eq!(l3.flow.proto, PROTO_UDP);
        assert_eq!((l3.flow.sport, l3.flow.dport), (5001, 5002));
        assert_eq!(l3.payload_len, 14);
        assert_eq!(l3.payload_captured, 12);
        assert_eq!(l3.payload_be32(0), Some(7));
        assert_eq!(l3.payload_be64(4), Some(0x0102030405060708));
        assert_eq!(l3.payload_be32(9), None);
        assert_eq!(l3.flow.to_string(), "udp 10.0.0.1:5001 -> 10.0.0.2:5002");
        // Truncated captures still give the tuple.
        let l3 = ip(0x0800, &p[..30]).unwrap();
        assert_eq!(l3.payload_captured, 2);
        assert!(ip(0x0800, &p[..10]).is_none());
    }

    #[test]
    fn snap_and_cooked() {
        let mut f = vec![0xaa, 0xaa, 3, 0, 0, 0, 0x08, 0x00];
        f.extend(udp4(&[1, 2, 3, 4]));
        let (et, rest) = llc_snap(&f).unwrap();
        assert_eq!(et, 0x0800);
        assert_eq!(ip(et, rest).unwrap().payload_be32(0), Some(0x01020304));
        assert!(llc_snap(&f[..5]).is_none());
        let mut s2 = vec![0x86, 0xdd];
        s2.extend_from_slice(&[0; 18]);
        assert_eq!(sll2(&s2).unwrap().0, 0x86dd);
        assert_eq!(raw_ip_ethertype(&[0x60]), Some(0x86dd));
    }
}

//! Flow selection: which packets of a capture belong to the flow under study.
//!
//! A [`FlowFilter`] matches by MAC (any of RA/TA/DA/SA), IP (source or destination), port
//! (source or destination) and IP protocol. With no filter, callers pick the largest UDP flow
//! ([`largest_udp_flow`]) from per-flow counts.

use std::collections::HashMap;
use std::net::IpAddr;

use super::{FiveTuple, Mac, PacketRecord};

/// Criteria a packet must all meet. Empty = everything with an IP 5-tuple.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowFilter {
    /// 802.11 address (receiver, transmitter, source or destination).
    pub mac: Option<Mac>,
    /// IP address (source or destination).
    pub ip: Option<IpAddr>,
    /// Port (source or destination).
    pub port: Option<u16>,
    /// IP protocol number.
    pub proto: Option<u8>,
    /// An exact 5-tuple (set when a flow was picked automatically).
    pub flow: Option<FiveTuple>,
}

impl FlowFilter {
    /// No criteria set.
    pub fn is_empty(&self) -> bool {
        *self == FlowFilter::default()
    }

    /// Whether `r` meets every criterion. Packets without an IP 5-tuple never match.
    pub fn matches(&self, r: &PacketRecord) -> bool {
        let Some(f) = r.flow() else { return false };
        if let Some(m) = self.mac {
            let Some(d) = r.dot11 else { return false };
            let hit = d.addr1 == m || d.ta() == Some(m) || d.da() == Some(m) || d.sa() == Some(m);
            if !hit {
                return false;
            }
        }
        if self.ip.is_some_and(|ip| f.src != ip && f.dst != ip) {
            return false;
        }
        if self.port.is_some_and(|p| f.sport != p && f.dport != p) {
            return false;
        }
        if self.proto.is_some_and(|p| f.proto != p) {
            return false;
        }
        if self.flow.is_some_and(|x| x != f) {
            return false;
        }
        // A TCP flow's packets are its data segments: a bare ACK carries nothing to estimate.
        if f.proto == super::net::PROTO_TCP && r.l3.is_some_and(|l| l.payload_len == 0) {
            return false;
        }
        true
    }
}

/// Packet and byte counts per 5-tuple.
///
/// Consecutive packets of one flow are summed in a one-entry cache before touching the map:
/// hashing every packet cost a quarter of `inspect`'s time.
#[derive(Clone, Debug, Default)]
pub struct FlowCounts {
    flows: HashMap<FiveTuple, (u64, u64)>,
    last: Option<(FiveTuple, u64, u64)>,
    /// Packets of flows first seen after [`MAX_COUNTED_FLOWS`] were counted (not in any flow).
    pub over_cap_packets: u64,
}

/// Distinct 5-tuples counted at most (≈ 100 B each: 6.5 MB).
pub const MAX_COUNTED_FLOWS: usize = 1 << 16;

impl FlowCounts {
    /// Count one packet.
    pub fn push(&mut self, r: &PacketRecord) {
        let Some(l3) = r.l3 else { return };
        match &mut self.last {
            Some((f, p, b)) if *f == l3.flow => {
                *p += 1;
                *b += l3.ip_len as u64;
            }
            last => {
                if let Some((f, p, b)) = last.replace((l3.flow, 1, l3.ip_len as u64)) {
                    if self.flows.len() >= MAX_COUNTED_FLOWS && !self.flows.contains_key(&f) {
                        self.over_cap_packets += p;
                    } else {
                        let e = self.flows.entry(f).or_default();
                        e.0 += p;
                        e.1 += b;
                    }
                }
            }
        }
    }
    /// (packets, IP bytes) of every flow.
    pub fn flows(&self) -> HashMap<FiveTuple, (u64, u64)> {
        let mut m = self.flows.clone();
        if let Some((f, p, b)) = self.last {
            let e = m.entry(f).or_default();
            e.0 += p;
            e.1 += b;
        }
        m
    }
    /// Flows sorted by packets, largest first (ties broken by the tuple, so the order is stable).
    pub fn sorted(&self) -> Vec<(FiveTuple, u64, u64)> {
        let mut v: Vec<_> = self.flows().into_iter().map(|(k, (p, b))| (k, p, b)).collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        v
    }
}

/// The UDP flow with the most packets among those `filter` matches.
pub fn largest_udp_flow(counts: &FlowCounts, filter: &FlowFilter) -> Option<FiveTuple> {
    largest_flow_of(counts, filter, super::net::PROTO_UDP)
}

/// The largest flow of protocol `proto` that agrees with the filter's address and port.
pub fn largest_flow_of(counts: &FlowCounts, filter: &FlowFilter, proto: u8) -> Option<FiveTuple> {
    counts
        .sorted()
        .into_iter()
        .find(|(f, _, _)| {
            f.proto == proto
                && filter.ip.is_none_or(|ip| f.src == ip || f.dst == ip)
                && filter.port.is_none_or(|p| f.sport == p || f.dport == p)
        })
        .map(|(f, _, _)| f)
}

/// The flow to estimate on when none is named: the largest UDP flow, else the largest TCP flow
/// (a download), with the words that say which.
pub fn pick_flow(counts: &FlowCounts, filter: &FlowFilter) -> Option<(FiveTuple, &'static str)> {
    largest_udp_flow(counts, filter)
        .map(|f| (f, "largest UDP flow"))
        .or_else(|| {
            largest_flow_of(counts, filter, super::net::PROTO_TCP).map(|f| (f, "largest TCP flow (no UDP flow)"))
        })
}

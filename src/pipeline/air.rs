//! The air others took, from what a sniffer on the channel recorded.
//!
//! A capture made in monitor mode holds every frame the radio decoded, the other networks' too.
//! Every data or management frame none of whose first two addresses is the flow's station is
//! someone else's (another network's, or the flow's AP's other stations', its beacons: air the
//! flow does not get); its PPDU took the air for the time its
//! radiotap rate gives its length, and the response it solicits (SIFS and an Ack, or a Block Ack
//! after an A-MPDU) for a little more. Control frames are not counted: their air is the response
//! already counted with the frame that solicited it. That is what a channel survey counts as
//! busy time less this station's own exchanges ([`crate::wlan::WlanSim::busy_ns`] counts the same
//! medium time in the emulator), and what `aggrate eval` gives the estimator as a survey, to
//! score it with and without one.
//!
//! What a sniffer cannot see it cannot count: collisions and frames it failed to decode (a real
//! survey counts those as busy), an RTS/CTS exchange's protection (counted only when the RTS and
//! CTS themselves are in the capture — they are control frames, so not at all here), and
//! frames of stations too far from the sniffer to decode.

use crate::capture::dot11::{FrameType, Mac};
use crate::capture::PacketRecord;
use crate::time::Ts;
use crate::wlan::timing::{self, PhyMode, SIFS};

/// One frame of someone else's, as read.
#[derive(Clone, Copy, Debug)]
struct Sniffed {
    /// Record time (the sniffer's receive time: the end of the PPDU).
    at: Ts,
    addr1: Mac,
    addr2: Option<Mac>,
    /// A-MPDU reference (subframes of one A-MPDU share it).
    ampdu: Option<u32>,
    /// MPDU length with FCS (bytes).
    mpdu: u32,
    /// Its PHY format when radiotap gives HT or VHT; else its rate.
    mode: Option<PhyMode>,
    rate_bps: Option<u64>,
}

/// Others' frames of one capture, gathered while its records are read ([`OthersAir::push`] for
/// records outside the flow, [`OthersAir::flow_frame`] for the flow's), then turned into busy
/// spans on the flow's receive clock ([`OthersAir::spans`]).
#[derive(Debug, Default)]
pub struct OthersAir {
    sniffed: Vec<Sniffed>,
    /// The flow's station and AP (addresses 1 and 2 of its first frame).
    flow: Option<(Mac, Option<Mac>)>,
    /// Receive time minus record time of the flow's first frame (a kernel log joined to a
    /// sniffer's capture: the two clocks' offset; 0 when the record times are the receive times).
    offset_ns: Option<i128>,
}

/// Medium time others took, on the flow's receive clock: sorted by start, not overlapping.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BusySpans(Vec<(u64, u64)>);

impl OthersAir {
    /// A record that is not the flow's: kept when it is a data or management frame with a
    /// radiotap header (whose addresses are checked against the flow's at the end).
    pub fn push(&mut self, r: &PacketRecord) {
        let (Some(radio), Some(d)) = (r.radio.as_ref(), r.dot11.as_ref()) else {
            return;
        };
        if !matches!(d.ftype, FrameType::Data | FrameType::Mgmt) || radio.bad_fcs() {
            return;
        }
        let fcs = if radio.has_fcs() { 0 } else { 4 };
        let mpdu = r.len.saturating_sub(radio.len as u32) + fcs;
        let mode = if let Some(v) = radio.vht {
            crate::phy::Bandwidth::from_mhz(v.bw_mhz.unwrap_or(20) as u32).map(|bw| PhyMode {
                vht: true,
                mcs: v.mcs,
                nss: v.nss.max(1),
                bw,
                short_gi: v.short_gi.unwrap_or(false),
            })
        } else if let Some(h) = radio.ht.filter(|_| radio.he.is_none()) {
            let idx = h.index.unwrap_or(0);
            crate::phy::Bandwidth::from_mhz(h.bw_mhz.unwrap_or(20) as u32).map(|bw| PhyMode {
                vht: false,
                mcs: idx % 8,
                nss: idx / 8 + 1,
                bw,
                short_gi: h.short_gi.unwrap_or(false),
            })
        } else {
            None
        };
        // Kept without a rate too (counted, never guessed: [`OthersAir::without_rate`]).
        let rate_bps = radio.phy_rate_bps();
        self.sniffed.push(Sniffed {
            at: r.host,
            addr1: d.addr1,
            addr2: d.addr2,
            ampdu: radio.ampdu.map(|a| a.reference),
            mpdu,
            mode,
            rate_bps,
        });
    }

    /// A frame of the flow, received at `host` (its joined kernel time, or its record time).
    pub fn flow_frame(&mut self, r: &PacketRecord, host: Option<Ts>) {
        if self.flow.is_none() {
            self.flow = r.dot11.map(|d| (d.addr1, d.addr2));
        }
        if self.offset_ns.is_none() {
            if let Some(h) = host {
                self.offset_ns = Some(h.as_nanos() as i128 - r.host.as_nanos() as i128);
            }
        }
    }

    /// Frames of others the sniffer heard without a rate it could give (no radiotap rate, HT or
    /// VHT field, e.g. HE with fields it leaves out): not in [`OthersAir::spans`].
    pub fn without_rate(&self) -> u64 {
        self.sniffed
            .iter()
            .filter(|f| f.mode.is_none() && f.rate_bps.is_none() && !self.is_ours(f))
            .count() as u64
    }

    /// Whether a frame involves the flow's station.
    fn is_ours(&self, f: &Sniffed) -> bool {
        self.flow.is_some_and(|(sta, _)| f.addr1 == sta || f.addr2 == Some(sta))
    }

    /// Whether any frame of someone else's was heard.
    pub fn is_empty(&self) -> bool {
        self.sniffed.is_empty()
    }

    /// The busy spans of the frames that do not involve the flow's station, one per PPDU
    /// (consecutive subframes of one transmitter with one A-MPDU reference), on the flow's
    /// receive clock, merged where they overlap. Frames between the flow's AP and its other
    /// stations count as others' (an uplink in the same network, the AP's beacons or its
    /// downlink to someone else: medium time the flow does not get).
    pub fn spans(&self) -> BusySpans {
        let off = self.offset_ns.unwrap_or(0);
        let mut out: Vec<(u64, u64)> = Vec::new();
        let mut ppdu: Option<(Sniffed, u32, u32)> = None; // first frame, subframes, PSDU bytes
        let close = |p: Option<(Sniffed, u32, u32)>, out: &mut Vec<(u64, u64)>| {
            let Some((f, n, psdu)) = p else { return };
            let on_air = match f.mode {
                Some(m) => m.ppdu_duration(psdu as usize),
                // HE or legacy: a 20 µs preamble and the bits at the rate.
                None => {
                    let bps = f.rate_bps.unwrap_or(6_000_000).max(1_000_000);
                    std::time::Duration::from_nanos(20_000 + (8 * psdu as u64 * 1_000_000_000).div_ceil(bps))
                }
            };
            let after = SIFS + if n > 1 { timing::block_ack() } else { timing::ack() };
            let end = (f.at.as_nanos() as i128 + off).max(0) as u64;
            let start = end.saturating_sub(on_air.as_nanos() as u64);
            out.push((start, end + after.as_nanos() as u64));
        };
        for f in &self.sniffed {
            if self.is_ours(f) || (f.mode.is_none() && f.rate_bps.is_none()) {
                continue;
            }
            let sub = (timing::DELIMITER as u32 + f.mpdu).next_multiple_of(4);
            match &mut ppdu {
                Some((g, n, psdu)) if f.ampdu.is_some() && g.ampdu == f.ampdu && g.addr2 == f.addr2 => {
                    *n += 1;
                    *psdu += sub;
                }
                _ => {
                    close(ppdu.take(), &mut out);
                    ppdu = Some((*f, 1, if f.ampdu.is_some() { sub } else { f.mpdu }));
                }
            }
        }
        close(ppdu, &mut out);
        out.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(out.len());
        for (s, e) in out {
            match merged.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        BusySpans(merged)
    }
}

impl BusySpans {
    /// The share of `[start, end)` the spans cover (0 for an empty interval).
    pub fn share(&self, start: Ts, end: Ts) -> f64 {
        let (s, e) = (start.as_nanos(), end.as_nanos());
        if e <= s {
            return 0.0;
        }
        let first = self.0.partition_point(|&(_, b)| b <= s);
        let covered: u64 = self.0[first..]
            .iter()
            .take_while(|&&(a, _)| a < e)
            .map(|&(a, b)| b.min(e) - a.max(s))
            .sum();
        covered as f64 / (e - s) as f64
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Total medium time (ns).
    pub fn total_ns(&self) -> u64 {
        self.0.iter().map(|&(a, b)| b - a).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_count_each_overlap_once_and_only_inside_the_interval() {
        let b = BusySpans(vec![(100, 200), (300, 500), (900, 1000)]);
        assert_eq!(b.share(Ts(0), Ts(1000)), 0.4);
        assert_eq!(b.share(Ts(150), Ts(350)), 0.5);
        assert_eq!(b.share(Ts(500), Ts(900)), 0.0);
        assert_eq!(b.share(Ts(10), Ts(10)), 0.0);
        assert_eq!(b.total_ns(), 400);
    }

    fn data_frame(a1: Mac, a2: Mac) -> crate::capture::dot11::Dot11 {
        let mut b = vec![0x08, 0x01, 0, 0];
        b.extend_from_slice(&a1);
        b.extend_from_slice(&a2);
        b.extend_from_slice(&a1);
        b.extend_from_slice(&[0, 0]);
        crate::capture::dot11::Dot11::parse(&b).unwrap()
    }

    fn record(us: u64, d: crate::capture::dot11::Dot11, rate_500k: Option<u8>) -> PacketRecord {
        let mut r = PacketRecord::empty();
        r.host = Ts(us * 1000);
        r.len = 8 + 1000;
        r.radio = Some(crate::capture::radiotap::Radiotap {
            len: 8,
            rate_500k,
            ..Default::default()
        });
        r.dot11 = Some(d);
        r
    }

    /// Another station of the flow's network sending to its AP is others' air; the flow's own
    /// station's frames are not; a frame without any rate is counted apart, never guessed.
    #[test]
    fn the_aps_other_stations_are_others_the_flows_station_is_not_and_no_rate_is_counted() {
        let (sta, ap, other) = ([2, 0, 0, 0, 1, 1], [2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 4, 1]);
        let mut air = OthersAir::default();
        air.flow_frame(&record(0, data_frame(sta, ap), Some(12)), None);
        air.push(&record(5_000, data_frame(ap, other), Some(12))); // an uplink in the same network
        air.push(&record(9_000, data_frame(ap, sta), Some(12))); // the flow's station's own uplink
        air.push(&record(12_000, data_frame(ap, other), None)); // heard, but at no rate it says
        air.push(&record(13_000, data_frame(ap, sta), None)); // the flow's station's, no rate: not others'
        assert_eq!(air.without_rate(), 1);
        // One PPDU of 1,004 bytes (FCS added) at 6 Mb/s after a 20 µs preamble, then SIFS + Ack.
        let on_air = 20_000 + (8 * 1004 * 1_000_000_000u64).div_ceil(6_000_000);
        let after = (SIFS + timing::ack()).as_nanos() as u64;
        let spans = air.spans();
        assert_eq!(spans.total_ns(), on_air + after);
        assert!(spans.share(Ts(0), Ts(4_000_000)) > 0.0 && spans.share(Ts(5_000_000), Ts(6_000_000)) > 0.0);
    }
}

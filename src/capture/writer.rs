//! Writing radiotap captures: frame bytes for one MPDU as a monitor-mode client records it, and
//! pcap / pcapng containers (link type 127, nanosecond timestamps).
//!
//! The containers are written directly rather than through pcap-file's writers: a packet here is
//! one template copy with a few patched fields, and pcap-file's pcapng writer builds an owned
//! block (with an options vector) per packet, which costs more than everything else per packet.
//! Everything written is read back by pcap-file in the tests and checked by tshark.

use std::io::Write;

use crate::capture::dot11::Mac;
use crate::time::Ts;

/// One MPDU to render as radiotap + 802.11 QoS data + LLC/SNAP + IPv4 + UDP.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FrameSpec {
    /// Radio TSFT (µs), equal for all MPDUs of an A-MPDU.
    pub tsft_us: u64,
    /// A-MPDU reference number.
    pub ampdu_ref: u32,
    /// Last subframe of its A-MPDU.
    pub last: bool,
    /// VHT (true) or HT (false) fields.
    pub vht: bool,
    /// MCS index (VHT 0–9, HT 0–31).
    pub mcs: u8,
    /// Streams.
    pub nss: u8,
    /// Bandwidth in MHz.
    pub bw_mhz: u16,
    /// Short GI.
    pub short_gi: bool,
    /// Channel frequency (MHz).
    pub channel_mhz: u16,
    /// Receiver (station) MAC.
    pub sta: Mac,
    /// Transmitter (AP) MAC.
    pub bssid: Mac,
    /// 802.11 sequence number (12 bits).
    pub dot11_seq: u16,
    /// 802.11 retry flag.
    pub retry: bool,
    /// IP source / destination.
    pub ip_src: [u8; 4],
    /// IP destination.
    pub ip_dst: [u8; 4],
    /// UDP ports.
    pub sport: u16,
    /// UDP destination port.
    pub dport: u16,
    /// IP total length (≥ 40).
    pub ip_len: u16,
    /// Application sequence number (payload bytes 0–3, big-endian).
    pub seq: u32,
    /// Send time in ns (payload bytes 4–11, big-endian).
    pub sent_ns: u64,
}

/// Radiotap header length we write: TSFT, Flags, Channel, A-MPDU status, VHT or MCS.
const RT_LEN_VHT: usize = 44;
const RT_LEN_HT: usize = 36;

/// Bytes of the full frame (radiotap + MPDU without FCS).
pub fn frame_len(spec: &FrameSpec) -> usize {
    (if spec.vht { RT_LEN_VHT } else { RT_LEN_HT }) + 26 + 8 + spec.ip_len as usize
}

/// Render the first `max` bytes of the frame into `buf` (cleared first); returns the full
/// (original) frame length. Payload bytes past the 12-byte header are zero.
pub fn build_frame(spec: &FrameSpec, max: usize, buf: &mut Vec<u8>) -> usize {
    buf.clear();
    headers(spec, false, buf);
    buf.extend_from_slice(&LLC_SNAP_IPV4);
    ip_udp(
        spec,
        &Msdu {
            ip_len: spec.ip_len,
            seq: spec.seq,
            sent_ns: spec.sent_ns,
        },
        buf,
    );
    let full = frame_len(spec);
    let want = full.min(max);
    if buf.len() > want {
        buf.truncate(want);
    } else {
        buf.resize(want, 0);
    }
    full
}

/// One IP packet of an A-MSDU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Msdu {
    /// IP total length (≥ 40).
    pub ip_len: u16,
    /// Application sequence number.
    pub seq: u32,
    /// Send time in ns.
    pub sent_ns: u64,
}

/// Render an MPDU carrying `msdus` as an A-MSDU (QoS control bit 7; each subframe destination,
/// source, length, LLC/SNAP and the whole IP packet, padded to 4 bytes but the last): radio
/// and MAC fields from `spec`, whose own packet fields are not used. Returns the full frame
/// length; `buf` holds its first `max` bytes (whole packets are written, so a reader can split
/// the subframes only up to the snap length).
pub fn build_amsdu_frame(spec: &FrameSpec, msdus: &[Msdu], max: usize, buf: &mut Vec<u8>) -> usize {
    buf.clear();
    headers(spec, true, buf);
    let body = buf.len();
    for (k, m) in msdus.iter().enumerate() {
        if k > 0 {
            buf.resize(body + (buf.len() - body).next_multiple_of(4), 0);
        }
        buf.extend_from_slice(&spec.sta);
        buf.extend_from_slice(&spec.bssid);
        let len = m.ip_len.max(40);
        buf.extend_from_slice(&(LLC_SNAP_IPV4.len() as u16 + len).to_be_bytes());
        buf.extend_from_slice(&LLC_SNAP_IPV4);
        let ip = buf.len();
        ip_udp(spec, m, buf);
        buf.resize(ip + len as usize, 0);
    }
    let full = buf.len();
    buf.truncate(max);
    full
}

const LLC_SNAP_IPV4: [u8; 8] = [0xaa, 0xaa, 3, 0, 0, 0, 0x08, 0x00];

/// Radiotap and the 802.11 QoS data header (FromDS), with the A-MSDU bit if asked.
fn headers(spec: &FrameSpec, amsdu: bool, buf: &mut Vec<u8>) {
    radiotap(spec, buf);
    // 802.11 QoS data, FromDS.
    buf.extend_from_slice(&[0x88, 0x02 | if spec.retry { 0x08 } else { 0 }, 0, 0]);
    buf.extend_from_slice(&spec.sta);
    buf.extend_from_slice(&spec.bssid);
    buf.extend_from_slice(&spec.bssid);
    buf.extend_from_slice(&((spec.dot11_seq & 0x0fff) << 4).to_le_bytes());
    buf.extend_from_slice(&[if amsdu { 0x80 } else { 0 }, 0]);
}

/// The radiotap header of `spec`'s PPDU.
fn radiotap(spec: &FrameSpec, buf: &mut Vec<u8>) {
    // Radiotap: present = TSFT | Flags | Channel | A-MPDU | VHT (or MCS).
    let rt_len = if spec.vht { RT_LEN_VHT } else { RT_LEN_HT };
    let present: u32 = 1 | 1 << 1 | 1 << 3 | 1 << 20 | if spec.vht { 1 << 21 } else { 1 << 19 };
    buf.extend_from_slice(&[0, 0]);
    buf.extend_from_slice(&(rt_len as u16).to_le_bytes());
    buf.extend_from_slice(&present.to_le_bytes());
    buf.extend_from_slice(&spec.tsft_us.to_le_bytes()); // 8..16
    buf.push(if spec.short_gi { 0x80 } else { 0 }); // 16 flags
    buf.push(0); // pad to 18
    buf.extend_from_slice(&spec.channel_mhz.to_le_bytes()); // 18 channel
    buf.extend_from_slice(&0x0140u16.to_le_bytes()); // 5 GHz OFDM
    if !spec.vht {
        // MCS (19) at 22: known = bw | mcs | gi
        let fl = (if spec.bw_mhz == 40 { 1 } else { 0 }) | if spec.short_gi { 0x04 } else { 0 };
        buf.extend_from_slice(&[0x07, fl, spec.mcs]);
        buf.push(0); // pad to 26... A-MPDU aligns to 4 → 28
        buf.extend_from_slice(&[0, 0]);
    } else {
        buf.extend_from_slice(&[0, 0]); // pad to 24
    }
    buf.extend_from_slice(&spec.ampdu_ref.to_le_bytes());
    let aflags: u16 = 0x0004 | if spec.last { 0x0008 } else { 0 };
    buf.extend_from_slice(&aflags.to_le_bytes());
    buf.extend_from_slice(&[0, 0]);
    if spec.vht {
        // VHT (21) at 32: known = GI | bandwidth; flags; bw code; mcs_nss[4]; coding; gid; aid
        buf.extend_from_slice(&0x0044u16.to_le_bytes());
        buf.push(if spec.short_gi { 0x04 } else { 0 });
        buf.push(match spec.bw_mhz {
            40 => 1,
            80 => 4,
            160 => 11,
            _ => 0,
        });
        buf.extend_from_slice(&[spec.mcs << 4 | (spec.nss & 0x0f), 0, 0, 0, 0, 0, 0, 0]);
    }
    debug_assert_eq!(buf.len(), rt_len);
}

/// Render the first `max` bytes of another network's data frame as a sniffer on the channel
/// records it (into `buf`, cleared first): radiotap from `spec`, a protected QoS data header —
/// FromDS from the AP `spec.bssid` to its station `spec.sta`, or with `to_ds` from the station
/// to its AP — then a body as long as an unencrypted frame's (LLC/SNAP and a packet of
/// `spec.ip_len`) holding the CCMP header, ciphertext the sniffer cannot read (zeros) and the
/// MIC: the frame is exactly as long as the one the emulator put on the air. `spec`'s IP and
/// UDP fields are unused. Returns the full frame length ([`frame_len`]).
pub fn build_protected_frame(spec: &FrameSpec, to_ds: bool, max: usize, buf: &mut Vec<u8>) -> usize {
    buf.clear();
    radiotap(spec, buf);
    let ds = if to_ds { 0x01 } else { 0x02 };
    buf.extend_from_slice(&[0x88, ds | 0x40 | if spec.retry { 0x08 } else { 0 }, 0, 0]);
    let (a1, a2, a3) = if to_ds {
        (spec.bssid, spec.sta, spec.bssid)
    } else {
        (spec.sta, spec.bssid, spec.bssid)
    };
    buf.extend_from_slice(&a1);
    buf.extend_from_slice(&a2);
    buf.extend_from_slice(&a3);
    buf.extend_from_slice(&((spec.dot11_seq & 0x0fff) << 4).to_le_bytes());
    buf.extend_from_slice(&[0, 0]);
    // CCMP header: PN0 PN1, reserved, key 0 with ExtIV, PN2–PN5.
    let pn = spec.dot11_seq as u64 + 1;
    buf.extend_from_slice(&[pn as u8, (pn >> 8) as u8, 0, 0x20, 0, 0, 0, 0]);
    let full = frame_len(spec);
    buf.resize(full.min(max), 0);
    full
}

/// IPv4 (with a correct header checksum) + UDP header + the 12 payload bytes that carry the
/// sequence number and send time; the caller pads the rest of the packet.
fn ip_udp(spec: &FrameSpec, m: &Msdu, buf: &mut Vec<u8>) {
    let ip_start = buf.len();
    let len = m.ip_len.max(40);
    buf.extend_from_slice(&[0x45, 0, (len >> 8) as u8, len as u8, 0, 0, 0x40, 0, 64, 17, 0, 0]);
    buf.extend_from_slice(&spec.ip_src);
    buf.extend_from_slice(&spec.ip_dst);
    let mut sum = 0u32;
    for c in buf[ip_start..ip_start + 20].chunks(2) {
        sum += u16::from_be_bytes([c[0], c[1]]) as u32;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    let ck = !(sum as u16);
    buf[ip_start + 10..ip_start + 12].copy_from_slice(&ck.to_be_bytes());
    buf.extend_from_slice(&spec.sport.to_be_bytes());
    buf.extend_from_slice(&spec.dport.to_be_bytes());
    buf.extend_from_slice(&(len - 20).to_be_bytes());
    buf.extend_from_slice(&[0, 0]); // UDP checksum: none
    buf.extend_from_slice(&m.seq.to_be_bytes());
    buf.extend_from_slice(&m.sent_ns.to_be_bytes());
}

/// Container format to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OutFormat {
    /// libpcap with nanosecond timestamps.
    Pcap,
    /// pcapng, one interface, nanosecond timestamps.
    Pcapng,
}

/// Streaming capture writer for link type 127.
pub struct CaptureWriter<W: Write> {
    w: W,
    format: OutFormat,
    snaplen: u32,
}

impl<W: Write> CaptureWriter<W> {
    /// Write the file header.
    pub fn new(w: W, format: OutFormat, snaplen: u32) -> std::io::Result<Self> {
        CaptureWriter::with_comment(w, format, snaplen, None)
    }

    /// Write the file header; pcapng files carry `comment` in their section header (the
    /// receive path and settings of an emulated run, as JSON). pcap has no place for it.
    pub fn with_comment(mut w: W, format: OutFormat, snaplen: u32, comment: Option<&str>) -> std::io::Result<Self> {
        match format {
            OutFormat::Pcap => {
                w.write_all(&0xa1b23c4du32.to_le_bytes())?; // ns resolution
                w.write_all(&2u16.to_le_bytes())?;
                w.write_all(&4u16.to_le_bytes())?;
                w.write_all(&[0; 8])?;
                w.write_all(&snaplen.to_le_bytes())?;
                w.write_all(&127u32.to_le_bytes())?;
            }
            OutFormat::Pcapng => {
                // SHB, with opt_comment (1) when there is a comment.
                let text = comment.unwrap_or("").as_bytes();
                let text = &text[..text.len().min(60_000)];
                let opts = if text.is_empty() {
                    0
                } else {
                    4 + text.len().div_ceil(4) * 4 + 4
                };
                let shb_len = (28 + opts) as u32;
                w.write_all(&0x0a0d0d0au32.to_le_bytes())?;
                w.write_all(&shb_len.to_le_bytes())?;
                w.write_all(&0x1a2b3c4du32.to_le_bytes())?;
                w.write_all(&1u16.to_le_bytes())?;
                w.write_all(&0u16.to_le_bytes())?;
                w.write_all(&(-1i64).to_le_bytes())?;
                if !text.is_empty() {
                    w.write_all(&1u16.to_le_bytes())?;
                    w.write_all(&(text.len() as u16).to_le_bytes())?;
                    w.write_all(text)?;
                    w.write_all(&[0u8; 3][..(4 - text.len() % 4) % 4])?;
                    w.write_all(&[0, 0, 0, 0])?; // opt_endofopt
                }
                w.write_all(&shb_len.to_le_bytes())?;
                // IDB with if_tsresol = 9 (ns)
                let len = 20 + 8 + 4;
                w.write_all(&1u32.to_le_bytes())?;
                w.write_all(&(len as u32).to_le_bytes())?;
                w.write_all(&127u16.to_le_bytes())?;
                w.write_all(&0u16.to_le_bytes())?;
                w.write_all(&snaplen.to_le_bytes())?;
                w.write_all(&9u16.to_le_bytes())?; // if_tsresol
                w.write_all(&1u16.to_le_bytes())?;
                w.write_all(&[9, 0, 0, 0])?;
                w.write_all(&[0, 0, 0, 0])?; // opt_endofopt
                w.write_all(&(len as u32).to_le_bytes())?;
            }
        }
        Ok(CaptureWriter { w, format, snaplen })
    }

    /// Snap length.
    pub fn snaplen(&self) -> u32 {
        self.snaplen
    }

    /// Write one packet (`data` already cut to the snap length).
    pub fn write(&mut self, ts: Ts, data: &[u8], orig_len: u32) -> std::io::Result<()> {
        let ns = ts.as_nanos();
        let cap = data.len() as u32;
        match self.format {
            OutFormat::Pcap => {
                let mut h = [0u8; 16];
                h[0..4].copy_from_slice(&((ns / 1_000_000_000) as u32).to_le_bytes());
                h[4..8].copy_from_slice(&((ns % 1_000_000_000) as u32).to_le_bytes());
                h[8..12].copy_from_slice(&cap.to_le_bytes());
                h[12..16].copy_from_slice(&orig_len.to_le_bytes());
                self.w.write_all(&h)?;
                self.w.write_all(data)?;
            }
            OutFormat::Pcapng => {
                let pad = (4 - data.len() % 4) % 4;
                let total = 32 + data.len() + pad;
                let mut h = [0u8; 28];
                h[0..4].copy_from_slice(&6u32.to_le_bytes());
                h[4..8].copy_from_slice(&(total as u32).to_le_bytes());
                h[12..16].copy_from_slice(&((ns >> 32) as u32).to_le_bytes());
                h[16..20].copy_from_slice(&(ns as u32).to_le_bytes());
                h[20..24].copy_from_slice(&cap.to_le_bytes());
                h[24..28].copy_from_slice(&orig_len.to_le_bytes());
                self.w.write_all(&h)?;
                self.w.write_all(data)?;
                self.w.write_all(&[0u8; 3][..pad])?;
                self.w.write_all(&(total as u32).to_le_bytes())?;
            }
        }
        Ok(())
    }

    /// Flush and return the inner writer.
    pub fn finish(mut self) -> std::io::Result<W> {
        self.w.flush()?;
        Ok(self.w)
    }
}

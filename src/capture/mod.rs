//! Capture ingest: pcap / pcapng (+ gzip / xz) → [`PacketRecord`]s.
//!
//! Inputs: any `std::io::BufRead` holding a pcap or pcapng stream (see [`io`] for files and
//! compression). Outputs: one owned, `Copy` [`PacketRecord`] per packet, streamed with constant
//! memory (pcap-file's 8 MB read buffer plus one record). Clock: host timestamps are the pcap
//! record times (ns, [`Ts`]); radio times are radiotap TSFT ([`Tsft`], µs).
//!
//! Link types: IEEE802_11_RADIOTAP (127), IEEE802_11 (105), Ethernet (1), raw IP (101, 228, 229),
//! Linux SLL (113) and SLL2 (276).
//!
//! Errors come in two kinds ([`Error::is_packet_level`]): damage inside one packet (bad radiotap,
//! short 802.11 header, an interface with an unsupported link type) leaves the reader able to go
//! on; damage to the container (truncated record, corrupt block) ends the stream. Both name the
//! packet number (1-based, as tshark counts) and the byte offset in the uncompressed stream.

pub mod dot11;
pub mod filter;
pub mod io;
pub(crate) mod le;
pub mod legacy;
pub mod net;
pub mod pcap;
pub mod radiotap;
pub mod writer;

use std::io::BufRead;

use pcap_file::pcapng::{Block, PcapNgReadError, PcapNgReader};

use crate::time::{Ts, Tsft};
pub use dot11::{Dot11, Dot11Error, Mac};
pub use net::{FiveTuple, L3};
pub use radiotap::Radiotap;

/// Link types aggrate decodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum LinkType {
    /// 127: radiotap + 802.11.
    Radiotap,
    /// 105: 802.11 without radio header.
    Ieee80211,
    /// 1: Ethernet.
    Ethernet,
    /// 101, 228, 229: raw IP.
    RawIp,
    /// 113: Linux cooked capture v1.
    LinuxSll,
    /// 276: Linux cooked capture v2.
    LinuxSll2,
    /// 192: PPI (Per-Packet Information) + 802.11.
    Ppi,
    /// 163: AVS capture header + 802.11.
    Avs,
    /// 119: Prism (wlan-ng) header + 802.11.
    Prism,
}

impl LinkType {
    /// From a pcap LINKTYPE_ number.
    pub fn from_number(n: u32) -> Option<LinkType> {
        Some(match n {
            127 => LinkType::Radiotap,
            105 => LinkType::Ieee80211,
            1 => LinkType::Ethernet,
            101 | 228 | 229 => LinkType::RawIp,
            113 => LinkType::LinuxSll,
            276 => LinkType::LinuxSll2,
            192 => LinkType::Ppi,
            163 => LinkType::Avs,
            119 => LinkType::Prism,
            _ => return None,
        })
    }
    /// The canonical LINKTYPE_ number.
    pub fn number(self) -> u32 {
        match self {
            LinkType::Radiotap => 127,
            LinkType::Ieee80211 => 105,
            LinkType::Ethernet => 1,
            LinkType::RawIp => 101,
            LinkType::LinuxSll => 113,
            LinkType::LinuxSll2 => 276,
            LinkType::Ppi => 192,
            LinkType::Avs => 163,
            LinkType::Prism => 119,
        }
    }
    /// Short name.
    pub fn name(self) -> &'static str {
        match self {
            LinkType::Radiotap => "IEEE802_11_RADIOTAP",
            LinkType::Ieee80211 => "IEEE802_11",
            LinkType::Ethernet => "ETHERNET",
            LinkType::RawIp => "RAW",
            LinkType::LinuxSll => "LINUX_SLL",
            LinkType::LinuxSll2 => "LINUX_SLL2",
            LinkType::Ppi => "PPI",
            LinkType::Avs => "IEEE802_11_AVS",
            LinkType::Prism => "IEEE802_11_PRISM",
        }
    }
}

/// Which container the stream is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Format {
    /// Classic libpcap.
    Pcap,
    /// pcapng.
    PcapNg,
}

/// One packet, decoded as far as its layers allow. Owned and `Copy`: no allocation per packet.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct PacketRecord {
    /// Packet number in the file, 1-based (as tshark's `frame.number`).
    pub number: u64,
    /// Byte offset of the record in the uncompressed stream.
    pub offset: u64,
    /// Host (pcap record) timestamp.
    pub host: Ts,
    /// Captured length.
    pub caplen: u32,
    /// Original (on-air / on-wire) length.
    pub len: u32,
    /// Link type of the packet's interface.
    pub link: LinkType,
    /// Radiotap header, for link type 127.
    pub radio: Option<Radiotap>,
    /// 802.11 MAC header, for link types 127 and 105 (absent when the FCS is flagged bad).
    pub dot11: Option<Dot11>,
    /// IP + transport, when present and not encrypted.
    pub l3: Option<L3>,
    /// Why the frame was skipped without being decoded to the end, when it was: an 802.11
    /// frame that cannot carry the flow (control or management with a short header, or cut by
    /// the snap length). Counted by `inspect`, never fatal.
    pub skipped: Option<Dot11Error>,
    /// (index, count) of this packet among the IP packets of its MPDU: (0, 1) for an MPDU that
    /// carries one packet, (i, n) for subframe i of an A-MSDU of n. The aggregation level counts
    /// packets; the MPDUs of a frame are its records with index 0.
    pub msdu: (u16, u16),
}

impl PacketRecord {
    /// A blank record (to be filled by [`decode_into`]).
    pub fn empty() -> PacketRecord {
        PacketRecord {
            number: 0,
            offset: 0,
            host: Ts::ZERO,
            caplen: 0,
            len: 0,
            link: LinkType::Radiotap,
            radio: None,
            dot11: None,
            l3: None,
            skipped: None,
            msdu: (0, 1),
        }
    }
    /// Radio TSFT.
    pub fn tsft(&self) -> Option<Tsft> {
        self.radio.and_then(|r| r.tsft).map(Tsft)
    }
    /// PHY data rate in bit/s from the radio header.
    pub fn phy_rate_bps(&self) -> Option<u64> {
        self.radio.and_then(|r| r.phy_rate_bps())
    }
    /// Application sequence number: big-endian u32 at `offset` in the transport payload.
    ///
    /// For TCP it is the TCP sequence number instead: a TCP payload carries no number of its
    /// own, and the sequence number names the segment on both the sniffer's and the receiver's
    /// side.
    pub fn payload_seq(&self, offset: usize) -> Option<u32> {
        self.l3.and_then(|l| l.tcp_seq.or_else(|| l.payload_be32(offset)))
    }
    /// 5-tuple, if IP.
    pub fn flow(&self) -> Option<FiveTuple> {
        self.l3.map(|l| l.flow)
    }
}

/// Decode failures inside one packet (the reader can continue after them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Radiotap header.
    #[error(transparent)]
    Radiotap(#[from] radiotap::RadiotapError),
    /// 802.11 header.
    #[error(transparent)]
    Dot11(#[from] dot11::Dot11Error),
    /// PPI, AVS or Prism header.
    #[error(transparent)]
    Legacy(#[from] legacy::LegacyError),
}

/// Errors of [`CaptureReader`].
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Zero-length input.
    #[error("empty file: no capture header at byte offset 0")]
    Empty,
    /// Not pcap/pcapng.
    #[error("not a pcap or pcapng file: magic {magic:#010x} at byte offset 0")]
    BadMagic {
        /// First four bytes, big-endian.
        magic: u32,
    },
    /// Compressed with something we do not decompress.
    #[error("{kind}-compressed input is not supported; decompress it first")]
    UnsupportedCompression {
        /// Compression name.
        kind: &'static str,
    },
    /// The global header / first block is damaged.
    #[error("bad {format:?} file header at byte offset 0: {what}")]
    BadHeader {
        /// Container.
        format: Format,
        /// What is wrong.
        what: String,
    },
    /// Whole file (pcap) uses a link type we do not decode.
    #[error("unsupported link type {linktype} ({name}); aggrate reads 127 (radiotap), 192 (PPI), 163 (AVS), 119 (Prism), 105 (802.11), 1 (Ethernet), 101/228/229 (raw IP), 113/276 (Linux SLL)")]
    UnsupportedFileLinkType {
        /// LINKTYPE_ number.
        linktype: u32,
        /// pcap-file's name for it.
        name: String,
    },
    /// One interface (pcapng) uses a link type we do not decode; its packets are skipped.
    #[error("packet {number} at byte offset {offset}: unsupported link type {linktype} on interface {interface}")]
    UnsupportedLinkType {
        /// Packet number.
        number: u64,
        /// Byte offset.
        offset: u64,
        /// LINKTYPE_ number.
        linktype: u32,
        /// pcapng interface id.
        interface: u32,
    },
    /// The stream ends inside a record.
    #[error("packet {number} at byte offset {offset}: file ends inside the record (truncated capture)")]
    Truncated {
        /// Packet number it would have been.
        number: u64,
        /// Byte offset of the record.
        offset: u64,
    },
    /// A record or block header is invalid.
    #[error("packet {number} at byte offset {offset}: corrupt record: {what}")]
    Corrupt {
        /// Packet number it would have been.
        number: u64,
        /// Byte offset of the record.
        offset: u64,
        /// pcap-file's description.
        what: String,
    },
    /// A packet's headers are malformed.
    #[error("packet {number} at byte offset {offset}: {source}")]
    Decode {
        /// Packet number.
        number: u64,
        /// Byte offset of the record.
        offset: u64,
        /// What failed.
        source: DecodeError,
    },
    /// Reading failed.
    #[error("read error at byte offset {offset}: {source}")]
    Io {
        /// Byte offset.
        offset: u64,
        /// The IO error.
        source: std::io::Error,
    },
}

impl Error {
    /// True when the reader can go on after this error (the damage is inside one packet).
    pub fn is_packet_level(&self) -> bool {
        matches!(self, Error::Decode { .. } | Error::UnsupportedLinkType { .. })
    }

    /// Byte offset in the (uncompressed) stream the error is about.
    pub fn offset(&self) -> Option<u64> {
        match self {
            Error::Empty | Error::BadMagic { .. } | Error::BadHeader { .. } => Some(0),
            Error::UnsupportedCompression { .. } | Error::UnsupportedFileLinkType { .. } => None,
            Error::UnsupportedLinkType { offset, .. }
            | Error::Truncated { offset, .. }
            | Error::Corrupt { offset, .. }
            | Error::Decode { offset, .. }
            | Error::Io { offset, .. } => Some(*offset),
        }
    }
}

enum Inner<R: BufRead> {
    Pcap {
        r: pcap::PcapRecords<R>,
        link: LinkType,
        /// FCS bytes at the end of every packet, from the header's link-type field.
        fcs: u32,
    },
    PcapNg {
        r: PcapNgReader<R>,
    },
}

/// Streaming capture reader: `Iterator<Item = Result<PacketRecord, Error>>`.
///
/// After a container-level error the iterator ends; after a packet-level error it continues with
/// the next packet.
pub struct CaptureReader<R: BufRead> {
    inner: Inner<R>,
    number: u64,
    /// Next record offset (pcap only; pcapng asks its reader).
    offset: u64,
    last_host: Ts,
    done: bool,
    other_link_packets: u64,
    other_link_interfaces: Vec<u32>,
    /// The A-MSDU being handed out: its first record and the packets still to come.
    amsdu: Option<PacketRecord>,
    amsdu_rest: Vec<L3>,
    amsdu_next: usize,
}

/// Detect pcap vs pcapng (and refuse compressed or unknown input) and open a reader.
pub fn open_capture<R: BufRead>(mut src: R) -> Result<CaptureReader<R>, Error> {
    let head = src.fill_buf().map_err(|source| Error::Io { offset: 0, source })?;
    if head.is_empty() {
        return Err(Error::Empty);
    }
    let mut m = [0u8; 6];
    let n = head.len().min(6);
    m[..n].copy_from_slice(&head[..n]);
    let magic = u32::from_be_bytes([m[0], m[1], m[2], m[3]]);
    let inner = match magic {
        0xa1b2c3d4 | 0xd4c3b2a1 | 0xa1b23c4d | 0x4d3cb2a1 => {
            let r = pcap::PcapRecords::new(src).map_err(|what| Error::BadHeader {
                format: Format::Pcap,
                what,
            })?;
            let raw = r.header().linktype;
            // As libpcap reads the field: the link type in the low 16 bits; bit 26 says the top
            // four bits hold the FCS length in 16-bit words.
            let n = raw & 0xFFFF;
            let fcs = if raw & 0x0400_0000 != 0 { (raw >> 28) * 2 } else { 0 };
            let link = LinkType::from_number(n).ok_or_else(|| Error::UnsupportedFileLinkType {
                linktype: n,
                name: format!("{:?}", pcap_file::DataLink::from(n)),
            })?;
            Inner::Pcap { r, link, fcs }
        }
        0x0a0d0d0a => {
            let r = PcapNgReader::new(src).map_err(|e| header_error(Format::PcapNg, e.to_string(), &e))?;
            Inner::PcapNg { r }
        }
        _ if m[0] == 0x1f && m[1] == 0x8b => return Err(Error::UnsupportedCompression { kind: "gzip" }),
        _ if m == [0xfd, b'7', b'z', b'X', b'Z', 0] => return Err(Error::UnsupportedCompression { kind: "xz" }),
        0x28b52ffd => return Err(Error::UnsupportedCompression { kind: "zstd" }),
        _ if n < 4 => {
            return Err(Error::BadHeader {
                format: Format::Pcap,
                what: format!("only {n} bytes"),
            })
        }
        _ => return Err(Error::BadMagic { magic }),
    };
    Ok(CaptureReader {
        inner,
        number: 0,
        offset: 24,
        last_host: Ts::ZERO,
        done: false,
        other_link_packets: 0,
        other_link_interfaces: Vec::new(),
        amsdu: None,
        amsdu_rest: Vec::new(),
        amsdu_next: 0,
    })
}

fn header_error(format: Format, what: String, e: &dyn std::error::Error) -> Error {
    let mut what = what;
    let mut src = e.source();
    while let Some(s) = src {
        what.push_str(": ");
        what.push_str(&s.to_string());
        src = s.source();
    }
    if what.contains("UnexpectedEof") || what.contains("unexpected end of file") {
        what = format!("file ends inside the header ({what})");
    }
    Error::BadHeader { format, what }
}

fn describe(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(x) = src {
        s.push_str(": ");
        s.push_str(&x.to_string());
        src = x.source();
    }
    s
}

impl<R: BufRead> CaptureReader<R> {
    /// The container format.
    pub fn format(&self) -> Format {
        match self.inner {
            Inner::Pcap { .. } => Format::Pcap,
            Inner::PcapNg { .. } => Format::PcapNg,
        }
    }

    /// Link type of a pcap file (pcapng: of its first interface, once read).
    pub fn link_type(&self) -> Option<LinkType> {
        match &self.inner {
            Inner::Pcap { link, .. } => Some(*link),
            Inner::PcapNg { r } => r
                .interfaces()
                .first()
                .and_then(|i| LinkType::from_number(u32::from(i.linktype))),
        }
    }

    /// Comments of the (first) pcapng section header, e.g. the receive path an emulated capture
    /// was made with (JSON). Empty for pcap.
    pub fn section_comments(&self) -> Vec<String> {
        use pcap_file::pcapng::blocks::opt_common::CommonOption;
        use pcap_file::pcapng::blocks::section_header::SectionHeaderOption;
        match &self.inner {
            Inner::Pcap { .. } => Vec::new(),
            Inner::PcapNg { r } => r
                .section()
                .options
                .iter()
                .filter_map(|o| match o {
                    SectionHeaderOption::Common(CommonOption::Comment(c)) => Some(c.to_string()),
                    _ => None,
                })
                .collect(),
        }
    }

    fn start_amsdu(&mut self, rec: &PacketRecord, res: &Result<(), Error>) {
        if res.is_ok() && !self.amsdu_rest.is_empty() {
            self.amsdu = Some(*rec);
            self.amsdu_next = 0;
        }
    }

    /// Records whose timestamp fraction was a second or more, normalised (pcap only).
    pub fn timestamps_fixed(&self) -> u64 {
        match &self.inner {
            Inner::Pcap { r, .. } => r.ts_fixed,
            Inner::PcapNg { .. } => 0,
        }
    }

    /// Packets skipped because their pcapng interface has a link type we do not decode, and
    /// those interfaces (the first 64).
    pub fn other_link_packets(&self) -> (u64, &[u32]) {
        (self.other_link_packets, &self.other_link_interfaces)
    }

    /// Packets returned so far (including ones that failed to decode).
    pub fn packets_read(&self) -> u64 {
        self.number
    }

    /// Bytes of the uncompressed stream consumed so far.
    pub fn offset(&self) -> u64 {
        match &self.inner {
            Inner::Pcap { .. } => self.offset,
            Inner::PcapNg { r } => r.bytes_parsed(),
        }
    }

    fn container_error(&mut self, io_eof: bool, what: String) -> Error {
        self.done = true;
        let (number, offset) = (self.number + 1, self.offset());
        if io_eof {
            Error::Truncated { number, offset }
        } else {
            Error::Corrupt { number, offset, what }
        }
    }

    /// Read the next packet.
    pub fn next_record(&mut self) -> Option<Result<PacketRecord, Error>> {
        let mut rec = PacketRecord::empty();
        self.next_into(&mut rec).map(|r| r.map(|()| rec))
    }

    /// The next subframe of the A-MSDU being read into `rec`; false (and the A-MSDU done) when
    /// none is left.
    #[inline]
    fn next_subframe(&mut self, rec: &mut PacketRecord) -> bool {
        if let Some(base) = &self.amsdu {
            if let Some(l3) = self.amsdu_rest.get(self.amsdu_next) {
                self.amsdu_next += 1;
                *rec = PacketRecord {
                    l3: Some(*l3),
                    msdu: (self.amsdu_next as u16, base.msdu.1),
                    ..*base
                };
                return true;
            }
            self.amsdu = None;
        }
        false
    }

    /// A packet of an interface whose link type is not decoded: counted, and the interface
    /// named (the first 64).
    fn skip_other_link(&mut self, iface: u32) {
        self.other_link_packets += 1;
        if !self.other_link_interfaces.contains(&iface) && self.other_link_interfaces.len() < 64 {
            self.other_link_interfaces.push(iface);
        }
    }

    /// Read the next packet into `rec` (the allocation- and copy-free form of
    /// [`CaptureReader::next_record`]). On error `rec` is unspecified.
    pub fn next_into(&mut self, rec: &mut PacketRecord) -> Option<Result<(), Error>> {
        if self.amsdu.is_some() && self.next_subframe(rec) {
            return Some(Ok(()));
        }
        if self.done {
            return None;
        }
        loop {
            let offset = self.offset();
            let (link, host, caplen, len, data): (LinkType, Ts, u32, u32, &[u8]);
            match &mut self.inner {
                Inner::Pcap { r, link: l, fcs } => match r.next_record() {
                    None => return None,
                    Some(Ok(p)) => {
                        link = *l;
                        host = p.ts;
                        len = p.orig_len;
                        caplen = p.data.len() as u32;
                        self.offset += 16 + caplen as u64;
                        // The header's FCS length (radiotap says it per packet in its flags):
                        // trailing FCS bytes of a packet captured whole are not frame bytes.
                        let mut d = p.data;
                        if *fcs > 0 && link != LinkType::Radiotap && caplen == len {
                            d = &d[..d.len().saturating_sub(*fcs as usize)];
                        }
                        let res = decode_full(
                            rec,
                            self.number + 1,
                            offset,
                            link,
                            host,
                            caplen,
                            len,
                            d,
                            &mut self.amsdu_rest,
                        );
                        self.number += 1;
                        self.last_host = host;
                        self.start_amsdu(rec, &res);
                        return Some(res);
                    }
                    Some(Err(pcap::RecordError::Io(io))) => {
                        self.done = true;
                        return Some(Err(Error::Io { offset, source: io }));
                    }
                    Some(Err(pcap::RecordError::Truncated)) => {
                        return Some(Err(self.container_error(true, String::new())))
                    }
                    Some(Err(pcap::RecordError::Corrupt(what))) => return Some(Err(self.container_error(false, what))),
                },
                Inner::PcapNg { r } => match r.next_block() {
                    None => return None,
                    Some(Ok((block, state))) => {
                        let (iface, ts, l, d) = match &block {
                            Block::EnhancedPacket(p) => {
                                (p.interface_id, Some(p.timestamp), p.original_len, &p.data[..])
                            }
                            Block::Packet(p) => (p.interface_id as u32, Some(p.timestamp), p.original_len, &p.data[..]),
                            Block::SimplePacket(p) => (0, None, p.original_len, &p.data[..]),
                            _ => continue,
                        };
                        self.number += 1;
                        let number = self.number;
                        let lt = state.interfaces().get(iface as usize).map(|i| u32::from(i.linktype));
                        let Some(lk) = lt.and_then(|n| LinkType::from_number(n & 0xFFFF)) else {
                            // An interface whose link type we do not decode (a USB or Bluetooth
                            // interface beside the Wi-Fi one): its packets are skipped and
                            // counted, the other interfaces read on.
                            if lt.is_some() {
                                self.skip_other_link(iface);
                                continue;
                            }
                            return Some(Err(Error::UnsupportedLinkType {
                                number,
                                offset,
                                linktype: u32::MAX,
                                interface: iface,
                            }));
                        };
                        // Simple packet blocks carry no time: they inherit the previous packet's.
                        host = ts.map(Ts::from_duration).unwrap_or(self.last_host);
                        self.last_host = host;
                        link = lk;
                        caplen = d.len() as u32;
                        len = l;
                        data = d;
                        let res = decode_full(rec, number, offset, link, host, caplen, len, data, &mut self.amsdu_rest);
                        self.start_amsdu(rec, &res);
                        return Some(res);
                    }
                    Some(Err(e)) => {
                        let eof =
                            matches!(&e, PcapNgReadError::Io(io) if io.kind() == std::io::ErrorKind::UnexpectedEof);
                        if let PcapNgReadError::Io(io) = &e {
                            if !eof {
                                self.done = true;
                                return Some(Err(Error::Io {
                                    offset,
                                    source: std::io::Error::new(io.kind(), io.to_string()),
                                }));
                            }
                        }
                        return Some(Err(self.container_error(eof, describe(&e))));
                    }
                },
            }
        }
    }
}

impl<R: BufRead> Iterator for CaptureReader<R> {
    type Item = Result<PacketRecord, Error>;
    fn next(&mut self) -> Option<Self::Item> {
        self.next_record()
    }
}

/// Most A-MSDU subframes read from one MPDU (an 11,454-byte MPDU holds fewer than 200 of the
/// smallest packets; the rest are counted as not decoded).
pub const MAX_AMSDU_SUBFRAMES: usize = 256;

/// The IP packets of an A-MSDU body: subframes of destination (6), source (6) and length (2,
/// big-endian) then that many bytes of LLC/SNAP + packet, each padded to 4 bytes but the last.
pub fn amsdu_subframes(body: &[u8]) -> impl Iterator<Item = L3> + '_ {
    let mut o = 0usize;
    std::iter::from_fn(move || {
        let len = le::be16(body, o + 12)? as usize;
        let msdu = body.get(o + 14..o + 14 + len)?;
        o += (14 + len + 3) & !3;
        Some(net::llc_snap(msdu).and_then(|(et, rest)| net::ip(et, rest)))
    })
    .take(MAX_AMSDU_SUBFRAMES)
    .flatten()
}

/// Decode one packet's bytes (the pure part of reading; also what the fuzz tests drive).
pub fn decode(
    number: u64,
    offset: u64,
    link: LinkType,
    host: Ts,
    caplen: u32,
    len: u32,
    data: &[u8],
) -> Result<PacketRecord, Error> {
    let mut rec = PacketRecord::empty();
    decode_into(&mut rec, number, offset, link, host, caplen, len, data)?;
    Ok(rec)
}

/// [`decode`] into an existing record (no per-packet copies of the record on the hot path).
/// On error the record's contents are unspecified.
#[allow(clippy::too_many_arguments)]
pub fn decode_into(
    rec: &mut PacketRecord,
    number: u64,
    offset: u64,
    link: LinkType,
    host: Ts,
    caplen: u32,
    len: u32,
    data: &[u8],
) -> Result<(), Error> {
    let mut rest = Vec::new();
    decode_full(rec, number, offset, link, host, caplen, len, data, &mut rest)
}

/// [`decode_into`], with the IP packets after the first of an A-MSDU in `rest` (cleared first).
#[allow(clippy::too_many_arguments)]
fn decode_full(
    rec: &mut PacketRecord,
    number: u64,
    offset: u64,
    link: LinkType,
    host: Ts,
    caplen: u32,
    len: u32,
    data: &[u8],
    rest: &mut Vec<L3>,
) -> Result<(), Error> {
    rest.clear();
    *rec = PacketRecord {
        number,
        offset,
        host,
        caplen,
        len,
        link,
        radio: None,
        dot11: None,
        l3: None,
        skipped: None,
        msdu: (0, 1),
    };
    let err = |source: DecodeError| Error::Decode { number, offset, source };
    let (ethertype, rest) = match link {
        LinkType::Radiotap | LinkType::Ieee80211 | LinkType::Ppi | LinkType::Avs | LinkType::Prism => {
            let mut frame = data;
            let mut pad = false;
            let mut fcs = false;
            if link != LinkType::Ieee80211 {
                // The radio header: radiotap, or a legacy one mapped onto the same record.
                let rt = rec.radio.insert(Radiotap::default());
                match link {
                    LinkType::Radiotap => radiotap::parse_into(data, rt).map_err(|e| err(e.into()))?,
                    LinkType::Ppi => {
                        *rt = legacy::ppi(data).map_err(|e| err(e.into()))?;
                        if legacy::ppi_dlt(data) != Some(105) {
                            // Not 802.11 inside: nothing of ours to decode.
                            return Ok(());
                        }
                    }
                    LinkType::Avs => *rt = legacy::avs(data).map_err(|e| err(e.into()))?,
                    _ => *rt = legacy::prism(data).map_err(|e| err(e.into()))?,
                }
                frame = &data[(rt.len as usize).min(data.len())..];
                pad = rt.data_pad();
                // The FCS is in the captured bytes only when the frame was not cut by the snap length.
                fcs = rt.has_fcs() && caplen == len;
                if rt.bad_fcs() {
                    return Ok(());
                }
            }
            if fcs {
                frame = &frame[..frame.len().saturating_sub(4)];
            }
            let d = match Dot11::parse(frame) {
                Ok(d) => d,
                // A frame that cannot carry the flow — not a data frame, too short to say, or
                // cut by the snap length — is skipped and counted, never fatal.
                Err(e) if frame.len() < 10 || (frame[0] >> 2) & 3 != 2 || caplen < len => {
                    rec.skipped = Some(e);
                    return Ok(());
                }
                Err(e) => return Err(err(e.into())),
            };
            rec.dot11 = Some(d);
            if !d.has_data_body() || d.protected() || d.frag != 0 {
                return Ok(());
            }
            let mut h = d.header_len;
            if pad {
                h = (h + 3) & !3;
            }
            if d.amsdu {
                // Several IP packets in one MPDU: the record carries the first; the reader hands
                // out the others as records of their own (`CaptureReader::next_into`).
                let mut subs = amsdu_subframes(frame.get(h..).unwrap_or(&[]));
                rec.l3 = subs.next();
                rest.extend(subs);
                rec.msdu = (0, 1 + rest.len() as u16);
                return Ok(());
            }
            match frame.get(h..).and_then(net::llc_snap) {
                Some(x) => x,
                None => {
                    // 802.11s: a Mesh Control field (flags, TTL, sequence, 0/6/12 bytes of
                    // address extension) before the LLC/SNAP header.
                    let mesh = d
                        .mesh_bit
                        .then(|| frame.get(h).map(|f| h + 6 + [0, 6, 12, 0][(f & 3) as usize]))
                        .flatten();
                    match mesh.and_then(|m| frame.get(m..)).and_then(net::llc_snap) {
                        Some(x) => x,
                        None => return Ok(()),
                    }
                }
            }
        }
        LinkType::Ethernet => match net::ethernet(data) {
            Some(x) => x,
            None => return Ok(()),
        },
        LinkType::RawIp => match net::raw_ip_ethertype(data) {
            Some(et) => (et, data),
            None => return Ok(()),
        },
        LinkType::LinuxSll => match net::sll(data) {
            Some(x) => x,
            None => return Ok(()),
        },
        LinkType::LinuxSll2 => match net::sll2(data) {
            Some(x) => x,
            None => return Ok(()),
        },
    };
    rec.l3 = net::ip(ethertype, rest);
    Ok(())
}

//! Checked 802.11 MAC header view: frame control, addresses, sequence control, QoS.
//!
//! Input: the bytes after the radiotap header (or a whole link-type-105 frame). Output:
//! [`Dot11`] with the header length, so the caller can continue into LLC/SNAP. Never panics.

use super::le;

/// A 48-bit MAC address.
pub type Mac = [u8; 6];

/// 802.11 frame type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum FrameType {
    /// Management.
    Mgmt,
    /// Control.
    Ctrl,
    /// Data.
    Data,
    /// Extension (type 3).
    Ext,
}

/// Parsed 802.11 MAC header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Dot11 {
    /// Frame type.
    pub ftype: FrameType,
    /// Subtype (0–15).
    pub subtype: u8,
    /// Frame-control flags byte (ToDS 0x01, FromDS 0x02, retry 0x08, protected 0x40, order 0x80).
    pub fc_flags: u8,
    /// Address 1 (receiver).
    pub addr1: Mac,
    /// Address 2 (transmitter), when the frame has one.
    pub addr2: Option<Mac>,
    /// Address 3.
    pub addr3: Option<Mac>,
    /// Address 4 (ToDS and FromDS both set).
    pub addr4: Option<Mac>,
    /// Sequence number (12 bits).
    pub seq: Option<u16>,
    /// Fragment number.
    pub frag: u8,
    /// QoS TID for QoS data.
    pub tid: Option<u8>,
    /// A-MSDU present bit of QoS control.
    pub amsdu: bool,
    /// Bit 8 of QoS control: Mesh Control Present in an 802.11s mesh BSS (elsewhere part of
    /// the TXOP / queue-size octet; the decoder checks what follows before trusting it).
    pub mesh_bit: bool,
    /// Header length in bytes (before any radiotap data-pad alignment).
    pub header_len: usize,
}

/// Why an 802.11 header could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, thiserror::Error)]
#[error("802.11 {what} header needs {need} bytes, {have} captured")]
pub struct Dot11Error {
    /// Which header.
    pub what: &'static str,
    /// Bytes it needs.
    pub need: usize,
    /// Bytes available.
    pub have: usize,
}

fn mac(b: &[u8], at: usize) -> Option<Mac> {
    b.get(at..at + 6)?.try_into().ok()
}

impl Dot11 {
    /// Parse the MAC header at the start of `b`.
    pub fn parse(b: &[u8]) -> Result<Dot11, Dot11Error> {
        let short = |what, need| Dot11Error {
            what,
            need,
            have: b.len(),
        };
        if b.len() < 10 {
            return Err(short("frame control", 10));
        }
        let fc0 = b[0];
        let fc_flags = b[1];
        let ftype = match (fc0 >> 2) & 0x3 {
            0 => FrameType::Mgmt,
            1 => FrameType::Ctrl,
            2 => FrameType::Data,
            _ => FrameType::Ext,
        };
        let subtype = fc0 >> 4;
        let addr1 = mac(b, 4).ok_or(short("address 1", 10))?;
        let mut d = Dot11 {
            ftype,
            subtype,
            fc_flags,
            addr1,
            addr2: None,
            addr3: None,
            addr4: None,
            seq: None,
            frag: 0,
            tid: None,
            amsdu: false,
            mesh_bit: false,
            header_len: 10,
        };
        match ftype {
            FrameType::Ctrl => {
                // RTS (11), PS-Poll (10), CF-End (14/15), BlockAckReq (8), BlockAck (9) carry a TA.
                if matches!(subtype, 8..=11 | 14 | 15) && b.len() >= 16 {
                    d.addr2 = mac(b, 10);
                    d.header_len = 16;
                }
            }
            FrameType::Ext => {}
            FrameType::Mgmt | FrameType::Data => {
                if b.len() < 24 {
                    return Err(short(if ftype == FrameType::Data { "data" } else { "management" }, 24));
                }
                d.addr2 = mac(b, 10);
                d.addr3 = mac(b, 16);
                let sc = le::u16(b, 22).unwrap_or(0);
                d.seq = Some(sc >> 4);
                d.frag = (sc & 0xf) as u8;
                let mut len = 24;
                if ftype == FrameType::Data {
                    if fc_flags & 0x03 == 0x03 {
                        d.addr4 = Some(mac(b, 24).ok_or(short("4-address data", 30))?);
                        len = 30;
                    }
                    if subtype & 0x08 != 0 {
                        let qos = le::u16(b, len).ok_or(short("QoS data", len + 2))?;
                        d.tid = Some((qos & 0x0f) as u8);
                        d.amsdu = qos & 0x0080 != 0;
                        d.mesh_bit = qos & 0x0100 != 0;
                        len += 2;
                        if fc_flags & 0x80 != 0 {
                            len += 4; // HT control
                        }
                    }
                } else if fc_flags & 0x80 != 0 {
                    len += 4; // +HTC on management frames
                }
                if len > b.len() {
                    return Err(short("MAC", len));
                }
                d.header_len = len;
            }
        }
        Ok(d)
    }

    /// Retry flag.
    pub fn retry(&self) -> bool {
        self.fc_flags & 0x08 != 0
    }
    /// Protected (encrypted) flag.
    pub fn protected(&self) -> bool {
        self.fc_flags & 0x40 != 0
    }
    /// ToDS flag.
    pub fn to_ds(&self) -> bool {
        self.fc_flags & 0x01 != 0
    }
    /// FromDS flag.
    pub fn from_ds(&self) -> bool {
        self.fc_flags & 0x02 != 0
    }
    /// Data frame that carries a body (not a Null / QoS Null).
    pub fn has_data_body(&self) -> bool {
        self.ftype == FrameType::Data && self.subtype & 0x04 == 0
    }
    /// Receiver address.
    pub fn ra(&self) -> Mac {
        self.addr1
    }
    /// Transmitter address.
    pub fn ta(&self) -> Option<Mac> {
        self.addr2
    }
    /// Destination address (data frames).
    pub fn da(&self) -> Option<Mac> {
        match (self.to_ds(), self.from_ds()) {
            (false, _) => Some(self.addr1),
            (true, _) => self.addr3,
        }
    }
    /// Source address (data frames).
    pub fn sa(&self) -> Option<Mac> {
        match (self.to_ds(), self.from_ds()) {
            (_, false) => self.addr2,
            (false, true) => self.addr3,
            (true, true) => self.addr4,
        }
    }
}

/// Format a MAC address as `aa:bb:cc:dd:ee:ff`.
pub fn fmt_mac(m: &Mac) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}

/// Parse `aa:bb:cc:dd:ee:ff` (or with `-`).
pub fn parse_mac(s: &str) -> Option<Mac> {
    let mut out = [0u8; 6];
    let mut n = 0;
    for part in s.split([':', '-']) {
        if n == 6 || part.len() != 2 {
            return None;
        }
        out[n] = u8::from_str_radix(part, 16).ok()?;
        n += 1;
    }
    (n == 6).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qos_data_from_ds() {
        let mut f = vec![0x88, 0x0a, 0, 0]; // QoS data, FromDS + retry
        f.extend_from_slice(&[1, 1, 1, 1, 1, 1]); // addr1 = DA
        f.extend_from_slice(&[2, 2, 2, 2, 2, 2]); // addr2 = BSSID
        f.extend_from_slice(&[3, 3, 3, 3, 3, 3]); // addr3 = SA
        f.extend_from_slice(&(0x1234u16 << 4 | 2).to_le_bytes()[..]);
        f.extend_from_slice(&[0x85, 0x00]); // TID 5, A-MSDU bit
        let d = Dot11::parse(&f).unwrap();
        assert_eq!(d.ftype, FrameType::Data);
        assert!(d.retry() && d.from_ds() && !d.to_ds());
        assert_eq!(d.seq, Some(0x234));
        assert_eq!(d.frag, 2);
        assert_eq!(d.tid, Some(5));
        assert!(d.amsdu);
        assert_eq!(d.header_len, 26);
        assert_eq!(d.da(), Some([1; 6]));
        assert_eq!(d.sa(), Some([3; 6]));
        assert_eq!(d.ta(), Some([2; 6]));
        assert!(Dot11::parse(&f[..25]).is_err());
    }

    #[test]
    fn mac_text() {
        let m = parse_mac("00:1a:2B:3c:4d:5e").unwrap();
        assert_eq!(fmt_mac(&m), "00:1a:2b:3c:4d:5e");
        assert!(parse_mac("00:1a:2b").is_none());
        assert!(parse_mac("00:1a:2b:3c:4d:5e:6f").is_none());
    }
}

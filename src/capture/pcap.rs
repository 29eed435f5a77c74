//! libpcap files, read here rather than through pcap-file: pcap-file refuses a record whose
//! fraction of a second is a whole second or more ("Ts_frac micro too big"), which airodump-ng
//! writes and tshark reads, carrying the excess into the seconds — as this reader does, counting
//! the records it fixed. One reused buffer per reader; records are checked against a size cap.

use std::io::{BufRead, ErrorKind};

use crate::time::Ts;

/// Largest record accepted (bytes): Wireshark's limit for every link type we decode.
pub const MAX_RECORD: u32 = 262_144;

/// The global header's fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PcapHeader {
    /// Major and minor version.
    pub version: (u16, u16),
    /// Snap length.
    pub snaplen: u32,
    /// The raw link-type field (FCS bits included).
    pub linktype: u32,
    /// Nanosecond timestamps (magic a1b23c4d).
    pub nanos: bool,
    /// Big-endian file.
    pub big_endian: bool,
}

/// Why a record could not be read.
#[derive(Debug)]
pub enum RecordError {
    /// The file ends inside a record.
    Truncated,
    /// The record header is impossible.
    Corrupt(String),
    /// Reading failed.
    Io(std::io::Error),
}

/// One record, borrowed from the reader's buffer.
#[derive(Clone, Copy, Debug)]
pub struct Record<'a> {
    /// Timestamp (fraction carried into the seconds).
    pub ts: Ts,
    /// Original length.
    pub orig_len: u32,
    /// Captured bytes.
    pub data: &'a [u8],
}

/// Streaming pcap reader.
pub struct PcapRecords<R> {
    r: R,
    header: PcapHeader,
    buf: Vec<u8>,
    /// Records whose fraction of a second was ≥ 1 s (normalised as tshark does).
    pub ts_fixed: u64,
}

/// Read until `buf` is full or the input ends; the bytes read.
fn fill<R: BufRead>(r: &mut R, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

impl<R: BufRead> PcapRecords<R> {
    /// Read the 24-byte global header; the error says what is wrong with it.
    pub fn new(mut r: R) -> Result<PcapRecords<R>, String> {
        let mut h = [0u8; 24];
        let n = fill(&mut r, &mut h).map_err(|e| e.to_string())?;
        if n < 24 {
            return Err(format!("file ends inside the header ({n} of 24 bytes)"));
        }
        let (big_endian, nanos) = match [h[0], h[1], h[2], h[3]] {
            [0xd4, 0xc3, 0xb2, 0xa1] => (false, false),
            [0xa1, 0xb2, 0xc3, 0xd4] => (true, false),
            [0x4d, 0x3c, 0xb2, 0xa1] => (false, true),
            [0xa1, 0xb2, 0x3c, 0x4d] => (true, true),
            m => return Err(format!("magic {:02x}{:02x}{:02x}{:02x}", m[0], m[1], m[2], m[3])),
        };
        let u16_at = |o: usize| {
            let b = [h[o], h[o + 1]];
            if big_endian {
                u16::from_be_bytes(b)
            } else {
                u16::from_le_bytes(b)
            }
        };
        let u32_at = |o: usize| {
            let b = [h[o], h[o + 1], h[o + 2], h[o + 3]];
            if big_endian {
                u32::from_be_bytes(b)
            } else {
                u32::from_le_bytes(b)
            }
        };
        let header = PcapHeader {
            version: (u16_at(4), u16_at(6)),
            snaplen: u32_at(16),
            linktype: u32_at(20),
            nanos,
            big_endian,
        };
        if header.version.0 != 2 {
            return Err(format!(
                "version {}.{} (this reads 2.x)",
                header.version.0, header.version.1
            ));
        }
        Ok(PcapRecords {
            r,
            header,
            buf: Vec::new(),
            ts_fixed: 0,
        })
    }

    /// The global header.
    pub fn header(&self) -> &PcapHeader {
        &self.header
    }

    fn u32(&self, b: &[u8]) -> u32 {
        let a = [b[0], b[1], b[2], b[3]];
        if self.header.big_endian {
            u32::from_be_bytes(a)
        } else {
            u32::from_le_bytes(a)
        }
    }

    /// The next record; `None` at a clean end of the file.
    pub fn next_record(&mut self) -> Option<Result<Record<'_>, RecordError>> {
        let mut h = [0u8; 16];
        let n = match fill(&mut self.r, &mut h) {
            Ok(n) => n,
            Err(e) => return Some(Err(RecordError::Io(e))),
        };
        if n == 0 {
            return None;
        }
        if n < 16 {
            return Some(Err(RecordError::Truncated));
        }
        let (sec, frac, incl, orig) = (
            self.u32(&h[0..4]),
            self.u32(&h[4..8]),
            self.u32(&h[8..12]),
            self.u32(&h[12..16]),
        );
        if incl > MAX_RECORD {
            return Some(Err(RecordError::Corrupt(format!(
                "captured length {incl} is larger than {MAX_RECORD} bytes"
            ))));
        }
        let unit = if self.header.nanos { 1 } else { 1_000 };
        if frac as u64 * unit >= 1_000_000_000 {
            self.ts_fixed += 1;
        }
        let ts = Ts(sec as u64 * 1_000_000_000 + frac as u64 * unit);
        self.buf.resize(incl as usize, 0);
        match fill(&mut self.r, &mut self.buf) {
            Ok(k) if k == incl as usize => {}
            Ok(_) => return Some(Err(RecordError::Truncated)),
            Err(e) => return Some(Err(RecordError::Io(e))),
        }
        Some(Ok(Record {
            ts,
            orig_len: orig,
            data: &self.buf,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(nanos: bool, recs: &[(u32, u32, &[u8])]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&if nanos { 0xa1b23c4du32 } else { 0xa1b2c3d4 }.to_le_bytes());
        v.extend_from_slice(&2u16.to_le_bytes());
        v.extend_from_slice(&4u16.to_le_bytes());
        v.extend_from_slice(&[0; 8]);
        v.extend_from_slice(&65535u32.to_le_bytes());
        v.extend_from_slice(&127u32.to_le_bytes());
        for (s, f, d) in recs {
            for x in [*s, *f, d.len() as u32, d.len() as u32 + 1] {
                v.extend_from_slice(&x.to_le_bytes());
            }
            v.extend_from_slice(d);
        }
        v
    }

    #[test]
    fn fractions_of_a_second_or_more_are_carried_and_counted() {
        let b = file(false, &[(10, 999_999, b"ab"), (10, 1_000_046, b"cde"), (11, 5, b"")]);
        let mut r = PcapRecords::new(&b[..]).unwrap();
        let a = r.next_record().unwrap().unwrap();
        assert_eq!((a.ts, a.orig_len, a.data), (Ts(10_999_999_000), 3, &b"ab"[..]));
        let c = r.next_record().unwrap().unwrap();
        assert_eq!(c.ts, Ts(11_000_046_000), "tshark shows 11.000046");
        assert_eq!(c.data, b"cde");
        assert_eq!(r.next_record().unwrap().unwrap().ts, Ts(11_000_005_000));
        assert!(r.next_record().is_none());
        assert_eq!(r.ts_fixed, 1);
        let b = file(true, &[(1, 1_500_000_000, b"x")]);
        let mut r = PcapRecords::new(&b[..]).unwrap();
        assert_eq!(r.next_record().unwrap().unwrap().ts, Ts(2_500_000_000));
    }

    #[test]
    fn damage_is_named() {
        let b = file(false, &[(1, 2, b"abcdef")]);
        assert!(PcapRecords::new(&b[..10]).err().unwrap().contains("10 of 24"));
        let mut r = PcapRecords::new(&b[..b.len() - 2]).unwrap();
        assert!(matches!(r.next_record(), Some(Err(RecordError::Truncated))));
        let mut big = b.clone();
        big[32..36].copy_from_slice(&(MAX_RECORD + 1).to_le_bytes());
        let mut r = PcapRecords::new(&big[..]).unwrap();
        assert!(matches!(r.next_record(), Some(Err(RecordError::Corrupt(_)))));
    }
}

//! The reference protocol's packets: checked parse and emit that never panic.
//!
//! Every packet starts with a 12-byte header (big endian):
//!
//! | bytes | field |
//! | --- | --- |
//! | 0..2 | magic `0xA6 0x67` |
//! | 2 | version (1) |
//! | 3 | kind: 1 = data, 2 = feedback |
//! | 4..8 | session id |
//! | 8..12 | reserved (0) |
//!
//! **Data** (kind 1): `12..20` sequence number (u64), `20..28` send time (ns on the sender's
//! clock, u64), then the payload (any length, may be empty).
//!
//! **Feedback** (kind 2), 128 bytes: `12..16` report number (u32), `16..24` highest sequence
//! received (u64), then the report: start, end (ns, u64), frames, packets, lost (u64 each),
//! μ_N, corrected μ_N, receive rate, mean and p95 one-way delay (ms), μ_R (f64 each; NaN = none),
//! then a 16-byte tag: HMAC-SHA-256 under the session key of bytes `0..112`, truncated. A
//! feedback whose tag does not verify is refused: an off-path host that does not know the key
//! cannot change the sender's rate.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::runtime::AggReport;
use crate::time::Ts;

/// First two bytes of every packet.
pub const MAGIC: [u8; 2] = [0xA6, 0x67];
/// Protocol version.
pub const VERSION: u8 = 1;
/// Header bytes.
pub const HEADER_LEN: usize = 12;
/// Data header bytes (before the payload).
pub const DATA_HEADER_LEN: usize = 28;
/// Feedback bytes, tag included.
pub const FEEDBACK_LEN: usize = 128;
const TAG_LEN: usize = 16;

/// Why a packet was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Shorter than its kind needs.
    #[error("packet of {len} bytes is too short: {what} needs {need}")]
    Short {
        /// Bytes given.
        len: usize,
        /// Bytes needed.
        need: usize,
        /// What.
        what: &'static str,
    },
    /// Not ours.
    #[error("bad magic at byte 0: {0:02x}{1:02x}")]
    Magic(u8, u8),
    /// Another version.
    #[error("unsupported version {0} at byte 2 (this is version 1)")]
    Version(u8),
    /// Unknown kind.
    #[error("unknown packet kind {0} at byte 3")]
    Kind(u8),
    /// Another session.
    #[error("session {got:#010x} at byte 4, expected {want:#010x}")]
    Session {
        /// In the packet.
        got: u32,
        /// Ours.
        want: u32,
    },
    /// Feedback tag does not verify.
    #[error("feedback tag at byte 112 does not verify (forged or corrupted)")]
    Tag,
}

/// A data packet's header fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Data {
    /// Session.
    pub session: u32,
    /// Sequence number.
    pub seq: u64,
    /// Send time.
    pub sent: Ts,
}

/// A feedback packet's fields.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Feedback {
    /// Session.
    pub session: u32,
    /// Report number (increments per report).
    pub number: u32,
    /// Highest sequence number received so far.
    pub highest_seq: u64,
    /// The receiver's report.
    pub report: AggReport,
}

/// Kind of a packet after the header check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Data.
    Data,
    /// Feedback.
    Feedback,
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[o..o + 4]);
    u32::from_be_bytes(a)
}

fn u64_at(b: &[u8], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[o..o + 8]);
    u64::from_be_bytes(a)
}

/// Check the common header; returns the kind and session.
pub fn peek(b: &[u8]) -> Result<(Kind, u32), WireError> {
    if b.len() < HEADER_LEN {
        return Err(WireError::Short {
            len: b.len(),
            need: HEADER_LEN,
            what: "a header",
        });
    }
    if b[0..2] != MAGIC {
        return Err(WireError::Magic(b[0], b[1]));
    }
    if b[2] != VERSION {
        return Err(WireError::Version(b[2]));
    }
    let kind = match b[3] {
        1 => Kind::Data,
        2 => Kind::Feedback,
        k => return Err(WireError::Kind(k)),
    };
    Ok((kind, u32_at(b, 4)))
}

fn header(out: &mut Vec<u8>, kind: u8, session: u32) {
    out.extend_from_slice(&MAGIC);
    out.push(VERSION);
    out.push(kind);
    out.extend_from_slice(&session.to_be_bytes());
    out.extend_from_slice(&[0; 4]);
}

/// Append a data packet with `payload_len` zero bytes of payload to `out` (cleared first).
pub fn emit_data(out: &mut Vec<u8>, d: &Data, payload_len: usize) {
    out.clear();
    header(out, 1, d.session);
    out.extend_from_slice(&d.seq.to_be_bytes());
    out.extend_from_slice(&d.sent.as_nanos().to_be_bytes());
    out.resize(DATA_HEADER_LEN + payload_len, 0);
}

/// Parse a data packet of session `session`; returns its fields and payload length.
pub fn parse_data(b: &[u8], session: u32) -> Result<(Data, usize), WireError> {
    let (kind, s) = peek(b)?;
    if kind != Kind::Data {
        return Err(WireError::Kind(b[3]));
    }
    if b.len() < DATA_HEADER_LEN {
        return Err(WireError::Short {
            len: b.len(),
            need: DATA_HEADER_LEN,
            what: "a data packet",
        });
    }
    if s != session {
        return Err(WireError::Session { got: s, want: session });
    }
    Ok((
        Data {
            session: s,
            seq: u64_at(b, 12),
            sent: Ts(u64_at(b, 20)),
        },
        b.len() - DATA_HEADER_LEN,
    ))
}

fn tag(key: &[u8], body: &[u8]) -> [u8; TAG_LEN] {
    // HMAC accepts keys of any length: `new_from_slice` cannot fail for it.
    let mut mac = match <Hmac<Sha256> as Mac>::new_from_slice(key) {
        Ok(m) => m,
        Err(_) => return [0; TAG_LEN],
    };
    mac.update(body);
    let full = mac.finalize().into_bytes();
    let mut t = [0u8; TAG_LEN];
    t.copy_from_slice(&full[..TAG_LEN]);
    t
}

fn opt(v: Option<f64>) -> f64 {
    v.unwrap_or(f64::NAN)
}

fn back(v: f64) -> Option<f64> {
    (!v.is_nan()).then_some(v)
}

/// Append a feedback packet to `out` (cleared first), tagged with `key`.
pub fn emit_feedback(out: &mut Vec<u8>, f: &Feedback, key: &[u8]) {
    out.clear();
    header(out, 2, f.session);
    out.extend_from_slice(&f.number.to_be_bytes());
    out.extend_from_slice(&f.highest_seq.to_be_bytes());
    let r = &f.report;
    for v in [r.start.as_nanos(), r.end.as_nanos(), r.frames, r.packets, r.lost] {
        out.extend_from_slice(&v.to_be_bytes());
    }
    for v in [
        r.mean_agg,
        opt(r.corrected_agg),
        r.rx_rate_bps,
        opt(r.owd_mean_ms),
        opt(r.owd_p95_ms),
        opt(r.phy_rate_bps),
    ] {
        out.extend_from_slice(&v.to_bits().to_be_bytes());
    }
    let t = tag(key, out);
    out.extend_from_slice(&t);
}

/// Parse and verify a feedback packet of session `session` under `key`.
pub fn parse_feedback(b: &[u8], session: u32, key: &[u8]) -> Result<Feedback, WireError> {
    let (kind, s) = peek(b)?;
    if kind != Kind::Feedback {
        return Err(WireError::Kind(b[3]));
    }
    if b.len() != FEEDBACK_LEN {
        return Err(WireError::Short {
            len: b.len(),
            need: FEEDBACK_LEN,
            what: "a feedback packet (exactly)",
        });
    }
    if s != session {
        return Err(WireError::Session { got: s, want: session });
    }
    let body = &b[..FEEDBACK_LEN - TAG_LEN];
    let want = tag(key, body);
    // Constant-time comparison: no early exit on the first differing byte.
    let diff = want
        .iter()
        .zip(&b[FEEDBACK_LEN - TAG_LEN..])
        .fold(0u8, |a, (x, y)| a | (x ^ y));
    if diff != 0 {
        return Err(WireError::Tag);
    }
    let f = |o: usize| f64::from_bits(u64_at(b, o));
    let loss_den = u64_at(b, 56) + u64_at(b, 48);
    Ok(Feedback {
        session: s,
        number: u32_at(b, 12),
        highest_seq: u64_at(b, 16),
        report: AggReport {
            start: Ts(u64_at(b, 24)),
            end: Ts(u64_at(b, 32)),
            frames: u64_at(b, 40),
            packets: u64_at(b, 48),
            lost: u64_at(b, 56),
            loss_rate: if loss_den > 0 {
                u64_at(b, 56) as f64 / loss_den as f64
            } else {
                0.0
            },
            mean_agg: f(64),
            corrected_agg: back(f(72)),
            rx_rate_bps: f(80),
            owd_mean_ms: back(f(88)),
            owd_p95_ms: back(f(96)),
            phy_rate_bps: back(f(104)),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const KEY: &[u8] = b"session key of the test";

    fn report() -> AggReport {
        AggReport {
            start: Ts(1_000),
            end: Ts(501_000),
            frames: 500,
            packets: 16_000,
            mean_agg: 31.5,
            corrected_agg: Some(32.25),
            rx_rate_bps: 4.8e8,
            lost: 3,
            loss_rate: 3.0 / 16_003.0,
            owd_mean_ms: Some(1.5),
            owd_p95_ms: None,
            phy_rate_bps: Some(866.7e6),
        }
    }

    #[test]
    fn round_trips() {
        let mut b = Vec::new();
        let d = Data {
            session: 7,
            seq: 1 << 40,
            sent: Ts(123_456_789),
        };
        emit_data(&mut b, &d, 1000);
        assert_eq!(b.len(), 1028);
        assert_eq!(parse_data(&b, 7).unwrap(), (d, 1000));
        assert!(matches!(parse_data(&b, 8), Err(WireError::Session { got: 7, want: 8 })));
        let f = Feedback {
            session: 7,
            number: 9,
            highest_seq: 16_003,
            report: report(),
        };
        emit_feedback(&mut b, &f, KEY);
        assert_eq!(b.len(), FEEDBACK_LEN);
        let back = parse_feedback(&b, 7, KEY).unwrap();
        assert_eq!(back, f);
    }

    #[test]
    fn forged_or_damaged_feedback_is_refused() {
        let mut b = Vec::new();
        let f = Feedback {
            session: 7,
            number: 1,
            highest_seq: 5,
            report: report(),
        };
        emit_feedback(&mut b, &f, KEY);
        assert_eq!(parse_feedback(&b, 7, b"another key"), Err(WireError::Tag));
        for i in 12..FEEDBACK_LEN {
            let mut c = b.clone();
            c[i] ^= 1;
            assert_eq!(parse_feedback(&c, 7, KEY), Err(WireError::Tag), "byte {i}");
        }
        assert!(matches!(parse_feedback(&b[..50], 7, KEY), Err(WireError::Short { .. })));
        let mut c = b.clone();
        c[2] = 2;
        assert_eq!(parse_feedback(&c, 7, KEY), Err(WireError::Version(2)));
        assert_eq!(
            peek(&[1, 2, 3]).unwrap_err().to_string(),
            "packet of 3 bytes is too short: a header needs 12"
        );
    }

    proptest! {
        #[test]
        fn parsers_never_panic(b in proptest::collection::vec(any::<u8>(), 0..200), session in any::<u32>()) {
            let _ = peek(&b);
            let _ = parse_data(&b, session);
            let _ = parse_feedback(&b, session, KEY);
        }

        #[test]
        fn valid_prefixes_never_panic(cut in 0usize..FEEDBACK_LEN + 4) {
            let mut b = Vec::new();
            emit_feedback(&mut b, &Feedback { session: 1, number: 2, highest_seq: 3, report: report() }, KEY);
            b.resize(cut.max(1), 0);
            let _ = parse_feedback(&b[..cut.min(b.len())], 1, KEY);
        }
    }
}

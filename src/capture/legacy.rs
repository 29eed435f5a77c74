//! The radio headers older tools write before the 802.11 frame, mapped onto the same
//! [`Radiotap`] record (TSFT, rate, channel, signal, noise, A-MPDU):
//!
//! * **PPI** (link type 192; Kismet, older airodump-ng): an 8-byte header (version, flags,
//!   length, the inner DLT) and typed fields; read here: 802.11-common (type 2: TSF timer, flags,
//!   rate in 500 kb/s, channel MHz and flags, signal and noise dBm), 802.11n MAC (3) and MAC+PHY
//!   (4): their A-MPDU ID (when the flags say the frame is part of an aggregate) and MCS.
//! * **AVS** (163; capture header version 2): 64 bytes, big-endian: MAC time (µs), host time,
//!   PHY type, channel, data rate (100 kb/s), antenna, priority, SSI type, signal, noise.
//! * **Prism** (119; wlan-ng): 144 bytes: message code, length, device name and ten
//!   DID/status/length/value items (host time, MAC time, channel, RSSI, SQ, signal, noise,
//!   rate in 500 kb/s, is-TX, frame length); items whose status says "absent" are ignored, and
//!   the RSSI item is the signal in dBm, as Wireshark reads it.
//!
//! Each parser checks every length against the captured bytes and never panics.

use super::radiotap::{AmpduStatus, Radiotap};

/// Why a legacy radio header could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, thiserror::Error)]
#[error("{what} header: {why} (at byte {at})")]
pub struct LegacyError {
    /// PPI, AVS or Prism.
    pub what: &'static str,
    /// What is wrong.
    pub why: &'static str,
    /// Offset in the packet.
    pub at: usize,
}

fn le16(b: &[u8], o: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(o..o + 2)?.try_into().ok()?))
}
fn le32(b: &[u8], o: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?))
}
fn le64(b: &[u8], o: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?))
}
fn be32(b: &[u8], o: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(o..o + 4)?.try_into().ok()?))
}
fn be64(b: &[u8], o: usize) -> Option<u64> {
    Some(u64::from_be_bytes(b.get(o..o + 8)?.try_into().ok()?))
}

/// Channel number → MHz (2.4 and 5 GHz bands; a value that is already MHz passes through).
pub fn channel_to_mhz(ch: u32) -> Option<u16> {
    match ch {
        1..=13 => Some(2407 + 5 * ch as u16),
        14 => Some(2484),
        32..=196 => Some(5000 + 5 * ch as u16),
        2400..=7200 => Some(ch as u16),
        _ => None,
    }
}

/// PPI's inner link type (only 105, 802.11, is decoded further).
pub fn ppi_dlt(b: &[u8]) -> Option<u32> {
    le32(b, 4)
}

/// PPI: the radio fields and the header length (the 802.11 frame follows).
pub fn ppi(b: &[u8]) -> Result<Radiotap, LegacyError> {
    let err = |why, at| LegacyError { what: "PPI", why, at };
    let len = le16(b, 2).ok_or(err("shorter than 8 bytes", 0))? as usize;
    if b.len() < 8 || len < 8 || len > b.len() {
        return Err(err("length past the captured bytes", 2));
    }
    if b[0] != 0 {
        return Err(err("version is not 0", 0));
    }
    let mut r = Radiotap {
        len: len as u16,
        ..Radiotap::default()
    };
    let mut o = 8;
    while o + 4 <= len {
        let (ty, flen) = (le16(b, o).unwrap_or(0), le16(b, o + 2).unwrap_or(0) as usize);
        let d = o + 4;
        if d + flen > len {
            return Err(err("field length past the header", o + 2));
        }
        let f = &b[d..d + flen];
        match ty {
            // 802.11-common: TSF u64, flags u16, rate u16, freq u16, channel flags u16, FHSS
            // hopset u8, pattern u8, signal i8, noise i8.
            2 if flen >= 20 => {
                r.tsft = le64(f, 0);
                let flags = le16(f, 8).unwrap_or(0);
                // PPI flag 0x1: FCS present; 0x4: FCS invalid.
                let mut rf = 0u8;
                if flags & 0x1 != 0 {
                    rf |= super::radiotap::flags::FCS_AT_END;
                }
                if flags & 0x4 != 0 {
                    rf |= super::radiotap::flags::BAD_FCS;
                }
                r.flags = Some(rf);
                r.rate_500k = le16(f, 10).filter(|&v| v != 0).map(|v| v.min(255) as u8);
                r.channel_mhz = le16(f, 12).filter(|&v| v != 0);
                r.channel_flags = le16(f, 14);
                // -128 (0x80) is PPI's "not present".
                r.signal_dbm = Some(f[18] as i8).filter(|&v| v != -128);
                r.noise_dbm = Some(f[19] as i8).filter(|&v| v != -128);
            }
            // 802.11n MAC (flags u32, A-MPDU ID u32, delimiters u8, 3 reserved) and MAC+PHY (flags,
            // A-MPDU ID, delimiters, MCS u8, streams u8, …). Flags: 0x2 40 MHz, 0x4 short GI,
            // 0x10 part of an aggregate, 0x20 more subframes follow.
            3 | 4 if flen >= 12 => {
                let flags = le32(f, 0).unwrap_or(0);
                if flags & 0x10 != 0 {
                    r.ampdu = Some(AmpduStatus {
                        reference: le32(f, 4).unwrap_or(0),
                        // Radiotap's "last subframe is known" (0x4) and "this is the last" (0x8).
                        flags: 0x4 | if flags & 0x20 == 0 { 0x8 } else { 0 },
                    });
                }
                if ty == 4 && f.len() >= 11 && f[10] != 0 {
                    r.ht = Some(super::radiotap::HtMcs {
                        index: Some(f[9]),
                        bw_mhz: Some(if flags & 0x2 != 0 { 40 } else { 20 }),
                        short_gi: Some(flags & 0x4 != 0),
                    });
                }
            }
            _ => {}
        }
        o = d + flen;
    }
    Ok(r)
}

/// AVS (version 2): 64 bytes, big-endian.
pub fn avs(b: &[u8]) -> Result<Radiotap, LegacyError> {
    let err = |why, at| LegacyError { what: "AVS", why, at };
    let version = be32(b, 0).ok_or(err("shorter than 8 bytes", 0))?;
    if version & 0xFFFF_FF00 != 0x8021_1000 {
        return Err(err("not an AVS capture header (version 0x802110xx)", 0));
    }
    let len = be32(b, 4).ok_or(err("shorter than 8 bytes", 4))? as usize;
    if !(64..=b.len()).contains(&len) {
        return Err(err("length below 64 or past the captured bytes", 4));
    }
    let channel = be32(b, 28).unwrap_or(0);
    let rate_100k = be32(b, 32).unwrap_or(0);
    let ssi_type = be32(b, 44).unwrap_or(0);
    let dbm = |v: u32| (ssi_type == 2 && v as i32 >= -128 && v as i32 <= 127).then_some(v as i32 as i8);
    Ok(Radiotap {
        len: len as u16,
        tsft: be64(b, 8),
        rate_500k: (rate_100k > 0).then(|| (rate_100k / 5).min(255) as u8),
        channel_mhz: (channel > 0).then(|| channel_to_mhz(channel)).flatten(),
        signal_dbm: be32(b, 48).and_then(dbm),
        noise_dbm: be32(b, 52).and_then(dbm),
        ..Radiotap::default()
    })
}

/// Prism (wlan-ng): 144 bytes.
pub fn prism(b: &[u8]) -> Result<Radiotap, LegacyError> {
    let err = |why, at| LegacyError { what: "Prism", why, at };
    let len = le32(b, 4).ok_or(err("shorter than 8 bytes", 0))? as usize;
    if len != 144 || b.len() < 144 {
        return Err(err("message length is not 144 or past the captured bytes", 4));
    }
    let mut r = Radiotap {
        len: 144,
        ..Radiotap::default()
    };
    // Ten items of DID (u32), status (u16: 0 = present), length (u16), value (u32) from byte 24.
    for k in 0..10 {
        let o = 24 + 12 * k;
        let (status, data) = (le16(b, o + 4).unwrap_or(1), le32(b, o + 8).unwrap_or(0));
        if status != 0 {
            continue;
        }
        match k {
            1 => r.tsft = Some(data as u64),
            2 => r.channel_mhz = channel_to_mhz(data),
            // As Wireshark reads it: the RSSI item is the signal in dBm.
            3 => r.signal_dbm = Some(data as i32).filter(|v| (-128..=127).contains(v)).map(|v| v as i8),
            6 => r.noise_dbm = Some(data as i32).filter(|v| (-128..=127).contains(v)).map(|v| v as i8),
            7 => r.rate_500k = (data > 0).then(|| data.min(255) as u8),
            _ => {}
        }
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_and_inconsistent_headers_are_refused_never_a_panic() {
        for n in 0..200 {
            let b = vec![0x55u8; n];
            let _ = ppi(&b);
            let _ = avs(&b);
            let _ = prism(&b);
        }
        assert_eq!(
            ppi(&[0, 0, 200, 0, 105, 0, 0, 0]).unwrap_err().why,
            "length past the captured bytes"
        );
        let mut h = vec![0u8; 8];
        h[2] = 8;
        h.extend_from_slice(&[2, 0, 40, 0]);
        let mut b = h.clone();
        b[2] = 12;
        assert_eq!(ppi(&b).unwrap_err().why, "field length past the header");
    }
}

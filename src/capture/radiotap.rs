//! Checked radiotap header parser (<https://www.radiotap.org>).
//!
//! Input: the bytes of one captured frame with link type 127. Output: a [`Radiotap`] with the
//! fields aggrate uses (TSFT, Flags, Rate, Channel, antenna signal/noise, HT MCS, A-MPDU status,
//! VHT, HE) and the header length, or a [`RadiotapError`] that names the offending field and
//! offset. No clock, no IO, no panics on any input.
//!
//! Rules implemented (as the Linux kernel's iterator does):
//! * presence words chain through bit 31; bit 29 switches (back) to the radiotap namespace and
//!   restarts field numbering at 0, bit 30 enters a vendor namespace whose 6-byte header
//!   (OUI, sub-namespace, skip length; 2-aligned) says how many data bytes to skip;
//! * each field is aligned to its natural size relative to the start of the header;
//! * parsing stops cleanly at the first field of the radiotap namespace whose size is unknown
//!   (including the TLV bit 28); everything before it is kept and [`Radiotap::stopped_at`] says
//!   where.

use super::le;

/// Radiotap flags (field 1) bits.
pub mod flags {
    /// Frame includes the FCS at its end.
    pub const FCS_AT_END: u8 = 0x10;
    /// 802.11 header is padded to a 32-bit boundary.
    pub const DATA_PAD: u8 = 0x20;
    /// Frame failed the FCS check.
    pub const BAD_FCS: u8 = 0x40;
    /// Sent with a short guard interval (legacy/HT field).
    pub const SHORT_GI: u8 = 0x80;
}

/// HT MCS field (radiotap field 19).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct HtMcs {
    /// MCS index 0–76 (if `known` bit 1 set).
    pub index: Option<u8>,
    /// Bandwidth in MHz (20 or 40) if known.
    pub bw_mhz: Option<u16>,
    /// Short guard interval, if known.
    pub short_gi: Option<bool>,
}

/// A-MPDU status field (radiotap field 20).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct AmpduStatus {
    /// Reference number: equal for all subframes of one A-MPDU (per device and channel).
    pub reference: u32,
    /// Raw flags.
    pub flags: u16,
}

impl AmpduStatus {
    /// `Some(true)` if this is the last subframe, `None` if the driver does not say.
    pub fn is_last(&self) -> Option<bool> {
        (self.flags & 0x0004 != 0).then_some(self.flags & 0x0008 != 0)
    }
}

/// VHT field (radiotap field 21), user 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Vht {
    /// MCS of user 0.
    pub mcs: u8,
    /// Spatial streams of user 0 (0 = user not present).
    pub nss: u8,
    /// Bandwidth in MHz if known.
    pub bw_mhz: Option<u16>,
    /// Short GI if known.
    pub short_gi: Option<bool>,
}

/// HE field (radiotap field 23), the data-part values we need.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct He {
    /// PPDU format: 0 SU, 1 extended-range SU, 2 MU, 3 trigger-based.
    pub format: u8,
    /// Data MCS if known.
    pub mcs: Option<u8>,
    /// NSTS (data6 bits 0–3); streams when no STBC.
    pub nsts: u8,
    /// Data bandwidth / RU allocation code (0–15) if known.
    pub bw_ru: Option<u8>,
    /// GI code (0: 0.8 µs, 1: 1.6 µs, 2: 3.2 µs) if known.
    pub gi: Option<u8>,
}

/// The radiotap fields aggrate uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Radiotap {
    /// Header length (`it_len`): where the 802.11 frame starts.
    pub len: u16,
    /// TSFT in µs.
    pub tsft: Option<u64>,
    /// Flags byte.
    pub flags: Option<u8>,
    /// Legacy rate in 500 kb/s units.
    pub rate_500k: Option<u8>,
    /// Channel frequency (MHz).
    pub channel_mhz: Option<u16>,
    /// Channel flags.
    pub channel_flags: Option<u16>,
    /// First dBm antenna signal (the combined one when several antennas are reported).
    pub signal_dbm: Option<i8>,
    /// First dBm antenna noise.
    pub noise_dbm: Option<i8>,
    /// HT MCS.
    pub ht: Option<HtMcs>,
    /// A-MPDU status.
    pub ampdu: Option<AmpduStatus>,
    /// VHT.
    pub vht: Option<Vht>,
    /// HE.
    pub he: Option<He>,
    /// Radiotap field index at which parsing stopped because its layout is unknown.
    pub stopped_at: Option<u8>,
}

/// Why a radiotap header could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RadiotapError {
    /// Fewer than 8 bytes captured.
    #[error("radiotap header needs 8 bytes, frame has {len}")]
    TooShort {
        /// Captured length.
        len: usize,
    },
    /// Version byte is not 0.
    #[error("radiotap version {version} (only 0 exists)")]
    BadVersion {
        /// The version byte.
        version: u8,
    },
    /// `it_len` is below the minimum or past the captured bytes.
    #[error("radiotap length {it_len} past the {caplen} captured bytes (or below 8)")]
    BadLength {
        /// Header length field.
        it_len: u16,
        /// Captured length.
        caplen: usize,
    },
    /// A presence word or field does not fit in `it_len`.
    #[error("radiotap {what} at header offset {offset} needs {size} bytes past the {it_len}-byte header")]
    FieldPastHeader {
        /// What did not fit.
        what: &'static str,
        /// Offset inside the header.
        offset: usize,
        /// Its size.
        size: usize,
        /// Header length.
        it_len: u16,
    },
    /// More presence words than any real capture carries.
    #[error("radiotap header chains more than {max} presence words")]
    TooManyPresenceWords {
        /// The limit.
        max: usize,
    },
}

/// (alignment, size) of radiotap namespace fields 0..=27.
const FIELD_LAYOUT: [(u8, u8); 28] = [
    (8, 8),  // 0 TSFT
    (1, 1),  // 1 Flags
    (1, 1),  // 2 Rate
    (2, 4),  // 3 Channel
    (2, 2),  // 4 FHSS
    (1, 1),  // 5 dBm antenna signal
    (1, 1),  // 6 dBm antenna noise
    (2, 2),  // 7 Lock quality
    (2, 2),  // 8 TX attenuation
    (2, 2),  // 9 dB TX attenuation
    (1, 1),  // 10 dBm TX power
    (1, 1),  // 11 Antenna
    (1, 1),  // 12 dB antenna signal
    (1, 1),  // 13 dB antenna noise
    (2, 2),  // 14 RX flags
    (2, 2),  // 15 TX flags
    (1, 1),  // 16 RTS retries
    (1, 1),  // 17 data retries
    (4, 8),  // 18 XChannel
    (1, 3),  // 19 MCS
    (4, 8),  // 20 A-MPDU status
    (2, 12), // 21 VHT
    (8, 12), // 22 timestamp
    (2, 12), // 23 HE
    (2, 12), // 24 HE-MU
    (2, 6),  // 25 HE-MU-other-user
    (1, 1),  // 26 0-length PSDU
    (2, 4),  // 27 L-SIG
];

const MAX_PRESENCE_WORDS: usize = 16;

fn align_up(pos: usize, align: usize) -> usize {
    (pos + align - 1) & !(align - 1)
}

fn vht_bw_mhz(code: u8) -> Option<u16> {
    Some(match code {
        0 => 20,
        1..=3 => 40,
        4..=10 => 80,
        11..=25 => 160,
        _ => return None,
    })
}

/// Parse the radiotap header at the start of `frame`.
pub fn parse(frame: &[u8]) -> Result<Radiotap, RadiotapError> {
    let mut out = Radiotap::default();
    parse_into(frame, &mut out)?;
    Ok(out)
}

/// [`parse`] into an existing value (overwritten; unspecified on error).
pub fn parse_into(frame: &[u8], out: &mut Radiotap) -> Result<(), RadiotapError> {
    if frame.len() < 8 {
        return Err(RadiotapError::TooShort { len: frame.len() });
    }
    if frame[0] != 0 {
        return Err(RadiotapError::BadVersion { version: frame[0] });
    }
    let it_len = le::u16(frame, 2).unwrap_or(0);
    if (it_len as usize) < 8 || it_len as usize > frame.len() {
        return Err(RadiotapError::BadLength {
            it_len,
            caplen: frame.len(),
        });
    }
    let hdr = &frame[..it_len as usize];

    // Presence words.
    let mut words = [0u32; MAX_PRESENCE_WORDS];
    let mut n_words = 0;
    let mut pos = 4;
    loop {
        let w = le::u32(hdr, pos).ok_or(RadiotapError::FieldPastHeader {
            what: "presence word",
            offset: pos,
            size: 4,
            it_len,
        })?;
        if n_words == MAX_PRESENCE_WORDS {
            return Err(RadiotapError::TooManyPresenceWords {
                max: MAX_PRESENCE_WORDS,
            });
        }
        words[n_words] = w;
        n_words += 1;
        pos += 4;
        if w & (1 << 31) == 0 {
            break;
        }
    }

    *out = Radiotap {
        len: it_len,
        ..Radiotap::default()
    };
    let mut in_vendor = false;
    let mut vendor_end = 0usize;
    let mut bit_base = 0u32;
    let mut stopped = false;
    for &w in &words[..n_words] {
        if !in_vendor && !stopped {
            // Visit only the set field bits (0..=28), lowest first.
            let mut bits = w & 0x1fff_ffff;
            while bits != 0 {
                let bit = bits.trailing_zeros();
                bits &= bits - 1;
                let field = bit_base + bit;
                let Some(&(align, size)) = FIELD_LAYOUT.get(field as usize) else {
                    out.stopped_at = Some(field.min(255) as u8);
                    stopped = true;
                    break;
                };
                pos = align_up(pos, align as usize);
                let data = hdr
                    .get(pos..pos + size as usize)
                    .ok_or(RadiotapError::FieldPastHeader {
                        what: FIELD_NAMES[field as usize],
                        offset: pos,
                        size: size as usize,
                        it_len,
                    })?;
                decode_field(out, field, data);
                pos += size as usize;
            }
        }
        if w & (1 << 29) != 0 {
            if in_vendor {
                pos = vendor_end;
            }
            in_vendor = false;
            bit_base = 0;
        } else if w & (1 << 30) != 0 {
            if in_vendor {
                pos = vendor_end;
            }
            pos = align_up(pos, 2);
            let skip = le::u16(hdr, pos + 4).ok_or(RadiotapError::FieldPastHeader {
                what: "vendor namespace header",
                offset: pos,
                size: 6,
                it_len,
            })? as usize;
            vendor_end = pos + 6 + skip;
            if vendor_end > hdr.len() {
                return Err(RadiotapError::FieldPastHeader {
                    what: "vendor namespace data",
                    offset: pos + 6,
                    size: skip,
                    it_len,
                });
            }
            pos += 6;
            in_vendor = true;
            bit_base = 0;
        } else {
            bit_base += 32;
        }
    }
    Ok(())
}

const FIELD_NAMES: [&str; 28] = [
    "TSFT",
    "Flags",
    "Rate",
    "Channel",
    "FHSS",
    "antenna signal",
    "antenna noise",
    "lock quality",
    "TX attenuation",
    "dB TX attenuation",
    "TX power",
    "Antenna",
    "dB antenna signal",
    "dB antenna noise",
    "RX flags",
    "TX flags",
    "RTS retries",
    "data retries",
    "XChannel",
    "MCS",
    "A-MPDU status",
    "VHT",
    "timestamp",
    "HE",
    "HE-MU",
    "HE-MU-other-user",
    "0-length PSDU",
    "L-SIG",
];

fn decode_field(out: &mut Radiotap, field: u32, d: &[u8]) {
    // `d` has exactly the field's size (checked by the caller), so indexing below is in bounds.
    match field {
        0 => out.tsft = le::u64(d, 0),
        1 => out.flags = Some(d[0]),
        2 => out.rate_500k = Some(d[0]),
        3 => {
            out.channel_mhz = le::u16(d, 0);
            out.channel_flags = le::u16(d, 2);
        }
        5 => out.signal_dbm = out.signal_dbm.or(Some(d[0] as i8)),
        6 => out.noise_dbm = out.noise_dbm.or(Some(d[0] as i8)),
        19 => {
            let (known, fl, mcs) = (d[0], d[1], d[2]);
            out.ht = Some(HtMcs {
                index: (known & 0x02 != 0).then_some(mcs),
                bw_mhz: (known & 0x01 != 0).then_some(if fl & 0x03 == 1 { 40 } else { 20 }),
                short_gi: (known & 0x04 != 0).then_some(fl & 0x04 != 0),
            });
        }
        20 => {
            out.ampdu = Some(AmpduStatus {
                reference: le::u32(d, 0).unwrap_or(0),
                flags: le::u16(d, 4).unwrap_or(0),
            })
        }
        21 => {
            let known = le::u16(d, 0).unwrap_or(0);
            let fl = d[2];
            let bw = d[3];
            let mcs_nss = d[4];
            out.vht = Some(Vht {
                mcs: mcs_nss >> 4,
                nss: mcs_nss & 0x0f,
                bw_mhz: if known & 0x0040 != 0 {
                    vht_bw_mhz(bw & 0x1f)
                } else {
                    None
                },
                short_gi: (known & 0x0004 != 0).then_some(fl & 0x04 != 0),
            });
        }
        23 => {
            let w = |i: usize| le::u16(d, 2 * i).unwrap_or(0);
            let (d1, d2, d3, d5, d6) = (w(0), w(1), w(2), w(4), w(5));
            out.he = Some(He {
                format: (d1 & 0x3) as u8,
                mcs: (d1 & 0x0020 != 0).then_some(((d3 >> 8) & 0x0f) as u8),
                nsts: (d6 & 0x0f) as u8,
                bw_ru: (d1 & 0x4000 != 0).then_some((d5 & 0x0f) as u8),
                gi: (d2 & 0x0002 != 0).then_some(((d5 >> 4) & 0x03) as u8),
            });
        }
        _ => {}
    }
}

impl Radiotap {
    /// Whether the Flags field says the frame ends with a 4-byte FCS.
    pub fn has_fcs(&self) -> bool {
        self.flags.is_some_and(|f| f & flags::FCS_AT_END != 0)
    }
    /// Whether the 802.11 header is padded to 4 bytes.
    pub fn data_pad(&self) -> bool {
        self.flags.is_some_and(|f| f & flags::DATA_PAD != 0)
    }
    /// Whether the frame failed its FCS check.
    pub fn bad_fcs(&self) -> bool {
        self.flags.is_some_and(|f| f & flags::BAD_FCS != 0)
    }

    /// PHY data rate in bit/s from HE, VHT, HT or legacy rate (in that order of preference).
    pub fn phy_rate_bps(&self) -> Option<u64> {
        use crate::phy::{self, Bandwidth, HeGi};
        if let Some(he) = self.he {
            let mcs = he.mcs?;
            let tones = phy::he_ru_data_tones(he.bw_ru.unwrap_or(0))?;
            let gi = match he.gi.unwrap_or(0) {
                0 => HeGi::Us0_8,
                1 => HeGi::Us1_6,
                _ => HeGi::Us3_2,
            };
            return phy::he_rate_bps(mcs, he.nsts.max(1), tones, gi);
        }
        if let Some(v) = self.vht {
            let bw = Bandwidth::from_mhz(v.bw_mhz.unwrap_or(20) as u32)?;
            return phy::vht_rate_bps(v.mcs, v.nss, bw, v.short_gi.unwrap_or(false));
        }
        if let Some(h) = self.ht {
            let bw = Bandwidth::from_mhz(h.bw_mhz.unwrap_or(20) as u32)?;
            return phy::ht_rate_bps(h.index?, bw, h.short_gi.unwrap_or(false));
        }
        self.rate_500k.map(|r| r as u64 * 500_000)
    }

    /// Short guard interval from VHT, HT or the legacy flag.
    pub fn short_gi(&self) -> bool {
        self.vht
            .and_then(|v| v.short_gi)
            .or(self.ht.and_then(|h| h.short_gi))
            .unwrap_or_else(|| self.flags.is_some_and(|f| f & flags::SHORT_GI != 0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hdr(present: &[u32], fields: &[u8]) -> Vec<u8> {
        let mut v = vec![0u8, 0, 0, 0];
        for p in present {
            v.extend_from_slice(&p.to_le_bytes());
        }
        v.extend_from_slice(fields);
        let len = v.len() as u16;
        v[2..4].copy_from_slice(&len.to_le_bytes());
        v
    }

    #[test]
    fn tsft_is_aligned_to_eight() {
        // present: TSFT only; 8-byte header end is already aligned.
        let h = hdr(&[1], &42u64.to_le_bytes());
        let r = parse(&h).unwrap();
        assert_eq!(r.tsft, Some(42));
        // Flags + TSFT order is by bit: TSFT(0) first, then flags(1).
        let mut f = 7u64.to_le_bytes().to_vec();
        f.push(0x10);
        let r = parse(&hdr(&[0b11], &f)).unwrap();
        assert_eq!((r.tsft, r.flags), (Some(7), Some(0x10)));
        assert!(r.has_fcs());
        // With an extended presence word, TSFT is padded from offset 12 to 16.
        let mut f = vec![0u8; 4];
        f.extend_from_slice(&99u64.to_le_bytes());
        let r = parse(&hdr(&[1 | 1 << 31 | 1 << 29, 0], &f)).unwrap();
        assert_eq!(r.tsft, Some(99));
    }

    #[test]
    fn unknown_field_stops_cleanly() {
        // Flags, then bit 28 (TLV) → stop after flags.
        let h = hdr(&[1 << 1 | 1 << 28], &[0x02, 1, 2, 3]);
        let r = parse(&h).unwrap();
        assert_eq!(r.flags, Some(0x02));
        assert_eq!(r.stopped_at, Some(28));
    }

    #[test]
    fn vendor_namespace_is_skipped() {
        // word0: flags + vendor ns; word1 (vendor): some bits; ext → word2: radiotap ns with rate.
        let w0 = 1 << 1 | 1 << 30 | 1 << 31;
        let w1 = 0b1 | 1 << 29 | 1 << 31;
        let w2 = 1 << 2;
        // data: flags(1) @16, pad to 18, vendor hdr OUI(3) sub(1) skip=3 → 24, 3 vendor bytes → 27,
        // then rate(1) @27.
        let fields = [0x10, 0, 0x00, 0x11, 0x22, 0, 3, 0, 0xaa, 0xbb, 0xcc, 12];
        let r = parse(&hdr(&[w0, w1, w2], &fields)).unwrap();
        assert_eq!(r.flags, Some(0x10));
        assert_eq!(r.rate_500k, Some(12));
    }

    #[test]
    fn errors_name_the_problem() {
        assert_eq!(parse(&[0, 0, 8]), Err(RadiotapError::TooShort { len: 3 }));
        assert!(matches!(
            parse(&[1, 0, 8, 0, 0, 0, 0, 0]),
            Err(RadiotapError::BadVersion { .. })
        ));
        let mut h = hdr(&[1], &42u64.to_le_bytes());
        h[2] = 200;
        assert!(matches!(parse(&h), Err(RadiotapError::BadLength { it_len: 200, .. })));
        // TSFT announced but header too short.
        let h = hdr(&[1], &[1, 2, 3]);
        assert!(matches!(
            parse(&h),
            Err(RadiotapError::FieldPastHeader { what: "TSFT", .. })
        ));
        let h = hdr(&[1 << 31; 20], &[]);
        assert!(matches!(
            parse(&h),
            Err(RadiotapError::TooManyPresenceWords { .. }) | Err(RadiotapError::FieldPastHeader { .. })
        ));
    }
}

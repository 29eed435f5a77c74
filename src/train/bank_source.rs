//! Where a bank of receivers comes from, checked: its manifest (given, or the embedded
//! datasets/bank.toml), how many neighbours set a threshold and how near they must be, and the
//! receiver's WLAN it is emulated at — what `calibrate --no-labels` and `train --self-calibrate`
//! share. Also the send rate of each capture a bank is matched at.

use std::path::{Path, PathBuf};

use super::bank::{parse_manifest, Likeness, DEFAULT_BANK, DEFAULT_MAX_DISTANCE, MIN_GAPS};
use crate::dataset::Dataset;
use crate::wlan::manifest::{DatasetManifest, WlanSettings};

/// A bank's source that cannot be used; messages name the flag or file.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// No neighbour would set a threshold.
    #[error("--neighbours 0: at least one bank receiver must set each threshold")]
    NoNeighbours,
    /// The distance limit is not a distance.
    #[error("--max-distance {0}: a distance is ≥ 0 (inf: no limit)")]
    Distance(f64),
    /// The manifest cannot be read.
    #[error("reading {}: {source}", path.display())]
    Read {
        /// The manifest.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The manifest is not a dataset manifest.
    #[error("{name}: invalid bank manifest: {source}")]
    Parse {
        /// The manifest, for messages.
        name: String,
        /// Why.
        source: Box<toml::de::Error>,
    },
    /// The receiver's WLAN cannot be applied to the bank.
    #[error("{name}: the bank's WLAN (--mcs / --nss / --bw / --ip-len): {source}")]
    Wlan {
        /// The manifest, for messages.
        name: String,
        /// Why.
        source: crate::wlan::config::ConfigError,
    },
    /// A capture is too short to summarise.
    #[error("{}: {rows} rows; calibrating without labels summarises the receiver's timing over {} packets or more", path.display(), MIN_GAPS + 1)]
    Short {
        /// The capture.
        path: PathBuf,
        /// Its rows.
        rows: usize,
    },
    /// A capture's receive times span no time, and no rate was given.
    #[error("{}: its receive times span no time; give its send rate with --rate", path.display())]
    NoSpan {
        /// The capture.
        path: PathBuf,
    },
}

/// Where a bank comes from and the WLAN it is emulated at.
#[derive(Clone, Debug, Default)]
pub struct BankSource {
    /// A dataset manifest of model receivers (None: datasets/bank.toml, embedded).
    pub manifest: Option<PathBuf>,
    /// Bank receivers nearest each capture whose rows set its threshold.
    pub neighbours: usize,
    /// A capture whose nearest bank receiver lies farther keeps the model's own threshold
    /// (None: 3 spreads for the emulated bank, no limit for measured receivers).
    pub max_distance: Option<f64>,
    /// The receiver's WLAN (unset fields: the bank's own).
    pub wlan: WlanSettings,
}

impl BankSource {
    /// The distance limit, if given, is a distance.
    pub fn check_distance(&self) -> Result<(), SourceError> {
        match self.max_distance {
            Some(d) if d.is_nan() || d < 0.0 => Err(SourceError::Distance(d)),
            _ => Ok(()),
        }
    }

    /// The likeness asked for, for the emulated bank.
    pub fn likeness(&self) -> Likeness {
        Likeness {
            k: self.neighbours,
            max_distance: self.max_distance.unwrap_or(DEFAULT_MAX_DISTANCE),
        }
    }

    /// The likeness asked for, for a bank of `k` measured receivers (no distance limit unless
    /// given).
    pub fn measured_likeness(&self, k: usize) -> Likeness {
        Likeness {
            k,
            max_distance: self.max_distance.unwrap_or(f64::INFINITY),
        }
    }

    /// The bank's manifest at the receiver's WLAN, and a name for messages.
    pub fn manifest(&self) -> Result<(DatasetManifest, String), SourceError> {
        if self.neighbours == 0 {
            return Err(SourceError::NoNeighbours);
        }
        self.check_distance()?;
        let (text, name) = match &self.manifest {
            Some(p) => (
                std::fs::read_to_string(p).map_err(|source| SourceError::Read {
                    path: p.clone(),
                    source,
                })?,
                p.display().to_string(),
            ),
            None => (DEFAULT_BANK.to_string(), "datasets/bank.toml (embedded)".to_string()),
        };
        let mut manifest = parse_manifest(&text).map_err(|e| SourceError::Parse {
            name: name.clone(),
            source: Box::new(e),
        })?;
        self.wlan.apply(&mut manifest).map_err(|source| SourceError::Wlan {
            name: name.clone(),
            source,
        })?;
        Ok((manifest, name))
    }

    /// This source with the WLAN the inputs show (`seen`) wherever it leaves the WLAN open, and
    /// what was taken from them, in words. MCS, streams and width come together from radiotap,
    /// or not at all; an IP length only within 64–9000 bytes.
    pub fn with_seen(&self, seen: WlanSettings) -> (BankSource, Vec<String>) {
        let mut a = self.clone();
        let mut said = Vec::new();
        if let Some(l) = seen
            .ip_len
            .filter(|l| a.wlan.ip_len.is_none() && (64..=9000).contains(l))
        {
            a.wlan.ip_len = Some(l);
            said.push(format!("{l}-byte packets (the flow's most common IP length)"));
        }
        let w = &mut a.wlan;
        if let (Some(mcs), Some(nss), (None, None, None)) = (seen.mcs, seen.nss, (w.mcs, w.nss, w.bw_mhz)) {
            (w.mcs, w.nss, w.bw_mhz) = (Some(mcs), Some(nss), seen.bw_mhz);
            let only_radio = WlanSettings { ip_len: None, ..seen };
            said.push(format!("{} (the radiotap headers)", only_radio.describe()));
        }
        (a, said)
    }
}

/// Each input's send rate into its rows (group g = `files[g]`): `rates` (one for all, or one per
/// input), else the rate its name tagged the rows with, else its packet rate at `bytes` per
/// packet. A capture too short to summarise is refused, naming it. Returns, per input whose rate
/// came from its packet rate, (input, rate in Mb/s), for the caller to say so.
pub fn set_rates(
    rates: &[f64],
    files: &[&Path],
    data: &mut Dataset,
    bytes: u16,
) -> Result<Vec<(usize, f64)>, SourceError> {
    let mut guessed = Vec::new();
    let all: Vec<usize> = (0..data.len()).collect();
    for run in data.runs(&all) {
        let g = data.group[run.start] as usize;
        if run.len() <= MIN_GAPS {
            return Err(SourceError::Short {
                path: files[g].to_path_buf(),
                rows: run.len(),
            });
        }
        let tagged = data.rate_mbps[run.start];
        let rate = if let Some(r) = rates.get(if rates.len() == 1 { 0 } else { g }) {
            *r
        } else if tagged.is_finite() {
            tagged as f64
        } else {
            let (t0, t1) = (data.host[run.start], data.host[run.end - 1]);
            let secs = t1.0.saturating_sub(t0.0) as f64 / 1e9;
            if secs <= 0.0 {
                return Err(SourceError::NoSpan {
                    path: files[g].to_path_buf(),
                });
            }
            let r = ((run.len() - 1) as f64 * bytes as f64 * 8.0 / secs / 1e6)
                .round()
                .max(1.0);
            guessed.push((g, r));
            r
        };
        data.rate_mbps[run].iter_mut().for_each(|x| *x = rate as f32);
    }
    Ok(guessed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seen_wlan_fills_only_what_is_open() {
        let src = BankSource {
            neighbours: 3,
            wlan: WlanSettings {
                ip_len: Some(1200),
                ..WlanSettings::default()
            },
            ..BankSource::default()
        };
        let seen = WlanSettings {
            ip_len: Some(800),
            mcs: Some(3),
            nss: Some(1),
            bw_mhz: Some(80),
        };
        let (a, said) = src.with_seen(seen);
        assert_eq!(
            (a.wlan.ip_len, a.wlan.mcs, a.wlan.nss, a.wlan.bw_mhz),
            (Some(1200), Some(3), Some(1), Some(80))
        );
        assert_eq!(said.len(), 1, "{said:?}");
        // A given MCS keeps the radio settings closed.
        let src = BankSource {
            wlan: WlanSettings {
                mcs: Some(9),
                ..WlanSettings::default()
            },
            ..src
        };
        let (a, _) = src.with_seen(seen);
        assert_eq!((a.wlan.mcs, a.wlan.nss, a.wlan.ip_len), (Some(9), None, Some(800)));
    }

    #[test]
    fn sources_are_checked() {
        let mut s = BankSource::default();
        assert!(matches!(s.manifest(), Err(SourceError::NoNeighbours)));
        s.neighbours = 2;
        s.max_distance = Some(-1.0);
        assert_eq!(
            s.manifest().unwrap_err().to_string(),
            "--max-distance -1: a distance is ≥ 0 (inf: no limit)"
        );
        s.max_distance = None;
        let (m, name) = s.manifest().unwrap();
        assert!(name.contains("embedded") && !m.receivers.is_empty());
    }

    #[test]
    fn rates_from_names_flags_or_packet_rates() {
        let mut d = Dataset::new(1);
        // Group 0: tagged 300 Mb/s; group 1: untagged, 1000 packets of 1500 B over 30 ms.
        for i in 0..MIN_GAPS as u64 + 2 {
            d.push_at(crate::time::Ts(i * 1000), &[1.0], false, 0, 300.0, 1);
        }
        for i in 0..1000u64 {
            d.push_at(crate::time::Ts(i * 30_000), &[1.0], false, 1, f32::NAN, 1);
        }
        let files = [Path::new("a_300mbps.pcap"), Path::new("b.pcap")];
        let guessed = set_rates(&[], &files, &mut d, 1500).unwrap();
        assert_eq!(guessed, [(1, 400.0)]);
        assert_eq!((d.rate_mbps[0], *d.rate_mbps.last().unwrap()), (300.0, 400.0));
        assert_eq!(set_rates(&[100.0], &files, &mut d, 1500).unwrap(), []);
        assert!(d.rate_mbps.iter().all(|r| *r == 100.0));
    }
}

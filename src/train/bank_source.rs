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
    /// A receiver's bank cannot be made.
    #[error("the bank for receiver {receiver}'s WLAN: {source}")]
    Receiver {
        /// The receiver.
        receiver: String,
        /// Why.
        source: Box<SourceError>,
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

/// The banks that self-calibrating every receiver takes: one per distinct WLAN (first seen
/// first), made from a source with that WLAN filled in ([`BankSource::with_seen`]).
#[derive(Clone, Debug)]
pub struct WlanBanks {
    /// Per bank: its WLAN, its source, its receivers (indices) and the distinct send rates of
    /// their rows (ascending), at which it is emulated.
    pub banks: Vec<(WlanSettings, BankSource, Vec<usize>, Vec<f64>)>,
    /// Per receiver, its bank's index.
    pub of_receiver: Vec<usize>,
}

impl WlanBanks {
    /// Group receivers `names` by the WLAN `base` takes with each one's `seen` WLAN (its flow's
    /// packet size and radiotap VHT settings, as `calibrate --no-labels` reads them); each
    /// bank's rates are those of its receivers' rows in `data` (`receiver_of_row`).
    pub fn group(
        base: &BankSource,
        names: &[String],
        seen: &[WlanSettings],
        data: &Dataset,
        receiver_of_row: &dyn Fn(usize) -> Option<usize>,
    ) -> Result<WlanBanks, SourceError> {
        let mut banks: Vec<(WlanSettings, BankSource, Vec<usize>, Vec<f64>)> = Vec::new();
        let mut of_receiver = Vec::with_capacity(names.len());
        for (r, (name, seen)) in names.iter().zip(seen).enumerate() {
            let (source, _) = base.with_seen(*seen);
            let (manifest, _) = source.manifest().map_err(|e| SourceError::Receiver {
                receiver: name.clone(),
                source: Box::new(e),
            })?;
            let wlan = WlanSettings::of(&manifest);
            let b = match banks.iter().position(|b| b.0 == wlan) {
                Some(b) => b,
                None => {
                    banks.push((wlan, source, Vec::new(), Vec::new()));
                    banks.len() - 1
                }
            };
            banks[b].2.push(r);
            of_receiver.push(b);
        }
        for (b, bank) in banks.iter_mut().enumerate() {
            bank.3 = distinct_rates(
                (0..data.len())
                    .filter(|&i| receiver_of_row(i).map(|r| of_receiver[r]) == Some(b))
                    .map(|i| data.rate_mbps[i]),
            );
        }
        Ok(WlanBanks { banks, of_receiver })
    }
}

/// The distinct finite send rates among `rates`, ascending.
pub fn distinct_rates(rates: impl Iterator<Item = f32>) -> Vec<f64> {
    let mut v: Vec<f64> = rates.filter(|r| r.is_finite()).map(f64::from).collect();
    v.sort_unstable_by(f64::total_cmp);
    v.dedup();
    v
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
    fn receivers_share_a_bank_exactly_when_their_wlans_agree() {
        // Receivers 0 and 2 send 1500-byte packets, receiver 1 sends 600-byte ones.
        let names: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        let seen = [1500, 600, 1500].map(|l| WlanSettings {
            ip_len: Some(l),
            ..WlanSettings::default()
        });
        let mut d = Dataset::new(1);
        for (g, rate) in [(0u32, 300.0), (1, 100.0), (2, 500.0), (2, 300.0), (0, f32::NAN)] {
            d.push(&[0.0], false, g, rate, 1);
        }
        let base = BankSource {
            neighbours: 1,
            ..BankSource::default()
        };
        let g = WlanBanks::group(&base, &names, &seen, &d, &|i| Some(d.group[i] as usize)).unwrap();
        assert_eq!(g.of_receiver, [0, 1, 0]);
        assert_eq!(g.banks.len(), 2);
        assert_eq!(
            (g.banks[0].2.as_slice(), g.banks[0].3.as_slice()),
            ([0, 2].as_slice(), [300.0, 500.0].as_slice())
        );
        assert_eq!(
            (g.banks[1].2.as_slice(), g.banks[1].3.as_slice()),
            ([1].as_slice(), [100.0].as_slice())
        );
        assert_eq!(g.banks[0].0.ip_len, Some(1500));
        assert_eq!(g.banks[1].0.ip_len, Some(600));
        // A source that cannot be made names the receiver.
        let none = BankSource::default();
        let e = WlanBanks::group(&none, &names, &seen, &d, &|i| Some(d.group[i] as usize)).unwrap_err();
        assert!(e.to_string().contains("receiver a"), "{e}");
    }

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

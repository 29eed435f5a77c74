//! A channel survey for a receiver (`recv --survey-file`): one line of cumulative times in ns,
//! `active_ns busy_ns own_ns` — how long the channel was observed, how long it was busy, and
//! how much of that was the receiver's own cell (its AP's exchanges with its stations). The
//! testbed's AP keeps one current; on a real station a script can write it from `iw dev IFACE
//! survey dump` (active and busy time, and the station's receive and transmit time as its own).
//! [`SurveyFile::poll`] turns two readings into the share of the channel others took between
//! them, which the airtime level counts
//! ([`OnlineEstimator::set_others_share`](crate::runtime::OnlineEstimator::set_others_share));
//! [`SurveyFeed`] does so while a receiver runs.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::IoError;
use crate::transport::Receiver;

/// A survey file, and its last reading.
#[derive(Debug)]
pub struct SurveyFile {
    path: PathBuf,
    last: Option<[u64; 3]>,
}

impl SurveyFile {
    /// A survey at `path`, read once now: a file that is missing or malformed is an error
    /// naming it (and the field).
    pub fn open(path: &Path) -> Result<SurveyFile, IoError> {
        let mut s = SurveyFile {
            path: path.to_path_buf(),
            last: None,
        };
        s.last = Some(s.read()?);
        Ok(s)
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn read(&self) -> Result<[u64; 3], IoError> {
        let what = || format!("reading the survey {}", self.path.display());
        let text = std::fs::read_to_string(&self.path).map_err(|source| IoError { what: what(), source })?;
        parse_survey(&text).map_err(|(column, value)| IoError {
            what: what(),
            source: std::io::Error::other(format!("line 1, column {column}: {value:?} is not a count of ns")),
        })
    }

    /// Read the survey again: the share of the channel others took since the last reading
    /// (busy less own, over active; clamped to [0, 0.99]), or `None` when no time passed or the
    /// counters went back (a restarted survey: the next reading starts over). A file that
    /// cannot be read now is an error; the caller may keep its last share.
    pub fn poll(&mut self) -> Result<Option<f64>, IoError> {
        let now = self.read()?;
        let share = match self.last {
            Some(l) if now.iter().zip(&l).all(|(n, l)| n >= l) && now[0] > l[0] => {
                let others = (now[1] - l[1]).saturating_sub(now[2] - l[2]);
                Some((others as f64 / (now[0] - l[0]) as f64).clamp(0.0, 0.99))
            }
            _ => None,
        };
        self.last = Some(now);
        Ok(share)
    }
}

/// The three counters of a survey line, or the column that does not parse and its text.
pub fn parse_survey(text: &str) -> Result<[u64; 3], (&'static str, String)> {
    let mut f = text.split_whitespace();
    let mut out = [0u64; 3];
    for (o, column) in out.iter_mut().zip(["active_ns", "busy_ns", "own_ns"]) {
        let v = f.next().unwrap_or_default();
        *o = v.parse().map_err(|_| (column, v.to_string()))?;
    }
    Ok(out)
}

/// How often a [`SurveyFeed`] reads its survey.
pub const SURVEY_EVERY: Duration = Duration::from_millis(50);

/// A [`SurveyFile`] read every [`SURVEY_EVERY`] while a receiver runs, the share of the channel
/// others took handed to its estimator; a reading that fails keeps the last share and is
/// counted ([`SurveyFeed::failure_note`]).
#[derive(Debug)]
pub struct SurveyFeed {
    file: SurveyFile,
    last: Instant,
    failed: u64,
}

impl SurveyFeed {
    /// The survey at `path`, read once now (missing or malformed: an error naming it).
    pub fn open(path: &Path) -> Result<SurveyFeed, IoError> {
        Ok(SurveyFeed {
            file: SurveyFile::open(path)?,
            last: Instant::now(),
            failed: 0,
        })
    }

    /// Read the survey if [`SURVEY_EVERY`] has passed, and set `rx`'s share of others.
    pub fn poll(&mut self, rx: &mut Receiver) {
        if self.last.elapsed() < SURVEY_EVERY {
            return;
        }
        self.last = Instant::now();
        match self.file.poll() {
            Ok(Some(share)) => rx.estimator_mut().set_others_share(share),
            Ok(None) => {}
            Err(_) => self.failed += 1,
        }
    }

    /// What to tell the user when readings failed (none: every one was read).
    pub fn failure_note(&self) -> Option<String> {
        (self.failed > 0).then(|| {
            format!(
                "{} reading(s) of the survey {} failed: the share of others stayed at the last one read",
                self.failed,
                self.file.path().display()
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_survey_gives_the_share_others_took_between_readings() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("survey");
        let missing = SurveyFile::open(&p).unwrap_err().to_string();
        assert!(missing.contains("survey"), "{missing}");
        std::fs::write(&p, "1000000 600000 500000\n").unwrap();
        let mut s = SurveyFile::open(&p).unwrap();
        // 10 ms observed, 8 busy of which 6 the cell's own: others 20 %.
        std::fs::write(&p, "11000000 8600000 6500000\n").unwrap();
        assert!((s.poll().unwrap().unwrap() - 0.2).abs() < 1e-12);
        // No time passed: no share; counters that went back: none, and the next starts over.
        assert_eq!(s.poll().unwrap(), None);
        std::fs::write(&p, "5 5 5").unwrap();
        assert_eq!(s.poll().unwrap(), None);
        std::fs::write(&p, "1000005 1000005 5").unwrap();
        assert_eq!(s.poll().unwrap(), Some(0.99));
        std::fs::write(&p, "1000005 x 5").unwrap();
        let bad = s.poll().unwrap_err().to_string();
        assert!(
            bad.contains("busy_ns") && bad.contains("\"x\"") && bad.contains("survey"),
            "{bad}"
        );
        assert!(parse_survey("1 2").unwrap_err().0 == "own_ns");
    }
}

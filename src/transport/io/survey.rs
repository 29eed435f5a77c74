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
    /// (busy less own, over active; clamped to [0, 0.99]), or that no time passed, or that the
    /// counters went back (a restarted survey: the next reading starts over). A file that
    /// cannot be read now is an error; the caller may keep its last share.
    pub fn poll(&mut self) -> Result<Reading, IoError> {
        let now = self.read()?;
        let r = match self.last {
            Some(l) if now.iter().zip(&l).any(|(n, l)| n < l) => Reading::WentBack,
            Some(l) if now[0] > l[0] => {
                let others = (now[1] - l[1]).saturating_sub(now[2] - l[2]);
                Reading::Share((others as f64 / (now[0] - l[0]) as f64).clamp(0.0, 0.99))
            }
            _ => Reading::Unchanged,
        };
        self.last = Some(now);
        Ok(r)
    }
}

/// What a new reading of a survey says.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Reading {
    /// Others' share of the channel since the last reading.
    Share(f64),
    /// No time passed since the last reading.
    Unchanged,
    /// A counter went back (a restarted survey).
    WentBack,
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

/// A survey whose counters have not moved for this long has stopped: its last share is no
/// longer counted (the level reads as without a survey) until it moves again.
pub const SURVEY_STALE: Duration = Duration::from_secs(1);

/// A [`SurveyFile`] read every [`SURVEY_EVERY`] while a receiver runs, the share of the channel
/// others took handed to its estimator. Nothing falls back silently: a survey that stops moving
/// for [`SURVEY_STALE`] or goes backwards is said at once (through the warning callback, the
/// first time of each) and counted ([`SurveyFeed::notes`]); a reading that fails keeps the last
/// share and is counted.
pub struct SurveyFeed {
    file: SurveyFile,
    last: Instant,
    /// When the counters last moved on.
    moved: Instant,
    stale: bool,
    counts: SurveyCounts,
    warn: Box<dyn FnMut(&str)>,
}

/// What went wrong with a survey while a receiver ran.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SurveyCounts {
    /// Readings that failed (the last share kept).
    pub failed: u64,
    /// Times the survey stopped moving for [`SURVEY_STALE`] (its share then not counted).
    pub stalled: u64,
    /// Times a counter went back.
    pub went_back: u64,
}

impl std::fmt::Debug for SurveyFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SurveyFeed({:?}, {:?})", self.file.path(), self.counts)
    }
}

impl SurveyFeed {
    /// The survey at `path`, read once now (missing or malformed: an error naming it); `warn`
    /// hears when it stops moving, moves again or goes backwards.
    pub fn open(path: &Path, warn: impl FnMut(&str) + 'static) -> Result<SurveyFeed, IoError> {
        let now = Instant::now();
        Ok(SurveyFeed {
            file: SurveyFile::open(path)?,
            last: now,
            moved: now,
            stale: false,
            counts: SurveyCounts::default(),
            warn: Box::new(warn),
        })
    }

    /// Read the survey if [`SURVEY_EVERY`] has passed, and set `rx`'s share of others.
    pub fn poll(&mut self, rx: &mut Receiver) {
        let now = Instant::now();
        if now.saturating_duration_since(self.last) >= SURVEY_EVERY {
            self.last = now;
            let r = self.file.poll();
            self.take(now, r, |share| rx.estimator_mut().set_others_share(share));
        }
    }

    /// One reading `r` at `now`: the share to set, if any, to `set`.
    fn take(&mut self, now: Instant, r: Result<Reading, IoError>, mut set: impl FnMut(f64)) {
        let path = self.file.path().display().to_string();
        match r {
            Ok(Reading::Share(share)) => {
                self.moved = now;
                if self.stale {
                    self.stale = false;
                    (self.warn)(&format!(
                        "the survey {path} moves again: its share of others is counted again"
                    ));
                }
                set(share);
            }
            Ok(Reading::Unchanged) => {
                if !self.stale && now.saturating_duration_since(self.moved) >= SURVEY_STALE {
                    self.stale = true;
                    self.counts.stalled += 1;
                    set(0.0);
                    (self.warn)(&format!(
                        "the survey {path} has not moved for {} s: its share of others is no longer counted (the level reads as without a survey) until it moves again",
                        SURVEY_STALE.as_secs_f64()
                    ));
                }
            }
            Ok(Reading::WentBack) => {
                self.moved = now;
                self.counts.went_back += 1;
                if self.counts.went_back == 1 {
                    (self.warn)(&format!(
                        "the survey {path} went backwards (a restarted survey?): its share starts over from the next reading"
                    ));
                }
            }
            Err(_) => self.counts.failed += 1,
        }
    }

    /// What went wrong so far.
    pub fn counts(&self) -> SurveyCounts {
        self.counts
    }

    /// What to tell the user at the end (none: every reading was read and moved on).
    pub fn notes(&self) -> Vec<String> {
        let p = self.file.path().display();
        let c = self.counts;
        let mut v = Vec::new();
        if c.failed > 0 {
            v.push(format!(
                "{} reading(s) of the survey {p} failed: the share of others stayed at the last one read",
                c.failed
            ));
        }
        if c.stalled > 0 {
            v.push(format!(
                "the survey {p} stopped moving {} time(s): its share of others was not counted meanwhile",
                c.stalled
            ));
        }
        if c.went_back > 0 {
            v.push(format!("the survey {p} went backwards {} time(s)", c.went_back));
        }
        v
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
        assert!(matches!(s.poll().unwrap(), Reading::Share(x) if (x - 0.2).abs() < 1e-12));
        // No time passed: no share; counters that went back: said, and the next starts over.
        assert_eq!(s.poll().unwrap(), Reading::Unchanged);
        std::fs::write(&p, "5 5 5").unwrap();
        assert_eq!(s.poll().unwrap(), Reading::WentBack);
        std::fs::write(&p, "1000005 1000005 5").unwrap();
        assert_eq!(s.poll().unwrap(), Reading::Share(0.99));
        std::fs::write(&p, "1000005 x 5").unwrap();
        let bad = s.poll().unwrap_err().to_string();
        assert!(
            bad.contains("busy_ns") && bad.contains("\"x\"") && bad.contains("survey"),
            "{bad}"
        );
        assert!(parse_survey("1 2").unwrap_err().0 == "own_ns");
    }

    #[test]
    fn a_survey_that_stops_or_goes_back_is_said_and_never_silently_kept() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("survey");
        std::fs::write(&p, "1000 0 0\n").unwrap();
        let said = std::rc::Rc::new(std::cell::RefCell::new(Vec::<String>::new()));
        let s2 = said.clone();
        let mut f = SurveyFeed::open(&p, move |m| s2.borrow_mut().push(m.to_string())).unwrap();
        let t0 = Instant::now();
        let mut set = Vec::new();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        f.take(at(50), Ok(Reading::Share(0.3)), |x| set.push(x));
        // Unchanged for less than SURVEY_STALE: the share stands, nothing said.
        f.take(at(500), Ok(Reading::Unchanged), |x| set.push(x));
        assert_eq!((set.clone(), said.borrow().len()), (vec![0.3], 0));
        // For longer: the share is dropped to none, once, and said naming the file.
        f.take(at(1100), Ok(Reading::Unchanged), |x| set.push(x));
        f.take(at(1500), Ok(Reading::Unchanged), |x| set.push(x));
        assert_eq!(set, vec![0.3, 0.0]);
        assert!(said.borrow()[0].contains("survey") && said.borrow()[0].contains("not moved"));
        // Moving again: said, counted again.
        f.take(at(1600), Ok(Reading::Share(0.1)), |x| set.push(x));
        assert_eq!(set, vec![0.3, 0.0, 0.1]);
        assert!(said.borrow()[1].contains("moves again"));
        // Going backwards: said the first time, counted every time; a failed read counted.
        for k in 0..3 {
            f.take(at(1700 + k), Ok(Reading::WentBack), |x| set.push(x));
        }
        f.take(
            at(1800),
            Err(IoError {
                what: "x".into(),
                source: std::io::Error::other("gone"),
            }),
            |x| set.push(x),
        );
        assert_eq!(said.borrow().len(), 3);
        assert!(said.borrow()[2].contains("went backwards"));
        assert_eq!(
            f.counts(),
            SurveyCounts {
                failed: 1,
                stalled: 1,
                went_back: 3
            }
        );
        let notes = f.notes().join("\n");
        assert!(
            notes.contains("failed") && notes.contains("stopped moving 1") && notes.contains("backwards 3"),
            "{notes}"
        );
    }
}

//! The live loop's two logs and their join: what the AP sent each station per report interval
//! (`aggrate ap --truth FILE`, [`TruthRow`]) and what the receiver reported for the same
//! intervals (`aggrate recv --log FILE`, [`ReportRow`]). Both sit on the same grid —
//! multiples of the report interval on `CLOCK_REALTIME` — so on one host (or hosts whose clocks
//! agree to well within an interval) interval `start_ns` of one is interval `start_ns` of the
//! other.
//!
//! Text in, rows out: parsing checks every field and names the file, line and column of the
//! first bad one; [`join`] refuses logs that share no interval.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::metrics::{LevelError, LevelPair};
use crate::runtime::AggReport;
use crate::time::Ts;
pub use crate::wlan::live::TruthRow;

/// Header of the AP's truth CSV.
pub const TRUTH_HEADER: &str = "start_ns,station,ampdus,mpdus,level,release_p50_us,release_p99_us,merged,others_share";
/// The truth CSV's header before it carried others' share (still read; the share is then NaN).
const TRUTH_HEADER_V1: &str = "start_ns,station,ampdus,mpdus,level,release_p50_us,release_p99_us,merged";
/// Header of the receiver's report CSV.
pub const REPORT_HEADER: &str = "start_ns,end_ns,packets,frames,frame_count,level,rx_mbps,owd_mean_ms,lost";

/// One line of the truth CSV.
pub fn truth_line(r: &TruthRow) -> String {
    format!(
        "{},{},{},{},{:.4},{:.1},{:.1},{},{:.4}",
        r.start_ns,
        r.station,
        r.ampdus,
        r.mpdus,
        if r.ampdus > 0 {
            r.mpdus as f64 / r.ampdus as f64
        } else {
            0.0
        },
        r.release_p50_us,
        r.release_p99_us,
        r.merged,
        r.others_share
    )
}

/// One report of the receiver's CSV.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct ReportRow {
    /// Interval start (ns on the receive clock).
    pub start_ns: u64,
    /// Interval end.
    pub end_ns: u64,
    /// Packets received.
    pub packets: u64,
    /// Frames the model closed.
    pub frames: u64,
    /// Packets ÷ frames.
    pub frame_count: f64,
    /// The level the sender steers by.
    pub level: f64,
    /// Receive rate (Mb/s).
    pub rx_mbps: f64,
    /// Mean one-way delay (ms; NaN without send times).
    pub owd_mean_ms: f64,
    /// Packets missing by sequence number.
    pub lost: u64,
}

/// One line of the receiver's report CSV.
pub fn report_line(r: &AggReport) -> String {
    format!(
        "{},{},{},{},{:.4},{:.4},{:.3},{:.4},{}",
        r.start.as_nanos(),
        r.end.as_nanos(),
        r.packets,
        r.frames,
        r.mean_agg,
        r.level(),
        r.rx_rate_bps / 1e6,
        r.owd_mean_ms.unwrap_or(f64::NAN),
        r.lost
    )
}

/// A log that cannot be read or joined.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Not the expected header.
    #[error("{}: line 1 is not the {what} header {want:?}", path.display())]
    Header {
        /// The file.
        path: PathBuf,
        /// Which log.
        what: &'static str,
        /// The header expected.
        want: &'static str,
    },
    /// A field that does not parse.
    #[error("{}: line {line}, column {column}: {value:?} is not {expect}", path.display())]
    Field {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// Column name.
        column: &'static str,
        /// The text.
        value: String,
        /// What it should be.
        expect: &'static str,
    },
    /// The two logs share no report interval of the station.
    #[error(
        "{} (station {station}, {truth_rows} intervals) and {} ({report_rows} intervals) share no report interval: logs of other runs, another station, or clocks that disagree by more than an interval",
        truth.display(),
        reports.display()
    )]
    NoOverlap {
        /// The AP's log.
        truth: PathBuf,
        /// The receiver's log.
        reports: PathBuf,
        /// The station.
        station: u16,
        /// Intervals of the station in the AP's log.
        truth_rows: usize,
        /// Intervals in the receiver's log.
        report_rows: usize,
    },
}

fn read(path: &Path, what: &'static str, want: &'static str) -> Result<Vec<(usize, Vec<String>)>, Error> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut lines = text.lines();
    if lines.next().map(str::trim) != Some(want) {
        return Err(Error::Header {
            path: path.to_path_buf(),
            what,
            want,
        });
    }
    Ok(lines
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| (i + 2, l.split(',').map(|f| f.trim().to_string()).collect()))
        .collect())
}

fn field<T: std::str::FromStr>(
    path: &Path,
    line: usize,
    cols: &[String],
    i: usize,
    column: &'static str,
    expect: &'static str,
) -> Result<T, Error> {
    let v = cols.get(i).map_or("", String::as_str);
    v.parse().map_err(|_| Error::Field {
        path: path.to_path_buf(),
        line,
        column,
        value: v.to_string(),
        expect,
    })
}

/// The AP's truth log.
pub fn read_truth(path: &Path) -> Result<Vec<TruthRow>, Error> {
    let rows = match read(path, "AP truth (ap --truth)", TRUTH_HEADER) {
        Err(Error::Header { .. }) => read(path, "AP truth (ap --truth)", TRUTH_HEADER_V1).map_err(|e| match e {
            // Name the current header, not the old one.
            Error::Header { path, what, .. } => Error::Header {
                path,
                what,
                want: TRUTH_HEADER,
            },
            e => e,
        })?,
        r => r?,
    };
    rows.into_iter()
        .map(|(line, c)| {
            let f = |i, col| field::<f64>(path, line, &c, i, col, "a number");
            Ok(TruthRow {
                start_ns: field(path, line, &c, 0, "start_ns", "a time in ns")?,
                station: field(path, line, &c, 1, "station", "a station index")?,
                ampdus: field(path, line, &c, 2, "ampdus", "a count")?,
                mpdus: field(path, line, &c, 3, "mpdus", "a count")?,
                release_p50_us: f(5, "release_p50_us")?,
                release_p99_us: f(6, "release_p99_us")?,
                merged: field(path, line, &c, 7, "merged", "a count")?,
                others_share: if c.len() > 8 { f(8, "others_share")? } else { f64::NAN },
            })
        })
        .collect()
}

/// The receiver's report log.
pub fn read_reports(path: &Path) -> Result<Vec<ReportRow>, Error> {
    read(path, "receiver report (recv --log)", REPORT_HEADER)?
        .into_iter()
        .map(|(line, c)| {
            let n = |i, col| field::<u64>(path, line, &c, i, col, "a count");
            let x = |i, col| field::<f64>(path, line, &c, i, col, "a number");
            Ok(ReportRow {
                start_ns: n(0, "start_ns")?,
                end_ns: n(1, "end_ns")?,
                packets: n(2, "packets")?,
                frames: n(3, "frames")?,
                frame_count: x(4, "frame_count")?,
                level: x(5, "level")?,
                rx_mbps: x(6, "rx_mbps")?,
                owd_mean_ms: x(7, "owd_mean_ms")?,
                lost: n(8, "lost")?,
            })
        })
        .collect()
}

/// The join of one station's truth with its receiver's reports.
#[derive(Clone, Debug, Serialize)]
pub struct Joined {
    /// Intervals in both logs: (truth, report).
    pub pairs: Vec<(TruthRow, ReportRow)>,
    /// The steered level against the truth.
    pub level: Option<LevelError>,
    /// The frame count against the truth.
    pub frame_count: Option<LevelError>,
    /// Median of the intervals' median release errors (µs).
    pub release_p50_us: f64,
    /// Largest of the intervals' 99th-percentile release errors (µs).
    pub release_p99_us: f64,
    /// A-MPDUs released too close to the previous one to be told apart, over all A-MPDUs.
    pub merged_share: f64,
}

/// Join station `station`'s rows of `truth` with `reports` by interval start; intervals from the
/// `skip` first of the receiver's log are left out (the start-up ramp).
pub fn join(
    truth: &[TruthRow],
    reports: &[ReportRow],
    station: u16,
    skip: usize,
    names: (&Path, &Path),
) -> Result<Joined, Error> {
    let mine: Vec<&TruthRow> = truth.iter().filter(|t| t.station == station).collect();
    let pairs: Vec<(TruthRow, ReportRow)> = reports
        .iter()
        .skip(skip)
        .filter_map(|r| mine.iter().find(|t| t.start_ns == r.start_ns).map(|t| (**t, *r)))
        .collect();
    if pairs.is_empty() {
        return Err(Error::NoOverlap {
            truth: names.0.to_path_buf(),
            reports: names.1.to_path_buf(),
            station,
            truth_rows: mine.len(),
            report_rows: reports.len(),
        });
    }
    let score = |pick: fn(&ReportRow) -> f64| {
        let p: Vec<LevelPair> = pairs
            .iter()
            .map(|(t, r)| LevelPair {
                start: Ts(t.start_ns),
                estimate: pick(r),
                truth: t.mpdus as f64 / t.ampdus.max(1) as f64,
                ampdus: t.ampdus,
            })
            .collect();
        LevelError::of(&p)
    };
    let mut p50: Vec<f64> = pairs
        .iter()
        .map(|p| p.0.release_p50_us)
        .filter(|v| v.is_finite())
        .collect();
    p50.sort_by(f64::total_cmp);
    let ampdus: u64 = pairs.iter().map(|p| p.0.ampdus).sum();
    Ok(Joined {
        level: score(|r| r.level),
        frame_count: score(|r| r.frame_count),
        release_p50_us: p50.get(p50.len() / 2).copied().unwrap_or(f64::NAN),
        release_p99_us: pairs
            .iter()
            .map(|p| p.0.release_p99_us)
            .filter(|v| v.is_finite())
            .fold(f64::NAN, f64::max),
        merged_share: pairs.iter().map(|p| p.0.merged).sum::<u64>() as f64 / ampdus.max(1) as f64,
        pairs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn logs_round_trip_and_join() {
        let dir = tempfile::tempdir().unwrap();
        let mut truth = format!("{TRUTH_HEADER}\n");
        let mut reports = format!("{REPORT_HEADER}\n");
        for k in 0..10u64 {
            let start = 1_000_000_000_000 + k * 500_000_000;
            for sta in 0..2u16 {
                truth.push_str(&truth_line(&TruthRow {
                    start_ns: start,
                    station: sta,
                    ampdus: 600,
                    mpdus: 600 * 20,
                    release_p50_us: 30.0 + k as f64,
                    release_p99_us: 200.0,
                    merged: 6,
                    others_share: 0.25,
                }));
                truth.push('\n');
            }
            let r = AggReport {
                start: Ts(start),
                end: Ts(start + 500_000_000),
                frames: 400,
                packets: 12_000,
                mean_agg: 30.0,
                corrected_agg: Some(if k < 2 { 5.0 } else { 21.0 }),
                ..AggReport::default()
            };
            reports.push_str(&report_line(&r));
            reports.push('\n');
        }
        let t = write(dir.path(), "ap.csv", &truth);
        let r = write(dir.path(), "recv.csv", &reports);
        let (truth, reports) = (read_truth(&t).unwrap(), read_reports(&r).unwrap());
        assert_eq!((truth.len(), reports.len()), (20, 10));
        assert!(reports[0].owd_mean_ms.is_nan());
        assert_eq!(truth[3].others_share, 0.25);
        // A log written before others' share was a column still reads, the share unknown.
        let old = write(
            dir.path(),
            "old.csv",
            &format!("{TRUTH_HEADER_V1}\n1000000000000,0,600,12000,20,30,200,6\n"),
        );
        let o = read_truth(&old).unwrap();
        assert!(o.len() == 1 && o[0].mpdus == 12_000 && o[0].others_share.is_nan());
        // The first two intervals (the ramp) skipped: the level is 5 % high, the count 50 %.
        let j = join(&truth, &reports, 1, 2, (&t, &r)).unwrap();
        assert_eq!(j.pairs.len(), 8);
        let (l, c) = (j.level.unwrap(), j.frame_count.unwrap());
        assert!(
            (l.bias - 0.05).abs() < 1e-9 && (c.bias - 0.5).abs() < 1e-9,
            "{l:?} {c:?}"
        );
        assert!((j.merged_share - 0.01).abs() < 1e-12);
        assert_eq!(j.release_p99_us, 200.0);
        assert!(j.release_p50_us >= 32.0 && j.release_p50_us <= 39.0);
        // Another station, or another run: refused, naming both files.
        let e = join(&truth, &reports, 5, 0, (&t, &r)).unwrap_err().to_string();
        assert!(
            e.contains("ap.csv") && e.contains("recv.csv") && e.contains("share no report interval"),
            "{e}"
        );
        let shifted: Vec<ReportRow> = reports
            .iter()
            .map(|x| ReportRow {
                start_ns: x.start_ns + 1,
                ..*x
            })
            .collect();
        assert!(join(&truth, &shifted, 0, 0, (&t, &r)).is_err());
    }

    #[test]
    fn bad_logs_name_file_line_and_column() {
        let dir = tempfile::tempdir().unwrap();
        let t = write(
            dir.path(),
            "t.csv",
            &format!("{TRUTH_HEADER}\n1,0,5,50,10,1,2,0\n2,0,five,50,10,1,2,0\n"),
        );
        let e = read_truth(&t).unwrap_err().to_string();
        assert!(e.contains("t.csv: line 3, column ampdus: \"five\""), "{e}");
        let h = write(dir.path(), "h.csv", "seq,host_ns\n1,2\n");
        let e = read_reports(&h).unwrap_err().to_string();
        assert!(e.contains("h.csv: line 1 is not the receiver report"), "{e}");
        // A truth log given as the report log (and the other way round) is refused at the header.
        assert!(read_reports(&t).is_err() && read_truth(&h).is_err());
        let short = write(dir.path(), "s.csv", &format!("{REPORT_HEADER}\n1,2,3\n"));
        let e = read_reports(&short).unwrap_err().to_string();
        assert!(e.contains("line 2, column frames: \"\""), "{e}");
        let e = read_truth(&dir.path().join("missing.csv")).unwrap_err().to_string();
        assert!(e.contains("missing.csv"), "{e}");
    }
}

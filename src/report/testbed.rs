//! The testbed's report: the table (Markdown, JSON), the series (CSV) and the Figure 16-style
//! plots — rate out of the AP and one-way delay over time, every sender on the same axes.

use std::path::{Path, PathBuf};

use super::{plot, write_file, WriteError};
use crate::metrics::LevelError;
use crate::testbed::compare::{SenderRun, SERIES_STEP};

/// What a run was: the WLAN's description and the seconds per sender.
pub struct Setting<'a> {
    /// E.g. "VHT MCS 9 × 1 SS, 80 MHz, FIFO of 1000 packets per station".
    pub wlan: &'a str,
    /// Seconds per sender.
    pub duration_s: u32,
}

/// The table: one row per sender and station.
pub fn markdown(s: &Setting<'_>, runs: &[SenderRun]) -> String {
    let mut out = format!(
        "Testbed: {}; {} s per sender. One-way delay: from the server's egress to the station's \
         ingress per packet, matched between captures at both ends on one clock; in AP: the AP's \
         queue and air time.\n\n\
         | sender | sta | goodput Mb/s | one-way delay mean ms | p50 | p95 | p99 | in AP mean ms | retrans / lost | true level | steered level (bias) | frame count (bias) | A-MPDU share | airtime share | uplink air | AP drops | release p99 µs | AP core steal |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
        s.wlan, s.duration_s
    );
    for r in runs {
        for f in &r.flows {
            out += &format!(
                "| {} | {} | {:.1} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {:.1} | {} | {} | {:.2} | {:.2} | {:.1}% | {} | {}{} | {} |\n",
                f.sender,
                f.station,
                f.goodput_mbps,
                f.owd_ms.mean,
                f.owd_ms.p50,
                f.owd_ms.p95,
                f.owd_ms.p99,
                f.ap_delay_ms.mean,
                f.retransmits.or(f.lost).map_or("–".to_string(), |r| r.to_string()),
                f.true_level,
                level_cell(f.estimated.as_ref()),
                level_cell(f.frame_count.as_ref()),
                f.ampdu_share,
                f.airtime_share,
                r.uplink_air_share * 100.0,
                r.ap_dropped,
                if r.release_p99_us.is_finite() {
                    format!("{:.0}", r.release_p99_us)
                } else {
                    "–".to_string()
                },
                if r.cpu_bound { " (late)" } else { "" },
                r.ap_core_steal
                    .map_or("–".to_string(), |s| format!("{:.1}%", s * 100.0))
            );
        }
    }
    out
}

/// An estimate's mean over the joined intervals and its bias against the truth.
fn level_cell(e: Option<&LevelError>) -> String {
    e.map_or("–".to_string(), |e| {
        format!("{:.1} ({:+.0}%)", e.estimate_mean, e.bias * 100.0)
    })
}

/// Per sender over time: (t, total rate Mb/s over its stations, mean one-way delay ms over
/// the packets that arrived, mean time in the AP ms over the packets released).
fn totals(r: &SenderRun) -> Vec<(f64, f64, f64, f64)> {
    let steps = r
        .series
        .iter()
        .map(|p| (p.t_s / SERIES_STEP.as_secs_f64()).round() as usize + 1)
        .max()
        .unwrap_or(0);
    let mut t = vec![(0.0, 0.0, 0u64, 0.0, 0u64); steps];
    for p in &r.series {
        let k = (p.t_s / SERIES_STEP.as_secs_f64()).round() as usize;
        t[k].0 += p.rate_mbps;
        if p.owd_packets > 0 {
            t[k].1 += p.owd_ms * p.owd_packets as f64;
            t[k].2 += p.owd_packets;
        }
        if p.packets > 0 {
            t[k].3 += p.delay_ms * p.packets as f64;
            t[k].4 += p.packets;
        }
    }
    let mean = |sum: f64, n: u64| if n > 0 { sum / n as f64 } else { f64::NAN };
    t.iter()
        .enumerate()
        .map(|(k, &(rate, owd, n_owd, ap, n_ap))| {
            (
                k as f64 * SERIES_STEP.as_secs_f64(),
                rate,
                mean(owd, n_owd),
                mean(ap, n_ap),
            )
        })
        .collect()
}

/// `testbed.md`, `testbed.json`, `testbed_series.csv`, `testbed_rate.png` and
/// `testbed_delay.png` in `dir`.
pub fn write(dir: &Path, s: &Setting<'_>, runs: &[SenderRun]) -> Result<Vec<PathBuf>, WriteError> {
    let mut written = vec![write_file(dir, "testbed.md", markdown(s, runs).into_bytes())?];
    let json = serde_json::json!({ "wlan": s.wlan, "duration_s": s.duration_s, "runs": runs });
    let json = serde_json::to_string_pretty(&json).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    written.push(write_file(dir, "testbed.json", json.into_bytes())?);
    let mut csv = String::from("sender,t_s,station,rate_mbps,ap_delay_ms,packets,owd_ms,owd_packets\n");
    for r in runs {
        let name = r.flows.first().map_or("?", |f| f.sender.as_str());
        for p in &r.series {
            csv += &format!(
                "{name},{:.1},{},{:.3},{:.3},{},{:.3},{}\n",
                p.t_s, p.station, p.rate_mbps, p.delay_ms, p.packets, p.owd_ms, p.owd_packets
            );
        }
    }
    written.push(write_file(dir, "testbed_series.csv", csv.into_bytes())?);
    let per_sender = |pick: fn(&(f64, f64, f64, f64)) -> f64| -> Vec<plot::Series> {
        runs.iter()
            .map(|r| {
                let name = r.flows.first().map_or("?", |f| f.sender.as_str());
                plot::Series::new(name, totals(r).iter().map(|p| (p.0, pick(p))).collect())
            })
            .collect()
    };
    let rate = dir.join("testbed_rate.png");
    plot::lines(
        &rate,
        "Rate out of the AP (IP bytes per 100 ms)",
        "time (s)",
        "rate (Mb/s, all stations)",
        &per_sender(|p| p.1),
        None,
    )?;
    written.push(rate);
    let delay = dir.join("testbed_delay.png");
    plot::lines(
        &delay,
        "One-way delay, server to station (captures at both ends)",
        "time (s)",
        "mean one-way delay per 100 ms (ms)",
        &per_sender(|p| p.2),
        None,
    )?;
    written.push(delay);
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testbed::compare::SeriesPoint;

    #[test]
    fn totals_add_the_stations_rates_and_weigh_their_delays_by_packets() {
        let p = |t_s, station, rate_mbps, delay_ms, packets| SeriesPoint {
            t_s,
            station,
            rate_mbps,
            delay_ms,
            packets,
            // One-way delays a millisecond above the AP's, of half the packets.
            owd_ms: delay_ms + 1.0,
            owd_packets: packets / 2,
        };
        let run = SenderRun {
            flows: Vec::new(),
            ap_dropped: 0,
            release_p99_us: 0.0,
            cpu_bound: false,
            uplink_air_share: 0.0,
            ap_core_steal: None,
            series: vec![
                p(0.0, 0, 100.0, 2.0, 30),
                p(0.1, 0, 0.0, f64::NAN, 0),
                p(0.0, 1, 50.0, 8.0, 10),
                p(0.1, 1, 20.0, 4.0, 5),
            ],
            notes: Vec::new(),
        };
        let t = totals(&run);
        assert_eq!(t.len(), 2);
        assert_eq!((t[0].0, t[0].1), (0.0, 150.0));
        assert!((t[0].3 - (2.0 * 30.0 + 8.0 * 10.0) / 40.0).abs() < 1e-12);
        assert!((t[0].2 - (3.0 * 15.0 + 9.0 * 5.0) / 20.0).abs() < 1e-12);
        assert_eq!((t[1].1, t[1].2, t[1].3), (20.0, 5.0, 4.0));
    }
}

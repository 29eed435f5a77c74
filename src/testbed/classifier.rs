//! `testbed bottleneck`'s runs: aggrate's sender through the emulated downlink while a backhaul
//! bottleneck switches on and off on a seeded schedule, each run's classifier rows read back from
//! the sender's log and labelled from the switches as `tc` made them.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::compare::{aggrate_run, AggrateRun};
use super::downlink::Downlink;
use super::Error;
use crate::bottleneck::{rows_from_send_log, Row, Schedule};
use crate::wlan::ValidWlanConfig;

/// What `testbed bottleneck` runs.
#[derive(Clone, Debug)]
pub struct BottleneckPlan<'a> {
    /// Runs, each with its own seeded schedule (seed + run).
    pub runs: u32,
    /// Of them, the first this many train the classifier.
    pub train: u32,
    /// Seconds per run.
    pub duration_s: u32,
    /// Report interval.
    pub interval: Duration,
    /// The backhaul's rate while on, drawn from this range (Mb/s).
    pub backhaul_mbps: (f64, f64),
    /// How long each spell on or off lasts, drawn from this range (s).
    pub dwell_s: (f64, f64),
    /// Seed of the first run.
    pub seed: u64,
    /// The classifier's weights in the sender's loop (`None`: the shipped ones).
    pub weights: Option<&'a Path>,
    /// This executable (aggrate's sender and receiver are its subcommands).
    pub exe: &'a Path,
    /// Where each run's logs go (`run_K/`).
    pub dir: &'a Path,
}

fn bad(field: &'static str, value: String, allowed: &'static str) -> Result<(), Error> {
    Err(Error::Plan {
        flag: field,
        value,
        allowed,
    })
}

impl BottleneckPlan<'_> {
    /// Every setting in range (before anything is set up).
    pub fn check(&self) -> Result<(), Error> {
        if !(1..=100).contains(&self.runs) || self.train >= self.runs {
            return bad(
                "--runs / --train",
                format!("{} / {}", self.runs, self.train),
                "1..=100 runs, fewer training runs than runs",
            );
        }
        if !(10..=3600).contains(&self.duration_s) {
            return bad("--duration", self.duration_s.to_string(), "10..=3600 s");
        }
        let ms = self.interval.as_millis();
        if !(20..=1000).contains(&ms) {
            return bad("--interval-ms", ms.to_string(), "20..=1000");
        }
        let (lo, hi) = self.backhaul_mbps;
        if !((1.0..=10_000.0).contains(&lo) && hi >= lo && hi <= 10_000.0) {
            return bad(
                "--backhaul-range",
                format!("{lo},{hi}"),
                "1 <= low <= high <= 10000 Mb/s",
            );
        }
        let (d0, d1) = self.dwell_s;
        if !(d0 >= 0.2 && d1 >= d0 && d1 <= 600.0) {
            return bad("--dwell", format!("{d0},{d1}"), "0.2 <= shortest <= longest <= 600 s");
        }
        Ok(())
    }

    /// Run `k`'s schedule.
    pub fn schedule(&self, k: u32) -> Schedule {
        Schedule::seeded(
            self.seed + k as u64,
            self.duration_s as f64,
            4.0,
            self.dwell_s,
            self.backhaul_mbps,
        )
    }
}

/// What a run came to: its rows, the switches as applied, the host clock at its time 0, and how
/// late the AP released its bursts (p99, µs) if that was over the testbed's bar.
#[derive(Clone, Debug)]
pub struct ClassifierRun {
    /// The classifier's rows, labelled.
    pub rows: Vec<Row>,
    /// The switches as `tc` made them.
    pub applied: Schedule,
    /// `CLOCK_REALTIME` at the schedule's time 0 (ns).
    pub t0_ns: u64,
    /// The AP's release error p99 (µs) when the run was CPU-bound.
    pub late_us: Option<f64>,
    /// The hypervisor's share of the AP's core during the run, where it was read.
    pub ap_core_steal: Option<f64>,
}

/// The plan's runs, one after the other on `d` (checked first); `started(k, schedule)` hears of
/// each run as it begins, `ended(k, run)` as it ends. Stops with [`Error::Interrupted`] when
/// `stop` is set between runs.
pub fn bottleneck_runs(
    d: &Downlink,
    wlan: &ValidWlanConfig,
    plan: &BottleneckPlan,
    stop: &AtomicBool,
    mut started: impl FnMut(u32, &Schedule),
    mut ended: impl FnMut(u32, &ClassifierRun),
) -> Result<Vec<ClassifierRun>, Error> {
    plan.check()?;
    std::fs::create_dir_all(plan.dir).map_err(|source| Error::Io {
        what: "creating the output directory",
        source,
    })?;
    let mut runs = Vec::new();
    for k in 0..plan.runs {
        if stop.load(Ordering::Relaxed) {
            return Err(Error::Interrupted);
        }
        let sched = plan.schedule(k);
        started(k, &sched);
        let dir = plan.dir.join(format!("run_{k}"));
        let run = AggrateRun {
            schedule: Some(&sched),
            weights: plan.weights,
            ..AggrateRun::new(plan.exe, plan.duration_s, plan.interval, plan.seed + k as u64, &dir)
        };
        let (r, switched) = aggrate_run(d, wlan, &run).map_err(|e| Error::Run {
            run: k,
            source: Box::new(e),
        })?;
        let switched = switched.ok_or(Error::Setting {
            field: "schedule",
            value: format!("run {k}"),
            allowed: "a run with a schedule reports its switches",
        })?;
        let json = serde_json::to_string_pretty(&switched.applied).unwrap_or_default() + "\n";
        std::fs::write(dir.join("backhaul.json"), json).map_err(|source| Error::Io {
            what: "writing backhaul.json",
            source,
        })?;
        let rows = rows_from_send_log(&dir.join("send.csv"), k, switched.t0_ns, &switched.applied)?;
        let c = ClassifierRun {
            rows,
            applied: switched.applied,
            t0_ns: switched.t0_ns,
            late_us: r.cpu_bound.then_some(r.release_p99_us),
            ap_core_steal: r.ap_core_steal,
        };
        ended(k, &c);
        runs.push(c);
    }
    Ok(runs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> BottleneckPlan<'static> {
        BottleneckPlan {
            runs: 6,
            train: 4,
            duration_s: 40,
            interval: Duration::from_millis(50),
            backhaul_mbps: (60.0, 200.0),
            dwell_s: (2.0, 5.0),
            seed: 1,
            weights: None,
            exe: Path::new("aggrate"),
            dir: Path::new("out"),
        }
    }

    #[test]
    fn plans_are_checked_by_setting() {
        assert!(plan().check().is_ok());
        for (p, says) in [
            (BottleneckPlan { train: 6, ..plan() }, "--runs / --train"),
            (
                BottleneckPlan {
                    duration_s: 5,
                    ..plan()
                },
                "--duration",
            ),
            (
                BottleneckPlan {
                    interval: Duration::from_millis(5),
                    ..plan()
                },
                "--interval-ms",
            ),
            (
                BottleneckPlan {
                    backhaul_mbps: (300.0, 200.0),
                    ..plan()
                },
                "--backhaul-range",
            ),
            (
                BottleneckPlan {
                    dwell_s: (0.1, 5.0),
                    ..plan()
                },
                "--dwell",
            ),
        ] {
            let e = p.check().unwrap_err().to_string();
            assert!(e.contains(says), "{says}: {e}");
        }
        // Seeded: the same run, the same schedule; another run, another.
        assert_eq!(plan().schedule(2), plan().schedule(2));
        assert_ne!(plan().schedule(2), plan().schedule(3));
    }
}

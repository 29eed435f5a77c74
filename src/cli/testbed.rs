//! `aggrate testbed`: the emulated 802.11ac downlink between network namespaces (root).
//! `up` serves it until Ctrl-C for anything a user runs through it, `run` compares senders on
//! it one after the other, `down` removes what a killed run left.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

use aggrate::report::bottleneck::Run as BottleneckRun;
use anyhow::{bail, Context, Result};

use aggrate::testbed::compare::{aggrate_run, steal_note, tcp_run, AggrateRun, SenderRun, SenderSpec};
use aggrate::testbed::downlink::Downlink;
use aggrate::wlan::codel::Aqm;
use aggrate::wlan::{ValidWlanConfig, WlanConfig};

use super::progress::Ui;
use super::Exit;

#[derive(Debug, clap::Subcommand)]
pub(crate) enum TestbedCommand {
    /// Set the downlink up and serve it until Ctrl-C (prints the namespaces and addresses).
    Up(TestbedArgs),
    /// Run the senders one after the other through the downlink; write a table.
    Run(RunArgs),
    /// Train and judge the bottleneck classifier: aggrate's sender while a backhaul bottleneck
    /// switches on and off (seeded), its classifier's features and P(backhaul) per report
    /// labelled from the switches; a logistic fit on the first --train runs, F1 and detection
    /// delay on the others.
    Bottleneck(BottleneckArgs),
    /// Remove namespaces left by a testbed whose process was killed.
    Down,
}

#[derive(Debug, clap::Args)]
pub(crate) struct BottleneckArgs {
    #[command(flatten)]
    pub(crate) bed: TestbedArgs,
    /// Runs, each with its own seeded schedule (seed + run).
    #[arg(long, default_value_t = 6)]
    pub(crate) runs: u32,
    /// Of them, the first N train the classifier (0: only judge the classifier in the loop).
    #[arg(long, default_value_t = 4)]
    pub(crate) train: u32,
    /// Seconds per run.
    #[arg(long, default_value_t = 40)]
    pub(crate) duration: u32,
    /// Report interval (ms): the classifier decides once per report.
    #[arg(long, default_value_t = 50)]
    pub(crate) interval_ms: u64,
    /// The backhaul's rate while on: a uniform draw from this range (Mb/s), below the WLAN's.
    #[arg(long, value_delimiter = ',', default_values_t = [60.0, 200.0])]
    pub(crate) backhaul_range: Vec<f64>,
    /// How long each spell on or off lasts: a uniform draw from this range (s).
    #[arg(long, value_delimiter = ',', default_values_t = [2.0, 5.0])]
    pub(crate) dwell: Vec<f64>,
    /// Reports after a switch left out of F1 (the detection allowance, ms).
    #[arg(long, default_value_t = 100)]
    pub(crate) allowance_ms: u64,
    /// The sender's classifier weights in the loop (default: the shipped ones).
    #[arg(long, value_name = "FILE")]
    pub(crate) weights: Option<PathBuf>,
    /// Output directory (rows.csv, weights.json, bottleneck.md/.json, plots; per run its logs
    /// and the backhaul's switches as made, backhaul.json).
    #[arg(short, long, default_value = "bottleneck")]
    pub(crate) output: PathBuf,
}

/// `--aqm`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum QueueKind {
    /// Drop-tail FIFO.
    Fifo,
    /// CoDel (RFC 8289).
    Codel,
}

/// The emulated downlink.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct TestbedArgs {
    /// Stations, one namespace each.
    #[arg(long, default_value_t = 1)]
    pub(crate) stations: usize,
    /// VHT MCS per station; one value applies to all.
    #[arg(long, value_delimiter = ',', default_values_t = [9u8])]
    pub(crate) mcs: Vec<u8>,
    /// Spatial streams. One by default: 433 Mb/s at MCS 9 / 80 MHz keeps two cores ahead of
    /// the emulated AP (its release error is reported).
    #[arg(long, default_value_t = 1)]
    pub(crate) nss: u8,
    /// Channel width (MHz).
    #[arg(long, default_value_t = 80)]
    pub(crate) bw: u32,
    /// The AP's FIFO per station (packets).
    #[arg(long, default_value_t = 1000)]
    pub(crate) queue: usize,
    /// The AP's queue discipline per station: a drop-tail FIFO, or CoDel (5 ms / 100 ms, as a
    /// Linux AP) in front of the same limit.
    #[arg(long, value_enum, default_value_t = QueueKind::Fifo)]
    pub(crate) aqm: QueueKind,
    /// A backhaul link before the AP (Mb/s; `tc tbf` with a 1,000-packet queue on the AP's
    /// side of the server's link): the bottleneck moves off the air when it is below the
    /// WLAN's rate.
    #[arg(long)]
    pub(crate) backhaul_mbps: Option<f64>,
    /// What the stations send the server (TCP ACKs, aggrate's feedback) goes straight through
    /// the kernel instead of crossing the emulated air (by default it is queued at the station
    /// and sent in the station's own transmit opportunities, taking air from the downlink).
    #[arg(long)]
    pub(crate) free_uplink: bool,
    /// The stations' receive path: the datasets' kernel-path settings that apply to a
    /// station (`gro`, `threaded`, `rps`, `flush=µs`, `defer=N`, `tick=µs`, `burner`: a busy
    /// thread on the stations' CPU for the whole run; comma-separated; default: plain veth).
    #[arg(long, default_value = "veth")]
    pub(crate) receiver: String,
    /// Cross traffic on the channel (EDCA, as the emulator's contenders).
    #[command(flatten)]
    pub(crate) others: super::common::OthersArgs,
    /// Seed of the emulator's random streams.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
}

#[derive(Debug, clap::Args)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    pub(crate) bed: TestbedArgs,
    /// Senders, in turn: `aggrate` (this program's sender and receivers, the shipped estimator
    /// on the stations' kernel receive times), `aggrate-mac` (the same sender, its receivers
    /// reading the AP's A-MPDU marks as MAC timestamps: the upper bound), `aggrate-airtime` /
    /// `aggrate-count` (steered by the airtime level / the frame count alone) and kernel TCP
    /// congestion controls (iperf3 -C). `NAME@codel` / `NAME@fifo` runs that sender with that
    /// queue at the AP instead of --aqm's, so both sit in one table (e.g. `cubic,cubic@codel`).
    #[arg(long, value_delimiter = ',', default_values_t = ["cubic".to_string(), "bbr".to_string(), "aggrate".to_string(), "aggrate-mac".to_string()])]
    pub(crate) senders: Vec<String>,
    /// aggrate's report interval (ms); the AP's truth uses the same intervals.
    #[arg(long, default_value_t = 500)]
    pub(crate) interval_ms: u64,
    /// Seconds per sender.
    #[arg(long, default_value_t = 60)]
    pub(crate) duration: u32,
    /// Output directory (testbed.md, testbed.json).
    #[arg(short, long, default_value = "testbed")]
    pub(crate) output: PathBuf,
}

impl TestbedArgs {
    /// The emulated WLAN.
    fn wlan(&self) -> Result<ValidWlanConfig> {
        self.wlan_with(self.aqm)
    }

    /// The WLAN with the AP's queue discipline `aqm` (a sender's `@fifo` / `@codel`).
    fn wlan_with(&self, aqm: QueueKind) -> Result<ValidWlanConfig> {
        let mcs = super::mcs_per_station(&self.mcs, self.stations)?;
        let mut cfg = WlanConfig {
            queue_limit: self.queue,
            aqm: match aqm {
                QueueKind::Fifo => Aqm::Fifo,
                QueueKind::Codel => Aqm::codel(),
            },
            ..WlanConfig::vht_stations_with(&mcs, self.nss, self.bw)
        };
        self.others.apply(&mut cfg);
        Ok(cfg.check()?)
    }

    fn describe(&self) -> String {
        format!(
            "VHT MCS {} × {} SS, {} MHz, {}{} packets per station",
            self.mcs.iter().map(|m| m.to_string()).collect::<Vec<_>>().join("/"),
            self.nss,
            self.bw,
            if self.aqm == QueueKind::Codel {
                "CoDel (5 ms, 100 ms) over a FIFO of "
            } else {
                "FIFO of "
            },
            self.queue
        ) + if self.free_uplink {
            ", uplink free (not on the air)"
        } else {
            ""
        } + &self
            .backhaul_mbps
            .map_or(String::new(), |m| format!(", backhaul {m} Mb/s"))
            + &if self.others.contenders > 0 {
                format!(
                    ", {} contender(s) of {} Mb/s",
                    self.others.contenders, self.others.contender_mbps
                )
            } else {
                String::new()
            }
            + &if self.receiver != "veth" {
                format!(", stations' receive path {}", self.receiver)
            } else {
                String::new()
            }
    }

    /// The downlink, with its backhaul.
    fn up(&self, ui: &Ui) -> Result<Downlink> {
        self.others.note_bss(ui);
        let d = Downlink::up(self.stations).context("setting the testbed up")?;
        d.set_backhaul(self.backhaul_mbps).context("--backhaul-mbps")?;
        d.set_uplink_airtime(!self.free_uplink).context("--free-uplink")?;
        let path: aggrate::testbed::KernelPath = self.receiver.parse().context("--receiver")?;
        d.set_receive_path(&path).context("--receiver")?;
        Ok(d)
    }
}

pub(crate) fn run(ui: &Ui, c: TestbedCommand) -> Result<Exit> {
    match c {
        TestbedCommand::Down => {
            let n = aggrate::testbed::cleanup_stale();
            ui.info(format!("removed {n} namespace(s) left by killed runs"));
            Ok(Exit::Ok)
        }
        TestbedCommand::Up(a) => up(ui, a),
        TestbedCommand::Run(a) => compare(ui, a),
        TestbedCommand::Bottleneck(a) => bottleneck(ui, a),
    }
}

fn up(ui: &Ui, a: TestbedArgs) -> Result<Exit> {
    let wlan = a.wlan()?;
    let stop = super::common::stop_on_signals()?;
    let d = a.up(ui)?;
    let ap = d.serve(
        wlan,
        a.seed,
        Duration::from_secs(u32::MAX as u64),
        Duration::from_millis(500),
        stop.clone(),
        Box::new(|_| {}),
    )?;
    println!("server  {}  (ip netns exec {} …)", d.server_ip, d.server_ns);
    for (i, ns) in d.station_ns.iter().enumerate() {
        println!("sta{i}    {}  (ip netns exec {ns} …)", d.station_ip[i]);
    }
    ui.info(format!("serving {} until Ctrl-C", a.describe()));
    let (stats, _) = ap.join().map_err(|_| anyhow::anyhow!("the AP thread panicked"))??;
    ui.info(format!(
        "AP: {} packets in, {} out, {} dropped at a full queue, {} A-MPDUs; removing the testbed",
        stats.data_in, stats.data_out, stats.dropped, stats.ampdus
    ));
    Ok(Exit::Ok)
}

fn compare(ui: &Ui, a: RunArgs) -> Result<Exit> {
    if a.senders.is_empty() {
        bail!("--senders: at least one");
    }
    if !(1..=3600).contains(&a.duration) {
        bail!("--duration {}: 1..=3600 s", a.duration);
    }
    let mut plan = Vec::new();
    for spec in &a.senders {
        let spec = SenderSpec::parse(spec)?;
        let queue = match spec.codel {
            Some(true) => QueueKind::Codel,
            Some(false) => QueueKind::Fifo,
            None => a.bed.aqm,
        };
        let wlan = a.bed.wlan_with(queue)?;
        plan.push((spec, wlan));
    }
    if !(50..=5000).contains(&a.interval_ms) {
        bail!("--interval-ms {}: 50..=5000", a.interval_ms);
    }
    let exe = std::env::current_exe().context("finding this executable (for aggrate's sender)")?;
    let stop = super::common::stop_on_signals()?;
    let d = a.bed.up(ui)?;
    let mut runs: Vec<SenderRun> = Vec::new();
    for (spec, wlan) in &plan {
        if stop.load(Ordering::Relaxed) {
            bail!("interrupted: the testbed was removed");
        }
        let name = spec.name();
        ui.info(format!("{name}: {} s through {}…", a.duration, a.bed.describe()));
        let mut r = if spec.is_aggrate() {
            let dir = a.output.join(spec.dir_name());
            let interval = Duration::from_millis(a.interval_ms);
            // aggrate-mac: the AP marks each A-MPDU and the receivers read the marks, not a model.
            d.set_ampdu_marks(spec.cc == "aggrate-mac");
            let run = AggrateRun {
                steer: spec.steer(),
                ..AggrateRun::new(&exe, a.duration, interval, a.bed.seed, &dir)
            };
            let r = aggrate_run(&d, wlan, &run)
                .map(|(r, _)| r)
                .with_context(|| name.clone());
            d.set_ampdu_marks(false);
            r?
        } else {
            tcp_run(&d, wlan, &spec.cc, a.duration, a.bed.seed).with_context(|| name.clone())?
        };
        for f in &mut r.flows {
            f.sender = name.clone();
        }
        if r.cpu_bound {
            ui.warn(format!(
                "{name}: the AP released bursts up to {:.0} µs late (p99): the host, not the WLAN, set the timing{}",
                r.release_p99_us,
                steal_note(r.ap_core_steal)
            ));
        }
        for n in &r.notes {
            ui.warn(format!("{name}: {n}"));
        }
        runs.push(r);
    }
    drop(d);
    let desc = a.bed.describe();
    let setting = aggrate::report::testbed::Setting {
        wlan: &desc,
        duration_s: a.duration,
    };
    print!("{}", aggrate::report::testbed::markdown(&setting, &runs));
    let written = aggrate::report::testbed::write(&a.output, &setting, &runs)?;
    let names: Vec<String> = written.iter().map(|p| p.display().to_string()).collect();
    ui.info(format!("wrote {}", names.join(", ")));
    Ok(Exit::Ok)
}

fn bottleneck(ui: &Ui, a: BottleneckArgs) -> Result<Exit> {
    use aggrate::testbed::classifier::{bottleneck_runs, BottleneckPlan};
    if a.bed.backhaul_mbps.is_some() {
        bail!("--backhaul-mbps: the runs switch the backhaul themselves (--backhaul-range)");
    }
    let (&[lo, hi], &[d0, d1]) = (&a.backhaul_range[..], &a.dwell[..]) else {
        bail!("--backhaul-range LOW,HIGH (Mb/s) and --dwell SHORTEST,LONGEST (s): two values each");
    };
    let exe = std::env::current_exe().context("finding this executable (for aggrate's sender)")?;
    let plan = BottleneckPlan {
        runs: a.runs,
        train: a.train,
        duration_s: a.duration,
        interval: Duration::from_millis(a.interval_ms),
        backhaul_mbps: (lo, hi),
        dwell_s: (d0, d1),
        seed: a.bed.seed,
        weights: a.weights.as_deref(),
        exe: &exe,
        dir: &a.output,
    };
    // Refused before anything is set up.
    plan.check()?;
    a.weights
        .as_deref()
        .map(aggrate::bottleneck::read_weights)
        .transpose()?;
    let wlan = a.bed.wlan()?;
    let stop = super::common::stop_on_signals()?;
    let d = a.bed.up(ui)?;
    let runs = bottleneck_runs(
        &d,
        &wlan,
        &plan,
        &stop,
        |k, sched| {
            let role = if k < a.train { "training" } else { "held out" };
            ui.info(format!(
                "run {}/{} ({role}): {} s, {} switches of the backhaul…",
                k + 1,
                a.runs,
                a.duration,
                sched.switches.len()
            ))
        },
        |k, r| {
            if let Some(us) = r.late_us {
                ui.warn(format!(
                    "run {k}: the AP released bursts up to {us:.0} µs late (p99){}",
                    steal_note(r.ap_core_steal)
                ));
            }
        },
    )?;
    drop(d);
    let runs: Vec<BottleneckRun> = runs.into_iter().map(|r| (r.rows, r.applied, r.t0_ns)).collect();
    let setting = aggrate::report::bottleneck::Setting {
        testbed: a.bed.describe(),
        runs: a.runs,
        train: a.train,
        duration_s: a.duration,
        interval_ms: a.interval_ms,
        backhaul_mbps: (lo, hi),
        dwell_s: (d0, d1),
        allowance_ms: a.allowance_ms,
        weights_in_loop: a.weights.as_ref().map_or("shipped".into(), |p| p.display().to_string()),
        dir: &a.output,
    };
    let (md, _) = aggrate::report::bottleneck::write(&setting, &runs)?;
    print!("{md}");
    ui.info(format!("wrote {}", a.output.display()));
    Ok(Exit::Ok)
}

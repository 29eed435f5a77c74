//! The emulated 802.11ac downlink between network namespaces (root only): any IP traffic from a
//! server to a station crosses the [`WlanSim`](crate::wlan::WlanSim) in real time, so the
//! kernel's TCP (Cubic, BBR: `iperf3`) and aggrate's own transport meet the same bottleneck.
//!
//! [`Downlink::up`] makes namespaces `…-srv`, `…-ap` and one `…-sK` per station, joined by
//! veth pairs (server–AP, AP–station K), with addresses and routes, and in `…-ap` a TUN device.
//! A policy rule sends what arrives from the server for a station into the TUN device; the AP
//! loop ([`run_ap_on`]) reads it, queues it in the emulator's per-station FIFO at its arrival
//! time, and writes it back to the TUN device at the emulated A-MPDU end times, whence the
//! kernel forwards it to the station. The uplink (TCP ACKs, feedback) is forwarded by the
//! kernel directly: it does not take airtime here.
//!
//! Segmentation offloads are off on the server's side, so every packet is one MPDU. Dropping the
//! [`Downlink`] deletes the namespaces (links go with them), also when a panic unwinds;
//! [`super::cleanup_stale`] removes those of a process that was killed.

use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::{apply_rx, enter, is_root, ns_write, pin, run, Burner, Error, KernelPath, Made, NEXT};
use crate::wlan::live::{run_ap_on, ApOptions, ApPort, ApStats, ApTruth, Released, Survey, TruthRow, Way};
use crate::wlan::ValidWlanConfig;

/// Most stations a downlink carries.
pub const MAX_STATIONS: usize = 8;

/// What an AP run returns: its counters, and its truth per station and interval (at
/// most [`TRUTH_ROWS_MAX`] rows; the first ones are kept).
pub type Served = (ApStats, Vec<TruthRow>);

/// Most truth rows an AP run keeps (an hour of 100 ms intervals for 8 stations).
pub const TRUTH_ROWS_MAX: usize = 36_000 * MAX_STATIONS;

/// The server's device (toward the AP) in the server's namespace.
pub const SERVER_DEV: &str = "srv0";

/// How often the AP's survey file is rewritten.
pub const SURVEY_WRITE_EVERY: Duration = Duration::from_millis(10);

/// A downlink's survey file, in a directory of its own (made anew, mode 0700, named after the
/// downlink: [`super::cleanup_stale`] removes those of a killed process), removed when dropped.
#[derive(Debug)]
pub struct SurveyPath(pub std::path::PathBuf);

impl SurveyPath {
    fn make(base: &str) -> Result<SurveyPath, Error> {
        use std::os::unix::fs::DirBuilderExt;
        let dir = std::env::temp_dir().join(base);
        // Refuses what is there already (a file, a symlink): nothing is written through it.
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(super::io("making the survey's directory"))?;
        Ok(SurveyPath(dir.join("survey")))
    }
}

impl Drop for SurveyPath {
    fn drop(&mut self) {
        if let Some(dir) = self.0.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Keep `path` holding `survey`'s line until `stop` (written whole: a new file renamed over).
fn write_survey(path: &std::path::Path, survey: &Survey, stop: &AtomicBool) {
    let tmp = path.with_extension("new");
    while !stop.load(Ordering::Relaxed) {
        if std::fs::write(&tmp, survey.line()).is_ok() {
            let _ = std::fs::rename(&tmp, path);
        }
        std::thread::sleep(SURVEY_WRITE_EVERY);
    }
}

/// The IFB device in the AP's namespace that carries a backhaul's token bucket
/// ([`Downlink::set_backhaul`]).
pub const BACKHAUL_DEV: &str = "bh0";

/// Name of the TUN device in the AP's namespace.
const TUN: &str = "agtun";

/// The name of a downlink's CPU burner thread (`/proc/<pid>/task/*/comm`).
pub const STATION_BURNER: &str = "sta-burner";

/// Namespaces, links and the TUN device of one emulated downlink; torn down on drop.
#[derive(Debug)]
pub struct Downlink {
    /// The server's namespace (the senders run here).
    pub server_ns: String,
    /// The AP's namespace.
    pub ap_ns: String,
    /// Each station's namespace (the receivers run here).
    pub station_ns: Vec<String>,
    /// The server's address.
    pub server_ip: Ipv4Addr,
    /// Each station's address.
    pub station_ip: Vec<Ipv4Addr>,
    /// The station-side device in each station's namespace.
    pub station_dev: Vec<String>,
    /// The emulated channel's survey while the AP serves (`active_ns busy_ns own_ns`, the cell's
    /// exchanges as own; rewritten every [`SURVEY_WRITE_EVERY`]): what `recv --survey-file` reads.
    /// Removed with the downlink.
    pub survey_file: SurveyPath,
    /// The AP's release tick (µs; 0: none), from [`Downlink::set_receive_path`].
    tick_us: std::sync::atomic::AtomicU64,
    /// Whether the AP marks each A-MPDU in its packets' DSCP bits ([`Downlink::set_ampdu_marks`]).
    marks: AtomicBool,
    /// Whether the backhaul's IFB device and redirect are made ([`Downlink::set_backhaul`]).
    backhaul: AtomicBool,
    /// Whether the stations' receive path merges packets (GRO; [`Downlink::set_receive_path`]).
    gro: AtomicBool,
    /// The stations' CPU burner while their receive path has one ([`Downlink::set_receive_path`];
    /// its thread is named [`STATION_BURNER`]).
    burner: std::sync::Mutex<Option<Burner>>,
    made: Made,
}

impl Downlink {
    /// Make the namespaces, links, routes and TUN device for `stations` stations.
    pub fn up(stations: usize) -> Result<Downlink, Error> {
        if !(1..=MAX_STATIONS).contains(&stations) {
            return Err(Error::Setting {
                field: "stations",
                value: stations.to_string(),
                allowed: "1..=8",
            });
        }
        if !is_root() {
            return Err(Error::NotRoot);
        }
        super::cleanup_stale();
        let k = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let base = format!("aggrate-{pid}-w{k}");
        let net = (k % 250) as u8;
        let mut d = Downlink {
            server_ns: format!("{base}-srv"),
            ap_ns: format!("{base}-ap"),
            station_ns: (0..stations).map(|i| format!("{base}-s{i}")).collect(),
            server_ip: Ipv4Addr::new(10, 214, net, 1),
            station_ip: (0..stations)
                .map(|i| Ipv4Addr::new(10, 215 + i as u8, net, 2))
                .collect(),
            station_dev: (0..stations).map(|i| format!("st{i}")).collect(),
            tick_us: Default::default(),
            marks: AtomicBool::new(false),
            backhaul: AtomicBool::new(false),
            gro: AtomicBool::new(false),
            burner: std::sync::Mutex::new(None),
            survey_file: SurveyPath::make(&base)?,
            made: Made::default(),
        };
        let all: Vec<String> = [d.server_ns.clone(), d.ap_ns.clone()]
            .into_iter()
            .chain(d.station_ns.iter().cloned())
            .collect();
        for ns in all {
            d.made.add(&ns)?;
            // No IPv6: neighbour discovery and router solicitations would cross the AP too.
            run(
                "ip",
                &[
                    "netns",
                    "exec",
                    &ns,
                    "sysctl",
                    "-qw",
                    "net.ipv6.conf.all.disable_ipv6=1",
                ],
            )?;
        }
        let (srv, ap) = (d.server_ns.clone(), d.ap_ns.clone());
        // Server – AP.
        let gw = Ipv4Addr::new(10, 214, net, 2);
        link(
            &srv,
            "srv0",
            &format!("{}/24", d.server_ip),
            &ap,
            "ap0",
            &format!("{gw}/24"),
        )?;
        run("ip", &["-n", &srv, "route", "add", "default", "via", &gw.to_string()])?;
        // One MPDU per packet: no super-packets from the server's stack.
        run(
            "ip",
            &[
                "netns", "exec", &srv, "ethtool", "-K", "srv0", "tso", "off", "gso", "off", "gro", "off",
            ],
        )?;
        // The AP forwards; packets it writes back into the TUN device come from the server's
        // subnet on another interface than the route back to it: no reverse-path filter.
        for kv in [
            "net.ipv4.ip_forward=1",
            "net.ipv4.conf.all.rp_filter=0",
            "net.ipv4.conf.default.rp_filter=0",
        ] {
            run("ip", &["netns", "exec", &ap, "sysctl", "-qw", kv])?;
        }
        run("ip", &["-n", &ap, "tuntap", "add", "dev", TUN, "mode", "tun"])?;
        run(
            "ip",
            &[
                "netns",
                "exec",
                &ap,
                "sysctl",
                "-qw",
                &format!("net.ipv4.conf.{TUN}.rp_filter=0"),
            ],
        )?;
        run("ip", &["-n", &ap, "link", "set", TUN, "up"])?;
        run(
            "ip",
            &["-n", &ap, "rule", "add", "iif", "ap0", "lookup", "100", "pref", "100"],
        )?;
        d.stations_up(net)?;
        d.set_uplink_airtime(true)?;
        d.steer_off_core0()?;
        Ok(d)
    }

    /// Each station's link from the AP, its route, and the AP's routes through the TUN device:
    /// to each station (table 100) and, on the uplink, to the server (table 101).
    fn stations_up(&self, net: u8) -> Result<(), Error> {
        let ap = &self.ap_ns;
        for (i, sta) in self.station_ns.iter().enumerate() {
            let ap_side = Ipv4Addr::new(10, 215 + i as u8, net, 1);
            let ap_dev = format!("ap{}", i + 1);
            link(
                ap,
                &ap_dev,
                &format!("{ap_side}/24"),
                sta,
                &self.station_dev[i],
                &format!("{}/24", self.station_ip[i]),
            )?;
            run(
                "ip",
                &["-n", sta, "route", "add", "default", "via", &ap_side.to_string()],
            )?;
            // What the server sends a station goes through the emulator first.
            let subnet = format!("10.{}.{net}.0/24", 215 + i);
            run("ip", &["-n", ap, "route", "add", &subnet, "dev", TUN, "table", "100"])?;
        }
        // And what a station sends the server, on the uplink.
        let server = format!("10.214.{net}.0/24");
        run("ip", &["-n", ap, "route", "add", &server, "dev", TUN, "table", "101"]).map(|_| ())
    }

    /// The AP's thread keeps core 0 to itself: what the kernel does for the packets (the
    /// station's TCP and its ACK, the server's TCP that then sends more) runs on the other cores,
    /// steered there (RPS) from every device but the TUN device, as do the processes that
    /// [`Downlink::command`] starts.
    fn steer_off_core0(&self) -> Result<(), Error> {
        let Some(mask) = others_mask() else {
            return Ok(());
        };
        // Not the TUN device: what the AP writes is forwarded to the station's veth in the AP's
        // own thread, so the station's kernel stamps each packet when the AP released it (the
        // stamp is taken before RPS hands the packet on). Forwarded on a busy core instead, a
        // burst would be stamped at that core's pace and its A-MPDU smeared out.
        let mut devs = vec![
            (self.server_ns.clone(), "srv0".to_string()),
            (self.ap_ns.clone(), "ap0".to_string()),
        ];
        for (i, ns) in self.station_ns.iter().enumerate() {
            devs.push((self.ap_ns.clone(), format!("ap{}", i + 1)));
            devs.push((ns.clone(), self.station_dev[i].clone()));
        }
        for (ns, dev) in devs {
            ns_write(
                &ns,
                &format!("/sys/class/net/{dev}/queues/rx-0/rps_cpus"),
                &format!("{mask:x}"),
            )?;
        }
        Ok(())
    }

    /// Whether what the stations send the server (TCP ACKs, a receiver's feedback) crosses the
    /// emulated WLAN — queued at the station and sent in the station's own transmit
    /// opportunities, taking air from the downlink (the default) — or goes straight to the
    /// server through the kernel (`false`: the uplink free, as before it was emulated).
    pub fn set_uplink_airtime(&self, on: bool) -> Result<(), Error> {
        for i in 0..self.station_ip.len() {
            let dev = format!("ap{}", i + 1);
            let pref = (110 + i).to_string();
            // Removing a rule that is not there is fine: the uplink is direct either way.
            let _ = run("ip", &["-n", &self.ap_ns, "rule", "del", "pref", &pref]);
            if on {
                run(
                    "ip",
                    &[
                        "-n",
                        &self.ap_ns,
                        "rule",
                        "add",
                        "iif",
                        &dev,
                        "lookup",
                        "101",
                        "pref",
                        &pref,
                    ],
                )?;
            }
        }
        Ok(())
    }

    /// Mark each A-MPDU the AP releases from the next [`Downlink::serve`] on: its number per
    /// station (modulo 64) in the DSCP bits of its packets' TOS byte, ECN kept, the header
    /// checksum redone. A receiver that reads the TOS byte (`aggrate recv --ap-marks`) then
    /// knows every frame boundary, as a receiver reading MAC timestamps from radiotap does:
    /// the estimator's upper bound on this testbed. Kernel TCP ignores the bits.
    pub fn set_ampdu_marks(&self, on: bool) {
        self.marks.store(on, Ordering::Relaxed);
    }

    /// Whether the AP marks A-MPDUs ([`Downlink::set_ampdu_marks`]).
    pub fn ampdu_marks(&self) -> bool {
        self.marks.load(Ordering::Relaxed)
    }

    /// The stations' receive path: `path`'s receive-side settings on every station's device
    /// (GRO, threaded NAPI, RPS, NAPI deferral — as the datasets' kernel paths), its release
    /// tick at the AP ([`KernelPath::tick_us`], a driver's or bus's batching, returned for
    /// every later [`Downlink::serve`]). Settings a station cannot take here are refused by name.
    pub fn set_receive_path(&self, path: &KernelPath) -> Result<(), Error> {
        path.check()?;
        let unsupported = [
            (path.busy_poll_us > 0, "busy"),
            (path.shape_mbps > 0, "shape"),
            (path.per_mpdu, "per_mpdu"),
        ];
        if let Some((_, name)) = unsupported.iter().find(|(on, _)| *on) {
            return Err(Error::Setting {
                field: "receive path",
                value: (*name).to_string(),
                allowed: "gro, threaded, rps, burner, flush=…, defer=…, tick=… (the station's receive side)",
            });
        }
        let cpu = if others_mask().is_some() { 1 } else { 0 };
        for (ns, dev) in self.station_ns.iter().zip(&self.station_dev) {
            apply_rx(ns, dev, path, cpu)?;
        }
        // A burner on the stations' CPU (the one their receivers, and on two cores the senders,
        // run on; the AP keeps CPU 0) until another path is set or the downlink goes.
        let mut b = self.burner.lock().unwrap_or_else(|e| e.into_inner());
        *b = None;
        *b = path
            .cpu_burner
            .then(|| Burner::start(cpu, STATION_BURNER))
            .transpose()?;
        self.tick_us.store(path.tick_us as u64, Ordering::Relaxed);
        self.gro.store(path.gro, Ordering::Relaxed);
        Ok(())
    }

    /// A backhaul link before the AP: what reaches the AP from the server passes at most
    /// `mbps` (a token bucket with a queue of 1,000 full-size packets, `tc tbf`), or at line
    /// rate again (`None`). The bucket sits on the AP's side of the server–AP link (the link's
    /// ingress redirected through an IFB device, [`BACKHAUL_DEV`]), after the server's capture
    /// for the one-way delay: the delay counts the backhaul's queue.
    pub fn set_backhaul(&self, mbps: Option<f64>) -> Result<(), Error> {
        let tc = |args: &[&str]| {
            let mut all = vec!["-n", &self.ap_ns];
            all.extend_from_slice(args);
            run("tc", &all).map(|_| ())
        };
        let Some(mbps) = mbps else {
            // The redirect and the IFB device go too: the link is as it was made. (Nothing to
            // remove is fine: the link is at line rate either way.)
            self.remove_backhaul();
            return Ok(());
        };
        if !(mbps.is_finite() && (1.0..=10_000.0).contains(&mbps)) {
            return Err(Error::Setting {
                field: "backhaul_mbps",
                value: mbps.to_string(),
                allowed: "1..=10000 Mb/s",
            });
        }
        if !self.backhaul.swap(true, Ordering::Relaxed) {
            let made = run("ip", &["-n", &self.ap_ns, "link", "add", BACKHAUL_DEV, "type", "ifb"])
                .and_then(|_| run("ip", &["-n", &self.ap_ns, "link", "set", BACKHAUL_DEV, "up"]))
                .and_then(|_| tc(&["qdisc", "add", "dev", "ap0", "handle", "ffff:", "ingress"]))
                .and_then(|_| {
                    tc(&[
                        // u32 matching everything: the classifier every kernel with tc has.
                        "filter",
                        "add",
                        "dev",
                        "ap0",
                        "parent",
                        "ffff:",
                        "protocol",
                        "ip",
                        "u32",
                        "match",
                        "u32",
                        "0",
                        "0",
                        "action",
                        "mirred",
                        "egress",
                        "redirect",
                        "dev",
                        BACKHAUL_DEV,
                    ])
                });
            if let Err(e) = made {
                self.remove_backhaul();
                return Err(match e {
                    Error::Command { stderr, .. } => Error::Missing {
                        what: "an IFB device with tc's ingress redirect (the backhaul)".into(),
                        fix: format!("a kernel with ifb, act_mirred and cls_u32 ({})", stderr.trim()),
                    },
                    e => e,
                });
            }
        }
        let rate = format!("{}kbit", (mbps * 1000.0).round() as u64);
        tc(&[
            "qdisc",
            "replace",
            "dev",
            BACKHAUL_DEV,
            "root",
            "tbf",
            "rate",
            &rate,
            "burst",
            "15000",
            "limit",
            "1500000",
        ])
    }

    /// Where packets arriving at station `i` are captured for the one-way delay: (namespace,
    /// device, whether the device sends them). The station's own device — unless its receive
    /// path merges packets (GRO), which no packet the server sent matches: then the AP's device
    /// toward it, as the AP hands each packet over.
    pub fn arrival_tap(&self, i: usize) -> (&str, String, bool) {
        if self.gro.load(Ordering::Relaxed) {
            (&self.ap_ns, format!("ap{}", i + 1), true)
        } else {
            (&self.station_ns[i], self.station_dev[i].clone(), false)
        }
    }

    /// Remove the backhaul's redirect and IFB device, if made (what is not there is fine).
    fn remove_backhaul(&self) {
        if self.backhaul.swap(false, Ordering::Relaxed) {
            let _ = run("tc", &["-n", &self.ap_ns, "qdisc", "del", "dev", "ap0", "ingress"]);
            let _ = run("ip", &["-n", &self.ap_ns, "link", "del", BACKHAUL_DEV]);
        }
    }

    /// A command run in namespace `ns` (one of this downlink's), off the AP's core.
    pub fn command(&self, ns: &str, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns]);
        match others_mask() {
            Some(mask) => c.args(["taskset", &format!("{mask:x}"), program]),
            None => c.arg(program),
        };
        c
    }

    /// Run the emulated AP on the TUN device in a thread of the AP's namespace until `stop` is
    /// set (or `limit` passes): `wlan` must configure one station per station of the downlink.
    /// The thread returns the AP's counters and truth per `interval` ([`Served`]); `on_release` hears every
    /// packet released.
    pub fn serve(
        &self,
        wlan: ValidWlanConfig,
        seed: u64,
        limit: Duration,
        interval: Duration,
        stop: Arc<AtomicBool>,
        mut on_release: Box<dyn FnMut(&Released) + Send>,
    ) -> Result<std::thread::JoinHandle<Result<Served, Error>>, Error> {
        if wlan.config().stations.len() != self.station_ip.len() {
            return Err(Error::Setting {
                field: "wlan.stations",
                value: wlan.config().stations.len().to_string(),
                allowed: "one per station of the downlink",
            });
        }
        let ap = self.ap_ns.clone();
        let stations = self.station_ip.clone();
        let release_tick = Duration::from_micros(self.tick_us.load(Ordering::Relaxed));
        let marks = self.marks.load(Ordering::Relaxed);
        let survey_path = self.survey_file.0.clone();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let handle = std::thread::spawn(move || -> Result<Served, Error> {
            // The channel survey, kept in a file by a thread off the AP's core while the AP
            // serves (started before this thread turns real-time: it does not inherit that),
            // and joined when it ends.
            let survey = Survey::default();
            let done = AtomicBool::new(false);
            std::thread::scope(|sc| {
                sc.spawn(|| {
                    if let Some(m) = others_mask() {
                        pin(m.trailing_zeros() as usize);
                    }
                    write_survey(&survey_path, &survey, &done)
                });
                let served = serve_tun(&ap, (stations, marks), ready_tx, |port| {
                    let mut truth = Vec::new();
                    let mut on_row = |r: &TruthRow| {
                        if truth.len() < TRUTH_ROWS_MAX {
                            truth.push(*r);
                        }
                    };
                    let opts = ApOptions {
                        truth: Some(ApTruth {
                            interval,
                            on_row: &mut on_row,
                        }),
                        release_tick,
                        on_release: Some(&mut *on_release),
                        survey: Some(&survey),
                        // Kernel TCP and aggrate alike over a TUN: the AP forwards IP packets.
                        key: None,
                    };
                    let stats = run_ap_on(port, wlan, seed, limit, &stop, opts);
                    (stats, truth)
                });
                done.store(true, Ordering::Relaxed);
                served
            })
        });
        if let Ok(Ok(())) = ready_rx.recv() {
            return Ok(handle);
        }
        match handle.join() {
            Ok(Err(e)) => Err(e),
            _ => Err(Error::Io {
                what: "starting the AP thread",
                source: std::io::Error::other("the AP thread ended before it opened the TUN device"),
            }),
        }
    }
}

/// The AP's thread: real time on core 0, in the AP's namespace `ap`, the TUN device opened (said
/// on `ready`) and served by `run` as a port for `stations` (A-MPDU marks or not).
fn serve_tun(
    ap: &str,
    (stations, marks): (Vec<Ipv4Addr>, bool),
    ready: std::sync::mpsc::Sender<Result<(), String>>,
    run: impl FnOnce(&mut dyn ApPort) -> Served,
) -> Result<Served, Error> {
    // Sleeps end when asked, not up to 50 µs later: the AP releases bursts on time.
    let _ = nix::sys::prctl::set_timerslack(1);
    realtime();
    pin(0);
    let tun = match enter(ap).and_then(|()| open_tun(TUN)) {
        Ok(t) => {
            let _ = ready.send(Ok(()));
            t
        }
        Err(e) => {
            let _ = ready.send(Err(e.to_string()));
            return Err(e);
        }
    };
    let n = stations.len();
    let mut port = TunPort {
        tun,
        stations,
        short_writes: 0,
        marks: marks.then(|| vec![0; n]),
        scratch: Vec::with_capacity(65_536),
    };
    Ok(run(&mut port))
}

/// The CPUs other than 0, as a mask (`None` on one CPU).
pub(super) fn others_mask() -> Option<u64> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get().min(64));
    (cpus > 1).then(|| (u64::MAX >> (64 - cpus)) & !1)
}

/// Run the calling thread under `SCHED_FIFO` (priority 10), ahead of the senders and
/// receivers it serves on the same cores: the emulated WLAN keeps its times on a loaded host.
/// The loop sleeps whenever its next event is more than 120 µs away, and the kernel's
/// real-time throttling bounds it in any case. Best effort: without the right, it runs as is.
#[allow(unsafe_code)]
fn realtime() {
    let p = libc::sched_param { sched_priority: 10 };
    // SAFETY: a plain system call on the calling thread (0), with a parameter we own.
    unsafe {
        libc::sched_setscheduler(0, libc::SCHED_FIFO, &p);
    }
}

/// The station (index into `stations`) an IP packet is for, from its IPv4 destination
/// (`None`: not one of ours, or not IPv4).
/// Which way an IPv4 packet crosses the air, and its station: to a station (by destination),
/// or from one (by source) on the uplink.
fn station_of(stations: &[Ipv4Addr], packet: &[u8]) -> Option<(Way, usize)> {
    if packet.len() < 20 || packet[0] >> 4 != 4 {
        return None;
    }
    let src = Ipv4Addr::new(packet[12], packet[13], packet[14], packet[15]);
    let dst = Ipv4Addr::new(packet[16], packet[17], packet[18], packet[19]);
    match stations.iter().position(|&s| s == dst) {
        Some(i) => Some((Way::Down, i)),
        None => stations.iter().position(|&s| s == src).map(|i| (Way::Up, i)),
    }
}

/// A veth pair from `a` (device `da`, address `aa`) to `b` (`db`, `ab`), both ends up.
fn link(a: &str, da: &str, aa: &str, b: &str, db: &str, ab: &str) -> Result<(), Error> {
    run(
        "ip",
        &[
            "link", "add", da, "netns", a, "type", "veth", "peer", "name", db, "netns", b,
        ],
    )?;
    run("ip", &["-n", a, "addr", "add", aa, "dev", da])?;
    run("ip", &["-n", b, "addr", "add", ab, "dev", db])?;
    run("ip", &["-n", a, "link", "set", da, "up"])?;
    run("ip", &["-n", b, "link", "set", db, "up"])?;
    Ok(())
}

/// Attach to the TUN device `name` of the calling thread's namespace (IFF_TUN, no packet
/// information header), non-blocking.
///
/// One `TUNSETIFF` ioctl on a file we opened, with an `ifreq` we own for the call: written
/// here rather than taking a TUN crate, whose async runtimes and device managers we do not
/// need (nor their build time).
#[allow(unsafe_code)]
fn open_tun(name: &str) -> Result<File, Error> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open("/dev/net/tun")
        .map_err(super::io("opening /dev/net/tun"))?;
    // SAFETY: `ifreq` is plain old data (zeroed is valid); the name is at most 15 bytes plus the
    // zero that `zeroed` left; the ioctl reads the struct during the call only.
    let r = unsafe {
        let mut req: libc::ifreq = std::mem::zeroed();
        for (d, s) in req.ifr_name.iter_mut().zip(name.bytes().take(libc::IFNAMSIZ - 1)) {
            *d = s as libc::c_char;
        }
        req.ifr_ifru.ifru_flags = (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short;
        libc::ioctl(f.as_raw_fd(), libc::TUNSETIFF as _, &req)
    };
    if r < 0 {
        return Err(super::io("attaching to the TUN device")(std::io::Error::last_os_error()));
    }
    Ok(f)
}

/// The AP's port on the TUN device: packets in are the server's, for the station their
/// destination names; packets out go back into the device, for the kernel to forward. With
/// `marks`, each IPv4 packet leaves with its A-MPDU's number (per station, modulo 64) in the
/// DSCP bits of its TOS byte ([`Downlink::set_ampdu_marks`]).
struct TunPort {
    tun: File,
    stations: Vec<Ipv4Addr>,
    short_writes: u64,
    /// Per station: the number of its A-MPDU being released (`None`: no marks).
    marks: Option<Vec<u8>>,
    scratch: Vec<u8>,
}

/// Put `dscp` (6 bits) into an IPv4 packet's TOS byte, keeping its ECN bits, and recompute the
/// header checksum. Not IPv4, or cut inside its header: unchanged.
fn mark_dscp(p: &mut [u8], dscp: u8) {
    let ihl = usize::from(p.first().map_or(0, |b| b & 0x0f)) * 4;
    if p.first().map(|b| b >> 4) != Some(4) || ihl < 20 || p.len() < ihl {
        return;
    }
    p[1] = (dscp << 2) | (p[1] & 0x03);
    p[10] = 0;
    p[11] = 0;
    let mut sum: u32 = p[..ihl]
        .chunks_exact(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    p[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
}

impl ApPort for TunPort {
    fn recv(&mut self, buf: &mut [u8], stats: &mut ApStats) -> Option<(Way, usize, usize)> {
        loop {
            match self.tun.read(buf) {
                Ok(0) => return None,
                Ok(n) => match station_of(&self.stations, &buf[..n]) {
                    Some(way_sta) => return Some((way_sta.0, way_sta.1, n)),
                    None => stats.foreign += 1,
                },
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => return None,
            }
        }
    }

    fn send(&mut self, i: usize, bytes: &[u8], starts_ampdu: bool) {
        let out = match self.marks.as_mut().and_then(|m| m.get_mut(i)) {
            Some(n) => {
                if starts_ampdu {
                    *n = (*n + 1) % 64;
                }
                self.scratch.clear();
                self.scratch.extend_from_slice(bytes);
                mark_dscp(&mut self.scratch, *n);
                &self.scratch[..]
            }
            None => bytes,
        };
        if self.tun.write(out).map_or(true, |n| n < out.len()) {
            self.short_writes += 1;
        }
    }

    fn send_up(&mut self, _i: usize, bytes: &[u8]) {
        // Back into the TUN device: the kernel routes it on to the server.
        if self.tun.write(bytes).map_or(true, |n| n < bytes.len()) {
            self.short_writes += 1;
        }
    }

    fn l3_overhead(&self) -> usize {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ampdu_mark_keeps_ecn_and_a_valid_header_checksum() {
        // A real header (checksum 0xb861 as sent).
        let mut p: Vec<u8> = vec![
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8,
            0x00, 0xc7,
        ];
        let sum = |p: &[u8]| -> u32 {
            let mut s: u32 = p
                .chunks_exact(2)
                .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
                .sum();
            while s > 0xffff {
                s = (s & 0xffff) + (s >> 16);
            }
            s
        };
        assert_eq!(sum(&p), 0xffff, "the fixture's own checksum");
        mark_dscp(&mut p, 45);
        assert_eq!((p[1] >> 2, p[1] & 3), (45, 0));
        assert_eq!(sum(&p), 0xffff);
        // ECN "ECT(0)" set on the way: kept.
        p[1] |= 2;
        mark_dscp(&mut p, 12);
        assert_eq!((p[1] >> 2, p[1] & 3), (12, 2));
        assert_eq!(sum(&p), 0xffff);
        // Not IPv4, or cut: untouched.
        let mut v6 = vec![0x60u8; 40];
        mark_dscp(&mut v6, 3);
        assert!(v6.iter().all(|&b| b == 0x60));
        let mut cut = p[..12].to_vec();
        let before = cut.clone();
        mark_dscp(&mut cut, 7);
        assert_eq!(cut, before);
    }

    #[test]
    fn a_packet_goes_to_the_station_its_destination_names_or_comes_from_its_source() {
        let stations = [Ipv4Addr::new(10, 215, 0, 2), Ipv4Addr::new(10, 216, 0, 2)];
        let mut p = [0u8; 40];
        p[0] = 0x45;
        p[12..16].copy_from_slice(&[10, 214, 0, 1]);
        p[16..20].copy_from_slice(&[10, 216, 0, 2]);
        assert_eq!(station_of(&stations, &p), Some((Way::Down, 1)));
        p[16..20].copy_from_slice(&[10, 217, 0, 2]);
        assert_eq!(station_of(&stations, &p), None);
        // From station 0 to the server: its uplink.
        p[12..16].copy_from_slice(&[10, 215, 0, 2]);
        p[16..20].copy_from_slice(&[10, 214, 0, 1]);
        assert_eq!(station_of(&stations, &p), Some((Way::Up, 0)));
        p[0] = 0x60;
        assert_eq!(station_of(&stations, &p), None);
        assert_eq!(station_of(&stations, &p[..19]), None);
    }
}

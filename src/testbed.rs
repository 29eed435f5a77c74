//! Real kernel receive paths made here (root only): a veth pair between two network namespaces,
//! with the receive-path settings a user can change on a real host, and a replay of emulated
//! A-MPDU delivery times through it.
//!
//! [`Testbed::create`] makes two namespaces (`aggrate-<pid>-<k>-tx`, `…-rx`), a veth pair
//! between them and addresses, and applies a [`KernelPath`]: GRO on/off (which also turns the
//! veth's NAPI on), threaded NAPI, RPS to the receiving CPU, the NAPI hrtimer deferral
//! (`gro_flush_timeout`, `napi_defer_hard_irqs`), busy polling on the receiving socket, a
//! CPU burner pinned to the receiving CPU, and a serialising hop before the host (a
//! token-bucket shaper on the sending veth, as a USB or SDIO bus spaces a frame's packets).
//! [`Testbed::replay`] sends one UDP datagram per MPDU at its scheduled time (A-MPDUs back to
//! back, MPDU by MPDU through the PPDU, or released at timer ticks: [`schedule`]) and records
//! the kernel's receive timestamps (`SO_TIMESTAMPNS`). Dropping
//! the testbed stops the burner and deletes both namespaces (the veth goes with them), also when
//! a panic unwinds; [`cleanup_stale`] removes namespaces left by a process that was killed.
//!
//! Edge code: it runs `ip`, `ethtool` and writes sysfs, reads the real clock (sender schedule,
//! like [`crate::wlan::live`]) and is not deterministic by nature. Needs root (CAP_NET_ADMIN)
//! and iproute2; GRO switching needs `ethtool`, shaping `tc` with the `tbf` qdisc.

#![allow(clippy::disallowed_methods)]

pub mod classifier;
pub mod compare;
pub mod downlink;
pub mod emulated;
pub mod owd;

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sched::{sched_setaffinity, setns, CloneFlags, CpuSet};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

use crate::rxstamp;
use crate::time::Ts;

/// Receive-path settings of a real-kernel run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KernelPath {
    /// A label (datasets group rows by it).
    pub name: String,
    /// GRO on the receiving veth (also enables its NAPI; off: packets go through the per-CPU
    /// backlog of the sending CPU).
    pub gro: bool,
    /// Threaded NAPI: the poll runs in a kernel thread, pinned to the receiving CPU.
    pub threaded_napi: bool,
    /// RPS: protocol processing steered to the receiving CPU.
    pub rps: bool,
    /// Busy polling on the receiving socket (`SO_BUSY_POLL`, µs; 0 = off).
    pub busy_poll_us: u32,
    /// NAPI hrtimer deferral: `gro_flush_timeout` (µs; 0 = off) …
    pub gro_flush_timeout_us: u32,
    /// … and `napi_defer_hard_irqs` (polls deferred to the timer before interrupts return).
    pub defer_hard_irqs: u32,
    /// A busy loop pinned to the receiving CPU for the whole run.
    pub cpu_burner: bool,
    /// Release A-MPDUs at timer ticks of this period (µs; 0 = at their MAC time).
    pub tick_us: u32,
    /// Release each MPDU as it would be decoded during the PPDU, not the A-MPDU at its end.
    pub per_mpdu: bool,
    /// UDP payload bytes per datagram (≥ 4; 1472 = 1500-byte IP packets).
    pub payload_bytes: u16,
    /// A serialising hop between the radio and the host (a USB or SDIO bus, a slower link):
    /// the sending veth shapes to this rate (Mbit/s of frames; 0 = off) with a token bucket
    /// (`tc qdisc … tbf`), so packets of one A-MPDU leave at least one frame's time apart.
    pub shape_mbps: u32,
    /// The token bucket's depth (bytes; 0: two frames): how many back-to-back frames pass
    /// unshaped after the hop has been idle.
    pub shape_burst_bytes: u32,
}

impl Default for KernelPath {
    fn default() -> Self {
        KernelPath {
            name: "veth".into(),
            gro: false,
            threaded_napi: false,
            rps: false,
            busy_poll_us: 0,
            gro_flush_timeout_us: 0,
            defer_hard_irqs: 0,
            cpu_burner: false,
            tick_us: 0,
            per_mpdu: false,
            payload_bytes: 1472,
            shape_mbps: 0,
            shape_burst_bytes: 0,
        }
    }
}

impl std::str::FromStr for KernelPath {
    type Err = Error;
    /// From a comma list such as `gro,threaded,rps,burner,busy=50,flush=50,defer=2,tick=250,per-mpdu`
    /// or `shape=700,burst=6056`
    /// (`veth` or an empty string: the defaults). The name is the list itself.
    fn from_str(s: &str) -> Result<KernelPath, Error> {
        let mut p = KernelPath {
            name: format!("veth-{}", s.replace([',', '='], "-"))
                .trim_end_matches('-')
                .to_string(),
            ..KernelPath::default()
        };
        if s.is_empty() || s == "veth" {
            p.name = "veth".into();
            return Ok(p);
        }
        for item in s.split(',').map(str::trim).filter(|x| !x.is_empty()) {
            let (k, v) = item.split_once('=').unwrap_or((item, ""));
            let num = |field: &'static str| {
                v.parse::<u32>().map_err(|_| Error::Setting {
                    field,
                    value: v.to_string(),
                    allowed: "a whole number",
                })
            };
            match k {
                "gro" => p.gro = true,
                "threaded" => p.threaded_napi = true,
                "rps" => p.rps = true,
                "burner" => p.cpu_burner = true,
                "per-mpdu" => p.per_mpdu = true,
                "busy" => p.busy_poll_us = num("busy_poll_us")?,
                "flush" => p.gro_flush_timeout_us = num("gro_flush_timeout_us")?,
                "defer" => p.defer_hard_irqs = num("defer_hard_irqs")?,
                "tick" => p.tick_us = num("tick_us")?,
                "payload" => p.payload_bytes = num("payload_bytes")?.min(u16::MAX as u32) as u16,
                "shape" => p.shape_mbps = num("shape_mbps")?,
                "burst" => p.shape_burst_bytes = num("shape_burst_bytes")?,
                _ => {
                    return Err(Error::Setting {
                        field: "veth",
                        value: item.to_string(),
                        allowed:
                            "gro, threaded, rps, burner, per-mpdu, busy=µs, flush=µs, defer=N, tick=µs, payload=bytes, shape=Mbit/s, burst=bytes",
                    })
                }
            }
        }
        p.check()?;
        Ok(p)
    }
}

impl KernelPath {
    /// Bytes of one datagram's Ethernet frame (UDP payload + UDP, IPv4 and Ethernet headers).
    pub fn frame_bytes(&self) -> u32 {
        self.payload_bytes as u32 + 42
    }

    /// The shaping token bucket's depth in bytes (the default: two frames).
    pub fn shape_burst(&self) -> u32 {
        if self.shape_burst_bytes > 0 {
            self.shape_burst_bytes
        } else {
            2 * self.frame_bytes()
        }
    }

    /// Check the numbers.
    pub fn check(&self) -> Result<(), Error> {
        let bad = |field: &'static str, value: String, allowed: &'static str| Error::Setting { field, value, allowed };
        if !(4..=8972).contains(&self.payload_bytes) {
            return Err(bad("payload_bytes", self.payload_bytes.to_string(), "4..=8972"));
        }
        if self.tick_us > 100_000 {
            return Err(bad("tick_us", self.tick_us.to_string(), "0..=100000 µs"));
        }
        if self.busy_poll_us > 10_000 {
            return Err(bad("busy_poll_us", self.busy_poll_us.to_string(), "0..=10000 µs"));
        }
        if self.gro_flush_timeout_us > 100_000 {
            return Err(bad(
                "gro_flush_timeout_us",
                self.gro_flush_timeout_us.to_string(),
                "0..=100000 µs",
            ));
        }
        if self.defer_hard_irqs > 1000 {
            return Err(bad("defer_hard_irqs", self.defer_hard_irqs.to_string(), "0..=1000"));
        }
        if self.shape_mbps > 100_000 {
            return Err(bad(
                "shape_mbps",
                self.shape_mbps.to_string(),
                "0..=100000 Mbit/s (0 = off)",
            ));
        }
        if self.shape_burst_bytes > 0 && !(self.frame_bytes()..=16 << 20).contains(&self.shape_burst_bytes) {
            return Err(bad(
                "shape_burst_bytes",
                self.shape_burst_bytes.to_string(),
                "0 (two frames) or from one frame (payload + 42 bytes) to 16 MiB",
            ));
        }
        if self.shape_burst_bytes > 0 && self.shape_mbps == 0 {
            return Err(bad(
                "shape_mbps",
                "0".into(),
                "a rate when the bucket's depth (burst) is given",
            ));
        }
        if (self.gro_flush_timeout_us > 0 || self.defer_hard_irqs > 0 || self.threaded_napi || self.busy_poll_us > 0)
            && !self.gro
        {
            return Err(bad(
                "gro",
                "false".into(),
                "true when threaded_napi, busy polling or NAPI deferral is asked for (a veth has NAPI only with GRO)",
            ));
        }
        Ok(())
    }
}

/// Errors of the testbed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Not root.
    #[error("real-kernel receive paths need root (network namespaces, veth, sysfs): run as root or leave them out")]
    NotRoot,
    /// A command failed.
    #[error("`{cmd}` failed ({status}): {stderr}")]
    Command {
        /// The command line.
        cmd: String,
        /// Exit status.
        status: String,
        /// What it printed on stderr.
        stderr: String,
    },
    /// A setting out of range.
    #[error("kernel path: {field} = {value}: {allowed}")]
    Setting {
        /// Field.
        field: &'static str,
        /// Value.
        value: String,
        /// What is allowed.
        allowed: &'static str,
    },
    /// Socket or file IO.
    #[error("testbed: {what}: {source}")]
    Io {
        /// Which step.
        what: &'static str,
        /// The error.
        source: std::io::Error,
    },
    /// The schedule is too long to replay in real time.
    #[error("replay of {0:.1} s refused: at most 120 s of real time")]
    TooLong(f64),
    /// A tool or kernel feature the run needs is missing.
    #[error("{what} is missing: {fix}")]
    Missing {
        /// What.
        what: String,
        /// What to install or do.
        fix: String,
    },
    /// A run's log could not be read back.
    #[error(transparent)]
    Log(#[from] crate::bottleneck::Error),
    /// A plan setting out of range (named as its command-line flag).
    #[error("{flag} {value}: {allowed}")]
    Plan {
        /// The flag.
        flag: &'static str,
        /// Value.
        value: String,
        /// What is allowed.
        allowed: &'static str,
    },
    /// One run of several failed.
    #[error("run {run}: {source}")]
    Run {
        /// Which run.
        run: u32,
        /// Why.
        source: Box<Error>,
    },
    /// Ctrl-C or SIGTERM during a run.
    #[error("interrupted: the testbed was removed")]
    Interrupted,
}

fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> Error {
    move |source| Error::Io { what, source }
}

impl From<rxstamp::Error> for Error {
    fn from(e: rxstamp::Error) -> Self {
        Error::Io {
            what: e.what,
            source: e.source,
        }
    }
}

fn run(cmd: &str, args: &[&str]) -> Result<String, Error> {
    let line = format!("{cmd} {}", args.join(" "));
    let out = Command::new(cmd).args(args).output().map_err(|e| Error::Command {
        cmd: line.clone(),
        status: "not run".into(),
        stderr: e.to_string(),
    })?;
    if !out.status.success() {
        return Err(Error::Command {
            cmd: line,
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Write `value` to a sysfs file of the receiving namespace (sysfs shows a namespace's devices
/// only to processes in it, hence `ip netns exec`).
fn ns_write(ns: &str, file: &str, value: &str) -> Result<(), Error> {
    run(
        "ip",
        &["netns", "exec", ns, "sh", "-c", &format!("echo {value} > {file}")],
    )
    .map(|_| ())
}

fn ns_read(ns: &str, file: &str) -> Option<String> {
    run("ip", &["netns", "exec", ns, "cat", file])
        .ok()
        .map(|s| s.trim().to_string())
}

/// Whether this process may make namespaces.
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Delete `aggrate-<pid>-…` namespaces whose process is gone (left by a killed run). Returns
/// how many were removed.
pub fn cleanup_stale() -> usize {
    let Ok(list) = run("ip", &["netns", "list"]) else {
        return 0;
    };
    let mut n = 0;
    for line in list.lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(rest) = name.strip_prefix("aggrate-") else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() && run("ip", &["netns", "del", name]).is_ok() {
            n += 1;
        }
    }
    // A downlink's survey directory (`aggrate-<pid>-w<k>`, downlink::SurveyPath) of a process
    // that is gone.
    if let Ok(dir) = std::fs::read_dir(std::env::temp_dir()) {
        for e in dir.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let pid = name
                .strip_prefix("aggrate-")
                .and_then(|r| r.split('-').next()?.parse::<u32>().ok());
            let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
            if let (Some(pid), true) = (pid, is_dir) {
                if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
    }
    n
}

static NEXT: AtomicU32 = AtomicU32::new(0);

/// Two namespaces joined by a veth pair, set up for a [`KernelPath`]; torn down on drop.
#[derive(Debug)]
pub struct Testbed {
    /// Sending namespace.
    pub tx_ns: String,
    /// Receiving namespace.
    pub rx_ns: String,
    /// Receiving device (in `rx_ns`).
    pub rx_dev: String,
    /// Sender address.
    pub tx_ip: Ipv4Addr,
    /// Receiver address.
    pub rx_ip: Ipv4Addr,
    /// CPU of the sender.
    pub tx_cpu: usize,
    /// CPU of the receiving socket, RPS, the NAPI thread and the burner.
    pub rx_cpu: usize,
    /// What was actually applied (read back from the kernel).
    pub applied: serde_json::Value,
    made: Made,
}

/// The namespaces a testbed made, deleted (links go with them) in reverse order on drop — also
/// when a panic unwinds.
#[derive(Debug, Default)]
pub(crate) struct Made(Vec<String>);

impl Made {
    /// Make namespace `ns` (loopback up) and own it.
    pub(crate) fn add(&mut self, ns: &str) -> Result<(), Error> {
        run("ip", &["netns", "add", ns])?;
        self.0.push(ns.to_string());
        run("ip", &["-n", ns, "link", "set", "lo", "up"]).map(|_| ())
    }
}

impl Drop for Made {
    fn drop(&mut self) {
        for ns in self.0.drain(..).rev() {
            let _ = run("ip", &["netns", "del", &ns]);
        }
    }
}

impl Testbed {
    /// Make the namespaces and the veth pair and apply `path`'s settings.
    pub fn create(path: &KernelPath) -> Result<Testbed, Error> {
        path.check()?;
        if !is_root() {
            return Err(Error::NotRoot);
        }
        cleanup_stale();
        let k = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let base = format!("aggrate-{pid}-{k}");
        // Interface names: at most 15 bytes, unique per testbed (they live in the namespaces).
        let (tx_dev, rx_dev) = (format!("agt{}x{k}", pid % 100_000), format!("agr{}x{k}", pid % 100_000));
        let cpus = crate::parallel::all_cores();
        let mut tb = Testbed {
            tx_ns: format!("{base}-tx"),
            rx_ns: format!("{base}-rx"),
            rx_dev: rx_dev.clone(),
            tx_ip: Ipv4Addr::new(10, 213, (k % 250) as u8, 1),
            rx_ip: Ipv4Addr::new(10, 213, (k % 250) as u8, 2),
            tx_cpu: 0,
            rx_cpu: if cpus > 1 { 1 } else { 0 },
            applied: serde_json::Value::Null,
            made: Made::default(),
        };
        for ns in [tb.tx_ns.clone(), tb.rx_ns.clone()] {
            tb.made.add(&ns)?;
        }
        let (txn, rxn) = (tb.tx_ns.clone(), tb.rx_ns.clone());
        run(
            "ip",
            &[
                "link", "add", &tx_dev, "netns", &txn, "type", "veth", "peer", "name", &rx_dev, "netns", &rxn,
            ],
        )?;
        let (txa, rxa) = (format!("{}/24", tb.tx_ip), format!("{}/24", tb.rx_ip));
        run("ip", &["-n", &txn, "addr", "add", &txa, "dev", &tx_dev])?;
        run("ip", &["-n", &rxn, "addr", "add", &rxa, "dev", &rx_dev])?;
        for (ns, dev) in [(&txn, &tx_dev), (&rxn, &rx_dev)] {
            run("ip", &["-n", ns, "link", "set", dev, "up"])?;
            run("ip", &["-n", ns, "link", "set", "lo", "up"])?;
        }
        apply_rx(&rxn, &rx_dev, path, tb.rx_cpu)?;
        if path.shape_mbps > 0 {
            // The hop before the host: the sender's veth dequeues at the shaped rate. The
            // queue holds 4 MiB, far more than a run backs up below its rate.
            let (rate, burst) = (format!("{}mbit", path.shape_mbps), path.shape_burst().to_string());
            run(
                "ip",
                &[
                    "netns", "exec", &txn, "tc", "qdisc", "add", "dev", &tx_dev, "root", "tbf", "rate", &rate, "burst",
                    &burst, "limit", "4194304",
                ],
            )?;
        }
        let sys = format!("/sys/class/net/{rx_dev}");
        let feature = run("ip", &["netns", "exec", &rxn, "ethtool", "-k", &rx_dev])
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.trim_start().starts_with("generic-receive-offload:"))
                    .map(|l| l.trim().to_string())
            });
        tb.applied = serde_json::json!({
            "kernel": run("uname", &["-r"]).map(|s| s.trim().to_string()).unwrap_or_default(),
            "gro": feature,
            "threaded": ns_read(&rxn, &format!("{sys}/threaded")),
            "rps_cpus": ns_read(&rxn, &format!("{sys}/queues/rx-0/rps_cpus")),
            "gro_flush_timeout_ns": ns_read(&rxn, &format!("{sys}/gro_flush_timeout")),
            "napi_defer_hard_irqs": ns_read(&rxn, &format!("{sys}/napi_defer_hard_irqs")),
            "napi_threads": napi_threads(&rx_dev).len(),
            "tx_qdisc": run("ip", &["netns", "exec", &txn, "tc", "qdisc", "show", "dev", &tx_dev])
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
            "tx_cpu": tb.tx_cpu,
            "rx_cpu": tb.rx_cpu,
        });
        Ok(tb)
    }

    /// Whether both namespaces exist (for tests of the tear-down).
    pub fn namespaces() -> Vec<String> {
        run("ip", &["netns", "list"])
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split_whitespace().next().map(str::to_string))
            .collect()
    }

    /// Send one datagram per entry of `due` (virtual times, non-decreasing; equal times go back
    /// to back) through the veth in real time and record the receive timestamps.
    pub fn replay(&self, path: &KernelPath, due: &[Ts]) -> Result<Replayed, Error> {
        path.check()?;
        let n = due.len();
        if n == 0 {
            return Ok(Replayed::default());
        }
        let span = due[n - 1].saturating_since(due[0]).as_secs_f64();
        if span > 120.0 {
            return Err(Error::TooLong(span));
        }
        let port = 9000 + (NEXT.load(Ordering::Relaxed) % 1000) as u16;
        let rx_addr = SocketAddrV4::new(self.rx_ip, port);
        let stop = Arc::new(AtomicBool::new(false));
        // The receiver, in the receiving namespace, pinned to the receiving CPU.
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), Error>>();
        let rx_ns = self.rx_ns.clone();
        let rx_cpu = self.rx_cpu;
        let busy = path.busy_poll_us;
        let stop_rx = stop.clone();
        let payload = path.payload_bytes as usize;
        let receiver = std::thread::spawn(move || -> Vec<(u32, u64)> {
            let opts = rxstamp::Options {
                rcvbuf: 16 << 20,
                force: true,
                busy_poll_us: busy,
                read_timeout: Some(Duration::from_millis(100)),
                tos: false,
            };
            let sock = match enter(&rx_ns).and_then(|_| {
                pin(rx_cpu);
                Ok(rxstamp::bind(rx_addr.into(), &opts)?)
            }) {
                Ok(s) => {
                    let _ = ready_tx.send(Ok(()));
                    s
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    return Vec::new();
                }
            };
            rxstamp::StampedReceiver::new(&sock).collect_seq(payload, &stop_rx, n)
        });
        ready_rx
            .recv()
            .map_err(|_| io("receiver thread")(std::io::Error::other("exited early")))??;
        // The burner, pinned to the receiving CPU.
        let burner = path
            .cpu_burner
            .then(|| Burner::start(rx_cpu, "rx-burner"))
            .transpose()?;
        // The sender, in the sending namespace, pinned to the sending CPU.
        let result = {
            let tx_ns = self.tx_ns.clone();
            let tx_ip = self.tx_ip;
            let tx_cpu = self.tx_cpu;
            let due = due.to_vec();
            std::thread::spawn(move || -> Result<(Duration, u64, u64), Error> {
                enter(&tx_ns)?;
                pin(tx_cpu);
                let tx = UdpSocket::bind(SocketAddrV4::new(tx_ip, 0)).map_err(io("binding the sender"))?;
                let _ = nix::sys::socket::setsockopt(&tx, nix::sys::socket::sockopt::SndBufForce, &(16 << 20));
                tx.connect(rx_addr).map_err(io("connecting"))?;
                let mut buf = vec![0u8; payload];
                let lead = Duration::from_millis(20);
                let start = Instant::now() + lead;
                let wall0 = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default() + lead;
                let mut max_late = Duration::ZERO;
                let mut send_errors = 0u64;
                let mut i = 0;
                while i < n {
                    let j = (i..n).find(|&j| due[j] != due[i]).unwrap_or(n);
                    let late = crate::wlan::live::wait_until(start + due[i].saturating_since(due[0]));
                    max_late = max_late.max(late);
                    for k in i..j {
                        buf[..4].copy_from_slice(&(k as u32).to_be_bytes());
                        if tx.send(&buf).is_err() {
                            send_errors += 1;
                        }
                    }
                    i = j;
                }
                Ok((max_late, wall0.as_nanos() as u64, send_errors))
            })
            .join()
            .map_err(|_| io("sender thread")(std::io::Error::other("panicked")))
        };
        std::thread::sleep(Duration::from_millis(60));
        stop.store(true, Ordering::Release);
        let got = receiver.join().unwrap_or_default();
        drop(burner);
        let (max_late, base, send_errors) = result??;
        let mut host = vec![None; n];
        for (k, t) in got {
            if let Some(h) = host.get_mut(k as usize) {
                *h = Some(Ts(due[0].as_nanos() + t.saturating_sub(base)));
            }
        }
        let lost = host.iter().filter(|h| h.is_none()).count() as u64;
        Ok(Replayed {
            host,
            lost,
            send_errors,
            max_send_late: max_late,
        })
    }
}

/// Result of a replay.
#[derive(Clone, Debug, Default)]
pub struct Replayed {
    /// Kernel receive time per datagram on the schedule's clock (`None`: lost).
    pub host: Vec<Option<Ts>>,
    /// Datagrams never received.
    pub lost: u64,
    /// Sends that failed (e.g. the sender's buffer was full).
    pub send_errors: u64,
    /// Largest lateness of the sender against its schedule.
    pub max_send_late: Duration,
}

/// When each MPDU leaves the sender: `ppdu[i] = (start, end, index, count)` of packet i's PPDU.
/// A-MPDUs go at their end (back to back), or MPDU by MPDU through the PPDU (`per_mpdu`, after a
/// 40 µs preamble), then rounded up to the next timer tick (`tick_us`).
pub fn schedule(path: &KernelPath, ppdu: &[(Ts, Ts, u16, u16)]) -> Vec<Ts> {
    ppdu.iter()
        .map(|&(start, end, i, n)| {
            let t = if path.per_mpdu && n > 0 {
                let dur = end.saturating_since(start).as_nanos() as u64;
                let pre = 40_000.min(dur);
                Ts(start.as_nanos() + pre + (dur - pre) * (i as u64 + 1) / n as u64)
            } else {
                end
            };
            if path.tick_us > 0 {
                let p = path.tick_us as u64 * 1000;
                Ts(t.as_nanos().div_ceil(p) * p)
            } else {
                t
            }
        })
        .collect()
}

/// The receive-side settings of `path` on device `dev` of namespace `ns` (GRO, threaded NAPI
/// pinned to `rx_cpu`, RPS to `rx_cpu`, NAPI deferral): the same for a testbed's receiver and a
/// downlink's station.
pub(crate) fn apply_rx(ns: &str, dev: &str, path: &KernelPath, rx_cpu: usize) -> Result<(), Error> {
    let onoff = if path.gro { "on" } else { "off" };
    run("ip", &["netns", "exec", ns, "ethtool", "-K", dev, "gro", onoff])?;
    let sys = format!("/sys/class/net/{dev}");
    if path.threaded_napi {
        ns_write(ns, &format!("{sys}/threaded"), "1")?;
    }
    if path.rps {
        ns_write(
            ns,
            &format!("{sys}/queues/rx-0/rps_cpus"),
            &format!("{:x}", 1u64 << rx_cpu),
        )?;
    }
    if path.gro_flush_timeout_us > 0 || path.defer_hard_irqs > 0 {
        ns_write(
            ns,
            &format!("{sys}/gro_flush_timeout"),
            &(path.gro_flush_timeout_us as u64 * 1000).to_string(),
        )?;
        ns_write(
            ns,
            &format!("{sys}/napi_defer_hard_irqs"),
            &path.defer_hard_irqs.to_string(),
        )?;
    }
    if path.threaded_napi {
        // The NAPI threads of the receiving device go to the receiving CPU.
        for pid in napi_threads(dev) {
            let mut set = CpuSet::new();
            let _ = set.set(rx_cpu);
            let _ = sched_setaffinity(Pid::from_raw(pid), &set);
        }
    }
    Ok(())
}

fn enter(ns: &str) -> Result<(), Error> {
    let f = std::fs::File::open(format!("/var/run/netns/{ns}")).map_err(io("opening the namespace"))?;
    setns(&f, CloneFlags::CLONE_NEWNET).map_err(|e| io("entering the namespace")(e.into()))
}

/// A thread that keeps one CPU busy (a receiver's host under load) until dropped.
#[derive(Debug)]
pub(crate) struct Burner {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Burner {
    /// Start burning CPU `cpu` in a thread named `name` (≤ 15 bytes: what `/proc` shows).
    pub(crate) fn start(cpu: usize, name: &str) -> Result<Burner, Error> {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::Builder::new().name(name.into()).spawn(move || {
            pin(cpu);
            let mut x = 0u64;
            while !s.load(Ordering::Relaxed) {
                for _ in 0..1000 {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                    std::hint::spin_loop();
                }
            }
            std::hint::black_box(x);
        });
        Ok(Burner {
            stop,
            thread: Some(thread.map_err(io("starting the CPU burner"))?),
        })
    }
}

impl Drop for Burner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn pin(cpu: usize) {
    let mut set = CpuSet::new();
    if set.set(cpu).is_ok() {
        let _ = sched_setaffinity(Pid::from_raw(0), &set);
    }
}

/// PIDs of the NAPI kernel threads of `dev` (`napi/<dev>-<id>`).
fn napi_threads(dev: &str) -> Vec<i32> {
    let prefix = format!("napi/{dev}-");
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()))
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim_end().starts_with(&prefix))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_follow_the_settings() {
        let us = Ts::from_micros;
        let ppdu = [(us(0), us(440), 0, 4), (us(0), us(440), 3, 4), (us(600), us(700), 0, 1)];
        let p = KernelPath::default();
        assert_eq!(schedule(&p, &ppdu), vec![us(440), us(440), us(700)]);
        let m = KernelPath {
            per_mpdu: true,
            ..KernelPath::default()
        };
        assert_eq!(schedule(&m, &ppdu), vec![us(140), us(440), us(700)]);
        let t = KernelPath {
            tick_us: 250,
            ..KernelPath::default()
        };
        assert_eq!(schedule(&t, &ppdu), vec![us(500), us(500), us(750)]);
    }

    #[test]
    fn settings_are_checked() {
        let p = KernelPath {
            threaded_napi: true,
            gro: false,
            ..KernelPath::default()
        };
        assert!(matches!(p.check(), Err(Error::Setting { field: "gro", .. })));
        let p = KernelPath {
            payload_bytes: 2,
            ..KernelPath::default()
        };
        assert!(p.check().is_err());
        let p: KernelPath = "gro,threaded,burner,flush=50,defer=2,tick=250".parse().unwrap();
        assert!(p.gro && p.threaded_napi && p.cpu_burner && !p.rps);
        assert_eq!((p.gro_flush_timeout_us, p.defer_hard_irqs, p.tick_us), (50, 2, 250));
        assert_eq!(p.name, "veth-gro-threaded-burner-flush-50-defer-2-tick-250");
        assert!(
            "threaded".parse::<KernelPath>().is_err(),
            "threaded NAPI needs GRO on a veth"
        );
        assert!("gro,warp".parse::<KernelPath>().is_err());
        let p: KernelPath = "shape=700,burst=6056".parse().unwrap();
        assert_eq!(
            (p.shape_mbps, p.shape_burst(), p.name.as_str()),
            (700, 6056, "veth-shape-700-burst-6056")
        );
        let p: KernelPath = "shape=1000".parse().unwrap();
        assert_eq!(p.shape_burst(), 2 * 1514, "two 1500-byte IP packets' frames by default");
        for bad in ["burst=6056", "shape=700,burst=100", "shape=200000", "shape=fast"] {
            assert!(bad.parse::<KernelPath>().is_err(), "{bad}");
        }
        let toml_text = "name = \"g\"\ngro = true\nthreaded_napi = true\ncpu_burner = true\n";
        let p: KernelPath = toml::from_str(toml_text).unwrap();
        assert!(p.check().is_ok() && p.cpu_burner);
    }
}

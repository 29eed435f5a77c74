//! `aggrate send`: the reference sender over UDP (paced at the controller's rate, the rate from
//! the receivers' reports), with `--log` of every step of its loop.

use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use aggrate::control::PiParams;
use aggrate::transport::{io, Sender};

use super::super::progress::Ui;
use super::super::Exit;
use super::{load_key, transfer, CsvLog, SessionArgs};

#[derive(Debug, clap::Args)]
pub(crate) struct SendArgs {
    /// Where station i's data goes (the AP's ports, or receivers directly).
    #[arg(long, value_delimiter = ',', required = true)]
    pub(crate) to: Vec<SocketAddr>,
    /// UDP payload bytes per datagram (header included).
    #[arg(long, default_value_t = 1472)]
    pub(crate) size: usize,
    /// Target aggregation level N_ε.
    #[arg(long, default_value_t = 32.0)]
    pub(crate) target: f64,
    /// The most the sender ever sends per station (Mb/s), whatever the reports say.
    #[arg(long, default_value_t = 2000.0)]
    pub(crate) max_rate_mbps: f64,
    /// Write each step of the loop (CSV: time, step, start-up, bottleneck class, the level it
    /// stepped by, the station it drives, every station's rate, then the bottleneck
    /// classifier's P(backhaul), the report's interval and the classifier's features).
    #[arg(long)]
    pub(crate) log: Option<PathBuf>,
    /// The bottleneck classifier's weights (JSON, as `aggrate testbed bottleneck` writes them;
    /// default: the shipped ones).
    #[arg(long, value_name = "FILE")]
    pub(crate) bottleneck_weights: Option<PathBuf>,
    /// Send this file whole (`-`: standard input) to one receiver (`recv --out`), and exit when
    /// it has every byte: its name, size and SHA-256 go first, lost datagrams are asked for
    /// again and repaired (NACK, SACK, timeout, parity), all within the rate the controller
    /// sets. Without --duration it runs until the transfer ends (at most a day).
    #[arg(long, value_name = "PATH")]
    pub(crate) file: Option<PathBuf>,
    /// Resume an interrupted transfer at this byte: the length of the receiver's
    /// NAME.aggrate-part.
    #[arg(long, requires = "file", default_value_t = 0)]
    pub(crate) offset: u64,
    /// With --file: megabytes of segments each end holds in flight (default 4,096 segments,
    /// 5.8 MB at --size 1472). A path whose bandwidth-delay product is larger needs more (1 Gb/s
    /// over 100 ms: 12.5 MB); give recv the same.
    #[arg(long, requires = "file")]
    pub(crate) window_mb: Option<f64>,
    #[command(flatten)]
    pub(crate) session: SessionArgs,
}

/// The `--log` CSV's header for `n` stations.
fn log_header(n: usize) -> String {
    std::iter::once("t_ns,update,starting,bottleneck,level,driven".to_string())
        .chain((0..n).map(|i| format!(",rate_mbps_{i}")))
        .chain(std::iter::once(",p_backhaul,report_start_ns,report_end_ns".to_string()))
        .chain((0..aggrate::control::BOTTLENECK_FEATURES).map(|i| format!(",f{i}")))
        .collect()
}

/// One `--log` line: the loop's last step.
fn log_line(now: aggrate::Ts, s: &Sender, n: usize) -> String {
    let (c, driven) = s.control();
    let rates: String = (0..n).map(|i| format!(",{:.3}", s.rate(i).mbps)).collect();
    let k = c.classifier();
    let (start, end) = k.interval();
    let features: String = k.features().iter().map(|f| format!(",{f:.5}")).collect();
    format!(
        "{},{},{},{:?},{:.3},{driven}{rates},{:.5},{},{}{features}",
        now.as_nanos(),
        c.updates(),
        u8::from(c.starting()),
        c.bottleneck(),
        c.last_level(),
        k.probability(),
        start.as_nanos(),
        end.as_nanos()
    )
}

/// Flags the sender cannot run with, refused before anything opens.
fn check_flags(a: &SendArgs) -> Result<()> {
    let min = aggrate::transport::wire::DATA_HEADER_LEN;
    if !(min..=65_000).contains(&a.size) {
        bail!("--size = {}: {min}..=65000", a.size);
    }
    super::check_interval(a.session.interval_ms)?;
    if !(a.max_rate_mbps >= 0.1 && a.max_rate_mbps <= 1e5) {
        bail!(
            "--max-rate-mbps {}: between 0.1 and 100000 (below 0.1 Mb/s the sender would send nothing for minutes)",
            a.max_rate_mbps
        );
    }
    Ok(())
}

pub(crate) fn send(ui: &Ui, a: SendArgs) -> Result<Exit> {
    check_flags(&a)?;
    let sock = UdpSocket::bind("0.0.0.0:0").context("binding the sender")?;
    let interval = Duration::from_millis(a.session.interval_ms);
    let control = PiParams {
        target: a.target,
        max_mbps: a.max_rate_mbps,
        initial_mbps: PiParams::default().initial_mbps.min(a.max_rate_mbps),
        min_mbps: PiParams::default().min_mbps.min(a.max_rate_mbps),
        ..PiParams::default()
    }
    .check()
    .with_context(|| format!("--max-rate-mbps {}", a.max_rate_mbps))?;
    let mut tx = Sender::new(
        load_key(&a.session)?,
        io::entropy()?,
        a.to.len(),
        a.size - aggrate::transport::wire::DATA_HEADER_LEN,
        control,
        interval,
        io::realtime(),
    )?;
    if let Some(p) = &a.bottleneck_weights {
        tx.set_bottleneck_weights(aggrate::bottleneck::read_weights(p)?);
    }
    let mut file = match &a.file {
        Some(path) => Some(transfer::Outgoing::open(
            ui,
            path,
            a.offset,
            (a.size, a.window_mb),
            a.to.len(),
            &mut tx,
        )?),
        None => None,
    };
    let mut bar = file.as_ref().map(|f| ui.bytes_bar(f.bytes_to_send(), "sent"));
    let mut feed_error = None;
    let stop = AtomicBool::new(false);
    let mut last_print = aggrate::Ts::ZERO;
    let header = log_header(a.to.len());
    let mut log = a.log.as_deref().map(|p| CsvLog::create(p, &header)).transpose()?;
    let mut logged = 0u64;
    let duration = a.session.seconds(file.is_some())?;
    // What the bar shows: acknowledged file bytes, at most the file's (the last segment is
    // short; a stream of unknown size has no total).
    let (segment, head, total) = file
        .as_ref()
        .map_or((1, 0, 0), |f| (f.segment, f.head, f.bytes_to_send()));
    // The receiver's acks, and when they last moved the transfer (a receiver that left ends
    // the run after transfer::IDLE, not after --duration).
    // When the transfer last moved (the receiver acknowledged more), or had nothing waiting
    // for the receiver (its producer was slow): a receiver that stops moving it ends the run
    // after transfer::IDLE, not after --duration.
    let mut heard = (0u64, std::time::Instant::now());
    let mut quiet = false;
    let each = |tx: &mut Sender| {
        let Some(f) = file.as_mut() else { return true };
        let Some(b) = tx.bulk_mut(0) else { return false };
        if b.acked() != heard.0 || !b.outstanding() {
            heard = (b.acked(), std::time::Instant::now());
        }
        if let Err(e) = f.src.feed(b) {
            feed_error = Some(e);
            return false;
        }
        if heard.1.elapsed() >= transfer::IDLE && !b.is_done() {
            quiet = true;
            return false;
        }
        !b.is_done()
    };
    let stats = io::run_sender_with(
        &sock,
        &a.to,
        &mut tx,
        duration,
        &stop,
        |now, s| {
            // One line per step of the loop (the ticks come every 100 ms; steps every interval).
            if let Some(l) = log.as_mut().filter(|_| s.control().0.updates() > logged) {
                logged = s.control().0.updates();
                l.line(&log_line(now, s, a.to.len()));
            }
            if let (Some(bar), Some(b)) = (bar.as_mut(), s.bulk(0)) {
                let n = transfer::acked_bytes(b.acked(), segment, head);
                bar.set(if total > 0 { n.min(total) } else { n });
            } else if now.saturating_since(last_print) >= Duration::from_secs(1) {
                last_print = now;
                let rates: Vec<String> = (0..a.to.len()).map(|i| format!("{:.1}", s.rate(i).mbps)).collect();
                ui.info(format!("rates Mb/s: {}", rates.join(", ")));
            }
        },
        each,
    )?;
    if let Some(l) = log {
        l.finish()?;
    }
    if let Some(v) = stats.other_version_seen {
        ui.warn(format!(
            "{} datagrams of protocol version {v} came back: the receiver runs another aggrate (this one speaks version {}); run the same version at both ends",
            stats.other_version,
            aggrate::transport::wire::VERSION
        ));
    }
    if let Some(e) = feed_error {
        return Err(e.into());
    }
    if let Some(bar) = bar {
        bar.finish();
    }
    if let (Some(f), Some(b)) = (&file, tx.bulk(0)) {
        return f.report(ui, b, &stats, a.to[0], quiet);
    }
    outln!("{}", serde_json::to_string(&stats)?);
    Ok(Exit::Ok)
}

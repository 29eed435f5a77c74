//! `aggrate impair`: a UDP relay that impairs the path between `send` and `recv` (or any UDP
//! client and server) — loss, bursts, reordering, duplication, delay, jitter, a rate limit —
//! with [`aggrate::impair`] on the host's clock, seeded.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use aggrate::impair::{GilbertElliott, ImpairConfig, Impairment};
use aggrate::transport::io;

use super::super::progress::Ui;
use super::super::Exit;
use super::secs;

#[derive(Debug, clap::Args)]
pub(crate) struct ImpairArgs {
    /// Where the client (e.g. `send --to`) sends.
    #[arg(long, default_value = "127.0.0.1:8900")]
    pub(crate) listen: SocketAddr,
    /// The far end (e.g. `recv --listen`).
    #[arg(long)]
    pub(crate) to: SocketAddr,
    /// Seconds to run.
    #[arg(long, default_value_t = 20.0)]
    pub(crate) duration: f64,
    /// Settings as JSON (`aggrate::impair::ImpairConfig`: loss, burst, reorder, reorder_delay,
    /// duplicate, delay, jitter (ms), rate_bps, queue_bytes, seed); the flags below override it.
    #[arg(long)]
    pub(crate) config: Option<PathBuf>,
    /// Random loss (0..1; not with --burst).
    #[arg(long)]
    pub(crate) loss: Option<f64>,
    /// Bursts of loss: TO_BAD,TO_GOOD,LOSS_GOOD,LOSS_BAD (Gilbert–Elliott, per datagram).
    #[arg(long, value_delimiter = ',')]
    pub(crate) burst: Option<Vec<f64>>,
    /// Share of datagrams held back by --reorder-ms (0..1).
    #[arg(long)]
    pub(crate) reorder: Option<f64>,
    /// How long a reordered datagram is held back (ms).
    #[arg(long)]
    pub(crate) reorder_ms: Option<f64>,
    /// Share of datagrams delivered twice (0..1).
    #[arg(long)]
    pub(crate) duplicate: Option<f64>,
    /// One-way delay (ms).
    #[arg(long)]
    pub(crate) delay_ms: Option<f64>,
    /// Extra delay, uniform in [0, jitter] (ms).
    #[arg(long)]
    pub(crate) jitter_ms: Option<f64>,
    /// Rate limit (bit/s of IP bytes).
    #[arg(long)]
    pub(crate) rate_bps: Option<f64>,
    /// The rate limit's queue (bytes; tail drop beyond; only with --rate-bps).
    #[arg(long)]
    pub(crate) queue_bytes: Option<usize>,
    /// Impair the way back too (feedback, ACKs) with the same settings, the rate limit included
    /// (another seed).
    #[arg(long)]
    pub(crate) both_ways: bool,
    /// Seed.
    #[arg(long)]
    pub(crate) seed: Option<u64>,
}

fn ms(flag: &str, v: f64) -> Result<Duration> {
    Duration::try_from_secs_f64(v / 1e3).with_context(|| format!("{flag} {v}: a duration in ms, >= 0"))
}

/// The settings from --config and the flags (flags win), checked.
pub(crate) fn config(a: &ImpairArgs) -> Result<ImpairConfig> {
    let mut c = match &a.config {
        Some(p) => {
            let text = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            serde_json::from_str::<ImpairConfig>(&text)
                .with_context(|| format!("{}: not impairment settings", p.display()))?
        }
        None => ImpairConfig::default(),
    };
    if let Some(v) = a.loss {
        c.loss = v;
    }
    if a.burst.is_some() && a.loss.is_some() {
        bail!("--loss and --burst: one or the other (bursts set the loss in both states)");
    }
    if let Some(b) = &a.burst {
        let [to_bad, to_good, loss_good, loss_bad] = b[..] else {
            bail!("--burst: four values, TO_BAD,TO_GOOD,LOSS_GOOD,LOSS_BAD");
        };
        c.burst = Some(GilbertElliott {
            to_bad,
            to_good,
            loss_good,
            loss_bad,
        });
    }
    if let Some(v) = a.reorder {
        c.reorder = v;
    }
    if let Some(v) = a.reorder_ms {
        c.reorder_delay = ms("--reorder-ms", v)?;
    }
    if let Some(v) = a.duplicate {
        c.duplicate = v;
    }
    if let Some(v) = a.delay_ms {
        c.delay = ms("--delay-ms", v)?;
    }
    if let Some(v) = a.jitter_ms {
        c.jitter = ms("--jitter-ms", v)?;
    }
    if a.rate_bps.is_some() {
        c.rate_bps = a.rate_bps;
    }
    if let Some(v) = a.queue_bytes {
        c.queue_bytes = v;
    }
    if let Some(v) = a.seed {
        c.seed = v;
    }
    Ok(c.check()?)
}

pub(crate) fn impair(ui: &Ui, a: ImpairArgs) -> Result<Exit> {
    let cfg = config(&a)?;
    let duration = secs(a.duration)?;
    let back = if a.both_ways {
        ImpairConfig {
            seed: cfg.seed ^ 0x9e37_79b9_7f4a_7c15,
            ..cfg.clone()
        }
    } else {
        ImpairConfig::default()
    };
    let mut fwd = Impairment::new(cfg)?;
    let mut rev = Impairment::new(back)?;
    // Both sockets with the receive edge's large receive buffer (as large as the kernel allows):
    // a relay that falls behind for a few ms should not lose datagrams in the kernel that the
    // impairment did not choose to lose.
    let listen = io::timestamped_socket(a.listen)?;
    let any: SocketAddr = if a.to.is_ipv4() {
        "0.0.0.0:0".parse()?
    } else {
        "[::]:0".parse()?
    };
    let upstream = io::timestamped_socket(any)?;
    upstream
        .connect(a.to)
        .with_context(|| format!("connecting to {}", a.to))?;
    ui.info(format!(
        "impairing {} → {} for {:.0} s",
        a.listen,
        a.to,
        duration.as_secs_f64()
    ));
    let stop = super::super::common::stop_on_signals()?;
    let s = io::run_relay(&listen, &upstream, &mut fwd, &mut rev, duration, &stop)?;
    outln!("{}", serde_json::to_string(&s)?);
    Ok(Exit::Ok)
}

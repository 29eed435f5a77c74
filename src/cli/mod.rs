//! Command-line interface: clap-derive arguments → resolved settings → library calls. All
//! printing, progress bars and exit codes live here.

/// `println!` to stdout that returns the write error (`?`) instead of panicking, so that a closed
/// pipe (`aggrate … | head`) ends the process cleanly (main treats `BrokenPipe` as success).
macro_rules! outln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($t)*)?
    }};
}

/// `print!` to stdout, as [`outln!`].
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        write!(std::io::stdout().lock(), $($t)*)?
    }};
}

mod calibrate;
mod common;
mod dataset;
mod demo;
mod eval;
mod export;
mod features;
mod inspect;
mod join;
mod live;
mod progress;
mod sim;
mod simulate;
mod sweep;
mod testbed;
mod tool;
mod train;
mod train_level;

pub(crate) use common::*;

use std::net::IpAddr;

use std::process::ExitCode;

use anyhow::Result;

use clap::{Parser, Subcommand};

use aggrate::capture::dot11::parse_mac;
use aggrate::capture::filter::FlowFilter;

/// aggrate — see 802.11ac frame aggregation in packet timing.
#[derive(Debug, Parser)]
#[command(name = "aggrate", version, about, propagate_version = true)]
pub(crate) struct Args {
    /// No progress bars or informational messages on stderr.
    #[arg(short, long, global = true)]
    pub(crate) quiet: bool,
    #[command(subcommand)]
    pub(crate) command: Command,
}

// Parsed once per process: the size of its largest variant (train's flags) costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Summarise a capture: link type, flows, and the selected flow's aggregation.
    Inspect(inspect::InspectArgs),
    /// Write one labelled feature row per packet of the selected flow (Parquet or CSV).
    Features(features::FeaturesArgs),
    /// Train an estimator with contiguous k-fold cross-validation; write model + reports.
    Train(train::TrainArgs),
    /// Train the learned level (per report interval, from the receive timing) on closed-loop
    /// emulator runs across receive paths and other traffic; write it into a model file.
    TrainLevel(train_level::TrainLevelArgs),
    /// The loop table: closed loops on the virtual clock across receive paths and other
    /// traffic, steered by MAC timestamps, the learned level, the airtime level and the frame
    /// count.
    LevelLoop(train_level::LevelLoopArgs),
    /// The study's sweeps (m, σ, SVM loss, SVR d) with contiguous CV, and its Figure 13 panels.
    Sweep(sweep::SweepArgs),
    /// Score a trained model on other captures or datasets, per send rate.
    Eval(eval::EvalArgs),
    /// Set a model's operating point for one receiver from a short labelled capture of it.
    Calibrate(calibrate::CalibrateArgs),
    /// Export a trained model (ONNX).
    Export(export::ExportArgs),
    /// Datasets of emulator captures (see datasets/).
    #[command(subcommand)]
    Dataset(dataset::DatasetCommand),
    /// Emulate an 802.11ac downlink and write each station's radiotap capture.
    Simulate(simulate::SimulateArgs),
    /// Live emulated AP on UDP: releases each station's datagrams in A-MPDU bursts.
    Ap(live::ApArgs),
    /// Reference sender (paced UDP, rate from the receivers' aggregation reports).
    Send(live::SendArgs),
    /// Reference receiver (kernel timestamps → estimator → feedback).
    Recv(live::RecvArgs),
    /// Estimate μ_N live from an interface's received packets (root): any traffic, the same
    /// estimator as `recv`, a line per report interval.
    Watch(live::WatchArgs),
    /// A UDP relay that impairs the path (loss, bursts, reordering, duplication, delay, jitter,
    /// a rate limit; seeded): between `send` and `recv`, or any UDP client and server.
    Impair(live::ImpairArgs),
    /// Write a random pre-shared key for `send` and `recv` (hex, mode 600).
    Keygen(live::KeygenArgs),
    /// Score a live run: the receiver's reports (`recv --log`) against the AP's truth (`ap --truth`).
    Join(join::JoinArgs),
    /// Closed loop on a virtual clock: sender → emulated WLAN → estimator → controller.
    Sim(sim::SimArgs),
    /// Real-kernel testbed (root): the emulated downlink between network namespaces; kernel TCP
    /// through it.
    #[command(subcommand)]
    Testbed(testbed::TestbedCommand),
    /// Run the whole job on the embedded sample capture (the README's main command).
    Demo(demo::DemoArgs),
    /// Helper tools (capture repetition for benchmarks).
    #[command(subcommand, hide = true)]
    Tool(tool::ToolCommand),
}

/// Flow selection flags shared by commands.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct FlowArgs {
    /// Only packets to/from this 802.11 MAC (RA, TA, DA or SA), e.g. 00:00:00:00:00:02.
    #[arg(long, value_parser = parse_mac_arg)]
    pub(crate) mac: Option<[u8; 6]>,
    /// Only packets to/from this IP address.
    #[arg(long)]
    pub(crate) ip: Option<IpAddr>,
    /// Only packets to/from this port.
    #[arg(long)]
    pub(crate) port: Option<u16>,
    /// Only this IP protocol: udp, tcp or a number.
    #[arg(long, value_parser = parse_proto)]
    pub(crate) proto: Option<u8>,
    /// Cap on aggregation levels (the block-ack window).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub(crate) n_max: u16,
    /// Keep reading past damaged packets (skipped and counted) and report container damage as a
    /// warning instead of an error.
    #[arg(long)]
    pub(crate) keep_going: bool,
}

impl FlowArgs {
    /// What the captures among `files` say of the WLAN they were sent over (the flow these
    /// flags select).
    pub(crate) fn seen_wlan(
        &self,
        files: &[aggrate::pipeline::Input],
    ) -> Result<aggrate::wlan::manifest::WlanSettings> {
        Ok(aggrate::pipeline::inputs::seen_wlan(
            files,
            &self.filter(),
            self.keep_going,
        )?)
    }

    pub(crate) fn filter(&self) -> FlowFilter {
        FlowFilter {
            mac: self.mac,
            ip: self.ip,
            port: self.port,
            proto: self.proto,
            flow: None,
        }
    }
}

fn parse_mac_arg(s: &str) -> Result<[u8; 6], String> {
    parse_mac(s).ok_or_else(|| format!("{s:?} is not a MAC address like 00:11:22:33:44:55"))
}

fn parse_proto(s: &str) -> Result<u8, String> {
    match s.to_ascii_lowercase().as_str() {
        "udp" => Ok(17),
        "tcp" => Ok(6),
        n => n
            .parse()
            .map_err(|_| format!("{s:?} is not udp, tcp or a protocol number 0-255")),
    }
}

/// Process exit codes (one place).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Exit {
    /// Success.
    Ok = 0,
    /// Generic failure (IO, output).
    Failure = 1,
    /// Bad input data (damaged capture, no ground truth, …); partial results were still written.
    BadInput = 3,
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> ExitCode {
        ExitCode::from(e as u8)
    }
}

/// An error whose cause is the input data (exit code 3).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct InputError(pub(crate) String);

pub(crate) fn exit_code_for(err: &anyhow::Error) -> Exit {
    if err.chain().any(|e| {
        e.downcast_ref::<InputError>().is_some()
            || e.downcast_ref::<aggrate::capture::io::OpenError>()
                .is_some_and(|o| matches!(o, aggrate::capture::io::OpenError::Capture { .. }))
            || e.downcast_ref::<aggrate::pipeline::Error>()
                .is_some_and(|p| p.is_bad_input())
            || e.downcast_ref::<aggrate::label::Error>().is_some()
            || e.downcast_ref::<aggrate::wlan::ConfigError>().is_some()
            || e.downcast_ref::<aggrate::model::Error>().is_some()
    }) {
        Exit::BadInput
    } else {
        Exit::Failure
    }
}

pub(crate) fn run(args: Args) -> Result<Exit> {
    let ui = progress::Ui { quiet: args.quiet };
    match args.command {
        Command::Inspect(a) => inspect::run(&ui, a),
        Command::Features(a) => features::run(&ui, a),
        Command::Demo(a) => demo::run(&ui, a),
        Command::Simulate(a) => simulate::run_cmd(&ui, a),
        Command::Dataset(c) => dataset::run(&ui, c),
        Command::Train(a) => train::run(&ui, a),
        Command::TrainLevel(a) => train_level::run(&ui, a),
        Command::LevelLoop(a) => train_level::run_loop(&ui, a),
        Command::Sweep(a) => sweep::run(&ui, a),
        Command::Sim(a) => sim::run_cmd(&ui, a),
        Command::Ap(a) => live::ap(&ui, a),
        Command::Send(a) => live::send(&ui, a),
        Command::Recv(a) => live::recv(&ui, a),
        Command::Watch(a) => live::watch(&ui, a),
        Command::Impair(a) => live::impair(&ui, a),
        Command::Keygen(a) => live::keygen(&ui, a),
        Command::Join(a) => join::run(&ui, a),
        Command::Export(a) => export::run(&ui, a),
        Command::Eval(a) => eval::run(&ui, a),
        Command::Calibrate(a) => calibrate::run(&ui, a),
        Command::Testbed(c) => testbed::run(&ui, c),
        Command::Tool(t) => tool::run(&ui, t),
    }
}

pub(crate) use aggrate::parallel::all_cores;

/// Default output directory helper.
pub(crate) fn ensure_parent(p: &std::path::Path) -> Result<()> {
    if let Some(d) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(d).map_err(|e| anyhow::anyhow!("creating directory {}: {e}", d.display()))?;
    }
    Ok(())
}

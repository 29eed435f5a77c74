//! `aggrate train`'s flags, and the checks across them.

use std::path::PathBuf;

use anyhow::{bail, Result};

use super::super::{BankArgs, FlowArgs};

/// Which estimator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ModelKind {
    /// Logistic regression on m gaps (+ σ).
    Logistic,
    /// Linear SVM (dual coordinate descent).
    Svm,
    /// The m = 1 gap threshold baseline.
    Threshold,
    /// Logistic per packet + RBF ε-SVR per slot correcting the aggregation level.
    Svr,
    /// One-hidden-layer perceptron (by default on receiver-context rows, --context 1024).
    Mlp,
}

/// The perceptron's optimiser.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum SolverArg {
    /// Minibatch Adam.
    Adam,
    /// Full-batch L-BFGS.
    Lbfgs,
}

/// How folds are made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum GroupBy {
    /// Contiguous blocks of every capture (fit on one receive path).
    Capture,
    /// Leave one receiver out (does the model carry to receivers it never saw?).
    Receiver,
}

/// SVM loss flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LossArg {
    /// Hinge.
    Hinge,
    /// Squared hinge.
    SquaredHinge,
}

#[derive(Debug, clap::Args)]
pub(crate) struct TrainArgs {
    /// Dataset folders (their manifest.json's training runs, else every capture in them),
    /// capture files, or feature tables written by `aggrate features` (.parquet/.csv).
    #[arg(long, required = true, num_args = 1..)]
    pub(crate) dataset: Vec<PathBuf>,
    /// Kernel receive times to join to the captures by sequence number: one `seq,host_ns` CSV
    /// or receiver-side capture per capture (in order), or a folder of them named after the
    /// captures.
    #[arg(long, num_args = 1..)]
    pub(crate) kernel: Vec<PathBuf>,
    /// Folds: contiguous blocks of each capture, or whole receivers held out in turn (also
    /// reports each receiver's own contiguous CV and the m = 1 threshold, in one table).
    #[arg(long, value_enum, default_value_t = GroupBy::Capture)]
    pub(crate) group_by: GroupBy,
    /// Contiguous folds of each receiver's own CV (with --group-by receiver).
    #[arg(long, default_value_t = 3)]
    pub(crate) own_folds: usize,
    /// With --group-by receiver: also calibrate each held-out model on the first SHARE of each
    /// of that receiver's captures (`aggrate calibrate`) and score it on the rest.
    #[arg(long, value_name = "SHARE")]
    pub(crate) calibrate: Option<f64>,
    /// With --group-by receiver: also calibrate each held-out model *without* that receiver's
    /// labels, on the emulated receivers that time packets most like it (`aggrate calibrate
    /// --no-labels`), and score it on all its rows. The bank is emulated at each receiver's
    /// WLAN as its captures show it (one bank per WLAN; the --mcs/--nss/--bw/--ip-len flags
    /// override it for all).
    #[arg(long)]
    pub(crate) self_calibrate: bool,
    /// With --group-by receiver: test receivers, in no training set at all (dataset folders or
    /// captures that name their receiver, e.g. from `aggrate dataset build`): each is scored
    /// with the model fitted on every --dataset receiver — the shipped model — against its own
    /// CV, in a table of their own (`<model>.test.receivers.*`).
    #[arg(long, num_args = 1.., value_name = "DATASET")]
    pub(crate) test: Vec<PathBuf>,
    /// Tailor the model to one receiver without its labels: captures of that receiver (its own
    /// captures, or dataset folders; a few seconds at each rate it will see, rate in the name
    /// `_<rate>mbps` or taken from the packet rate). The training receivers whose captures time
    /// packets most like these (--like-receivers of them) weigh --like-weight times as much as
    /// the others, whose rows are thinned to one in --like-weight.
    #[arg(long, num_args = 1.., value_name = "CAPTURE")]
    pub(crate) like: Vec<PathBuf>,
    /// With --like: that receiver's kernel receive times to join to the --like captures (sniffer
    /// captures then), as --kernel does for the training captures.
    #[arg(long, num_args = 1.., value_name = "LOG")]
    pub(crate) like_kernel: Vec<PathBuf>,
    /// With --group-by receiver: also fit each held-out receiver's model tailored to it as
    /// --like would (ranked by its captures' timing, not its labels), and score it (with
    /// --self-calibrate, also the tailored model self-calibrated: both steps stacked).
    #[arg(long)]
    pub(crate) like_held_out: bool,
    /// With --group-by receiver: also calibrate each held-out model without the receiver's
    /// labels on the *training* receivers that time packets most like it (measured ones, real
    /// kernel paths among them; the --training-neighbours nearest at each rate, within
    /// --max-distance), instead of an emulated bank, and score it.
    #[arg(long)]
    pub(crate) self_calibrate_on_training: bool,
    /// With --self-calibrate-on-training: training receivers' runs that set each threshold.
    #[arg(long, default_value_t = 5)]
    pub(crate) training_neighbours: usize,
    /// With --like: how many of the nearest training receivers weigh more.
    #[arg(long, default_value_t = 8)]
    pub(crate) like_receivers: usize,
    /// With --like: how much more (the other receivers keep one row in this many).
    #[arg(long, default_value_t = 5)]
    pub(crate) like_weight: usize,
    /// With --like: tailor only when the chosen receivers lie this near on average (each gap
    /// summary number in spreads, as `calibrate --max-distance`); farther, train as usual.
    #[arg(long, value_name = "SPREADS", default_value_t = aggrate::train::cv::DEFAULT_TAILOR_MAX_DISTANCE)]
    pub(crate) like_max_distance: f64,
    #[command(flatten)]
    pub(crate) bank: BankArgs,
    /// Estimator.
    #[arg(long, value_enum, default_value_t = ModelKind::Logistic)]
    pub(crate) model: ModelKind,
    /// Output folder for the model file and reports.
    #[arg(short, long, default_value = "models")]
    pub(crate) output: PathBuf,
    /// Folds (contiguous blocks per capture).
    #[arg(long, default_value_t = 20)]
    pub(crate) folds: usize,
    /// Gaps per row (the threshold baseline always uses 1).
    #[arg(long, default_value_t = 20)]
    pub(crate) m: usize,
    /// Leave out σ.
    #[arg(long)]
    pub(crate) no_sigma: bool,
    /// Receiver context over this many past gaps (0: raw gaps in µs). Default: 1024 for the
    /// perceptron, 0 otherwise. Implies --no-sigma.
    #[arg(long)]
    pub(crate) context: Option<u32>,
    /// Perceptron: hidden units.
    #[arg(long, default_value_t = 16)]
    pub(crate) hidden: usize,
    /// Perceptron: passes over (at most --max-rows of) the data.
    #[arg(long, default_value_t = 4)]
    pub(crate) epochs: u32,
    /// Perceptron: rows per epoch at most (a fresh random subset each epoch).
    #[arg(long, default_value_t = 1_000_000)]
    pub(crate) max_rows: usize,
    /// Perceptron: seed of the initial weights and the row order.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// Perceptron: decoupled weight decay per step (× step size).
    #[arg(long, default_value_t = 1e-4)]
    pub(crate) weight_decay: f64,
    /// Perceptron: add a linear path from the inputs to the output.
    #[arg(long)]
    pub(crate) skip: bool,
    /// Perceptron: the optimiser — minibatch Adam (one machine), or full-batch L-BFGS on the
    /// loss plus --weight-decay × ‖W‖²/2 (what `python -m aggrate.spark train` runs on a cluster:
    /// the same steps, so the same model).
    #[arg(long, value_enum, default_value_t = SolverArg::Adam)]
    pub(crate) solver: SolverArg,
    /// Perceptron with --solver lbfgs: accepted steps at most.
    #[arg(long, default_value_t = 200)]
    pub(crate) max_iter: usize,
    /// L2 penalty of the logistic regression.
    #[arg(long, default_value_t = 1.0)]
    pub(crate) l2: f64,
    /// Weight the classes equally (logistic).
    #[arg(long)]
    pub(crate) balanced: bool,
    /// SVM cost C.
    #[arg(long, default_value_t = 1.0)]
    pub(crate) c: f64,
    /// SVM loss: hinge or squared-hinge.
    #[arg(long, value_enum, default_value_t = LossArg::SquaredHinge)]
    pub(crate) loss: LossArg,
    /// Slot length for the SVR (ms).
    #[arg(long, default_value_t = 100)]
    pub(crate) slot_ms: u64,
    /// Slots per SVR row (d).
    #[arg(long, default_value_t = 5)]
    pub(crate) d: usize,
    /// SVR C values tried by CV.
    #[arg(long, value_delimiter = ',', default_values_t = aggrate::train::SVR_GRID_C)]
    pub(crate) svr_c: Vec<f64>,
    /// SVR γ values tried by CV (on standardised slot features).
    #[arg(long, value_delimiter = ',', default_values_t = aggrate::train::SVR_GRID_GAMMA)]
    pub(crate) svr_gamma: Vec<f64>,
    /// SVR ε values tried by CV (MPDUs).
    #[arg(long, value_delimiter = ',', default_values_t = aggrate::train::SVR_GRID_EPSILON)]
    pub(crate) svr_epsilon: Vec<f64>,
    #[command(flatten)]
    pub(crate) flow: FlowArgs,
}

impl TrainArgs {
    /// Arguments as `aggrate train` would parse them from `argv` (starting with "train"), with
    /// every default the command line has.
    pub(crate) fn from_argv(argv: &[String]) -> Result<TrainArgs> {
        use clap::Parser;
        let args =
            super::super::Args::try_parse_from(std::iter::once("aggrate".to_string()).chain(argv.iter().cloned()))?;
        match args.command {
            super::super::Command::Train(t) => Ok(t),
            _ => bail!("internal: {argv:?} is not a train command"),
        }
    }
}

impl TrainArgs {
    /// The checks across flags that clap cannot make: each names the flags that disagree.
    pub(crate) fn check(&self) -> Result<()> {
        let a = self;
        if let Some(share) = a.calibrate {
            if a.group_by != GroupBy::Receiver {
                bail!("--calibrate scores held-out receivers: it needs --group-by receiver");
            }
            if !(share > 0.0 && share < 1.0) {
                bail!(
                    "--calibrate {share}: the calibrated share of each capture must be in (0, 1), the rest is scored"
                );
            }
        }
        if a.self_calibrate && a.group_by != GroupBy::Receiver {
            bail!("--self-calibrate scores held-out receivers: it needs --group-by receiver");
        }
        if a.self_calibrate_on_training && a.group_by != GroupBy::Receiver {
            bail!("--self-calibrate-on-training scores held-out receivers: it needs --group-by receiver");
        }
        a.bank.source().check_distance()?;
        if a.self_calibrate_on_training && a.training_neighbours == 0 {
            bail!("--training-neighbours 0: at least one training receiver must set each threshold");
        }
        if !a.like.is_empty() && (a.group_by == GroupBy::Receiver || a.model == ModelKind::Svr) {
            bail!(
                "--like tailors one per-packet model to one receiver: not with --group-by receiver, nor for the slot SVR"
            );
        }
        if a.like_held_out && a.group_by != GroupBy::Receiver {
            bail!("--like-held-out tailors held-out receivers' models: it needs --group-by receiver");
        }
        if (!a.like.is_empty() || a.like_held_out) && (a.like_receivers == 0 || a.like_weight == 0) {
            bail!("--like-receivers and --like-weight are at least 1");
        }
        if !a.like_kernel.is_empty() && a.like.is_empty() {
            bail!("--like-kernel joins receive times to the --like captures: give them with --like");
        }
        if a.like_max_distance.is_nan() || a.like_max_distance < 0.0 {
            bail!(
                "--like-max-distance {}: a distance is ≥ 0 (inf: no limit)",
                a.like_max_distance
            );
        }
        if !a.test.is_empty() && a.group_by != GroupBy::Receiver {
            bail!("--test scores receivers never trained on, beside the held-out ones: it needs --group-by receiver");
        }
        Ok(())
    }
}

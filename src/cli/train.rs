//! `aggrate train`: captures → labelled rows → contiguous k-fold CV → report.json / report.md →
//! the final model fitted on all rows, saved as a versioned model file.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};

use aggrate::dataset::Dataset;
use aggrate::features::FeatureSpec;
use aggrate::metrics::mean_std;
use aggrate::model::{EstimatorModel, ModelFile, SlotSvrModel, TrainingSummary};
use aggrate::train::cv::{packet_cv, rate_reports, receiver_cv, Fitter};
use aggrate::train::{LogisticParams, MlpParams, SvmLoss, SvmParams};
use aggrate::wlan::manifest::WlanSettings;

use super::progress::{Bars, Ui};
use super::{inputs, load_rows, svr_stage};
use super::{Exit, FlowArgs};
use aggrate::pipeline::Input;

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
    pub(crate) bank: super::BankArgs,
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
        let args = super::Args::try_parse_from(std::iter::once("aggrate".to_string()).chain(argv.iter().cloned()))?;
        match args.command {
            super::Command::Train(t) => Ok(t),
            _ => bail!("internal: {argv:?} is not a train command"),
        }
    }
}

/// The checked feature spec for a model kind and its flags.
fn spec_for(a: &TrainArgs) -> Result<FeatureSpec> {
    let context = a.context.unwrap_or(if a.model == ModelKind::Mlp { 1024 } else { 0 });
    let (m, sigma) = match a.model {
        ModelKind::Threshold => (1, false),
        _ => (a.m, !a.no_sigma && context == 0),
    };
    if a.slot_ms == 0 || a.slot_ms > 60_000 {
        bail!("--slot-ms = {}: 1..=60000", a.slot_ms);
    }
    Ok(FeatureSpec {
        m,
        sigma,
        n_max: a.flow.n_max,
        slot_ns: a.slot_ms * 1_000_000,
        d: a.d,
        context,
        ..FeatureSpec::default()
    }
    .check()?)
}

/// File stem of a trained model.
fn model_name(a: &TrainArgs, spec: &FeatureSpec, loss: SvmLoss) -> String {
    let sig = if spec.sigma {
        "_sigma".to_string()
    } else if spec.context > 0 {
        format!("_ctx{}", spec.context)
    } else {
        String::new()
    };
    match a.model {
        ModelKind::Logistic => format!("logistic_m{}{sig}", spec.m),
        ModelKind::Svm => format!(
            "svm_{}_m{}{sig}",
            if loss == SvmLoss::Hinge { "hinge" } else { "sqhinge" },
            spec.m
        ),
        ModelKind::Threshold => "threshold_m1".to_string(),
        ModelKind::Svr => format!("slot_svr_m{}{sig}_d{}", spec.m, spec.d),
        ModelKind::Mlp => format!("mlp{}_m{}{sig}", a.hidden, spec.m),
    }
}

pub(crate) fn run(ui: &Ui, a: TrainArgs) -> Result<Exit> {
    let spec = spec_for(&a)?;
    if let Some(share) = a.calibrate {
        if a.group_by != GroupBy::Receiver {
            bail!("--calibrate scores held-out receivers: it needs --group-by receiver");
        }
        if !(share > 0.0 && share < 1.0) {
            bail!("--calibrate {share}: the calibrated share of each capture must be in (0, 1), the rest is scored");
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
    let params = LogisticParams {
        l2: a.l2,
        balanced: a.balanced,
        ..LogisticParams::default()
    }
    .check()?;
    let loss = match a.loss {
        LossArg::Hinge => SvmLoss::Hinge,
        LossArg::SquaredHinge => SvmLoss::SquaredHinge,
    };
    let svm = SvmParams {
        c: a.c,
        loss,
        ..SvmParams::default()
    }
    .check()?;
    if !(2..=100).contains(&a.folds) {
        bail!("--folds = {}: 2..=100", a.folds);
    }
    let grid = if a.model == ModelKind::Svr {
        aggrate::train::svr_grid(&a.svr_c, &a.svr_gamma, &a.svr_epsilon)?
    } else {
        Vec::new()
    };
    let mlp = MlpParams {
        hidden: a.hidden,
        epochs: a.epochs,
        max_rows_per_epoch: a.max_rows,
        seed: a.seed,
        balanced: a.balanced,
        weight_decay: a.weight_decay,
        skip: a.skip,
        slow_inputs: if spec.context > 0 {
            aggrate::features::CONTEXT_EXTRA
        } else {
            0
        },
        ..MlpParams::default()
    }
    .check()?;
    let mut files = inputs(&a.dataset, true, &a.kernel)?;
    // Test receivers' inputs follow the training ones (`receiver_run` tells them apart by index).
    let trained_on = files.len();
    if !a.test.is_empty() {
        files.extend(inputs(&a.test, true, &[])?);
    }
    ui.info(format!("reading {} captures", files.len()));
    let data = load_rows(ui, &files, &spec, &a.flow)?;
    ui.info(format!(
        "{} rows, {} frame starts",
        data.len(),
        data.y.iter().filter(|y| **y).count()
    ));
    let (data, like) = if a.like.is_empty() {
        (data, None)
    } else {
        let (d, l) = like_selection(ui, &a, &spec, &files, data)?;
        (d, Some(l))
    };
    let how = match a.model {
        ModelKind::Logistic | ModelKind::Svr => Fitter::Logistic(params),
        ModelKind::Svm => Fitter::Svm(svm),
        ModelKind::Threshold => Fitter::Threshold,
        ModelKind::Mlp => Fitter::Mlp(mlp),
    };
    if a.group_by == GroupBy::Receiver {
        if a.model == ModelKind::Svr {
            bail!("--group-by receiver scores per-packet models; train the slot SVR with --group-by capture");
        }
        return receiver_run(ui, &a, &spec, (&files, trained_on), &data, how);
    }
    let cv = packet_cv(&data, a.folds, spec.n_max, how, &mut Bars::new(ui))?;
    let (f1_mean, f1_std) = mean_std(&cv.folds.iter().map(|f| f.f1).collect::<Vec<_>>());
    let (acc_mean, acc_std) = mean_std(&cv.folds.iter().map(|f| f.accuracy).collect::<Vec<_>>());
    let mut rates = rate_reports(&cv.per_rate);
    let name = model_name(&a, &spec, loss);

    let mut final_model = cv.final_model;
    let mut slot_json = serde_json::Value::Null;
    let mut headline = format!("{}-fold contiguous CV: F1 {f1_mean:.4} ± {f1_std:.4}", a.folds);
    let mut slot_stage = None;
    if a.model == ModelKind::Svr {
        let EstimatorModel::Logistic(base) = final_model else {
            bail!("internal: the SVR's base model is not logistic");
        };
        let st = svr_stage(ui, &data, &cv.oof, &spec, a.folds, &grid)?;
        aggrate::train::cv::attach_slots(&mut rates, &st.per_rate);
        headline = format!(
            "{headline}; slot SVR (C = {}, γ = {}, ε = {}): slot RMSE {:.2} vs {:.2} for logistic alone",
            st.params.c, st.params.gamma, st.params.epsilon, st.svr_rmse, st.base_rmse
        );
        slot_json = serde_json::json!({
            "slot_ms": a.slot_ms,
            "d": spec.d,
            "rows": st.rows.len(),
            "folds": st.folds,
            "chosen": st.params,
            "support_vectors": st.model.n_support(),
            "slot_rmse": st.svr_rmse,
            "base_slot_rmse": st.base_rmse,
            "grid": st.grid,
        });
        final_model = EstimatorModel::SlotSvr(SlotSvrModel {
            base,
            svr: st.model.clone(),
        });
        slot_stage = Some(st);
    }

    let mut rates_seen: Vec<f64> = rates.iter().map(|r| r.rate_mbps).filter(|r| !r.is_nan()).collect();
    rates_seen.dedup();
    let mut file = ModelFile::new(
        spec,
        final_model,
        TrainingSummary {
            rows: data.len() as u64,
            positives: data.y.iter().filter(|y| **y).count() as u64,
            captures: files.iter().map(|f| f.name()).collect(),
            rates_mbps: rates_seen,
        },
    );
    file.metrics =
        serde_json::json!({ "cv_folds": a.folds, "f1_mean": f1_mean, "f1_std": f1_std, "accuracy_mean": acc_mean });
    if let Some(l) = like {
        file.metrics["like"] = l;
    }
    note_training_wlan(&mut file, &files, &a.flow)?;
    if let Some(st) = &slot_stage {
        file.metrics["slot_rmse"] = st.svr_rmse.into();
        file.metrics["base_slot_rmse"] = st.base_rmse.into();
    }
    std::fs::create_dir_all(&a.output).with_context(|| format!("creating {}", a.output.display()))?;
    let model_path = a.output.join(format!("{name}.json"));
    std::fs::write(&model_path, file.to_json()).with_context(|| format!("writing {}", model_path.display()))?;
    let report = serde_json::json!({
        "model": name,
        "kind": file.model.kind(),
        "model_file": model_path.display().to_string(),
        "spec": spec,
        "folds": cv.folds,
        "f1_mean": f1_mean,
        "f1_std": f1_std,
        "accuracy_mean": acc_mean,
        "accuracy_std": acc_std,
        "per_rate": rates,
        "slot_svr": slot_json,
        "rows": data.len(),
        "captures": file.training.captures,
    });
    let written =
        aggrate::report::write_model_reports(&a.output, &name, &headline, &report, &rates, slot_stage.as_ref())?;
    if !ui.quiet {
        out!("{}", aggrate::report::rates_md(&name, &headline, &rates));
    }
    ui.info(format!("wrote {} and {}", model_path.display(), list(&written)));
    Ok(Exit::Ok)
}

/// Record the WLAN the training captures were sent over (`metrics.training_wlan`), where they
/// say it, so that `eval` can warn when it scores the model on another.
fn note_training_wlan(file: &mut ModelFile, files: &[Input], flow: &FlowArgs) -> Result<()> {
    let seen = flow.seen_wlan(files)?;
    if !seen.is_empty() {
        file.metrics["training_wlan"] = serde_json::to_value(seen)?;
    }
    Ok(())
}

/// `--group-by receiver`: leave each receiver out in turn (with its own CV and the m = 1
/// threshold beside it), then fit the model on every receiver and write it with the table.
/// Inputs from `trained_on` on are `--test` receivers': in no training set, scored with the
/// final model, reported in a table of their own.
fn receiver_run(
    ui: &Ui,
    a: &TrainArgs,
    spec: &FeatureSpec,
    (files, trained_on): (&[Input], usize),
    data: &Dataset,
    how: Fitter,
) -> Result<Exit> {
    use aggrate::report::receivers_md;
    use aggrate::train::verdict::{receiver_verdicts, ReceiverCriteria};
    let (names, receiver_of_group) = aggrate::train::cv::receivers_of(files, "--group-by receiver")?;
    let mut test = vec![false; names.len()];
    for (g, &r) in receiver_of_group.iter().enumerate().skip(trained_on) {
        test[r as usize] = true;
        if let Some(t) = (0..trained_on).find(|&t| receiver_of_group[t] == r) {
            bail!(
                "receiver {} is in the training data ({}) and in the test data ({}): a test receiver must be one \
                 the model never saw",
                names[r as usize],
                files[t].path.display(),
                files[g].path.display()
            );
        }
    }
    ui.info(format!("{} receivers: {}", names.len(), names.join(", ")));
    let banks = if a.self_calibrate {
        Some(receiver_banks(ui, a, spec, files, &receiver_of_group, &names, data)?)
    } else {
        None
    };
    let calibrations = aggrate::train::cv::HeldOutCalibrations {
        spec,
        share: a.calibrate,
        bank: banks.as_ref().map(|(banks, of)| aggrate::train::cv::ReceiverBanks {
            of_receiver: of.iter().map(|&b| (&banks[b].0, banks[b].1.describe())).collect(),
            like: a.bank.source().likeness(),
        }),
        tailor: a.like_held_out.then_some(a.tailor()),
        on_training: a
            .self_calibrate_on_training
            .then_some(a.bank.source().measured_likeness(a.training_neighbours)),
    };
    let reports = receiver_cv(
        data,
        &receiver_of_group,
        &names,
        &test,
        a.own_folds,
        spec.n_max,
        how,
        (a.calibrate.is_some() || a.self_calibrate || a.like_held_out || a.self_calibrate_on_training)
            .then_some(&calibrations),
        &mut Bars::new(ui),
    )?;
    let mut bars = Bars::new(ui);
    use aggrate::train::cv::Progress as _;
    bars.start("fitting on every receiver", 0);
    let trained_rows: Vec<usize> = (0..data.len())
        .filter(|&i| (data.group[i] as usize) < trained_on)
        .collect();
    let final_model = how.fit(data, &aggrate::dataset::RowSet::from_indices(&trained_rows))?;
    bars.finish();
    let loss = match a.loss {
        LossArg::Hinge => SvmLoss::Hinge,
        LossArg::SquaredHinge => SvmLoss::SquaredHinge,
    };
    let name = model_name(a, spec, loss);
    let criteria = ReceiverCriteria::default();
    let (tests, reports): (Vec<_>, Vec<_>) = reports.into_iter().partition(|r| r.test);
    let verdicts = receiver_verdicts(&reports, &criteria);
    let passing = verdicts.iter().filter(|v| v.pass).count();
    let test_verdicts = receiver_verdicts(&tests, &criteria);
    let test_passing = test_verdicts.iter().filter(|v| v.pass).count();
    let rates_seen = distinct_rates(trained_rows.iter().map(|&i| data.rate_mbps[i]));
    let mut file = ModelFile::new(
        *spec,
        final_model,
        TrainingSummary {
            rows: trained_rows.len() as u64,
            positives: trained_rows.iter().filter(|&&i| data.y[i]).count() as u64,
            captures: files[..trained_on].iter().map(|f| f.name()).collect(),
            rates_mbps: rates_seen,
        },
    );
    let trained_names: Vec<&String> = reports.iter().map(|r| &r.receiver).collect();
    file.metrics = serde_json::json!({
        "group_by": "receiver",
        "receivers": trained_names,
        "receivers_passing": passing,
        "criteria": criteria,
    });
    note_training_wlan(&mut file, &files[..trained_on], &a.flow)?;
    if !tests.is_empty() {
        file.metrics["test_receivers"] = tests.iter().map(|r| r.receiver.clone()).collect::<Vec<_>>().into();
        file.metrics["test_receivers_passing"] = test_passing.into();
    }
    std::fs::create_dir_all(&a.output).with_context(|| format!("creating {}", a.output.display()))?;
    let model_path = a.output.join(format!("{name}.json"));
    std::fs::write(&model_path, file.to_json()).with_context(|| format!("writing {}", model_path.display()))?;
    let mut written = Vec::new();
    for (stem, title, reports, verdicts) in [
        (name.clone(), "leave one receiver out", &reports, verdicts),
        (
            format!("{name}.test"),
            "receivers in no training set (--test), each against its own CV",
            &tests,
            test_verdicts,
        ),
    ] {
        if reports.is_empty() {
            continue;
        }
        let md = receivers_md(&format!("{name}: {title}"), reports, &criteria);
        let report = serde_json::json!({
            "model": name,
            "kind": file.model.kind(),
            "model_file": model_path.display().to_string(),
            "spec": spec,
            "group_by": "receiver",
            "criteria": criteria,
            "verdicts": verdicts,
            "receivers": reports,
            "rows": reports.iter().flat_map(|r| &r.per_rate).map(|p| p.rows).sum::<u64>(),
        });
        written.extend(aggrate::report::write_receiver_reports(
            &a.output, &stem, &report, &md, reports,
        )?);
        if !ui.quiet {
            out!("{md}");
        }
    }
    let tested = if tests.is_empty() {
        String::new()
    } else {
        format!(", {test_passing} of {} test receivers", tests.len())
    };
    ui.info(format!(
        "{passing} of {} receivers pass{tested}; wrote {} and {}",
        reports.len(),
        model_path.display(),
        list(&written)
    ));
    Ok(Exit::Ok)
}

/// The distinct finite send rates among `rates`, ascending.
fn distinct_rates(rates: impl Iterator<Item = f32>) -> Vec<f64> {
    let mut v: Vec<f64> = rates.filter(|r| r.is_finite()).map(f64::from).collect();
    v.sort_unstable_by(f64::total_cmp);
    v.dedup();
    v
}

impl TrainArgs {
    /// How `--like` / `--like-held-out` tailor a model.
    fn tailor(&self) -> aggrate::train::cv::Tailor {
        aggrate::train::cv::Tailor {
            receivers: self.like_receivers,
            weight: self.like_weight,
            max_distance: self.like_max_distance,
        }
    }
}

/// `--like`: the training rows weighted towards the receivers that time packets most like the
/// `--like` captures (label-free: [`aggrate::train::bank::rank_receivers`]) — every row of the
/// `--like-receivers` nearest, one in `--like-weight` of the others' — and what was chosen, for
/// the model file (`metrics.like`).
fn like_selection(
    ui: &Ui,
    a: &TrainArgs,
    spec: &FeatureSpec,
    files: &[Input],
    data: Dataset,
) -> Result<(Dataset, serde_json::Value)> {
    use aggrate::train::bank::{rank_receivers, Bank};
    let (names, receiver_of_group) = aggrate::train::cv::receivers_of(files, "--like")?;
    let mut mine = inputs(&a.like, false, &a.like_kernel)?;
    mine.iter_mut().for_each(|f| f.truth_optional = true);
    let mut target = load_rows(ui, &mine, spec, &a.flow).context("--like")?;
    let bytes = a.flow.seen_wlan(&mine)?.ip_len.unwrap_or(1500);
    super::set_rates(ui, &[], &mine, &mut target, bytes)?;
    let bank = Bank::of_captures(&data, &receiver_of_group, &names);
    let ranked = rank_receivers(&bank, &target).context("--like: ranking the training receivers")?;
    let near: Vec<&(String, f64)> = ranked.iter().take(a.like_receivers).collect();
    let is_near: Vec<bool> = names.iter().map(|n| near.iter().any(|(m, _)| m == n)).collect();
    let w = a.like_weight;
    let tailor = a.tailor();
    let distances: Vec<f64> = near.iter().map(|n| n.1).collect();
    let mut report = serde_json::json!({
        "captures": mine.iter().map(|f| f.path.display().to_string()).collect::<Vec<_>>(),
        "receivers": near.iter().map(|(n, d)| serde_json::json!({"receiver": n, "distance": d})).collect::<Vec<_>>(),
    });
    if !tailor.admits(&distances) {
        ui.warn(format!(
            "--like: the {} nearest training receivers lie {:.2} away on average, farther than --like-max-distance \
             {}: training on every receiver alike",
            near.len(),
            aggrate::train::cv::mean_distance(&distances),
            a.like_max_distance
        ));
        report["too_far"] = true.into();
        return Ok((data, report));
    }
    let all: Vec<usize> = (0..data.len()).collect();
    let keep = tailor.keep(&data, &all, |i| {
        receiver_of_group
            .get(data.group[i] as usize)
            .is_some_and(|&r| is_near[r as usize])
    });
    ui.info(format!(
        "--like: the {} training receivers nearest {} capture(s): {}; the other {}'s rows thinned to 1 in {w}: \
         {} of {} rows",
        near.len(),
        mine.len(),
        near.iter()
            .map(|(n, d)| format!("{n} ({d:.2})"))
            .collect::<Vec<_>>()
            .join(", "),
        names.len() - near.len(),
        keep.len(),
        data.len()
    ));
    report["weight"] = w.into();
    Ok((data.select(&keep), report))
}

/// A self-calibration bank and the WLAN it was emulated at.
type WlanBank = (aggrate::train::bank::Bank, WlanSettings);

/// `--self-calibrate`: the banks to calibrate on, one per WLAN the receivers' captures show
/// (the flags first, then each receiver's flow's packet size and radiotap VHT settings, as
/// `calibrate --no-labels` reads them), each emulated at the send rates of its receivers' rows;
/// and per receiver (by index), its bank's index.
fn receiver_banks(
    ui: &Ui,
    a: &TrainArgs,
    spec: &FeatureSpec,
    files: &[Input],
    receiver_of_group: &[u32],
    names: &[String],
    data: &Dataset,
) -> Result<(Vec<WlanBank>, Vec<usize>)> {
    use aggrate::train::bank_source::BankSource;
    // Distinct WLANs in first-seen order: the flags that emulate each and its receivers.
    let mut wlans: Vec<(WlanSettings, BankSource, Vec<&str>)> = Vec::new();
    let mut of = Vec::with_capacity(names.len());
    for (r, name) in names.iter().enumerate() {
        let mine: Vec<Input> = files
            .iter()
            .zip(receiver_of_group)
            .filter(|(_, &g)| g as usize == r)
            .map(|(f, _)| f.clone())
            .collect();
        let (args, _) = a.bank.source().with_seen(a.flow.seen_wlan(&mine)?);
        let (manifest, _) = args
            .manifest()
            .with_context(|| format!("the bank for receiver {name}'s WLAN"))?;
        let wlan = WlanSettings::of(&manifest);
        let i = match wlans.iter().position(|(w, _, _)| *w == wlan) {
            Some(i) => i,
            None => {
                wlans.push((wlan, args, Vec::new()));
                wlans.len() - 1
            }
        };
        wlans[i].2.push(name);
        of.push(i);
    }
    // Each bank's rates: those of its receivers' rows.
    let bank_of_row = |i: usize| receiver_of_group.get(data.group[i] as usize).map(|&r| of[r as usize]);
    let rates: Vec<Vec<f64>> = (0..wlans.len())
        .map(|b| {
            distinct_rates(
                (0..data.len())
                    .filter(|&i| bank_of_row(i) == Some(b))
                    .map(|i| data.rate_mbps[i]),
            )
        })
        .collect();
    if wlans.len() > 1 {
        for (w, _, rs) in &wlans {
            ui.info(format!(
                "self-calibration bank at {} for {} receivers: {}",
                w.describe(),
                rs.len(),
                rs.join(", ")
            ));
        }
    }
    let banks = wlans
        .into_iter()
        .zip(&rates)
        .map(|((w, args, _), rates)| Ok((super::load_bank(ui, &args, rates, spec)?, w)))
        .collect::<Result<Vec<_>>>()?;
    Ok((banks, of))
}

/// Paths as "a, b, c" for the closing line.
fn list(paths: &[std::path::PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

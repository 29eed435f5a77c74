//! `train --group-by receiver` (leave one receiver out, then the final fit and its verdicts) and
//! `--like` (the rows weighted toward the receivers most like the target's).

use super::*;
use aggrate::train::bank_source::WlanBanks;
use aggrate::train::verdict::ReceiverRun;

/// `--group-by receiver`: leave each receiver out in turn (with its own CV and the m = 1
/// threshold beside it), then fit the model on every receiver and write it with the table.
/// Inputs from `trained_on` on are `--test` receivers': in no training set, scored with the
/// final model, reported in a table of their own.
pub(super) fn receiver_run(
    ui: &Ui,
    a: &TrainArgs,
    spec: &FeatureSpec,
    (files, trained_on): (&[Input], usize),
    data: &Dataset,
    how: Fitter,
) -> Result<Exit> {
    let (names, receiver_of_group) = aggrate::train::cv::receivers_of(files, "--group-by receiver")?;
    let test = aggrate::train::cv::test_receivers(&receiver_of_group, trained_on, names.len()).map_err(|(t, g)| {
        let r = receiver_of_group[g] as usize;
        anyhow::anyhow!(
            "receiver {} is in the training data ({}) and in the test data ({}): a test receiver must be one \
             the model never saw",
            names[r],
            files[t].path.display(),
            files[g].path.display()
        )
    })?;
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
    let captures = files[..trained_on].iter().map(|f| f.name()).collect();
    let run = ReceiverRun::finish(reports, data, trained_on, captures, *spec, how)?;
    bars.finish();
    let loss = match a.loss {
        LossArg::Hinge => SvmLoss::Hinge,
        LossArg::SquaredHinge => SvmLoss::SquaredHinge,
    };
    let name = model_name(a, spec, loss);
    let (passing, test_passing) = run.passing();
    let mut file = run.file;
    note_training_wlan(&mut file, &files[..trained_on], &a.flow)?;
    std::fs::create_dir_all(&a.output).with_context(|| format!("creating {}", a.output.display()))?;
    let model_path = a.output.join(format!("{name}.json"));
    std::fs::write(&model_path, file.to_json()).with_context(|| format!("writing {}", model_path.display()))?;
    let (reports, tests) = (run.reports, run.tests);
    let written = write_tables(
        ui,
        a,
        (&name, &model_path, file.model.kind(), spec),
        &run.criteria,
        [(&reports, run.verdicts), (&tests, run.test_verdicts)],
    )?;
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

/// The leave-one-receiver-out table and the test receivers' (when there are any), as Markdown
/// (also printed), JSON, CSV and PNG; the files written.
fn write_tables(
    ui: &Ui,
    a: &TrainArgs,
    (name, model_path, kind, spec): (&str, &std::path::Path, &str, &FeatureSpec),
    criteria: &aggrate::train::verdict::ReceiverCriteria,
    [(trained, verdicts), (tests, test_verdicts)]: [(
        &Vec<aggrate::train::cv::ReceiverReport>,
        Vec<aggrate::train::verdict::ReceiverVerdict>,
    ); 2],
) -> Result<Vec<std::path::PathBuf>> {
    let mut written = Vec::new();
    for (stem, title, reports, verdicts) in [
        (name.to_string(), "leave one receiver out", trained, verdicts),
        (
            format!("{name}.test"),
            "receivers in no training set (--test), each against its own CV",
            tests,
            test_verdicts,
        ),
    ] {
        if reports.is_empty() {
            continue;
        }
        let md = aggrate::report::receivers_md(&format!("{name}: {title}"), reports, criteria);
        let report = serde_json::json!({
            "model": name,
            "kind": kind,
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
    Ok(written)
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
pub(super) fn like_selection(
    ui: &Ui,
    a: &TrainArgs,
    spec: &FeatureSpec,
    files: &[Input],
    data: Dataset,
) -> Result<(Dataset, serde_json::Value)> {
    let (names, receiver_of_group) = aggrate::train::cv::receivers_of(files, "--like")?;
    let mut mine = inputs(&a.like, false, &a.like_kernel)?;
    mine.iter_mut().for_each(|f| f.truth_optional = true);
    let mut target = load_rows(ui, &mine, spec, &a.flow).context("--like")?;
    let bytes = a.flow.seen_wlan(&mine)?.ip_len.unwrap_or(1500);
    super::super::set_rates(ui, &[], &mine, &mut target, bytes)?;
    let chosen = a
        .tailor()
        .select_in(&data, &receiver_of_group, &names, &target)
        .context("--like: ranking the training receivers")?;
    let near: Vec<(&str, f64)> = chosen
        .near
        .iter()
        .map(|&(r, d)| (names[r as usize].as_str(), d))
        .collect();
    let mut report = serde_json::json!({
        "captures": mine.iter().map(|f| f.path.display().to_string()).collect::<Vec<_>>(),
        "receivers": near.iter().map(|(n, d)| serde_json::json!({"receiver": n, "distance": d})).collect::<Vec<_>>(),
    });
    let Some(keep) = chosen.keep.as_ref() else {
        ui.warn(format!(
            "--like: the {} nearest training receivers lie {:.2} away on average, farther than --like-max-distance \
             {}: training on every receiver alike",
            near.len(),
            chosen.mean_distance(),
            a.like_max_distance
        ));
        report["too_far"] = true.into();
        return Ok((data, report));
    };
    ui.info(format!(
        "--like: the {} training receivers nearest {} capture(s): {}; the other {}'s rows thinned to 1 in {}: \
         {} of {} rows",
        near.len(),
        mine.len(),
        near.iter()
            .map(|(n, d)| format!("{n} ({d:.2})"))
            .collect::<Vec<_>>()
            .join(", "),
        names.len() - near.len(),
        a.like_weight,
        keep.len(),
        data.len()
    ));
    report["weight"] = a.like_weight.into();
    Ok((data.select(keep), report))
}

/// A self-calibration bank and the WLAN it was emulated at.
type WlanBank = (aggrate::train::bank::Bank, WlanSettings);

/// `--self-calibrate`: the banks to calibrate on, one per WLAN the receivers' captures show
/// ([`WlanBanks::group`]), each emulated at its receivers' send rates; and per receiver (by
/// index), its bank's index.
fn receiver_banks(
    ui: &Ui,
    a: &TrainArgs,
    spec: &FeatureSpec,
    files: &[Input],
    receiver_of_group: &[u32],
    names: &[String],
    data: &Dataset,
) -> Result<(Vec<WlanBank>, Vec<usize>)> {
    let seen = (0..names.len())
        .map(|r| {
            let mine: Vec<Input> = files
                .iter()
                .zip(receiver_of_group)
                .filter(|(_, &g)| g as usize == r)
                .map(|(f, _)| f.clone())
                .collect();
            a.flow.seen_wlan(&mine)
        })
        .collect::<Result<Vec<_>>>()?;
    let of_row = |i: usize| receiver_of_group.get(data.group[i] as usize).map(|&r| r as usize);
    let grouped = WlanBanks::group(&a.bank.source(), names, &seen, data, &of_row)?;
    if grouped.banks.len() > 1 {
        for (w, _, rs, _) in &grouped.banks {
            ui.info(format!(
                "self-calibration bank at {} for {} receivers: {}",
                w.describe(),
                rs.len(),
                rs.iter().map(|&r| names[r].as_str()).collect::<Vec<_>>().join(", ")
            ));
        }
    }
    let banks = grouped
        .banks
        .into_iter()
        .map(|(w, source, _, rates)| Ok((super::super::load_bank(ui, &source, &rates, spec)?, w)))
        .collect::<Result<Vec<_>>>()?;
    Ok((banks, grouped.of_receiver))
}

//! `train --group-by receiver` (leave one receiver out, then the final fit and its verdicts) and
//! `--like` (the rows weighted toward the receivers most like the target's).

use super::*;

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
    use aggrate::train::verdict::{receiver_verdicts, ReceiverCriteria};
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
    let written = write_tables(
        ui,
        a,
        (&name, &model_path, file.model.kind(), spec),
        &criteria,
        [(&reports, verdicts), (&tests, test_verdicts)],
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
pub(super) fn like_selection(
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
    super::super::set_rates(ui, &[], &mine, &mut target, bytes)?;
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
        .map(|((w, args, _), rates)| Ok((super::super::load_bank(ui, &args, rates, spec)?, w)))
        .collect::<Result<Vec<_>>>()?;
    Ok((banks, of))
}

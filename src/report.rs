//! Renderers and writers only: the typed reports that `train`, `eval`, `sim` and the live
//! loop return, as Markdown and CSV tables (per rate, leave-one-receiver-out, calibration,
//! levels), their PNG charts ([`plot`]) and the report files a training run writes
//! ([`write_model_reports`], [`write_receiver_reports`]). The scores themselves are computed in
//! [`crate::metrics`]; nothing below the CLI imports this module.

pub mod bottleneck;
pub mod bulk;
pub mod plot;
pub mod sweep;
pub mod testbed;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::metrics::BinaryMetrics;
use crate::train::verdict::{point_fails, receiver_verdicts, ReceiverCriteria};

/// A Markdown table: one line per receiver, per rate `held-out / own` F1 of the model and of the
/// m = 1 threshold, and the verdict.
pub fn receivers_md(title: &str, reports: &[crate::train::cv::ReceiverReport], c: &ReceiverCriteria) -> String {
    let mut rates: Vec<f64> = reports
        .iter()
        .flat_map(|r| r.per_rate.iter().map(|p| p.rate_mbps))
        .filter(|r| r.is_finite())
        .collect();
    rates.sort_by(|a, b| a.total_cmp(b));
    rates.dedup();
    let verdicts = receiver_verdicts(reports, c);
    let passing = verdicts.iter().filter(|v| v.pass).count();
    // The variants some receiver has a verdict with: a paragraph and a line each.
    let variants: Vec<Variant> = Variant::ALL
        .into_iter()
        .filter(|&v| verdicts.iter().any(|x| x.passes_with(v).is_some()))
        .collect();
    // The WLANs the self-calibration banks were emulated at: one for the table is said once,
    // several on each self-calibrated line.
    let mut bank_wlans: Vec<&str> = reports.iter().filter_map(|r| r.bank_wlan.as_deref()).collect();
    bank_wlans.sort_unstable();
    bank_wlans.dedup();
    let mixed_banks = bank_wlans.len() > 1;
    let how = if !reports.is_empty() && reports.iter().all(|r| r.test) {
        "Receivers in no training set (`--test`): each cell is `held-out / own` F1 — the model trained on every \
         training receiver (none of these), then the same kind trained on this receiver alone (its own \
         contiguous CV)"
    } else {
        "Leave one receiver out: each cell is `held-out / own` F1 — the model trained on every other receiver, \
         then the same kind trained on this receiver alone (its own contiguous CV)"
    };
    let mut s = format!(
        "# {title}\n\n{how} — for the model, \
         and below it for the m = 1 threshold. A receiver passes when, at every rate up to {} Mb/s, the held-out \
         model is within {} F1 of its own CV and at least {} wherever own CV reaches {}. \
         **{passing} of {} receivers pass.**\n\n",
        c.max_rate,
        c.tol,
        c.floor,
        c.floor_if,
        verdicts.len()
    );
    for &v in &variants {
        let n = verdicts.iter().filter(|x| x.passes_with(v) == Some(true)).count();
        let at = match bank_wlans[..] {
            [w] if v.uses_bank() => format!(" (the bank emulated at {w})"),
            _ => String::new(),
        };
        let what = variant_paragraph(v, &at);
        s.push_str(&format!(
            "{what} — the `{}` lines — **{n} of {} pass**.\n\n",
            v.label(),
            verdicts.len()
        ));
    }
    s.push_str(&receivers_table(reports, &verdicts, &rates, &variants, mixed_banks));
    s.push_str(&distance_md(reports, c));
    s
}

/// What a variant of the held-out model did, for the paragraph above the table (`at`: where its
/// bank was emulated, when one WLAN serves the whole table).
fn variant_paragraph(v: Variant, at: &str) -> String {
    match v {
        Variant::Calibrated => "With the held-out model calibrated on the first part of each of the receiver's \
             captures (`aggrate calibrate`: it uses that receiver's labels) and scored on the rest"
            .to_string(),
        Variant::SelfCalibrated => format!(
            "With the held-out model calibrated *without* the receiver's labels, on the emulated receivers \
             whose packet timing is most like each of its captures{at} (`aggrate calibrate --no-labels`), \
             and scored on all its rows"
        ),
        Variant::Tailored => "With the held-out model fitted again tailored to the receiver *without* its \
             labels — the training receivers whose captures time packets most like its captures weigh \
             more (`aggrate train --like`) — and scored on all its rows"
            .to_string(),
        Variant::SelfCalibratedOnTraining => "With the held-out model calibrated *without* the receiver's \
             labels on the *training* receivers whose packet timing is most like each of its captures \
             (measured receivers, real kernel paths among them, instead of an emulated bank) and scored on \
             all its rows"
            .to_string(),
        Variant::TailoredSelfCalibrated => format!(
            "With the tailored model then calibrated without labels on the emulated receivers most like \
             each capture{at} (both label-free steps, one after the other) and scored on all its rows"
        ),
    }
}

/// The table of [`receivers_md`]: per receiver a line for the model, the m = 1 threshold and
/// each variant, per rate `held-out / own` F1, then the worst loss and the verdict.
fn receivers_table(
    reports: &[crate::train::cv::ReceiverReport],
    verdicts: &[crate::train::verdict::ReceiverVerdict],
    rates: &[f64],
    variants: &[Variant],
    mixed_banks: bool,
) -> String {
    let mut s = String::new();
    s.push_str("| receiver | model |");
    for r in rates {
        s.push_str(&format!(" {r} Mb/s |"));
    }
    s.push_str(" worst loss | pass |\n| --- | --- |");
    for _ in rates {
        s.push_str(" --- |");
    }
    s.push_str(" --- | --- |\n");
    /// A line of the table: the model, the m = 1 threshold or a variant.
    #[derive(Clone, Copy, PartialEq)]
    enum Line {
        Model,
        Threshold,
        Variant(Variant),
    }
    let lines: Vec<Line> = [Line::Model, Line::Threshold]
        .into_iter()
        .chain(variants.iter().map(|&v| Line::Variant(v)))
        .collect();
    let yes = |p: bool| if p { "yes" } else { "**no**" };
    for (r, v) in reports.iter().zip(verdicts) {
        for &line in &lines {
            let (first, label) = match line {
                Line::Model => (r.receiver.as_str(), "model".to_string()),
                Line::Threshold => ("", "m = 1".to_string()),
                Line::Variant(x) => match (&r.bank_wlan, x.uses_bank() && mixed_banks) {
                    (Some(w), true) => ("", format!("{} ({w})", x.label())),
                    _ => ("", x.label().to_string()),
                },
            };
            s.push_str(&format!("| {first} | {label} |"));
            for rate in rates {
                let cell = r
                    .per_rate
                    .iter()
                    .find(|p| p.rate_mbps == *rate)
                    .and_then(|p| match line {
                        Line::Model => Some((p.held_out.f1, p.own.f1)),
                        Line::Threshold => Some((p.threshold_held_out.f1, p.threshold_own.f1)),
                        Line::Variant(x) => p.variant(x).map(|c| (c.f1, p.own.f1)),
                    });
                match cell {
                    Some((h, o)) => s.push_str(&format!(" {h:.3} / {o:.3} |")),
                    None => s.push_str(" – |"),
                }
            }
            match line {
                Line::Model => s.push_str(&format!(" {:+.3} | {} |\n", v.worst_loss, yes(v.pass))),
                Line::Threshold => s.push_str(" | |\n"),
                Line::Variant(x) => s.push_str(&format!(" | {} |\n", v.passes_with(x).map_or("–", yes))),
            }
        }
    }
    s
}

/// Buckets of distance to the nearest training receiver ([`ReceiverRate::training_distance`])
/// for [`distance_md`] and the distance PNG.
const DISTANCE_BUCKETS: [(f64, f64); 4] = [(0.0, 1.0), (1.0, 2.0), (2.0, 3.0), (3.0, f64::INFINITY)];

/// The points (receiver and rate) up to `c.max_rate` that have a distance to the training
/// receivers.
fn judged_with_distance<'a>(
    reports: &'a [ReceiverReport],
    c: &ReceiverCriteria,
) -> Vec<&'a crate::train::cv::ReceiverRate> {
    reports
        .iter()
        .flat_map(|r| &r.per_rate)
        .filter(|p| p.rate_mbps <= c.max_rate && p.training_distance.is_some_and(f64::is_finite))
        .collect()
}

/// The points (receiver, rate up to `c.max_rate`) by distance to the nearest training receiver:
/// how many, how many fail, and their mean held-out F1 — whether "far from every training
/// receiver" predicts a loss. Empty without distances.
fn distance_md(reports: &[ReceiverReport], c: &ReceiverCriteria) -> String {
    let pts = judged_with_distance(reports, c);
    if pts.is_empty() {
        return String::new();
    }
    let mut s = format!(
        "\n## By distance to the nearest training receiver\n\nEach point (receiver, rate up to {} Mb/s) by how far its \
         capture lies from every capture the held-out model was trained on (gap summary in spreads over them at the \
         nearest rate; no label read: `aggrate eval` reports it for the shipped model and warns beyond {}).\n\n\
         | distance | points | failing | mean held-out F1 | mean own-CV F1 |\n| --- | --- | --- | --- | --- |\n",
        c.max_rate,
        crate::train::bank::FAMILIAR_DISTANCE
    );
    for (lo, hi) in DISTANCE_BUCKETS {
        let b: Vec<&&crate::train::cv::ReceiverRate> = pts
            .iter()
            .filter(|p| p.training_distance.is_some_and(|d| d >= lo && d < hi))
            .collect();
        if b.is_empty() {
            continue;
        }
        let mean =
            |f: &dyn Fn(&crate::train::cv::ReceiverRate) -> f64| b.iter().map(|p| f(p)).sum::<f64>() / b.len() as f64;
        let range = if hi.is_finite() {
            format!("{lo} – {hi}")
        } else {
            format!("≥ {lo}")
        };
        s.push_str(&format!(
            "| {range} | {} | {} | {:.3} | {:.3} |\n",
            b.len(),
            b.iter().filter(|p| point_fails(p, c)).count(),
            mean(&|p| p.held_out.f1),
            mean(&|p| p.own.f1)
        ));
    }
    s
}

/// One CSV line per receiver and rate: the held-out model's, own CV's and the m = 1 threshold's
/// scores, then a `<variant>_f1` column per [`Variant`] (empty where not scored) and the
/// self-calibration bank's distance.
pub fn receivers_csv(reports: &[crate::train::cv::ReceiverReport]) -> String {
    let mut s = String::from(
        "receiver,rate_mbps,rows,held_out_f1,held_out_precision,held_out_recall,own_f1,own_precision,own_recall,threshold_held_out_f1,threshold_own_f1,loss",
    );
    for v in Variant::ALL {
        s.push_str(&format!(",{}_f1", v.key()));
    }
    s.push_str(",self_calibration_distance,training_distance\n");
    let opt = |x: Option<f64>| x.map_or(String::new(), |x| x.to_string());
    for r in reports {
        for p in &r.per_rate {
            s.push_str(&format!(
                "{},{},{},{},{},{},{},{},{},{},{},{}",
                r.receiver,
                p.rate_mbps,
                p.rows,
                p.held_out.f1,
                p.held_out.precision,
                p.held_out.recall,
                p.own.f1,
                p.own.precision,
                p.own.recall,
                p.threshold_held_out.f1,
                p.threshold_own.f1,
                p.loss(),
            ));
            for v in Variant::ALL {
                s.push_str(&format!(",{}", opt(p.variant(v).map(|c| c.f1))));
            }
            s.push_str(&format!(
                ",{},{}\n",
                opt(p.self_calibration_distance),
                opt(p.training_distance)
            ));
        }
    }
    s
}

/// The Markdown report of `aggrate calibrate`: the threshold, F1 / precision / recall before and
/// after on the calibration rows and on the rest, per send rate, and the half-split check.
pub fn calibration_md(
    name: &str,
    c: &crate::train::calibrate::Calibration,
    check: Option<&crate::train::calibrate::Calibration>,
) -> String {
    let pr = |b: &BinaryMetrics| format!("{:.4} | {:.4} | {:.4}", b.f1(), b.precision(), b.recall());
    let mut s = format!("# {name}, calibrated\n\n");
    s.push_str(&operating_point_md(c.threshold, &c.knots));
    if c.threshold.is_none() {
        s.push_str("\nSet");
    }
    s.push_str(&format!(
        " on the first {:.0} % of each capture ({} rows).\n\n",
        c.share * 100.0,
        c.fit_rows
    ));
    s.push_str("| rows | n | F1 before | precision | recall | F1 after | precision | recall |\n");
    s.push_str("| --- | --- | --- | --- | --- | --- | --- | --- |\n");
    s.push_str(&format!(
        "| calibration (threshold chosen here) | {} | {} | {} |\n",
        c.fit_rows,
        pr(&c.fit_before),
        pr(&c.fit_after)
    ));
    if let (Some(b), Some(a)) = (&c.rest_before, &c.rest_after) {
        s.push_str(&format!(
            "| the rest (not seen) | {} | {} | {} |\n",
            c.rest_rows,
            pr(b),
            pr(a)
        ));
    }
    let seen = if c.rest_rows > 0 {
        "the rest"
    } else {
        "the calibration rows"
    };
    s.push_str(&format!(
        "\nPer send rate, on {seen}:\n\n| rate Mb/s | rows | F1 before | F1 after |\n| --- | --- | --- | --- |\n"
    ));
    for (b, a) in c.rates_before.iter().zip(&c.rates_after) {
        s.push_str(&format!(
            "| {} | {} | {:.4} | {:.4} |\n",
            rate_label(b.rate_mbps),
            b.rows,
            b.f1,
            a.f1
        ));
    }
    if let Some(k) = check {
        if let (Some(b), Some(a)) = (&k.rest_before, &k.rest_after) {
            s.push_str(&format!(
                "\nHalf-split check (the same calibration on the first half of each capture, scored on the second): F1 {:.4} → {:.4}.\n",
                b.f1(),
                a.f1()
            ));
        }
    }
    s
}

/// A calibrated operating point: "Decision threshold t (0 = as trained)" (no line end), or the
/// table of a per-load threshold (`[lmean, threshold]` knots) with its heading line.
fn operating_point_md(threshold: Option<f64>, knots: &[[f64; 2]]) -> String {
    if let Some(t) = threshold {
        return format!("Decision threshold {t:+.4} (0 = as trained)");
    }
    let mut s = String::from("Decision threshold by load (the receiver context's mean log-gap `lmean`; linear between, flat beyond):\n\n| lmean | ≈ mean gap µs | threshold |\n| --- | --- | --- |\n");
    for [x, t] in knots {
        s.push_str(&format!("| {x:.3} | {:.1} | {t:+.4} |\n", x.exp()));
    }
    s
}

/// The Markdown report of `aggrate calibrate --no-labels`: the threshold (by load), each
/// input's bank neighbours, and — where the inputs have labels, which the calibration did not
/// read — F1 / precision / recall per send rate before and after.
pub fn self_calibration_md(
    name: &str,
    c: &crate::train::bank::SelfCalibration,
    scored: Option<(&[crate::train::cv::RateReport], &[crate::train::cv::RateReport])>,
) -> String {
    let mut s = format!("# {name}, calibrated without labels\n\n");
    s.push_str(&operating_point_md(c.threshold, &c.knots));
    s.push_str(if c.threshold.is_some() { ".\n\n" } else { "\n" });
    s.push_str(&format!(
        "Each input's threshold is the best one on the labelled rows of the {} bank receivers (emulated, or measured with `--measured` or `--bank-dataset`) whose \
         packet timing — quantiles and autocorrelation of the log gap — is nearest the input's:\n\n\
         | input | rate Mb/s | bank rate | nearest bank receivers | distance | threshold |\n| --- | --- | --- | --- | --- | --- |\n",
        c.likeness.k
    ));
    for (i, r) in c.runs.iter().enumerate() {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {:.2} | {} |\n",
            i + 1,
            rate_label(r.rate_mbps),
            rate_label(r.bank_rate_mbps),
            if r.neighbours.len() > 5 {
                format!("{}, … ({} in all)", r.neighbours[..5].join(", "), r.neighbours.len())
            } else {
                r.neighbours.join(", ")
            },
            r.distance,
            if r.too_far {
                "the model's own (too far)".to_string()
            } else {
                format!("{:+.4}", r.threshold)
            }
        ));
    }
    if c.runs.iter().any(|r| r.too_far) {
        s.push_str(&format!(
            "\nAn input whose nearest bank receiver is more than {} away (each number in spreads over the bank) \
             keeps the model's own threshold: the bank has nothing like it (`--max-distance`).\n",
            c.likeness.max_distance
        ));
    }
    match scored {
        Some((before, after)) => {
            s.push_str(
                "\nScored with the inputs' labels (not used to calibrate):\n\n| rate Mb/s | rows | F1 before | precision | recall | F1 after | precision | recall |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n",
            );
            for (b, a) in before.iter().zip(after) {
                s.push_str(&format!(
                    "| {} | {} | {:.4} | {:.4} | {:.4} | {:.4} | {:.4} | {:.4} |\n",
                    rate_label(b.rate_mbps),
                    b.rows,
                    b.f1,
                    b.precision,
                    b.recall,
                    a.f1,
                    a.precision,
                    a.recall
                ));
            }
        }
        None => s.push_str("\nThe inputs have no A-MPDU ground truth: nothing to score the result on.\n"),
    }
    s
}

/// The Markdown report of a model's per-rate metrics (with the slot table for slot-SVR models).
pub fn rates_md(name: &str, headline: &str, rates: &[crate::train::cv::RateReport]) -> String {
    let mut s = format!("# {name}\n\n{headline}\n\n");
    s.push_str("| rate Mb/s | rows | F1 | precision | recall | accuracy | agg RMSE | agg exact | agg ±1 |\n");
    s.push_str("| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    for r in rates {
        s.push_str(&format!(
            "| {} | {} | {:.4} | {:.4} | {:.4} | {:.4} | {:.2} | {:.3} | {:.3} |\n",
            rate_label(r.rate_mbps),
            r.rows,
            r.f1,
            r.precision,
            r.recall,
            r.accuracy,
            r.agg_rmse,
            r.agg_acc,
            r.agg_acc_within1
        ));
    }
    if rates.iter().any(|r| r.slot.is_some()) {
        s.push_str("\nPer slot: true mean level vs the logistic model's mean predicted level and the SVR's.\n\n");
        s.push_str(
            "| rate Mb/s | slots | true level | logistic RMSE | SVR RMSE | RMSE ratio | logistic ±1 | SVR ±1 |\n",
        );
        s.push_str("| --- | --- | --- | --- | --- | --- | --- | --- |\n");
        for r in rates {
            if let Some(sl) = &r.slot {
                s.push_str(&format!(
                    "| {} | {} | {:.1} | {:.2} | {:.2} | {:.1}× | {:.3} | {:.3} |\n",
                    rate_label(r.rate_mbps),
                    sl.slots,
                    sl.true_mean_level,
                    sl.base_rmse,
                    sl.svr_rmse,
                    sl.base_rmse / sl.svr_rmse.max(1e-9),
                    sl.base_acc_within1,
                    sl.svr_acc_within1
                ));
            }
        }
    }
    s
}

fn rate_label(r: f64) -> String {
    if r.is_nan() {
        "?".into()
    } else {
        format!("{r}")
    }
}

/// Per-rate CSV (one line per send rate; slot columns empty for packet-only models).
pub fn rates_csv(rates: &[crate::train::cv::RateReport]) -> String {
    let mut s = String::from(
        "rate_mbps,rows,f1,precision,recall,accuracy,agg_rmse,agg_acc,agg_acc_within1,agg_mean_error,slots,slot_true_level,slot_base_rmse,slot_svr_rmse\n",
    );
    for r in rates {
        s.push_str(&format!(
            "{},{},{},{},{},{},{},{},{},{}",
            if r.rate_mbps.is_nan() {
                String::new()
            } else {
                r.rate_mbps.to_string()
            },
            r.rows,
            r.f1,
            r.precision,
            r.recall,
            r.accuracy,
            r.agg_rmse,
            r.agg_acc,
            r.agg_acc_within1,
            r.agg_mean_error
        ));
        match &r.slot {
            Some(sl) => s.push_str(&format!(
                ",{},{},{},{}\n",
                sl.slots, sl.true_mean_level, sl.base_rmse, sl.svr_rmse
            )),
            None => s.push_str(",,,,\n"),
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_rate_renderers() {
        let r = |rate_mbps: f64, f1: f64| crate::train::cv::RateReport {
            rate_mbps,
            rows: 7,
            f1,
            precision: 1.0,
            recall: 0.5,
            accuracy: 0.9,
            agg_rmse: 1.25,
            agg_acc: 0.5,
            agg_acc_within1: 0.75,
            agg_mean_error: -0.5,
            slot: None,
        };
        let rates = [r(300.0, 2.0 / 3.0), r(f64::NAN, 1.0)];
        let md = rates_md("m", "head", &rates);
        assert!(
            md.contains("| 300 | 7 | 0.6667 | 1.0000 | 0.5000 | 0.9000 | 1.25 | 0.500 | 0.750 |"),
            "{md}"
        );
        assert!(md.contains("| ? | 7 | 1.0000"), "an unknown rate is '?': {md}");
        assert!(!md.contains("Per slot"), "no slot table without slot rows");
        let csv = rates_csv(&rates);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[1], "300,7,0.6666666666666666,1,0.5,0.9,1.25,0.5,0.75,-0.5,,,,");
        assert!(lines[2].starts_with(",7,1,"), "an unknown rate is empty: {}", lines[2]);
    }
}

#[cfg(test)]
mod receiver_tests {
    use super::*;
    use crate::train::cv::{ReceiverRate, ReceiverReport, Score};

    fn rate(r: f64, held: f64, own: f64) -> ReceiverRate {
        let sc = |f1| Score { f1, ..Score::default() };
        ReceiverRate {
            rate_mbps: r,
            rows: 10,
            held_out: sc(held),
            own: sc(own),
            threshold_held_out: sc(0.5),
            threshold_own: sc(0.6),
            variants: Default::default(),
            self_calibration_distance: None,
            training_distance: None,
        }
    }

    #[test]
    fn verdicts_follow_the_criteria() {
        let reps = vec![
            ReceiverReport {
                test: false,
                bank_wlan: None,
                tailored_from: Vec::new(),
                receiver: "good".into(),
                per_rate: vec![rate(100.0, 0.995, 0.99), rate(600.0, 0.2, 0.9)],
            },
            ReceiverReport {
                test: false,
                bank_wlan: None,
                tailored_from: Vec::new(),
                receiver: "lossy".into(),
                per_rate: vec![rate(100.0, 0.95, 0.97)],
            },
            ReceiverReport {
                test: false,
                bank_wlan: None,
                tailored_from: Vec::new(),
                receiver: "low".into(),
                per_rate: vec![rate(400.0, 0.975, 0.99), rate(500.0, 0.96, 0.965)],
            },
        ];
        let v = receiver_verdicts(&reps, &ReceiverCriteria::default());
        assert!(v[0].pass, "600 Mb/s is past the judged rates");
        assert!(!v[1].pass && (v[1].worst_loss - 0.02).abs() < 1e-12);
        // 400: own 0.99 ≥ 0.98 and held 0.975 ≥ 0.97 but loss 0.015 > 0.01.
        assert!(!v[2].pass);
        let md = receivers_md("t", &reps, &ReceiverCriteria::default());
        assert!(md.contains("1 of 3 receivers pass"), "{md}");
        assert!(md.contains("| good | model | 0.995 / 0.990 |"), "{md}");
        assert_eq!(receivers_csv(&reps).lines().count(), 1 + 5);
        assert!(v.iter().all(|v| v.passes.is_empty()) && !md.contains("calibrated"));
        // Calibrated scores judged like held-out ones: "lossy" passes calibrated, "low" (one
        // judged rate without a calibrated score) has no calibrated verdict.
        let mut reps = reps;
        let sc = |f1| Score { f1, ..Score::default() };
        reps[0].per_rate[0].variants.insert(Variant::Calibrated, sc(0.97));
        reps[0].per_rate[1].variants.insert(Variant::Calibrated, sc(0.1));
        reps[1].per_rate[0].variants.insert(Variant::Calibrated, sc(0.975));
        reps[2].per_rate[0].variants.insert(Variant::Calibrated, sc(0.99));
        let v = receiver_verdicts(&reps, &ReceiverCriteria::default());
        assert_eq!(
            v[0].passes_with(Variant::Calibrated),
            Some(false),
            "0.97 < 0.98 with own 0.99: too far"
        );
        assert_eq!(v[1].passes_with(Variant::Calibrated), Some(true));
        assert_eq!(v[2].passes_with(Variant::Calibrated), None);
        assert!(!v[1].pass, "the held-out verdict is unchanged");
        let md = receivers_md("t", &reps, &ReceiverCriteria::default());
        assert!(md.contains("**1 of 3 pass**"), "{md}");
        assert!(md.contains("|  | calibrated | 0.975 / 0.970 |"), "{md}");
        assert!(
            receivers_csv(&reps).lines().nth(3).unwrap().ends_with(",0.975,,,,,,"),
            "calibrated, then four empty variants and no distances"
        );
        assert!(v.iter().all(|v| v.passes_with(Variant::SelfCalibrated).is_none()) && !md.contains("self-calibrated"));
        // Self-calibrated scores get their own verdict and lines, beside the calibrated ones.
        reps[1].per_rate[0].variants.insert(Variant::SelfCalibrated, sc(0.965));
        reps[2].per_rate[0].variants.insert(Variant::SelfCalibrated, sc(0.985));
        reps[2].per_rate[1].variants.insert(Variant::SelfCalibrated, sc(0.96));
        let v = receiver_verdicts(&reps, &ReceiverCriteria::default());
        assert_eq!(
            v[0].passes_with(Variant::SelfCalibrated),
            None,
            "no self-calibrated score at 100 Mb/s"
        );
        assert_eq!(
            v[1].passes_with(Variant::SelfCalibrated),
            Some(true),
            "0.965 is within 0.01 of 0.97"
        );
        assert_eq!(v[2].passes_with(Variant::SelfCalibrated), Some(true));
        assert_eq!(
            v[1].passes_with(Variant::Calibrated),
            Some(true),
            "the labelled verdict is unchanged"
        );
        let md = receivers_md("t", &reps, &ReceiverCriteria::default());
        assert!(md.contains("the `self-calibrated` lines — **2 of 3 pass**"), "{md}");
        assert!(
            md.contains("|  | self-calibrated | – | 0.985 / 0.990 | 0.960 / 0.965 | – |"),
            "{md}"
        );
        assert!(receivers_csv(&reps)
            .lines()
            .nth(4)
            .unwrap()
            .ends_with(",0.99,0.985,,,,,"));
        reps[2].per_rate[0].self_calibration_distance = Some(2.5);
        assert!(receivers_csv(&reps)
            .lines()
            .nth(4)
            .unwrap()
            .ends_with(",0.99,0.985,,,,2.5,"));
        // The bank's WLAN: in the paragraph when one for the table, on each line when several.
        for r in &mut reps {
            r.bank_wlan = Some("MCS 9".into());
        }
        let md = receivers_md("t", &reps, &ReceiverCriteria::default());
        assert!(md.contains("captures (the bank emulated at MCS 9) (`aggrate"), "{md}");
        assert!(md.contains("|  | self-calibrated | – |"), "{md}");
        reps[2].bank_wlan = Some("MCS 7".into());
        let md = receivers_md("t", &reps, &ReceiverCriteria::default());
        assert!(!md.contains("the bank emulated at"), "{md}");
        assert!(
            md.contains("|  | self-calibrated (MCS 7) | – | 0.985 / 0.990 |"),
            "{md}"
        );
        assert!(md.contains("|  | self-calibrated (MCS 9) | – |"), "{md}");
        // Tailored scores: their own verdict, line and column.
        assert!(receiver_verdicts(&reps, &ReceiverCriteria::default())
            .iter()
            .all(|v| v.passes_with(Variant::Tailored).is_none()));
        reps[1].per_rate[0].variants.insert(Variant::Tailored, sc(0.955));
        let v = receiver_verdicts(&reps, &ReceiverCriteria::default());
        assert_eq!(v[1].passes_with(Variant::Tailored), Some(false), "0.955 < 0.97 − 0.01");
        assert_eq!(v[0].passes_with(Variant::Tailored), None);
        let md = receivers_md("t", &reps, &ReceiverCriteria::default());
        assert!(md.contains("the `tailored` lines — **0 of 3 pass**"), "{md}");
        assert!(md.contains("|  | tailored | 0.955 / 0.970 |"), "{md}");
        assert!(receivers_csv(&reps)
            .lines()
            .nth(3)
            .unwrap()
            .ends_with(",0.975,0.965,0.955,,,,"));
        // Both label-free steps: a line after the tailored one, named with its bank's WLAN when
        // the table mixes WLANs, and the next column.
        reps[1].per_rate[0]
            .variants
            .insert(Variant::TailoredSelfCalibrated, sc(0.972));
        let v = receiver_verdicts(&reps, &ReceiverCriteria::default());
        assert_eq!(v[1].passes_with(Variant::TailoredSelfCalibrated), Some(true));
        let md = receivers_md("t", &reps, &ReceiverCriteria::default());
        assert!(
            md.contains("the `tailored, self-calibrated` lines — **1 of 3 pass**"),
            "{md}"
        );
        let tailored_at = md.find("|  | tailored | 0.955").unwrap();
        let stacked_at = md
            .find("|  | tailored, self-calibrated (MCS 9) | 0.972 / 0.970 | – |")
            .unwrap();
        assert!(stacked_at > tailored_at, "{md}");
        assert!(receivers_csv(&reps)
            .lines()
            .nth(3)
            .unwrap()
            .ends_with(",0.975,0.965,0.955,0.972,,,"));
        let header = receivers_csv(&reps).lines().next().unwrap().to_string();
        assert!(header.ends_with(
            ",loss,calibrated_f1,self_calibrated_f1,tailored_f1,tailored_self_calibrated_f1,self_calibrated_on_training_f1,self_calibration_distance,training_distance"
        ));
        // JSON: a field per variant, in the rate and in the verdict.
        let rate = serde_json::to_value(&reps[1].per_rate[0]).unwrap();
        assert_eq!(rate["tailored_self_calibrated"]["f1"], 0.972);
        assert_eq!(rate["self_calibrated"]["f1"], 0.965);
        assert!(rate.get("variants").is_none(), "{rate}");
        let verdict = serde_json::to_value(&v[1]).unwrap();
        assert_eq!(verdict["calibrated_pass"], true);
        assert_eq!(verdict["tailored_pass"], false);
        assert_eq!(verdict["tailored_self_calibrated_pass"], true);
        assert!(serde_json::to_value(&v[0]).unwrap().get("tailored_pass").is_none());
    }

    /// Points by distance to the training receivers: counted, failing and mean F1 per bucket, in
    /// the Markdown and a PNG; nothing without distances.
    #[test]
    fn points_by_distance_to_the_training_receivers() {
        let at = |r, held, own, d| ReceiverRate {
            training_distance: d,
            ..rate(r, held, own)
        };
        let reps = vec![ReceiverReport {
            test: false,
            bank_wlan: None,
            tailored_from: Vec::new(),
            receiver: "x".into(),
            per_rate: vec![
                at(100.0, 0.99, 0.99, Some(0.4)),
                at(200.0, 0.95, 0.99, Some(0.8)),
                at(300.0, 0.90, 0.95, Some(1.5)),
                at(400.0, 0.80, 0.80, Some(4.0)),
                // Above the judged rates, and without a distance: not counted.
                at(600.0, 0.10, 0.90, Some(0.1)),
                at(500.0, 0.10, 0.90, None),
            ],
        }];
        let md = receivers_md("t", &reps, &ReceiverCriteria::default());
        assert!(md.contains("| 0 – 1 | 2 | 1 | 0.970 | 0.990 |"), "{md}");
        assert!(md.contains("| 1 – 2 | 1 | 1 | 0.900 | 0.950 |"), "{md}");
        assert!(md.contains("| ≥ 3 | 1 | 0 | 0.800 | 0.800 |"), "{md}");
        assert!(!md.contains("| 2 – 3 |"), "an empty bucket is left out: {md}");
        assert!(receivers_csv(&reps).lines().nth(1).unwrap().ends_with(",0.4"));
        let dir = tempfile::tempdir().unwrap();
        let png = distance_png(dir.path(), "t", &reps, &ReceiverCriteria::default())
            .unwrap()
            .unwrap();
        assert!(std::fs::read(&png).unwrap().starts_with(b"\x89PNG"));
        let none: Vec<ReceiverReport> = vec![ReceiverReport {
            per_rate: vec![rate(100.0, 0.99, 0.99)],
            ..reps[0].clone()
        }];
        assert!(!receivers_md("t", &none, &ReceiverCriteria::default()).contains("By distance"));
        assert!(distance_png(dir.path(), "n", &none, &ReceiverCriteria::default())
            .unwrap()
            .is_none());
    }
}

/// Writing report files failed.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// A file could not be written.
    #[error("writing {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A chart could not be drawn.
    #[error(transparent)]
    Plot(#[from] plot::Error),
}

fn write_file(dir: &Path, file: &str, bytes: Vec<u8>) -> Result<PathBuf, WriteError> {
    let p = dir.join(file);
    if let Some(d) = p.parent() {
        std::fs::create_dir_all(d).map_err(|source| WriteError::Io {
            path: d.to_path_buf(),
            source,
        })?;
    }
    std::fs::write(&p, bytes).map_err(|source| WriteError::Io {
        path: p.clone(),
        source,
    })?;
    Ok(p)
}

use crate::train::cv::{RateReport, ReceiverReport, SlotRateReport, SvrStage, Variant};

/// `NAME.report.json`, `.report.md`, `.per_rate.csv`, the F1-per-rate PNG and, with the slot
/// SVR's stage, `.slots.csv` and its two PNGs, in `dir`; returns the paths.
pub fn write_model_reports(
    dir: &Path,
    name: &str,
    headline: &str,
    report: &serde_json::Value,
    rates: &[RateReport],
    slots: Option<&SvrStage>,
) -> Result<Vec<PathBuf>, WriteError> {
    use plot::Series;
    let mut out = Vec::new();
    let write = |out: &mut Vec<PathBuf>, file: String, bytes: Vec<u8>| -> Result<(), WriteError> {
        out.push(write_file(dir, &file, bytes)?);
        Ok(())
    };
    write(
        &mut out,
        format!("{name}.report.json"),
        serde_json::to_string_pretty(report).unwrap_or_default().into_bytes(),
    )?;
    write(
        &mut out,
        format!("{name}.report.md"),
        rates_md(name, headline, rates).into_bytes(),
    )?;
    write(&mut out, format!("{name}.per_rate.csv"), rates_csv(rates).into_bytes())?;
    let known: Vec<&RateReport> = rates.iter().filter(|r| !r.rate_mbps.is_nan()).collect();
    let png = dir.join(format!("{name}.f1_vs_rate.png"));
    plot::lines(
        &png,
        &format!("{name}: F1 per send rate"),
        "send rate (Mb/s)",
        "F1",
        &[Series::new("F1", known.iter().map(|r| (r.rate_mbps, r.f1)).collect())],
        Some((0.0, 1.0)),
    )?;
    out.push(png);
    if let Some(st) = slots {
        // The slot rows themselves too (most recent slot first), for peers and notebooks.
        let mut csv = String::from("group,rate_mbps,slot_start_ns,true_level,logistic_level,svr_level");
        for k in 1..=st.rows.d / 3 {
            csv.push_str(&format!(",mean_{k},var_{k},count_{k}"));
        }
        csv.push('\n');
        for i in 0..st.rows.len() {
            csv.push_str(&format!(
                "{},{},{},{},{},{}",
                st.rows.group[i],
                st.rows.rate_mbps[i],
                st.rows.slot_start[i].as_nanos(),
                st.rows.target[i],
                st.rows.base_level(i),
                st.pred[i]
            ));
            for v in st.rows.row(i) {
                csv.push_str(&format!(",{v}"));
            }
            csv.push('\n');
        }
        write(&mut out, format!("{name}.slots.csv"), csv.into_bytes())?;
        let pr: Vec<&SlotRateReport> = st.per_rate.iter().filter(|r| !r.rate_mbps.is_nan()).collect();
        let png = dir.join(format!("{name}.agg_vs_rate.png"));
        plot::lines(
            &png,
            "slot aggregation RMSE per send rate",
            "send rate (Mb/s)",
            "RMSE (MPDUs per A-MPDU)",
            &[
                Series::new("logistic", pr.iter().map(|r| (r.rate_mbps, r.base_rmse)).collect()),
                Series::new("logistic + SVR", pr.iter().map(|r| (r.rate_mbps, r.svr_rmse)).collect()),
            ],
            None,
        )?;
        out.push(png);
        let png = dir.join(format!("{name}.pred_vs_actual.png"));
        plot::scatter(
            &png,
            "predicted vs actual mean aggregation level per slot",
            "actual level",
            "predicted level",
            &[
                Series::new(
                    "logistic",
                    (0..st.rows.len())
                        .map(|i| (st.rows.target[i], st.rows.base_level(i)))
                        .collect(),
                ),
                Series::new(
                    "logistic + SVR",
                    (0..st.rows.len()).map(|i| (st.rows.target[i], st.pred[i])).collect(),
                ),
            ],
        )?;
        out.push(png);
    }
    Ok(out)
}

/// `NAME.receivers.json` (the `report`), `.receivers.md` (`md`, from [`receivers_md`]),
/// `.receivers.csv` and the held-out F1 PNG of a leave-one-receiver-out run, in `dir`.
pub fn write_receiver_reports(
    dir: &Path,
    name: &str,
    report: &serde_json::Value,
    md: &str,
    reports: &[ReceiverReport],
) -> Result<Vec<PathBuf>, WriteError> {
    Ok(vec![
        write_file(
            dir,
            &format!("{name}.receivers.json"),
            serde_json::to_string_pretty(report).unwrap_or_default().into_bytes(),
        )?,
        write_file(dir, &format!("{name}.receivers.md"), md.as_bytes().to_vec())?,
        write_file(
            dir,
            &format!("{name}.receivers.csv"),
            receivers_csv(reports).into_bytes(),
        )?,
        receivers_png(dir, name, reports)?,
    ]
    .into_iter()
    .chain(distance_png(dir, name, reports, &ReceiverCriteria::default())?)
    .collect())
}

/// Held-out minus own-CV F1 against the distance to the nearest training receiver, one point per
/// receiver and rate up to the criteria's rate, the points that fail the strict test apart:
/// `NAME.receivers.distance.png` (none without distances).
fn distance_png(
    dir: &Path,
    name: &str,
    reports: &[ReceiverReport],
    c: &ReceiverCriteria,
) -> Result<Option<PathBuf>, WriteError> {
    let pts = judged_with_distance(reports, c);
    if pts.is_empty() {
        return Ok(None);
    }
    let of = |fail: bool| -> Vec<(f64, f64)> {
        pts.iter()
            .filter(|p| point_fails(p, c) == fail)
            .filter_map(|p| Some((p.training_distance?, p.held_out.f1 - p.own.f1)))
            .collect()
    };
    let png = dir.join(format!("{name}.receivers.distance.png"));
    plot::points(
        &png,
        &format!("{name}: F1 loss by distance to the training receivers"),
        &format!(
            "distance to the nearest training receiver (spreads; eval warns beyond {})",
            crate::train::bank::FAMILIAR_DISTANCE
        ),
        "held-out F1 − own-CV F1",
        &[
            plot::Series::new("passes the strict test", of(false)),
            plot::Series::new("fails it", of(true)),
        ],
    )?;
    Ok(Some(png))
}

/// Held-out F1 per rate of the model and of the m = 1 threshold: the mean over receivers and the
/// worst receiver, in one figure, with the model's own-CV mean (the yardstick) and the mean of
/// each variant of the held-out model that was scored ([`Variant`]).
pub fn receivers_png(dir: &Path, name: &str, reports: &[ReceiverReport]) -> Result<PathBuf, WriteError> {
    use plot::Series;
    /// Rate, then over receivers the held-out F1 of the model and of the threshold, own-CV F1,
    /// and each variant's F1 (where scored).
    type AtRate = (f64, Vec<f64>, Vec<f64>, Vec<f64>, BTreeMap<Variant, Vec<f64>>);
    let mut by_rate: BTreeMap<i64, AtRate> = BTreeMap::new();
    for r in reports {
        for p in &r.per_rate {
            if !p.rate_mbps.is_finite() {
                continue;
            }
            let e = by_rate
                .entry((p.rate_mbps * 1000.0) as i64)
                .or_insert_with(|| (p.rate_mbps, Vec::new(), Vec::new(), Vec::new(), BTreeMap::new()));
            e.1.push(p.held_out.f1);
            e.2.push(p.threshold_held_out.f1);
            e.3.push(p.own.f1);
            for (v, sc) in &p.variants {
                e.4.entry(*v).or_default().push(sc.f1);
            }
        }
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let min = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    let series = |f: &dyn Fn(&AtRate) -> f64| by_rate.values().map(|e| (e.0, f(e))).collect::<Vec<_>>();
    let variants: Vec<Variant> = Variant::ALL
        .into_iter()
        .filter(|v| by_rate.values().any(|e| e.4.contains_key(v)))
        .collect();
    let png = dir.join(format!("{name}.receivers.png"));
    let (model, which) = match name.strip_suffix(".test") {
        Some(m) if reports.iter().all(|r| r.test) => (m, "receivers in no training set"),
        _ => (name, "held-out receivers"),
    };
    plot::lines(
        &png,
        &format!("{model} vs the m = 1 threshold on {which}"),
        "send rate (Mb/s)",
        "held-out F1",
        &[
            Series::new(format!("{model}, mean"), series(&|e| mean(&e.1))),
            Series::new("m = 1 threshold, mean", series(&|e| mean(&e.2))),
            Series::new(format!("{model}, worst receiver"), series(&|e| min(&e.1))),
            Series::new("m = 1 threshold, worst receiver", series(&|e| min(&e.2))),
        ]
        .into_iter()
        // The yardstick, and what the label-free (or labelled) steps make of the model.
        .chain(std::iter::once(Series::new(
            format!("{model}, own CV, mean"),
            series(&|e| mean(&e.3)),
        )))
        .chain(variants.into_iter().map(|v| {
            Series::new(
                format!("{model}, {}, mean", v.label()),
                series(&|e| e.4.get(&v).map_or(f64::NAN, |f| mean(f))),
            )
        }))
        .collect::<Vec<_>>(),
        Some((0.0, 1.0)),
    )?;
    Ok(png)
}

/// A closed-loop run's time series: `LABEL.series.csv` and one PNG per quantity (send rate, μ_N,
/// delay, AP queue) with a line per station, in `dir`.
pub fn write_sim_series(dir: &Path, label: &str, r: &crate::sim::SimResult) -> Result<Vec<PathBuf>, WriteError> {
    use plot::Series;
    let mut csv = String::from(
        "t_s,station,rate_mbps,mean_agg,count_agg,airtime_agg,true_agg,true_ampdus,others_share,delay_ms,queue,lost\n",
    );
    for s in &r.series {
        csv.push_str(&format!(
            "{:.3},{},{:.3},{:.3},{:.3},{:.3},{:.3},{},{:.4},{:.3},{},{}\n",
            s.t,
            s.sta,
            s.rate_mbps,
            s.mean_agg,
            s.count_agg,
            s.airtime_agg,
            s.true_agg,
            s.true_ampdus,
            s.others_share,
            s.delay_ms,
            s.queue,
            s.lost
        ));
    }
    let mut written = vec![write_file(dir, &format!("{label}.series.csv"), csv.into_bytes())?];
    let n = r.stations.len();
    let per_sta = |f: &dyn Fn(&crate::sim::Sample) -> f64| -> Vec<Series> {
        (0..n)
            .map(|i| {
                Series::new(
                    format!("station {i} (MCS {})", r.stations[i].mcs),
                    r.series
                        .iter()
                        .filter(|s| s.sta as usize == i)
                        .map(|s| (s.t, f(s)))
                        .collect(),
                )
            })
            .collect()
    };
    for (what, unit, f) in [
        (
            "rate",
            "send rate (Mb/s)",
            &(|s: &crate::sim::Sample| s.rate_mbps) as &dyn Fn(&crate::sim::Sample) -> f64,
        ),
        ("agg", "μ_N the sender steered by (MPDUs per A-MPDU)", &|s| s.mean_agg),
        ("true_agg", "true μ_N at the AP (MPDUs per A-MPDU)", &|s| s.true_agg),
        ("delay", "one-way delay (ms)", &|s| s.delay_ms),
        ("queue", "AP queue (packets)", &|s| s.queue as f64),
    ] {
        let png = dir.join(format!("{label}.{what}.png"));
        plot::lines(&png, &format!("{label}: {unit}"), "time (s)", unit, &per_sta(f), None)?;
        written.push(png);
    }
    Ok(written)
}

/// One report interval of the live loop (the demo's `ap` + `recv` + `send` on loopback): send rate, estimated level,
/// receive rate, one-way delay, losses.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct LiveRow {
    /// Seconds since the start.
    pub t_s: f64,
    /// The sender's rate then (Mb/s).
    pub rate_mbps: f64,
    /// μ_N the sender steered by.
    pub mean_agg: f64,
    /// The receiver's frame count (packets ÷ predicted starts).
    pub count_agg: f64,
    /// True μ_N: MPDUs ÷ A-MPDUs the AP sent in the interval (NaN when unknown).
    pub true_agg: f64,
    /// Receive rate (Mb/s).
    pub rx_mbps: f64,
    /// Mean one-way delay (ms; NaN without send times).
    pub owd_ms: f64,
    /// Packets lost in the interval.
    pub lost: u64,
}

/// `live.csv`, `live_rate.png` (send and receive rate; `send` is the sender's rate over time)
/// and `live_agg.png` (μ_N) in `dir`.
pub fn write_live(dir: &Path, rows: &[LiveRow], send: &[(f64, f64)]) -> Result<Vec<PathBuf>, WriteError> {
    use plot::Series;
    let mut csv = String::from("t_s,send_mbps,mean_agg,frame_count,true_agg,rx_mbps,owd_ms,lost\n");
    for r in rows {
        csv.push_str(&format!(
            "{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.4},{}\n",
            r.t_s, r.rate_mbps, r.mean_agg, r.count_agg, r.true_agg, r.rx_mbps, r.owd_ms, r.lost
        ));
    }
    let mut written = vec![write_file(dir, "live.csv", csv.into_bytes())?];
    let png = dir.join("live_rate.png");
    plot::lines(
        &png,
        "live loop: send and receive rate",
        "time (s)",
        "Mb/s",
        &[
            Series::new("send rate", send.to_vec()),
            Series::new("receive rate", rows.iter().map(|r| (r.t_s, r.rx_mbps)).collect()),
        ],
        None,
    )?;
    written.push(png);
    let png = dir.join("live_agg.png");
    plot::lines(
        &png,
        "live loop: aggregation level μ_N",
        "time (s)",
        "MPDUs per A-MPDU",
        &[
            Series::new("steered by", rows.iter().map(|r| (r.t_s, r.mean_agg)).collect()),
            Series::new("frame count", rows.iter().map(|r| (r.t_s, r.count_agg)).collect()),
            Series::new(
                "true (AP)",
                rows.iter()
                    .filter(|r| r.true_agg.is_finite())
                    .map(|r| (r.t_s, r.true_agg))
                    .collect(),
            ),
        ],
        None,
    )?;
    written.push(png);
    Ok(written)
}

/// μ_N per report interval against the truth (`aggrate eval`): a Markdown section with the
/// pooled scores of the steered level and of the frame count, then one row per capture.
pub fn levels_md(interval_ms: u64, caps: &[crate::train::levels::CaptureLevels]) -> String {
    use crate::metrics::LevelError;
    let cell = |e: &Option<LevelError>| match e {
        Some(e) => format!(
            "{:+.1} % | {:.1} % | {:.1} %",
            e.bias * 100.0,
            e.mae_rel_median * 100.0,
            e.err_rel_p95 * 100.0
        ),
        None => "– | – | –".to_string(),
    };
    let (level, count) = crate::train::levels::pooled(caps);
    let mut md = format!(
        "\n## μ_N per report interval ({interval_ms} ms)\n\nThe level a controller steers by (from airtime \
         when the PHY rate is known) and the frame count (packets ÷ predicted starts), each against \
         the true MPDUs ÷ A-MPDUs of the same interval; bias is the mean relative error, then the \
         median and 95th percentile of its absolute value. Intervals with fewer than {} true \
         A-MPDUs are not scored.\n\n| | intervals | true μ_N | steered: bias | median | p95 | frame count: bias | median | p95 |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
        crate::metrics::MIN_AMPDUS
    );
    let row = |md: &mut String, name: &str, l: &Option<LevelError>, c: &Option<LevelError>| {
        let n = l.or(*c).map_or(0, |e| e.intervals);
        let t = l.or(*c).map_or(f64::NAN, |e| e.truth_mean);
        md.push_str(&format!("| {name} | {n} | {t:.1} | {} | {} |\n", cell(l), cell(c)));
    };
    row(&mut md, "**all**", &level, &count);
    for c in caps {
        let name = match (&c.receiver, c.rate_mbps) {
            (Some(r), Some(m)) => format!("{r} @ {m:.0} Mb/s"),
            _ => crate::train::levels::short_name(&c.path),
        };
        row(&mut md, &name, &c.level, &c.count);
    }
    md.push_str(&contention_md(&crate::train::levels::by_contention(caps)));
    md
}

/// μ_N's error by the share of the air others took (as the captures' frames of others show it):
/// the steered level without and with that share as a survey, the airtime level without and with
/// it, and the frame count. Empty without rows.
pub fn contention_md(rows: &[crate::train::levels::ContentionRow]) -> String {
    use crate::metrics::LevelError;
    if rows.is_empty() {
        return String::new();
    }
    let cell = |e: &Option<LevelError>| match e {
        Some(e) => format!("{:+.1} % / {:.1} %", e.bias * 100.0, e.mae_rel_median * 100.0),
        None => "–".to_string(),
    };
    let mut md = String::from(
        "\n## μ_N by the share of the air others took\n\nEach interval's share of others from the other \
         networks' frames in its capture (a sniffer's capture holds them; a station's own holds none: \
         0), by their rate and length; given to the estimator as a survey in a second replay. Bias / \
         median |relative error| per bin.\n\n| others' share | intervals | mean share | true μ_N | steered, no survey | \
         steered, sniffed survey | airtime alone | airtime, sniffed survey | frame count |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for r in rows {
        let (n, t) = r.level.map_or((0, f64::NAN), |e| (e.intervals, e.truth_mean));
        md.push_str(&format!(
            "| {} | {n} | {:.1} % | {t:.1} | {} | {} | {} | {} | {} |\n",
            r.others,
            r.share_mean * 100.0,
            cell(&r.level),
            cell(&r.level_surveyed),
            cell(&r.airtime),
            cell(&r.airtime_surveyed),
            cell(&r.count),
        ));
    }
    md
}

/// Every scored interval of `caps` as CSV: the truth, the steered level, the frame count, the
/// airtime level and the learned level's trees alone (what [`crate::level::combine`] makes the
/// steered level of), and the learned level's features (empty without a PHY rate).
pub fn levels_csv(caps: &[crate::train::levels::CaptureLevels]) -> String {
    use std::fmt::Write as _;
    let mut s = String::from(
        "capture,receiver,rate_mbps,start_ns,packets,true_ampdus,true_level,level,frame_count,airtime,trees,\
         others_share_sniffed,level_surveyed,airtime_surveyed",
    );
    for f in crate::level::feature_names() {
        s.push(',');
        s.push_str(&f);
    }
    s.push('\n');
    let num = |v: f64| {
        if v.is_finite() {
            format!("{v:.4}")
        } else {
            String::new()
        }
    };
    for c in caps {
        for i in &c.intervals {
            let _ = write!(
                s,
                "{},{},{},{},{},{},{:.4},{:.4},{:.4},{},{},{},{},{}",
                crate::train::levels::short_name(&c.path),
                c.receiver.as_deref().unwrap_or(""),
                c.rate_mbps.map_or(String::new(), |r| r.to_string()),
                i.start_ns,
                i.packets,
                i.ampdus,
                i.truth,
                i.level,
                i.count,
                num(i.airtime),
                num(i.trees),
                num(i.others_share),
                num(i.level_surveyed),
                num(i.airtime_surveyed),
            );
            for k in 0..crate::level::LEVEL_FEATURES {
                s.push(',');
                if let Some(x) = &i.features {
                    let _ = write!(s, "{}", x.0[k]);
                }
            }
            s.push('\n');
        }
    }
    s
}

/// Estimated against true μ_N per interval (steered level and frame count), with the diagonal.
pub fn levels_png(path: &Path, caps: &[crate::train::levels::CaptureLevels]) -> Result<(), WriteError> {
    use plot::Series;
    let pts = |pick: fn(&crate::train::levels::IntervalRow) -> f64| -> Vec<(f64, f64)> {
        caps.iter()
            .flat_map(|c| c.intervals.iter())
            .filter(|i| i.ampdus >= crate::metrics::MIN_AMPDUS)
            .map(|i| (i.truth, pick(i)))
            .collect()
    };
    plot::scatter(
        path,
        "μ_N per report interval: estimated against true",
        "true μ_N (MPDUs per A-MPDU)",
        "estimated μ_N",
        &[
            Series::new("steered level", pts(|i| i.level)),
            Series::new("frame count", pts(|i| i.count)),
        ],
    )?;
    Ok(())
}

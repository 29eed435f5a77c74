//! Pass or fail of leave-one-receiver-out cross-validation: the criteria a model trained
//! without a receiver must meet on it, and the verdict per receiver (per variant of the
//! held-out model too). Decisions, not rendering: `report` prints them, the CLI writes them.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::dataset::{Dataset, RowSet};
use crate::features::FeatureSpec;
use crate::model::{ModelFile, TrainingSummary};
use crate::train::bank_source::distinct_rates;
use crate::train::cv::{CvError, Fitter, ReceiverRate, ReceiverReport, Variant};

/// The leave-one-receiver-out criteria, per receiver: at every rate up to `max_rate` the model
/// trained without the receiver is within `tol` F1 of the one trained on it (its own CV), and at
/// least `floor` wherever that own-CV figure is at least `floor_if`.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct ReceiverCriteria {
    /// Highest send rate judged (Mb/s).
    pub max_rate: f64,
    /// Allowed F1 loss against own CV.
    pub tol: f64,
    /// Required held-out F1 …
    pub floor: f64,
    /// … where own CV reaches this.
    pub floor_if: f64,
}

impl ReceiverCriteria {
    /// Whether a held-out F1 of `held` holds against an own-CV F1 of `own` at one judged rate.
    pub fn holds(&self, held: f64, own: f64) -> bool {
        own - held <= self.tol + 1e-12 && (own < self.floor_if || held >= self.floor)
    }
}

impl Default for ReceiverCriteria {
    fn default() -> Self {
        ReceiverCriteria {
            max_rate: 500.0,
            tol: 0.01,
            floor: 0.97,
            floor_if: 0.98,
        }
    }
}

/// How one receiver fared against the criteria.
#[derive(Clone, Debug, Serialize)]
pub struct ReceiverVerdict {
    /// Receiver.
    pub receiver: String,
    /// Largest own − held-out F1 over the judged rates.
    pub worst_loss: f64,
    /// Lowest held-out F1 among rates whose own CV reached `floor_if`.
    pub worst_floor: Option<f64>,
    /// Both criteria hold.
    pub pass: bool,
    /// Per variant of the held-out model ([`Variant`]): whether both hold with its score in the
    /// held-out one's place — for the variants scored at every judged rate. In JSON a field
    /// each, `<variant>_pass` (`calibrated_pass`, `tailored_pass`, …).
    #[serde(flatten, serialize_with = "passes_as_fields")]
    pub passes: BTreeMap<Variant, bool>,
}

impl ReceiverVerdict {
    /// Whether the receiver passes with variant `v` in the held-out model's place (None: `v` was
    /// not scored at every judged rate).
    pub fn passes_with(&self, v: Variant) -> Option<bool> {
        self.passes.get(&v).copied()
    }
}

/// [`ReceiverVerdict::passes`] as `<variant>_pass` fields.
fn passes_as_fields<S: serde::Serializer>(passes: &BTreeMap<Variant, bool>, s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut m = s.serialize_map(Some(passes.len()))?;
    for (v, pass) in passes {
        m.serialize_entry(&format!("{}_pass", v.key()), pass)?;
    }
    m.end()
}

/// Verdicts per receiver.
pub fn receiver_verdicts(reports: &[ReceiverReport], c: &ReceiverCriteria) -> Vec<ReceiverVerdict> {
    reports
        .iter()
        .map(|r| {
            let judged: Vec<_> = r.per_rate.iter().filter(|p| p.rate_mbps <= c.max_rate).collect();
            let worst_loss = judged.iter().map(|p| p.loss()).fold(f64::NEG_INFINITY, f64::max);
            let worst_floor = judged
                .iter()
                .filter(|p| p.own.f1 >= c.floor_if)
                .map(|p| p.held_out.f1)
                .fold(None, |a: Option<f64>, v| Some(a.map_or(v, |a| a.min(v))));
            let pass = judged.iter().all(|p| c.holds(p.held_out.f1, p.own.f1));
            // Whether the criteria hold with a variant's score in the held-out one's place.
            let passes = Variant::ALL
                .into_iter()
                .filter(|&v| !judged.is_empty() && judged.iter().all(|p| p.variant(v).is_some()))
                .map(|v| {
                    let holds = judged
                        .iter()
                        .all(|p| c.holds(p.variant(v).map_or(0.0, |s| s.f1), p.own.f1));
                    (v, holds)
                })
                .collect();
            ReceiverVerdict {
                receiver: r.receiver.clone(),
                worst_loss: if worst_loss.is_finite() { worst_loss } else { 0.0 },
                worst_floor,
                pass,
                passes,
            }
        })
        .collect()
}

/// Whether point `p` (one receiver at one rate) fails the strict test of `c` (rates above
/// `c.max_rate` never do).
pub fn point_fails(p: &ReceiverRate, c: &ReceiverCriteria) -> bool {
    p.rate_mbps <= c.max_rate && !c.holds(p.held_out.f1, p.own.f1)
}
/// A leave-one-receiver-out run, finished: the model fitted on every training receiver's rows
/// (groups below `trained_on`; those from it on are `--test` receivers'), the reports split into
/// training and test receivers, and the verdicts of each.
#[derive(Debug)]
pub struct ReceiverRun {
    /// The final model, with what it was trained on and its verdicts in `metrics`.
    pub file: ModelFile,
    /// Reports of the receivers the model trained on.
    pub reports: Vec<ReceiverReport>,
    /// Their verdicts.
    pub verdicts: Vec<ReceiverVerdict>,
    /// Reports of the test receivers (in no training set).
    pub tests: Vec<ReceiverReport>,
    /// Their verdicts.
    pub test_verdicts: Vec<ReceiverVerdict>,
    /// The criteria applied.
    pub criteria: ReceiverCriteria,
}

impl ReceiverRun {
    /// Fit the final model with `fit` on the rows of groups below `trained_on` (the captures
    /// `captures` name) and judge `reports` by the default criteria.
    pub fn finish(
        reports: Vec<ReceiverReport>,
        data: &Dataset,
        trained_on: usize,
        captures: Vec<String>,
        spec: FeatureSpec,
        fit: Fitter,
    ) -> Result<ReceiverRun, CvError> {
        let trained_rows: Vec<usize> = (0..data.len())
            .filter(|&i| (data.group[i] as usize) < trained_on)
            .collect();
        let model = fit.fit(data, &RowSet::from_indices(&trained_rows))?;
        let criteria = ReceiverCriteria::default();
        let (tests, reports): (Vec<_>, Vec<_>) = reports.into_iter().partition(|r| r.test);
        let verdicts = receiver_verdicts(&reports, &criteria);
        let test_verdicts = receiver_verdicts(&tests, &criteria);
        let mut file = ModelFile::new(
            spec,
            model,
            TrainingSummary {
                rows: trained_rows.len() as u64,
                positives: trained_rows.iter().filter(|&&i| data.y[i]).count() as u64,
                captures,
                rates_mbps: distinct_rates(trained_rows.iter().map(|&i| data.rate_mbps[i])),
            },
        );
        file.metrics = serde_json::json!({
            "group_by": "receiver",
            "receivers": reports.iter().map(|r| &r.receiver).collect::<Vec<_>>(),
            "receivers_passing": verdicts.iter().filter(|v| v.pass).count(),
            "criteria": criteria,
        });
        if !tests.is_empty() {
            file.metrics["test_receivers"] = tests.iter().map(|r| r.receiver.clone()).collect::<Vec<_>>().into();
            file.metrics["test_receivers_passing"] = test_verdicts.iter().filter(|v| v.pass).count().into();
        }
        Ok(ReceiverRun {
            file,
            reports,
            verdicts,
            tests,
            test_verdicts,
            criteria,
        })
    }

    /// Receivers the model trained on that pass, and test receivers that pass.
    pub fn passing(&self) -> (usize, usize) {
        let n = |v: &[ReceiverVerdict]| v.iter().filter(|v| v.pass).count();
        (n(&self.verdicts), n(&self.test_verdicts))
    }
}

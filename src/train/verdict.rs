//! Pass or fail of leave-one-receiver-out cross-validation: the criteria a model trained
//! without a receiver must meet on it, and the verdict per receiver (per variant of the
//! held-out model too). Decisions, not rendering: `report` prints them, the CLI writes them.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::train::cv::{ReceiverRate, ReceiverReport, Variant};

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

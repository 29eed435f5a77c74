//! The learned level: what an interval's receive timing says about the aggregation level beyond
//! the airtime relation.
//!
//! # Why
//!
//! The airtime relation ([`crate::airtime`]) gives the level an access point must aggregate to
//! deliver the interval's rate when nobody else uses the channel; other traffic lengthens every
//! cycle and the true level rises above it (a neighbour's 5 Mb/s doubled it in the emulator).
//! Without a channel survey the share others take is unknown to the relation — but not to the
//! receive timing: a contender's transmit opportunity leaves a gap of its own length between two
//! A-MPDUs, a saturated neighbour leaves many, and a receive path that hides starts or batches
//! A-MPDUs shapes the gaps in ways of its own. This module turns one report interval's
//! receive timing into a fixed feature vector ([`LevelFeatures`]) and a fitted regression
//! ([`LevelModel`], gradient-boosted trees) maps it to `ln(true level ÷ airtime level)`.
//!
//! # Features (per report interval)
//!
//! The airtime level `n₀` and the frame count (packets ÷ predicted starts) in logs, their ratio,
//! the data share of the air `λ·t_p`, the overhead share at one MPDU per exchange `λ·T_o`, the
//! survey's share of others (kept for the file format; the estimator passes 0, as in training:
//! a survey lifts the floor in [`combine`] instead), the loss rate, the coefficient of variation of the
//! gaps, and the distribution of the gaps between packets over [`GAP_BINS`] octave bins (from
//! below 16 µs to above 16 ms, pauses of [`crate::runtime::SILENCE`] excluded): the share of
//! receiving time spent in gaps of each bin, and the share of gaps; then the share of time in
//! gaps longer than the AP leaves between its own A-MPDUs ([`EXCESS`], less [`OWN_GAP_US`]) with
//! the airtime level that share of others would give, and the mean and spread of those long
//! gaps (a receive path's timer releases at one period, others' transmissions at many); last,
//! how far the frame count can be trusted: the share of packets the per-packet model decided
//! near its threshold, and the spread of the sizes of the frames it counted (a receive path that
//! shows the A-MPDUs gives confident starts and frames alike in size; one that batches or hides
//! them beside others' traffic does not).
//!
//! The estimator reports [`combine`] by the model file's [`LevelRule`]: the shipped model's trees'
//! level never below the airtime level.
//!
//! Per packet: one bin index from a leading-zero count and a few adds and compares
//! ([`GapHist::add`]); per interval: the vector and a walk down each tree. No allocation.

use serde::{Deserialize, Serialize};

/// Octave bins of the gap histogram: `< 16 µs`, `16–32`, …, `≥ 16,384 µs`.
pub const GAP_BINS: usize = 12;

/// Length of [`LevelFeatures`].
pub const LEVEL_FEATURES: usize = 8 + 2 * GAP_BINS + 2 * EXCESS.len() + 2 + 2;

/// Gaps longer than these (µs) are counted as time others may have taken: beyond the longest
/// gap an access point leaves between its own A-MPDUs (AIFS, the largest first backoff, the
/// preamble, SIFS and Block Ack: about 275 µs on 5 GHz best effort), with two margins.
pub const EXCESS: [u64; 2] = [300, 600];

/// What a gap between two of the AP's own A-MPDUs costs on average (µs): subtracted from a long
/// gap to leave the time others took.
pub const OWN_GAP_US: f64 = 200.0;

/// Names of the features, in order (reports and the model file).
pub fn feature_names() -> Vec<String> {
    let mut v: Vec<String> = [
        "ln_airtime",
        "ln_count",
        "ln_count_over_airtime",
        "data_share",
        "overhead_share",
        "survey_share",
        "loss_rate",
        "gap_cv",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let edge = |b: usize| if b == 0 { 0 } else { 16u64 << (b - 1) };
    for kind in ["time", "count"] {
        for b in 0..GAP_BINS {
            v.push(format!("gap_{kind}_{}us", edge(b)));
        }
    }
    for t in EXCESS {
        v.push(format!("others_share_over_{t}us"));
    }
    for t in EXCESS {
        v.push(format!("ln_airtime_with_others_over_{t}us"));
    }
    v.push(format!("ln_mean_gap_over_{}us", EXCESS[0]));
    v.push(format!("cv_gap_over_{}us", EXCESS[0]));
    v.push("ambiguous_share".into());
    v.push("frame_cv".into());
    v
}

/// One interval's features (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LevelFeatures(pub [f32; LEVEL_FEATURES]);

impl Default for LevelFeatures {
    fn default() -> Self {
        LevelFeatures([0.0; LEVEL_FEATURES])
    }
}

/// The gaps of one interval, binned by octave.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct GapHist {
    time_ns: [u64; GAP_BINS],
    count: [u32; GAP_BINS],
    sum_us: f64,
    sq_us: f64,
    /// Per [`EXCESS`] threshold: the sum over longer gaps of what they exceed [`OWN_GAP_US`] by.
    excess_us: [f64; EXCESS.len()],
    /// The gaps longer than the first threshold: how many, their sum and sum of squares (µs) —
    /// a receive path's timer releases them at one period (a small spread), others' transmit
    /// opportunities at many lengths.
    long: (u32, f64, f64),
}

impl GapHist {
    /// One gap (ns) shorter than the silence that ends receiving time.
    #[inline]
    pub(crate) fn add(&mut self, gap_ns: u64) {
        let us = gap_ns / 1000;
        let b = ((64 - (us >> 4).leading_zeros()) as usize).min(GAP_BINS - 1);
        self.time_ns[b] += gap_ns;
        self.count[b] = self.count[b].saturating_add(1);
        let g = gap_ns as f64 * 1e-3;
        self.sum_us += g;
        self.sq_us += g * g;
        for (e, &t) in self.excess_us.iter_mut().zip(&EXCESS) {
            if us > t {
                *e += g - OWN_GAP_US;
            }
        }
        if us > EXCESS[0] {
            self.long.0 = self.long.0.saturating_add(1);
            self.long.1 += g;
            self.long.2 += g * g;
        }
    }
}

/// What the estimator measured in an interval besides the gaps.
#[derive(Clone, Copy)]
pub(crate) struct IntervalInputs<'a> {
    /// The airtime level (MPDUs).
    pub(crate) airtime: f64,
    /// Packets ÷ predicted starts (0: no frame closed).
    pub(crate) count: f64,
    /// λ·t_p.
    pub(crate) data_share: f64,
    /// λ·T_o.
    pub(crate) overhead_share: f64,
    /// The survey's share of others.
    pub(crate) survey_share: f64,
    /// Loss rate.
    pub(crate) loss_rate: f64,
    /// Share of the packets the per-packet model decided within [`crate::runtime::AMBIGUOUS`]
    /// of its threshold.
    pub(crate) ambiguous_share: f64,
    /// Coefficient of variation of the sizes of the frames it counted.
    pub(crate) frame_cv: f64,
    /// The airtime level with others taking `share` of the channel (capped at the A-MPDU
    /// limits).
    pub(crate) airtime_with: &'a dyn Fn(f64) -> Option<f64>,
}

impl LevelFeatures {
    pub(crate) fn of(i: &IntervalInputs<'_>, h: &GapHist) -> LevelFeatures {
        let mut f = [0f32; LEVEL_FEATURES];
        let n0 = i.airtime.max(1.0);
        let count = if i.count > 0.0 { i.count } else { n0 };
        f[0] = n0.ln() as f32;
        f[1] = count.ln() as f32;
        f[2] = (count / n0).ln() as f32;
        f[3] = i.data_share as f32;
        f[4] = i.overhead_share as f32;
        f[5] = i.survey_share as f32;
        f[6] = i.loss_rate as f32;
        let n: u64 = h.count.iter().map(|&c| c as u64).sum();
        if n > 0 {
            let mean = h.sum_us / n as f64;
            let var = (h.sq_us / n as f64 - mean * mean).max(0.0);
            f[7] = if mean > 0.0 { (var.sqrt() / mean) as f32 } else { 0.0 };
            let total: u64 = h.time_ns.iter().sum();
            for b in 0..GAP_BINS {
                f[8 + b] = if total > 0 {
                    (h.time_ns[b] as f64 / total as f64) as f32
                } else {
                    0.0
                };
                f[8 + GAP_BINS + b] = (h.count[b] as f64 / n as f64) as f32;
            }
            // Others' share from the long gaps, at most what leaves the A-MPDU limits room.
            let active = h.sum_us.max(1.0);
            for (k, e) in h.excess_us.iter().enumerate() {
                let share = (e / active).clamp(0.0, 0.95);
                f[8 + 2 * GAP_BINS + k] = share as f32;
                let with = (i.airtime_with)(share).unwrap_or(n0).max(n0);
                f[8 + 2 * GAP_BINS + EXCESS.len() + k] = (with / n0).ln() as f32;
            }
            let (k, sum, sq) = h.long;
            if k > 0 {
                let mean = sum / k as f64;
                f[8 + 2 * GAP_BINS + 2 * EXCESS.len()] = mean.ln() as f32;
                f[8 + 2 * GAP_BINS + 2 * EXCESS.len() + 1] =
                    ((sq / k as f64 - mean * mean).max(0.0).sqrt() / mean) as f32;
            }
        }
        f[8 + 2 * GAP_BINS + 2 * EXCESS.len() + 2] = i.ambiguous_share as f32;
        f[8 + 2 * GAP_BINS + 2 * EXCESS.len() + 3] = i.frame_cv as f32;
        LevelFeatures(f)
    }
}

/// How the estimator turns the trees' prediction into the level it reports ([`combine`]); a
/// setting of the model file (`level.rule`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LevelRule {
    /// The trees' level, never below the airtime level (the shipped model's rule).
    ///
    /// The airtime relation is a floor by physics: others' air, retransmissions and an idle AP
    /// only lengthen the cycle, so the true level is never below it. The frame count does not
    /// vote: under others' traffic at low load the per-packet model invents starts (beside two
    /// saturated neighbours at 85 Mb/s it read 1.2 where the AP sent 10.6 per A-MPDU), and a
    /// voting count held the level at the floor there (−30 % and worse, which the loop pays in
    /// delay). Where the trees are wrong without the count — timer-driven receive paths at low
    /// load, whose batches look like others' air — they read high, and a loop that reads high
    /// gives up rate, not delay (docs/levels.md has both sides measured).
    Floor,
    /// The median of the trees' level, the airtime level and the frame count: the trees move off
    /// the floor only as far as the count goes the same way. Model files without a `rule` were
    /// trained and reported with it; `aggrate train-level` steers its second round by it (loops
    /// that under-read others' air: the rows the trees must correct).
    #[default]
    MedianWithCount,
}

/// The level the estimator reports from the trees' level `trees` ([`LevelModel::level`]), the
/// airtime `floor` (the airtime level with nobody else on the channel, or higher when a channel
/// survey says others took part of the air) and the frame count (packets ÷ predicted starts,
/// when any frame closed) by `rule`, at least 1 and at most `cap`. A trees' level that is not a
/// number gives the floor.
///
/// A survey lifts the floor and nothing else: the trees read others' air from the gaps, the
/// survey from the driver, and the level is the larger of the two — the trees' ratio on a floor
/// that already holds the survey's air would count it twice (+9 % to +38 % on the kernel testbed
/// beside others, where the receivers read the AP's survey, before this was so).
pub fn combine(trees: f64, floor: f64, count: Option<f64>, cap: f64, rule: LevelRule) -> f64 {
    let learned = if trees.is_finite() { trees } else { floor };
    let v = match rule {
        LevelRule::Floor => learned.max(floor),
        LevelRule::MedianWithCount => {
            let mut v = [
                learned,
                floor,
                count.filter(|c| c.is_finite() && *c > 0.0).unwrap_or(floor),
            ];
            v.sort_by(f64::total_cmp);
            v[1]
        }
    };
    v.clamp(1.0, cap.max(1.0))
}

/// One regression tree, complete to its depth: internal node `k` (heap order, root 0, children
/// `2k+1`, `2k+2`) sends a row left when `row[feature[k]] <= threshold[k]`; leaf `j` (left to
/// right) holds `leaf[j]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tree {
    /// Feature of each internal node.
    pub feature: Vec<u16>,
    /// Threshold of each internal node.
    pub threshold: Vec<f32>,
    /// Leaf values (already scaled by the learning rate).
    pub leaf: Vec<f32>,
}

/// Gradient-boosted regression trees from [`LevelFeatures`] to `ln(true ÷ airtime level)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LevelModel {
    /// Feature names the model was fitted on (must equal [`feature_names`]).
    pub features: Vec<String>,
    /// Depth of every tree.
    pub depth: u8,
    /// The starting prediction.
    pub base: f32,
    /// The trees, summed.
    pub trees: Vec<Tree>,
    /// The prediction is clamped to this range of `ln(level ÷ airtime level)`.
    pub clamp: [f32; 2],
    /// How the reported level is made from the trees' ([`combine`]; absent: the median rule,
    /// which every file written before the rule was a setting was trained and scored with).
    #[serde(default)]
    pub rule: LevelRule,
    /// How it was trained and how it scored (free-form).
    #[serde(default)]
    pub training: serde_json::Value,
}

/// Why a level model cannot be used.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum LevelModelError {
    /// Fitted on other features.
    #[error("level model: fitted on features {found:?}, this build computes {expected:?}")]
    Features {
        /// In the file.
        found: Vec<String>,
        /// This build's.
        expected: Vec<String>,
    },
    /// A tree of the wrong shape or with values out of range.
    #[error("level model: tree {tree}: {what}")]
    Tree {
        /// Index.
        tree: usize,
        /// What is wrong.
        what: String,
    },
    /// Depth, base or clamp out of range.
    #[error("level model: {field} = {value}: {allowed}")]
    Field {
        /// Field.
        field: &'static str,
        /// Value.
        value: String,
        /// Allowed.
        allowed: &'static str,
    },
}

impl LevelModel {
    /// Check shape and values once, at load.
    pub fn check(&self) -> Result<(), LevelModelError> {
        // A file fitted before features were appended reads the ones it knows (its trees never
        // look past them).
        let names = feature_names();
        if self.features.is_empty() || !names.starts_with(&self.features) {
            return Err(LevelModelError::Features {
                found: self.features.clone(),
                expected: feature_names(),
            });
        }
        if !(1..=8).contains(&self.depth) {
            return Err(LevelModelError::Field {
                field: "depth",
                value: self.depth.to_string(),
                allowed: "1..=8",
            });
        }
        if self.trees.len() > 10_000 {
            return Err(LevelModelError::Field {
                field: "trees",
                value: self.trees.len().to_string(),
                allowed: "at most 10000",
            });
        }
        let [lo, hi] = self.clamp;
        if !(lo.is_finite() && hi.is_finite() && lo <= hi && hi - lo <= 10.0 && self.base.is_finite()) {
            return Err(LevelModelError::Field {
                field: "clamp/base",
                value: format!("{:?}/{}", self.clamp, self.base),
                allowed: "finite, lo <= hi, hi - lo <= 10",
            });
        }
        let internal = (1usize << self.depth) - 1;
        for (k, t) in self.trees.iter().enumerate() {
            let bad = |what: String| LevelModelError::Tree { tree: k, what };
            if t.feature.len() != internal || t.threshold.len() != internal || t.leaf.len() != internal + 1 {
                return Err(bad(format!(
                    "{} / {} / {} nodes, depth {} needs {internal} / {internal} / {}",
                    t.feature.len(),
                    t.threshold.len(),
                    t.leaf.len(),
                    self.depth,
                    internal + 1
                )));
            }
            if let Some(f) = t.feature.iter().find(|&&f| f as usize >= self.features.len()) {
                return Err(bad(format!("feature {f} beyond the file's {}", self.features.len())));
            }
            // A node that did not split has the largest finite threshold.
            if t.threshold.iter().chain(&t.leaf).any(|v| !v.is_finite()) {
                return Err(bad("a threshold or leaf that is not finite".into()));
            }
        }
        Ok(())
    }

    /// `ln(level ÷ airtime level)` for one interval, clamped.
    pub fn predict(&self, x: &LevelFeatures) -> f32 {
        let internal = (1usize << self.depth) - 1;
        let mut s = self.base;
        for t in &self.trees {
            let mut k = 0usize;
            while k < internal {
                k = if x.0[t.feature[k] as usize] <= t.threshold[k] {
                    2 * k + 1
                } else {
                    2 * k + 2
                };
            }
            s += t.leaf[k - internal];
        }
        s.clamp(self.clamp[0], self.clamp[1])
    }

    /// The trees' level for one interval: `n0` (the airtime level with nobody else on the
    /// channel, which the trees were fitted against) times `exp(`[`Self::predict`]`)`.
    pub fn level(&self, n0: f64, x: &LevelFeatures) -> f64 {
        n0 * (self.predict(x) as f64).exp()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The trees' level from an airtime level and their ln ratio, as [`LevelModel::level`].
    fn t(n0: f64, ln_ratio: f32) -> f64 {
        n0 * (ln_ratio as f64).exp()
    }

    #[test]
    fn gaps_fall_in_their_octaves() {
        let mut h = GapHist::default();
        for (gap_us, bin) in [
            (0u64, 0usize),
            (15, 0),
            (16, 1),
            (31, 1),
            (32, 2),
            (200, 4),
            (16_384, 11),
            (19_000, 11),
        ] {
            let before = h.count[bin];
            h.add(gap_us * 1000);
            assert_eq!(h.count[bin], before + 1, "{gap_us} µs in bin {bin}");
        }
        let f = LevelFeatures::of(
            &IntervalInputs {
                airtime: 10.0,
                count: 20.0,
                data_share: 0.5,
                overhead_share: 0.1,
                survey_share: 0.0,
                loss_rate: 0.0,
                ambiguous_share: 0.25,
                frame_cv: 0.5,
                airtime_with: &|x| Some(10.0 / (1.0 - x)),
            },
            &h,
        );
        assert_eq!((f.0[LEVEL_FEATURES - 2], f.0[LEVEL_FEATURES - 1]), (0.25, 0.5));
        let time: f32 = f.0[8..8 + GAP_BINS].iter().sum();
        let count: f32 = f.0[8 + GAP_BINS..8 + 2 * GAP_BINS].iter().sum();
        // Gaps over 300 µs: 16,384 and 19,000 µs less 200 each, of all the gaps' time.
        let total = h.sum_us;
        let x = (((16_384.0 - 200.0) + (19_000.0 - 200.0)) / total).min(0.95);
        assert!(
            (f.0[8 + 2 * GAP_BINS] as f64 - x).abs() < 1e-5,
            "{} {x}",
            f.0[8 + 2 * GAP_BINS]
        );
        assert!((f.0[8 + 2 * GAP_BINS + 2] as f64 - (1.0 / (1.0 - x)).ln()).abs() < 1e-4);
        assert!((time - 1.0).abs() < 1e-5 && (count - 1.0).abs() < 1e-5);
        assert!((f.0[2] - 2f32.ln()).abs() < 1e-6);
        assert_eq!(feature_names().len(), LEVEL_FEATURES);
    }

    #[test]
    fn the_floor_rule_reports_the_trees_never_below_the_airtime_level() {
        let f = LevelRule::Floor;
        let near = |a: f64, b: f64| (a - b).abs() < 1e-6;
        assert!(
            near(combine(t(10.0, 2f32.ln()), 10.0, Some(5.0), 64.0, f), 20.0),
            "above the floor: the trees', whatever the count"
        );
        assert_eq!(
            combine(t(10.0, -(2f32.ln())), 10.0, Some(30.0), 64.0, f),
            10.0,
            "below the floor: the floor"
        );
        assert_eq!(combine(t(40.0, 2f32.ln()), 40.0, None, 64.0, f), 64.0, "capped");
        assert_eq!(combine(t(0.5, 0.0), 0.5, None, 64.0, f), 1.0, "at least one");
        assert_eq!(
            combine(t(10.0, f32::NAN), 10.0, None, 64.0, f),
            10.0,
            "no number from the trees: the floor"
        );
    }

    #[test]
    fn the_median_rule_lets_the_count_hold_the_trees() {
        let m = LevelRule::MedianWithCount;
        let up = 2f32.ln();
        assert!(
            (combine(t(10.0, up), 10.0, Some(30.0), 64.0, m) - 20.0).abs() < 1e-6,
            "count higher: the trees'"
        );
        assert_eq!(
            combine(t(10.0, up), 10.0, Some(15.0), 64.0, m),
            15.0,
            "count between: the count's"
        );
        assert_eq!(
            combine(t(10.0, up), 10.0, Some(5.0), 64.0, m),
            10.0,
            "count below the floor: the floor"
        );
        assert_eq!(combine(t(10.0, up), 10.0, None, 64.0, m), 10.0, "no frames: the floor");
        assert_eq!(
            combine(t(10.0, f32::NAN), 10.0, Some(30.0), 64.0, m),
            10.0,
            "no number from the trees: the floor votes"
        );
    }

    #[test]
    fn a_survey_lifts_the_floor_and_is_not_counted_twice() {
        let f = LevelRule::Floor;
        // The trees read others' air in the gaps: twice the plain airtime level (10 → 20).
        assert!(
            (combine(t(10.0, 2f32.ln()), 15.0, None, 64.0, f) - 20.0).abs() < 1e-6,
            "the survey's floor below: the trees'"
        );
        assert_eq!(
            combine(t(10.0, 2f32.ln()), 25.0, None, 64.0, f),
            25.0,
            "the survey's floor above: the floor"
        );
        assert_eq!(
            combine(t(10.0, 0.0), 25.0, Some(12.0), 64.0, LevelRule::MedianWithCount),
            12.0
        );
    }

    #[test]
    fn a_level_model_without_a_rule_reads_as_the_median_rule() {
        let m: LevelModel =
            serde_json::from_str(r#"{"features":[],"depth":1,"base":0,"trees":[],"clamp":[-1,1]}"#).unwrap();
        assert_eq!(m.rule, LevelRule::MedianWithCount);
        let f: LevelModel =
            serde_json::from_str(r#"{"features":[],"depth":1,"base":0,"trees":[],"clamp":[-1,1],"rule":"floor"}"#)
                .unwrap();
        assert_eq!(f.rule, LevelRule::Floor);
    }

    #[test]
    fn a_tree_walks_and_a_bad_one_is_refused() {
        let m = LevelModel {
            features: feature_names(),
            depth: 1,
            base: 0.1,
            trees: vec![Tree {
                feature: vec![5],
                threshold: vec![0.2],
                leaf: vec![0.0, 0.5],
            }],
            clamp: [-1.0, 0.5],
            rule: LevelRule::Floor,
            training: serde_json::Value::Null,
        };
        m.check().unwrap();
        let mut x = LevelFeatures::default();
        assert_eq!(m.predict(&x), 0.1);
        x.0[5] = 0.3;
        assert_eq!(m.predict(&x), 0.5, "0.1 + 0.5 clamped at 0.5");
        let mut bad = m.clone();
        bad.trees[0].feature[0] = 999;
        assert!(matches!(bad.check(), Err(LevelModelError::Tree { tree: 0, .. })));
        let mut bad = m.clone();
        bad.trees[0].leaf.pop();
        assert!(bad.check().is_err());
        let mut bad = m;
        bad.features[0] = "something else".into();
        assert!(matches!(bad.check(), Err(LevelModelError::Features { .. })));
    }
}

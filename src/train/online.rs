//! Online self-calibration (`recv --self-calibrate`): the calibrator itself is
//! [`aggrate_core::selfcal::OnlineCalibrator`] (so the C ABI and Python run the same one); here
//! it gets the bank of measured receivers this binary embeds — the shipped model's training
//! receivers summarised for it (`models/mlp8_m5_ctx1024.bank.json.xz`).

pub use aggrate_core::selfcal::{
    training_phy_bps, DistanceLimit, Likeness, OnlineCalibrator, Step, Summary, SummaryBank, DEFAULT_K,
    FAMILIAR_DISTANCE as DEFAULT_MAX_DISTANCE, IP_UDP_HEADERS, KNOT_MEMORY, MAX_GAP, STEADY, WINDOW_GAPS,
};

use crate::model::ModelFile;
use crate::train::bank;

/// Why an online calibrator cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No bank of this model's training receivers.
    #[error(
        "no summary of this model's training receivers: online self-calibration needs the shipped model (or a calibrated copy of it)"
    )]
    NoBank,
    /// The calibrator refused the model or the limit.
    #[error(transparent)]
    Calibrator(#[from] aggrate_core::selfcal::Error),
    /// The embedded bank.
    #[error(transparent)]
    Bank(#[from] bank::Error),
}

/// The embedded summary of the shipped model's training receivers, checked, when `file` is the
/// shipped model or a calibrated copy of it; `None` for any other model.
pub fn shipped_bank_for(file: &ModelFile) -> Result<Option<SummaryBank>, Error> {
    let s = bank::shipped_summary()?;
    let b = SummaryBank::of(&s)?;
    Ok(b.check_model(&file.model, &file.spec).is_ok().then_some(b))
}

/// A calibrator for the shipped model (or a calibrated copy) on the embedded bank.
pub fn for_model(file: &ModelFile, like: Likeness) -> Result<OnlineCalibrator, Error> {
    let bank = shipped_bank_for(file)?.ok_or(Error::NoBank)?;
    Ok(OnlineCalibrator::new(bank, file, like)?)
}

/// [`for_model`] for a receiver whose PHY rate is `phy_bps` (if known), [`DEFAULT_K`] neighbours
/// and the distance `limit` resolved for it: what `recv`, `sim` and Python's estimator run.
pub fn for_receiver(file: &ModelFile, limit: DistanceLimit, phy_bps: Option<u64>) -> Result<OnlineCalibrator, Error> {
    let limit = limit.check()?;
    let bank = shipped_bank_for(file)?.ok_or(Error::NoBank)?;
    Ok(OnlineCalibrator::for_receiver(bank, file, limit, phy_bps)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::Ts;

    /// The embedded bank at work: one steady window of 422 Mb/s finds its neighbours at the
    /// 400 Mb/s bank rate and sets one knot at its load.
    #[test]
    fn a_steady_window_on_the_embedded_bank_sets_one_knot() {
        let file = ModelFile::shipped().unwrap();
        let mut c = for_model(
            &file,
            Likeness {
                k: DEFAULT_K,
                max_distance: f64::INFINITY,
            },
        )
        .unwrap();
        let mut steps = Vec::new();
        // A-MPDUs of 32 packets 10 µs apart, 600 µs from one to the next.
        let mut t = 0;
        for i in 0..=WINDOW_GAPS {
            t += if i % 32 == 0 { 600_000 } else { 10_000 };
            steps.extend(c.push(Ts(t), 1472));
        }
        assert_eq!(steps.len(), 1);
        let s = &steps[0];
        assert!((s.rate_mbps - 422.0).abs() < 5.0, "{s:?}");
        assert_eq!(s.bank_rate_mbps, 400.0);
        assert!(!s.too_far && s.threshold.is_finite() && s.threshold != 0.0, "{s:?}");
        assert!((s.load - 28.4f64.ln()).abs() < 0.05, "{s:?}");
        assert_eq!(c.offset().unwrap().knots, vec![[s.load, s.threshold]]);
    }

    #[test]
    fn a_model_without_a_bank_or_a_load_is_refused() {
        let file = ModelFile::from_json(
            include_str!("../../models/logistic_m20_sigma.json"),
            "models/logistic_m20_sigma.json",
        )
        .unwrap();
        let like = Likeness {
            k: DEFAULT_K,
            max_distance: 1.0,
        };
        assert!(matches!(for_model(&file, like), Err(Error::NoBank)));
        let shipped = ModelFile::shipped().unwrap();
        let bank = shipped_bank_for(&shipped).unwrap().unwrap();
        // The shipped model's bank for another model: refused by the fingerprint.
        assert!(matches!(
            OnlineCalibrator::new(bank, &file, like),
            Err(aggrate_core::selfcal::Error::OtherModel { .. })
        ));
    }

    #[test]
    fn the_limit_follows_the_receivers_phy_rate() {
        let file = ModelFile::shipped().unwrap();
        // VHT MCS 9, 2 SS, 80 MHz, short GI: 866.7 Mb/s.
        assert_eq!(training_phy_bps(&file), Some(866_666_666));
        let by = DistanceLimit::ByPhy;
        assert_eq!(by.resolve(&file, Some(866_700_000)), f64::INFINITY);
        assert_eq!(by.resolve(&file, Some(650_000_000)), DEFAULT_MAX_DISTANCE);
        assert_eq!(by.resolve(&file, None), DEFAULT_MAX_DISTANCE);
        assert_eq!(DistanceLimit::Fixed(2.5).resolve(&file, Some(866_700_000)), 2.5);
        // What a user gives is checked once, for recv, sim and Python alike.
        assert_eq!(DistanceLimit::given(None).unwrap(), by);
        assert_eq!(DistanceLimit::given(Some(0.0)).unwrap(), DistanceLimit::Fixed(0.0));
        for bad in [f64::NAN, -1.0] {
            assert!(DistanceLimit::given(Some(bad)).is_err());
            assert!(for_receiver(&file, DistanceLimit::Fixed(bad), None).is_err());
        }
        // A model that does not say its training WLAN: the limit.
        let mut other = file.clone();
        other.metrics = serde_json::json!({});
        assert_eq!(by.resolve(&other, Some(866_700_000)), DEFAULT_MAX_DISTANCE);
    }
}

//! The model file loader on arbitrary text: refused with an error or loaded, and a loaded
//! model builds an estimator and decides a row without panicking.
#![no_main]
use aggrate::model::ModelFile;
use aggrate::train::Predict;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(m) = ModelFile::from_json(text, "fuzz.json") {
        let w = m.spec.width();
        let row: Vec<f64> = (0..w).map(|i| i as f64 * 0.5).collect();
        let _ = m.model.decision(&row);
        let _ = aggrate::runtime::OnlineEstimator::from_model(&m, std::time::Duration::from_millis(100));
    }
});

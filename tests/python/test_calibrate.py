"""aggrate.calibrate: a model's operating point for one receiver, the same as `aggrate calibrate`."""

import json
import pathlib
import subprocess

import numpy as np
import pytest

import aggrate


def test_calibrate_equals_the_cli_and_lifts_f1_on_its_rows(emulated, aggrate_bin, tmp_path):
    shipped = aggrate.Model.shipped()
    spec = json.loads(shipped.spec_json)
    df = aggrate.read_capture(emulated, m=spec["m"], sigma=spec["sigma"], context=spec["context"])
    cal, report = aggrate.calibrate(shipped, df, share=1.0)
    # One capture, one load: one knot; the model changed, its layout did not.
    assert len(report["knots"]) == 1 and report["threshold"] is None
    assert report["fit_rows"] == df.height and report["rest_before"] is None
    assert cal.feature_names == shipped.feature_names
    # On the rows it was set on, the best threshold cannot score below the trained one.
    assert report["fit_after"]["tp"] > 0
    f1 = lambda b: 2 * b["tp"] / (2 * b["tp"] + b["fp"] + b["fn_"])
    assert f1(report["fit_after"]) >= f1(report["fit_before"]) - 1e-9
    x = np.ascontiguousarray(df.select(shipped.feature_names).to_numpy(), dtype=np.float64)
    before = np.frombuffer(shipped.decision_function(x.tobytes(), len(x)), dtype="<f8")
    after = np.frombuffer(cal.decision_function(x.tobytes(), len(x)), dtype="<f8")
    shift = before - after
    assert np.allclose(shift, report["knots"][0][1], atol=1e-5), "one knot: the same offset on every row"
    # The CLI writes the same offset.
    out = tmp_path / "cal.json"
    subprocess.run([aggrate_bin, "-q", "calibrate", str(emulated), "-o", str(out)], check=True)
    cli = json.loads(out.read_text())
    assert cli["model"]["load_offset"]["knots"] == report["knots"]
    # Saved and loaded, it decides the same; a share outside (0, 1] is a typed error.
    cal.save(tmp_path / "py.json")
    again = aggrate.Model.load(tmp_path / "py.json")
    assert again.decision_function(x.tobytes(), len(x)) == cal.decision_function(x.tobytes(), len(x))
    with pytest.raises(aggrate.ModelError, match=r"\(0, 1\]"):
        aggrate.calibrate(shipped, df, share=0.0)
    with pytest.raises(ValueError, match="no column"):
        aggrate.calibrate(shipped, df.drop("agg_level"))


SMALL_BANK = 'name = "b"\nseed = 3\npackets = 2000\ntrain_rates_mbps = [1]\n[[receivers]]\nrandom = 8\n'


def test_calibrate_without_labels_equals_the_cli_and_reads_no_label(emulated, aggrate_bin, tmp_path):
    shipped = aggrate.Model.shipped()
    spec = json.loads(shipped.spec_json)
    df = aggrate.read_capture(emulated, m=spec["m"], sigma=spec["sigma"], context=spec["context"])
    bank = tmp_path / "bank.toml"
    bank.write_text(SMALL_BANK)
    cal, report = aggrate.calibrate(shipped, df, no_labels=True, bank=bank, neighbours=3)
    assert len(report["runs"]) == 1 and len(report["runs"][0]["neighbours"]) == 3
    assert report["runs"][0]["bank_rate_mbps"] == 400.0
    assert len(report["knots"]) == 1 and report["threshold"] is None
    # No label is read: without the label columns, the same model.
    blind, _ = aggrate.calibrate(shipped, df.drop(["y", "agg_level"]), no_labels=True, bank=bank, neighbours=3)
    x = np.ascontiguousarray(df.select(shipped.feature_names).to_numpy(), dtype=np.float64)
    assert blind.decision_function(x.tobytes(), len(x)) == cal.decision_function(x.tobytes(), len(x))
    # The CLI sets the same threshold.
    out = tmp_path / "nl.json"
    subprocess.run([aggrate_bin, "-q", "calibrate", "--no-labels", "--bank", str(bank), "--neighbours", "3",
                    str(emulated), "-o", str(out)], check=True)
    cli = json.loads(out.read_text())
    assert cli["model"]["load_offset"]["knots"] == report["knots"]
    with pytest.raises(ValueError, match="host_ns"):
        aggrate.calibrate(shipped, df.drop("host_ns"), no_labels=True, bank=bank)
    with pytest.raises(ValueError, match="neighbours"):
        aggrate.calibrate(shipped, df, no_labels=True, bank=bank, neighbours=0)
    with pytest.raises(ValueError, match="max_distance"):
        aggrate.calibrate(shipped, df, no_labels=True, bank=bank, max_distance=-1.0)
    # A bank that must lie nearer than it does: the model's own threshold, as the CLI says.
    far, far_report = aggrate.calibrate(shipped, df, no_labels=True, bank=bank, neighbours=3, max_distance=0.0)
    assert far_report["runs"][0]["too_far"] and far_report["knots"][0][1] == 0.0
    out = tmp_path / "far.json"
    subprocess.run([aggrate_bin, "-q", "calibrate", "--no-labels", "--bank", str(bank), "--neighbours", "3",
                    "--max-distance", "0", str(emulated), "-o", str(out)], check=True)
    assert json.loads(out.read_text())["model"]["load_offset"]["knots"] == far_report["knots"]
    # The bank at another WLAN: the same as the CLI's flags; a WLAN the emulator cannot have is
    # a ValueError naming the fields.
    _, mcs7 = aggrate.calibrate(shipped, df, no_labels=True, bank=bank, neighbours=3, mcs=7, ip_len=1000)
    out = tmp_path / "mcs7.json"
    subprocess.run([aggrate_bin, "-q", "calibrate", "--no-labels", "--bank", str(bank), "--neighbours", "3",
                    "--mcs", "7", "--ip-len", "1000", str(emulated), "-o", str(out)], check=True)
    assert json.loads(out.read_text())["model"]["load_offset"]["knots"] == mcs7["knots"]
    assert mcs7["runs"][0]["distance"] != report["runs"][0]["distance"]
    with pytest.raises(ValueError, match="mcs"):
        aggrate.calibrate(shipped, df, no_labels=True, bank=bank, mcs=12)


def test_calibrate_on_measured_receivers_equals_the_cli(emulated, aggrate_bin, tmp_path):
    shipped = aggrate.Model.shipped()
    spec = json.loads(shipped.spec_json)
    df = aggrate.read_capture(emulated, m=spec["m"], sigma=spec["sigma"], context=spec["context"])
    cal, report = aggrate.calibrate(shipped, df, no_labels=True, measured=True)
    # The shipped model's training receivers: 5 neighbours, measured at the nearest rate.
    assert len(report["runs"]) == 1 and len(report["runs"][0]["neighbours"]) == 5
    assert report["runs"][0]["bank_rate_mbps"] == 400.0
    out = tmp_path / "m.json"
    subprocess.run([aggrate_bin, "-q", "calibrate", "--no-labels", "--measured", str(emulated), "-o", str(out)],
                   check=True)
    cli = json.loads(out.read_text())
    assert cli["model"]["load_offset"]["knots"] == report["knots"]
    assert cli["metrics"]["calibration"]["self_calibration"]["runs"][0]["neighbours"] == report["runs"][0]["neighbours"]
    # The embedded summary is the shipped model's: another model is refused; so are an emulated
    # bank's settings beside it, and measured without no_labels.
    j = json.loads(shipped.to_json())
    j["model"]["b2"] += 0.5
    other = aggrate.Model.from_json(json.dumps(j), "tweaked")
    with pytest.raises(aggrate.ModelError, match="made for model"):
        aggrate.calibrate(other, df, no_labels=True, measured=True)
    x = np.ascontiguousarray(df.select(shipped.feature_names).to_numpy(), dtype=np.float64)
    assert cal.decision_function(x.tobytes(), len(x)) != shipped.decision_function(x.tobytes(), len(x)) \
        or report["runs"][0]["too_far"]
    with pytest.raises(ValueError, match="measured"):
        aggrate.calibrate(shipped, df, no_labels=True, measured=True, mcs=7)
    with pytest.raises(ValueError, match="no_labels"):
        aggrate.calibrate(shipped, df, measured=True)


def test_training_likeness_equals_eval_and_knows_only_the_shipped_model(emulated, aggrate_bin, tmp_path):
    shipped = aggrate.Model.shipped()
    spec = json.loads(shipped.spec_json)
    df = aggrate.read_capture(emulated, m=spec["m"], sigma=spec["sigma"], context=spec["context"])
    like = aggrate.training_likeness(shipped, df)
    assert len(like) == 1 and like[0]["rate_mbps"] == 400.0 and like[0]["capture"] == df["capture"][0]
    assert like[0]["familiar"] == (like[0]["distance"] <= 1.0)
    out = tmp_path / "ev"
    subprocess.run([aggrate_bin, "-q", "eval", "--model", str(pathlib.Path(__file__).resolve().parents[2] / "models" / "mlp8_m5_ctx1024.json"),
                    str(emulated), "-o", str(out)], check=True)
    cli = json.loads((out / "mlp8_m5_ctx1024.eval.json").read_text())["training_likeness"]["inputs"][0]
    assert (cli["nearest"], cli["distance"]) == (like[0]["nearest"], like[0]["distance"])
    j = json.loads(shipped.to_json())
    j["model"]["b2"] += 0.5
    with pytest.raises(aggrate.ModelError, match="another model"):
        aggrate.training_likeness(aggrate.Model.from_json(json.dumps(j), "tweaked"), df)
    with pytest.raises(ValueError, match="host_ns"):
        aggrate.training_likeness(shipped, df.drop("host_ns"))

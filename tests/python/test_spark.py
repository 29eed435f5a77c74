"""The Spark jobs (`python -m aggrate.spark`) on a local Spark (`local[2]`, pyspark and a Java
runtime installed by scripts/test.sh), end to end, against `aggrate train` on the same captures."""

import json
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import polars as pl
import pytest

import aggrate

RATES = (100, 300)
RECEIVERS = ("phone", "laptop")


@pytest.fixture(scope="module")
def captures(tmp_path_factory) -> pathlib.Path:
    """Four emulated captures (two receivers × two rates), a truncated one, a file that is not
    a capture and a listed capture that does not exist."""
    d = tmp_path_factory.mktemp("spark_caps")
    for r in RECEIVERS:
        for q in RATES:
            aggrate.simulate(d / f"{r}_{q}mbps.pcapng", rate_mbps=q, duration_s=0.5, noise=r, seed=11)
    whole = (d / "laptop_100mbps.pcapng").read_bytes()
    (d / "cut_200mbps.pcapng").write_bytes(whole[: len(whole) // 2])
    (d / "junk.pcap").write_text("not a capture\n")
    return d


@pytest.fixture(scope="module")
def spark():
    try:
        import pyspark  # noqa: F401
    except ImportError:
        pytest.fail("pyspark is needed (scripts/test.sh installs it with a Java runtime)")
    from aggrate.spark import session

    s = session("local[2]", app="aggrate-tests", conf={"spark.sql.shuffle.partitions": "4", "spark.ui.enabled": "false",
                                                         "spark.driver.memory": "1g"})
    s.sparkContext.setLogLevel("ERROR")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def rows(captures, tmp_path_factory) -> pathlib.Path:
    """The features job run as a user runs it: `python -m aggrate.spark features`."""
    out = tmp_path_factory.mktemp("spark_rows") / "rows"
    r = subprocess.run(
        [sys.executable, "-m", "aggrate.spark", "--master", "local[2]", "features", str(captures),
         str(captures / "missing_100mbps.pcapng"), "-o", str(out)],
        capture_output=True, text=True, timeout=600,
    )
    # Exit 2: some captures failed (the others were written).
    assert r.returncode == 2, r.stderr[-3000:]
    assert "| junk.pcap" not in r.stdout  # paths in full
    assert str(captures / "junk.pcap") in r.stdout
    return out


GOOD = [f"{r}_{q}mbps.pcapng" for r in RECEIVERS for q in RATES]


def test_features_job_writes_partitioned_rows_and_a_per_file_error_table(rows, captures, spark):
    files = {pathlib.Path(r["path"]).name: r for r in (json.loads(line) for f in (rows / "_files").glob("*.json")
                                                      for line in f.read_text().splitlines())}
    assert set(files) == set(GOOD) | {"cut_200mbps.pcapng", "junk.pcap", "missing_100mbps.pcapng"}
    # The damaged captures: path, byte offset and what is wrong, their rows left out.
    assert files["junk.pcap"]["offset"] == 0 and "not a pcap or pcapng" in files["junk.pcap"]["error"]
    cut = files["cut_200mbps.pcapng"]
    size = (captures / "cut_200mbps.pcapng").stat().st_size
    assert 0 < cut["offset"] <= size and "truncated" in cut["error"] and cut["rows"] == 0
    with pytest.raises(aggrate.CaptureError) as e:
        aggrate.read_capture(captures / "cut_200mbps.pcapng")
    assert e.value.offset == cut["offset"]
    assert "No such file" in files["missing_100mbps.pcapng"]["error"]
    # Partitioned by receiver and rate; every good capture whole, the same rows as read here.
    for r in RECEIVERS:
        for q in RATES:
            assert (rows / f"receiver={r}" / f"rate_mbps={float(q)}").is_dir()
    written = json.loads(next((rows / "_spec").glob("*.json")).read_text())
    spec = json.loads(written["spec"])
    assert (spec["m"], spec["context"]) == (5, 1024)
    names = json.loads(written["features"])
    assert names == aggrate._aggrate.layout(m=5, sigma=False, context=1024)[1]
    df = pl.read_parquet(rows / "receiver=phone" / "rate_mbps=300.0" / "*.parquet").sort("row")
    local = aggrate.read_capture(captures / "phone_300mbps.pcapng", m=5, sigma=False, context=1024)
    assert files["phone_300mbps.pcapng"]["rows"] == local.height == df.height
    for c in names:
        assert np.array_equal(df[c].to_numpy(), local[c].to_numpy()), c
    assert np.array_equal(df["y"].to_numpy(), local["y"].to_numpy())


def _cli_train(aggrate_bin, captures, out, *extra):
    subprocess.run([aggrate_bin, "-q", "train", "--dataset", *[str(captures / g) for g in GOOD],
                    "--m", "5", "--context", "1024", "-o", str(out), *extra], check=True, timeout=600)


def test_logistic_on_spark_is_aggrate_trains_model_and_report(rows, captures, spark, aggrate_bin, tmp_path):
    from aggrate.spark import train_job

    r = train_job(spark, str(rows), str(tmp_path / "spark"), model="logistic", folds=3, peers=True,
                  params={"max_iter": 20})  # Newton converges in 6; MLlib's MLP peer stops at 20
    _cli_train(aggrate_bin, captures, tmp_path / "cli", "--model", "logistic", "--folds", "3")
    mine = json.loads((tmp_path / "spark" / "logistic_m5_ctx1024.json").read_text())
    theirs = json.loads((tmp_path / "cli" / "logistic_m5_ctx1024.json").read_text())
    a, b = mine["model"], theirs["model"]
    assert np.max(np.abs(np.r_[a["w"], a["b"]] - np.r_[b["w"], b["b"]])) < 1e-6
    assert np.allclose(a["scaler"]["mean"], b["scaler"]["mean"], rtol=1e-9)
    assert mine["training"]["rows"] == theirs["training"]["rows"]
    cli = json.loads((tmp_path / "cli" / "logistic_m5_ctx1024.report.json").read_text())
    assert [f["rows"] for f in r["folds"]] == [f["rows"] for f in cli["folds"]]
    for f, g in zip(r["folds"], cli["folds"]):
        assert abs(f["f1"] - g["f1"]) < 0.002 and abs(f["agg_rmse"] - g["agg_rmse"]) < 0.002
    assert abs(r["f1_mean"] - cli["f1_mean"]) < 0.002
    # μ_N per 100 ms report interval of the held-out rows (packets ÷ predicted starts): the same.
    assert cli["mu_n"]["intervals"] == r["mu_n"]["intervals"] > 5
    for k in ("bias", "mae_rel_median", "err_rel_p95"):
        assert abs(r["mu_n"][k] - cli["mu_n"][k]) < 0.002, k
    for f, g in zip(r["folds"], cli["folds"]):
        assert abs(f["mu_n"]["bias"] - g["mu_n"]["bias"]) < 0.002
    # The model file loads where `recv` loads it and runs online.
    m = aggrate.Model.load(tmp_path / "spark" / "logistic_m5_ctx1024.json")
    assert m.kind == "logistic" and m.width == len(a["w"])
    # MLlib beside it, on the same rows: its logistic optimum is ours (to MLlib's tolerance).
    peers = {p["peer"]: p for p in r["peers"]}
    assert peers["MLlib LogisticRegression"]["max_weight_difference"] < 1e-3
    assert "MLlib MultilayerPerceptronClassifier" in peers
    assert (tmp_path / "spark" / "logistic_m5_ctx1024.spark.report.md").read_text().count("| fold ") == 3


def test_perceptron_on_spark_is_aggrate_trains_lbfgs_model(rows, captures, spark, aggrate_bin, tmp_path):
    from aggrate.spark import train_job

    params = {"hidden": 8, "max_iter": 12, "seed": 3}
    r = train_job(spark, str(rows), str(tmp_path / "spark"), model="mlp", folds=2, params=params)
    _cli_train(aggrate_bin, captures, tmp_path / "cli", "--model", "mlp", "--solver", "lbfgs", "--hidden", "8",
               "--max-iter", "12", "--seed", "3", "--folds", "2")
    a = json.loads((tmp_path / "spark" / "mlp8_m5_ctx1024.json").read_text())["model"]
    b = json.loads((tmp_path / "cli" / "mlp8_m5_ctx1024.json").read_text())["model"]
    for k in ("w1", "b1", "w2"):
        x, y = np.asarray(a[k]), np.asarray(b[k])
        assert np.max(np.abs(x - y)) <= 1e-3 * np.max(np.abs(y)), k
    assert abs(a["b2"] - b["b2"]) <= 1e-3 * max(1.0, abs(b["b2"]))
    assert a["slow_inputs"] == b["slow_inputs"] == 4
    cli = json.loads((tmp_path / "cli" / "mlp8_m5_ctx1024.report.json").read_text())
    assert len(r["folds"]) == len(cli["folds"]) == 2
    for f, g in zip(r["folds"], cli["folds"]):
        assert abs(f["f1"] - g["f1"]) < 0.002 and abs(f["agg_rmse"] - g["agg_rmse"]) < 0.002
    # Another seed is another model: the seed reaches the initial weights.
    other = train_job(spark, str(rows), None, model="mlp", folds=2, params={**params, "seed": 4})
    w_other = np.asarray(json.loads(other["fitted"].to_json())["model"]["w1"])
    assert np.max(np.abs(w_other - np.asarray(a["w1"]))) > 1e-3


def test_leave_one_receiver_out_on_spark_matches_aggrate_train(rows, captures, spark, aggrate_bin, tmp_path):
    from aggrate.spark import train_job

    r = train_job(spark, str(rows), None, model="logistic", group_by="receiver", own_folds=3)
    _cli_train(aggrate_bin, captures, tmp_path / "cli", "--model", "logistic", "--group-by", "receiver")
    cli = json.loads((tmp_path / "cli" / "logistic_m5_ctx1024.receivers.json").read_text())
    theirs = {(x["receiver"], q["rate_mbps"]): q for x in cli["receivers"] for q in x["per_rate"]}
    mine = {(x["receiver"], q["rate_mbps"]): q for x in r["receivers"] for q in x["per_rate"]}
    assert set(mine) == set(theirs) and len(mine) == 4
    for k, q in mine.items():
        assert q["rows"] == theirs[k]["rows"]
        assert abs(q["held_out"]["f1"] - theirs[k]["held_out"]["f1"]) < 0.002, k
        assert abs(q["own"]["f1"] - theirs[k]["own"]["f1"]) < 0.002, k


def test_test_receivers_on_spark_match_aggrate_train_test(captures, spark, aggrate_bin, tmp_path):
    """A receiver in no training set (`aggrate train --test`): scored with the final model."""
    from aggrate.spark import features_job, train_job

    aggrate.simulate(tmp_path / "none_100mbps.pcapng", rate_mbps=100, duration_s=0.5, noise="none", seed=11)
    train = [captures / g for g in ("phone_100mbps.pcapng", "laptop_100mbps.pcapng")]
    features_job(spark, train + [tmp_path / "none_100mbps.pcapng"], str(tmp_path / "rows"))
    r = train_job(spark, str(tmp_path / "rows"), None, model="logistic", group_by="receiver",
                  own_folds=2, test_receivers=["none"])
    subprocess.run([aggrate_bin, "-q", "train", "--dataset", *map(str, train), "--test",
                    str(tmp_path / "none_100mbps.pcapng"), "--m", "5", "--context", "1024", "--model", "logistic",
                    "--group-by", "receiver", "--own-folds", "2", "-o", str(tmp_path / "cli")], check=True, timeout=600)
    cli = json.loads((tmp_path / "cli" / "logistic_m5_ctx1024.test.receivers.json").read_text())
    theirs = {(x["receiver"], q["rate_mbps"]): q for x in cli["receivers"] for q in x["per_rate"]}
    mine = {(x["receiver"], q["rate_mbps"]): q for x in r["test_receivers"] for q in x["per_rate"]}
    assert set(mine) == set(theirs) == {("none", 100.0)}
    for k, q in mine.items():
        assert q["rows"] == theirs[k]["rows"]
        assert abs(q["held_out"]["f1"] - theirs[k]["held_out"]["f1"]) < 0.002
        assert abs(q["own"]["f1"] - theirs[k]["own"]["f1"]) < 0.002
    assert [x["receiver"] for x in r["receivers"]] == ["laptop", "phone"]  # not trained on
    with pytest.raises(ValueError, match="not in"):
        train_job(spark, str(tmp_path / "rows"), None, group_by="receiver", test_receivers=["nobody"])


def test_dataset_manifests_name_receiver_rate_role_and_kernel_log(tmp_path):
    from aggrate.spark import list_inputs

    ds = tmp_path / "ds"
    ds.mkdir()
    (ds / "manifest.json").write_text(json.dumps({"runs": [
        {"receiver": "veth-gro", "role": "train", "rate_mbps": 200,
         "stations": [{"file": "veth-gro_200mbps.pcapng", "kernel": "veth-gro_200mbps.csv"}]},
        {"receiver": "phone", "role": "test", "rate_mbps": 100, "others": "sta1x5",
         "stations": [{"file": "phone_100mbps.pcapng"}]},
    ]}))
    tasks = list_inputs([ds])
    assert tasks == [
        {"path": str(ds / "veth-gro_200mbps.pcapng"), "kernel": str(ds / "veth-gro_200mbps.csv"),
         "receiver": "veth-gro", "role": "train", "others": None, "rate_mbps": 200},
        {"path": str(ds / "phone_100mbps.pcapng"), "kernel": None, "receiver": "phone", "role": "test",
         "others": "sta1x5", "rate_mbps": 100},
    ]
    with pytest.raises(ValueError, match="listed twice"):
        list_inputs([ds, ds])
    (ds / "manifest.json").write_text("{not json")
    with pytest.raises(ValueError, match="manifest"):
        list_inputs([ds])


def test_dataset_roles_unknown_rates_and_named_receivers_on_spark(captures, spark, tmp_path):
    """A dataset folder: only its training runs are trained on (as `aggrate train --dataset`),
    a run without a rate is reported as such (JSON null, not NaN), receivers come from the
    manifest and keep their names as written."""
    from aggrate.spark import features_job, train_job

    ds = tmp_path / "ds"
    ds.mkdir()
    shutil.copy(captures / "phone_100mbps.pcapng", ds / "phone_norate.pcapng")
    runs = [{"receiver": "007", "role": "train", "rate_mbps": 100, "stations": [{"file": str(captures / "laptop_100mbps.pcapng")}]},
            {"receiver": "007", "role": "eval", "rate_mbps": 300, "stations": [{"file": str(captures / "laptop_300mbps.pcapng")}]},
            {"receiver": "p", "role": "train", "others": "ap1x50", "stations": [{"file": "phone_norate.pcapng"}]}]
    (ds / "manifest.json").write_text(json.dumps({"runs": runs}))
    s = features_job(spark, [ds], str(tmp_path / "rows"))
    assert s["failed"] == 0 and s["captures"] == 3
    r = train_job(spark, str(tmp_path / "rows"), str(tmp_path / "out"), model="logistic", folds=2)
    n_train = sum(f["rows"] for f in s["files"] if "laptop_300" not in f["path"])
    assert r["rows"] == n_train
    assert [q["rate_mbps"] for q in r["per_rate"]] == [None, 100.0]
    report = json.loads((tmp_path / "out" / "logistic_m5_ctx1024.spark.report.json").read_text())
    assert report["per_rate"][0]["rate_mbps"] is None
    model = json.loads((tmp_path / "out" / "logistic_m5_ctx1024.json").read_text())
    assert model["training"]["captures"] == ["laptop_100mbps.pcapng", "phone_norate.pcapng"]
    assert model["metrics"]["cv_folds"] == 2
    # Every run with --all-roles; receivers keep the manifest's names ("007" is not the number 7).
    from aggrate.spark.train import load_rows

    names = s["features"]
    everything = load_rows(spark, str(tmp_path / "rows"), names, all_roles=True)
    assert everything.count() == s["rows"]
    assert sorted(r["receiver"] for r in everything.select("receiver").distinct().collect()) == ["007", "p"]
    # The kind of others on the channel rides along (null where the manifest names none).
    kinds = {(r["receiver"], r["others"]) for r in everything.select("receiver", "others").distinct().collect()}
    assert kinds == {("007", None), ("p", "ap1x50")}
    everything.unpersist()


def test_bad_input_on_the_cluster_path_is_named(rows, spark, tmp_path):
    from aggrate.spark import list_inputs, train_job

    with pytest.raises(FileNotFoundError, match="nowhere"):
        list_inputs([tmp_path / "nowhere"])
    with pytest.raises(FileNotFoundError, match="_spec"):
        train_job(spark, str(tmp_path), None)
    # Bad hyper-parameters are refused before any fit, naming the field.
    with pytest.raises(aggrate.ModelError, match="hidden"):
        train_job(spark, str(rows), None, model="mlp", params={"hidden": 0})
    with pytest.raises(aggrate.ModelError, match="l2"):
        train_job(spark, str(rows), None, model="logistic", params={"l2": -1})
    with pytest.raises(ValueError, match="folds"):
        train_job(spark, str(rows), None, folds=1)

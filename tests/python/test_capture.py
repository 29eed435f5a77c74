"""Captures to DataFrames: the same rows as `aggrate features`, and damage kept apart."""

import subprocess

import numpy as np
import polars as pl
import pytest

import aggrate


def test_rows_equal_the_cli_feature_table(sample, aggrate_bin, tmp_path):
    df = aggrate.read_capture(sample)
    out = tmp_path / "f.parquet"
    subprocess.run([aggrate_bin, "-q", "features", str(sample), "-o", str(out)], check=True)
    cli = pl.read_parquet(out).drop("capture_id")
    assert df.columns == cli.columns
    assert df.height == cli.height > 60_000
    for c in df.columns:
        assert df[c].cast(cli[c].dtype).equals(cli[c], check_names=True), c
    # Labels are consistent: frames × mean level per frame = packets (to the edges).
    starts = df.filter(pl.col("y"))
    assert abs(starts["agg_level"].sum() - df.height) <= 64


def test_feature_layout_follows_the_spec(sample):
    df = aggrate.read_capture(sample, m=5, sigma=False)
    assert [c for c in df.columns if c.startswith("gap_us_")] == [f"gap_us_{i}" for i in range(1, 6)]
    assert "sigma_us" not in df.columns
    ctx = aggrate.read_capture(sample, m=3, context=256)
    assert {"lg_1", "rank_3", "q50", "lmean"} <= set(ctx.columns)
    # rank = ln((n + 1) / (n_above + 0.5)) over the n ≤ 256 recent gaps: in (0, ln(2·257)].
    assert (ctx["rank_1"] > 0).all() and (ctx["rank_1"] <= np.log(2 * 257) + 1e-12).all()


def test_truncated_capture_raises_with_path_offset_and_the_rows_before(emulated, tmp_path):
    full = aggrate.read_capture(emulated)
    data = emulated.read_bytes()
    cut = tmp_path / "cut_400mbps.pcapng"
    cut.write_bytes(data[: len(data) // 3])
    with pytest.raises(aggrate.CaptureError) as e:
        aggrate.read_capture(cut)
    err = e.value
    assert isinstance(err, aggrate.InputError) and isinstance(err, aggrate.AggrateError)
    assert err.path == str(cut)
    assert err.offset is not None and 0 < err.offset <= len(data) // 3
    assert f"byte offset {err.offset}" in str(err)
    rows = err.rows
    assert 0 < rows.height < full.height
    # The rows before the damage are the full capture's first rows; only the frame the damage cut
    # short has a smaller level.
    head = full.head(rows.height)
    assert rows.drop("capture", "agg_level").equals(head.drop("capture", "agg_level"))
    last = rows["frame_id"].max()
    earlier = pl.col("frame_id") < last
    assert rows.filter(earlier).drop("capture").equals(head.filter(earlier).drop("capture"))
    assert rows.filter(earlier).height > 0.9 * rows.height
    # keep_going reads the same rows and calls the end of the file the end.
    kept = aggrate.read_capture(cut, keep_going=True)
    assert kept.equals(rows)


def test_not_a_capture_and_no_ground_truth_are_typed(tmp_path, emulated):
    junk = tmp_path / "junk.pcap"
    junk.write_bytes(b"this is not a capture at all")
    with pytest.raises(aggrate.CaptureError) as e:
        aggrate.read_capture(junk)
    assert e.value.path == str(junk) and e.value.offset == 0 and e.value.rows.height == 0
    with pytest.raises(OSError):
        aggrate.read_capture(tmp_path / "missing.pcap")
    # A receiver log that shares no sequence number with the capture is refused by name.
    log = tmp_path / "other.csv"
    log.write_text("seq,host_ns\n" + "".join(f"{4_000_000 + i},{i * 1000}\n" for i in range(50)))
    with pytest.raises(aggrate.CaptureError, match="no sequence number in common") as e:
        aggrate.read_capture(emulated, kernel=log)
    assert e.value.path == str(log)


def test_kernel_log_replaces_the_host_times(emulated, tmp_path):
    df = aggrate.read_capture(emulated)
    # A log that shifts every packet by 5 µs and leaves out every tenth packet.
    seq = df["seq"].to_numpy()
    host = df["host_ns"].to_numpy()
    keep = np.arange(len(seq)) % 10 != 3
    log = tmp_path / "emu.csv"
    log.write_text("seq,host_ns\n" + "".join(f"{s},{h + 5000}\n" for s, h in zip(seq[keep], host[keep])))
    joined = aggrate.read_capture(emulated, kernel=log)
    assert 0.85 * df.height < joined.height < df.height
    both = joined.join(df.select("number", pl.col("host_ns").alias("own")), on="number")
    assert (both["host_ns"] - both["own"] == 5000).all()


def test_a_dataset_folder_reads_with_receivers_and_kernel_logs(tmp_path, emulated):
    """A manifest in the shape `aggrate dataset build` writes: two runs through two receivers,
    one with a kernel log; and a folder without a manifest."""
    import json
    import shutil

    a = aggrate.simulate(tmp_path / "r_a_200mbps.pcapng", rate_mbps=200, duration_s=0.5, noise="phone", seed=1)
    b = aggrate.simulate(tmp_path / "r_b_300mbps.pcapng", rate_mbps=300, duration_s=0.5, noise="laptop", seed=2)
    rows_b = aggrate.read_capture(b["paths"][0])
    (tmp_path / "r_b.csv").write_text(
        "seq,host_ns\n" + "".join(f"{s},{h + 1000}\n" for s, h in zip(rows_b["seq"], rows_b["host_ns"]))
    )
    manifest = {"runs": [
        {"role": "train", "rate_mbps": 200.0, "receiver": "phone", "stations": [{"file": "r_a_200mbps.pcapng"}]},
        {"role": "test", "rate_mbps": 300.0, "receiver": "laptop", "others": "sta1x5",
         "stations": [{"file": "r_b_300mbps.pcapng", "kernel": "r_b.csv"}]},
    ]}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    df = aggrate.read_dataset(tmp_path, m=5)
    assert sorted(df["receiver"].unique().to_list()) == ["laptop", "phone"]
    laptop = df.filter(pl.col("receiver") == "laptop")
    assert (laptop["role"] == "test").all() and (laptop["rate_mbps"] == 300.0).all()
    # The kind of others on the channel, where the manifest names one.
    assert (laptop["others"] == "sta1x5").all()
    assert df.filter(pl.col("receiver") == "phone")["others"].is_null().all()
    # The kernel log's times (+1 µs) replaced the capture's.
    both = laptop.join(rows_b.select("number", pl.col("host_ns").alias("own")), on="number")
    assert both.height > 0.95 * rows_b.height and (both["host_ns"] - both["own"] == 1000).all()
    assert aggrate.read_dataset(tmp_path, train_only=True, m=5)["receiver"].unique().to_list() == ["phone"]
    # Without a manifest: receivers from the captures' comments.
    plain = tmp_path / "plain"
    plain.mkdir()
    shutil.copy(a["paths"][0], plain)
    (plain / "r_a.csv.gz").write_bytes(b"not a capture")  # a kernel log beside it is not read
    assert aggrate.read_dataset(plain, m=5)["receiver"].unique().to_list() == ["phone"]
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(aggrate.InputError, match="no captures"):
        aggrate.read_dataset(empty)


def test_inspect_equals_the_cli_and_reports_damage_with_its_offset(sample, emulated, aggrate_bin, tmp_path):
    cli = subprocess.run([aggrate_bin, "-q", "inspect", "--json", str(sample)], check=True, capture_output=True, text=True)
    import json

    assert aggrate.inspect(sample) == json.loads(cli.stdout)
    got = aggrate.inspect(emulated)
    assert got["ground_truth"] and got["complete"] and got["error"] is None
    assert got["frames"] > 0 and abs(got["mean_agg"] * got["frames"] - got["mpdus"]) <= 64
    # Damage stops the read: what came before it is described, the error names the offset.
    data = emulated.read_bytes()
    cut = tmp_path / "cut.pcapng"
    cut.write_bytes(data[: len(data) // 2])
    half = aggrate.inspect(cut)
    assert not half["complete"] and str(cut) in half["error"] and "offset" in half["error"]
    assert 0 < half["packets"] < got["packets"]
    with pytest.raises(aggrate.InputError, match="nothing.pcap"):
        aggrate.inspect(tmp_path / "nothing.pcap")
    with pytest.raises(ValueError):
        aggrate.inspect(sample, proto="icmp")

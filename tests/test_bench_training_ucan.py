"""The rows that bench_training.py and bench_ucan.py write into the digits
results file, built from certificates whose figures are known by hand."""

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import bench_training  # noqa: E402
import bench_ucan  # noqa: E402

Y = np.array([0, 1, 2, 3, 4])
#: correct on inputs 0, 1 and 3 (2 is wrong, 4 abstains)
CERT = SimpleNamespace(
    label=np.array([0, 1, 0, 3, 4]),
    abstained=np.array([False, False, False, False, True]),
    radius=np.array([0.1, 0.3, 0.9, 0.6, 0.8]),
    proxy_radius=np.array([0.2, 0.6, 1.0, 0.6, 0.9]),
)


def test_a_training_row_holds_the_figures_of_its_certificates():
    row = bench_training.table_row("macer", "ancer", Y, CERT, 12.5)
    assert row["model"] == "macer, ancer"
    assert row["clean"] == pytest.approx(3 / 5)
    assert row["certified_025"] == pytest.approx(2 / 5)  # 0.3 and 0.6
    assert row["certified_05"] == pytest.approx(1 / 5)  # 0.6
    assert row["acr"] == pytest.approx((0.1 + 0.3 + 0.6) / 5)
    assert row["acr_proxy"] == pytest.approx((0.2 + 0.6 + 0.6) / 5)
    assert row["train_seconds"] == 12.5
    assert {c["key"] for c in bench_training.COLUMNS} == set(row)
    assert np.array_equal(
        bench_training.contributions(Y, CERT, proxy=True), [0.2, 0.6, 0.0, 0.6, 0.0]
    )


def test_training_intervals_pair_each_method_with_its_baseline():
    rng = np.random.RandomState(1)
    trainings, strategies = ["gaussian", "macer"], ["cohen", "ancer"]
    per_input = {
        (t, s, k): rng.rand(50)
        for t in trainings
        for s in strategies
        for k in ("acr", "acr_proxy")
    }
    out = bench_training.differences(per_input, trainings, strategies, n_boot=200)
    assert [(d["a"], d["b"], d["key"]) for d in out] == [
        ("macer, cohen", "gaussian, cohen", "acr"),
        ("macer, ancer", "gaussian, ancer", "acr"),
        ("gaussian, ancer", "gaussian, cohen", "acr"),
        ("gaussian, ancer", "gaussian, cohen", "acr_proxy"),
        ("macer, ancer", "macer, cohen", "acr"),
        ("macer, ancer", "macer, cohen", "acr_proxy"),
    ]
    first = out[0]
    exact = np.mean(per_input[("macer", "cohen", "acr")]) - np.mean(
        per_input[("gaussian", "cohen", "acr")]
    )
    assert first["mean"] == pytest.approx(exact)
    assert first["low"] < first["mean"] < first["high"]


def test_a_ucan_row_counts_by_proxy_radius_at_the_geometric_mean_sigma():
    scale = np.array([[0.1, 0.4], [0.2, 0.2]])  # geometric mean 0.2
    radii = [0.0, 0.5, 1.0]
    row = bench_ucan.table_row("ucan_input", 0.25, scale, Y, CERT, radii, 3.0)
    assert row["strategy"] == "ucan_input"
    assert row["sigma_gm"] == pytest.approx(0.2)
    # by proxy radius 0.6 and 0.6 reach 0.5 (by inscribed radius only 0.6)
    assert row["certified_accuracy_proxy"] == pytest.approx([3 / 5, 2 / 5, 0.0])
    assert row["clean"] == pytest.approx(3 / 5)
    assert row["acr_proxy"] == pytest.approx(1.4 / 5)
    columns = bench_ucan.columns(radii)
    assert {c["key"] for c in columns} == set(row)
    assert columns[2]["at"] == radii

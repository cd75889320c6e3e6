"""The rows ``bench_grid.py`` and ``bench_sample_size.py`` write into the
results files: the figures of the certificates they were given, worked out
by hand here on a few inputs (and agreeing with ``smoothlearn.metrics``)."""

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_grid  # noqa: E402
import bench_sample_size  # noqa: E402

from smoothlearn.metrics import average_certified_radius, certified_accuracy  # noqa: E402


def certificates(label, abstained, radius, n_draws=None):
    radius = np.asarray(radius, float)
    return SimpleNamespace(
        label=np.asarray(label),
        abstained=np.asarray(abstained, bool),
        radius=radius,
        proxy_radius=radius,
        n_draws=None if n_draws is None else np.asarray(n_draws),
    )


Y = np.array([0, 1, 1, 1])
# right at 0.3, right at 0.6, wrong, abstained (its radius must not count)
CERT = certificates([0, 1, 2, 1], [0, 0, 0, 1], [0.3, 0.6, 0.0, 0.9], [10, 20, 30, 40])


def test_a_grid_row_holds_its_certificates_figures():
    row = bench_grid.table_row("cohen, grid", CERT, Y, [0.2, 0.1, 0.4], 1.0)
    assert row["path"] == "cohen, grid"
    assert bench_grid.RADII == (0.0, 0.25, 0.5, 0.75, 1.0)
    assert row["certified_accuracy"] == [0.5, 0.5, 0.25, 0.0, 0.0]
    assert row["acr"] == pytest.approx((0.3 + 0.6) / 4, abs=1e-15)
    assert row["acr"] == pytest.approx(average_certified_radius(Y, CERT), abs=1e-15)
    assert row["seconds"] == 0.2 and row["first_seconds"] == 1.0  # the median
    keys = {c["key"] for c in bench_grid.COLUMNS}
    assert set(row) == keys


def test_sample_size_rows_compare_each_way_with_fixed_n():
    tolerance = certificates([0, 1, 2, 1], [0, 0, 0, 1], [0.3, 0.4, 0.0, 0.9], [5] * 4)
    cert = {"fixed": CERT, "tolerance": tolerance, "sequential": tolerance}
    seconds = {"fixed": 8.0, "tolerance": 4.0, "sequential": 1.0}
    rows = bench_sample_size.table_rows(Y, cert, seconds, 0.5, 0.01, 100)
    by_way = {r["way"]: r for r in rows}
    fixed, tol = by_way["fixed"], by_way["tolerance"]
    assert fixed["how"] == "n = 100" and tol["how"] == "radius_tolerance=0.01"
    assert by_way["sequential"]["how"] == "certify(X, radius=0.5)"
    assert fixed["seconds"] == 2.0 and tol["speedup"] == 2.0
    assert by_way["sequential"]["speedup"] == 8.0 and fixed["speedup"] == 1.0
    assert fixed["draws"] == 25.0 and tol["draws"] == 5.0
    assert fixed["certified_accuracy"] == 0.25 == certified_accuracy(Y, CERT, 0.5)
    assert tol["certified_accuracy"] == 0.0
    # "certified at 0.5" as fixed n decides it: all but the input at 0.6
    assert fixed["agree"] == 1.0 and tol["agree"] == 0.75
    assert fixed["mean_radius"] == pytest.approx(0.45)
    keys = {c["key"] for c in bench_sample_size.columns(0.5)}
    assert all(set(r) == keys for r in rows)

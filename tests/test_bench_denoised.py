"""The denoised-smoothing benchmarks' results tables (``bench_denoised.py``,
``bench_diffusion.py``): built from per-input outcomes exactly, the share of
the gap closed undefined where there is no gap, and quotable as the page
quotes them."""

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

pytest.importorskip("sklearn")
import _results  # noqa: E402
from bench_denoised import columns, paired, table_rows  # noqa: E402

RADII = [0, 0.5, 1.0]


def _outcomes(*counts, inputs=10):
    """Certified-correct flags per radius: the first ``count`` inputs."""
    return np.array([np.arange(inputs) < c for c in counts])


def _table():
    certified = {
        "as is": _outcomes(5, 2, 0),
        "stability": _outcomes(7, 6, 0),
        "noise": _outcomes(9, 6, 0),
    }
    seconds = {"as is": (0.0, 0.02), "stability": (3.0, 0.03), "noise": (2.0, 0.02)}
    rng = np.random.RandomState(0)
    intervals = paired(certified, RADII, ["stability"], "as is", "noise", 500, rng)
    return table_rows(
        lambda case: f"0.5 {case}", certified, seconds, RADII, "as is", intervals
    )


def test_the_rows_are_the_outcomes_means_and_the_gap_closed_their_ratio():
    rows, differences = _table()
    by_case = {row["case"]: row for row in rows}
    assert list(by_case) == ["0.5 as is", "0.5 stability", "0.5 noise"]
    stability = by_case["0.5 stability"]
    assert stability["certified_accuracy"] == [0.7, 0.6, 0.0]
    assert stability["cost"] == pytest.approx(1.5)
    at_0, at_half, at_1 = stability["gap_closed"]
    # (.7 - .5) / (.9 - .5) and (.6 - .2) / (.6 - .2)
    assert at_0["mean"] == pytest.approx(0.5) and at_half["mean"] == pytest.approx(1)
    assert at_0["low"] <= at_0["mean"] <= at_0["high"]
    assert at_1 == "no gap"  # nobody certified at radius 1: no gap to close
    assert by_case["0.5 as is"]["gap_closed"] == ""
    gains = {d["key"]: d for d in differences}
    assert set(gains) == {f"certified_accuracy[{r:g}]" for r in RADII}
    assert gains["certified_accuracy[0.5]"]["mean"] == pytest.approx(0.4)
    assert {(d["a"], d["b"]) for d in differences} == {("0.5 stability", "0.5 as is")}


def test_the_table_writes_renders_and_quotes(tmp_path):
    rows, differences = _table()
    record = _results.run_record(argv=["benchmarks/bench_denoised.py"])
    path = tmp_path / "digits.json"
    _results.record_table(
        path,
        "denoised",
        columns=columns(RADII, "as is"),
        rows=rows,
        differences=differences,
        record=record,
    )
    files = {"digits": _results.load_results(path)}
    labels, cells = _results.render_table(files["digits"]["tables"]["denoised"])
    assert labels[0] == "sigma, case" and cells[1][4] == "1.50x"
    assert cells[1][5].startswith("0.50 [") and cells[1][5].endswith("no gap")
    _, text = _results.evaluate(
        'digits denoised: row("0.5 stability").gap_closed[0.5] | .0%', files
    )
    assert text.startswith("100% [")
    value, _ = _results.evaluate(
        'digits denoised: difference("0.5 stability", "0.5 as is", '
        '"certified_accuracy[0.5]")',
        files,
    )
    assert value["mean"] == pytest.approx(0.4)

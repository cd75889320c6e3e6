"""The benchmarks' results files: written, merged, read back and quoted as the
Benchmarks page renders them (``benchmarks/_results.py``)."""

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import _results  # noqa: E402

COLUMNS = [
    {"key": "strategy", "label": "strategy"},
    {
        "key": "certified_accuracy",
        "label": "certified accuracy at 0 / .5",
        "format": ".3",
        "at": [0.0, 0.5],
    },
    {"key": "acr", "label": "ACR", "format": ".3"},
    {"key": "seconds", "label": "s/input", "format": ".3f"},
]
ROWS = [
    {
        "strategy": "cohen",
        "certified_accuracy": [0.95, 0.5024],
        "acr": 0.48049,
        "seconds": 0.0131,
    },
    {
        "strategy": "ancer",
        "certified_accuracy": [0.9518, 0.5],
        "acr": 1.12449,
        "seconds": 0.0443,
    },
]
DIFFERENCES = [
    {
        "a": "ancer",
        "b": "cohen",
        "key": "acr",
        "mean": 0.0043,
        "low": 0.0021,
        "high": 0.0052,
    },
]


def _record():
    return {
        "command": "python benchmarks/bench_quality.py --results-file F",
        "commit": "0" * 40,
        "dirty": False,
        "machine": {
            "cpu": "a CPU",
            "cores": 2,
            "gpu": None,
            "torch": "2",
            "torch_threads": 1,
            "python": "3",
            "load_average": [1.0],
        },
        "date": "2026-11-27 17:00 UTC",
    }


def _write(path, name="quality", rows=ROWS):
    return _results.record_table(
        path,
        name,
        columns=COLUMNS,
        rows=rows,
        record=_record(),
        settings={"n": 10_000},
        differences=DIFFERENCES,
    )


def test_a_table_reads_back_as_written(tmp_path):
    path = tmp_path / "digits.json"
    _write(path)
    data = _results.load_results(path)
    assert data["dataset"] == "digits"
    table = data["tables"]["quality"]
    assert table["rows"] == ROWS and table["columns"] == COLUMNS
    assert table["differences"] == DIFFERENCES
    assert table["settings"] == {"n": 10_000}
    assert table["command"] == _record()["command"]


def test_writing_a_table_keeps_the_files_other_tables(tmp_path):
    path = tmp_path / "digits.json"
    _write(path, "quality")
    _write(path, "ucan", rows=ROWS[:1])
    changed = [dict(ROWS[0], acr=0.5)]
    _write(path, "quality", rows=changed)  # replaced, not appended
    tables = _results.load_results(path)["tables"]
    assert list(tables) == ["quality", "ucan"]
    assert tables["quality"]["rows"] == changed
    assert tables["ucan"]["rows"] == ROWS[:1]


def test_a_row_that_does_not_fit_the_columns_is_refused(tmp_path):
    path = tmp_path / "digits.json"
    with pytest.raises(ValueError, match="a row has"):
        _write(path, rows=[{"strategy": "cohen", "acr": 0.4}])
    assert not path.exists()
    path.write_text(json.dumps({"tables": {"quality": {"rows": []}}}))
    with pytest.raises(ValueError, match="lacks"):
        _results.load_results(path)


def test_the_record_names_the_command_commit_machine_and_date(tmp_path):
    record = _results.run_record(
        argv=[str(ROOT / "benchmarks" / "bench_x.py"), "--n", "5"]
    )
    written = _results.record_table(
        tmp_path / "x.json", "t", columns=COLUMNS, rows=ROWS, record=record
    )["tables"]["t"]
    assert written["wall_seconds"] >= 0 and "_started" not in written
    assert len(written["machine"]["load_average_end"]) == 3
    assert record["command"] == "python benchmarks/bench_x.py --n 5"
    assert len(record["commit"]) == 40
    machine = record["machine"]
    assert machine["cores"] >= 1 and machine["torch_threads"] >= 1
    assert machine["cpu"] and machine["gpu"] is None


def test_formats():
    assert _results.format_value(0.48049) == ".480"
    assert _results.format_value(1.12449) == "1.124"
    assert _results.format_value(-0.0501, "+.3f") == "-0.050"
    assert _results.format_value(0.0131, ".3f") == "0.013"
    assert _results.format_value(0.6875, ".1%") == "68.8%"
    assert _results.format_value(4.377, ".1fx") == "4.4x"
    assert _results.format_value([0.95, 0.5024]) == ".950 .502"
    interval = {"mean": 0.0043, "low": -0.0021, "high": 0.0052}
    assert _results.format_value(interval, "+.3f") == "+0.004 [-0.002, +0.005]"


def test_the_rendered_table_is_the_rows_formatted(tmp_path):
    path = tmp_path / "digits.json"
    _write(path)
    labels, cells = _results.render_table(
        _results.load_results(path)["tables"]["quality"]
    )
    assert labels == ["strategy", "certified accuracy at 0 / .5", "ACR", "s/input"]
    assert cells == [
        ["cohen", ".950 .502", ".480", "0.013"],
        ["ancer", ".952 .500", "1.124", "0.044"],
    ]


def test_a_quote_evaluates_against_the_file(tmp_path):
    files = {"digits": _write(tmp_path / "digits.json")}

    def quote(text):
        return _results.evaluate(text, files)

    assert quote("digits quality: cohen.acr") == (0.48049, ".480")
    assert quote("digits quality: cohen.certified_accuracy[0.5] | .1%")[1] == "50.2%"
    value, text = quote(
        "digits quality: (ancer.seconds + cohen.seconds) / cohen.seconds | .1fx"
    )
    assert value == pytest.approx((0.0443 + 0.0131) / 0.0131) and text == "4.4x"
    assert quote('digits quality: row("ancer").acr | .2f')[1] == "1.12"
    assert quote('digits quality: difference("ancer", "cohen", "acr") | +.3f')[1] == (
        "+0.004 [+0.002, +0.005]"
    )
    for bad, match in [
        ("digits quality: rancer.acr", "no row"),
        ("digits quality: cohen.radius", "no column"),
        ("digits quality: cohen.certified_accuracy[0.25]", "no value at"),
        ("digits quality: cohen", "names a row"),
        ("digits other: cohen.acr", "no table"),
        ("digits quality: __import__('os')", "only row"),
        ("digits quality: cohen.acr if 1 else 0", "not allowed"),
        ('digits quality: difference("cohen", "ancer", "acr")', "no difference"),
        ("digits cohen.acr", "a quote is"),
    ]:
        with pytest.raises(ValueError, match=match):
            quote(bad)


def test_every_table_of_the_benchmarks_page_is_rendered_or_marked_hand_written():
    import re

    lines = (ROOT / "docs" / "benchmarks.rst").read_text().split("\n")
    marked, unmarked, tables = False, [], 0
    for i, line in enumerate(lines):
        if line.startswith(".. hand-written::"):
            marked = True
        elif line.startswith(".. results-table::"):
            tables += 1
        elif re.match(r"=+  ", line) and lines[i - 1] == "":  # a table starts
            if not marked:
                unmarked.append(i + 1)
            marked = False
            tables += 1
    assert tables > 20
    assert not unmarked, (
        f"tables neither rendered nor marked hand-written: lines {unmarked}"
    )


def test_every_results_table_names_each_row_once():
    """Quotes name a row by its first column (a second row of the same name
    would hide the first), and readers find it by the rendered cell: names
    unique either way, and an integer name shown as one (not ``1.000``)."""
    for path in sorted(_results.RESULTS.glob("*.json")):
        for name, table in _results.load_results(path)["tables"].items():
            key = table["columns"][0]["key"]
            names = [row[key] for row in table["rows"]]
            shown = [cell[0] for cell in _results.render_table(table)[1]]
            where = f"{path.name} {name}"
            assert len(set(map(str, names))) == len(names), f"{where}: names repeat"
            assert len(set(shown)) == len(shown), f"{where}: rows shown alike"
            for value, cell in zip(names, shown):
                if isinstance(value, int):
                    assert cell.replace(",", "") == str(value), f"{where}: {cell}"


def test_bench_memory_writes_both_tables_as_the_page_renders_them(
    tmp_path, monkeypatch
):
    import bench_memory

    path = tmp_path / "synthetic.json"
    script = str(ROOT / "benchmarks" / "bench_memory.py")
    for args in (["--size", "300", "--queries", "5"], ["--calls", "50", "100"]):
        argv = [script, *args, "--rank", "2", "--scan-up-to", "50"]
        monkeypatch.setattr(sys, "argv", [*argv, "--results-file", str(path)])
        bench_memory.main()
    tables = _results.load_results(path)["tables"]
    rows = tables["memory_queries"]["rows"]
    assert [row["entries"] for row in rows] == [300]
    assert rows[0]["scan_over_index"] == pytest.approx(
        rows[0]["scan_ms"] / rows[0]["index_ms"]
    )
    # the call beyond --scan-up-to was not scanned: an empty cell, not a time
    _, cells = _results.render_table(tables["memory_calls"])
    assert [c[0] for c in cells] == ["50", "100"]
    assert cells[0][2] != "" and cells[1][2] == ""
    assert "--scan-up-to 50" in tables["memory_calls"]["command"]


def test_bench_precision_refuses_one_results_file_for_two_tables(
    tmp_path, monkeypatch, capsys
):
    import bench_precision

    path = tmp_path / "digits.json"
    argv = ["bench_precision.py", "--device", "cpu", "--quality", "digits"]
    monkeypatch.setattr(sys, "argv", [*argv, "--results-file", str(path)])
    with pytest.raises(SystemExit) as raised:
        bench_precision.main()  # the speed table and the quality one
    assert raised.value.code == 2 and "takes one table" in capsys.readouterr().err
    assert not path.exists()


def test_a_table_stays_hand_written_only_for_a_reason_a_run_here_cannot_remove():
    """Every benchmark script writes a results file: a typed-in table says why
    no run here replaced it (a GPU, loads a run cannot choose, a quiet
    machine), never that its benchmark writes none."""
    import re

    page = (ROOT / "docs" / "benchmarks.rst").read_text()
    reasons = re.findall(r"^\.\. hand-written:: (.*)$", page, flags=re.M)
    assert reasons
    for reason in reasons:
        assert "writes no results file" not in reason, reason
    scripts = sorted((ROOT / "benchmarks").glob("bench_*.py"))
    writes = ("--results-file", "add_arguments(")
    silent = [s.name for s in scripts if not any(w in s.read_text() for w in writes)]
    assert not silent, f"benchmarks that write no results file: {silent}"

"""One results file per data set: what the benchmarks write and the docs quote.

``benchmarks/results/<dataset>.json`` holds named tables. A benchmark writes
(or replaces) its table with :func:`record_table`; the other tables of the
file are kept. Each table carries the figures as the run computed them (full
precision), the exact command, the git commit, the machine and the date, so
the Benchmarks page (``docs/_ext/results_tables.py``) renders it, prose
quotes its figures through :func:`evaluate` (the ``:result:`` role), and
``tests/test_readme.py`` checks the README's figures against it. Nothing in
a results file is typed in: a table that no benchmark wrote stays
hand-written on its page.

A file::

    {"dataset": "digits",
     "tables": {"quality": {
         "columns": [{"key": "strategy", "label": "strategy"},
                     {"key": "certified_accuracy", "label": "...",
                      "format": ".3", "at": [0.0, 0.25, 0.5, 0.75, 1.0]}, ...],
         "rows": [{"strategy": "cohen", "certified_accuracy": [...], ...}],
         "differences": [{"a": "ancer", "b": "cohen", "key": "acr",
                          "mean": ..., "low": ..., "high": ...}],
         "settings": {...}, "command": "python benchmarks/...",
         "commit": "...", "dirty": false, "machine": {...}, "date": "...",
         "wall_seconds": ...}}}

Formats (a column's ``format``, a quote's ``| spec``): ``.3`` is the
tables' style, three decimals without the leading zero below 1 (``.480``,
``1.124``); anything else is a Python format spec (``.3f``, ``.1%``,
``+.3f``), and a spec ending in ``x`` appends ``x`` (``.1fx`` gives
``4.4x``).
"""

import ast
import datetime
import json
import os
import platform
import re
import shlex
import subprocess
import sys
from pathlib import Path

__all__ = [
    "RESULTS",
    "add_arguments",
    "evaluate",
    "format_value",
    "load_results",
    "machine",
    "radii_column",
    "record_table",
    "render_table",
    "run_record",
    "write_table",
]

ROOT = Path(__file__).resolve().parent.parent
#: Where the results files live, one per data set.
RESULTS = ROOT / "benchmarks" / "results"
_TABLE_KEYS = ("columns", "rows", "command", "commit", "machine", "date")


# -- writing -------------------------------------------------------------------


def _cpu_model():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine(device="cpu"):
    """What a run's seconds depend on: CPU model and cores, the GPU of a
    ``cuda`` device, torch's version and threads, and the load average (the
    cores may be shared with other work)."""
    import torch

    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count()
    gpu = None
    if str(device).startswith("cuda") and torch.cuda.is_available():
        gpu = torch.cuda.get_device_name(torch.device(device))
    return {
        "cpu": _cpu_model(),
        "cores": cores,
        "gpu": gpu,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def _git(*args):
    try:
        return subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def run_record(device="cpu", argv=None):
    """The provenance of a run started now: its exact command, the commit
    (and whether the tree had changes), the machine and the date (UTC).
    Call it when the run starts; :func:`record_table` adds the end."""
    argv = sys.argv if argv is None else argv
    script = os.path.relpath(os.path.abspath(argv[0]), ROOT)
    return {
        "command": shlex.join(["python", script, *argv[1:]]),
        "commit": _git("rev-parse", "HEAD"),
        "dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "machine": machine(device),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime(
            "%Y-%m-%d %H:%M UTC"
        ),
        "_started": datetime.datetime.now(datetime.timezone.utc).timestamp(),
    }


def add_arguments(
    parser, table, where="benchmarks/results/<dataset>.json", default_name=None
):
    """``--results-file`` (``where``: the data set's file) and
    ``--results-table`` (default ``table``; None where the benchmark names
    the table from its run, as ``default_name`` says) of a benchmark that
    writes its table with :func:`record_table`; without ``--results-file`` it
    writes nothing."""
    parser.add_argument(
        "--results-file",
        default=None,
        help=f"the results file ({where}) to write the table into",
    )
    name = f" (default {default_name})" if default_name else ""
    parser.add_argument(
        "--results-table", default=table, help=f"the table's name in that file{name}"
    )


def radii_column(key, label, radii, spec=".3"):
    """A list-valued column: ``key`` at each of ``radii``, labelled ``label``
    then the radii as the tables write them (``0 / .25 / .5``)."""
    at = " / ".join(f"{r:g}".removeprefix("0") or "0" for r in radii)
    return {
        "key": key,
        "label": f"{label} {at}",
        "format": spec,
        "at": [float(r) for r in radii],
    }


def write_table(args, **table):
    """:func:`record_table` of ``table`` into ``--results-file`` as
    ``--results-table`` (the options :func:`add_arguments` adds), and say so."""
    data = record_table(args.results_file, args.results_table, **table)
    print(f"wrote table {args.results_table!r} of {args.results_file}")
    return data


def _check_table(name, table):
    missing = [k for k in _TABLE_KEYS if k not in table]
    if missing:
        raise ValueError(f"results table {name!r} lacks {missing}")
    keys = [c["key"] for c in table["columns"]]
    for row in table["rows"]:
        if set(row) != set(keys):
            raise ValueError(
                f"results table {name!r}: a row has {sorted(row)}, the columns "
                f"are {sorted(keys)}"
            )


def record_table(path, name, *, columns, rows, record, settings=None, differences=()):
    """Write table ``name`` into the results file ``path``, keeping its other
    tables (a table of the same name is replaced).

    Parameters
    ----------
    path : str or Path
        ``benchmarks/results/<dataset>.json``; made if missing.
    name : str
        The table's name within the file (``"quality"``).
    columns : list of dict
        ``{"key", "label"}`` and optionally ``"format"`` and ``"at"`` (the
        radii of a list-valued column), in display order.
    rows : list of dict
        One per table row, keyed by the columns' keys, values as computed.
    record : dict
        :func:`run_record` of the run, taken when it started.
    settings : dict, optional
        The run's settings (n, sigma, inputs...).
    differences : iterable of dict
        Paired intervals: ``a``, ``b`` (row names), ``key`` (column),
        ``mean``, ``low``, ``high``.
    """
    path = Path(path)
    data = load_results(path) if path.exists() else {"tables": {}}
    data["dataset"] = path.stem
    record = dict(record)
    started = record.pop("_started", None)
    if started is not None:
        now = datetime.datetime.now(datetime.timezone.utc).timestamp()
        record["wall_seconds"] = round(now - started, 1)
        # other work on shared cores moves a run's seconds: the load at its end
        record["machine"] = dict(
            record["machine"],
            load_average_end=[round(x, 2) for x in os.getloadavg()],
        )
    table = {
        "columns": list(columns),
        "rows": list(rows),
        "differences": list(differences),
        "settings": dict(settings or {}),
        **record,
    }
    _check_table(name, table)
    data["tables"][name] = table
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_suffix(".json.part")
    part.write_text(json.dumps(data, indent=1, default=_plain) + "\n")
    os.replace(part, path)
    return data


def _plain(value):
    """numpy scalars and arrays as JSON numbers and lists."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON")


# -- reading ---------------------------------------------------------------------


def load_results(path):
    """A results file, checked: every table has its columns, rows, command,
    commit, machine and date."""
    path = Path(path)
    if not path.suffix:  # a data set's name
        path = RESULTS / f"{path}.json"
    data = json.loads(Path(path).read_text())
    if not isinstance(data.get("tables"), dict):
        raise ValueError(f"{path}: no tables")
    for name, table in data["tables"].items():
        _check_table(name, table)
    return data


def format_value(value, spec=".3"):
    """``value`` in ``spec`` (see the module's docstring); a list item by
    item, separated by spaces; a string as it is."""
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)):
        return " ".join(format_value(v, spec) for v in value)
    if isinstance(value, dict):  # a difference with its interval
        return (
            f"{format_value(value['mean'], spec)} [{format_value(value['low'], spec)}, "
            f"{format_value(value['high'], spec)}]"
        )
    if spec.endswith("x"):
        return format_value(value, spec[:-1]) + "x"
    if re.fullmatch(r"\.\d+", spec):
        text = f"{value:{spec}f}"
        return re.sub(r"^(-?)0\.", r"\1.", text)
    return format(value, spec)


def render_table(table):
    """The table as strings: ``(labels, rows)``, each cell formatted."""
    columns = table["columns"]
    labels = [c["label"] for c in columns]
    cells = [
        [format_value(row[c["key"]], c.get("format", ".3")) for c in columns]
        for row in table["rows"]
    ]
    return labels, cells


class _Row:
    def __init__(self, table, row):
        self._columns = {c["key"]: c for c in table["columns"]}
        self._row = row

    def __getattr__(self, key):
        if key.startswith("_") or key not in self._row:
            raise ValueError(f"no column {key!r} (columns: {sorted(self._row)})")
        value = self._row[key]
        if isinstance(value, list):
            return _AtRadius(value, self._columns[key].get("at"))
        return value


class _AtRadius:
    def __init__(self, values, at):
        self.values, self.at = values, at

    def __getitem__(self, radius):
        if self.at is None or radius not in self.at:
            raise ValueError(f"no value at {radius!r} (at {self.at})")
        return self.values[self.at.index(radius)]


_ALLOWED = (
    ast.Expression,
    ast.BinOp,
    ast.UnaryOp,
    ast.Add,
    ast.Sub,
    ast.Mult,
    ast.Div,
    ast.USub,
    ast.Constant,
    ast.Name,
    ast.Load,
    ast.Attribute,
    ast.Subscript,
    ast.Call,
)


def evaluate(text, files=None):
    """The figure a quote names, from the results files.

    ``text`` is ``"<dataset> <table>: <expression> [| <format>]"``; the
    expression names rows by their first column (``ancer``, or
    ``row("ancer:compare_draws=0")``), columns as attributes, a list-valued
    column at a radius by subscript (``cohen.certified_accuracy[0.5]``), and
    a paired interval as ``difference("rancer", "ancer", "acr")``; ``+ - * /``
    and parentheses. Returns ``(value, formatted)``.

    ``files`` maps data set names to loaded files (read from
    ``benchmarks/results`` where absent).
    """
    head, sep, rest = text.partition(":")
    parts = head.split()
    if not sep or len(parts) != 2:
        raise ValueError(f"a quote is '<dataset> <table>: <expression>', not {text!r}")
    dataset, name = parts
    expression, _, spec = rest.partition("|")
    files = {} if files is None else files
    if dataset not in files:
        files[dataset] = load_results(dataset)
    tables = files[dataset]["tables"]
    if name not in tables:
        raise ValueError(f"{dataset} has no table {name!r} (tables: {sorted(tables)})")
    table = tables[name]
    first = table["columns"][0]["key"]
    rows = {str(r[first]): _Row(table, r) for r in table["rows"]}

    def row(label):
        if label not in rows:
            raise ValueError(f"{dataset} {name} has no row {label!r} ({sorted(rows)})")
        return rows[label]

    def difference(a, b, key):
        for d in table.get("differences", ()):
            if (d["a"], d["b"], d["key"]) == (a, b, key):
                return {k: d[k] for k in ("mean", "low", "high")}
        raise ValueError(f"{dataset} {name} has no difference {a} - {b} of {key}")

    # a quote may wrap across lines of its page
    tree = ast.parse(" ".join(expression.split()), mode="eval")
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED):
            raise ValueError(f"{type(node).__name__} is not allowed in {text!r}")
        if isinstance(node, ast.Call) and not (
            isinstance(node.func, ast.Name) and node.func.id in ("row", "difference")
        ):
            raise ValueError(f"only row() and difference() may be called: {text!r}")
    names = {"row": row, "difference": difference}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id not in names:
            names[node.id] = row(node.id)
    value = eval(compile(tree, text, "eval"), {"__builtins__": {}}, names)
    if isinstance(value, _Row):
        raise ValueError(f"{text!r} names a row, not a figure")
    if isinstance(value, _AtRadius):
        value = value.values
    return value, format_value(value, spec.strip() or ".3")

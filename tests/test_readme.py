"""The README stays true: its set-up commands, every Python block runs as
written, in order, printing the output the README shows beside it, and its
benchmark figures are those of the results files (``benchmarks/results``)."""

import contextlib
import io
import json
import re
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: Printed numbers depend on float reduction order (thread count, machine):
#: each must lie within this of the README's (the README says so).
TOLERANCE = 0.03

_BLOCK = re.compile(r"```(\w+)\n(.*?)\n```", re.DOTALL)
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d*)?(?:e[-+]?\d+)?")


def _readme_commands():
    text = (ROOT / "README.md").read_text()
    blocks = text.split("```bash\n")[1:3]
    return [b.split("\n```")[0].strip() for b in blocks]


def test_ci_runs_exactly_the_readme_test_command():
    main_job, test_command = _readme_commands()
    assert "smoothlearn" in main_job and "pytest" in test_command
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert test_command in ci


def readme_python_blocks(text=None):
    """``(code, shown_output)`` for each Python block of the README, in order:
    the output is the ``text`` block right after it (None where none is)."""
    text = (ROOT / "README.md").read_text() if text is None else text
    matches = list(_BLOCK.finditer(text))
    out = []
    for i, match in enumerate(matches):
        if match.group(1) != "python":
            continue
        shown = None
        if i + 1 < len(matches):
            after = matches[i + 1]
            between = text[match.end() : after.start()]
            if after.group(1) == "text" and not between.strip():
                shown = after.group(2)
        out.append((match.group(2), shown))
    return out


def _tokens(output):
    """Numbers as floats, everything else as words, whitespace dropped."""
    tokens = []
    for part in re.split(rf"({_NUMBER.pattern})", output):
        if _NUMBER.fullmatch(part):
            tokens.append(float(part))
        else:
            tokens.extend(part.split())
    return tokens


def outputs_agree(printed, shown, tolerance=TOLERANCE):
    """Whether ``printed`` reads as ``shown``: the same words in the same
    order, and each number within ``tolerance`` of the one shown."""
    a, b = _tokens(printed), _tokens(shown)
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if isinstance(x, float) != isinstance(y, float):
            return False
        if isinstance(x, float) and not abs(x - y) <= tolerance:
            return False
        if not isinstance(x, float) and x != y:
            return False
    return True


def test_the_comparison_reads_numbers_within_the_tolerance_only():
    assert outputs_agree(
        "[2 8 2] [0.74 0.48]\nACR: 0.5", "[2 8 2] [0.75 0.46]\nACR: 0.52"
    )
    assert not outputs_agree("ACR: 0.5", "ACR: 0.6")
    assert not outputs_agree("ACR: 0.5", "AC R: 0.5")
    assert not outputs_agree("[0.74 0.48]", "[0.74 0.48 0.8]")
    assert not outputs_agree("input [0.1]", "model [0.1]")


def test_every_readme_python_block_runs_and_prints_what_the_readme_shows():
    blocks = readme_python_blocks()
    assert len(blocks) >= 4
    assert all(shown is not None for _, shown in blocks), "a block without output"
    namespace = {"__name__": "__readme__"}
    for number, (code, shown) in enumerate(blocks, 1):
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the README says which warn
            exec(compile(code, f"README.md python block {number}", "exec"), namespace)
        assert outputs_agree(printed.getvalue(), shown), (
            f"README python block {number} printed\n{printed.getvalue()}\n"
            f"where the README shows\n{shown}"
        )


def test_the_units_warning_the_readme_quotes_is_given():
    from smoothlearn.pipeline import InputUnitsWarning

    text = (ROOT / "README.md").read_text()
    assert "InputUnitsWarning" in text
    pytest.importorskip("sklearn")
    from sklearn.datasets import load_breast_cancer
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    from smoothlearn import SmoothedClassifier
    from smoothlearn.pipeline import make_pipeline

    X, y = load_breast_cancer(return_X_y=True)
    X_train, X_test, y_train, _ = train_test_split(X, y, random_state=0)
    pipe = make_pipeline(
        StandardScaler(), SmoothedClassifier(sigma=0.5, n=500, max_epochs=5)
    ).fit(X_train, y_train)
    with pytest.warns(InputUnitsWarning, match="feature 19,"):
        pipe.certify(X_test[:10])


if __name__ == "__main__":  # print what each block prints, to update the README
    for code, _ in readme_python_blocks():
        exec(compile(code, "README.md", "exec"), globals())
        print("-" * 40)


def _figures(text):
    """The numbers of ``text`` as written (``81.8%``, ``3.3x``, ``0.480``)."""
    return re.findall(r"(?<![\w.])\d[\d,]*(?:\.\d+)?(?:%|x(?!\d))?", text)


def _quotes(figure, numbers):
    """Whether ``figure`` rounds one of ``numbers`` at its own precision
    (a percentage also as a share: ``81.8%`` quotes ``.818``)."""
    plain = figure.rstrip("%x").replace(",", "")
    places = len(plain.split(".")[1]) if "." in plain else 0
    wanted = [(float(plain), places)]
    if figure.endswith("%"):
        wanted.append((float(plain) / 100, places + 2))
    return any(
        abs(x - value) <= 0.5 * 10.0**-digits + 1e-12
        for value, digits in wanted
        for x in numbers
    )


#: Where each passage of the README quoting benchmarks takes its figures
#: from: ``(start, end, results tables, hand-written)``. A results table
#: (``"<dataset> <table>"`` of ``benchmarks/results``) gives its cells
#: (seconds aside), its intervals and its settings; a cost ratio (``5.4x``)
#: must be one the docs quote from it with ``:result:`` in an ``x`` format.
#: Hand-written: the Benchmarks page's own text (its tables measured on a GPU
#: or too long to re-run, which no results file holds yet), quotes and
#: rendered tables excluded.
README_SOURCES = [
    ("| `cohen` (default)", "\n", ["digits quality"], False),
    ("| `isotropic_dd`", "\n", ["mnist_slice quality"], False),
    ("| `ancer`", ", 5.3x on a CNN", ["mnist_slice quality"], False),
    # Fashion-MNIST's figures: bench_memory_shrink's 200 images on one CPU thread
    ("5.3x on a CNN", "\n", ["fashion_mnist memory"], False),
    ("| `rancer`, `rddrs`", "\n", ["mnist_slice quality"], False),
    # ancer's memory on 200 Fashion-MNIST images; rancer's hand-written table
    # and an H200's seconds
    ("On images, after the memory", "\n\n", ["fashion_mnist memory"], True),
    # Fashion-MNIST on an H200
    ("On\nFashion-MNIST (the built-in CNN trained clean", "\n\n", [], True),
    # threads: bench_n_jobs.py's run on two shared cores
    (
        "On a small or shared machine",
        'user guide\'s "Speed")',
        ["digits n_jobs"],
        False,
    ),
    # bf16 against fp32: bench_precision.py's quality and speed runs
    (
        '`precision="bf16"` runs',
        '"Speed")',
        ["digits precision_quality", "synthetic precision_speed"],
        False,
    ),
    # the diffusion denoiser on the MNIST slice, two CPU cores
    ("trained here certified", "\n\n", ["mnist_slice diffusion"], False),
]
#: Figures of those passages that quote no measurement.
NOT_FIGURES = {"8x8": "the data's shape", "| 1x |": "cohen's cost against itself"}
_QUOTE = re.compile(r":result:`([^`]*)`")


def _numbers(values):
    flat = []
    for v in values:
        if isinstance(v, dict):  # an interval
            flat += [v["mean"], v["low"], v["high"]]
        else:
            flat.extend(v if isinstance(v, list) else [v])
    return [
        float(v)
        for v in flat
        if isinstance(v, (int, float)) and not isinstance(v, bool)
    ]


def _sources():
    """``{"<dataset> <table>": {"figures": [...], "ratios": [...]}}`` from the
    results files and the docs' quotes of them, and the hand-written numbers
    of the Benchmarks page."""
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import _results

    numbers, files = {}, {}
    for path in sorted(_results.RESULTS.glob("*.json")):
        files[path.stem] = _results.load_results(path)
        for name, table in files[path.stem]["tables"].items():
            values = [
                v for row in table["rows"] for k, v in row.items() if k != "seconds"
            ]
            values += table.get("differences", []) + list(table["settings"].values())
            numbers[f"{path.stem} {name}"] = {"figures": _numbers(values), "ratios": []}
    pages = "\n".join(p.read_text() for p in (ROOT / "docs").glob("*.rst"))
    for text in _QUOTE.findall(pages):
        value, _ = _results.evaluate(text, files)
        key = " ".join(text.partition(":")[0].split())
        spec = text.partition("|")[2].strip()
        if spec.endswith("x"):
            numbers[key]["ratios"].append(value)
        elif ".seconds" not in text:
            numbers[key]["figures"] += _numbers([value])
    page = (ROOT / "docs" / "benchmarks.rst").read_text()
    page = _QUOTE.sub("", page)
    hand_written = [
        float(t.replace(",", ""))
        for t in re.findall(r"(?<![\w])\.?\d[\d,]*(?:\.\d+)?", page)
    ]
    return numbers, hand_written


def _table_rows(dataset, table="quality"):
    return json.loads(
        (ROOT / "benchmarks" / "results" / f"{dataset}.json").read_text()
    )["tables"][table]["rows"]


def test_the_readmes_figures_are_the_results_files():
    text = (ROOT / "README.md").read_text()
    numbers, hand_written = _sources()
    quoted = 0
    for start, end, tables, page in README_SOURCES:
        passage = text[text.index(start) :]
        passage = passage[: passage.index(end, len(start))]
        for figure in NOT_FIGURES:
            passage = passage.replace(figure, "")
        figures = _figures(passage)
        quoted += len(figures)
        missing = []
        for figure in figures:
            kind = "ratios" if figure.endswith("x") else "figures"
            allowed = [x for name in tables for x in numbers[name][kind]]
            if not _quotes(figure, allowed + (hand_written if page else [])):
                missing.append(figure)
        assert not missing, (
            f"README figures {missing} in {start!r} are not in {tables}"
            + (" nor hand-written on the Benchmarks page" if page else "")
        )
    assert quoted > 30


def test_the_readme_check_can_fail():
    numbers, _ = _sources()
    digits = numbers["digits quality"]["figures"]
    cohen = next(r for r in _table_rows("digits") if r["strategy"] == "cohen")
    # cohen's ACR on digits is quoted; the figure the pages disagreed on is not
    assert _quotes(f"{cohen['acr']:.2f}", digits) and not _quotes("83.2%", digits)
    assert not _quotes("83.2%", [0.818, 0.693]) and _quotes("81.8%", [0.818])
    assert _figures("on 8x8 digits 4.4x, 81.8% and 1,000") == [
        "8",
        "4.4x",
        "81.8%",
        "1,000",
    ]

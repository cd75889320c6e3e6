"""Sphinx glue for the benchmarks' results files (``benchmarks/_results.py``).

``.. results-table:: digits quality`` renders table ``quality`` of
``benchmarks/results/digits.json``, then the command that wrote it and the
machine, commit and date it ran on.

``:result:`digits quality: ancer.acr``` quotes one figure of that table
(``| .1%`` after the expression picks the format; see
:func:`_results.evaluate`).

``.. hand-written:: <why>`` marks a table typed in from a run that no
results file holds yet (measured on a GPU, or too long to re-run), and says
so on the page.
"""

import sys
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import Directive

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import _results  # noqa: E402


def _table(labels, cells):
    table = nodes.table(classes=["results-table"])
    group = nodes.tgroup(cols=len(labels))
    table += group
    for i, label in enumerate(labels):
        width = max([len(label)] + [len(texts[i]) for texts in cells])
        group += nodes.colspec(colwidth=width)

    def row(texts):
        out = nodes.row()
        for text in texts:
            out += nodes.entry("", nodes.paragraph(text=text))
        return out

    head = nodes.thead()
    head += row(labels)
    body = nodes.tbody()
    for texts in cells:
        body += row(texts)
    group += head
    group += body
    return table


def provenance(table):
    """One line: where, when and from which commit the table was written."""
    m = table["machine"]
    threads = m["torch_threads"]
    where = f"{m['cpu']} ({m['cores']} cores visible, {threads} torch thread"
    where += "s" if threads != 1 else ""
    load = m.get("load_average")
    if load:
        where += f", load average {load[0]:.1f} at the start"
        end = m.get("load_average_end")
        if end:
            where += f" and {end[0]:.1f} at the end"
    where += ")"
    if m.get("gpu"):
        where = f"{m['gpu']}, {where}"
    commit = (table["commit"] or "unknown")[:10]
    if table.get("dirty"):
        commit += " with uncommitted changes"
    line = (
        f"Written by this command on {table['date']}: commit {commit}, "
        f"{where}, torch {m['torch']}"
    )
    if table.get("wall_seconds") is not None:
        line += f", {table['wall_seconds']:.0f} s in all"
    resumed = table.get("settings", {}).get("results_read_from_earlier_runs")
    if resumed:
        line += (
            f"; {resumed} of its strategy-input results were certified by an "
            "earlier run of the command, read back from its --results folder"
        )
    return line + "."


class ResultsTable(Directive):
    """``.. results-table:: <dataset> <table>``"""

    required_arguments = 2
    has_content = False

    def run(self):
        dataset, name = self.arguments
        path = _results.RESULTS / f"{dataset}.json"
        env = self.state.document.settings.env
        env.note_dependency(str(path))
        try:
            table = _results.load_results(path)["tables"][name]
        except (OSError, ValueError, KeyError) as error:
            raise self.error(f"results-table {dataset} {name}: {error!r}")
        labels, cells = _results.render_table(table)
        line = nodes.paragraph(text=provenance(table))
        command = nodes.literal_block(table["command"], table["command"])
        return [_table(labels, cells), line, command]


def result_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    """``:result:`<dataset> <table>: <expression> [| <format>]```"""
    env = inliner.document.settings.env
    files = env.temp_data.setdefault("results_files", {})
    try:
        _, formatted = _results.evaluate(text, files)
    except (OSError, ValueError, KeyError, SyntaxError, ZeroDivisionError) as error:
        message = inliner.reporter.error(f":result:`{text}`: {error}", line=lineno)
        return [inliner.problematic(rawtext, rawtext, message)], [message]
    dataset = text.split()[0]
    env.note_dependency(str(_results.RESULTS / f"{dataset}.json"))
    return [nodes.Text(formatted)], []


class HandWritten(Directive):
    """``.. hand-written:: <why no results file holds it>``"""

    required_arguments = 1
    final_argument_whitespace = True

    def run(self):
        text = (
            "*Hand-written*: the table below was typed in from its run, not "
            f"rendered from a results file ({self.arguments[0]})."
        )
        inline, messages = self.state.inline_text(text, self.lineno)
        return [nodes.paragraph("", "", *inline, classes=["hand-written"]), *messages]


def setup(app):
    app.add_directive("results-table", ResultsTable)
    app.add_directive("hand-written", HandWritten)
    app.add_role("result", result_role)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

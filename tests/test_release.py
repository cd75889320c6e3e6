"""What a release needs beside the code: one version, a changelog entry for it,
a license, and a docs page naming every benchmark script."""

import importlib.metadata
import re
from pathlib import Path

import pytest

import smoothlearn

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parent.parent


def test_the_version_is_single_sourced():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "version" not in project and "version" in project["dynamic"]
    # the installed metadata was built from the same __version__
    assert importlib.metadata.version("smoothlearn") == smoothlearn.__version__


def test_the_changelog_names_this_version_first():
    text = (ROOT / "CHANGELOG.md").read_text()
    releases = re.findall(r"^## \[([^\]]+)\]", text, flags=re.MULTILINE)
    assert releases and releases[0] in ("Unreleased", smoothlearn.__version__)
    assert smoothlearn.__version__ in releases


def test_the_declared_license_ships():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "BSD-3-Clause"
    assert project["license-files"] == ["LICENSE"]
    assert "BSD 3-Clause License" in (ROOT / "LICENSE").read_text()


def test_every_benchmark_script_is_named_by_a_docs_page():
    pages = "\n".join(p.read_text() for p in (ROOT / "docs").glob("*.rst"))
    scripts = sorted(
        p.name
        for p in (ROOT / "benchmarks").glob("*.py")
        if not p.name.startswith("_")  # helpers the scripts import
    )
    assert scripts
    unnamed = [name for name in scripts if f"benchmarks/{name}" not in pages]
    assert not unnamed, f"no docs page names {unnamed}"


def test_every_results_file_is_written_by_a_benchmark_a_page_names():
    import shlex
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import _results

    pages = "\n".join(p.read_text() for p in (ROOT / "docs").glob("*.rst"))
    rendered = set(
        re.findall(r"^\.\. results-table:: *(\S+) +(\S+) *$", pages, re.MULTILINE)
    )
    files = sorted(_results.RESULTS.glob("*.json"))
    assert files
    for path in files:
        tables = _results.load_results(path)["tables"]
        assert tables, path
        for name, table in tables.items():
            where = f"{path.name}, table {name!r}"
            words = shlex.split(table["command"])
            assert words[0] == "python" and words[1].startswith("benchmarks/"), where
            script = words[1]
            assert (ROOT / script).is_file(), f"{where}: no {script}"
            assert script in pages, f"{where}: no docs page names {script}"
            # the benchmark itself wrote this file, under this table's name
            i = words.index("--results-file")
            assert words[i + 1] == f"benchmarks/results/{path.name}", where
            if "--results-table" in words:
                assert words[words.index("--results-table") + 1] == name, where
            assert table["commit"] and table["machine"]["cpu"], where
            assert (path.stem, name) in rendered, f"no page renders {where}"

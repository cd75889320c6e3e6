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

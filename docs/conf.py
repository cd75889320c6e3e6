"""Sphinx configuration of smoothlearn's documentation.

Build: ``python -m sphinx -W -b html docs docs/_build/html``. The gallery runs
the examples in their fast mode; ``-D plot_gallery=0`` renders them without
running (what the test suite does).
"""

import os
import shutil
import sys

sys.path.insert(0, os.path.abspath(".."))
sys.path.insert(0, os.path.abspath("_ext"))  # results_tables
# autosummary's stubs are build output: stale ones (a renamed function) would
# fail the build, so each build writes them afresh
shutil.rmtree(os.path.join(os.path.dirname(__file__), "generated"), ignore_errors=True)
os.environ.setdefault("SMOOTHLEARN_EXAMPLES_FAST", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

import smoothlearn  # noqa: E402

project = "smoothlearn"
author = "the smoothlearn developers"
copyright = "2026, the smoothlearn developers"
release = smoothlearn.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.intersphinx",
    "sphinx.ext.mathjax",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
    "results_tables",  # tables and figures from benchmarks/results/*.json
]

autosummary_generate = True
autodoc_default_options = {"members": True, "inherited-members": False}
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
exclude_patterns = ["_build", "auto_examples/*.ipynb", "auto_examples/*.py"]
html_theme = "alabaster"
html_static_path = []
templates_path = ["_templates"]

intersphinx_mapping = {}  # offline: no inventories fetched

sphinx_gallery_conf = {
    "examples_dirs": "../examples",
    "gallery_dirs": "auto_examples",
    "filename_pattern": r".*\.py",
    "download_all_examples": False,
    "within_subsection_order": "FileNameSortKey",
}

suppress_warnings = ["config.cache"]


def skip_foreign_members(app, what, name, obj, skip, options):
    """Document smoothlearn's own members only (not scikit-learn's generated
    ``set_*_request`` methods or inherited mixin methods)."""
    if name.startswith("set_") and name.endswith("_request"):
        return True
    module = getattr(obj, "__module__", None) or ""
    if callable(obj) and module and not module.startswith("smoothlearn"):
        return True
    return None


def setup(app):
    app.connect("autodoc-skip-member", skip_foreign_members)

"""The documentation builds, warnings as errors, with a page for every public name.

The gallery is rendered without running the examples (``plot_gallery=0``);
``tests/test_examples.py`` runs them.
"""

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
MODULES = (
    "smoothlearn",
    "smoothlearn.estimators",
    "smoothlearn.regions",
    "smoothlearn.scale",
    "smoothlearn.geometry",
    "smoothlearn.strategies",
    "smoothlearn.training",
    "smoothlearn.noise",
    "smoothlearn.bounds",
    "smoothlearn.banks",
    "smoothlearn.counting",
    "smoothlearn.blocks",
    "smoothlearn.passes",
    "smoothlearn.certify",
    "smoothlearn.first_layer",
    "smoothlearn.denoisers",
    "smoothlearn.metrics",
    "smoothlearn.inspection",
    "smoothlearn.datasets",
)
#: Public names without a page of their own, and why.
UNDOCUMENTED = {
    "__version__": "a string",
    "CertificateScorer": "deprecated: make_certificate_scorer",
}


def _public_names():
    names = set()
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            obj = getattr(module, name)
            if name.isupper() or name in UNDOCUMENTED:
                continue  # constants (registries, chunk sizes)
            names.add(obj.__name__)
    return names


def test_docs_build_with_a_page_for_every_public_name(tmp_path):
    pytest.importorskip("sphinx")
    pytest.importorskip("numpydoc")
    pytest.importorskip("sphinx_gallery")
    out = tmp_path / "html"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sphinx",
            "-W",
            "--keep-going",
            "-q",
            "-b",
            "html",
            "-D",
            "plot_gallery=0",
            "-d",
            str(tmp_path / "doctrees"),
            str(DOCS),
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-5000:]
    # a page per object, named module.name
    documented = {p.stem.rpartition(".")[2] for p in (out / "generated").glob("*.html")}
    missing = sorted(_public_names() - documented)
    assert not missing, missing
    assert (out / "user_guide.html").exists()
    assert (out / "auto_examples" / "index.html").exists()

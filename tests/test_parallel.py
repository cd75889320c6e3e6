"""n_jobs, dask, and resumable certification give the same certificates."""

import json
import signal
import subprocess
import sys
import time

import joblib
import numpy as np
import pytest

from smoothlearn import MemoryCertifier, SmoothedClassifier
from smoothlearn.certify import SmoothingTask
from smoothlearn.metrics import assert_certificates_equal
from smoothlearn.strategies import IsotropicDD

from ._factories import fresh_copy


def _same(a, b):
    assert_certificates_equal(a, b)


#: What ``n_jobs`` guarantees (the user guide, "Reproducibility and seeds"):
#: workers run with other thread counts than the main process, which changes
#: the float32 reduction order inside a data-dependent strategy's
#: optimisation, so its scales may differ in the last bits; labels,
#: abstentions and vote counts do not change, and the certificates before the
#: memory agree to this relative tolerance. The memory's joint step then runs
#: once on them; its choices (a slab's direction, cut or cap) are discrete, so
#: it may carry an ulp further, and what holds exactly is that its answer is
#: the joint step of those certificates.
THREADS_RTOL = 1e-4


def _same_across_workers(a, b):
    assert_certificates_equal(a, b, rtol=THREADS_RTOL)


def test_n_jobs_2_equals_n_jobs_1(fitted_isotropic_dd, digits):
    X, _ = digits
    raw = {}
    for n_jobs in (1, 2):
        clf = fresh_copy(fitted_isotropic_dd).set_params(n_jobs=n_jobs)
        with pytest.warns(UserWarning, match="memory"):
            raw[n_jobs] = clf.set_params(memory=None).certify(X[400:600])
        remembered = clf.set_params(memory="auto").certify(X[400:600])
        # the memory runs once, after the workers: exactly its joint step
        _same(remembered, MemoryCertifier().fit_transform(raw[n_jobs]))
    _same_across_workers(raw[1], raw[2])


def test_every_method_runs_blocks_on_workers_with_progress(
    fitted_isotropic_dd, digits, capsys
):
    # predict_proba and noise_parameters share certify's block driver: the
    # same answers on 2 workers (up to float rounding) and a progress bar
    X, _ = digits
    one = fresh_copy(fitted_isotropic_dd).set_params(n_jobs=1)
    two = fresh_copy(fitted_isotropic_dd).set_params(n_jobs=2, verbose=1)
    np.testing.assert_allclose(
        one.predict_proba(X[400:530]), two.predict_proba(X[400:530]), atol=0.01
    )
    assert "/130 [" in capsys.readouterr().err
    for a, b in zip(one.noise_parameters(X[400:530]), two.noise_parameters(X[400:530])):
        np.testing.assert_allclose(a, b, rtol=THREADS_RTOL)
    assert "/130 [" in capsys.readouterr().err


def test_dask_local_cluster_gives_identical_certificates(fitted_isotropic_dd, digits):
    # what a cluster of one worker per device runs (user guide, "Many
    # devices"): 1 and 2 workers give n_jobs=1's certificates, and the
    # memory's joint step runs once over the whole call, after the workers
    distributed = pytest.importorskip("distributed")
    X, _ = digits
    reference = fresh_copy(fitted_isotropic_dd).set_params(n_jobs=1)
    reference = reference.certify(X[400:560])
    on_dask = {}
    for workers in (1, 2):
        with (
            distributed.LocalCluster(
                n_workers=workers,
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
            ) as cluster,
            distributed.Client(cluster),
        ):
            with joblib.parallel_config(backend="dask"):
                clf = fresh_copy(fitted_isotropic_dd).set_params(n_jobs=-1)
                with pytest.warns(UserWarning, match="memory"):
                    raw = clf.set_params(memory=None).certify(X[400:560])
                on_dask[workers] = clf.set_params(memory="auto").certify(X[400:560])
        _same(on_dask[workers], MemoryCertifier().fit_transform(raw))
        _same_across_workers(reference, on_dask[workers])
    _same_across_workers(on_dask[1], on_dask[2])


def test_checkpoint_resumes_without_recomputing(
    fitted_isotropic_dd, digits, tmp_path, monkeypatch
):
    X, _ = digits
    path = tmp_path / "run.jsonl"
    reference = fresh_copy(fitted_isotropic_dd).certify(X[400:600])
    full = fresh_copy(fitted_isotropic_dd).certify(X[400:600], checkpoint=path)
    _same(reference, full)
    lines = path.read_text().splitlines()
    assert len(lines) == 1 + 200
    # cut the log as a kill would, mid-block and mid-line
    path.write_text("\n".join(lines[: 1 + 100]) + "\n" + lines[101][:20])
    resumed_clf = fresh_copy(fitted_isotropic_dd)
    calls = []
    original = SmoothingTask.prepare

    def counting(task, X_block, key):
        calls.append(len(X_block))
        return original(task, X_block, key)

    monkeypatch.setattr(SmoothingTask, "prepare", counting)
    resumed = resumed_clf.certify(X[400:600], checkpoint=path)
    _same(reference, resumed)
    assert sum(calls) == 200 - 64  # the first whole block came from the log
    assert resumed_clf.memory_.n_seen_ == 200


def test_checkpoint_of_another_run_is_refused(fitted_isotropic_dd, digits, tmp_path):
    X, _ = digits
    path = tmp_path / "run.jsonl"
    fresh_copy(fitted_isotropic_dd).certify(X[400:470], checkpoint=path)
    other = fresh_copy(fitted_isotropic_dd).set_params(n=500)
    with pytest.raises(ValueError, match="another run"):
        other.certify(X[400:470], checkpoint=path)
    # changed inputs are recomputed, not reused
    changed = X[400:470].copy()
    changed[3] += 0.01
    header = json.loads(path.read_text().splitlines()[0])
    out = fresh_copy(fitted_isotropic_dd).certify(changed, checkpoint=path)
    assert len(out) == 70 and header["key"] == 0


_RUN = """
import sys, joblib
from smoothlearn.datasets import load_dataset
clf = joblib.load(sys.argv[1])
X = load_dataset("digits").X_test[:300]
cert = clf.certify(X, checkpoint=sys.argv[2])
joblib.dump(cert, sys.argv[3])
"""


def test_kill_and_resume_in_a_subprocess(digits, tmp_path):
    X, y = digits
    clf = SmoothedClassifier(
        strategy=IsotropicDD(n_iter=30, n_draws=64),
        n=20_000,
        n0=100,
        module__hidden_units=(64,),
        max_epochs=3,
        random_state=0,
    ).fit(X[:500], y[:500])
    model = tmp_path / "model.joblib"
    joblib.dump(clf, model)
    log = tmp_path / "run.jsonl"
    args = [sys.executable, "-c", _RUN, str(model), str(log)]
    proc = subprocess.Popen(args + [str(tmp_path / "killed.joblib")])
    deadline = time.time() + 120
    while time.time() < deadline:
        if log.exists() and len(log.read_text().splitlines()) >= 1 + 64:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done_before = len(log.read_text().splitlines()) - 1
    assert 64 <= done_before < 300, done_before
    subprocess.run(args + [str(tmp_path / "resumed.joblib")], check=True, timeout=300)
    subprocess.run(
        [
            sys.executable,
            "-c",
            _RUN,
            str(model),
            str(tmp_path / "fresh.jsonl"),
            str(tmp_path / "fresh.joblib"),
        ],
        check=True,
        timeout=300,
    )
    resumed = joblib.load(tmp_path / "resumed.joblib")
    fresh = joblib.load(tmp_path / "fresh.joblib")
    _same(fresh, resumed)

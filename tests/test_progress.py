"""Progress that moves: the bar of a long call advances per forward pass.

Before, it moved once per block of 64 inputs, so a user certifying 64 inputs
at n = 100,000 saw 0% until the end. The bar now moves as draws are counted,
so the remaining time is estimated from the first inputs; the certificates
do not depend on it.
"""

import numpy as np
import pytest

from smoothlearn import blocks

from ._factories import fast_classifier


def _data():
    rng = np.random.RandomState(0)
    X = rng.randn(80, 4).astype(np.float32)
    return X, (X[:, 0] > 0).astype(int)


@pytest.fixture
def bar_positions(monkeypatch):
    """Every position the bar of a run_blocks call is set to, in order."""
    seen = []
    show = blocks._DrawProgress._show

    def record(self, position):
        show(self, position)
        seen.append(float(self.bar.n))

    monkeypatch.setattr(blocks._DrawProgress, "_show", record)
    return seen


@pytest.mark.parametrize("method", ["certify", "predict", "predict_proba"])
def test_the_bar_moves_inside_a_block_and_ends_at_every_input(bar_positions, method):
    X, y = _data()
    clf = fast_classifier(n=2000, batch_size=200).fit(X, y)
    quiet = getattr(clf, method)(X[:50])
    clf.set_params(verbose=1)
    loud = getattr(clf, method)(X[:50])
    # one block of 50 inputs: the bar moved many times before it ended
    inside = [p for p in bar_positions if p < 50]
    assert len(set(inside)) > 20
    assert np.all(np.diff(bar_positions) >= 0) and bar_positions[-1] == 50
    # the first positions come from the first draws: an estimate of the time
    # left exists long before the block ends
    assert 0 < bar_positions[0] < 5
    if method == "certify":
        np.testing.assert_array_equal(quiet.radius, loud.radius)
        np.testing.assert_array_equal(quiet.label, loud.label)
    else:
        np.testing.assert_array_equal(quiet, loud)


def test_no_draw_progress_without_verbose_or_on_workers(bar_positions):
    X, y = _data()
    clf = fast_classifier(n=2000, batch_size=200).fit(X, y)
    clf.certify(X[:10])
    assert bar_positions == []
    blocks.report_draws(5, 100)  # nothing runs: a no-op
    assert bar_positions == []


def test_progress_of_a_checkpoint_resume_starts_at_the_finished_inputs(
    bar_positions, tmp_path
):
    X, y = _data()
    clf = fast_classifier(n=1000, batch_size=200).fit(X, y)
    log = tmp_path / "log.jsonl"
    clf.certify(X[:64], checkpoint=log)
    clf.set_params(verbose=1)
    clf.certify(X, checkpoint=log)  # the first block is read back
    assert bar_positions[0] > 64 and bar_positions[-1] == 80


def test_a_bar_keeps_ticking_and_names_the_phase_without_forward_passes(
    monkeypatch, capsys
):
    # a block that counts no draws for a while (a strategy choosing its
    # scales, a worker's block) still redraws the bar with its elapsed time,
    # and says what it is doing
    import threading
    import time

    monkeypatch.setattr(blocks, "TICK_SECONDS", 0.05)
    redraws = []

    def slow(X_block, key):
        blocks.report_phase("choosing scales")  # a no-op without a bar
        time.sleep(0.4)
        progress = blocks._running.progress
        if progress is not None:
            redraws.append(progress.bar.postfix)
        blocks.report_phase(None)
        return None

    X = np.zeros((10, 3), dtype=np.float32)
    refresh = blocks.tqdm.refresh
    counted = []

    def counting_refresh(self, *a, **k):
        # the ticker's redraws: from its own thread, not the one working
        if threading.current_thread() is not threading.main_thread():
            counted.append(time.perf_counter())
        return refresh(self, *a, **k)

    monkeypatch.setattr(blocks.tqdm, "refresh", counting_refresh)
    blocks.run_blocks(slow, X, 0, verbose=1, draws_per_input=5)
    assert redraws == ["choosing scales"]
    assert len(counted) >= 4  # about one per tick of the 0.4 s block
    assert "choosing scales" in capsys.readouterr().err
    # no thread left behind, and no bar without verbose
    counted.clear()
    blocks.run_blocks(slow, X, 0, verbose=0, draws_per_input=5)
    assert counted == [] and redraws == ["choosing scales"]

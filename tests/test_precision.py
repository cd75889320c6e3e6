"""precision= and compile=: the base classifier is the network at that
arithmetic, in every pass of every call, and another smoothing for the memory,
the checkpoint and the record."""

import copy

import numpy as np
import pytest
import torch
from torch import nn

from smoothlearn import SmoothedClassifier
from smoothlearn.banks import ESTIMATION, NoiseBank
from smoothlearn.counting import count_classes
from smoothlearn.network import FlatInputNetwork, network_arithmetic
from smoothlearn.noise import get_noise
from smoothlearn.scale import Scale
from smoothlearn.strategies import IsotropicDD

from ._factories import fresh_copy


def _mlp(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(64, 48), nn.ReLU(), nn.Linear(48, 32), nn.ReLU(), nn.Linear(32, 10)
    )


class _ExplicitCopy(nn.Module):
    """``module`` with its weights stored in ``dtype``, fed ``dtype`` inputs:
    what autocast to ``dtype`` computes for Linear and ReLU, written out."""

    def __init__(self, module, dtype):
        super().__init__()
        self.inner = copy.deepcopy(module).to(dtype)
        self.dtype = dtype

    def forward(self, x):
        return self.inner(x.to(self.dtype)).float()

    def smoothlearn_first_linear(self):
        return None  # the plain path, as at reduced precision


def _counts(network, X, scale):
    bank = NoiseBank(7, ESTIMATION, get_noise("gaussian"), X.shape[1])
    return count_classes(network, X, scale, bank, 3000, batch_size=500)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_reduced_precision_counts_are_those_of_the_network_at_that_precision(
    digits, dtype
):
    # Every vote of a count is the module's pass under autocast: the counts
    # equal those of an explicit bf16 / fp16 copy of the network on the same
    # draws, and (the precision being coarse enough to matter) differ from
    # fp32's somewhere. The digits at sigma 0.5 put many draws near a boundary.
    X = digits[0][:12]
    module = _mlp()
    name = {torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]
    reduced = FlatInputNetwork(module, (64,), 10, precision=name)
    explicit = FlatInputNetwork(_ExplicitCopy(module, dtype), (64,), 10)
    full = FlatInputNetwork(module, (64,), 10)
    scale = Scale(np.full(len(X), 0.5))
    got = _counts(reduced, X, scale)
    assert reduced.first_linear is None
    np.testing.assert_array_equal(got, _counts(explicit, X, scale))
    assert got.sum() == 12 * 3000
    assert not np.array_equal(got, _counts(full, X, scale))


def test_scores_come_back_as_float32_and_gradients_flow():
    network = FlatInputNetwork(_mlp(), (64,), 10, precision="bf16")
    x = torch.rand(5, 64, requires_grad=True)
    out = network.logits(x)
    assert out.dtype == torch.float32
    out.sum().backward()  # a strategy's optimisation differentiates through it
    assert x.grad is not None and torch.isfinite(x.grad).all()


def test_network_arithmetic_describes_only_what_is_not_the_default():
    assert network_arithmetic() == ""
    assert network_arithmetic("bf16") == " precision=bf16"
    assert network_arithmetic("fp32", True) == " compile=True"
    # a dict by value, whatever order its keys were given in
    assert network_arithmetic("fp16", {"mode": "a", "dynamic": False}) == (
        network_arithmetic("fp16", {"dynamic": False, "mode": "a"})
    )


def test_an_unknown_precision_is_refused_before_any_work(digits):
    with pytest.raises(ValueError, match="precision"):
        FlatInputNetwork(_mlp(), (64,), 10, precision="int8")
    X, y = digits
    clf = SmoothedClassifier(max_epochs=0, n=200, random_state=0).fit(X[:50], y[:50])
    clf.set_params(precision="half")
    with pytest.raises(ValueError, match="precision"):
        clf.certify(X[:3])
    assert clf.memories_ == {}


def test_precision_is_part_of_the_smoothing_memory_and_checkpoint(
    fitted_isotropic_dd, digits, tmp_path
):
    X, _ = digits
    clf = fresh_copy(fitted_isotropic_dd)
    fp32 = clf.certify(X[400:420])
    bf16 = clf.set_params(precision="bf16").certify(X[400:420])
    assert bf16.smoothing == fp32.smoothing + " precision=bf16"
    # another base classifier: its certificates constrain nothing of fp32's,
    # so each has its own memory
    assert sorted(clf.memories_) == sorted([fp32.smoothing, bf16.smoothing])
    assert clf.memories_[bf16.smoothing] is not clf.memories_[fp32.smoothing]
    # the saved model keeps it (the smoothing it certifies is the same)
    restored = copy.deepcopy(clf)
    assert restored.precision == "bf16"
    assert restored._smoothing(restored._certification_strategy()) == bf16.smoothing
    # a checkpoint of one arithmetic is not resumed by the other
    path = tmp_path / "run.jsonl"
    fresh_copy(fitted_isotropic_dd).certify(X[400:410], checkpoint=path)
    other = fresh_copy(fitted_isotropic_dd).set_params(precision="bf16")
    with pytest.raises(ValueError, match="another run"):
        other.certify(X[400:410], checkpoint=path)


def test_predict_runs_the_same_base_classifier_as_certify(digits):
    # predict at bf16 is PREDICT's decision on the bf16 network's votes: the
    # counts it decides from are the explicit copy's
    X, y = digits
    clf = SmoothedClassifier(
        module=_mlp(), max_epochs=0, n=500, precision="bf16", random_state=3
    ).fit(X[:100], y[:100])
    counts = clf._estimation_counts(X[:8])
    explicit = SmoothedClassifier(
        module=_ExplicitCopy(clf.net_.module_, torch.bfloat16),
        max_epochs=0,
        n=500,
        random_state=3,
    ).fit(X[:100], y[:100])
    np.testing.assert_array_equal(counts, explicit._estimation_counts(X[:8]))


def test_compile_runs_the_compiled_module_compiled_once_per_process(monkeypatch):
    calls = []

    def fake_compile(module, **options):
        calls.append(options)

        def run(x, **kwargs):
            return module(x, **kwargs) * 1.0

        return run

    monkeypatch.setattr(torch, "compile", fake_compile)
    network = FlatInputNetwork(_mlp(), (64,), 10, compile={"mode": "reduce-overhead"})
    assert network.first_linear is None
    x = torch.rand(4, 64)
    with torch.inference_mode():
        network.logits(x)
        network.logits(x)
    # dynamic batch sizes unless asked otherwise: a count's last batch is
    # smaller and must not be a new graph
    assert calls == [{"mode": "reduce-overhead", "dynamic": True}]
    # a worker compiles its own: the compiled graph is not pickled
    state = network.__getstate__()
    assert state["_compiled"] is None and state["compile"] == {
        "mode": "reduce-overhead"
    }


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name,dtype", [("bf16", torch.bfloat16), ("fp16", torch.half)])
def test_reduced_precision_on_cuda_matches_the_explicit_copy(digits, name, dtype):
    X = digits[0][:12]
    module = _mlp().cuda()
    reduced = FlatInputNetwork(module, (64,), 10, device="cuda", precision=name)
    explicit = FlatInputNetwork(_ExplicitCopy(module, dtype), (64,), 10, device="cuda")
    scale = Scale(np.full(len(X), 0.5))
    bank = NoiseBank(7, ESTIMATION, get_noise("gaussian"), 64, device="cuda")
    got = count_classes(reduced, X, scale, bank, 3000, batch_size=500)
    want = count_classes(explicit, X, scale, bank, 3000, batch_size=500)
    np.testing.assert_array_equal(got, want)


def test_isotropic_dd_optimises_and_certifies_at_bf16(digits):
    # a strategy's optimisation differentiates through the bf16 network
    X, y = digits
    clf = SmoothedClassifier(
        strategy=IsotropicDD(n_iter=5, n_draws=16),
        n=300,
        max_epochs=1,
        precision="bf16",
        random_state=0,
    ).fit(X[:300], y[:300])
    cert = clf.certify(X[300:310])
    assert cert.smoothing.endswith("precision=bf16")
    assert np.isfinite(cert.radius).all()


def test_a_float64_network_keeps_its_float64_scores():
    # only autocast's bf16 / fp16 outputs are widened; a float64 network's
    # scores (the curvature strategies' Hessians are checked on one) stay
    network = FlatInputNetwork(_mlp().double(), (64,), 10)
    assert network.logits(torch.rand(3, 64, dtype=torch.float64)).dtype == (
        torch.float64
    )

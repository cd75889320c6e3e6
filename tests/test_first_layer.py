"""First-layer reuse gives the plain path's votes on the same noise bank."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from smoothlearn.banks import ESTIMATION, NoiseBank
from smoothlearn.counting import count_classes
from smoothlearn.denoisers import DenoisedNetwork, ResidualMLPDenoiser
from smoothlearn.estimators import MLP, SmallCNN
from smoothlearn.first_layer import find_first_linear
from smoothlearn.network import FlatInputNetwork
from smoothlearn.noise import get_noise
from smoothlearn.scale import Scale


def _networks():
    torch.manual_seed(0)
    yield (
        "linear-first",
        nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 4)),
        (12,),
    )
    yield (
        "flatten-linear",
        nn.Sequential(nn.Flatten(), nn.Linear(12, 32), nn.Tanh(), nn.Linear(32, 4)),
        (3, 2, 2),
    )
    yield (
        "conv-first",
        nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 4, 4)
        ),
        (3, 2, 2),
    )
    yield "builtin-mlp", MLP(12, 4, hidden_units=(16, 16)), (12,)
    yield "builtin-cnn", SmallCNN(3, 4, 4, 4), (3, 4, 4)
    yield "user-mlp-class", UserMLP(12, 4), (3, 2, 2)
    yield "user-cnn-class", UserCNN(), (3, 4, 4)
    # the ways users flatten and normalise (torch.fx traces some, not all)
    for idiom in IDIOMS:
        yield f"idiom-{idiom}", IdiomMLP(idiom), (3, 2, 2)
    yield "input-batchnorm", InputBatchNorm().eval(), (12,)
    # denoised smoothing: the residual denoiser's first map, identity stacked
    # (and, behind the narrow one, the network's first layer folded into the
    # denoiser's last)
    for shape in ((12,), (3, 2, 2)):
        for hidden in ((16, 8), (16, 4)):
            denoiser = ResidualMLPDenoiser(12, hidden_units=hidden)
            nn.init.normal_(denoiser.tail[-1].weight, std=0.3)  # not the identity
            name = "denoised-" + ("flat" if len(shape) == 1 else "image")
            name += "-folded" if hidden[-1] == 4 else ""
            yield name, DenoisedNetwork(denoiser, UserMLP(12, 4)), shape


#: How an MLP's forward reaches its first layer, as users write it.
IDIOMS = {
    "len": lambda m, x: x.reshape(len(x), -1),
    "size": lambda m, x: x.view(x.size(0), -1),
    "view-minus-one": lambda m, x: x.view(-1, 12),
    "torch-flatten": lambda m, x: torch.flatten(x, 1),
    "flatten-method": lambda m, x: x.flatten(1),
    "flatten-attribute": lambda m, x: m.flatten(x),
    "normalised-len": lambda m, x: ((x - 0.1307) / 0.3081).reshape(len(x), -1),
    "per-channel-normalised": lambda m, x: m.flatten((x - m.mean) / m.std),
}


class IdiomMLP(nn.Module):
    """An MLP whose forward reaches ``fc1`` by one of :data:`IDIOMS`."""

    def __init__(self, idiom):
        super().__init__()
        self.idiom = idiom
        self.flatten = nn.Flatten()
        self.register_buffer("mean", torch.tensor([0.4, 0.5, 0.6]).reshape(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor([0.2, 0.25, 0.3]).reshape(1, 3, 1, 1))
        self.fc1 = nn.Linear(12, 32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(IDIOMS[self.idiom](self, x))))


class InputBatchNorm(nn.Module):
    """Batch normalisation of the input (an elementwise affine map in eval mode)."""

    def __init__(self):
        super().__init__()
        self.norm = nn.BatchNorm1d(12)
        with torch.no_grad():
            self.norm.running_mean.uniform_(-1, 1)
            self.norm.running_var.uniform_(0.5, 2)
            self.norm.weight.uniform_(0.5, 1.5)
        self.fc1 = nn.Linear(12, 32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(self.norm(x))))


class UserMLP(nn.Module):
    """An MLP as users write it: a view, then layers called in forward."""

    def __init__(self, d, k):
        super().__init__()
        self.fc1 = nn.Linear(d, 32)
        self.fc2 = nn.Linear(32, k)

    def forward(self, x):
        x = x.view(x.size(0), -1)
        return self.fc2(torch.relu(self.fc1(x)))


class UserCNN(nn.Module):
    """A small CNN as users write it (functional calls, a flatten in forward)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.fc = nn.Linear(8 * 2 * 2, 4)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.relu(self.conv2(x))
        return self.fc(torch.flatten(x, 1))


def _random_rotated(rng, m, d, k):
    """Per-input orthonormal bases (m, d, k), in-basis scales (m, k), rests (m,)."""
    basis = np.stack([np.linalg.qr(rng.randn(d, d))[0][:, :k] for _ in range(m)])
    return basis, rng.uniform(0.2, 1.5, (m, k)), rng.uniform(0.2, 1.0, m)


@pytest.mark.parametrize(
    "name, module, shape",
    list(_networks()),
    ids=lambda v: v if isinstance(v, str) else "",
)
@pytest.mark.parametrize(
    "scale_kind",
    [
        "isotropic",
        "per-input",
        "shared-diagonal",
        "per-input-diagonal",
        "rotated-rank-3",
        "rotated-full",
    ],
)
def test_fused_and_plain_paths_agree_sample_by_sample(name, module, shape, scale_kind):
    d = int(np.prod(shape))
    rng = np.random.RandomState(0)
    X = rng.rand(5, d).astype(np.float32)
    if scale_kind.startswith("rotated"):
        k = 3 if scale_kind == "rotated-rank-3" else d
        basis, values, rest = _random_rotated(rng, 5, d, k)
        scale = Scale(values, basis, rest)
        dense = np.stack(
            [
                (u * s) @ u.T + r * (np.eye(d) - u @ u.T)
                for u, s, r in zip(basis, values, rest)
            ]
        )
    else:
        values = {
            "isotropic": np.full(5, 0.5),
            "per-input": rng.uniform(0.2, 1.0, 5),
            "shared-diagonal": np.tile(rng.uniform(0.2, 1.0, d), (5, 1)),
            # rows 0, 2 and 4 constant: isotropic rows in a diagonal scale
            "per-input-diagonal": np.where(
                (np.arange(5) % 2 == 0)[:, None],
                rng.uniform(0.2, 1.0, (5, 1)),
                rng.uniform(0.2, 1.0, (5, d)),
            ),
        }[scale_kind]
        scale = Scale(values)
        dense = np.stack([np.diag(np.broadcast_to(s, (d,))) for s in values])
    fused = FlatInputNetwork(module, shape, 4, reuse_first_layer=True)
    plain = FlatInputNetwork(module, shape, 4, reuse_first_layer=False)
    assert fused.first_linear is not None and plain.first_linear is None
    bank = NoiseBank(3, ESTIMATION, get_noise("gaussian"), d)
    n = 600
    z = bank.rows(0, n)
    # the truth: x + S z with the dense scale matrix S
    S = torch.as_tensor(dense, dtype=torch.float32)
    with torch.no_grad():
        logits = plain.logits(
            (torch.as_tensor(X)[:, None] + z[None] @ S.transpose(1, 2)).reshape(-1, d)
        )
    top2 = logits.topk(2, dim=1).values
    near_tie = ((top2[:, 0] - top2[:, 1]) < 1e-4).reshape(5, n)
    # sample by sample: one bank row per call
    for i in (0, 4):
        for r in range(0, n, 120):
            row_bank = _SingleRow(bank, r)
            a = count_classes(
                fused, X[i : i + 1], scale[i : i + 1], row_bank, 1, batch_size=1
            )
            b = count_classes(
                plain, X[i : i + 1], scale[i : i + 1], row_bank, 1, batch_size=1
            )
            truth = logits.reshape(5, n, -1)[i, r].argmax()
            assert near_tie[i, r] or (a[0, truth] == 1 and (a == b).all())
    # and in bulk, over every draw
    a = count_classes(fused, X, scale, bank, n, batch_size=256)
    b = count_classes(plain, X, scale, bank, n, batch_size=256)
    truth = np.stack(
        [np.bincount(p, minlength=4) for p in logits.argmax(1).reshape(5, n).numpy()]
    )
    assert np.abs(a - b).sum() <= 2 * int(near_tie.sum())
    assert np.abs(a - truth).sum() <= 2 * int(near_tie.sum())


class _SingleRow:
    """A bank whose row 0 is row ``r`` of another bank."""

    def __init__(self, bank, r):
        self.bank, self.r = bank, r

    def rows(self, start, stop):
        return self.bank.rows(self.r + start, self.r + stop)


def test_networks_without_a_linear_first_map_take_the_plain_path(caplog):
    module = nn.Sequential(nn.ReLU(), nn.Linear(4, 2))
    assert find_first_linear(module, (4,), 4) is None

    class Normalised(nn.Module):
        """A normalising first step: not a linear map of x (it has an offset
        and, per input, a scale), so it must not be split."""

        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(12, 2)

        def forward(self, x):
            x = (x - x.mean(dim=1, keepdim=True)) / x.std(dim=1, keepdim=True)
            return self.fc(x)

    class Residual(nn.Module):
        """The input is used again after the first linear map."""

        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(12, 12)

        def forward(self, x):
            return self.fc(x) + x

    class Untraceable(nn.Module):
        """Control flow on values: torch.fx cannot trace it."""

        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(12, 2)

        def forward(self, x):
            if x.sum() > 0:
                return self.fc(x)
            return -self.fc(x)

    class Transposed(nn.Module):
        """``x.T`` is an attribute read that moves values (across the batch)."""

        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(2, 12)

        def forward(self, x):
            return self.fc(x.T)

    reasons = {
        Normalised: "first operation on its input",
        Transposed: "first operation on its input",
        Residual: "used again after the first linear map",
        Untraceable: "cannot trace",
    }
    with caplog.at_level("DEBUG", logger="smoothlearn"):
        for cls, reason in reasons.items():
            caplog.clear()
            assert find_first_linear(cls(), (12,), 12) is None
            assert reason in caplog.text, cls


def test_every_idiom_reuses_the_first_layer_by_trace_or_by_probes(caplog):
    """Tracing or not, each idiom's first layer is found; those torch.fx cannot
    trace (``len``) or whose first step is a normalisation are split by probes,
    with the normalisation folded into the map."""
    probed = {"len", "normalised-len", "per-channel-normalised"}
    for idiom in IDIOMS:
        module = IdiomMLP(idiom).eval()
        with caplog.at_level("DEBUG", logger="smoothlearn"):
            found = find_first_linear(module, (3, 2, 2), 12)
        assert found is not None and found.linear is module.fc1, idiom
        assert (found.reshape is None) == (idiom in probed), idiom
        x = torch.rand(50, 12)
        torch.testing.assert_close(
            found.rest(found.apply(x)), module(x.reshape(-1, 3, 2, 2))
        )
        if "normalised" in idiom:
            assert found.front is not None
    found = find_first_linear(InputBatchNorm().eval(), (12,), 12)
    assert found is not None and found.front is not None


def test_probes_refuse_what_is_not_a_reshape_into_one_call(caplog):
    class Twice(nn.Module):
        """The first layer runs again on another input: no single response."""

        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(12, 12)

        def forward(self, x):
            x = x.reshape(len(x), -1)
            return self.fc(torch.relu(self.fc(x)))

    class Clamped(nn.Module):
        """A clamp before the first layer: affine only between 0 and 1."""

        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(12, 2)

        def forward(self, x):
            return self.fc(x.clamp(0, 1).reshape(len(x), -1))

    class Permuted(nn.Module):
        """The features reach the layer in another order."""

        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(12, 2)

        def forward(self, x):
            return self.fc(x.reshape(len(x), 3, 4).transpose(1, 2).reshape(len(x), -1))

    reasons = {
        Twice: "runs more than once per forward",
        Clamped: "does not see a reshape of its input",
        Permuted: "does not see a reshape of its input",
    }
    with caplog.at_level("DEBUG", logger="smoothlearn"):
        for cls, reason in reasons.items():
            caplog.clear()
            assert find_first_linear(cls(), (12,), 12) is None
            assert reason in caplog.text, cls


def test_a_probed_split_shares_the_modules_weights():
    """The rest runs on a copy of the module that shares its parameters, so a
    fitted network trained further is followed; the user's module is not
    changed."""
    module = IdiomMLP("len").eval()
    found = find_first_linear(module, (3, 2, 2), 12)
    assert isinstance(module.fc1, nn.Linear)  # not replaced in the user's module
    x = torch.rand(5, 12)
    with torch.no_grad():
        module.fc2.weight.mul_(-1.0)
    torch.testing.assert_close(
        found.rest(found.apply(x)), module(x.reshape(-1, 3, 2, 2))
    )


def test_traced_splits_equal_the_module_on_random_inputs():
    torch.manual_seed(0)
    cases = [(UserMLP(12, 4), (3, 2, 2)), (UserCNN(), (3, 4, 4))]

    class TupleOut(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(12, 3)

        def forward(self, x):
            h = self.fc(torch.flatten(x, 1))
            return h, h.sum()

    cases.append((TupleOut(), (12,)))
    for module, shape in cases:
        found = find_first_linear(module, shape, int(np.prod(shape)))
        assert found is not None and found.reshape is not None
        x = torch.randn(50, int(np.prod(shape)))
        whole = module(x.reshape(-1, *shape))
        whole = whole[0] if isinstance(whole, tuple) else whole
        split = found.rest(found.apply(x))
        split = split[0] if isinstance(split, tuple) else split
        torch.testing.assert_close(split, whole, rtol=1e-5, atol=1e-6)


def test_a_first_map_too_small_to_pay_takes_the_plain_path(caplog):
    class Narrow(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 64)
            self.out = nn.Linear(64, 2)

        def forward(self, x):
            return self.out(torch.relu(self.fc(x)))

    with caplog.at_level("DEBUG", logger="smoothlearn"):
        assert find_first_linear(Narrow(), (4,), 4, when_faster=True) is None
    assert "fan-in 4" in caplog.text
    assert find_first_linear(Narrow(), (4,), 4) is not None  # it does split
    # a first convolution on the CPU runs channels-last and unfused; not so
    # on a GPU, where the layout is left alone
    torch.manual_seed(0)
    assert find_first_linear(UserCNN(), (3, 4, 4), 48, when_faster=True) is None
    assert FlatInputNetwork(UserCNN(), (3, 4, 4), 4).first_linear is None
    assert FlatInputNetwork(UserMLP(12, 4), (12,), 4).first_linear is not None


def test_a_wrong_hook_raises_instead_of_miscounting():
    class Liar(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 2)

        def forward(self, x):
            return torch.relu(self.fc(x))

        def smoothlearn_first_linear(self):
            return self.fc, nn.Identity()  # forgets the ReLU

    with pytest.raises(ValueError, match="does not reproduce"):
        find_first_linear(Liar(), (4,), 4)


def test_a_declared_hook_is_used():
    class Declared(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 3)
            self.head = nn.Linear(3, 2)

        def forward(self, x):
            return self.head(torch.sigmoid(self.fc(x)))

        def smoothlearn_first_linear(self):
            return self.fc, lambda h: self.head(torch.sigmoid(h))

    found = find_first_linear(Declared(), (4,), 4)
    assert found is not None and found.linear.out_features == 3


def test_fused_counts_do_not_depend_on_batch_composition_or_order():
    torch.manual_seed(1)
    network = FlatInputNetwork(MLP(12, 4, hidden_units=(16,)), (12,), 4)
    X = np.random.RandomState(2).rand(7, 12).astype(np.float32)
    bank = NoiseBank(9, ESTIMATION, get_noise("uniform"), 12)
    scale = Scale(np.random.RandomState(3).uniform(0.1, 0.9, 7))
    whole = count_classes(network, X, scale, bank, 2000, batch_size=4000)
    order = np.array([6, 2, 0])
    for batch_size in (1, 300, 10_000):
        part = count_classes(
            network, X[order], scale[order], bank, 2000, batch_size=batch_size
        )
        np.testing.assert_array_equal(part, whole[order])


_PEAK_SCRIPT = """
import resource, sys
import numpy as np, torch
from smoothlearn.banks import ESTIMATION, NoiseBank
from smoothlearn.counting import count_classes
from smoothlearn.network import FlatInputNetwork
from smoothlearn.estimators import MLP
from smoothlearn.noise import get_noise
from smoothlearn.scale import Scale
n = int(sys.argv[1])
torch.manual_seed(0)
network = FlatInputNetwork(MLP(784, 10, hidden_units=(16,)), (784,), 10)
X = np.random.RandomState(0).rand(2, 784).astype(np.float32)
bank = NoiseBank(0, ESTIMATION, get_noise("gaussian"), 784)
count_classes(network, X[:1], Scale(np.full(1, 0.5)), bank, 2000, batch_size=1000)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
count_classes(network, X, Scale(np.full(2, 0.5)), bank, n, batch_size=1000)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
"""


def test_peak_memory_does_not_grow_with_n():
    import subprocess
    import sys

    def growth_kib(n):
        out = subprocess.run(
            [sys.executable, "-c", _PEAK_SCRIPT, str(n)],
            capture_output=True,
            text=True,
            check=True,
            timeout=300,
        )
        return int(out.stdout.strip())

    small, large = growth_kib(5_000), growth_kib(50_000)
    # Documented bound: one bank chunk plus one window (CHUNK_ROWS + batch_size
    # rows of 784 float32, about 6 MiB) plus one forward batch's activations.
    # Holding the 50,000 draws instead would take 150 MiB more.
    assert large - small < 32 * 1024, (small, large)


def test_convolutional_networks_certify_on_a_channels_last_copy():
    torch.manual_seed(0)
    module = UserCNN().eval()
    network = FlatInputNetwork(module, (3, 4, 4), 4, reuse_first_layer=False)
    # the user's (fitted) module is left in its layout; the engine's copy is NHWC
    assert module.conv1.weight.is_contiguous()
    assert network.module is not module
    assert network.module.conv1.weight.is_contiguous(memory_format=torch.channels_last)
    x = torch.randn(20, 48)
    torch.testing.assert_close(
        network.logits(x), module(x.reshape(-1, 3, 4, 4)), rtol=1e-5, atol=1e-5
    )
    mlp = nn.Sequential(nn.Linear(4, 2))
    assert FlatInputNetwork(mlp, (4,), 2).module is mlp  # nothing to convert

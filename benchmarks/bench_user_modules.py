"""Certification speed on networks written the user's way, against the naive loop.

The same layers (an MLP 256-256, a small CNN conv 1->16, conv 16->32, fc),
written as users write them:

* an ``nn.Sequential`` MLP (``nn.Flatten`` first);
* ``nn.Module`` MLP classes whose ``forward`` flattens with
  ``x.view(x.size(0), -1)`` (torch.fx traces it), with
  ``x.reshape(len(x), -1)`` (tracing fails on ``len``), and with a
  normalisation constant before an ``nn.Flatten`` attribute;
* a small CNN class.

smoothlearn finds the first linear map of each (no hook): a Sequential's
first layers, a trace, or probes of the forward
(:func:`smoothlearn.first_layer.split_probed`). Three ways to count the same
noisy votes, alternating, median of --repeats:

* naive: Cohen et al.'s loop, as peers run it: per input and batch, fresh
  noise (torch.randn), the whole network, argmax, bincount;
* smoothlearn: the engine as ``certify`` runs it (shared bank, the path it
  chooses for the module);
* ART (when ``adversarial-robustness-toolbox`` is installed, the ``bench``
  extra): IBM ART 1.20's ``PyTorchRandomizedSmoothing.certify`` on the same
  module, n0 + n draws per input like the other two.

Two more columns: the floor, the forward passes no way of counting avoids,
on ready-made batches (per input and draw, the network after the reused
first layer on the fused path, the whole network as certify runs it on the
plain path), and ``shared``, what smoothlearn does once for all inputs of a
count (the noise bank and, fused, the first layer's response to it), per
input. ART / floor is the most smoothlearn could be faster than ART here if
drawing the noise, perturbing and counting cost nothing.

Targets: every 784-input MLP >= 3x faster than naive (the ``len(x)`` class
included), the 64-input ones >= 1.3x, the small CNN class >= 1.0x; against
ART, the Sequential MLP >= 15x and the user classes >= 12x. ``--clock cpu``
times this process's CPU time instead of the wall's (a shared machine).

    python benchmarks/bench_user_modules.py [--inputs 16] [--n 10000] [--clock cpu]

``--results-file benchmarks/results/fashion_mnist.json`` writes the table
(one row per module: ms per input of each column, the ratios, and ART's time
over floor + shared, the most smoothlearn could gain on ART without
counting's own cost) as ``--results-table`` (default ``user_modules``), with
the command, commit and machine (``benchmarks/_results.py``). The 784-input
rows and the CNN certify Fashion-MNIST test images, the 64-input rows
scikit-learn's digits (the table's settings say so); writing the table
needs ART and Fashion-MNIST, checked before any timing.
"""

import argparse
import os

import numpy as np
import torch
from _results import add_arguments, run_record, write_table
from _timing import CLOCKS, median_of
from bench_first_layer import FASHION, data, naive_counts
from torch import nn

from smoothlearn.banks import ESTIMATION, NoiseBank
from smoothlearn.counting import count_classes
from smoothlearn.network import FlatInputNetwork
from smoothlearn.noise import get_noise
from smoothlearn.scale import Scale


class UserMLP(nn.Module):
    def __init__(self, n_features, n_classes=10):
        super().__init__()
        self.fc1 = nn.Linear(n_features, 256)
        self.fc2 = nn.Linear(256, 256)
        self.fc3 = nn.Linear(256, n_classes)

    def forward(self, x):
        x = x.view(x.size(0), -1)
        x = torch.relu(self.fc1(x))
        x = torch.relu(self.fc2(x))
        return self.fc3(x)


class UserMLPLen(UserMLP):
    """Flattens with ``len(x)``, which torch.fx cannot trace."""

    def forward(self, x):
        x = x.reshape(len(x), -1)
        x = torch.relu(self.fc1(x))
        x = torch.relu(self.fc2(x))
        return self.fc3(x)


class UserMLPNormalised(UserMLP):
    """Normalises by constants, then flattens with an ``nn.Flatten`` attribute."""

    def __init__(self, n_features, n_classes=10):
        super().__init__(n_features, n_classes)
        self.flatten = nn.Flatten()

    def forward(self, x):
        x = self.flatten((x - 0.5) / 0.25)
        x = torch.relu(self.fc1(x))
        x = torch.relu(self.fc2(x))
        return self.fc3(x)


def sequential_mlp(n_features, n_classes=10):
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(n_features, 256),
        nn.ReLU(),
        nn.Linear(256, 256),
        nn.ReLU(),
        nn.Linear(256, n_classes),
    )


def mlps(n_features):
    """The MLPs as users write them, with one set of weights."""
    torch.manual_seed(0)
    reference = UserMLP(n_features)
    out = {}
    for label, module in (
        ("Sequential MLP", sequential_mlp(n_features)),
        ("MLP class, view", UserMLP(n_features)),
        ("MLP class, len(x)", UserMLPLen(n_features)),
        ("MLP class, normalised", UserMLPNormalised(n_features)),
    ):
        weights = reference.state_dict()
        if isinstance(module, nn.Sequential):
            weights = dict(zip(module.state_dict(), weights.values()))
        module.load_state_dict(weights)
        out[label] = module
    return out


class UserCNN(nn.Module):
    def __init__(self, n_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc = nn.Linear(32 * 7 * 7, n_classes)

    def forward(self, x):
        x = nn.functional.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = nn.functional.max_pool2d(torch.relu(self.conv2(x)), 2)
        return self.fc(torch.flatten(x, 1))


def art_certify(module, input_shape, sigma, n0, n, batch_size, device="cpu"):
    """ART's certify of ``module`` as a function of flat inputs, or None
    where ART is not installed."""
    try:
        from art.estimators.certification.randomized_smoothing import (
            PyTorchRandomizedSmoothing,
        )
    except ImportError:
        return None
    art = PyTorchRandomizedSmoothing(
        model=module,
        loss=nn.CrossEntropyLoss(),
        input_shape=input_shape,
        nb_classes=10,
        device_type="gpu" if str(device).startswith("cuda") else "cpu",
        sample_size=n0,
        scale=sigma,
        alpha=0.001,
    )
    return lambda X: art.certify(
        X.reshape(-1, *input_shape), n=n, batch_size=batch_size
    )


def floor_passes(network, n_inputs, n_draws, batch_size):
    """The forward passes every way of counting runs, on ready-made batches:
    per input and draw, the network after its reused first layer (the fused
    path) or the whole network as certify runs it (the plain path)."""
    first = network.first_linear
    with torch.inference_mode():
        if first is not None:
            shape = first.apply(torch.zeros(1, network.n_features)).shape[1:]
            run, batch = first.rest, torch.randn(batch_size, *shape)
        else:
            run = network.module
            batch = torch.randn(batch_size, *network.input_shape)
    full, last = divmod(n_inputs * n_draws, batch_size)

    def floor():
        with torch.inference_mode():
            for _ in range(full):
                run(batch)
            if last:
                run(batch[:last])

    return floor


def shared_work(network, n_features, n_draws, batch_size):
    """What one count does once for all its inputs: the noise bank's chunks
    and, on the fused path, the first linear map of every window."""
    first = network.first_linear

    def shared():
        bank = NoiseBank(1, ESTIMATION, get_noise("gaussian"), n_features)
        with torch.inference_mode():
            for start in range(0, n_draws, batch_size):
                z = bank.rows(start, min(start + batch_size, n_draws))
                if first is not None:
                    first.apply_linear_part(z)

    return shared


def bench(label, module, X, input_shape, args):
    module.eval()
    sigma, n, bs = 0.25, args.n + args.n0, args.batch_size
    network = FlatInputNetwork(module, input_shape, 10)
    path = "fused" if network.first_linear is not None else "plain"
    bank = NoiseBank(0, ESTIMATION, get_noise("gaussian"), X.shape[1])
    scale = Scale(np.full(len(X), sigma))
    runs = {
        "naive": lambda: naive_counts(module, X, sigma, n, bs, 10, input_shape),
        "smoothlearn": lambda: count_classes(network, X, scale, bank, n, batch_size=bs),
        "floor": floor_passes(network, len(X), n, bs),
        "shared": shared_work(network, X.shape[1], n, bs),
    }
    art = art_certify(module, input_shape, sigma, args.n0, args.n, bs)
    if art is not None:
        runs["ART"] = lambda: art(X)
    t = median_of(runs, args.repeats, args.clock)
    per_input = {k: 1e3 * v / len(X) for k, v in t.items()}
    row = {
        "module": label,
        "path": path,
        "inputs": len(X),
        "smoothlearn": per_input["smoothlearn"],
        "naive": per_input["naive"],
        "ART": per_input.get("ART"),
        "floor": per_input["floor"],
        "shared": per_input["shared"],
        "naive_speed_up": t["naive"] / t["smoothlearn"],
        "art_speed_up": t["ART"] / t["smoothlearn"] if "ART" in t else None,
        "art_over_floor": t["ART"] / t["floor"] if "ART" in t else None,
        "art_ceiling": (t["ART"] / (t["floor"] + t["shared"]) if "ART" in t else None),
    }
    line = (
        f"{label:<34} {path:<6} naive {per_input['naive']:8.1f}  "
        f"smoothlearn {per_input['smoothlearn']:8.1f}  "
        f"naive/smoothlearn {t['naive'] / t['smoothlearn']:5.2f}x  "
        f"floor {per_input['floor']:8.1f}  shared {per_input['shared']:6.1f}"
    )
    if "ART" in t:
        line += (
            f"  ART {per_input['ART']:8.1f}  ART/smoothlearn "
            f"{t['ART'] / t['smoothlearn']:5.2f}x  ART/floor "
            f"{t['ART'] / t['floor']:5.2f}x"
        )
    print(line, flush=True)
    return row


#: The table's columns in a results file (``benchmarks/_results.py``): ms per
#: input, and the ratios of the totals.
COLUMNS = [
    {"key": "module", "label": "module"},
    {"key": "path", "label": "path"},
    {"key": "inputs", "label": "inputs", "format": "d"},
    {"key": "smoothlearn", "label": "smoothlearn (ms)", "format": ".1f"},
    {"key": "naive", "label": "naive (ms)", "format": ".1f"},
    {"key": "ART", "label": "ART (ms)", "format": ".1f"},
    {"key": "floor", "label": "floor (ms)", "format": ".1f"},
    {"key": "shared", "label": "shared (ms)", "format": ".1f"},
    {"key": "naive_speed_up", "label": "naive / smoothlearn", "format": ".2fx"},
    {"key": "art_speed_up", "label": "ART / smoothlearn", "format": ".1fx"},
    {"key": "art_over_floor", "label": "ART / floor", "format": ".1fx"},
    {"key": "art_ceiling", "label": "ART / (floor + shared)", "format": ".1fx"},
]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=16)
    parser.add_argument("--cnn-inputs", type=int, default=4)
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--n0", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall")
    add_arguments(parser, "user_modules", "benchmarks/results/fashion_mnist.json")
    args = parser.parse_args()
    if args.results_file:
        if art_certify(nn.Linear(1, 10), (1,), 0.25, 1, 1, 1) is None:
            parser.error("--results-file needs ART (the bench extra)")
        if not os.path.isdir(FASHION):
            parser.error(f"--results-file needs Fashion-MNIST under {FASHION}")
    record = run_record()
    torch.manual_seed(0)
    print(
        f"{args.inputs} inputs ({args.cnn_inputs} for the CNN) x (n0 + n = "
        f"{args.n0} + {args.n}) draws, batch {args.batch_size}, torch threads "
        f"{torch.get_num_threads()}; ms per input ({args.clock} clock), "
        f"median of {args.repeats}"
    )
    X = data("digits", args.inputs)
    rows = [
        bench(f"64 inputs, {label}", module, X, (64,), args)
        for label, module in mlps(64).items()
    ]
    X = data("fashion", args.inputs)
    if X is None:
        print(f"Fashion-MNIST not found under {FASHION}: 784-input rows skipped")
        return
    for label, module in mlps(784).items():
        rows.append(bench(f"784 inputs, {label}", module, X, (784,), args))
    cnn_X = X[: args.cnn_inputs]
    rows.append(bench("small CNN class (1x28x28)", UserCNN(), cnn_X, (1, 28, 28), args))
    if args.results_file:
        write_table(
            args,
            columns=COLUMNS,
            rows=rows,
            settings={
                # flat values: a dict in a table reads as an interval
                "dataset_64_inputs": "digits (scikit-learn), / 16",
                "dataset_784_inputs_and_cnn": "fashion_mnist test images",
                "inputs": args.inputs,
                "cnn_inputs": args.cnn_inputs,
                "n0": args.n0,
                "n": args.n,
                "sigma": 0.25,
                "batch_size": args.batch_size,
                "repeats": args.repeats,
                "statistic": "median",
                "clock": args.clock,
                "torch_threads": torch.get_num_threads(),
                "weights": "as initialised, torch.manual_seed(0)",
            },
            record=record,
        )


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    main()

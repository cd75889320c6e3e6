"""Certification against the naive floor, with shared banks and first-layer reuse.

Three ways to count the same number of noisy votes per input, timed in one run
(interleaved, best of --repeats):

* naive: what peers do. Per input, fresh noise per batch (torch.randn), the
  full network on x + sigma z, argmax, bincount.
* bank: smoothlearn's engine on the plain path (shared bank, full network).
* fused: smoothlearn's engine reusing the first linear map's response L(sigma z).

Networks: the built-in MLP (256, 256) on digits (64 inputs), the same MLP on
Fashion-MNIST (784 inputs), and the built-in small CNN on 28x28 images.
Targets: fused >= 1.5x faster than naive on digits, >= 3x on the
784-input MLP; the CNN is reported.

    python benchmarks/bench_first_layer.py [--inputs 64] [--n 20000]

The networks are untrained (the seconds do not depend on their weights) and
the inputs test images, so the timing is the data sets' shapes only:
``--results-file benchmarks/results/synthetic.json`` writes the table as
``--results-table`` (default ``first_layer``), one row per network, with the
command, commit and machine (``benchmarks/_results.py``).
"""

import argparse
import os

import numpy as np
import torch
from _results import add_arguments, run_record, write_table
from _timing import best_of

from smoothlearn.banks import ESTIMATION, NoiseBank
from smoothlearn.counting import count_classes
from smoothlearn.estimators import MLP, SmallCNN
from smoothlearn.network import FlatInputNetwork
from smoothlearn.noise import get_noise
from smoothlearn.scale import Scale

FASHION = "/usr/share/datasets/fashion-mnist"


def naive_counts(module, X, sigma, n, batch_size, n_classes, input_shape):
    """Cohen et al.'s sampling loop (with a vectorised count): per input and
    batch, repeat x, draw fresh noise like it, run the whole network."""
    counts = np.zeros((len(X), n_classes), dtype=np.int64)
    module.eval()
    with torch.inference_mode():
        for i, x in enumerate(torch.as_tensor(X).reshape(len(X), *input_shape)):
            for start in range(0, n, batch_size):
                w = min(batch_size, n - start)
                batch = x.repeat((w, *([1] * len(input_shape))))
                noise = torch.randn_like(batch) * sigma
                pred = module(batch + noise).argmax(1)
                counts[i] += np.bincount(pred.cpu().numpy(), minlength=n_classes)
    return counts


def data(name, inputs):
    rng = np.random.RandomState(0)
    if name == "digits":
        from sklearn.datasets import load_digits

        X = (load_digits().data / 16).astype(np.float32)
    else:
        from smoothlearn.datasets import load_dataset

        if not os.path.isdir(FASHION):
            return None
        X = load_dataset(FASHION).X_test
    return X[rng.choice(len(X), inputs, replace=False)]


def bench(label, module, X, input_shape, args):
    sigma, n, bs = 0.25, args.n, args.batch_size
    bank = NoiseBank(0, ESTIMATION, get_noise("gaussian"), X.shape[1])
    plain = FlatInputNetwork(module, input_shape, 10, reuse_first_layer=False)
    fused = FlatInputNetwork(module, input_shape, 10, reuse_first_layer=True)
    assert fused.first_linear is not None
    scale = Scale(np.full(len(X), sigma))
    runs = {
        "naive": lambda: naive_counts(module, X, sigma, n, bs, 10, input_shape),
        "bank": lambda: count_classes(plain, X, scale, bank, n, batch_size=bs),
        "fused": lambda: count_classes(fused, X, scale, bank, n, batch_size=bs),
    }
    best = best_of(runs, args.repeats)
    row = {
        "network": label,
        "inputs": len(X),
        **best,
        "naive_over_bank": best["naive"] / best["bank"],
        "naive_over_fused": best["naive"] / best["fused"],
    }
    print(
        f"{label:<28} naive {best['naive']:7.2f} s  bank {best['bank']:7.2f} s  "
        f"fused {best['fused']:7.2f} s  "
        f"naive/bank {best['naive'] / best['bank']:5.2f}x  "
        f"naive/fused {best['naive'] / best['fused']:5.2f}x"
    )
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=64)
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--cnn-inputs", type=int, default=8, help="inputs for the (slow) CNN row"
    )
    add_arguments(parser, "first_layer", "benchmarks/results/synthetic.json")
    args = parser.parse_args()
    if min(args.inputs, args.n, args.batch_size, args.repeats, args.cnn_inputs) < 1:
        parser.error(
            "--inputs, --n, --batch-size, --repeats, --cnn-inputs must be positive"
        )
    record = run_record()
    torch.manual_seed(0)
    print(
        f"{args.inputs} inputs x {args.n} draws, batch {args.batch_size}, "
        f"torch threads {torch.get_num_threads()}"
    )
    X = data("digits", args.inputs)
    rows = [bench("digits MLP (64-256-256-10)", MLP(64, 10), X, (64,), args)]
    X = data("fashion", args.inputs)
    if X is None:
        print(f"Fashion-MNIST not found under {FASHION}: 784-input rows skipped")
    else:
        rows.append(
            bench("F-MNIST MLP (784-256-256-10)", MLP(784, 10), X, (784,), args)
        )
        cnn = SmallCNN(1, 28, 28, 10)
        X = X[: args.cnn_inputs]
        rows.append(bench("F-MNIST small CNN (1x28x28)", cnn, X, (1, 28, 28), args))
    if args.results_file:
        write_table(
            args,
            columns=COLUMNS,
            rows=rows,
            settings={
                "inputs": "digits and Fashion-MNIST test images (seed 0), "
                "untrained networks",
                "n": args.n,
                "sigma": 0.25,
                "batch_size": args.batch_size,
                "repeats": args.repeats,
                "timing": "interleaved, best of repeats",
                "clock": "wall",
                "torch_threads": torch.get_num_threads(),
                "seed": 0,
            },
            record=record,
        )


#: The table's columns in a results file (``benchmarks/_results.py``).
COLUMNS = [
    {"key": "network", "label": "network"},
    {"key": "inputs", "label": "inputs", "format": "d"},
    {"key": "naive", "label": "naive (s)", "format": ".2f"},
    {"key": "bank", "label": "bank (s)", "format": ".2f"},
    {"key": "fused", "label": "fused (s)", "format": ".2f"},
    {"key": "naive_over_bank", "label": "naive / bank", "format": ".2fx"},
    {"key": "naive_over_fused", "label": "naive / fused", "format": ".2fx"},
]


if __name__ == "__main__":
    main()

"""What one noisy pass costs on the grid path, piece by piece, against the float path.

Trains the built-in network as ``bench_grid.py`` does, takes ANCER's
per-coordinate scales for the first ``--inputs`` test images (quantised as the
grid path runs them), and times, per window of ``--window`` rows of one input
(CPU time, best of ``--repeats``, one torch thread):

* the network's forward pass and top class (both paths pay it);
* the float path's noise, ``x + s * z`` into the forward batch;
* the grid path's ``fl32(j + k) * h`` from a drawn ``k``;
* drawing ``k`` by the guides (:class:`~smoothlearn.grid.RowSampler`), per row;
* drawing ``k`` by the shared quantile bounds
  (:mod:`smoothlearn._grid_quantiles`): the bounds once per window, then per row;
* floors: one gather per value from the row's guides (index given: the least a
  table-lookup sampler does in numpy), and the bounded path's arithmetic
  without its check.

Printed: each piece in ms, and the ratio grid / float each way of drawing
gives for ``m`` inputs sharing a window: ``(forward + per row + shared / m +
forming the input) / (forward + noise)``. Pieces timed alone run from cache;
in a count the forward pass evicts them, so a count's ratio is higher.

Run: ``python benchmarks/bench_grid_sampler.py --dataset
/usr/share/datasets/fashion-mnist --train 3000 --epochs 3``.
``--results-file benchmarks/results/<dataset>.json`` writes the pieces (ms
per window, per row where the piece runs per row) as table
``--results-table`` (default ``grid_sampler``) of that data set's results
file (``benchmarks/_results.py``); the ratios follow from them.
"""

import argparse

import numpy as np
import torch
from _results import add_arguments, run_record, write_table
from _timing import best_of
from bench_quality import load

from smoothlearn import SmoothedClassifier
from smoothlearn._grid_quantiles import QuantileBounds
from smoothlearn.estimators._noisy_net import certification_network
from smoothlearn.grid import RowSampler, TableSet, resolve_grid
from smoothlearn.noise import get_noise


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--train", type=int, default=3000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--inputs", type=int, default=20)
    parser.add_argument("--window", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=7)
    add_arguments(parser, "grid_sampler")
    args = parser.parse_args()
    record = run_record()
    torch.set_num_threads(1)

    X_train, y_train, X_test, _ = load(args.dataset, False)
    X_train, y_train = X_train[: args.train], y_train[: args.train]
    X = X_test[: args.inputs]
    step = resolve_grid("auto", X_train)
    clf = SmoothedClassifier(
        sigma=0.25, n=1000, n0=100, max_epochs=args.epochs, random_state=0
    ).fit(X_train, y_train)
    cert = clf.set_params(strategy="ancer", grid=step).certify(X)
    scales = np.asarray(getattr(cert.scale, "values", cert.scale))
    gaussian = get_noise("gaussian")
    w, d = args.window, X.shape[1]
    rows = np.unique(scales, axis=0)
    print(
        f"{args.dataset}: {len(X)} inputs, ANCER scales {scales.min():.3f} to "
        f"{scales.max():.3f} ({len(np.unique(scales))} values, {len(rows)} rows, "
        f"{sum(len(np.unique(r)) == 1 for r in rows)} of them isotropic); "
        f"window {w} x {d}, CPU ms per window of one input, best of {args.repeats}"
    )

    network = certification_network(clf.net_, clf.input_shape_, len(clf.classes_))
    network.module.eval()
    rng = np.random.default_rng(0)
    words = rng.integers(-(2**63), 2**63 - 1, size=(w, d), dtype=np.int64)
    words = torch.from_numpy(words)
    batch = torch.empty(w, d)
    z = torch.randn(w, d)
    x = torch.as_tensor(X[0], dtype=torch.float32)
    s = torch.as_tensor(scales[0], dtype=torch.float32)
    j = torch.as_tensor(np.rint(X[0] / step).astype(np.float32))
    tables = TableSet(gaussian, np.unique(scales), step, "cpu")
    samplers = [RowSampler(gaussian, r, step, "cpu", tables) for r in rows]
    bounds = QuantileBounds(gaussian, d)
    k = samplers[0].sample(words).to(torch.float32)

    def guides():
        tables._top = (None, None)  # every row of a window, the shift once
        for sampler in samplers:
            sampler.sample(words)

    def shared():
        bounds._bounds = (None, None)
        bounds.bounds(words)

    def bounded():  # j + k straight into the forward batch
        for sampler in samplers:
            bounds.sample(sampler, words, j, batch)

    top = tables.top_bits(words)
    index = [np.add(top, smp.guide_start[:, None]) for smp in samplers]
    gathered = np.empty(top.shape, tables.guides.dtype)

    def one_gather():
        for i in index:
            np.take(tables.guides, i, mode="clip", out=gathered)

    lo, hi = bounds.bounds(words)
    rhos = [bounds._rho(smp) for smp in samplers]
    below, above = bounds._centres(None)
    low = torch.empty(w, d)

    def arithmetic():
        for rho in rhos:
            torch.addcmul(below, lo, rho, out=low).floor_()
            torch.addcmul(above, hi, rho, out=low).floor_()

    runs = {
        "forward": lambda: network.logits(batch).max(dim=1),
        "float noise": lambda: torch.addcmul(x, s, z, out=batch),
        "grid j+k, *h": lambda: torch.add(j, k, out=batch).mul_(np.float32(step)),
        "grid *h": lambda: batch.mul_(np.float32(step)),
        "guides, per row": guides,
        "bounds, per window": shared,
        "bounds (j+k), per row": bounded,
        "floor: one gather": one_gather,
        "floor: arithmetic": arithmetic,
    }
    with torch.inference_mode():
        seconds = best_of(runs, args.repeats, clock="cpu")
    # in ms; the per-row pieces ran every row of the window
    t = {
        name: 1e3 * v / (len(rows) if "per row" in name or "floor" in name else 1)
        for name, v in seconds.items()
    }
    for name, ms in t.items():
        print(f"  {name:20s} {ms:7.3f}")
    base = t["forward"] + t["float noise"]
    for m in (1, 10, 30, 100):
        shared = t["bounds, per window"] / m
        ratios = {  # what each adds to the forward pass
            "guides": t["guides, per row"] + t["grid j+k, *h"],
            "bounds": t["bounds (j+k), per row"] + shared + t["grid *h"],
            "floor, one gather": t["floor: one gather"] + t["grid j+k, *h"],
            "floor, arithmetic": t["floor: arithmetic"] + shared + t["grid *h"],
        }
        print(
            f"  grid / float, {m:3d} inputs a window: "
            + ", ".join(
                f"{name} {(t['forward'] + v) / base:.3f}x" for name, v in ratios.items()
            )
        )
    if args.results_file:
        settings = {
            "dataset": args.dataset,
            "train_inputs": len(X_train),
            "epochs": args.epochs,
            "inputs": len(X),
            "window": w,
            "features": d,
            "grid_step": step,
            "repeats": args.repeats,
            "clock": "cpu",
            "torch_threads": 1,
            "scales_min": float(scales.min()),
            "scales_max": float(scales.max()),
            "distinct_scales": len(np.unique(scales)),
            "distinct_rows": len(rows),
            "isotropic_rows": sum(len(np.unique(r)) == 1 for r in rows),
        }
        write_table(
            args,
            columns=COLUMNS,
            rows=[
                {"piece": PIECES[name][0], "what": PIECES[name][1], "ms": ms}
                for name, ms in t.items()
            ],
            settings=settings,
            record=record,
        )


#: Each timed piece's row name in the results file and what it times.
PIECES = {
    "forward": ("forward", "forward pass and top class (both paths)"),
    "float noise": ("float_noise", "float noise x + s z"),
    "grid j+k, *h": ("grid_add_scale", "grid fl32(j + k) * h from k"),
    "grid *h": ("grid_scale", "grid * h of j + k formed by the bounds"),
    "guides, per row": ("guides", "k by the row's guides, per row"),
    "bounds, per window": ("bounds_window", "shared bounds, once per window"),
    "bounds (j+k), per row": ("bounds_row", "j + k by the bounds, per row"),
    "floor: one gather": ("floor_gather", "floor: one gather per value, per row"),
    "floor: arithmetic": (
        "floor_arithmetic",
        "floor: the bounds' arithmetic, no check, per row",
    ),
}

#: The table's columns in a results file (``benchmarks/_results.py``).
COLUMNS = [
    {"key": "piece", "label": "piece"},
    {"key": "what", "label": "what it times"},
    {"key": "ms", "label": "CPU ms per window", "format": ".3f"},
]


if __name__ == "__main__":
    main()

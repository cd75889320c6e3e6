"""What input-specific sample sizes and sequential decisions save, and keep.

Trains the built-in network once (noise augmentation at ``--sigma``) and
certifies the same test inputs three ways, block by block in turn (so every
way runs under the same machine load):

* ``fixed``: CERTIFY with ``n`` estimation draws per input;
* ``tolerance``: ``radius_tolerance=--tolerance`` (sizes planned per input
  from the selection draws);
* ``sequential``: ``certify(X, radius=--radius)`` (stop as soon as "certified
  at the radius" is decided).

Prints the time ratios (fixed / tolerance; fixed, i.e. certify-then-threshold,
/ sequential), the mean certified radius and ACR the tolerance keeps, and the
certified accuracy at ``--radius`` of the sequential decision against
certify-then-threshold, with mean estimation draws per input.
``--clock cpu`` times this process's CPU time (``benchmarks/_timing.py``):
on a machine shared with other work it moves far less than the wall time.
``--results-file benchmarks/results/<dataset>.json`` writes the three ways
as table ``--results-table`` (default ``sample_size``) of that data set's
results file (``benchmarks/_results.py``).

    python benchmarks/bench_sample_size.py --dataset digits --inputs 200
    python benchmarks/bench_sample_size.py \
        --dataset /usr/share/datasets/fashion-mnist --images --inputs 100 \
        --train 12000 --epochs 5
"""

import argparse

import numpy as np
from _results import add_arguments, run_record, write_table
from _timing import CLOCKS

from smoothlearn import SmoothedClassifier
from smoothlearn.blocks import INPUT_BLOCK
from smoothlearn.datasets import load_dataset
from smoothlearn.metrics import average_certified_radius, certified_accuracy
from smoothlearn.regions import Certificates


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="digits")
    parser.add_argument("--images", action="store_true")
    parser.add_argument("--inputs", type=int, default=200)
    parser.add_argument("--train", type=int, default=None, help="training inputs")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--sigma", type=float, default=0.25)
    parser.add_argument("--tolerance", type=float, default=0.01)
    parser.add_argument("--radius", type=float, default=0.5)
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall")
    add_arguments(parser, "sample_size")
    args = parser.parse_args()
    record = run_record()
    now = CLOCKS[args.clock]

    data = load_dataset(args.dataset)
    if args.images:
        data = data.as_images()
    X_train, y_train = data.X_train[: args.train], data.y_train[: args.train]
    X, y = data.X_test[: args.inputs], data.y_test[: args.inputs]
    clf = SmoothedClassifier(
        sigma=args.sigma, n=args.n, max_epochs=args.epochs, random_state=0
    )
    start = now()
    clf.fit(X_train, y_train)
    trained = now() - start
    print(
        f"{data.name}: trained on {len(X_train)} in {trained:.0f} s;"
        f" {len(X)} test inputs, n={args.n}, sigma={args.sigma}"
    )

    ways = {
        "fixed": ({"radius_tolerance": None}, {}),
        "tolerance": ({"radius_tolerance": args.tolerance}, {}),
        "sequential": ({"radius_tolerance": None}, {"radius": args.radius}),
    }
    seconds = dict.fromkeys(ways, 0.0)
    parts = {name: [] for name in ways}
    for b, i in enumerate(range(0, len(X), INPUT_BLOCK)):
        block = X[i : i + INPUT_BLOCK]
        names = list(ways) if b % 2 == 0 else list(ways)[::-1]
        for name in names:
            params, kwargs = ways[name]
            clf.set_params(**params)
            start = now()
            parts[name].append(clf.certify(block, **kwargs))
            seconds[name] += now() - start
            print(f"block {b}: {name} {now() - start:.1f} s", flush=True)
    cert = {name: Certificates.concatenate(p) for name, p in parts.items()}

    for name in ways:
        c = cert[name]
        print(
            f"{name:<11} {seconds[name] / len(X):7.3f} s/input  "
            f"mean n_draws {c.n_draws.mean():9.0f}  mean radius {c.radius.mean():.4f}"
            f"  ACR {average_certified_radius(y, c):.4f}"
            f"  acc@{args.radius} {certified_accuracy(y, c, args.radius):.3f}"
        )
    fixed, tol, seq = cert["fixed"], cert["tolerance"], cert["sequential"]
    acr_kept = average_certified_radius(y, tol) / average_certified_radius(y, fixed)
    print(
        f"tolerance={args.tolerance}: {seconds['fixed'] / seconds['tolerance']:.2f}x "
        f"faster, keeps {tol.radius.mean() / fixed.radius.mean():.2%} of the mean "
        f"radius and {acr_kept:.2%} of ACR"
    )
    decided = certified_accuracy(y, seq, args.radius)
    thresholded = certified_accuracy(y, fixed, args.radius)
    agree = np.mean((seq.radius >= args.radius) == (fixed.radius >= args.radius))
    speedup = seconds["fixed"] / seconds["sequential"]
    print(
        f"radius={args.radius}: sequential {speedup:.1f}x "
        f"faster than certify-then-threshold; certified accuracy {decided:.3f} vs "
        f"{thresholded:.3f} (difference {decided - thresholded:+.3f}); the two agree "
        f"on {agree:.1%} of inputs"
    )
    if args.results_file:
        settings = {
            "dataset": data.name,
            "inputs": len(X),
            "train_inputs": len(X_train),
            "epochs": args.epochs,
            "n": args.n,
            "sigma": args.sigma,
            "alpha": clf.alpha,
            "radius_tolerance": args.tolerance,
            "radius": args.radius,
            "clock": args.clock,
            "train_seconds": trained,
        }
        write_table(
            args,
            columns=columns(args.radius),
            rows=table_rows(y, cert, seconds, args.radius, args.tolerance, args.n),
            settings=settings,
            record=record,
        )


def columns(radius):
    """The table's columns in a results file (``benchmarks/_results.py``)."""
    return [
        {"key": "way", "label": "way"},
        {"key": "how", "label": "how"},
        {"key": "seconds", "label": "s/input", "format": ".3f"},
        {"key": "speedup", "label": "fixed / this, time", "format": ".2fx"},
        {"key": "draws", "label": "mean estimation draws", "format": ",.0f"},
        {"key": "mean_radius", "label": "mean radius", "format": ".3"},
        {"key": "acr", "label": "ACR", "format": ".3"},
        {
            "key": "certified_accuracy",
            "label": f"certified accuracy at {radius:g}",
            "format": ".3",
        },
        {
            "key": "agree",
            "label": f"decides {radius:g} as fixed does",
            "format": ".1%",
        },
    ]


def table_rows(y, cert, seconds, radius, tolerance, n):
    """One row per way, at full precision: ``cert`` and ``seconds`` (summed
    over the inputs) keyed by ``fixed``, ``tolerance`` and ``sequential``."""
    how = {
        "fixed": f"n = {n:,}",
        "tolerance": f"radius_tolerance={tolerance:g}",
        "sequential": f"certify(X, radius={radius:g})",
    }
    fixed = cert["fixed"].radius >= radius
    return [
        {
            "way": name,
            "how": how[name],
            "seconds": seconds[name] / len(y),
            "speedup": seconds["fixed"] / seconds[name],
            "draws": float(np.mean(c.n_draws)),
            "mean_radius": float(np.mean(c.radius)),
            "acr": float(average_certified_radius(y, c)),
            "certified_accuracy": float(certified_accuracy(y, c, radius)),
            "agree": float(np.mean((c.radius >= radius) == fixed)),
        }
        for name, c in cert.items()
    ]


if __name__ == "__main__":
    main()

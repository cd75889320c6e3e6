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

    python benchmarks/bench_sample_size.py --dataset digits --inputs 200
    python benchmarks/bench_sample_size.py \
        --dataset /usr/share/datasets/fashion-mnist --images --inputs 100 \
        --train 12000 --epochs 5
"""

import argparse
import time

import numpy as np

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
    args = parser.parse_args()

    data = load_dataset(args.dataset)
    if args.images:
        data = data.as_images()
    X_train, y_train = data.X_train[: args.train], data.y_train[: args.train]
    X, y = data.X_test[: args.inputs], data.y_test[: args.inputs]
    clf = SmoothedClassifier(
        sigma=args.sigma, n=args.n, max_epochs=args.epochs, random_state=0
    )
    start = time.perf_counter()
    clf.fit(X_train, y_train)
    trained = time.perf_counter() - start
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
            start = time.perf_counter()
            parts[name].append(clf.certify(block, **kwargs))
            seconds[name] += time.perf_counter() - start
            print(f"block {b}: {name} {time.perf_counter() - start:.1f} s", flush=True)
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


if __name__ == "__main__":
    main()

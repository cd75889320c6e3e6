"""The memory's shrink (``'capped'`` against the papers' ``'ball'``) on the
same certificates: quality per strategy, before and after the memory.

Certifies the first ``--inputs`` test inputs with each strategy once, without
a memory (``memory=None``, the certificates each input's smoothing gives),
then runs each ``MemoryCertifier(shrink=...)`` over them in input order: what
``memory="auto"`` gives (the memory only post-processes the certificates, so
these rows are those of ``bench_quality.py`` with the same model, inputs and
``n``). Prints, per shrink ("none": before the memory), each strategy's
certified accuracy at ``bench_quality.RADII``, ACR, AC R~ and the memory's
reductions, and each strategy against ``ancer`` with paired bootstrap 95%
intervals (AC R~, ACR, and certified accuracy at ``ACCURACY_AT``).
``--results DIR`` keeps the certificates per chunk of ``--chunk`` inputs (an
interrupted run resumes; a later run with more inputs certifies only the new
ones).

    python benchmarks/bench_memory_shrink.py \\
        --dataset /usr/share/datasets/fashion-mnist --images --train 12000 \\
        --epochs 5 --model fashion.joblib --results raw --inputs 500 \\
        --strategies ancer rancer rddrs
"""

import argparse
import os
import time
import warnings

import joblib
import numpy as np
from bench_quality import RADII, bootstrap_interval, load, parse_strategy

from smoothlearn import Certificates, MemoryCertifier, SmoothedClassifier

#: Radii of the certified-accuracy differences against ancer (the issue's)
ACCURACY_AT = (0.5, 0.75)


def certificates(clf, text, X, y, results, chunk):
    """``text``'s certificates of ``X`` without a memory, kept per chunk."""
    parts, seconds = [], []
    for first in range(0, len(X), chunk):
        index = slice(first, min(first + chunk, len(X)))
        path = results and os.path.join(results, f"{text}@{first}.joblib")
        if path and os.path.exists(path):
            saved = joblib.load(path)
        else:
            clf.set_params(strategy=parse_strategy(text))
            start = time.perf_counter()
            with warnings.catch_warnings():  # memory=None on purpose
                warnings.simplefilter("ignore", UserWarning)
                cert = clf.certify(X[index])
            saved = {
                "cert": cert,
                "y": y[index],
                "seconds": (time.perf_counter() - start) / len(cert),
            }
            if path:
                joblib.dump(saved, path)
        if not np.array_equal(saved["y"], y[index]):
            raise ValueError(f"{path} holds certificates of other inputs")
        parts.append(saved["cert"])
        seconds.append(np.full(len(saved["cert"]), saved["seconds"]))
    return Certificates.concatenate(parts), np.concatenate(seconds)


def row(cert, y):
    correct = (~cert.abstained) & (cert.label == y)
    return {
        "correct": correct,
        "radius": np.where(correct, cert.radius, 0.0),
        "proxy_radius": np.where(correct, cert.proxy_radius, 0.0),
        "reduced": int(cert.reduced.sum()),
    }


def add_run_arguments(parser, inputs):
    """The options of a run over the certificates of ``certificates``."""
    parser.add_argument("--dataset", default="digits")
    parser.add_argument("--images", action="store_true")
    parser.add_argument("--train", type=int, default=None)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--inputs", type=int, default=inputs)
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--sigma", type=float, default=0.25)
    parser.add_argument("--boot", type=int, default=2000)
    parser.add_argument("--chunk", type=int, default=20)
    parser.add_argument("--model", default=None, help="joblib file to reuse")
    parser.add_argument("--results", default=None, help="folder of certificates")


def prepared(args):
    """``(clf, X, y)``: the classifier of ``--model`` (trained and saved there
    if missing) without a memory, and the first ``--inputs`` test inputs."""
    X_train, y_train, X_test, y_test = load(args.dataset, args.images)
    X, y = X_test[: args.inputs], y_test[: args.inputs]
    if args.model and os.path.exists(args.model):
        clf = joblib.load(args.model)
    else:
        clf = SmoothedClassifier(max_epochs=args.epochs, random_state=0)
        clf.fit(X_train[: args.train], y_train[: args.train])
        if args.model:
            joblib.dump(clf, args.model)
    clf.set_params(sigma=args.sigma, n=args.n, memory=None)
    if args.results:
        os.makedirs(args.results, exist_ok=True)
    return clf, X, y


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_arguments(parser, inputs=500)
    parser.add_argument("--strategies", nargs="+", default=["ancer", "rancer"])
    parser.add_argument("--shrinks", nargs="+", default=["ball", "capped"])
    args = parser.parse_args()
    clf, X, y = prepared(args)
    raw = {}
    for text in args.strategies:
        raw[text] = certificates(clf, text, X, y, args.results, args.chunk)
        print(f"{text}: {raw[text][1].mean():.3f} s/input certified", flush=True)
    print(f"{args.dataset}: {len(X)} inputs, n={args.n}, accuracy at radii {RADII}")
    rng = np.random.RandomState(0)
    for shrink in ["none", *args.shrinks]:
        rows = {}
        for text, (cert, _) in raw.items():
            if shrink != "none":
                start = time.perf_counter()
                cert = MemoryCertifier(shrink=shrink).fit_transform(cert)
                memory_seconds = (time.perf_counter() - start) / len(cert)
            rows[text] = r = row(cert, y)
            acc = [np.mean(r["correct"] & (cert.radius >= t)) for t in RADII]
            extra = ""
            if shrink != "none":
                extra = f"  reduced {r['reduced']}  memory {memory_seconds:.3f} s/input"
            print(
                f"{shrink:<6} {text:<24} acc "
                + " ".join(f"{a:.3f}" for a in acc)
                + f"  ACR {r['radius'].mean():.3f}  ACR~ {r['proxy_radius'].mean():.3f}"
                + extra,
                flush=True,
            )
        if "ancer" not in rows:
            continue
        for text, r in rows.items():
            if text == "ancer":
                continue
            line = f"{shrink:<6} {text:<24} - ancer"
            for key, label in (("proxy_radius", "ACR~"), ("radius", "ACR")):
                mean, low, high = bootstrap_interval(
                    r[key], rows["ancer"][key], args.boot, rng
                )
                verdict = "" if low <= 0 <= high else " *"
                line += f"  {label} {mean:+.3f} [{low:+.3f}, {high:+.3f}]{verdict}"
            for t in ACCURACY_AT:  # certified accuracy at an l2 radius
                mean, low, high = bootstrap_interval(
                    (r["radius"] >= t).astype(float),
                    (rows["ancer"]["radius"] >= t).astype(float),
                    args.boot,
                    rng,
                )
                verdict = "" if low <= 0 <= high else " *"
                line += f"  acc@{t} {mean:+.3f} [{low:+.3f}, {high:+.3f}]{verdict}"
            print(line, flush=True)


if __name__ == "__main__":
    main()

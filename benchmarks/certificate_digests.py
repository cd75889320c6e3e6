"""Digests of every strategy's certificates under a fixed seed, for refactoring.

A change meant to keep behaviour (a restructuring, a rename) must leave these
digests as they were: run the script before and after on the same machine
with the same thread count and compare the lines. Each line hashes, for one
strategy and noise family on 24 digits (n0=64, n=2,000, memory on), the
arrays of ``certify`` (labels, bounds, gaps, scales, bases, reductions), of
``predict`` and ``predict_proba`` and, where the scale is per coordinate, of
``noise_parameters``.

Bit-identity holds only for one machine and thread count: float32 sums in the
network depend on both.

    python benchmarks/certificate_digests.py > before.txt
    ... change ...
    python benchmarks/certificate_digests.py | diff before.txt -
"""

import hashlib
import os

import numpy as np
import torch
from sklearn.datasets import load_digits

from smoothlearn import SmoothedClassifier
from smoothlearn.strategies import get_strategy

FIXED = {
    "sigma": 0.25,
    "n0": 64,
    "n": 2000,
    "batch_size": 1000,
    "random_state": 0,
    "max_epochs": 3,
    "lr": 0.01,
}

#: (strategy, noise, parameters), certified by the network trained for cohen
#: unless the strategy trains its own.
CASES = [
    ("cohen", "gaussian", {}),
    ("cohen", "laplace", {}),
    ("isotropic_dd", "gaussian", {"n_iter": 5}),
    ("ancer", "gaussian", {"n_iter": 5}),
    ("ancer", "uniform", {"n_iter": 5}),
    ("rancer", "gaussian", {"n_iter": 5, "rank": 9}),
    ("rancer", "gaussian", {"n_iter": 3}),
    ("rddrs", "gaussian", {"n_iter": 3, "rank": 9}),
    ("rddrs", "gaussian", {"n_iter": 2}),
    ("ucan_pattern", "gaussian", {}),
    ("ucan_universal", "gaussian", {}),
    ("ucan_input", "gaussian", {}),
]

TRAINED_IN_FIT = {"ucan_pattern", "ucan_universal", "ucan_input"}


def digest(*arrays):
    h = hashlib.sha256()
    for a in arrays:
        if a is None:
            h.update(b"none")
            continue
        a = np.ascontiguousarray(a)
        h.update(str((a.dtype, a.shape)).encode())
        h.update(a.tobytes() if a.dtype != object else repr(a.tolist()).encode())
    return h.hexdigest()[:16]


def main():
    torch.set_num_threads(int(os.environ.get("DIGEST_THREADS", "1")))
    data = load_digits()
    X = (data.data / 16).astype(np.float32)
    y = data.target
    X_train, y_train, X_test = X[:400], y[:400], X[1000:1024]
    fitted = {}
    for strategy, noise, params in CASES:
        key = (strategy if strategy in TRAINED_IN_FIT else "cohen", noise)
        if strategy in TRAINED_IN_FIT:  # UCAN's generators take images
            X_train, X_test = X_train.reshape(-1, 1, 8, 8), X_test.reshape(-1, 1, 8, 8)
        if key not in fitted:
            model = SmoothedClassifier(strategy=key[0], noise=noise, **FIXED)
            fitted[key] = model.fit(X_train, y_train)
        model = fitted[key]
        model.set_params(strategy=get_strategy(strategy).set_params(**params))
        model.memories_ = {}  # every case starts from an empty memory
        cert = model.certify(X_test)
        line = [
            f"{strategy:<15} {noise:<9} {sorted(params.items())!s:<50}",
            "certify "
            + digest(
                cert.label,
                cert.abstained,
                cert.p_lower,
                cert.gap,
                cert.scale,
                cert.basis,
                cert.scale_rest,
                cert.reduced,
                cert.class_index,
            ),
        ]
        model.memories_ = {}
        line.append("predict " + digest(model.predict(X_test)))
        line.append("proba " + digest(model.predict_proba(X_test)))
        if cert.basis is None:
            line.append("noise " + digest(*model.noise_parameters(X_test)))
        print("  ".join(line), flush=True)


if __name__ == "__main__":
    main()

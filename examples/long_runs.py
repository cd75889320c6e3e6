"""
Long runs: parallel workers, a checkpoint log, and resuming after a crash
=========================================================================


``n_jobs`` certifies blocks of 64 inputs on joblib workers (any backend, a
dask cluster included); ``checkpoint=`` appends each finished block to a log,
and calling ``certify`` again with the same log computes only what is missing.

    python examples/long_runs.py
"""

import os
import tempfile
import time

import numpy as np

from smoothlearn import SmoothedClassifier
from smoothlearn.datasets import load_dataset

FAST = os.environ.get("SMOOTHLEARN_EXAMPLES_FAST") == "1"

data = load_dataset("digits")
X_test = data.X_test[: 130 if FAST else 200]

clf = SmoothedClassifier(
    sigma=0.25,
    n=2_000 if FAST else 100_000,
    max_epochs=3 if FAST else 20,
    random_state=0,
).fit(data.X_train, data.y_train)

start = time.perf_counter()
one = clf.set_params(n_jobs=1).certify(X_test)
print(f"n_jobs=1: {time.perf_counter() - start:.1f} s")
start = time.perf_counter()
two = clf.set_params(n_jobs=2).certify(X_test)
print(f"n_jobs=2: {time.perf_counter() - start:.1f} s")
print("same labels:", np.array_equal(one.label, two.label))

log = os.path.join(tempfile.mkdtemp(), "run.jsonl")
clf.set_params(n_jobs=1).certify(X_test[:64], checkpoint=log)  # "crashed" here
start = time.perf_counter()
resumed = clf.certify(X_test, checkpoint=log)  # certifies only the rest
print(
    f"resumed in {time.perf_counter() - start:.1f} s;",
    "same certificates:",
    np.array_equal(resumed.radius, one.radius),
)

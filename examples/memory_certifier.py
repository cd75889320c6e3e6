"""
MemoryCertifier on its own: why data-dependent certificates need a memory
=========================================================================


A data-dependent strategy smooths each input with its own distribution, so
two inputs' certified regions of different classes can overlap: certified
alone, neither is wrong, together they contradict each other. The memory
(ANCER App. D) remembers every region it gives out. The certificates of one
call are made disjoint together (every pair of different labels whose
regions meet is cut apart by separating slabs, whatever their order); a
later call's certificates abstain or shrink where they would meet a
remembered region of another class. The estimator does this for you
(``memory="auto"``); here it is done by hand, and beside the papers'
sequential memory (``joint=False``), which takes the inputs one by one.

    python examples/memory_certifier.py
"""

import io
import os
import warnings

import joblib

from smoothlearn import MemoryCertifier, SmoothedClassifier
from smoothlearn.datasets import load_dataset
from smoothlearn.strategies import IsotropicDD

FAST = os.environ.get("SMOOTHLEARN_EXAMPLES_FAST") == "1"

data = load_dataset("digits")
X_test = data.X_test[: 60 if FAST else 200]

clf = SmoothedClassifier(
    strategy=IsotropicDD(n_iter=5 if FAST else 100),
    memory=None,  # raw, per-input certificates: not sound on their own
    sigma=0.25,
    n=2_000 if FAST else 100_000,
    max_epochs=3 if FAST else 20,
    random_state=0,
).fit(data.X_train, data.y_train)
with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)  # the warning memory=None gives
    raw = clf.certify(X_test)

memory = MemoryCertifier()
first = memory.fit_transform(raw[: len(raw) // 2])  # two calls
second = memory.transform(raw[len(raw) // 2 :])
print(f"{memory.n_seen_} certificates, {memory.n_entries_} remembered")
print(f"{memory.n_reduced_} reduced, {memory.n_abstained_} made abstentions")
print(
    f"mean radius before {raw.radius.mean():.4f}, after "
    f"{(first.radius.sum() + second.radius.sum()) / len(raw):.4f}"
)
sequential = MemoryCertifier(joint=False).fit_transform(raw)
print(
    f"sequential memory: {int(sequential.abstained.sum() - raw.abstained.sum())} "
    f"made abstentions, mean radius {sequential.radius.mean():.4f}"
)

# the memory is state: save it with joblib, and keep using it
buffer = io.BytesIO()
joblib.dump(memory, buffer)
buffer.seek(0)
restored = joblib.load(buffer)
print("restored memory holds", restored.n_entries_, "regions")

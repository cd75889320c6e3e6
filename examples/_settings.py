"""Shared settings of the examples.

SMOOTHLEARN_EXAMPLES_FAST=1 (set by the test that runs every example) shrinks
the noise draws and epochs so the examples run in seconds; the numbers they
print are then rough.
"""

import os

FAST = os.environ.get("SMOOTHLEARN_EXAMPLES_FAST") == "1"
N = 2_000 if FAST else 100_000
EPOCHS = 3 if FAST else 20
N_TEST = 40 if FAST else 200
ITERATIONS = 5 if FAST else 100  # optimisation steps of data-dependent strategies
CV = 2 if FAST else 3

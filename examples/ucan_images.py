"""
UCAN on images: anisotropic noise from noise parameter generators (digits 8x8)
==============================================================================


Trains the base CNN with each of UCAN's three noise strategies and with Cohen's
isotropic noise, certifies held-out digits, prints certified accuracy against
UCAN's ALM (the proxy radius) and saves the sigma- and mu-maps of a few inputs
beside them (UCAN figure 7) to ucan_noise_maps.png.

    python examples/ucan_images.py
"""

import os

from smoothlearn import SmoothedClassifier
from smoothlearn.datasets import load_dataset
from smoothlearn.metrics import certified_accuracy_table

FAST = os.environ.get("SMOOTHLEARN_EXAMPLES_FAST") == "1"
N, EPOCHS = (2_000, 3) if FAST else (100_000, 20)

data = load_dataset("digits").as_images()  # X of shape (n, 1, 8, 8)
X_test, y_test = data.X_test[: 40 if FAST else 200], data.y_test[: 40 if FAST else 200]

fitted, certificates = {}, {}
for strategy in ("cohen", "ucan_pattern", "ucan_universal", "ucan_input"):
    clf = SmoothedClassifier(
        strategy=strategy, sigma=0.25, n=N, max_epochs=EPOCHS, random_state=0
    ).fit(data.X_train, data.y_train)
    fitted[strategy] = clf
    certificates[strategy] = clf.certify(X_test)
    offset, scale = clf.noise_parameters(X_test[:1])
    print(f"{strategy}: noise scale {scale.min():.3f}..{scale.max():.3f}")

# ucan_input's certificates went through the estimator's memory_ (its noise
# depends on the input): UCAN's paper certifies each input alone, which is
# not sound for input-dependent noise.
radii = [0.0, 0.25, 0.5, 0.75]
print(certified_accuracy_table(y_test, certificates, radii, proxy=True))

try:
    import matplotlib

    matplotlib.use("Agg")
except ImportError:
    print("matplotlib is not installed: no noise maps (pip install matplotlib)")
else:
    from smoothlearn.inspection import NoiseMapDisplay

    display = NoiseMapDisplay.from_estimator(fitted["ucan_input"], X_test[:3])
    display.figure_.savefig("ucan_noise_maps.png")
    print("saved ucan_noise_maps.png")

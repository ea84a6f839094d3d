"""Where cfkit keeps data, checkpoints, runs and results, and how it writes files safely.

Everything is relative to one root: the repository checkout by default, or ``$CFKIT_ROOT``.
Writes go through a temporary file in the same folder and ``os.replace``, so a crash never
leaves a half-written result behind.
"""
from __future__ import annotations

import errno
import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .errors import OutputError

ROOT = Path(os.environ.get("CFKIT_ROOT", Path(__file__).resolve().parents[1]))
DATA_DIR = ROOT / "data"
CHECKPOINT_DIR = DATA_DIR / "checkpoints"
NOTEBOOK_DIR = ROOT / "notebooks"
RUNS_DIR = ROOT / "runs"
RESULTS_DIR = ROOT / "results"


NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
NO_WRITE = (errno.EACCES, errno.EPERM, errno.EROFS)


def output_error(exc: OSError, folder: str | os.PathLike) -> OutputError | None:
    """The one-line :class:`OutputError` for a full disk or an unwritable ``folder``; None for any other OSError."""
    if exc.errno in NO_SPACE:
        return OutputError(f"no space left on the device holding {folder}: free some space or pass another --out.")
    if isinstance(exc, PermissionError) or exc.errno in NO_WRITE:
        return OutputError(f"cannot write to {folder}: choose a folder you can write to with --out.")
    return None


@contextmanager
def writing_to(folder: str | os.PathLike) -> Iterator[None]:
    """Turn a full disk or an unwritable ``folder`` met inside the block into its :func:`output_error`."""
    try:
        yield
    except OSError as exc:
        error = output_error(exc, folder)
        if error is None:
            raise
        raise error from None


def make_folder(folder: str | os.PathLike) -> Path:
    """``mkdir -p folder``; a folder that cannot be created is an :class:`OutputError` (see :func:`output_error`)."""
    folder = Path(folder)
    with writing_to(folder):
        folder.mkdir(parents=True, exist_ok=True)
    return folder


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` all at once: readers see the old file or the new one, never a half-written one.
    A full disk or an unwritable folder is an :class:`OutputError` of one line."""
    path = Path(path)
    with writing_to(make_folder(path.parent)):
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj: Any) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def atomic_torch_save(path: str | os.PathLike, obj: Any) -> Path:
    """``torch.save`` through a temporary file, for tensors and state dicts."""
    import io

    import torch

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return atomic_write_bytes(path, buffer.getvalue())

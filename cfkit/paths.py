"""Where cfkit keeps data, checkpoints, runs and results, and how it writes files safely.

Everything is relative to one root: the repository checkout by default, or ``$CFKIT_ROOT``.
Writes go through a temporary file in the same folder and ``os.replace``, so a crash never
leaves a half-written result behind.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(os.environ.get("CFKIT_ROOT", Path(__file__).resolve().parents[1]))
DATA_DIR = ROOT / "data"
CHECKPOINT_DIR = DATA_DIR / "checkpoints"
NOTEBOOK_DIR = ROOT / "notebooks"
RUNS_DIR = ROOT / "runs"
RESULTS_DIR = ROOT / "results"


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` all at once: readers see the old file or the new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
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

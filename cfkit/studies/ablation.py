"""LDCE's ablation (06_ldce): each knob of the table's setting varied alone, on validation digits, and its
recorded copy in ``results/`` so that a reader sees it without spending the ablation's minutes of CPU.

``make reproduce`` leaves the ablation off (it is not part of the table: about 160 s of one core on the 2-core
machine, 9 settings × 3 pairs × 50 digits); ``cfkit run 06_ldce --protocol -p ablation_queries 50`` runs it and
writes ``ldce_ablation.json`` beside the notebook's other outputs, which is what ``results/`` keeps.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from torch import nn

from ..common.fingerprint import fingerprint
from ..errors import DataError
from ..methods.ldce import LDCE, LDCEConfig, ablation_settings, mask_statistics
from ..paths import RESULTS_DIR, atomic_write_json
from ..scoring.evaluation import compare_settings

RECORD_NAME = "ldce_ablation.json"
RECORDED = RESULTS_DIR / RECORD_NAME
"""The ablation as last recorded at the protocol's size (50 validation digits a pair)."""


def ldce_ablation(classifier: nn.Module, config: LDCEConfig, unet: nn.Module, pairs: str, queries: int,
                  seed: int = 0) -> list[dict]:
    """Every setting of :func:`cfkit.methods.ldce.ablation_settings` around ``config`` on ``queries`` validation
    digits a pair: a row per pair and setting, and a mean row with bootstrap intervals."""
    variants = {name: LDCE(classifier, c, unet=unet) for name, c in ablation_settings(config).items()}
    return compare_settings(variants, pairs, queries, seed=seed, summary=mask_statistics, intervals=True)


def save_ablation(rows: list[dict], out_dir: str | Path, parameters: dict[str, Any],
                  denoiser: nn.Module | None = None) -> Path:
    """The ablation's rows and the parameters that made them, atomically, as ``out_dir/ldce_ablation.json``; with
    ``denoiser``, its weights' fingerprint too, so that a record made on other weights is told apart."""
    if denoiser is not None:
        parameters = {**parameters, "denoiser": fingerprint(denoiser)}
    return atomic_write_json(Path(out_dir) / RECORD_NAME, {"parameters": parameters, "rows": rows})


def describe_record(record: dict[str, Any], denoiser: nn.Module) -> str:
    """What a recorded ablation was run on, and a warning when it was not ``denoiser`` (the one explaining now)."""
    made = record["parameters"]
    line = (f"as recorded: {made['ablation_queries']} validation digits a pair of {made['pairs']}, around strength "
            f"{made['strength']}, {made['steps']} DDIM steps, α {made['consensus_angle']}°")
    recorded_with, now = made.get("denoiser"), fingerprint(denoiser)
    if recorded_with != now:
        line += (f"\nnote: recorded with other denoiser weights ({(recorded_with or 'not recorded')[:12]}) than these "
                 f"({now[:12]}); -p ablation_queries 50 runs it on these")
    return line


def recorded_ablation(path: str | Path = RECORDED) -> dict[str, Any] | None:
    """The recorded ablation (``{"parameters", "rows"}``), or None when there is none at ``path``."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
        if not isinstance(record.get("rows"), list) or not isinstance(record.get("parameters"), dict):
            raise ValueError("it has no 'rows' list and 'parameters' mapping")
    except ValueError as exc:
        raise DataError(f"{path} is not a recorded LDCE ablation ({exc}); regenerate it with "
                        "`cfkit run 06_ldce --protocol -p ablation_queries 50`.") from exc
    return record

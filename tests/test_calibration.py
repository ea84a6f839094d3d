"""The IM1 calibration study: its choice rule, its training snapshots, the committed study and the shipped setting."""
from __future__ import annotations

import pytest
import torch

from cfkit import calibration
from cfkit.errors import MissingResultsError
from cfkit.zoo.checkpoints import CALIBRATED_AE, load, read_manifest
from cfkit.zoo.nets import ClassAutoencoder


def _row(capacity: str, epochs: int, pair: str, original: float, pgd: float) -> dict:
    return {"capacity": capacity, "pixel_range": "[0,1]", "epochs": epochs, "channels": [4, 4, 1], "pair": pair,
            "im1_original": original, "im1_pgd": pgd}


def test_choose_takes_the_closest_to_the_paper_that_still_separates_on_every_pair() -> None:
    rows = [
        # closest to 0.47 on the mean, but real data scores above PGD on 3->8: refused
        _row("tiny", 1, "4->9", 0.40, 0.90), _row("tiny", 1, "3->8", 0.60, 0.55), _row("tiny", 1, "mean", 0.50, 0.72),
        _row("small", 3, "4->9", 0.55, 1.00), _row("small", 3, "3->8", 0.65, 1.10), _row("small", 3, "mean", 0.60, 1.05),
        _row("wide", 3, "4->9", 0.85, 0.95), _row("wide", 3, "3->8", 0.90, 0.99), _row("wide", 3, "mean", 0.87, 0.97),
    ]
    chosen = calibration.choose(rows)
    assert (chosen["capacity"], chosen["epochs"]) == ("small", 3)
    with pytest.raises(MissingResultsError, match="no grid point ranks real data below PGD"):
        calibration.choose(rows[:3])


def test_snapshots_are_the_runs_of_that_many_epochs() -> None:
    """A snapshot at epoch k of one run equals a k-epoch run (constant learning rate, same seed)."""
    snapshots = calibration.train_snapshots(4, "tiny", "[-1,1]", epochs=(1, 2), max_steps=None)
    again = calibration.train_snapshots(4, "tiny", "[-1,1]", epochs=(1,), max_steps=None)
    assert set(snapshots) == {1, 2}
    assert all(torch.equal(snapshots[1][k], again[1][k]) for k in again[1])
    assert not torch.equal(snapshots[1]["decoder.6.weight"], snapshots[2]["decoder.6.weight"])


def test_signed_autoencoder_keeps_the_kit_range() -> None:
    model = ClassAutoencoder((4, 4, 1), signed=True).eval()
    torch.nn.init.zeros_(model.decoder[-1].weight)
    torch.nn.init.constant_(model.decoder[-1].bias, -1.0)  # -1 in the network's range is black in the kit's
    assert torch.allclose(model(torch.rand(2, 1, 28, 28)), torch.zeros(2, 1, 28, 28))


def test_the_committed_study_chose_the_shipped_setting() -> None:
    study = calibration.read_study()
    assert calibration.setting_of(study["chosen"]) == {**CALIBRATED_AE, "channels": tuple(CALIBRATED_AE["channels"])}
    assert study["chosen"] == calibration.choose(study["rows"])
    means = [r for r in study["rows"] if r["pair"] == "mean"]
    assert len(means) == 1 + sum(len(epochs) for _, _, epochs in calibration.GRID)
    assert study["reference"]["im1_original"] > study["chosen"]["im1_original"]
    manifest = read_manifest()
    for digit in range(10):
        assert manifest[f"ae_cal_{digit}"]["epochs"] == CALIBRATED_AE["epochs"]
        assert isinstance(load(f"ae_cal_{digit}"), ClassAutoencoder)


def test_a_missing_study_names_its_command(tmp_path) -> None:
    with pytest.raises(MissingResultsError, match="cfkit calibrate"):
        calibration.read_study(tmp_path)
    with pytest.raises(MissingResultsError, match="cfkit run 10_metrics"):
        calibration.run_study(tmp_path, pairs=[(4, 9)])

"""The IM1 calibration study: its selection rule, its axes, its training snapshots, the committed study and the
shipped setting."""
from __future__ import annotations

import pytest
import torch

from cfkit.errors import MissingResultsError
from cfkit.studies import calibration
from cfkit.studies.calibration import Architecture
from cfkit.zoo.checkpoints import CALIBRATED_AE, load, read_manifest
from cfkit.zoo.nets import ClassAutoencoder


def _rows(capacity: str, parameters: int, mse: float, pairs: dict[str, tuple[float, float]], half: float = 0.01,
          epochs: int = 10, aggregation: str = "mean", **axes) -> list[dict]:
    """One setting's pair rows (real-data and PGD IM1 with intervals of ± ``half``) and their mean row."""
    setting = {"capacity": capacity, "pixel_range": "[0,1]", "code": None, "code_relu": True, "epochs": epochs,
               "aggregation": aggregation, "parameters": parameters, "ae_mse": {"4": mse, "9": mse}, **axes}
    rows = []
    for pair, (original, pgd) in pairs.items():
        rows.append({**setting, "pair": pair, "im1_original": original, "im1_pgd": pgd, "im1_heldout": original + 0.01,
                     "im1_original_lo": original - half, "im1_original_hi": original + half,
                     "im1_pgd_lo": pgd - half, "im1_pgd_hi": pgd + half})
    mean = {k: sum(r[k] for r in rows) / len(rows) for k in ("im1_original", "im1_pgd", "im1_heldout")}
    return rows + [{**setting, "pair": "mean", **mean}]


def test_choose_refuses_degenerate_autoencoders_and_overlapping_intervals() -> None:
    rows = (
        # closest to 0.47, but its autoencoders reconstruct 3x worse than the grid's best: not a real model
        _rows("tiny", 500, 0.03, {"4->9": (0.47, 0.9), "3->8": (0.47, 0.9)})
        # separates on the means, but on 3->8 the intervals overlap
        + _rows("small", 900, 0.011, {"4->9": (0.50, 0.9), "3->8": (0.60, 0.615)})
        + _rows("van_looveren", 3800, 0.010, {"4->9": (0.70, 1.0), "3->8": (0.80, 1.1)})
        + _rows("wide", 9000, 0.012, {"4->9": (0.86, 1.0), "3->8": (0.90, 1.1)})
    )
    assert calibration.real_models(rows) == {calibration.setting_key(r) for r in rows if r["capacity"] != "tiny"}
    chosen = calibration.choose(rows)
    assert chosen["capacity"] == "van_looveren" and chosen["near_paper"] is False  # 0.75 is 0.28 from 0.47
    with pytest.raises(MissingResultsError, match="widen the grid"):
        calibration.choose(rows[:6])


def test_choose_breaks_ties_within_002_by_simplicity_and_flags_a_match() -> None:
    rows = (_rows("wide", 9000, 0.010, {"4->9": (0.48, 1.0)})
            + _rows("van_looveren", 3800, 0.010, {"4->9": (0.495, 1.0)})
            + _rows("van_looveren", 3800, 0.010, {"4->9": (0.49, 1.0)}, epochs=30))
    chosen = calibration.choose(rows)
    assert (chosen["capacity"], chosen["epochs"], chosen["near_paper"]) == ("van_looveren", 10, True)


def test_axis_effects_change_one_axis_at_a_time() -> None:
    rows = (_rows("van_looveren", 3800, 0.01, {"4->9": (0.80, 1.0)})
            + _rows("van_looveren", 3800, 0.01, {"4->9": (0.75, 1.0)}, aggregation="sum")
            + _rows("van_looveren", 9000, 0.01, {"4->9": (0.60, 1.0)}, code=16)
            + _rows("van_looveren", 9000, 0.01, {"4->9": (0.55, 1.0)}, code=16, aggregation="sum"))
    around = rows[1]  # the spatial, mean-of-ratios setting's mean row
    effects = {(e["axis"], e["value"]): e["moved"] for e in calibration.axis_effects(rows, around)}
    assert effects[("aggregation", "sum")] == pytest.approx(-0.05)
    assert effects[("code", 16)] == pytest.approx(-0.20) and effects[("code", "spatial")] == 0
    assert effects[("real-data draw", "held-out test digits")] == pytest.approx(0.01)


def test_snapshots_are_the_runs_of_that_many_epochs() -> None:
    """A snapshot at epoch k of one run equals a k-epoch run (constant learning rate, same seed); each carries
    its test MSE."""
    tiny = Architecture("tiny", "[-1,1]")
    snapshots = calibration.train_snapshots(4, tiny, epochs=(1, 2))
    again = calibration.train_snapshots(4, tiny, epochs=(1,))
    assert set(snapshots) == {1, 2}
    assert all(torch.equal(snapshots[1]["state"][k], again[1]["state"][k]) for k in again[1]["state"])
    assert snapshots[1]["mse"] == again[1]["mse"] and 0 < snapshots[2]["mse"] < 0.2
    assert not torch.equal(snapshots[1]["state"]["decoder.6.weight"], snapshots[2]["state"]["decoder.6.weight"])


@pytest.mark.parametrize("code", [None, 8, 32])
@pytest.mark.parametrize("code_relu", [True, False])
def test_every_architecture_maps_digits_to_digits(code: int | None, code_relu: bool) -> None:
    architecture = Architecture(code=code, code_relu=code_relu)
    model = architecture.build().eval()
    encoded = model.encoder(torch.rand(3, 1, 28, 28))
    assert encoded.shape == ((3, 8, 7, 7) if code is None else (3, code))
    assert model(torch.rand(3, 1, 28, 28)).shape == (3, 1, 28, 28)
    if code_relu:
        assert encoded.min() >= 0
    assert architecture.code_size == (392 if code is None else code)


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
    settings = 1 + sum(len(epochs) for _, epochs in calibration.GRID)
    assert len(means) == settings * len(calibration.AGGREGATIONS)
    assert {e["axis"] for e in study["axes"]} >= {"aggregation", "code", "code_relu", "real-data draw"}
    assert all("ae_mse" in r and "im1_heldout_lo" in r for r in study["rows"])
    manifest = read_manifest()
    for digit in range(10):
        assert manifest[f"ae_cal_{digit}"]["epochs"] == CALIBRATED_AE["epochs"]
        assert isinstance(load(f"ae_cal_{digit}"), ClassAutoencoder)


def test_a_missing_study_names_its_command(tmp_path) -> None:
    with pytest.raises(MissingResultsError, match="cfkit calibrate"):
        calibration.read_study(tmp_path)
    with pytest.raises(MissingResultsError, match="cfkit run 10_metrics"):
        calibration.run_study(tmp_path, pairs=[(4, 9)])


def test_the_committed_tables_calibrated_im1_separates_real_data_from_the_attack_on_every_pair() -> None:
    """On each pair: Original Data and Adv. Attack differ with disjoint intervals, and the methods spread over at
    least 5 times the typical (median) interval half-width, so the column carries information."""
    import statistics

    from cfkit.paths import RESULTS_DIR
    from cfkit.scoring.table import read_csv

    rows = read_csv(RESULTS_DIR / "table.csv")
    for pair in {r["pair"] for r in rows}:
        by_method = {r["method"]: r for r in rows if r["pair"] == pair}
        real, attack = by_method["original_data"], by_method["adv_attack"]
        assert real["im1_calibrated_hi"] < attack["im1_calibrated_lo"], pair
        values = [r["im1_calibrated"] for r in by_method.values()]
        half = statistics.median((r["im1_calibrated_hi"] - r["im1_calibrated_lo"]) / 2 for r in by_method.values())
        assert max(values) - min(values) >= 5 * half, pair
        assert all(r["im1_sum"] is not None and r["im1_sum_lo"] <= r["im1_sum"] <= r["im1_sum_hi"]
                   for r in by_method.values())

"""Rank stability (issue 30): every two methods' IM1/IM2 order under every autoencoder setting the calibration
study admits, the axis that decides a flip, the checks on retrained autoencoders, and an end-to-end run on real
digits."""
from __future__ import annotations

import csv
import shutil

import pytest
import torch

from cfkit.errors import CheckpointError, MissingResultsError
from cfkit.methods.base import Result
from cfkit.paths import RESULTS_DIR
from cfkit.running import cli
from cfkit.scoring import evaluation
from cfkit.scoring.store import save_counterfactuals
from cfkit.studies import rank_stability
from cfkit.studies.calibration import read_study
from cfkit.studies.rank_stability import AXES, Instrument
from cfkit.zoo.checkpoints import load
from cfkit.zoo.classifiers import fingerprint


def test_the_admitted_instruments_are_the_studys_and_include_both_shipped_sets() -> None:
    instruments = rank_stability.admitted_instruments(read_study())
    assert len(instruments) == 6 and sum(len(i.aggregations) for i in instruments) == 12
    assert [i.zoo_prefix for i in instruments].count("ae") == 1  # the table's im1 and im1_sum
    assert [i.zoo_prefix for i in instruments].count("ae_cal") == 1  # the table's im1_calibrated
    assert len({i.label for i in instruments}) == len({i.file_stem for i in instruments}) == 6


def _setting(**axes) -> tuple:
    base = {"capacity": "van_looveren", "pixel_range": "[0,1]", "code": "spatial", "code_relu": True, "epochs": 30,
            "aggregation": "mean"}
    return tuple({**base, **axes}[axis] for axis in AXES)


def test_flips_with_names_the_axis_that_alone_decides_the_order() -> None:
    settings = {_setting(aggregation="mean", epochs=10): {"a": 1.0, "b": 2.0},
                _setting(aggregation="sum", epochs=10): {"a": 2.0, "b": 1.0},
                _setting(aggregation="mean", epochs=30): {"a": 1.0, "b": 2.0},
                _setting(aggregation="sum", epochs=30): {"a": 3.0, "b": 1.0}}
    assert rank_stability.flips_with(settings, "a", "b") == "aggregation: a below b exactly under mean"
    settings[_setting(aggregation="sum", epochs=30)] = {"a": 0.5, "b": 1.0}  # now neither axis alone decides it
    assert rank_stability.flips_with(settings, "a", "b") == "no single axis decides it"


def _score(setting: str, aggregation: str, method: str, im1: float, chosen: bool = False) -> dict:
    return {"setting": setting, "capacity": "van_looveren", "pixel_range": "[0,1]",
            "code": "spatial" if setting != "dense" else 16, "code_relu": True, "epochs": 30, "zoo": None,
            "aggregation": aggregation, "chosen": chosen, "method": method, "pair": "mean", "im1": im1, "im2": im1 / 10,
            "target_error": 1.0, "source_error": 1.0}


def test_pairwise_counts_the_settings_that_agree_and_reads_the_other_orders() -> None:
    # CEM below CVE under every setting; Adv. Attack below CEM only under the dense code's ratio of sums
    values = {("spatial", "mean"): (1.2, 1.3, 1.4), ("spatial", "sum"): (1.2, 1.3, 1.4),
              ("dense", "mean"): (1.5, 1.3, 1.4), ("dense", "sum"): (1.0, 1.3, 1.4)}
    scores = [_score(setting, aggregation, method, value, chosen=(setting, aggregation) == ("dense", "mean"))
              for (setting, aggregation), triple in values.items()
              for method, value in zip(("adv_attack", "cem", "cve"), triple)]
    replicates = {"adv_attack": {"im1": torch.tensor([1.5, 1.5, 1.2, 1.6]), "im2": torch.zeros(4)},
                  "cem": {"im1": torch.tensor([1.3, 1.3, 1.3, 1.3]), "im2": torch.ones(4)},
                  "cve": {"im1": torch.tensor([1.4, 1.4, 1.4, 1.4]), "im2": torch.ones(4)}}
    table = [{"method": m, "pair": "mean", "fid": fid, "fid_inception": inception}
             for m, fid, inception in (("adv_attack", 54, 160), ("cem", 50, 66), ("cve", 105, 84))]
    rows = {(r["metric"], r["a"], r["b"]): r for r in rank_stability.pairwise(scores, replicates, table)}
    assert len(rows) == 6
    cem_cve = rows[("im1", "cem", "cve")]
    assert cem_cve["share_a_below"] == 1.0 and cem_cve["verdict"] == "robust" and cem_cve["flips_with"] is None
    assert cem_cve["paper_a_below"] is False  # the paper has CEM 1.68 above CVE 1.44
    attack_cem = rows[("im1", "adv_attack", "cem")]
    assert attack_cem["settings"] == 4 and attack_cem["share_a_below"] == 0.75 and attack_cem["verdict"] == "flips"
    assert attack_cem["chosen_a_below"] is False  # the chosen setting (dense, mean) has 1.5 against 1.3
    assert attack_cem["chosen_probability_a_below"] == 0.25  # one replicate of four
    assert attack_cem["kit_fid_a_below"] is False and attack_cem["inception_fid_a_below"] is False
    assert attack_cem["flips_with"] == "no single axis decides it"
    assert rows[("im2", "adv_attack", "cem")]["settings"] == 2  # IM2 has one setting per autoencoder set
    assert rows[("im2", "adv_attack", "cem")]["paper_a_below"] is None  # the paper gives IM1 only
    agreement = rank_stability.paper_agreement(list(rows.values()))
    assert agreement == {"hold under all": [], "flip": ["Adv. Attack < CEM", "Adv. Attack < CVE"],
                         "reversed under all": ["CVE < CEM"]}  # the paper: Adv. Attack 1.02, CVE 1.44, CEM 1.68


def test_a_retrained_autoencoder_must_reproduce_the_studys_mse() -> None:
    instrument = rank_stability.admitted_instruments(read_study())[1]
    recorded = rank_stability.recorded_mse(read_study(), instrument)
    rank_stability._check_reproduced(instrument, {4: recorded[4] * 1.005}, recorded)  # thread-count noise passes
    with pytest.raises(CheckpointError, match="is not the autoencoder the study admitted. Re-run `cfkit calibrate`"):
        rank_stability._check_reproduced(instrument, {4: recorded[4] * 1.2}, recorded)


def test_a_corrupt_cached_autoencoder_is_named_with_the_fix(tmp_path) -> None:
    instrument = next(i for i in rank_stability.admitted_instruments(read_study()) if i.zoo_prefix is None)
    (tmp_path / f"{instrument.file_stem}_4.pt").write_bytes(b"not a state")
    with pytest.raises(CheckpointError, match="is not a readable autoencoder of .* delete it and run again"):
        rank_stability.instrument_autoencoders([instrument], [4], read_study(), tmp_path)


def _protocol_results(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    for name in ("im_calibration.json", "table.csv"):
        shutil.copy(RESULTS_DIR / name, results / name)
    return results


def test_end_to_end_real_digits_rank_below_noisy_ones_under_the_shipped_instruments(tmp_path) -> None:
    """Two sets of real 9s for 4->9, one with noise, scored under every admitted setting (the retrained ones at a
    few steps): the shipped autoencoders put the clean digits below the noisy ones, and the files are written."""
    nines = evaluation.reference_images(9)[:12]
    fours = evaluation.reference_images(4)[:12]
    noisy = (nines + 0.35 * torch.randn(nines.shape, generator=torch.Generator().manual_seed(0))).clamp(0, 1)
    digest = fingerprint(load("classifier"))
    for method, x_cf, folder in (("original_data", nines, "10_metrics"), ("adv_attack", noisy, "01_adversarial")):
        result = Result(x=fours, x_cf=x_cf, source=torch.full((12,), 4), target=torch.full((12,), 9),
                        valid=torch.ones(12, dtype=torch.bool), seconds=1.0)
        save_counterfactuals(tmp_path / "runs" / folder, method, (4, 9), torch.arange(12), result, digest)
    results = _protocol_results(tmp_path)
    study = rank_stability.run_study(tmp_path / "runs", results, pairs=[(4, 9)],
                                     methods=["original_data", "adv_attack"], max_steps=2, cache_dir=tmp_path / "c")
    assert len(study["scores"]) == 12 * 2 * 2  # 12 settings × 2 methods × (the pair and the mean)
    shipped = {(r["setting"], r["aggregation"], r["method"]): r["im1"] for r in study["scores"]
               if r["zoo"] and r["pair"] == "mean"}
    assert len(shipped) == 8
    for (setting, aggregation, method), im1 in shipped.items():
        if method == "original_data":
            assert im1 < shipped[(setting, aggregation, "adv_attack")]
    assert [(r["metric"], r["settings"]) for r in study["pairwise"]] == [("im1", 12), ("im2", 6)]
    assert not (tmp_path / "c").exists()  # a capped run caches nothing
    written = rank_stability.write_study(study, results)
    assert [p.name for p in written] == ["rank_stability.csv", "rank_stability_scores.csv", "rank_stability.png"]
    with open(written[0]) as handle:
        assert len(list(csv.DictReader(handle))) == 2


def test_missing_inputs_name_their_commands(tmp_path) -> None:
    with pytest.raises(MissingResultsError, match="run `cfkit calibrate`"):
        rank_stability.run_study(tmp_path / "runs", tmp_path)
    results = _protocol_results(tmp_path)
    with pytest.raises(MissingResultsError, match=r"no original_data set for 4->9 .* run `cfkit run 10_metrics`"):
        rank_stability.run_study(tmp_path / "runs", results)


def test_cli_refuses_zero_jobs_in_one_line(capsys) -> None:
    assert cli.main(["rank-stability", "-j", "0"]) == 2
    line = capsys.readouterr().err.strip()
    assert line == "cfkit: error: jobs must be an int >= 1 (autoencoders retrained at once), got 0."


def test_instrument_labels_name_every_axis() -> None:
    chosen = next(i for i in rank_stability.admitted_instruments(read_study()) if i.zoo_prefix == "ae_cal")
    assert chosen.label == "van_looveren [0,1] dense 16 linear, 100 ep"
    assert isinstance(chosen, Instrument) and chosen.key == ("van_looveren", "[0,1]", 16, False, 100)


def test_the_written_study_reads_back_with_its_types(tmp_path) -> None:
    scores = [_score("spatial", "mean", m, v, chosen=True) for m, v in (("cem", 1.3), ("cve", 1.4))]
    replicates = {m: {"im1": torch.full((4,), v), "im2": torch.full((4,), v)} for m, v in (("cem", 1.3), ("cve", 1.4))}
    study = {"scores": scores, "pairwise": rank_stability.pairwise(scores, replicates, [])}
    rank_stability.write_study(study, tmp_path)
    back = rank_stability.read_results(tmp_path)
    for key in ("pairwise", "scores"):
        for read, written in zip(back[key], study[key], strict=True):
            assert read.keys() == written.keys()
            for column, value in written.items():  # numbers are written to 6 decimals
                assert read[column] == (pytest.approx(value, abs=1e-6) if isinstance(value, float) else value)
    with pytest.raises(MissingResultsError, match="run `cfkit rank-stability`"):
        rank_stability.read_results(tmp_path / "nowhere")

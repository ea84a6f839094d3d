"""The faithfulness study (issue 16): CEM's reference knobs, the study's rows, verdicts and floor, and the
training hooks the study's curves use."""
from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from cfkit.data import load_mnist
from cfkit.errors import CheckpointError, InputError
from cfkit.methods.c3lt import C3LT
from cfkit.methods.cem import CEM, CEM_REFERENCE, CEMConfig, hinge_margin
from cfkit.running import cli
from cfkit.scoring import plots
from cfkit.studies import faithfulness
from cfkit.zoo.checkpoints import load, train
from cfkit.zoo.explaingan import ExplainGAN, ExplainGANWeights, generator_terms
from cfkit.zoo.latent_maps import C3LTWeights, proximity


@pytest.fixture(scope="module")
def fours() -> torch.Tensor:
    return load_mnist("test", digits=(4,))[0][:4]


@pytest.mark.parametrize(("make", "message"), [
    (lambda: CEMConfig(hinge="away"), "hinge must be one of 'targeted', 'pn', got 'away'"),
    (lambda: CEMConfig(success="always"), "success must be one of 'positive', 'kappa', got 'always'"),
    (lambda: CEMConfig(patience=-1), "patience must be an int >= 0"),
    (lambda: CEMConfig(patience=True), "patience must be an int >= 0"),
    (lambda: CEMConfig(patience=2.5), "patience must be an int >= 0"),
])
def test_cem_reference_knobs_are_range_checked(make, message: str) -> None:
    with pytest.raises(InputError, match=message):
        make()


def test_cem_reference_is_the_ibm_code_setting() -> None:
    assert (CEM_REFERENCE.search_steps, CEM_REFERENCE.iterations, CEM_REFERENCE.kappa, CEM_REFERENCE.gamma,
            CEM_REFERENCE.beta, CEM_REFERENCE.c_init) == (9, 1000, 10.0, 100.0, 0.1, 10.0)
    assert (CEM_REFERENCE.hinge, CEM_REFERENCE.success, CEM_REFERENCE.patience) == ("pn", "kappa", 0)
    assert (CEMConfig().hinge, CEMConfig().success) == ("targeted", "positive"), "the kit's behaviour stays the default"


def test_pn_hinge_pushes_away_from_the_query_class_and_kappa_success_needs_the_margin() -> None:
    logits = torch.tensor([[5.0, 1.0, 0.0], [1.0, 3.0, 0.0], [0.0, 12.0, 1.0]])
    source, target = torch.tensor([0, 0, 0]), torch.tensor([2, 2, 2])
    # targeted: Z_t - max_{j != t} Z_j ; pn: max_{j != o} Z_j - Z_o, whichever class that is
    assert hinge_margin(logits, target, source, "targeted").tolist() == [-5.0, -3.0, -11.0]
    assert hinge_margin(logits, target, source, "pn").tolist() == [-4.0, 2.0, 12.0]
    method = CEM(load("classifier"), load("ae_all"), CEMConfig(hinge="pn", success="kappa", kappa=10.0))
    assert method.succeeded(logits, target, source).tolist() == [False, False, True]
    loose = CEM(load("classifier"), load("ae_all"), CEMConfig(hinge="pn", success="positive", kappa=10.0))
    assert loose.succeeded(logits, target, source).tolist() == [False, True, True]


def test_cem_patience_stops_rounds_early_and_reports_the_iterations(fours) -> None:
    classifier, autoencoder = load("classifier"), load("ae_all")
    full = CEM(classifier, autoencoder, CEMConfig(search_steps=2, iterations=60)).explain(fours, 9)
    assert full.extras["iterations"].tolist() == [120] * len(fours)
    early = CEM(classifier, autoencoder, CEMConfig(search_steps=2, iterations=60, patience=3)).explain(fours, 9)
    assert 2 * 4 <= early.extras["iterations"][0].item() < 120
    assert (early.x_cf >= early.x - 1e-6).all(), "still only adds ink"


def test_cem_settled_images_leave_the_batch_and_end_as_they_would_alone(fours) -> None:
    """settle="image": each image stops at its own settle point, so its counterfactual is the one the batch rule
    gives it alone (up to float rounding of batched kernels), and the pair costs fewer image-iterations."""
    classifier, autoencoder = load("classifier"), load("ae_all")
    config = replace(CEM_REFERENCE, iterations=60, search_steps=2, patience=10)
    x, source = fours, torch.full((len(fours),), 4)
    per_image = CEM(classifier, autoencoder, replace(config, settle="image")).explain(x, 9, source=source)
    alone = [CEM(classifier, autoencoder, config).explain(x[i : i + 1], 9, source=source[i : i + 1])
             for i in range(len(x))]
    assert torch.allclose(per_image.x_cf, torch.cat([r.x_cf for r in alone]), atol=1e-3)
    assert per_image.extras["iterations"].tolist() == [r.extras["iterations"].item() for r in alone]
    batch = CEM(classifier, autoencoder, config).explain(x, 9, source=source)
    assert per_image.extras["iterations"].sum() < batch.extras["iterations"].sum(), "the batch waits for its slowest"
    never = replace(config, patience=0)
    assert torch.equal(CEM(classifier, autoencoder, replace(never, settle="image")).explain(x, 9, source=source).x_cf,
                       CEM(classifier, autoencoder, never).explain(x, 9, source=source).x_cf), "no patience: no stop"
    with pytest.raises(InputError, match="settle must be one of"):
        CEMConfig(settle="never")


def test_cem_reference_hinge_runs_and_only_adds_ink(fours) -> None:
    config = CEMConfig(kappa=10.0, gamma=100.0, search_steps=2, iterations=20, hinge="pn", success="kappa")
    result = CEM(load("classifier"), load("ae_all"), config).explain(fours, 9)
    assert result.x_cf.shape == fours.shape and (result.x_cf >= fours - 1e-6).all()
    assert result.extras["found"].dtype == torch.bool


def test_study_has_kit_and_reference_for_every_method() -> None:
    settings = faithfulness.study_settings()
    named = {(s.method, s.setting) for s in settings}
    for method in ("adv_attack", "cve", "cem", "ldce", "c3lt", "expgan"):
        assert {(method, "kit"), (method, "reference")} <= named, method
    reference_cem = next(s for s in settings if s.method == "cem" and s.setting == "reference")
    assert reference_cem.budget == 9000
    reference_ldce = next(s for s in settings if s.method == "ldce" and s.setting == "reference")
    assert reference_ldce.budget == 171
    with pytest.raises(InputError, match=r"no study settings for \['nope'\]"):
        faithfulness.study_settings(["nope"])


def test_score_setting_gives_pair_and_mean_rows_that_survive_the_csv(tmp_path) -> None:
    setting = next(s for s in faithfulness.study_settings(["adv_attack"]) if s.setting == "reference")
    rows = faithfulness.score_setting(setting, "4->9,3->8", n_queries=3)
    assert [r["pair"] for r in rows] == ["4->9", "3->8", "mean"]
    mean = rows[-1]
    assert mean["n"] == 6 and mean["im1_lo"] <= mean["im1"] <= mean["im1_hi"] and mean["seconds_per_cf"] > 0
    assert mean["im1"] == pytest.approx((rows[0]["im1"] + rows[1]["im1"]) / 2)
    back = faithfulness.read_csv(faithfulness.write_csv(rows, tmp_path / "study.csv"))
    assert [r["setting"] for r in back] == ["reference"] * 3
    assert back[-1]["fid"] == pytest.approx(mean["fid"], rel=1e-5) and back[-1]["budget_unit"] == "PGD steps"
    header = (tmp_path / "study.csv").read_text().splitlines()[0]
    assert header.startswith("method,setting,budget,n,im1,im2,fid,validity,proximity,seconds_per_cf")


def _row(method: str, setting: str, im1: float, fid: float, seconds: float, budget: float = 1.0,
         pair: str = "mean", half: float = 0.05) -> dict:
    return {"method": method, "setting": setting, "pair": pair, "budget": budget, "im1": im1, "fid": fid,
            "im1_lo": im1 - half, "im1_hi": im1 + half, "fid_lo": fid - 10 * half, "fid_hi": fid + 10 * half,
            "seconds_per_cf": seconds}


def test_verdicts_pick_the_cheapest_setting_inside_the_reference_interval() -> None:
    rows = [_row("cem", "kit", 1.20, 50.0, 0.1), _row("cem", "reference@200", 0.90, 27.2, 2.0),
            _row("cem", "reference", 0.88, 27.0, 10.0), _row("cve", "kit", 1.0, 20.0, 0.01),
            _row("cve", "reference", 1.02, 20.1, 0.02)]
    verdict = {v["method"]: v for v in faithfulness.verdicts(rows)}
    assert verdict["cem"]["cheapest"] == "reference@200" and not verdict["cem"]["kit_inside_reference"]
    assert verdict["cve"]["cheapest"] == "kit" and verdict["cve"]["kit_inside_reference"]
    assert faithfulness.inside_reference(rows, "cem", "reference@200")
    with pytest.raises(InputError, match="no mean row"):
        faithfulness.inside_reference(rows, "ldce", "kit")


def test_floor_gap_compares_c3lt_with_its_generator_floor() -> None:
    rows = [_row("c3lt", "floor G(E(x))", 0.8, 5.0, 0.0, pair="4->9"), _row("c3lt", "reference", 0.85, 5.3, 0.0,
                                                                               pair="4->9"),
            _row("c3lt", "floor G(E(x))", 0.8, 5.0, 0.0, pair="5->6"), _row("c3lt", "reference", 0.9, 9.0, 0.0,
                                                                               pair="5->6")]
    gaps = {g["pair"]: g for g in faithfulness.floor_gap(rows)}
    assert gaps["4->9"]["within"] and gaps["4->9"]["gap"] == pytest.approx(0.3)
    assert not gaps["5->6"]["within"] and gaps["5->6"]["half_width"] == pytest.approx(0.5)


@pytest.mark.parametrize(("method", "backbone", "setting"), [
    ("c3lt", "kit", "floor G(E(x))"), ("c3lt", "reference", "floor G(E(x)) on dcgan_reference"),
    ("ldce", "kit", "floor D(E(x))")])
def test_a_backbone_floor_scores_reconstructions_of_real_target_digits(method, backbone, setting) -> None:
    rows = faithfulness.backbone_floor(method, "4->9", n_queries=8, backbone=backbone)
    assert [r["pair"] for r in rows] == ["4->9", "mean"] and rows[0]["setting"] == setting
    assert rows[0]["validity"] > 0.5 and rows[0]["fid"] > 0 and math.isnan(rows[0]["budget"])
    with pytest.raises(InputError, match="no backbone floor for 'cem' on the 'kit' backbone; floors exist for "
                                         "c3lt on kit, c3lt on reference, ldce on kit"):
        faithfulness.backbone_floor("cem", "4->9", n_queries=8)
    with pytest.raises(InputError, match="no backbone floor for 'ldce' on the 'reference' backbone"):
        faithfulness.backbone_floor("ldce", "4->9", n_queries=8, backbone="reference")


def test_floor_gap_sets_each_c3lt_generator_beside_its_own_floor() -> None:
    rows = [_row("c3lt", "floor G(E(x))", 0.8, 9.0, 0.0, pair="4->9"), _row("c3lt", "reference", 0.9, 12.0, 0.0,
                                                                              pair="4->9"),
            _row("c3lt", "floor G(E(x)) on dcgan_reference", 0.8, 2.0, 0.0, pair="4->9"),
            _row("c3lt", faithfulness.REFERENCE_GENERATOR, 0.85, 2.2, 0.0, pair="4->9")]
    (kit,) = faithfulness.floor_gap(rows)
    (reference,) = faithfulness.floor_gap(rows, backbone="reference")
    assert (kit["fid"], kit["floor_fid"], kit["within"]) == (12.0, 9.0, False)
    assert (reference["fid"], reference["floor_fid"], reference["within"]) == (2.2, 2.0, True)


def _reference_generator_for(monkeypatch, *pairs: tuple[int, int]) -> None:
    """The shipped manifest as if the reference generator's encoders and maps were trained for ``pairs`` only."""
    ours = ("c3lt_reference_", "encoder_reference_")
    shipped = {k: v for k, v in faithfulness.read_manifest().items() if not k.startswith(ours)}
    shipped.update({f"{family}{q}_{t}": {"steps": 9000 + q} for family in ours for q, t in pairs})
    monkeypatch.setattr(faithfulness, "read_manifest", lambda *a: shipped)


def test_c3lt_on_the_reference_generator_joins_the_study_once_every_pair_has_it(monkeypatch) -> None:
    _reference_generator_for(monkeypatch, (4, 9))
    assert faithfulness.reference_generator_missing() == [(3, 8), (5, 6)]
    assert (C3LT.name, faithfulness.REFERENCE_GENERATOR) not in {(s.method, s.setting)
                                                                 for s in faithfulness.study_settings(["c3lt"])}
    assert [f.setting for f in faithfulness.study_floors(["c3lt", "ldce"])] == ["floor G(E(x))", "floor D(E(x))"]
    with pytest.raises(InputError, match=r"needs encoder_reference_3_8 and c3lt_reference_3_8 in the zoo; train "
                                         r"them with `cfkit train encoder_reference c3lt_reference --pair 3 8"):
        faithfulness.reference_generator_pairs("4->9,3->8")
    assert faithfulness.reference_generator_pairs() == [(4, 9)], "by default: the pairs it is trained for"
    _reference_generator_for(monkeypatch)
    with pytest.raises(InputError, match="needs encoder_reference_4_9 and c3lt_reference_4_9"):
        faithfulness.reference_generator_pairs()
    _reference_generator_for(monkeypatch, *faithfulness.PAIRS)
    setting = next(s for s in faithfulness.study_settings(["c3lt"]) if s.setting == faithfulness.REFERENCE_GENERATOR)
    assert (setting.budget, setting.unit) == (9004, "training steps on dcgan_reference"), "mean steps of the pairs"
    assert [f.setting for f in faithfulness.study_floors(["c3lt"])] == ["floor G(E(x))",
                                                                       "floor G(E(x)) on dcgan_reference"]


def test_cli_scores_c3lt_on_the_reference_generator_where_it_is_trained(tmp_path, monkeypatch) -> None:
    """The pairs the C3LT code's generator has maps for: pair rows (a mean only once all three have them), beside
    that generator's floor, in place of their old rows in the study CSV."""
    ready = faithfulness.reference_generator_pairs()  # the real zoo: the first pair it holds
    others = {f"c3lt_reference_{q}_{t}" for q, t in faithfulness.PAIRS if (q, t) != ready[0]}
    shipped = {k: v for k, v in faithfulness.read_manifest().items() if k not in others}
    monkeypatch.setattr(faithfulness, "read_manifest", lambda *a: shipped)
    csv_path = faithfulness.write_csv([{**_row("c3lt", "reference", 1.0, 20.0, 0.01), "budget_unit": "training steps"},
                                       {**_row("c3lt", faithfulness.REFERENCE_GENERATOR, 9.0, 9.0, 9.0,
                                               pair="4->9"), "budget_unit": "x"}], tmp_path / "study.csv")
    assert cli.main(["faithfulness", "--reference-generator", "-n", "8", "--csv", str(csv_path)]) == 0
    rows = faithfulness.read_csv(csv_path)
    pair = f"{ready[0][0]}->{ready[0][1]}"
    assert [(r["setting"], r["pair"]) for r in rows] == [
        ("reference", "mean"), (faithfulness.REFERENCE_GENERATOR, pair), ("floor G(E(x)) on dcgan_reference", pair)]
    scored = rows[1]
    assert scored["n"] == 8 and scored["budget_unit"] == "training steps on dcgan_reference" and scored["im1"] < 9.0
    assert scored["budget"] == faithfulness.read_manifest()[f"c3lt_reference_{ready[0][0]}_{ready[0][1]}"]["steps"]
    assert rows[2]["budget"] is None and rows[2]["validity"] > 0.5, "a floor: real target digits, reconstructed"


def test_floor_gap_compares_ldce_with_its_vae_floor() -> None:
    rows = [_row("ldce", "floor D(E(x))", 0.8, 4.0, 0.0, pair="3->8"), _row("ldce", "reference", 0.9, 6.0, 0.0,
                                                                              pair="3->8")]
    (gap,) = faithfulness.floor_gap(rows, method="ldce")
    assert gap["fid"] == 6.0 and gap["floor_fid"] == 4.0 and not gap["within"]


def test_c3lt_ablation_trains_each_variant_from_the_same_seed() -> None:
    variants = ["reference", "no proximity (alpha 0)", "wide map (400 wide, 2 hidden layers)"]
    rows = faithfulness.c3lt_ablation((5, 6), steps=2, n_queries=8, variants=variants, log=None)
    assert [r["setting"] for r in rows] == [f"ablation: {v}" for v in variants]
    assert all(r["pair"] == "5->6" and r["n"] == 8 and r["budget"] == 2 for r in rows)
    # same seed, different loss or shape: different maps, hence different sets; the same variant again: the same
    assert len({round(r["fid"], 6) for r in rows}) == 3
    again = faithfulness.c3lt_ablation((5, 6), steps=2, n_queries=8, variants=variants[:1], log=None)
    assert again[0]["fid"] == pytest.approx(rows[0]["fid"], rel=1e-6)


def test_recorded_numbers_keep_finite_values_only() -> None:
    rows = [{**_row("c3lt", "floor G(E(x))", 0.8, 5.0, 0.0), "budget": float("nan"), "seconds_per_cf": None}]
    numbers = faithfulness.recorded_numbers(rows)
    assert numbers["c3lt/floor G(E(x))/mean/im1"] == 0.8
    assert "c3lt/floor G(E(x))/mean/budget" not in numbers and "c3lt/floor G(E(x))/mean/seconds_per_cf" not in numbers


def test_training_reports_every_step_and_snapshots_score_in_memory(tmp_path, fours) -> None:
    seen = []
    entry = train("c3lt_4_9", directory=tmp_path, max_steps=3, check_quality=False, progress=False,
                  on_step=lambda model, step: seen.append((step, type(model).__name__)))
    assert seen == [(1, "C3LTMaps"), (2, "C3LTMaps"), (3, "C3LTMaps")] and entry["steps"] == 3
    assert entry["machine"].startswith(("x86_64", "aarch64", "arm64"))
    snapshot = load("c3lt_4_9", directory=tmp_path)
    from_memory = C3LT(load("classifier"), models={(4, 9): snapshot}).explain(fours, 9)
    from_folder = C3LT(load("classifier"), pair_dir=tmp_path).explain(fours, 9)
    assert torch.equal(from_memory.x_cf, from_folder.x_cf)


def test_explaingan_binary_mask_prior_is_a_term_of_the_loss(fours) -> None:
    torch.manual_seed(0)
    model = ExplainGAN((4, 9))
    nines = load_mnist("test", digits=(9,))[0][:4]
    terms = generator_terms(model, load("classifier"), fours, nines)
    without = generator_terms(model, load("classifier"), fours, nines, ExplainGANWeights(entropy=0.0))
    assert 0 < terms["entropy"].item() <= 0.5
    assert terms["total"].item() == pytest.approx(without["total"].item() + terms["entropy"].item(), rel=1e-5)


def test_c3lt_reference_pixel_scale_doubles_the_pixel_l1() -> None:
    x, x_cf = torch.zeros(2, 1, 28, 28), torch.full((2, 1, 28, 28), 0.5)
    kit, reference = C3LTWeights(), C3LTWeights(pixel_scale=2.0)
    total = 1 + kit.smooth + kit.entropy
    assert (proximity(x, x_cf, reference) - proximity(x, x_cf, kit)).item() == pytest.approx(0.5 / total)


def test_cli_faithfulness_refuses_an_unknown_method(capsys) -> None:
    assert cli.main(["faithfulness", "--methods", "nope", "-n", "2"]) == 2
    assert "no study settings for ['nope']" in capsys.readouterr().err


def test_merge_adds_a_mean_over_pairs_scored_in_separate_runs(tmp_path) -> None:
    def one_pair(pair: str, im1: float) -> list[dict]:
        row = {**_row("c3lt", "reference@225", im1, 10.0, 0.001, budget=225, pair=pair), "n": 100,
               "im2": 0.1, "validity": 1.0, "proximity": 0.1, "oracle_agreement": 1.0, "budget_run": 225}
        return [row, {**row, "pair": "mean"}]  # a single-pair run repeats its pair as the mean

    first = faithfulness.write_csv(one_pair("4->9", 0.8), tmp_path / "a.csv")
    second = faithfulness.write_csv(one_pair("5->6", 1.0), tmp_path / "b.csv")
    rows = faithfulness.merge([first, second], {str(second): " (GPU)"})
    assert [(r["setting"], r["pair"]) for r in rows] == [
        ("reference@225", "4->9"), ("reference@225", "mean"), ("reference@225 (GPU)", "5->6"),
        ("reference@225 (GPU)", "mean")]
    merged = faithfulness.merge([first, tmp_path / "b.csv"])
    mean = [r for r in merged if r["pair"] == "mean"]
    assert len(mean) == 1 and mean[0]["im1"] == pytest.approx(0.9) and mean[0]["n"] == 200
    assert mean[0]["im1_lo"] is None, "no interval without the pairs' replicates"


@pytest.mark.parametrize(("make", "message"), [
    (lambda: C3LTWeights(pixel_scale=-2.0), r"C3LTWeights.pixel_scale must be a number >= 0, got -2.0"),
    (lambda: C3LTWeights(steps=0), r"C3LTWeights.steps must be an int >= 1"),
    (lambda: ExplainGANWeights(entropy="high"), r"ExplainGANWeights.entropy must be a number >= 0, got 'high'"),
])
def test_loss_weights_are_range_checked(make, message: str) -> None:
    with pytest.raises(InputError, match=message):
        make()


def test_ldce_along_its_denoisers_curve_is_a_budget_axis_of_its_own(tmp_path, capsys) -> None:
    from cfkit.zoo.diffusion import LatentUNet

    with pytest.raises(InputError, match="no denoiser snapshots.*cfkit backbone ldm_unet"):
        faithfulness.denoiser_settings(tmp_path)
    torch.save(load("ldm_unet").state_dict(), tmp_path / "epoch_8.pt")
    torch.save(LatentUNet().state_dict(), tmp_path / "epoch_1.pt")  # an untrained denoiser: a point of its own
    settings = faithfulness.denoiser_settings(tmp_path)
    assert [(s.method, s.setting, s.budget, s.unit) for s in settings] == [
        ("ldce", "denoiser@1", 1, "denoiser epochs"), ("ldce", "denoiser@8", 8, "denoiser epochs")]
    csv_path = faithfulness.write_csv([{**_row("cve", "kit", 1.0, 20.0, 0.01), "budget_unit": "cells"},
                                       {**_row("ldce", "denoiser@8", 9.0, 9.0, 9.0), "budget_unit": "x"}],
                                      tmp_path / "study.csv")
    assert cli.main(["faithfulness", "--denoiser-curve", str(tmp_path), "-n", "2", "--pairs", "4->9",
                     "--csv", str(csv_path)]) == 0
    rows = faithfulness.read_csv(csv_path)
    assert [(r["setting"], r["pair"]) for r in rows] == [("kit", "mean"), ("denoiser@1", "4->9"),
                                                         ("denoiser@1", "mean"), ("denoiser@8", "4->9"),
                                                         ("denoiser@8", "mean")], "old rows of a setting replaced"
    trained = next(r for r in rows if r["setting"] == "denoiser@8" and r["pair"] == "mean")
    assert trained["n"] == 2 and trained["budget_unit"] == "denoiser epochs" and trained["im1"] < 9.0
    (tmp_path / "epoch_1.pt").write_bytes(b"torn")
    with pytest.raises(CheckpointError, match="epoch_1.pt is not a readable denoiser snapshot"):
        faithfulness.denoiser_settings(tmp_path)[0].build(load("classifier"), "cpu")


def test_verdicts_and_curves_keep_each_budget_axis_apart() -> None:
    steps = [{**_row("ldce", s, 0.90, 9.0, t, budget=b), "budget_unit": "denoising steps"}
             for s, t, b in (("kit", 0.05, 25), ("reference@34", 0.07, 34), ("reference", 0.8, 171))]
    epochs = [{**_row("ldce", f"denoiser@{e}", 0.90, 9.0, 0.001, budget=e), "budget_unit": "denoiser epochs"}
              for e in (4, 8, 16)]
    verdict = faithfulness.verdicts(steps + epochs)[0]
    assert verdict["cheapest"] == "kit", "a cheaper row on another axis (another backbone) is no setting to pick"
    figure = plots.budget_curves(steps + epochs)
    titles = [ax.get_xlabel() for ax in figure.axes[:: len(figure.axes) // 2]]
    assert titles == ["denoising steps", "denoiser epochs"], "one row of panels a budget axis"

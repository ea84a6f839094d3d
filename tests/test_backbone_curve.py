"""C3LT's reference backbone (issue 29): the C3LT code's DCGAN and per-pair encoder in the kit's [0, 1] units, and the
resumable training whose FID curve decides when it has converged."""
from __future__ import annotations

import pytest
import torch

from cfkit.errors import CheckpointError, InputError, QualityError
from cfkit.methods.c3lt import C3LT, C3LTConfig
from cfkit.running import cli
from cfkit.studies.curve import (STATE_FILE, DenoiserCurveConfig, DenoiserCurveRun, GANCurveConfig, GANCurveRun, converged,
                              curve_epochs)
from cfkit.zoo.checkpoints import get_spec, load, names, parse_pair_name
from cfkit.zoo.reference_gan import PairEncoder, ReferenceDCGAN

TINY = GANCurveConfig(max_epochs=3, samples=32, resamples=20, steps_per_epoch=2)
"""Two steps an epoch, 32 samples scored: seconds."""


def test_the_reference_architecture_has_the_c3lt_codes_sizes_and_the_kits_units() -> None:
    gan = ReferenceDCGAN()
    assert sum(p.numel() for p in gan.generator.parameters() if p.requires_grad) == 3_573_696, \
        "ngf 64: ConvT 100->512->256->128->64 (4x4 kernels) and a 1x1 ConvT to one channel, BatchNorm between"
    images = gan.sample(5)
    assert images.shape == (5, 1, 28, 28) and images.min() >= 0 and images.max() <= 1, "tanh mapped to [0, 1]"
    assert gan.discriminator(images).shape == (5,) and PairEncoder()(images).shape == (5, 100)
    first = gan.generator.net[0].weight
    assert abs(first.std().item() - 0.02) < 0.002, "the DCGAN example's N(0, 0.02) initialisation"


def test_curve_points_double_up_to_the_references_length() -> None:
    assert curve_epochs(100) == [1, 2, 4, 8, 16, 32, 64, 100]
    assert curve_epochs(8) == [1, 2, 4, 8]


@pytest.mark.parametrize(("previous", "current", "expected"), [
    (None, {"fid": 3.0, "fid_lo": 2.5, "fid_hi": 3.5}, False),
    ({"fid": 3.2}, {"fid": 3.0, "fid_lo": 2.5, "fid_hi": 3.5}, True),  # moved 0.2 < half-width 0.5
    ({"fid": 4.0}, {"fid": 3.0, "fid_lo": 2.5, "fid_hi": 3.5}, False),  # moved 1.0
])
def test_converged_when_the_last_doubling_moves_fid_less_than_its_interval(previous, current, expected) -> None:
    assert converged(previous, current) is expected


def test_a_run_stopped_after_any_epoch_resumes_to_the_same_weights(tmp_path) -> None:
    features = load("features")
    whole = GANCurveRun(tmp_path / "whole", TINY, results_dir=tmp_path / "r1")
    whole.run(features)
    pieces = GANCurveRun(tmp_path / "pieces", TINY, results_dir=tmp_path / "r2")
    assert pieces.run(features, minutes=0) is False and pieces.epochs_done == 1, "the budget stops it after an epoch"
    pieces = GANCurveRun(tmp_path / "pieces", TINY, results_dir=tmp_path / "r2")  # a new process, say
    assert pieces.epochs_done == 1
    pieces.run(features)
    one, other = whole.model.state_dict(), pieces.model.state_dict()
    assert all(torch.equal(one[k], other[k]) for k in one)
    timeless = [[{k: v for k, v in point.items() if k != "seconds"} for point in run.curve] for run in (whole, pieces)]
    assert [p["epoch"] for p in pieces.curve] == [1, 2, 3] and timeless[0] == timeless[1]
    curve = (tmp_path / "r2" / "backbones" / "dcgan_reference_curve.csv").read_text().splitlines()
    assert curve[0].startswith("epoch,steps,seconds,fid,fid_lo,fid_hi") and len(curve) == 4
    assert pieces.figure().stat().st_size > 5_000
    assert sorted(p.name for p in (tmp_path / "pieces").iterdir()) == [
        "epoch_1.pt", "epoch_2.pt", "epoch_3.pt", STATE_FILE]


def test_a_model_below_its_gate_is_not_registered(tmp_path) -> None:
    """What the run registers when it converges: the zoo's gate (sample FID <= 15) refuses a model that has not
    learnt the digits, keeps it for inspection and writes no manifest entry."""
    run = GANCurveRun(tmp_path / "run", TINY, results_dir=tmp_path / "r", register_into=tmp_path / "zoo")
    run.run(load("features"), minutes=0)
    with pytest.raises(QualityError, match=r"dcgan_reference reached \{'sample_fid': .*missing its threshold 15.0"):
        run.register(load("features"))
    assert (tmp_path / "zoo" / "dcgan_reference.rejected.pt").is_file()
    assert not (tmp_path / "zoo" / "manifest.json").exists()


def test_a_run_cut_to_a_shorter_length_registers_there_and_says_so(tmp_path, monkeypatch) -> None:
    """--max-epochs is a stopping rule, not a setting: a run started for 3 epochs goes on under a length of 2, and
    once it reaches that length unconverged it registers, its command naming the length (as the reference ships
    its last epoch whatever its curve)."""
    GANCurveRun(tmp_path / "run", TINY, results_dir=tmp_path / "r").run(load("features"), minutes=0)
    shipped = []
    monkeypatch.setattr(GANCurveRun, "register", lambda self, features: shipped.append(self.command()))
    shorter = GANCurveConfig(max_epochs=2, samples=32, resamples=20, steps_per_epoch=2)
    run = GANCurveRun(tmp_path / "run", shorter, results_dir=tmp_path / "r", register_into=tmp_path / "zoo")
    assert run.epochs_done == 1 and run.run(load("features")) is False and run.epochs_done == 2
    assert shipped == ["cfkit backbone dcgan_reference --max-epochs 2"]
    assert [p["epoch"] for p in run.curve] == [1, 2]


def test_a_state_of_other_settings_or_a_broken_one_is_refused(tmp_path) -> None:
    GANCurveRun(tmp_path, TINY, results_dir=tmp_path / "r").run(load("features"), minutes=0)
    with pytest.raises(CheckpointError, match="was trained with .* give the same settings, or another --dir"):
        GANCurveRun(tmp_path, GANCurveConfig(max_epochs=3, samples=32, resamples=20, steps_per_epoch=2, lr=1e-3))
    (tmp_path / STATE_FILE).write_bytes(b"cut short")
    with pytest.raises(CheckpointError, match="is not a readable training state .* delete it to start afresh"):
        GANCurveRun(tmp_path, TINY)


@pytest.mark.parametrize("field", ["max_epochs", "samples", "resamples", "batch_size"])
def test_bad_curve_settings_are_refused(field) -> None:
    with pytest.raises(InputError, match=f"{field} must be an int >= "):
        GANCurveConfig(**{field: 0})


def test_bfloat16_training_keeps_float32_weights_and_names_itself_in_its_command(tmp_path) -> None:
    """The faster precision: the convolutions run in bfloat16, the weights (and so the shipped model) stay float32,
    training moves them, and the run's command says how to train it again; a float32 state will not resume in it."""
    config = GANCurveConfig(max_epochs=1, samples=32, resamples=20, steps_per_epoch=2, precision="bfloat16")
    run = GANCurveRun(tmp_path / "bf16", config, results_dir=tmp_path / "r")
    before = {k: v.clone() for k, v in run.model.state_dict().items()}
    run.run(load("features"))
    after = run.model.state_dict()
    assert all(v.dtype == before[k].dtype for k, v in after.items()) and after["generator.net.0.weight"].dtype == torch.float32
    assert not torch.equal(before["generator.net.0.weight"], after["generator.net.0.weight"])
    assert run.command() == "cfkit backbone dcgan_reference --precision bfloat16 --max-epochs 1", "unconverged: its length"
    assert GANCurveRun(tmp_path / "f32", TINY).command() == "cfkit backbone dcgan_reference"
    with pytest.raises(CheckpointError, match="'precision': 'bfloat16'.* give the same settings"):
        GANCurveRun(tmp_path / "bf16", GANCurveConfig(max_epochs=1, samples=32, resamples=20, steps_per_epoch=2))


def test_an_unknown_precision_is_refused() -> None:
    with pytest.raises(InputError, match="precision must be one of float32, bfloat16, got 'float16'"):
        GANCurveConfig(precision="float16")


def test_cli_refuses_bfloat16_for_the_denoiser(capsys) -> None:
    assert cli.main(["backbone", "ldm_unet", "--precision", "bfloat16"]) == 2
    assert "--precision: only dcgan_reference trains in bfloat16" in capsys.readouterr().err


def test_cli_refuses_a_bad_length_in_one_line(capsys) -> None:
    assert cli.main(["backbone", "dcgan_reference", "--max-epochs", "0"]) == 2
    assert "max_epochs must be an int >= 1, got 0" in capsys.readouterr().err


def test_the_reference_backbone_families_are_named_and_wired() -> None:
    """C3LT's maps on the reference backbone need the reference DCGAN (shipped) and the pair's own encoder; a pair
    whose encoder is not trained (1->7: the study ships only its three pairs) names the command that trains it."""
    maps, encoder = get_spec("c3lt_reference_4_9"), get_spec("encoder_reference_4_9")
    assert maps.needs == ("dcgan_reference", "encoder_reference_4_9", "classifier")
    assert encoder.needs == ("dcgan_reference",) and encoder.command == "cfkit train encoder_reference --pair 4 9"
    assert parse_pair_name("c3lt_reference_5_6") == ("c3lt_reference", (5, 6))
    assert parse_pair_name("c3lt_5_6") == ("c3lt", (5, 6))
    assert "dcgan_reference" in names() and get_spec("dcgan_reference").command == \
        "cfkit backbone dcgan_reference --precision bfloat16 --max-epochs 32", "the shipped generator, as trained"
    explainer = C3LT(load("classifier"), C3LTConfig(backbone="reference"))  # the shipped generator loads
    assert sum(p.numel() for p in explainer.generator.parameters()) == 3_573_696
    with pytest.raises(CheckpointError, match=r"encoder_reference_1_7.pt is missing; rebuild it with `cfkit train "
                                              r"encoder_reference --pair 1 7`"):
        explainer.encoder((1, 7))
    with pytest.raises(InputError, match="backbone must be one of 'kit', 'reference'"):
        C3LTConfig(backbone="bigger")


def test_the_denoisers_curve_resumes_to_the_same_weights_and_scores_per_class(tmp_path) -> None:
    """LDCE's denoiser on the same resumable run: per-class sample FID with an interval, sample accuracy, and the
    extra measurement (LDCE on the study subset from the command line; a stand-in here)."""
    config = DenoiserCurveConfig(max_epochs=2, samples=4, resamples=10, steps_per_epoch=2)
    seen = []

    def extra(unet: torch.nn.Module) -> dict:
        seen.append(type(unet).__name__)
        return {"ldce_validity": 0.5}

    whole = DenoiserCurveRun(tmp_path / "whole", config, results_dir=tmp_path / "r1", extra=extra)
    whole.run(load("features"))
    pieces = DenoiserCurveRun(tmp_path / "pieces", config, results_dir=tmp_path / "r2")
    pieces.run(load("features"), minutes=0)
    DenoiserCurveRun(tmp_path / "pieces", config, results_dir=tmp_path / "r2").run(load("features"))
    resumed = torch.load(tmp_path / "pieces" / "epoch_2.pt", weights_only=True)
    assert all(torch.equal(resumed[k], v) for k, v in whole.snapshot().items()), "the EMA weights, resumed or not"
    point = whole.curve[-1]
    assert point["fid_lo"] <= point["fid"] <= point["fid_hi"] and 0 <= point["sample_accuracy"] <= 1
    assert point["ldce_validity"] == 0.5 and seen == ["LatentUNet", "LatentUNet"]
    header = (tmp_path / "r1" / "backbones" / "ldm_unet_curve.csv").read_text().splitlines()[0]
    assert header.endswith("sample_accuracy,ldce_validity")
    assert whole.figure().stat().st_size > 5_000, "the denoiser's figure draws its own decoded samples"

    def changed(unet: torch.nn.Module) -> dict:  # the measure changed: every point is measured again
        return {"ldce_im1": 0.9, "ldce_im1_lo": 0.8, "ldce_im1_hi": 1.0}

    again = DenoiserCurveRun(tmp_path / "whole", config, results_dir=tmp_path / "r1", extra=changed)
    again.rescore_extra(log=lambda message: None)
    assert [sorted(k for k in p if k.startswith("ldce_")) for p in again.curve] == [
        ["ldce_im1", "ldce_im1_hi", "ldce_im1_lo"]] * 2, "the old measure's columns are gone"
    reread = DenoiserCurveRun(tmp_path / "whole", config, results_dir=tmp_path / "r1")
    assert reread.curve[-1]["ldce_im1"] == 0.9 and reread.curve[-1]["fid"] == point["fid"]
    with pytest.raises(InputError, match="needs the extra measure"):
        reread.rescore_extra()


def test_ldce_on_a_denoiser_snapshot_runs_at_the_tables_setting_with_intervals(monkeypatch) -> None:
    """The curve's LDCE column is the table's LDCE (LDCEConfig's defaults) with the snapshot's denoiser."""
    from cfkit.methods import ldce
    from cfkit.studies import faithfulness

    built = []
    real = ldce.LDCE

    def spy(classifier, config, **kwargs):
        built.append(config)
        return real(classifier, config, **kwargs)

    monkeypatch.setattr(faithfulness, "LDCE", spy)
    scores = faithfulness.ldce_with_denoiser(load("ldm_unet"), n_queries=3, pairs="4->9")
    assert built == [ldce.LDCEConfig()], "the table's setting, not LDCE_KIT"
    for metric in ("im1", "fid", "validity"):
        assert scores[f"ldce_{metric}_lo"] <= scores[f"ldce_{metric}"] <= scores[f"ldce_{metric}_hi"]


def test_a_converged_denoiser_curve_ships_its_ema_weights_when_asked(tmp_path, monkeypatch) -> None:
    """`cfkit backbone ldm_unet --register-into DIR` after the curve converged: the EMA denoiser every curve point
    scored is what the zoo's gate measures and keeps, with the curve's sample FID beside the gate's figure (here
    refused: two steps learn no digits)."""
    from cfkit.zoo import diffusion

    monkeypatch.setattr(diffusion, "SAMPLES_PER_CLASS", 2)  # the gate's sample check, at a test's size
    config = DenoiserCurveConfig(max_epochs=1, samples=4, resamples=10, steps_per_epoch=2)
    run = DenoiserCurveRun(tmp_path / "run", config, results_dir=tmp_path / "r")
    run.run(load("features"))
    run.curve[-1]["converged"] = True  # as a curve whose last doubling settled
    run._save()
    again = DenoiserCurveRun(tmp_path / "run", config, results_dir=tmp_path / "r", register_into=tmp_path / "zoo")
    with pytest.raises(QualityError,
                       match=r"ldm_unet reached \{'sample_accuracy': [\d.]+, 'sample_fid': [\d.]+\} after .*threshold 0.9"):
        again.run(load("features"))
    kept = torch.load(tmp_path / "zoo" / "ldm_unet.rejected.pt", weights_only=True)
    ema = again.ema.module.state_dict()
    assert set(kept) == set(ema) and all(torch.equal(kept[k], ema[k]) for k in ema)

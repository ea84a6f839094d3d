"""The shipped zoo loads safely, reaches its figures, and the training code still runs."""
from __future__ import annotations

import json
import shutil

import pytest
import torch

from cfkit.errors import CheckpointError, InputError, QualityError
from cfkit.paths import CHECKPOINT_DIR
from cfkit.zoo import checkpoints
from cfkit.zoo.checkpoints import MANIFEST, get_spec, load, load_needs, load_pair, names, read_manifest, train
from cfkit.zoo.training import accuracy_on_test

FIELDS = {"file", "sha256", "command", "seed", "epochs", "seconds", "quality"}


def test_every_model_ships_with_a_manifest_entry() -> None:
    manifest = read_manifest()
    assert set(manifest) == set(names())
    for name, entry in manifest.items():
        assert FIELDS <= set(entry), name
        assert entry["command"].startswith(get_spec(name).command)
        assert (CHECKPOINT_DIR / entry["file"]).is_file()
        assert get_spec(name).passes(entry["quality"]), f"{name} ships below its threshold"


@pytest.mark.parametrize("name", names())
def test_checkpoint_loads_frozen_in_eval_mode(name: str) -> None:
    model = load(name)
    assert not model.training
    assert all(not p.requires_grad for p in model.parameters())
    if get_spec(name).metric == "test_accuracy":
        assert model(torch.zeros(2, 1, 28, 28)).shape == (2, 10)


@pytest.mark.parametrize("name", ["classifier", "oracle"])
def test_classifier_and_oracle_reach_99_percent(name: str) -> None:
    recorded = read_manifest()[name]["quality"]["test_accuracy"]
    assert recorded >= 0.99
    assert accuracy_on_test(load(name)) == pytest.approx(recorded, abs=1e-4)


@pytest.fixture
def zoo_copy(tmp_path):
    shutil.copytree(CHECKPOINT_DIR, tmp_path, dirs_exist_ok=True)
    checkpoints._load_cached.cache_clear()
    yield tmp_path
    checkpoints._load_cached.cache_clear()


def test_missing_checkpoint(zoo_copy) -> None:
    (zoo_copy / "ae_3.pt").unlink()
    with pytest.raises(CheckpointError, match=r"ae_3.pt is missing.*cfkit train ae_3"):
        load("ae_3", directory=zoo_copy)


def test_corrupt_checkpoint(zoo_copy) -> None:
    path = zoo_copy / "classifier.pt"
    content = bytearray(path.read_bytes())
    content[len(content) // 2] ^= 0xFF
    path.write_bytes(bytes(content))
    with pytest.raises(CheckpointError, match=r"classifier.pt is corrupt.*cfkit train classifier"):
        load("classifier", directory=zoo_copy)


def test_mismatched_checkpoint(zoo_copy) -> None:
    shutil.copy(zoo_copy / "oracle.pt", zoo_copy / "classifier.pt")  # right hash, wrong architecture
    manifest = json.loads((zoo_copy / MANIFEST).read_text())
    manifest["classifier"]["sha256"] = manifest["oracle"]["sha256"]
    (zoo_copy / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match=r"does not fit the Classifier architecture.*cfkit train classifier"):
        load("classifier", directory=zoo_copy)


def test_unreadable_checkpoint(zoo_copy) -> None:
    path = zoo_copy / "ae_all.pt"
    path.write_bytes(b"not a checkpoint")
    manifest = json.loads((zoo_copy / MANIFEST).read_text())
    manifest["ae_all"]["sha256"] = checkpoints.sha256_file(path)
    (zoo_copy / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match="cannot be read"):
        load("ae_all", directory=zoo_copy)


def test_unknown_model_name() -> None:
    with pytest.raises(CheckpointError, match="unknown zoo model 'ae_10'.*ae_9"):
        load("ae_10")


@pytest.mark.parametrize("name", ["classifier", "oracle", "features", "ae_all", "ae_7", "dcgan", "encoder", "ldm_vae",
                                  "ldm_unet", "c3lt_4_9", "expgan_4_9", "c3lt_7_1", "ae_cal_3"])
def test_training_code_runs_and_writes_a_loadable_checkpoint(name: str, tmp_path) -> None:
    entry = train(name, directory=tmp_path, max_steps=3, check_quality=False, progress=False)
    assert entry["steps"] == 3 and (tmp_path / f"{name}.pt").is_file()
    assert read_manifest(tmp_path)[name]["sha256"] == entry["sha256"]
    load(name, directory=tmp_path)


def test_training_refuses_to_ship_a_model_below_threshold(tmp_path) -> None:
    with pytest.raises(QualityError, match="not registered.*classifier.rejected.pt"):
        train("classifier", directory=tmp_path, max_steps=2, progress=False)
    assert not (tmp_path / "classifier.pt").exists() and "classifier" not in read_manifest(tmp_path)
    assert (tmp_path / "classifier.rejected.pt").is_file(), "a long run's weights are kept for inspection"


def test_training_is_seeded(tmp_path) -> None:
    first = train("ae_1", directory=tmp_path / "a", max_steps=5, check_quality=False, progress=False)
    second = train("ae_1", directory=tmp_path / "b", max_steps=5, check_quality=False, progress=False)
    assert first["sha256"] == second["sha256"]


def test_a_model_shipped_from_its_curve_names_the_curve_and_a_retrain_names_itself(tmp_path, monkeypatch) -> None:
    """The shipped denoiser came from `cfkit backbone ldm_unet`; `cfkit train ldm_unet` still trains its first config,
    and its manifest entry says that command, not the curve's."""
    from cfkit.zoo import diffusion

    monkeypatch.setattr(diffusion, "SAMPLES_PER_CLASS", 2)  # the sample check, at a test's size
    assert get_spec("ldm_unet").command == read_manifest()["ldm_unet"]["command"] == "cfkit backbone ldm_unet"
    entry = train("ldm_unet", directory=tmp_path, max_steps=2, check_quality=False, progress=False)
    assert entry["command"] == "cfkit train ldm_unet (max_steps=2)"


def test_generator_zoo_shapes_and_inversion() -> None:
    gan, encoder = load("dcgan"), load("encoder")
    samples = gan.sample(16, seed=1)
    assert samples.shape == (16, 1, 28, 28) and 0 <= samples.min() and samples.max() <= 1
    assert torch.equal(samples, gan.sample(16, seed=1))
    assert gan.discriminator(samples).shape == (16,)
    z = torch.randn(64, 100, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        x = gan.generator(z)
        error = (gan.generator(encoder(x)) - x).pow(2).mean()
        untrained = (gan.generator(torch.zeros_like(z)) - x).pow(2).mean()
    assert error < 0.5 * untrained, "the encoder must invert the generator far better than a constant latent"


def test_pair_models_name_their_pair_and_command() -> None:
    spec = get_spec("c3lt_2_7")  # any pair can be trained, not only the protocol's
    assert spec.command == "cfkit train c3lt --pair 2 7" and spec.config.digits == (2, 7)
    assert {"c3lt_4_9", "c3lt_3_8", "c3lt_5_6", "expgan_4_9", "expgan_3_8", "expgan_5_6"} <= set(names())
    with pytest.raises(InputError, match="must differ"):
        get_spec("expgan_4_4")
    with pytest.raises(CheckpointError, match="unknown zoo model 'c3lt_49'"):
        get_spec("c3lt_49")


def test_every_need_is_a_model_trained_before_it() -> None:
    order = names()  # `cfkit train --all` trains in this order
    for name in order:
        for need in get_spec(name).needs:
            assert need in order[:order.index(name)], f"{name} needs {need}, which is not trained before it"


def test_train_all_leaves_the_curve_backbones_to_their_own_command(capsys, monkeypatch) -> None:
    """`cfkit train --all` rebuilds the zoo as shipped: a backbone shipped from its training curve (`cfkit backbone`)
    is not retrained by its spec's plain fit, which would replace it with another model (ldm_unet's 8 epochs)."""
    from cfkit.running import cli

    trained = []
    monkeypatch.setattr(checkpoints, "train", lambda name, **kw: trained.append(name) or
                        {"quality": {}, "seconds": 0.0, "file": f"{name}.pt", "sha256": "0" * 64})
    assert cli.main(["train", "--all"]) == 0
    curves = {n for n in names() if get_spec(n).from_curve}
    assert {"ldm_unet", "dcgan_reference"} <= curves and not curves & set(trained)
    assert trained == checkpoints.retrainable_names() == [n for n in names() if n not in curves]
    out = capsys.readouterr().out
    assert "`cfkit backbone ldm_unet`" in out and "`cfkit backbone dcgan_reference --precision bfloat16" in out
    for name in trained:  # in dependency order, a curve backbone shipped before any of them
        for need in get_spec(name).needs:
            assert need in curves or trained.index(need) < trained.index(name), (name, need)


def test_pair_checkpoint_trained_on_another_pair_is_refused(zoo_copy) -> None:
    shutil.copy(zoo_copy / "c3lt_3_8.pt", zoo_copy / "c3lt_4_9.pt")
    manifest = json.loads((zoo_copy / MANIFEST).read_text())
    manifest["c3lt_4_9"]["sha256"] = manifest["c3lt_3_8"]["sha256"]
    (zoo_copy / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match=r"trained on 3->8, not 4->9.*cfkit train c3lt --pair 4 9"):
        load_pair("c3lt", (4, 9), directory=zoo_copy)


@pytest.mark.parametrize("name", ["c3lt_4_9", "c3lt_3_8", "c3lt_5_6", "expgan_4_9", "expgan_3_8", "expgan_5_6"])
def test_pair_models_reach_95_percent_validity(name: str) -> None:
    recorded = read_manifest()[name]["quality"]["test_validity"]
    assert recorded >= 0.95
    spec = get_spec(name)
    assert spec.measure(load(name), spec.config, load_needs(spec)) == pytest.approx(recorded, abs=1e-4)


def test_cli_expands_pair_families() -> None:
    from cfkit.errors import CfkitError
    from cfkit.running.cli import _expand_pair_families

    assert _expand_pair_families(["c3lt"], [4, 9]) == ["c3lt_4_9"]
    assert _expand_pair_families(["expgan", "ae_1"], None) == ["expgan_4_9", "expgan_3_8", "expgan_5_6", "ae_1"]
    with pytest.raises(CfkitError, match="--pair goes with a pair family"):
        _expand_pair_families(["ae_1"], [4, 9])


def test_fast_max_pooling_gives_torchs_values_and_gradients() -> None:
    """MaxPool2x2 is nn.MaxPool2d(2): equal outputs and gradients to the bit, odd sizes, ReLU's zero ties and
    positive ties included."""
    from cfkit.zoo.nets import MaxPool2x2

    pool, x = MaxPool2x2(), torch.randn(3, 4, 9, 7).relu()
    x[0, 0, 0, :2] = 5.0  # a positive tie across the top row of a window
    x[0, 1, 2:4, 2:4] = 3.0  # a four-way tie
    x[1, 2, 4, 0] = x[1, 2, 5, 0] = 2.0  # a tie down the left column
    with torch.inference_mode():
        assert torch.equal(pool(x), torch.nn.functional.max_pool2d(x, 2))
    ours, theirs = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    upstream = torch.randn(3, 4, 4, 3)
    out = pool(ours)
    assert torch.equal(out, torch.nn.functional.max_pool2d(theirs, 2))
    out.backward(upstream)
    torch.nn.functional.max_pool2d(theirs, 2).backward(upstream)
    assert torch.equal(ours.grad, theirs.grad) and ours.grad[..., 8, :].abs().sum() == 0  # the dropped odd row
    assert isinstance(load("classifier").features[2], MaxPool2x2)

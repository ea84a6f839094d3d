"""Any PyTorch classifier: the zoo's by name, a TorchScript file, or ``package.module:factory`` plus weights.

A second classifier (tests/other_classifier.py, a small ResNet-style CNN trained in seconds) goes through the same doors a
user's would: checked on load, fingerprinted in every saved set, explained by every method that needs no
per-pair training through ``cfkit run … -p classifier <file>``, and scored by ``10_metrics`` with it.
"""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from cfkit.errors import CheckpointError, InputError
from cfkit.methods import catalog
from cfkit.methods.adversarial import AdversarialAttack
from cfkit.methods.base import Result
from cfkit.running.run import read_record, run_notebook
from cfkit.scoring import evaluation
from cfkit.scoring.store import find_counterfactuals, load_counterfactuals, save_counterfactuals
from cfkit.zoo.checkpoints import load
from cfkit.zoo.classifiers import check_classifier, fingerprint, load_classifier

from other_classifier import Probabilities, TwoWay, train_small_resnet


@pytest.fixture(scope="module")
def other() -> torch.nn.Module:
    return train_small_resnet()


@pytest.fixture(scope="module")
def files(other, tmp_path_factory) -> dict:
    """The second classifier as a TorchScript file and as a state dict; a 2-way classifier as TorchScript."""
    folder = tmp_path_factory.mktemp("classifiers")
    paths = {"script": folder / "small_resnet.pt", "state": folder / "small_resnet_state.pt", "two_way": folder / "two_way.pt"}
    torch.jit.save(torch.jit.script(other), paths["script"])
    torch.save(other.state_dict(), paths["state"])
    torch.jit.save(torch.jit.script(TwoWay()), paths["two_way"])
    return paths


def test_the_three_forms_load_the_same_weights(other, files) -> None:
    scripted = load_classifier(str(files["script"]))
    factory = load_classifier("other_classifier:small_resnet", files["state"])
    x = torch.rand(5, 1, 28, 28)
    assert torch.allclose(scripted(x), other(x), atol=1e-6) and torch.allclose(factory(x), other(x), atol=1e-6)
    assert fingerprint(scripted) == fingerprint(factory) == fingerprint(other)
    assert fingerprint(load_classifier("classifier")) == fingerprint(load("classifier")) != fingerprint(other)


@pytest.mark.parametrize(("spec", "weights", "error", "message"), [
    ("two_way", None, InputError, r"maps a \(3, 1, 28, 28\) batch to shape \(3, 2\).*10-class"),
    ("other_classifier:small_resnet", None, InputError, "needs its weights"),
    ("other_classifier:no_such", None, InputError, "cannot find 'no_such' in module 'other_classifier'"),
    ("other_classifier:TwoWay", "state", CheckpointError, "does not fit other_classifier:TwoWay"),
    ("script", "state", InputError, "weights go with 'package.module:factory' only"),
    ("nothing/here.pt", None, InputError, "neither a zoo model"),
    ("garbage", None, CheckpointError, "is not a TorchScript model"),
    ("", None, InputError, "classifier must be a zoo name"),
])
def test_a_wrong_classifier_is_refused_with_what_to_do(files, tmp_path, spec, weights, error, message) -> None:
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a model")
    spec = {**{k: str(v) for k, v in files.items()}, "garbage": str(garbage)}.get(spec, spec)
    with pytest.raises(error, match=message):
        load_classifier(spec, files[weights] if weights else None)


def test_a_method_refuses_a_wrong_classifier_before_any_work(other) -> None:
    """Today's failure deep inside PGD (IndexError: Target 9 is out of bounds) becomes a message at build time."""
    with pytest.raises(InputError, match=r"AdversarialAttack maps a \(3, 1, 28, 28\) batch to shape \(3, 2\)"):
        AdversarialAttack(TwoWay(), device="cpu")
    with pytest.raises(InputError, match="returns probabilities"):
        check_classifier(Probabilities(other))


class NanOnDigits(torch.nn.Module):
    """The zoo's classifier, but NaN where the input is mostly black, as real digits are (uniform noise is not)."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = load("classifier")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.inner(x)
        dark = x.flatten(1).mean(1) < 0.3
        return torch.where(dark[:, None], torch.full_like(logits, float("nan")), logits)


class Constant(torch.nn.Module):
    """Logits that ignore the input: fine shapes, finite, and no classifier at all."""

    def __init__(self) -> None:
        super().__init__()
        self.logits = torch.nn.Parameter(torch.linspace(-1.0, 1.0, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.logits.expand(x.shape[0], 10) + 0 * x.flatten(1)[:, :1]


@pytest.mark.parametrize(("model", "message"), [
    (NanOnDigits, r"non-finite logits on 20 of 20 real MNIST test digits.*\(N, 1, 28, 28\) with pixels in \[0, 1\]"),
    (Constant, r"classifies 2 of 20 real MNIST test digits correctly \(10%.*ignores its input.*normalised inside"),
])
def test_a_model_that_fails_on_real_digits_is_refused_with_the_reason(model, message) -> None:
    with pytest.raises(InputError, match=message):
        load_classifier(model())
    with pytest.raises(InputError, match=message):  # and a method built on it refuses it too
        AdversarialAttack(model(), device="cpu")


def test_the_kits_own_classifiers_pass_the_check_on_real_digits() -> None:
    for name in ("classifier", "oracle"):
        check_classifier(load(name), name)


def test_sets_of_different_classifiers_are_never_scored_together(other, tmp_path) -> None:
    x, index = evaluation.protocol_queries((4, 9), 4)
    result = Result(x=x, x_cf=evaluation.reference_images(9)[:4], source=torch.full((4,), 4),
                    target=torch.full((4,), 9), valid=torch.ones(4, dtype=torch.bool), seconds=1.0)
    ours, zoo = fingerprint(other), fingerprint(load("classifier"))
    attack, real = catalog.names()[1], catalog.names()[0]
    first = save_counterfactuals(tmp_path / "a", attack, (4, 9), index, result, ours)
    second = save_counterfactuals(tmp_path / "b", real, (4, 9), index, result, zoo, timed=False)
    assert load_counterfactuals(first).classifier == ours
    with pytest.raises(InputError, match="explain different classifiers"):
        evaluation.evaluate_sets([first, second], inception=False)
    with pytest.raises(InputError, match=r"validity and COUT would be scored with .*-p classifier"):
        evaluation.evaluate_sets([first], inception=False)  # the zoo classifier by default
    assert evaluation.evaluate_sets([first], inception=False, classifier=other)[0]["validity"] is not None


SMALL = {"n_queries": 4, "inception": False}
METHOD_NOTEBOOKS = {  # every catalog method without per-pair training, at a size that runs in seconds
    "02_cem": {"search_steps": 1, "iterations": 10},
    "03_cve": {},
    "06_ldce": {"steps": 30, "ablation_queries": 0, "samples_per_class": 2},
}


def test_every_method_without_pair_training_explains_another_classifier_and_10_metrics_scores_it(other, files, tmp_path) -> None:
    runs, script = tmp_path / "runs", str(files["script"])
    command = [sys.executable, "-m", "cfkit.running.cli", "run", "01_adversarial", "--out", str(runs / "01_adversarial"),
               "-p", "classifier", script, "-p", "n_queries", "4", "-p", "steps", "20", "-p", "inception", "False"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    for notebook, knobs in METHOD_NOTEBOOKS.items():
        run_notebook(notebook, {**SMALL, **knobs, "classifier": script}, out_dir=runs / notebook)
    run_notebook("10_metrics", {**SMALL, "classifier": script, "runs_dir": str(runs)}, out_dir=runs / "10_metrics")

    rows = {(r["method"], r["pair"]): r for r in read_record(runs / "10_metrics")["rows"]}
    expected = [e.name for e in catalog.entries() if not e.per_pair]
    assert sorted({method for method, _ in rows}) == sorted(expected)
    for path in find_counterfactuals(runs):
        cfs = load_counterfactuals(path)
        assert cfs.classifier == fingerprint(other), f"{path.name} does not record the second classifier"
        with torch.inference_mode():
            says_target = other(cfs.x_cf).argmax(1) == cfs.target
        assert torch.equal(cfs.valid, says_target), f"{path.name}: the method flagged validity with another model"
        row = rows[(cfs.method, cfs.pair_name)]
        assert row["validity"] == pytest.approx(says_target.double().mean().item()), "10_metrics scores with it too"
    assert rows[(AdversarialAttack.name, "mean")]["validity"] > 0, "PGD moves the second classifier's decision"


def test_a_two_way_classifier_stops_the_command_line_before_a_kernel_starts(files) -> None:
    command = [sys.executable, "-m", "cfkit.running.cli", "run", "01_adversarial", "-p", "classifier", str(files["two_way"])]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "classifier" in lines[0] and "shape (3, 2)" in lines[0], lines


def test_per_pair_models_train_for_another_classifier_into_a_folder_of_their_own(other, files, tmp_path) -> None:
    """`cfkit train c3lt --pair 4 9 --classifier …` (here two steps of it): the manifest records the classifier,
    and the method refuses to explain another one with those maps, or this one with the shipped maps."""
    from cfkit.methods.c3lt import C3LT
    from cfkit.zoo.checkpoints import SHIPPED_PAIR_FAMILIES, train

    with pytest.raises(InputError, match="would replace the shipped one"):
        train("c3lt_4_9", classifier=other, max_steps=1)
    with pytest.raises(InputError, match="not trained against a classifier"):
        train("ae_3", directory=tmp_path, classifier=other, max_steps=1)
    folder = tmp_path / "pairs"
    for family in SHIPPED_PAIR_FAMILIES:  # the reference backbone's families need its DCGAN, not shipped yet
        entry = train(f"{family}_4_9", directory=folder, max_steps=2, check_quality=False, progress=False,
                      classifier=other, classifier_spec=str(files["script"]))
        assert entry["classifier"] == fingerprint(other) and f"--classifier {files['script']}" in entry["command"]
    x, _ = evaluation.protocol_queries((4, 9), 3)
    assert C3LT(other, pair_dir=folder, device="cpu").explain(x, 9).x_cf.shape == x.shape
    with pytest.raises(CheckpointError, match="trained against classifier .* not the one being explained"):
        C3LT(load("classifier"), pair_dir=folder, device="cpu").explain(x, 9)
    with pytest.raises(CheckpointError, match="--classifier <yours> --out <folder>"):
        C3LT(other, device="cpu").explain(x, 9)


def test_a_per_pair_notebook_with_another_classifier_needs_its_pair_models(files) -> None:
    from cfkit.errors import ParameterError
    from cfkit.running.parameter_values import check_values

    with pytest.raises(ParameterError, match="shipped c3lt models were trained against the zoo's classifier"):
        check_values("05_c3lt", {"classifier": str(files["script"]), "pair_dir": "", "retrain": False})
    check_values("05_c3lt", {"classifier": str(files["script"]), "pair_dir": "somewhere", "retrain": False})
    check_values("05_c3lt", {"classifier": "classifier", "pair_dir": "", "retrain": False})


def test_a_reproduction_for_another_classifier_keeps_to_its_own_folders(files, tmp_path) -> None:
    import io

    from cfkit.errors import ParameterError
    from cfkit.paths import RUNS_DIR
    from cfkit.running.reproduce import _for_classifier, reproduce_order

    script, log = str(files["script"]), io.StringIO()
    with pytest.raises(ParameterError, match="folders of its own"):
        _for_classifier(reproduce_order(), {}, script, None, RUNS_DIR, tmp_path / "results", log)
    notebooks, parameters = _for_classifier(reproduce_order(), {"10_metrics": {"n_queries": 4}}, script, None,
                                            tmp_path / "runs", tmp_path / "results", log)
    per_pair = {entry.notebook for entry in catalog.entries() if entry.per_pair}
    assert notebooks == [nb for nb in reproduce_order() if nb not in per_pair]
    assert all(f"{nb} left out" in log.getvalue() for nb in per_pair)
    assert parameters["10_metrics"] == {"n_queries": 4, "classifier": script, "classifier_state": ""}
    assert "classifier" not in parameters["00_models"] and parameters["02_cem"]["classifier"] == script

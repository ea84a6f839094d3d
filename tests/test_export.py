"""Classifiers from ``torch.export`` archives (.pt2) and CVE on any classifier's own feature map (issue 28, items 6-7).

The zoo's models export (and script) with their fast pooling; a .pt2 classifier loads with the checks of the other
forms, refuses what the methods cannot use (a fixed batch size, training mode, pickled members), and CVE finds the
feature map of a model that has no ``.features``/``.head``: an ``nn.Sequential``, an fx-traceable model, an exported
graph. A reproduction checks every method on the classifier before its first notebook and leaves out, with the
reason, a method that cannot explain it.
"""
from __future__ import annotations

import io
import json
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path

import pytest
import torch
from torch import nn

from cfkit.errors import CheckpointError, InputError, ParameterError
from cfkit.methods.cve import CVE, CVE_KIT
from cfkit.methods.feature_split import split_classifier
from cfkit.running import cli
from cfkit.running.reproduce import _for_classifier, reproduce_order
from cfkit.scoring.evaluation import protocol_queries
from cfkit.zoo.checkpoints import load
from cfkit.zoo.classifiers import fingerprint, load_classifier

from other_classifier import export_classifier, plain_cnn

EXPORTED_ZOO = ("classifier", "oracle", "features", "ae_all", "ae_4")
"""One zoo model of each architecture that has the kit's fast max-pooling."""


class SkipAroundTheMap(nn.Module):
    """Logits from a feature map *and* the raw pixels: no single map carries everything, so CVE cannot split it."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 28 * 28 + 28 * 28, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.cat([torch.relu(self.conv(x)).flatten(1), x.flatten(1)], 1))


class ViewByBatchSize(nn.Module):
    """A forward that reshapes with ``x.shape[0]`` of the *input*: the split's head reads its own batch size."""

    def __init__(self) -> None:
        super().__init__()
        self.conv, self.pool, self.fc = nn.Conv2d(1, 8, 3, padding=1), nn.MaxPool2d(4), nn.Linear(8 * 7 * 7, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.pool(torch.relu(self.conv(x))).view(x.shape[0], -1))


def digits(n: int = 8) -> torch.Tensor:
    return protocol_queries((4, 9), n)[0]


@pytest.fixture(scope="module")
def plain() -> nn.Module:
    from other_classifier import train_plain_cnn

    return train_plain_cnn()


@pytest.fixture(scope="module")
def zoo_pt2(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("export") / "zoo_classifier.pt2"
    export_classifier(load("classifier"), path)
    return path


@pytest.mark.parametrize("name", EXPORTED_ZOO)
def test_zoo_models_export_with_the_same_values_and_gradients(name, tmp_path) -> None:
    model = load(name)
    path = tmp_path / f"{name}.pt2"
    export_classifier(model, path)
    exported = torch.export.load(str(path)).module()
    x = digits().requires_grad_(True)  # real digits: black background, so pooling windows have ties
    ours, theirs = model(x), exported(x)
    assert torch.equal(ours, theirs)
    (grad_ours,) = torch.autograd.grad(ours.square().sum(), x)
    (grad_theirs,) = torch.autograd.grad(theirs.square().sum(), x)
    assert torch.equal(grad_ours, grad_theirs), "torch's max_pool2d in the export routes gradients as ours does"


def test_the_zoo_classifier_also_scripts() -> None:
    model = load("classifier")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.jit.script is deprecated, still supported
        scripted = torch.jit.script(model)
    assert torch.equal(scripted(digits()), model(digits()))


def test_an_exported_classifier_loads_as_the_zoos(zoo_pt2) -> None:
    loaded = load_classifier(str(zoo_pt2))
    assert fingerprint(loaded) == fingerprint(load("classifier")), "the same weights, whatever the file"
    assert torch.equal(loaded(digits()), load("classifier")(digits()))


def test_cve_explains_the_exported_classifier_as_the_zoos(zoo_pt2) -> None:
    """The exported graph is cut at the same 4x4 map as the zoo's .features: the same swaps, the same images."""
    exported = load_classifier(str(zoo_pt2))
    split = split_classifier(exported)
    assert split.grid == (4, 4) and "torch.export graph" in split.how
    x = digits(6)
    ours, theirs = CVE(load("classifier"), CVE_KIT).explain(x, 9), CVE(exported, CVE_KIT).explain(x, 9)
    assert torch.equal(ours.extras["swaps"], theirs.extras["swaps"]) and torch.equal(ours.x_cf, theirs.x_cf)


def test_cve_splits_the_common_shapes_of_a_model() -> None:
    sequential = plain_cnn().eval()
    split = split_classifier(sequential)
    assert split.grid == (5, 5) and "nn.Sequential cut after layer 5 (MaxPool2d)" in split.how
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        scripted = split_classifier(torch.jit.script(sequential))
    assert scripted.grid == (5, 5)
    model = ViewByBatchSize().eval()
    traced = split_classifier(model)
    assert traced.grid == (7, 7) and "torch.fx graph cut at pool" in traced.how
    x = digits(3)
    assert torch.allclose(traced.head(traced.features(x)), model(x), atol=1e-6)
    program = torch.export.export(ViewByBatchSize().eval(), (torch.rand(2, 1, 28, 28),),
                                  dynamic_shapes=({0: torch.export.Dim("batch")},))
    assert split_classifier(program.module()).grid == (7, 7), "export's sym_size of the input is the map's"


def test_cve_refuses_a_model_no_map_carries_with_the_ways_out() -> None:
    with pytest.raises(InputError, match=r"CVE cannot split SkipAroundTheMap: no feature map .* carries everything"
                                         r".*give the model \.features .* and \.head .*torch\.export"):
        split_classifier(SkipAroundTheMap())
    flat = nn.Sequential(nn.Flatten(), nn.Linear(784, 10))
    with pytest.raises(InputError, match="CVE cannot split this nn.Sequential: no layer before the last outputs a "
                                         "feature map"):
        split_classifier(flat)


def test_cve_explains_a_sequential_cnn_on_its_five_by_five_map(plain) -> None:
    """A 5x5 map tiles the image 6+6+5+6+5: every pixel of the counterfactual is the query's or the distractor's."""
    result = CVE(plain, CVE_KIT).explain(digits(6), 9)
    assert result.extras["grid"] == (5, 5) and result.validity > 0
    x, x_cf, distractor = result.x, result.x_cf, result.extras["distractor"]
    assert ((x_cf == x) | (x_cf == distractor)).all(), "aligned cells paste the distractor's own tiles"
    assert ((x_cf != x).flatten(1).any(1) == (result.extras["cells_swapped"] > 0)).all()


# ---- bad archives ----

def test_a_fixed_batch_size_is_refused_with_the_recipe(tmp_path) -> None:
    path = tmp_path / "fixed.pt2"
    torch.export.save(torch.export.export(load("classifier"), (torch.rand(2, 1, 28, 28),)), str(path))
    with pytest.raises(CheckpointError, match=r"exported for batches of exactly 2 images.*dynamic_shapes"):
        load_classifier(str(path))


def test_an_archive_exported_in_training_mode_is_refused(tmp_path) -> None:
    model = load("classifier").train()  # dropout on: an image's logits change with every call
    path = tmp_path / "train_mode.pt2"
    torch.export.save(torch.export.export(model, (torch.rand(2, 1, 28, 28),),
                                          dynamic_shapes=({0: torch.export.Dim("batch")},)), str(path))
    with pytest.raises(InputError, match=r"in training mode \(dropout, batch norm\) or random. Call model.eval\(\)"):
        load_classifier(str(path))


def test_an_archive_that_would_unpickle_is_refused(zoo_pt2, tmp_path) -> None:
    """cfkit loads weights with weights_only=True; torch.export.load would unpickle members marked use_pickle."""
    path = tmp_path / "pickled.pt2"
    with zipfile.ZipFile(zoo_pt2) as source, zipfile.ZipFile(path, "w") as target:
        for item in source.infolist():
            data = source.read(item.filename)
            if item.filename.endswith("weights_config.json"):
                config = json.loads(data)
                config["config"]["head.4.bias"]["use_pickle"] = True
                data = json.dumps(config).encode()
            target.writestr(item, data)
    with pytest.raises(CheckpointError, match=r"stores head.4.bias as pickled objects, which cfkit does not unpickle"):
        load_classifier(str(path))


@pytest.mark.parametrize("content", [b"not a zip", b""])
def test_a_file_that_is_no_archive_is_refused(tmp_path, content) -> None:
    path = tmp_path / "broken.pt2"
    path.write_bytes(content)
    with pytest.raises(CheckpointError, match=r"is not a torch.export archive.*torch.export.save"):
        load_classifier(str(path))


def test_a_model_without_input_gradients_is_refused_by_the_gradient_methods() -> None:
    from cfkit.methods.adversarial import AdversarialAttack

    class Detached(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = load("classifier")

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.model(x.detach())

    with pytest.raises(InputError, match="gives no gradient with respect to its input .* do not detach"):
        AdversarialAttack(Detached())
    CVE(Detached(), CVE_KIT)  # CVE follows no gradient: it explains it


# ---- the command line and the reproduction ----

def one_error_line(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cfkit: error: "), lines
    return lines[0]


@pytest.fixture(scope="module")
def skip_pt2(tmp_path_factory) -> Path:
    """A trained-enough model CVE cannot split: the first linear layer sees the pixels too."""
    from other_classifier import _train

    path = tmp_path_factory.mktemp("skip") / "skip.pt2"
    export_classifier(_train(SkipAroundTheMap, 12_000, 0), path)
    return path


def test_cfkit_run_of_cve_refuses_a_classifier_it_cannot_split_before_the_kernel(skip_pt2, capsys, no_kernel,
                                                                                  tmp_path) -> None:
    assert cli.main(["run", "03_cve", "-p", "classifier", str(skip_pt2)]) == 2
    line = one_error_line(capsys)
    assert "parameter 'classifier' of 03_cve: CVE cannot explain it: CVE cannot split" in line
    assert "torch.export" in line and no_kernel == []
    assert cli.main(["run", "01_adversarial", "-p", "classifier", str(skip_pt2), "--out", str(tmp_path)]) == 0
    assert len(no_kernel) == 1, "the attack follows gradients, which it has: its notebook starts"


def test_a_reproduction_leaves_out_what_cannot_explain_the_classifier_with_the_reason(skip_pt2, zoo_pt2, tmp_path) -> None:
    log = io.StringIO()
    notebooks, _ = _for_classifier(reproduce_order(), {}, str(skip_pt2), None, tmp_path / "r", tmp_path / "s", log)
    assert "03_cve" not in notebooks and "01_adversarial" in notebooks and "06_ldce" in notebooks
    assert "03_cve left out: CVE cannot explain" in log.getvalue() and "cannot split the exported classifier" in log.getvalue()
    log = io.StringIO()
    notebooks, _ = _for_classifier(reproduce_order(), {}, str(zoo_pt2), None, tmp_path / "r", tmp_path / "s", log)
    assert notebooks == reproduce_order(), "the zoo's weights in a .pt2: its shipped per-pair models fit it"


@pytest.mark.parametrize(("argv", "message"), [
    (["-p", "n_queries", "-1"], "parameter 'n_queries' of 01_adversarial must be an int >= 0, got -1. No notebook "
                                "was started."),
    (["-p", "pairs", "4->4"], "No notebook was started."),
    (["-p", "no_such_knob", "3"], "no notebook of the reproduction has a parameter 'no_such_knob'"),
    (["--notebooks", "99_nothing"], "--notebooks: 99_nothing not in the reproduction"),
])
def test_a_reproduction_checks_every_value_before_its_first_notebook(argv, message, tmp_path, capsys, no_kernel) -> None:
    assert cli.main(["reproduce", "--runs", str(tmp_path / "r"), "--results", str(tmp_path / "s"), *argv]) == 2
    assert message in one_error_line(capsys) and no_kernel == []
    assert not (tmp_path / "r").exists()


def test_a_reproduction_at_other_values_keeps_to_its_own_folders(capsys, no_kernel) -> None:
    assert cli.main(["reproduce", "-p", "n_queries", "3"]) == 2
    assert "writes to folders of its own: give --runs and --results" in one_error_line(capsys)


SMALL_REPRODUCTION = ["-p", "n_queries", "3", "-p", "pairs", "4->9", "-p", "inception", "False", "-p", "check_zoo",
                      "False", "-p", "samples_per_class", "2", "-p", "ablation_queries", "0", "-p", "max_errors", "2"]


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cfkit.running.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=900)


def test_a_plain_sequential_cnn_exported_by_its_user_goes_through_the_whole_reproduction(plain, tmp_path) -> None:
    """The issue's case: an ordinary nn.Sequential CNN, exported as the README shows, given relative to the
    caller's folder; every per-query method, CVE included, gets its row in the table."""
    export_classifier(plain, tmp_path / "mine.pt2")
    done = run_cli("reproduce", "--classifier", "mine.pt2", "--runs", "runs", "--results", "results",
                   *SMALL_REPRODUCTION, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = (tmp_path / "results" / "table.csv").read_text().splitlines()
    means = {line.split(",")[0] for line in rows if ",mean," in line}
    assert {"original_data", "adv_attack", "cem", "cve", "ldce"} <= means, means
    assert "04_expgan left out: its per-pair models learn the zoo classifier" in done.stderr


def test_the_zoos_exported_classifier_runs_through_cfkit_run_and_reproduce(zoo_pt2, tmp_path) -> None:
    small = ["-p", "n_queries", "3", "-p", "pairs", "4->9", "-p", "inception", "False"]
    done = run_cli("run", "01_adversarial", "-p", "classifier", str(zoo_pt2), *small, "--out", "single", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "single" / "cfs_adv_attack_4to9.pt").is_file()
    done = run_cli("reproduce", "--classifier", str(zoo_pt2), "--notebooks", "05_c3lt", "03_cve", "10_metrics",
                   "--runs", "runs", "--results", "results", *small, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    means = {line.split(",")[0] for line in (tmp_path / "results" / "table.csv").read_text().splitlines()
             if ",mean," in line}
    assert {"original_data", "cve", "c3lt"} <= means, "the zoo's weights keep the shipped per-pair models"

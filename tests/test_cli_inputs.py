"""Every bad input a clear error (issue 28): repeated pairs, counts beyond what MNIST has, paths relative to the
caller's folder, and a cfkit error raised inside a kernel — each one line and exit code 2 at the command line."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from cfkit.data import OFFICIAL_COUNTS
from cfkit.errors import InputError, ParameterError
from cfkit.running import cli
from cfkit.running.run import absolute_paths, run_notebook
from cfkit.scoring.evaluation import parse_pairs, protocol_queries, query_ceiling, validation_queries

from other_classifier import train_small_resnet


def one_error_line(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("cfkit: error: ")
    return lines[0]


def test_a_repeated_pair_is_refused_by_the_python_api() -> None:
    once = r"pair 4->9 is given more than once; give each pair once \(e.g. '4->9,3->8'\)"
    with pytest.raises(InputError, match=once):
        parse_pairs("4->9,3->8,4->9")
    with pytest.raises(InputError, match="pair 5->6 is given more than once"):
        parse_pairs([(5, 6), (5, 6)])
    assert parse_pairs("4->9,9->4") == [(4, 9), (9, 4)]  # the reverse pair is another pair


def test_cli_refuses_a_repeated_pair_in_one_line_before_any_kernel(capsys, no_kernel, tmp_path) -> None:
    assert cli.main(["run", "01_adversarial", "-p", "pairs", "4->9,4->9", "--out", str(tmp_path / "out")]) == 2
    line = one_error_line(capsys)
    assert "parameter 'pairs' of 01_adversarial" in line and "pair 4->9 is given more than once" in line
    assert no_kernel == [] and not (tmp_path / "out").exists()


def test_query_counts_have_the_official_ceiling() -> None:
    assert query_ceiling("4->9") == OFFICIAL_COUNTS["test"][4] == 982
    assert query_ceiling("4->9,5->6") == OFFICIAL_COUNTS["test"][5] == 892
    assert query_ceiling("4->9", "train") == OFFICIAL_COUNTS["train"][4]
    assert len(protocol_queries((4, 9), 982)[0]) == 982  # the ceiling itself is fine
    with pytest.raises(InputError, match="n_queries 983 exceeds the 982 MNIST test images of digit 4; give at most"):
        protocol_queries((4, 9), 983)
    with pytest.raises(InputError, match="exceeds the 5842 MNIST training images of digit 4"):
        validation_queries((4, 9), 5843)


@pytest.mark.parametrize(("notebook", "values", "message"), [
    ("01_adversarial", {"pairs": "4->9", "n_queries": 100000},
     r"'n_queries' of 01_adversarial: 100000 exceeds the 982 MNIST test images of digit 4.*give at most 982"),
    ("10_metrics", {"pairs": "4->9,5->6", "n_queries": 900},
     r"'n_queries' of 10_metrics: 900 exceeds the 892 MNIST test images of digit 5.*give at most 892"),
    ("12_faithfulness", {"n_queries": 5000}, r"'n_queries' of 12_faithfulness: .*give at most 892"),
    ("06_ldce", {"pairs": "3->8", "ablation_queries": 7000},
     r"'ablation_queries' of 06_ldce: 7000 exceeds the 6131 MNIST training \(validation\) images of digit 3"),
])
def test_counts_beyond_the_images_are_refused(notebook, values, message, no_kernel) -> None:
    with pytest.raises(ParameterError, match=message):
        run_notebook(notebook, values)
    assert no_kernel == []


def test_cli_refuses_too_many_queries_in_one_line(capsys, no_kernel) -> None:
    assert cli.main(["run", "01_adversarial", "-p", "n_queries", "100000", "-p", "pairs", "4->9"]) == 2
    assert "give at most 982" in one_error_line(capsys) and no_kernel == []


def test_only_given_paths_are_made_absolute(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my.pt").write_bytes(b"")
    given = {"classifier": "my.pt", "classifier_state": "w.pt", "pair_dir": "pairs", "runs_dir": "../r",
             "n_queries": 2, "pairs": "4->9", "figure": "", "out_dir": "/abs/out"}
    assert absolute_paths(given) == {**given, "classifier": str(tmp_path / "my.pt"),
                                     "classifier_state": str(tmp_path / "w.pt"), "pair_dir": str(tmp_path / "pairs"),
                                     "runs_dir": str((tmp_path / "../r").resolve())}
    assert absolute_paths({"classifier": "classifier"}) == {"classifier": "classifier"}  # a zoo name
    assert absolute_paths({"classifier": "pkg.mod:factory"}) == {"classifier": "pkg.mod:factory"}


def test_sweep_and_reproduce_resolve_paths_before_their_runs(tmp_path, monkeypatch) -> None:
    from cfkit.running import reproduce

    monkeypatch.chdir(tmp_path)
    (tmp_path / "my.pt").write_bytes(b"")
    swept, fixed = cli._absolute_sweep_paths({"classifier": ["my.pt", "classifier"]}, {"runs_dir": "runs"})
    assert swept == {"classifier": [str(tmp_path / "my.pt"), "classifier"]}
    assert fixed == {"runs_dir": str(tmp_path / "runs")}
    seen = {}
    monkeypatch.setattr(reproduce, "reproduce", lambda **kwargs: seen.update(kwargs) or "done")
    assert cli.main(["reproduce", "--classifier", "my.pt", "--runs", "r", "--results", "s"]) == 0
    assert seen["classifier"] == str(tmp_path / "my.pt") and seen["classifier_state"] is None


def test_cli_runs_a_classifier_file_given_relative_to_the_callers_folder(tmp_path, monkeypatch, capsys) -> None:
    """The README's `cfkit run 01_adversarial -p classifier my_classifier.pt`, from the folder holding the file;
    then a set truncated on disk, scored by 10_metrics: the kernel's cfkit error is one line and exit code 2."""
    torch.jit.save(torch.jit.script(train_small_resnet()), tmp_path / "my.pt")  # as test_any_classifier makes one
    monkeypatch.chdir(tmp_path)
    small = ["-p", "classifier", "my.pt", "-p", "n_queries", "2", "-p", "pairs", "4->9", "-p", "inception", "False"]
    assert cli.main(["run", "01_adversarial", *small, "--out", "runs/01_adversarial"]) == 0, capsys.readouterr().err
    saved = tmp_path / "runs" / "01_adversarial" / "cfs_adv_attack_4to9.pt"
    assert saved.is_file()
    capsys.readouterr()

    saved.write_bytes(saved.read_bytes()[:100])  # a set cut short on disk
    assert cli.main(["run", "10_metrics", *small, "-p", "runs_dir", "runs", "--out", "runs/10_metrics"]) == 2
    line = one_error_line(capsys)
    assert "10_metrics stopped:" in line and "cfs_adv_attack_4to9.pt is not a readable counterfactual set" in line
    assert str(Path("runs/10_metrics/10_metrics.ipynb").resolve()) in line


def test_max_errors_beyond_the_classifiers_errors_fails_in_the_kernel_in_one_line(tmp_path, capsys) -> None:
    """The ceiling of max_errors is the classifier's count of misclassified test digits, known only in the kernel:
    its ParameterError there reaches the command line as one line and exit code 2, as a check before it would."""
    out = tmp_path / "11"
    assert cli.main(["run", "11_ldce_error_analysis", "-p", "max_errors", "100000", "--out", str(out)]) == 2
    line = one_error_line(capsys)
    assert line.startswith("cfkit: error: 11_ldce_error_analysis stopped: parameter 'max_errors' of "
                           "11_ldce_error_analysis: 100000 exceeds the ") and "give at most" in line
    assert str(out / "11_ldce_error_analysis.ipynb") in line


@pytest.mark.parametrize(("argv", "message"), [
    (["train", "classifier", "--epochs", "0"], "epochs must be an int >= 1 (or None: the spec's"),
    (["train", "c3lt", "--pair", "4", "12"], "target class must be a digit 0-9, got 12"),
    (["train", "c3lt", "--pair", "4", "4"], "pair 4->4: the target class must differ from the query class"),
    (["train", "classifier", "--device", "cuda:7"], "device 'cuda:7' is not available here"),
    (["rank-stability", "-j", "0"], "jobs must be an int >= 1 (autoencoders retrained at once), got 0"),
    (["faithfulness", "--methods", "cem", "--cem-budgets", "200,x"],
     "--cem-budgets takes comma-separated whole numbers above 0 (e.g. '50,200,1000'), got '200,x'"),
    (["faithfulness", "--train", "c3lt", "--curve-steps", "0"],
     "--curve-steps takes comma-separated whole numbers above 0"),
    (["calibrate", "-j", "0"], "jobs must be an int >= 1 (autoencoders trained at once), got 0"),
    (["app", "--port", "99999"], "--port must be a TCP port, 1-65535, got 99999; leave it out for a free one"),
    (["faithfulness", "--pairs", "4->9,4->9", "--csv", "unused.csv"], "pair 4->9 is given more than once"),
    (["faithfulness", "--device", "cuda:7", "--csv", "unused.csv"], "leave device unset (the CPU) or run on a machine"),
    (["reproduce", "-j", "0"], "jobs must be an int >= 1"),
])
def test_other_subcommands_refuse_bad_values_in_one_line_before_any_work(argv, message, capsys, tmp_path,
                                                                        monkeypatch) -> None:
    """The neighbours of the issue's cases: the same one line and exit code 2 from every subcommand, nothing
    trained, served or written."""
    monkeypatch.chdir(tmp_path)
    assert cli.main(argv) == 2
    assert message in one_error_line(capsys)
    assert list(tmp_path.iterdir()) == [], "nothing written before the refusal"


def test_rescoring_a_curve_without_an_extra_measure_is_one_line(capsys) -> None:
    assert cli.main(["backbone", "dcgan_reference", "--rescore-extra"]) == 2
    assert "only ldm_unet's curve has an extra measure" in one_error_line(capsys)

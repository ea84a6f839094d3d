"""Notebooks default to a small interactive size; the full protocol's sizes come from one place,
``cfkit.running.reproduce.PROTOCOL``, which ``cfkit reproduce`` and ``cfkit run --protocol`` pass on top of them."""
from __future__ import annotations

import copy
import json
import re

import papermill
import pytest
import torch

from cfkit.errors import ParameterError
from cfkit.running import cli, expected, reproduce
from cfkit.running.expected import EXPECTED_DIR
from cfkit.running.parameter_values import check_values
from cfkit.running.run import check_parameters, literal_defaults, notebook_parameters

EMPTY_NOTEBOOK = {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


@pytest.mark.parametrize("notebook", sorted(reproduce.PROTOCOL))
def test_the_plan_names_real_parameters_that_differ_from_the_interactive_defaults(notebook: str) -> None:
    plan = reproduce.PROTOCOL[notebook]
    defaults = literal_defaults(notebook_parameters(notebook))
    check_parameters(notebook, plan)
    check_values(notebook, {**defaults, **plan})
    assert {key: defaults[key] for key in plan} != plan, "the protocol repeats the defaults"
    assert all(defaults[key] != value for key, value in plan.items()), plan


def test_every_notebook_of_the_reproduction_has_a_plan_and_given_values_win() -> None:
    # 12_faithfulness's defaults are already the reproduction's: it shows the recorded study (cfkit faithfulness
    # recomputes it), so it has no plan
    assert set(reproduce.reproduce_order()) - set(reproduce.PROTOCOL) == {"12_faithfulness"}
    merged = reproduce.protocol_parameters("06_ldce", {"n_queries": 4})
    assert merged["n_queries"] == 4 and merged["samples_per_class"] == 100 and merged["inception"] is True
    assert reproduce.protocol_parameters("notebooks/12_faithfulness.ipynb") == {}


@pytest.mark.parametrize("path", sorted(EXPECTED_DIR.glob("*.json")), ids=lambda p: p.stem)
def test_recorded_numbers_pin_every_size_the_protocol_sets(path) -> None:
    """A test run stays the same run whatever the interactive defaults become."""
    pinned = json.loads(path.read_text())["parameters"]
    assert set(reproduce.PROTOCOL.get(path.stem, {})) <= set(pinned), path.stem


@pytest.fixture
def fake_runs(monkeypatch):
    """reproduce() without kernels, checkpoints or Inception: each notebook 'runs' by writing an empty executed
    notebook; returns the (notebook, parameters) calls."""
    calls = []

    def run(name, parameters, out_dir):
        calls.append((name, dict(parameters or {})))
        (out_dir / f"{name}.ipynb").write_text(json.dumps({**EMPTY_NOTEBOOK, "metadata": {"ran": name}}))

    monkeypatch.setattr(reproduce, "run_notebook", run)
    monkeypatch.setattr(reproduce, "ensure_mnist", lambda: None)
    monkeypatch.setattr(reproduce, "names", lambda: [])
    monkeypatch.setattr(reproduce, "inception_extractor", lambda: (None, "not in this test"))
    monkeypatch.setattr(reproduce, "collect_table", lambda runs, results_dir: "the table")
    return calls


def test_reproduce_runs_the_protocol_with_given_values_over_it_and_copies_each_executed_notebook(fake_runs, tmp_path):
    runs, results = tmp_path / "runs", tmp_path / "results"
    reproduce.reproduce(runs_dir=runs, results_dir=results, notebooks=("06_ldce", "11_ldce_error_analysis"),
                        parameters={"06_ldce": {"n_queries": 3}})
    assert fake_runs == [("06_ldce", {**reproduce.PROTOCOL["06_ldce"], "n_queries": 3}),
                         ("11_ldce_error_analysis", reproduce.PROTOCOL["11_ldce_error_analysis"])]
    for notebook in ("06_ldce", "11_ldce_error_analysis"):
        assert json.loads((results / "notebooks" / f"{notebook}.ipynb").read_text())["metadata"] == {"ran": notebook}
    assert json.loads((results / "reproduce.json").read_text())["full_size"] is False

    fake_runs.clear()
    reproduce.reproduce(runs_dir=runs, results_dir=results, notebooks=("00_models",))
    assert fake_runs == [("00_models", {"check_zoo": True})]
    assert json.loads((results / "reproduce.json").read_text())["full_size"] is True


def test_reproduce_refuses_a_side_run_in_its_runs_folder_before_any_notebook(fake_runs, tmp_path) -> None:
    """A set that no notebook of the reproduction writes where it lies would reach the table as a second row."""
    from cfkit.errors import InputError
    from cfkit.methods.base import Result
    from cfkit.scoring.store import save_counterfactuals

    runs, results, x = tmp_path / "runs", tmp_path / "results", torch.rand(2, 1, 28, 28)
    result = Result(x=x, x_cf=x, source=torch.full((2,), 3), target=torch.full((2,), 8),
                    valid=torch.ones(2, dtype=torch.bool), seconds=1.0)
    save_counterfactuals(runs / "ref_cem_38", "cem", (3, 8), torch.arange(2), result, "0" * 64)
    with pytest.raises(InputError, match="1 counterfactual set.* that no notebook of the reproduction writes there"):
        reproduce.reproduce(runs_dir=runs, results_dir=results, notebooks=("02_cem", "10_metrics"))
    assert fake_runs == [] and not results.exists()
    reproduce.reproduce(runs_dir=runs, results_dir=results, notebooks=("02_cem",))  # a piece that scores nothing
    assert [name for name, _ in fake_runs] == ["02_cem"]


def test_reproduce_resume_tells_each_method_notebook_and_stays_full_size(fake_runs, tmp_path) -> None:
    """--resume changes no result, so the run still counts as full size; its record says it resumed (its seconds
    leave the reused pairs out)."""
    runs, results = tmp_path / "runs", tmp_path / "results"
    assert cli.main(["reproduce", "--resume", "--notebooks", "02_cem", "11_ldce_error_analysis", "--runs", str(runs),
                     "--results", str(results)]) == 0
    assert fake_runs == [("02_cem", {**reproduce.PROTOCOL["02_cem"], "resume": True}),
                         ("11_ldce_error_analysis", reproduce.PROTOCOL["11_ldce_error_analysis"])]
    record = json.loads((results / "reproduce.json").read_text())
    assert record["full_size"] is True and record["resumed"] is True


def test_cfkit_run_protocol_starts_from_the_plan(monkeypatch, tmp_path) -> None:
    given = []
    monkeypatch.setattr(papermill, "execute_notebook", lambda path, output, parameters, **kw: given.append(parameters))
    assert cli.main(["run", "06_ldce", "--protocol", "-p", "n_queries", "5", "--out", str(tmp_path)]) == 0
    assert cli.main(["run", "06_ldce", "--out", str(tmp_path)]) == 0
    assert given[0] == {**reproduce.PROTOCOL["06_ldce"], "n_queries": 5, "out_dir": str(tmp_path.resolve()),
                        "interactive": False}
    assert given[1] == {"out_dir": str(tmp_path.resolve()), "interactive": False}  # the interactive defaults


def test_write_expected_pins_the_sizes_it_ran_at(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(expected, "_run", lambda name, parameters, threads, folder: {"x/mean/im1": 1.0})
    path = expected.write_expected("06_ldce", {"n_queries": 8}, threads=(), seed_offsets=(), directory=tmp_path)
    defaults = literal_defaults(notebook_parameters("06_ldce"))
    assert json.loads(path.read_text())["parameters"] == {
        **{key: defaults[key] for key in reproduce.PROTOCOL["06_ldce"]}, "n_queries": 8}


def test_cfkit_sweep_protocol_fixes_the_plan_under_the_swept_and_set_values(monkeypatch) -> None:
    import cfkit.running.sweep

    class Done:
        def summary(self) -> str:
            return ""

        def check(self) -> None:
            pass

    calls = []
    monkeypatch.setattr(cfkit.running.sweep, "run_sweep", lambda notebook, swept, fixed, **kw: calls.append((swept, fixed)) or Done())
    assert cli.main(["sweep", "06_ldce", "-p", "n_queries", "5", "10", "--set", "pairs", "4->9", "--protocol"]) == 0
    assert calls == [({"n_queries": [5, 10]}, {"inception": True, "samples_per_class": 100,
                                               "pairs": "4->9"})]


def test_the_metrics_notebook_names_the_notebooks_still_to_run() -> None:
    """10_metrics on a fresh clone (only its own Original Data) or after some method notebooks."""
    from cfkit.scoring.evaluation import missing_note

    note = missing_note([{"method": "original_data"}, {"method": "adv_attack"}], "../runs")
    assert "CEM, CVE, ExpGAN, C3LT, LDCE" in note and "02_cem.ipynb" in note and "01_adversarial" not in note
    assert "make reproduce" in note
    everything = ["original_data", "adv_attack", "cem", "cve", "expgan", "c3lt", "ldce"]
    assert missing_note([{"method": m} for m in everything], "../runs") is None


def test_the_reference_profile_sets_every_reference_knob_a_notebook_has() -> None:
    from cfkit.methods.cem import CEM_REFERENCE

    reference = reproduce.reference_parameters()
    cem = reference["02_cem"]
    assert {k: cem[k] for k in ("kappa", "gamma", "search_steps", "iterations", "hinge", "success")} == {
        "kappa": CEM_REFERENCE.kappa, "gamma": CEM_REFERENCE.gamma, "search_steps": 9, "iterations": 1000,
        "hinge": "pn", "success": "kappa"}
    assert (cem["patience"], cem["settle"]) == (100, "batch"), "the faithfulness study's reference row's stop rule"
    assert reference["06_ldce"]["steps"] == 500, "Farid et al.'s 500-step DDIM schedule"
    assert all(values["inception_cfs"] == 0 for values in reference.values()), "Inception on every counterfactual"
    assert reproduce.protocol_parameters("02_cem", {"iterations": 5}, "reference")["iterations"] == 5, "given wins"
    with pytest.raises(ParameterError, match="profile must be one of default, reference"):
        reproduce.protocol_parameters("02_cem", profile="papers")


def test_the_reference_profile_runs_at_a_tiny_size_into_its_own_folders(tmp_path) -> None:
    """`cfkit reproduce --profile reference` on the CPU, two notebooks at a tiny size: CEM runs the reference's
    pertinent-negative hinge, and the table and record land in the profile's folders."""
    from cfkit.running.run import read_record

    runs, results = tmp_path / "runs", tmp_path / "results"
    assert cli.main(["reproduce", "--profile", "reference", "--notebooks", "02_cem", "10_metrics", "--runs", str(runs),
                     "--results", str(results), "-p", "n_queries", "2", "-p", "pairs", "4->9", "-p", "inception",
                     "False", "-p", "iterations", "5", "-p", "search_steps", "2"]) == 0
    parameters = read_record(runs / "02_cem")["parameters"]
    assert parameters["hinge"] == "pn" and parameters["kappa"] == 10.0 and parameters["gamma"] == 100.0
    record = json.loads((results / "reproduce.json").read_text())
    assert record["settings"] == "reference"
    speed = record["conv_gflops_one_thread"]  # the host's speed beside its seconds: hosts differ by 2x
    assert speed["start"] > 1 and speed["end"] > 1
    here = "cuda:0" if torch.cuda.is_available() else "cpu"  # every stage on CUDA when present, and says so
    for notebook in ("02_cem", "10_metrics"):  # 10_metrics makes Original Data with a method too
        assert record["devices"][notebook] == {"method": [here], "metrics": [here]}
    rows = [line.split(",")[:2] for line in (results / "table.csv").read_text().splitlines()]
    assert ["cem", "mean"] in rows and ["original_data", "mean"] in rows
    beside = (results / "versus_default.md").read_text()  # the shipped default table beside this one
    assert "| cem |" in beside and "| original_data |" in beside and "| adv_attack |" not in beside


def test_a_piece_without_the_scoring_notebook_keeps_its_sets_and_says_how_the_table_follows(tmp_path) -> None:
    """`cfkit reproduce --notebooks 01_adversarial` (one piece of a long reproduction) ends without a table and
    without an error; the next piece with 10_metrics scores what the first one made."""
    runs, results = tmp_path / "runs", tmp_path / "results"
    tiny = ["-p", "n_queries", "2", "-p", "pairs", "4->9", "-p", "inception", "False", "--runs", str(runs),
            "--results", str(results)]
    assert cli.main(["reproduce", "--notebooks", "01_adversarial", *tiny]) == 0
    assert (runs / "01_adversarial" / "cfs_adv_attack_4to9.pt").is_file() and not (results / "table.csv").exists()
    assert cli.main(["reproduce", "--notebooks", "10_metrics", *tiny]) == 0
    rows = [line.split(",")[:2] for line in (results / "table.csv").read_text().splitlines()]
    assert ["adv_attack", "4->9"] in rows and ["original_data", "4->9"] in rows
    from cfkit.scoring.store import load_counterfactuals
    cost = json.loads((results / "reproduce.json").read_text())["cost"]  # the whole reproduction's, both pieces
    made = load_counterfactuals(runs / "01_adversarial" / "cfs_adv_attack_4to9.pt").seconds
    assert cost["01_adversarial"]["method"] == round(made, 1) and cost["01_adversarial"]["devices"]["method"]
    assert set(cost) == {"01_adversarial", "10_metrics"} and cost["10_metrics"]["metrics"] > 0


def test_the_ldce_ablation_is_shown_as_recorded_and_a_bad_record_says_how_to_regenerate_it(tmp_path) -> None:
    """make reproduce leaves LDCE's ablation out of its minutes; 06_ldce shows the record that
    `-p ablation_queries 50` writes, and refuses a file that is not one."""
    from cfkit.errors import DataError
    from cfkit.studies.ablation import RECORDED, recorded_ablation, save_ablation

    assert "ablation_queries" not in reproduce.PROTOCOL["06_ldce"]
    shipped = recorded_ablation(RECORDED)
    assert shipped is not None and shipped["parameters"]["ablation_queries"] == 50
    settings = {r["setting"] for r in shipped["rows"] if r["pair"] == "mean"}
    assert "default" in settings and "no consensus (α=180°)" in settings and len(settings) == 8
    assert recorded_ablation(tmp_path / "none.json") is None
    rows = [{"setting": "default", "pair": "mean", "im1": 0.9}]
    assert recorded_ablation(save_ablation(rows, tmp_path, {"ablation_queries": 2}))["rows"] == rows
    (tmp_path / "bad.json").write_text('{"rows": 3}')
    with pytest.raises(DataError, match="not a recorded LDCE ablation.*ablation_queries 50"):
        recorded_ablation(tmp_path / "bad.json")


def test_the_recorded_ldce_ablation_names_the_denoiser_it_ran_on_and_says_when_that_is_not_the_one_explaining(
        tmp_path) -> None:
    """The shipped record was made with the shipped denoiser; after a retrain the notebook says the record is stale."""
    from cfkit.studies.ablation import RECORDED, describe_record, recorded_ablation, save_ablation
    from cfkit.zoo.checkpoints import load

    shipped, unet = recorded_ablation(RECORDED), load("ldm_unet")
    assert "note" not in describe_record(shipped, unet), "results/ldce_ablation.json was made with another denoiser"
    other = copy.deepcopy(unet)  # load() shares one model per checkpoint
    with torch.no_grad():
        next(other.parameters()).add_(1e-3)
    rows = [{"setting": "default", "pair": "mean", "im1": 0.9}]
    made = {"ablation_queries": 2, "pairs": "4->9", "strength": 0.342, "steps": 100, "consensus_angle": 40.0}
    record = recorded_ablation(save_ablation(rows, tmp_path, made, denoiser=other))
    assert "note" not in describe_record(record, other)
    assert re.search(r"note: recorded with other denoiser weights \(\w{12}\) than these \(\w{12}\)",
                     describe_record(record, unet))
    assert "(not recorded)" in describe_record({"parameters": made, "rows": rows}, unet)


def test_versus_marks_a_difference_only_where_the_intervals_do_not_overlap() -> None:
    from cfkit.scoring.table import versus, versus_markdown

    def row(method, im1, lo, hi, pair="mean"):
        return {"method": method, "pair": pair, "im1": im1, "im1_lo": lo, "im1_hi": hi}

    default = [row("a", 1.0, 0.9, 1.1), row("b", 1.0, 0.9, 1.1), row("c", 1.0, None, None), row("a", 5, 4, 6, "4->9")]
    reference = [row("a", 1.3, 1.2, 1.4), row("b", 1.05, 1.0, 1.1), row("c", 2.0, 1.9, 2.1)]
    rows = {r["method"]: r for r in versus(default, reference, columns=("im1",))}
    assert (rows["a"]["im1_apart"], rows["b"]["im1_apart"], rows["c"]["im1_apart"]) == (True, False, None)
    assert rows["a"]["im1_default"] == 1.0 and rows["a"]["im1_reference"] == 1.3
    wide = {"method": "a", "pair": "mean", "fid_inception": 40.0, "fid_inception_lo": 39.0, "fid_inception_hi": 41.0}
    at = [({**wide, "n_inception": 600}, {**wide, "fid_inception": 30.0, "fid_inception_lo": 29.0,
                                          "fid_inception_hi": 31.0, "n_inception": n}) for n in (600, 2884)]
    same, other = (versus([mine], [theirs], columns=("fid_inception",))[0] for mine, theirs in at)
    assert same["fid_inception_apart"] is True and other["fid_inception_apart"] is None, "FID compares at one n"
    text = versus_markdown(list(rows.values()), columns=("im1",))
    assert "**1.300 [1.200, 1.400]**" in text and "| b | 1.000 [0.900, 1.100] | 1.050 [1.000, 1.100] |" in text

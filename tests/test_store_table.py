"""Counterfactual sets on disk and the results table files."""
from __future__ import annotations

import pytest
import torch

from cfkit.errors import InputError
from cfkit.methods.base import Result
from cfkit.scoring.columns import header as table_header
from cfkit.scoring.store import find_counterfactuals, load_counterfactuals, save_counterfactuals, stray_sets
from cfkit.scoring.table import read_csv, write_table
from cfkit.zoo.checkpoints import load
from cfkit.zoo.classifiers import fingerprint

ZOO = fingerprint(load("classifier"))

DESIGN_HEADER = "method,pair,n,im1,im2,fid,kid,validity,oracle_agreement,proximity,sparsity,cout,seconds_per_cf"


def _result(n: int = 3) -> Result:
    x = torch.rand(n, 1, 28, 28)
    return Result(x=x, x_cf=x.flip(-1), source=torch.full((n,), 4), target=torch.full((n,), 9),
                  valid=torch.ones(n, dtype=torch.bool), seconds=1.5)


def test_roundtrip_and_discovery(tmp_path) -> None:
    result = _result()
    save_counterfactuals(tmp_path / "01_x", "adv_attack", (4, 9), torch.arange(3), result, ZOO)
    save_counterfactuals(tmp_path / "10_metrics", "original_data", (3, 8), torch.arange(3), result, ZOO, timed=False)
    save_counterfactuals(tmp_path / "10_metrics", "original_data", (4, 9), torch.arange(3), result, ZOO, timed=False)
    paths = find_counterfactuals(tmp_path)
    assert [p.name for p in paths] == ["cfs_original_data_4to9.pt", "cfs_original_data_3to8.pt",
                                       "cfs_adv_attack_4to9.pt"]  # table order: method, then protocol pair
    loaded = load_counterfactuals(paths[2])
    assert loaded.method == "adv_attack" and loaded.pair == (4, 9) and loaded.pair_name == "4->9"
    assert torch.equal(loaded.x_cf, result.x_cf) and loaded.seconds == 1.5
    assert load_counterfactuals(paths[0]).seconds is None
    assert not list(tmp_path.rglob("*.tmp")), "atomic writes leave no temporary files"


def test_a_side_run_left_in_the_runs_folder_is_found_and_never_scored_as_a_second_row(tmp_path) -> None:
    """`cfkit run 02_cem --out runs/try` leaves a second CEM set for a pair under runs/: scoring the folder must
    not put both in the table, and a reproduction must see it before it spends its minutes."""
    save_counterfactuals(tmp_path / "02_cem", "cem", (3, 8), torch.arange(3), _result(), ZOO)
    save_counterfactuals(tmp_path / "10_metrics", "original_data", (3, 8), torch.arange(3), _result(), ZOO)
    save_counterfactuals(tmp_path, "cve", (3, 8), torch.arange(3), _result(), ZOO)  # at the top: a folder's own
    assert stray_sets(tmp_path) == [] and len(find_counterfactuals(tmp_path)) == 3
    save_counterfactuals(tmp_path / "try", "cem", (3, 8), torch.arange(3), _result(), ZOO)
    assert stray_sets(tmp_path) == [tmp_path / "try" / "cfs_cem_3to8.pt"]
    with pytest.raises(InputError, match="two sets of cem for one pair") as error:
        find_counterfactuals(tmp_path)
    assert str(tmp_path / "02_cem" / "cfs_cem_3to8.pt") in str(error.value) and "--out DIR" in str(error.value)


def test_unknown_method_and_bad_file(tmp_path) -> None:
    with pytest.raises(InputError, match="unknown method"):
        save_counterfactuals(tmp_path, "magic", (4, 9), torch.arange(3), _result(), ZOO)
    bad = tmp_path / "cfs_cem_4to9.pt"
    bad.write_text("garbage")
    with pytest.raises(InputError, match="re-run the notebook"):
        load_counterfactuals(bad)


def test_table_files(tmp_path) -> None:
    rows = [
        {"method": "original_data", "pair": "4->9", "n": 10, "im1": 0.9, "im2": 0.01, "fid": 1.5, "kid": 0.0001,
         "validity": 1.0, "oracle_agreement": 1.0, "proximity": 0.2, "sparsity": 0.3, "cout": 0.5,
         "seconds_per_cf": None},
    ]
    rows.append({**rows[0], "pair": "mean", "im1_lo": 0.85, "im1_hi": 0.97, "n_inception": 10,
                 "fid_inception": 40.0, "fid_inception_lo": 30.0, "fid_inception_hi": 55.0})
    csv_path, md_path, png_path = write_table(rows, tmp_path)
    header = csv_path.read_text().splitlines()[0]
    assert header.startswith(DESIGN_HEADER + ",") and header == ",".join(table_header()), "extra columns go at the end"
    assert "im1_lo,im1_hi" in header and "n_inception,fid_inception,kid_inception" in header
    assert png_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png_path.stat().st_size > 20_000
    back = read_csv(csv_path)
    assert back[0]["im1"] == pytest.approx(0.9) and back[0]["seconds_per_cf"] is None and back[1]["n"] == 10
    assert back[1]["im1_lo"] == pytest.approx(0.85) and back[1]["n_inception"] == 10 and back[0]["im1_lo"] is None
    md = md_path.read_text()
    assert "Original Data" in md and "| 0.47 |" in md and "not Inception" in md
    assert "| 0.900 ± 0.060 |" in md and "| 40.000 ± 12.500 |" in md, "a value with an interval shows ± half its width"
    # the methods without rows are listed as missing, with the notebook that makes them; the CSV holds only rows
    assert md.count("\n|") == 3 + 6 and "| LDCE |  |  | missing: run `cfkit run 06_ldce`" in md
    assert "| CEM |  |  | missing: run `cfkit run 02_cem`" in md and len(back) == 2


def test_a_set_is_scored_once_per_content(tmp_path, monkeypatch) -> None:
    """The metrics notebook re-reads the method notebooks' sets: their stored rows are reused only while
    the set's bytes, the metric checkpoints and the seed are unchanged."""
    from cfkit.scoring import evaluation
    from cfkit.scoring.metrics import MetricModels

    x, _ = evaluation.protocol_queries((4, 9), 6)
    nines = evaluation.reference_images(9)[:6]
    result = Result(x=x, x_cf=nines, source=torch.full((6,), 4), target=torch.full((6,), 9),
                    valid=torch.ones(6, dtype=torch.bool), seconds=1.0)
    path = save_counterfactuals(tmp_path, "adv_attack", (4, 9), torch.arange(6), result, ZOO)
    models = MetricModels.from_zoo(inception=False)
    calls = []
    real = evaluation.evaluate_pair
    monkeypatch.setattr(evaluation, "evaluate_pair", lambda *a, **k: calls.append(1) or real(*a, **k))

    first = evaluation.score_set(path, models)
    assert evaluation.score_set(path, models) == first and len(calls) == 1
    assert path.with_suffix(".scores.json").is_file() and not list(tmp_path.glob("*.tmp"))
    evaluation.score_set(path, models, seed=1)  # another KID seed: computed anew
    evaluation.score_set(path, models, reuse=False)
    assert len(calls) == 3
    save_counterfactuals(tmp_path, "adv_attack", (4, 9), torch.arange(6), Result(**{**vars(result), "x_cf": x}), ZOO)
    changed = evaluation.score_set(path, models)  # the set was rewritten: computed anew, not the stale row
    assert len(calls) == 4 and changed["proximity"] == 0 and first["proximity"] > 0
    path.with_suffix(".scores.json").write_text("{not json")
    assert evaluation.score_set(path, models) == changed and len(calls) == 5
    hand_built = MetricModels(**{**vars(models), "fingerprint": None})
    evaluation.score_set(path, hand_built)
    assert len(calls) == 6, "models without a fingerprint are never matched to a stored row"


def test_a_set_holds_only_its_own_images(tmp_path) -> None:
    """Tensors sliced from a big one are views of its whole storage; the set saves copies, so 4 queries stay small."""
    big = torch.rand(1000, 1, 28, 28)  # 3.1 MB of storage
    x, index = big[10:14], torch.arange(1000)[10:14]
    result = Result(x=x, x_cf=x.flip(-1), source=torch.full((1000,), 4)[:4], target=torch.full((1000,), 9)[:4],
                    valid=torch.ones(1000, dtype=torch.bool)[:4], seconds=1.5)
    path = save_counterfactuals(tmp_path, "adv_attack", (4, 9), index, result, ZOO)
    assert path.stat().st_size < 100_000, f"{path.stat().st_size} bytes for 4 queries"
    back = load_counterfactuals(path)
    assert torch.equal(back.x, x) and torch.equal(back.x_cf, x.flip(-1)) and torch.equal(back.query, index)
    assert torch.equal(back.source, result.source) and torch.equal(back.valid, result.valid)


def test_a_resumed_run_reuses_only_a_set_of_the_same_method_settings_and_queries(tmp_path) -> None:
    """run_method(resume=True) takes a pair's saved set, extras included, when the same method, settings, code and
    weights made it for the same queries, and explains again otherwise (other settings, a set from before run
    keys, or no resume)."""
    from dataclasses import replace

    from cfkit.methods.cem import CEM, CEMConfig
    from cfkit.scoring.evaluation import run_method
    from cfkit.scoring.store import run_key

    classifier, autoencoder = load("classifier"), load("ae_all")
    config = CEMConfig(search_steps=1, iterations=3)
    calls = []

    class Counted(CEM):
        def _explain_all(self, *args):
            calls.append(self.config.iterations)
            return super()._explain_all(*args)

    first = []
    path = run_method(Counted(classifier, autoencoder, config), tmp_path, "4->9", 3, results=first)[0]
    again = []
    assert run_method(Counted(classifier, autoencoder, config), tmp_path, "4->9", 3, results=again, resume=True) == [path]
    assert calls == [3], "the second run reused the set"
    assert torch.equal(again[0].x_cf, first[0].x_cf) and torch.equal(again[0].valid, first[0].valid)
    assert set(again[0].extras) == {"constant", "found", "iterations"}, "the method's extras come back too"
    assert torch.equal(again[0].extras["iterations"], first[0].extras["iterations"])
    assert torch.allclose(again[0].extras["constant"], first[0].extras["constant"], equal_nan=True)
    assert again[0].seconds == pytest.approx(first[0].seconds)
    other = Counted(classifier, autoencoder, replace(config, iterations=4))
    assert run_key(other, (4, 9)) != run_key(Counted(classifier, autoencoder, config), (4, 9))
    run_method(other, tmp_path, "4->9", 3, resume=True)
    assert calls == [3, 4], "other settings explain again (and overwrite the set)"
    run_method(other, tmp_path, "4->9", 4, resume=True)
    assert calls == [3, 4, 4], "other queries explain again"
    run_method(other, tmp_path, "4->9", 4)
    assert calls == [3, 4, 4, 4], "without resume every pair is explained"
    payload = torch.load(path, weights_only=True)
    del payload["run_key"]  # a set saved before run keys were recorded
    torch.save(payload, path)
    run_method(other, tmp_path, "4->9", 4, resume=True)
    assert calls == [3, 4, 4, 4, 4]


def test_reproduce_resume_reaches_every_method_notebook_and_its_record() -> None:
    import inspect

    from cfkit.running import reproduce
    from cfkit.running.run import notebook_parameters

    for notebook in reproduce.method_notebooks():
        assert "resume" in notebook_parameters(notebook), f"{notebook} cannot go on where a run stopped"
    assert "resume" in inspect.signature(reproduce.reproduce).parameters

"""Training in pieces (issue 29): hours of CPU training pause at a budget with their state saved, and the same
command goes on from there to the weights an uninterrupted run gives."""
from __future__ import annotations

import pytest
import torch

from cfkit.errors import CheckpointError, InputError
from cfkit.running import cli
from cfkit.zoo import checkpoints
from cfkit.zoo.snapshots import SNAPSHOT_FILE

STEPS = 3


def _weights(directory, name: str) -> dict[str, torch.Tensor]:
    return torch.load(directory / f"{name}.pt", weights_only=True)


@pytest.mark.parametrize("name", ["c3lt_4_9", "encoder"])  # paired batches; random latents in the loss
def test_a_training_paused_after_every_step_ends_with_the_uninterrupted_weights(tmp_path, name) -> None:
    whole = checkpoints.train(name, tmp_path / "whole", max_steps=STEPS, check_quality=False, progress=False)
    snapshots = tmp_path / "snapshots"
    for step in range(1, STEPS):
        paused = checkpoints.train(name, tmp_path / "pieces", max_steps=STEPS, check_quality=False, progress=False,
                                   minutes=0, snapshot_dir=snapshots)
        assert paused == {"paused": True, "step": step, "total": STEPS, "snapshot": str(snapshots / SNAPSHOT_FILE)}
        assert not (tmp_path / "pieces" / f"{name}.pt").exists(), "nothing is registered before the last step"
    done = checkpoints.train(name, tmp_path / "pieces", max_steps=STEPS, check_quality=False, progress=False,
                             minutes=0, snapshot_dir=snapshots)
    assert done["steps"] == whole["steps"] == STEPS and done["quality"] == whole["quality"]
    one, other = _weights(tmp_path / "whole", name), _weights(tmp_path / "pieces", name)
    assert all(torch.equal(one[k], other[k]) for k in one), "the pieces must give the uninterrupted weights"
    assert not (snapshots / SNAPSHOT_FILE).exists(), "a registered model's snapshot is removed"


def test_a_snapshot_of_another_run_or_a_corrupt_one_is_refused_with_the_fix(tmp_path) -> None:
    snapshots = tmp_path / "snapshots"
    checkpoints.train("encoder", tmp_path, max_steps=STEPS, check_quality=False, progress=False, minutes=0,
                      snapshot_dir=snapshots)
    with pytest.raises(CheckpointError, match=r"belongs to another run \(it differs in max_steps.*delete"):
        checkpoints.train("encoder", tmp_path, max_steps=STEPS + 1, check_quality=False, progress=False, minutes=0,
                          snapshot_dir=snapshots)
    (snapshots / SNAPSHOT_FILE).write_bytes(b"not a snapshot")
    with pytest.raises(CheckpointError, match="cannot be read.*delete"):
        checkpoints.train("encoder", tmp_path, max_steps=STEPS, check_quality=False, progress=False, minutes=0,
                          snapshot_dir=snapshots)


@pytest.mark.parametrize(("name", "minutes", "message"), [
    ("classifier", 5, "classifier trains in one go.*c3lt_reference_<q>_<t>"),
    ("encoder", -1, "minutes must be a number >= 0"),
    ("encoder", "5", "minutes must be a number >= 0"),
])
def test_training_in_pieces_refuses_what_cannot_pause(tmp_path, name, minutes, message) -> None:
    with pytest.raises(InputError, match=message):
        checkpoints.train(name, tmp_path, max_steps=1, minutes=minutes, snapshot_dir=tmp_path / "s")


def test_the_command_says_where_it_paused_and_how_to_go_on(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(checkpoints, "train", lambda name, **kw: {"paused": True, "step": 7, "total": 9000,
                                                                  "snapshot": str(kw["snapshot_dir"] / SNAPSHOT_FILE)})
    cli.main(["train", "c3lt_reference", "--pair", "4", "9", "--minutes", "30", "--snapshots", str(tmp_path)])
    out = capsys.readouterr().out
    assert f"c3lt_reference_4_9: paused at step 7 of 9000 ({tmp_path / 'c3lt_reference_4_9' / SNAPSHOT_FILE})" in out
    assert "run the same command again to go on" in out


def test_bfloat16_training_of_a_long_fit_moves_float32_weights_and_is_recorded(tmp_path) -> None:
    """The faster precision for the hours-long fits: the same seeded steps under autocast, float32 weights that
    differ from float32 training's (so the record must say which ran), and the command that repeats it."""
    fast = checkpoints.train("c3lt_4_9", tmp_path / "bf16", max_steps=STEPS, check_quality=False, progress=False,
                             precision="bfloat16")
    exact = checkpoints.train("c3lt_4_9", tmp_path / "f32", max_steps=STEPS, check_quality=False, progress=False)
    assert fast["command"] == "cfkit train c3lt --pair 4 9 --precision bfloat16 (max_steps=3)"
    assert exact["command"] == "cfkit train c3lt --pair 4 9 (max_steps=3)"
    one, other = _weights(tmp_path / "bf16", "c3lt_4_9"), _weights(tmp_path / "f32", "c3lt_4_9")
    assert all(v.dtype == torch.float32 for v in one.values() if v.is_floating_point())
    assert any(not torch.equal(one[k], other[k]) for k in one), "bfloat16 is not float32: the weights differ"
    assert max((one[k] - other[k]).abs().max().item() for k in one) < 0.01, "three steps apart, the same training"


@pytest.mark.parametrize(("name", "precision", "message"), [
    ("classifier", "bfloat16", "precision 'bfloat16' is for the long fits .* classifier trains in float32"),
    ("encoder", "float16", "precision must be one of float32, bfloat16, got 'float16'"),
])
def test_a_precision_that_does_not_apply_is_refused(tmp_path, name, precision, message) -> None:
    with pytest.raises(InputError, match=message):
        checkpoints.train(name, tmp_path, max_steps=1, precision=precision)

"""Resumable training in pieces: a long :func:`cfkit.zoo.training.fit_loop` saves its state and pauses.

Hours of CPU training (C3LT's maps on the reference backbone: about 4.4 hours a pair) cannot run in one
session, so a fit given :class:`StepSnapshots` writes ``resume.pt`` (model, optimiser, schedule, torch's random
state, the step reached, the seconds spent) atomically every few minutes and when its time budget passes, then
stops with :class:`TrainingPaused`. The same command run again replays the seeded batch stream to that step and
goes on: the finished weights equal an uninterrupted run's, bit for bit, on the same device.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..errors import CheckpointError
from ..paths import atomic_torch_save

SNAPSHOT_FILE = "resume.pt"
SAVE_EVERY_SECONDS = 300.0
"""A kill (a session's end) loses at most this much training."""


class TrainingPaused(Exception):
    """A fit stopped at its time budget after saving its snapshot; the same command again goes on from there."""

    def __init__(self, step: int, total: int, path: Path) -> None:
        super().__init__(f"paused at step {step} of {total}; the state is in {path}: run the same command again to "
                         "go on from there")
        self.step, self.total, self.path = step, total, path


@dataclass
class StepSnapshots:
    """Where one fit keeps its resumable state, what run it belongs to (``key``) and its wall-time budget."""

    path: Path
    key: dict[str, Any]
    minutes: float | None = None
    every_seconds: float = SAVE_EVERY_SECONDS
    seconds_before: float = 0.0
    """Training seconds of the earlier pieces (read from the snapshot), for the manifest's total."""
    _started: float = field(default_factory=time.perf_counter, repr=False)
    _saved: float = field(default_factory=time.perf_counter, repr=False)
    _random: dict[str, Any] | None = field(default=None, repr=False)

    def restore(self, model: nn.Module, optimiser: torch.optim.Optimizer,
                schedule: torch.optim.lr_scheduler.LRScheduler | None) -> int:
        """Load the snapshot into the model, optimiser and schedule; the step to go on from (0: none yet).

        A snapshot of another run (other model, settings or device) or an unreadable one is refused with how to fix it.
        """
        self._started = self._saved = time.perf_counter()  # the clocks of this piece start with its fit
        if not self.path.is_file():
            return 0
        fix = f"delete {self.path.parent} to start this training over"
        try:
            state = torch.load(self.path, map_location="cpu", weights_only=True)
            saved_key = state["key"]
        except Exception as exc:
            detail = " ".join(str(exc).split())[:200]
            raise CheckpointError(f"the training snapshot {self.path} cannot be read ({detail}); {fix}.") from exc
        if saved_key != self.key:
            differ = sorted(k for k in {*saved_key, *self.key} if saved_key.get(k) != self.key.get(k))
            raise CheckpointError(f"the training snapshot {self.path} belongs to another run (it differs in "
                                  f"{', '.join(differ)}: {[saved_key.get(k) for k in differ]} there, "
                                  f"{[self.key.get(k) for k in differ]} here); run with its settings, or {fix}.")
        model.load_state_dict(state["model"])
        optimiser.load_state_dict(state["optimiser"])
        if schedule is not None:
            schedule.load_state_dict(state["schedule"])
        self.seconds_before, self._random = float(state["seconds"]), state["random"]
        return int(state["step"])

    def restore_random_state(self) -> None:
        """torch's generators as they were at the snapshot (after the batch stream was replayed to it)."""
        if self._random is not None:
            torch.set_rng_state(self._random["cpu"])
            if self._random.get("cuda") and torch.cuda.is_available():
                torch.cuda.set_rng_state_all(self._random["cuda"])

    def after_step(self, step: int, total: int, model: nn.Module, optimiser: torch.optim.Optimizer,
                   schedule: torch.optim.lr_scheduler.LRScheduler | None) -> None:
        """Save every ``every_seconds``; past the budget, save and raise :class:`TrainingPaused` (not after the last step)."""
        now = time.perf_counter()
        over = self.minutes is not None and now - self._started >= 60 * self.minutes and step < total
        if over or now - self._saved >= self.every_seconds:
            self.save(step, model, optimiser, schedule)
        if over:
            raise TrainingPaused(step, total, self.path)

    def save(self, step: int, model: nn.Module, optimiser: torch.optim.Optimizer,
             schedule: torch.optim.lr_scheduler.LRScheduler | None) -> None:
        random = {"cpu": torch.get_rng_state(),
                  "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}
        atomic_torch_save(self.path, {
            "key": self.key, "step": step, "seconds": self.seconds(), "random": random,
            "model": model.state_dict(), "optimiser": optimiser.state_dict(),
            "schedule": schedule.state_dict() if schedule is not None else {},
        })
        self._saved = time.perf_counter()

    def seconds(self) -> float:
        """Training seconds so far, the earlier pieces included."""
        return self.seconds_before + time.perf_counter() - self._started

    def finish(self) -> None:
        """The fit is registered: its snapshot has done its job."""
        self.path.unlink(missing_ok=True)

"""Resources (issue 28): a missing GPU, an unwritable output folder and a full disk are each one line that says
what to do, and nothing half-written is left behind."""
from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
import torch

from cfkit.common.devices import resolve_device
from cfkit.errors import InputError, OutputError
from cfkit.methods import catalog
from cfkit.methods.original import OriginalData
from cfkit.paths import atomic_write_bytes, make_folder
from cfkit.running.cli import main
from cfkit.zoo.checkpoints import load

no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")


def test_unset_device_is_the_best_one_here():
    assert resolve_device(None) == torch.device("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device("cpu") == torch.device("cpu")


@no_gpu
@pytest.mark.parametrize("device", ["cuda", "cuda:1", torch.device("cuda")])
def test_a_missing_gpu_is_one_line(device):
    with pytest.raises(InputError, match=r"device 'cuda(:1)?' is not available here .*leave device unset") as info:
        OriginalData(load("classifier"), device=device)
    assert "\n" not in str(info.value)


@no_gpu
def test_a_catalog_method_and_the_zoo_refuse_a_missing_gpu():
    with pytest.raises(InputError, match="is not available here"):
        catalog.get("adv_attack").make(load("classifier"), device="cuda")
    with pytest.raises(InputError, match="is not available here"):
        load("classifier", device="cuda")


@pytest.mark.skipif(torch.backends.mps.is_available(), reason="this machine has MPS")
def test_a_missing_mps_device_is_one_line():
    with pytest.raises(InputError, match=r"'mps' is not available here"):
        resolve_device("mps")


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


@pytest.mark.parametrize("existing", [False, True])
def test_a_full_disk_leaves_nothing_half_written(tmp_path, monkeypatch, existing):
    target = tmp_path / "metrics.json"
    if existing:
        target.write_bytes(b"old")

    def full(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(OutputError, match=f"no space left on the device holding {tmp_path}: free some space or "
                                          "pass another --out") as info:
        atomic_write_bytes(target, b"new")
    assert "\n" not in str(info.value)
    assert (target.read_bytes() == b"old") if existing else not target.exists()
    assert leftovers(tmp_path) == []


def test_an_unwritable_folder_is_one_line(tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", str(tmp_path))

    monkeypatch.setattr("tempfile.mkstemp", refuse)
    with pytest.raises(OutputError, match=f"cannot write to {tmp_path}: choose a folder you can write to with --out"):
        atomic_write_bytes(tmp_path / "metrics.json", b"new")
    assert list(tmp_path.iterdir()) == []


def test_other_os_errors_pass_through(tmp_path, monkeypatch):
    def broken(*args):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(OSError) as info:
        atomic_write_bytes(tmp_path / "metrics.json", b"new")
    assert not isinstance(info.value, OutputError)
    assert leftovers(tmp_path) == []


def refuse_to_make(monkeypatch, folder: Path, error: int) -> None:
    """``folder.mkdir`` fails with ``error``, as on a read-only disk or a folder of someone else's (the tests run as
    root, where a chmod would not stop the write)."""
    mkdir = Path.mkdir

    def fake(self, *args, **kwargs):
        if self == folder:
            raise (PermissionError if error == errno.EACCES else OSError)(error, os.strerror(error), str(self))
        return mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", fake)


@pytest.mark.parametrize("error", [errno.EACCES, errno.EROFS])
def test_a_folder_that_cannot_be_made_is_one_line(tmp_path, monkeypatch, error):
    refuse_to_make(monkeypatch, tmp_path / "out", error)
    with pytest.raises(OutputError, match="cannot write to .*out: choose a folder you can write to with --out"):
        make_folder(tmp_path / "out")


def test_run_into_an_unwritable_out_exits_2_with_one_line(tmp_path, monkeypatch, capsys, no_kernel):
    out = tmp_path / "out"
    refuse_to_make(monkeypatch, out, errno.EACCES)
    assert main(["run", "01_adversarial", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == f"cfkit: error: cannot write to {out}: choose a folder you can write to with --out.\n"
    assert no_kernel == []

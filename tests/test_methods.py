"""Every method: the shared contract each must pass, then each one's own promises."""
from __future__ import annotations

import pytest
import torch

from cfkit.data import load_mnist
from cfkit.errors import CheckpointError, InputError
from cfkit.methods import catalog
from cfkit.methods.adversarial import ATTACK_KIT, ATTACK_REFERENCE, AdversarialAttack, AttackConfig
from cfkit.methods.base import CounterfactualMethod, pair_groups
from cfkit.methods.c3lt import C3LT, C3LTConfig
from cfkit.methods.cem import CEM, CEMConfig, target_margin
from cfkit.methods.cve import CVE, CVE_KIT, CVE_REFERENCE, CVEConfig, paste_tiles, tile_starts
from cfkit.methods.expgan import ExpGAN, ExpGANConfig
from cfkit.running.parameter_values import notebook_configs
from cfkit.zoo.checkpoints import load

from method_contract import (BAD_INPUTS, check_bad_input, check_explain_contract, check_refuses_the_query_class,
                             contract_queries)

METHODS = [entry.name for entry in catalog.entries() if not entry.reference]
"""Every catalog method but the real-data reference (tests/test_methods_base.py covers that one)."""
PER_PAIR = {entry.name for entry in catalog.entries() if entry.per_pair}
"""Methods with one trained model per (query, target) pair: only trained pairs can be asked for."""


def _methods() -> dict[str, CounterfactualMethod]:
    """Each method at its catalog ``quick`` setting, which reaches the target (the contract asks validity >= 0.9)."""
    classifier = load("classifier")
    return {name: catalog.get(name).make_quick(classifier, device="cpu") for name in METHODS}


@pytest.fixture(scope="module")
def fours() -> torch.Tensor:
    return load_mnist("test", digits=(4,))[0][:12]


@pytest.mark.parametrize("name", METHODS)
def test_explain_contract(name: str) -> None:
    """What a new method must pass: shapes, range, validity flags, timing, per-image targets, seeding."""
    method = _methods()[name]
    assert method.name == name
    per_pair = name in PER_PAIR  # mixed pairs in one batch: 4->9 and 3->8, and the 3->8 half alone
    check_explain_contract(method, *contract_queries(per_pair), alone=slice(6, None) if per_pair else None)


@pytest.mark.parametrize("name", METHODS)
@pytest.mark.parametrize(("x", "target", "message"), BAD_INPUTS)
def test_bad_input(name: str, x, target, message: str) -> None:
    check_bad_input(_methods()[name], x, target, message)


@pytest.mark.parametrize("name", METHODS)
def test_target_equal_to_query_class(name: str) -> None:
    check_refuses_the_query_class(_methods()[name])


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: AttackConfig(radius=0), "radius must be a positive number"),
        (lambda: AttackConfig(norm="L1"), "norm must be one of 'Linf', 'L2'"),
        (lambda: AttackConfig(steps=2.5), "steps must be a positive integer"),
        (lambda: CEMConfig(kappa=-1), "kappa must be a number >= 0"),
        (lambda: CEMConfig(gamma="big"), "gamma must be a number >= 0"),
        (lambda: CEMConfig(search_steps=0), "search_steps must be a positive integer"),
        (lambda: CVEConfig(max_cells=0), "max_cells must be a positive integer"),
        (lambda: CVEConfig(distractor="farthest"), "distractor must be one of"),
        (lambda: CVEConfig(stop="x"), "stop must be one of 'image', 'features', got 'x'"),
        (lambda: CVEConfig(stop=None), "stop must be one of 'image', 'features', got None"),
        (lambda: C3LTConfig(fraction=1.5), r"fraction must be a number in \[0, 1\]"),
        (lambda: C3LTConfig(steps=0), "steps must be a positive integer"),
        (lambda: ExpGANConfig(mask_threshold=-0.1), r"mask_threshold must be a number in \[0, 1\]"),
    ],
)
def test_knobs_out_of_range(build, message: str) -> None:
    with pytest.raises(InputError, match=message):
        build()


@pytest.mark.parametrize("norm, radius", [("Linf", 0.2), ("L2", 2.0)])
def test_attack_stays_in_its_ball(norm: str, radius: float, fours) -> None:
    method = AdversarialAttack(load("classifier"), AttackConfig(norm=norm, radius=radius, step_size=0.05, steps=30))
    result = method.explain(fours, 9)
    change = (result.x_cf - fours).flatten(1)
    size = change.abs().amax(1) if norm == "Linf" else change.norm(dim=1)
    assert size.max() <= radius + 1e-5


def test_attack_reference_is_the_c3lt_radius_on_the_kit_pixel_range(fours) -> None:
    """The C3LT code's L∞ eps 0.3 on [−1, 1] pixels is 0.15 on [0, 1]; the ball is reached, never left."""
    assert ATTACK_REFERENCE.radius == pytest.approx(0.3 * (1 - 0) / (1 - (-1)))
    assert (ATTACK_REFERENCE.norm, ATTACK_REFERENCE.step_size, ATTACK_REFERENCE.steps) == ("Linf", 0.01, 100)
    assert AttackConfig() == ATTACK_REFERENCE and ATTACK_KIT.radius == 0.3, "the table uses the reference"
    result = AdversarialAttack(load("classifier"), ATTACK_REFERENCE).explain(fours, 9)
    change = (result.x_cf - fours).abs()
    assert change.max() <= 0.15 + 1e-6
    assert change.flatten(1).amax(1).min() >= 0.15 - 1e-3, "every query uses the whole radius somewhere"


def test_cem_only_adds_ink_and_is_sparse(fours) -> None:
    result = catalog.get(CEM.name).make_quick(load("classifier")).explain(fours, 9)
    delta = result.x_cf - fours
    assert delta.min() >= -1e-6, "a pertinent negative only adds"
    assert (delta.abs() > 0.1).float().mean() < 0.1
    margins = target_margin(load("classifier")(result.x_cf), torch.full((12,), 9))
    assert ((margins > 0) == result.valid).all()
    assert result.extras["found"].all() and (result.extras["constant"] > 0).all()


def test_cem_batched_equals_one_image_at_a_time(fours) -> None:
    """Each image carries its own constant, so batching changes nothing but speed."""
    method = catalog.get(CEM.name).make_quick(load("classifier"))
    batched = method.explain(fours[:4], 9)
    single = torch.cat([method.explain(fours[i : i + 1], 9).x_cf for i in range(4)])
    assert torch.allclose(batched.x_cf, single, atol=1e-4)


def test_paste_tiles_against_a_loop() -> None:
    x, donor = torch.rand(2, 1, 28, 28), torch.rand(2, 1, 28, 28)
    assignment = torch.full((2, 16), -1)
    assignment[0, 5], assignment[1, 0], assignment[1, 15] = 9, 15, 0
    expected = x.clone()
    for n, cell, source in ((0, 5, 9), (1, 0, 15), (1, 15, 0)):
        r, c, sr, sc = cell // 4 * 7, cell % 4 * 7, source // 4 * 7, source % 4 * 7
        expected[n, :, r : r + 7, c : c + 7] = donor[n, :, sr : sr + 7, sc : sc + 7]
    assert torch.equal(paste_tiles(x, donor, assignment, (4, 4)), expected)


def test_paste_tiles_on_a_grid_that_does_not_divide_the_image() -> None:
    """A 5x5 map tiles 28 pixels as 6+6+5+6+5 (pixel r in tile r*5//28); a 5-pixel tile pasted over a 6-pixel one
    repeats its last pixel, a 6-pixel tile over a 5-pixel one loses its last."""
    x, donor = torch.rand(1, 1, 28, 28), torch.rand(1, 1, 28, 28)
    starts = tile_starts(5, 28).tolist()
    assert starts == [0, 6, 12, 17, 23, 28]
    assignment = torch.full((1, 25), -1)
    assignment[0, 0], assignment[0, 12] = 12, 0  # the 6x6 tile of cell (0,0) and the 5x5 of cell (2,2) swap
    expected = x.clone()
    for cell, source in ((0, 12), (12, 0)):
        r0, c0, sr0, sc0 = starts[cell // 5], starts[cell % 5], starts[source // 5], starts[source % 5]
        for dr in range(starts[cell // 5 + 1] - r0):
            for dc in range(starts[cell % 5 + 1] - c0):
                sr = sr0 + min(dr, starts[source // 5 + 1] - sr0 - 1)
                sc = sc0 + min(dc, starts[source % 5 + 1] - sc0 - 1)
                expected[0, 0, r0 + dr, c0 + dc] = donor[0, 0, sr, sc]
    assert torch.equal(paste_tiles(x, donor, assignment, (5, 5)), expected)


def test_cve_swaps_cells_and_ends_at_most_at_the_distractor(fours) -> None:
    result = CVE(load("classifier"), CVE_KIT).explain(fours, 9)
    swaps, count = result.extras["swaps"], result.extras["cells_swapped"]
    assert ((swaps[..., 0] >= 0).sum(1) == count).all() and (count >= 1).all()
    assert (swaps[..., 0] == swaps[..., 1]).all(), "aligned cells in the kit's setting"
    distractors = result.extras["distractor"]
    assert (load("classifier")(distractors).argmax(1) == 9).all()
    full = CVE(load("classifier"), CVEConfig(max_cells=16, cells="aligned", stop="image")).explain(fours[:1], 9)
    assert result.valid.all() and full.valid.all()
    free = CVE(load("classifier")).explain(fours, 9)
    assert free.extras["feature_valid"].all(), "the default (reference) stops once the feature map flips"


@pytest.mark.parametrize("cells", ["aligned", "any"])
def test_cve_stop_on_features_flips_the_feature_map_in_no_more_swaps(cells: str, fours) -> None:
    """Goyal et al.'s stop rule: the same greedy path, cut as soon as the composite feature map says the target."""
    classifier = load("classifier")
    image = CVE(classifier, CVEConfig(cells=cells, stop="image")).explain(fours, 9)
    features = CVE(classifier, CVEConfig(cells=cells, stop="features")).explain(fours, 9)
    assert features.extras["feature_valid"].all()
    fewer, more = features.extras["cells_swapped"], image.extras["cells_swapped"]
    assert (fewer >= 1).all() and (fewer <= more).all()
    for n, k in enumerate(fewer.tolist()):  # a prefix of the stop="image" path
        assert torch.equal(features.extras["swaps"][n, :k], image.extras["swaps"][n, :k])
        assert (features.extras["swaps"][n, k:] == -1).all()
    if cells == "any":
        assert (fewer < more).any(), "moved tiles make the pasted image lag behind the feature map"
        assert (features.valid <= image.valid).all() and features.valid.float().mean() < 1
        assert CVE_REFERENCE == CVEConfig(cells="any", stop="features")
        reference = CVE(classifier, CVE_REFERENCE).explain(fours, 9)
        assert torch.equal(reference.x_cf, features.x_cf)
    assert CVEConfig() == CVE_REFERENCE and CVE_KIT == CVEConfig(cells="aligned", stop="image")


@pytest.mark.parametrize(("notebook", "config"), sorted(notebook_configs().items()))
def test_notebook_defaults_match_the_method_config(notebook: str, config) -> None:
    """A knob's default lives in its config; the notebook's parameters cell must not drift from it."""
    import ast
    import dataclasses

    from cfkit.running.run import notebook_parameters

    spec = notebook_parameters(notebook)
    for field in dataclasses.fields(config):
        if field.name in spec:
            assert ast.literal_eval(spec[field.name]["default"]) == field.default, (notebook, field.name)


@pytest.mark.parametrize("name", sorted(PER_PAIR))
def test_untrained_pair_names_the_training_command(name: str, fours) -> None:
    with pytest.raises(CheckpointError, match=rf"{name}_4_7.pt is missing.*cfkit train {name} --pair 4 7"):
        _methods()[name].explain(fours[:2], 7, source=torch.full((2,), 4))


def test_pair_groups_split_a_batch_by_pair() -> None:
    groups = dict(pair_groups(torch.tensor([4, 3, 4, 5]), torch.tensor([9, 8, 9, 6])))
    assert {pair: rows.tolist() for pair, rows in groups.items()} == {(3, 8): [1], (4, 9): [0, 2], (5, 6): [3]}


def test_c3lt_walks_from_the_reconstruction_to_the_counterfactual(fours) -> None:
    classifier = load("classifier")
    full = C3LT(classifier).explain(fours, 9, source=torch.full((12,), 4))
    start = C3LT(classifier, C3LTConfig(fraction=0.0)).explain(fours, 9, source=torch.full((12,), 4))
    assert torch.allclose(start.x_cf, full.extras["reconstruction"], atol=1e-5), "fraction 0 is G(E(x))"
    path = C3LT(classifier).latent_path(fours[:3], (4, 9), points=5)
    assert path.shape == (5, 3, 1, 28, 28)
    assert torch.allclose(path[-1], full.x_cf[:3], atol=1e-5) and torch.allclose(path[0], start.x_cf[:3], atol=1e-5)
    p9 = torch.softmax(classifier(path.flatten(0, 1)), 1)[:, 9].view(5, 3).mean(1)
    assert p9[-1] > 0.9 > p9[0], "the walk must move the decision from 4 to 9"
    assert torch.allclose(full.extras["latent"].norm(dim=1), load("encoder")(fours).norm(dim=1), rtol=1e-4), \
        "the map preserves the latent norm"
    # the cycle returns to the reconstruction G(E(x)), not to x: on the pair's 982 test fours the classifier
    # calls G(E(x)) a 4 only 77 % of the time, and the cycled image gets the reconstruction's class 96 % of it
    back, reconstructed = (classifier(full.extras[k]).argmax(1) for k in ("cycled", "reconstruction"))
    assert (back == reconstructed).float().mean() >= 0.9, "h must map the counterfactual back (cycle consistency)"
    assert (full.extras["cycled"] - full.extras["reconstruction"]).abs().mean() < 0.03


def test_expgan_changes_only_inside_its_mask(fours) -> None:
    method = ExpGAN(load("classifier"))
    result = method.explain(fours, 9, source=torch.full((12,), 4))
    mask = result.extras["mask"]
    assert torch.allclose(result.x_cf, mask * result.extras["transformed"] + (1 - mask) * fours, atol=1e-6)
    thresholded = ExpGAN(load("classifier"), ExpGANConfig(mask_threshold=0.5)).explain(fours, 9, source=torch.full((12,), 4))
    kept = thresholded.extras["mask"]
    assert ((kept == 0) | (kept >= 0.5)).all() and (kept <= mask).all()
    assert torch.equal(thresholded.x_cf[kept == 0], fours[kept == 0]), "outside the mask the query is untouched"

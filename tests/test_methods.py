"""The three image-space methods: the shared contract every method must pass, then each one's own promises."""
from __future__ import annotations

import pytest
import torch

from cfkit.data import load_mnist
from cfkit.errors import InputError
from cfkit.methods.adversarial import AdversarialAttack, AttackConfig
from cfkit.methods.base import CounterfactualMethod
from cfkit.methods.cem import CEM, CEMConfig, target_margin
from cfkit.methods.cve import CVE, CVEConfig, paste_tiles
from cfkit.zoo.checkpoints import load

QUICK_CEM = CEMConfig(iterations=15, search_steps=2)


def _methods() -> dict[str, CounterfactualMethod]:
    classifier = load("classifier")
    return {
        "adv_attack": AdversarialAttack(classifier, AttackConfig(steps=40), device="cpu"),
        "cem": CEM(classifier, load("ae_all"), QUICK_CEM, device="cpu"),
        "cve": CVE(classifier, device="cpu"),
    }


@pytest.fixture(scope="module")
def fours() -> torch.Tensor:
    return load_mnist("test", digits=(4,))[0][:12]


@pytest.mark.parametrize("name", ["adv_attack", "cem", "cve"])
def test_explain_contract(name: str, fours) -> None:
    """What a new method must pass: shapes, range, validity flags, timing, per-image targets, seeding."""
    method = _methods()[name]
    assert method.name == name
    target = torch.tensor([9] * 6 + [7] * 6)
    result = method.explain(fours, target, source=torch.full((12,), 4))
    assert result.x_cf.shape == fours.shape and result.x_cf.dtype == torch.float32
    assert 0 <= result.x_cf.min() and result.x_cf.max() <= 1
    assert torch.equal(result.valid, method.predict(result.x_cf) == target)
    assert result.validity >= 0.9 and result.seconds > 0
    again = method.explain(fours, target, source=torch.full((12,), 4))
    assert torch.allclose(again.x_cf, result.x_cf, atol=1e-5), "explain must be deterministic"


@pytest.mark.parametrize("name", ["adv_attack", "cem", "cve"])
@pytest.mark.parametrize(
    ("x", "target", "message"),
    [
        (torch.zeros(0, 1, 28, 28), 9, "empty batch"),
        (torch.zeros(2, 1, 28, 28) - 0.5, 9, r"\[0, 1\]"),
        (torch.zeros(2, 1, 28, 28), 10, "0-9"),
    ],
)
def test_bad_input(name: str, x, target, message: str) -> None:
    with pytest.raises(InputError, match=message):
        _methods()[name].explain(x, target)


@pytest.mark.parametrize("name", ["adv_attack", "cem", "cve"])
def test_target_equal_to_query_class(name: str, fours) -> None:
    with pytest.raises(InputError, match="target equals the query class"):
        _methods()[name].explain(fours[:2], 4, source=torch.full((2,), 4))


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


def test_cem_only_adds_ink_and_is_sparse(fours) -> None:
    result = CEM(load("classifier"), load("ae_all"), QUICK_CEM).explain(fours, 9)
    delta = result.x_cf - fours
    assert delta.min() >= -1e-6, "a pertinent negative only adds"
    assert (delta.abs() > 0.1).float().mean() < 0.1
    margins = target_margin(load("classifier")(result.x_cf), torch.full((12,), 9))
    assert ((margins > 0) == result.valid).all()
    assert result.extras["found"].all() and (result.extras["constant"] > 0).all()


def test_cem_batched_equals_one_image_at_a_time(fours) -> None:
    """Each image carries its own constant, so batching changes nothing but speed."""
    method = CEM(load("classifier"), load("ae_all"), QUICK_CEM)
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
    assert torch.equal(paste_tiles(x, donor, assignment, 4, 7), expected)


def test_cve_swaps_cells_and_ends_at_most_at_the_distractor(fours) -> None:
    result = CVE(load("classifier")).explain(fours, 9)
    swaps, count = result.extras["swaps"], result.extras["cells_swapped"]
    assert ((swaps[..., 0] >= 0).sum(1) == count).all() and (count >= 1).all()
    assert (swaps[..., 0] == swaps[..., 1]).all(), "aligned cells by default"
    distractors = result.extras["distractor"]
    assert (load("classifier")(distractors).argmax(1) == 9).all()
    full = CVE(load("classifier"), CVEConfig(max_cells=16)).explain(fours[:1], 9)
    assert result.valid.all() and full.valid.all()
    free = CVE(load("classifier"), CVEConfig(cells="any")).explain(fours, 9)
    assert free.extras["feature_valid"].all()


@pytest.mark.parametrize(("notebook", "config"), [("01_adversarial", AttackConfig), ("02_cem", CEMConfig),
                                                  ("03_cve", CVEConfig)])
def test_notebook_defaults_match_the_method_config(notebook: str, config) -> None:
    """A knob's default lives in its config; the notebook's parameters cell must not drift from it."""
    import ast
    import dataclasses

    from cfkit.run import notebook_parameters

    spec = notebook_parameters(notebook)
    for field in dataclasses.fields(config):
        if field.name in spec:
            assert ast.literal_eval(spec[field.name]["default"]) == field.default, (notebook, field.name)

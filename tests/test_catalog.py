"""Methods and metric columns are declared once: the catalog and the column list. Everything that lists
methods or metrics derives from them, so one entry added at run time reaches the table files and the figure."""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
import torch
from matplotlib import pyplot as plt

from cfkit.data import PAIRS
from cfkit.errors import InputError
from cfkit.methods import catalog
from cfkit.methods.adversarial import AdversarialAttack
from cfkit.methods.base import Result
from cfkit.scoring import columns, evaluation, plots, table
from cfkit.scoring.store import save_counterfactuals
from cfkit.zoo.checkpoints import load

ROOT = Path(__file__).resolve().parents[1]


def _darkness(s: columns.ScoreInput) -> torch.Tensor:
    """A metric a user might add: the mean pixel of each counterfactual."""
    return s.x_cf.flatten(1).mean(1)


DARKNESS = columns.Column("darkness", "darkness (mean pixel of x′)", True, (0, 1), score=_darkness)


@pytest.fixture(scope="module")
def real_digit_sets(tmp_path_factory) -> list[Path]:
    """A small set per protocol pair (real target digits as counterfactuals), saved as a method would."""
    out = tmp_path_factory.mktemp("sets")
    classifier = AdversarialAttack(load("classifier"), device="cpu")
    paths = []
    for query, target in PAIRS:
        x, index = evaluation.protocol_queries((query, target), 8)
        result = Result(x=x, x_cf=evaluation.reference_images(target)[:8], source=torch.full((8,), query),
                        target=torch.full((8,), target), valid=torch.ones(8, dtype=torch.bool), seconds=0.8)
        paths.append(save_counterfactuals(out, classifier.name, (query, target), index, result,
                                          classifier.classifier_fingerprint))
    return paths


def test_one_column_entry_reaches_the_csv_the_markdown_and_the_figure(real_digit_sets, tmp_path) -> None:
    with columns.registered(DARKNESS):
        rows = evaluation.evaluate_sets(real_digit_sets, inception=False)
        csv_path, md_path, _ = table.write_table(rows, tmp_path)
        figure = plots.table_figure(rows)
    assert "darkness" not in [c.name for c in columns.columns()], "the with block takes it out again"
    header = csv_path.read_text().splitlines()[0].split(",")
    assert header[-3:] == ["im1_sum_hi", "darkness_lo", "darkness_hi"] and "darkness" in header
    back = table.read_csv(csv_path)
    for row in back:
        assert row["darkness_lo"] <= row["darkness"] <= row["darkness_hi"]
    reference = torch.cat([evaluation.reference_images(t)[:8] for _, t in PAIRS]).mean().item()
    assert back[-1]["darkness"] == pytest.approx(reference, rel=1e-4), "the mean row averages the pairs' means"
    markdown = md_path.read_text()
    assert markdown.splitlines()[0].rstrip(" |").endswith("| darkness")
    assert re.search(r"\| \d\.\d{3} ± \d\.\d{3} \|$", markdown.splitlines()[2])
    titles = [ax.get_title() for ax in figure.axes if ax.get_visible()]
    assert "darkness ↓ (mean pixel of x′)" in titles and len(titles) == len(columns.panels()) + 1
    plt.close(figure)


def test_a_new_column_is_a_new_score_not_a_cached_one(real_digit_sets) -> None:
    before = columns.digest()
    with columns.registered(DARKNESS):
        assert columns.digest() != before
        row = evaluation.score_set(real_digit_sets[0], evaluation.MetricModels.from_zoo(inception=False))
        assert row["darkness"] is not None


def test_columns_derive_the_table_layout() -> None:
    assert ",".join(columns.header()[:13]) == ("method,pair,n,im1,im2,fid,kid,validity,oracle_agreement,proximity,"
                                              "sparsity,cout,seconds_per_cf"), "DESIGN.md's header comes first"
    shown = [c.name for c in columns.display_order()]
    assert shown[:5] == ["n", "im1", "im1_sum", "im1_calibrated", "im2"], "a column sits beside its neighbour"
    assert table.markdown_columns()[3:5] == ["im1", table.PAPER_COLUMN]
    assert columns.lower_is_better() >= {"im1", "im2", "fid", "kid", "proximity"}
    assert "validity" not in columns.lower_is_better() and columns.shares() == {"validity", "oracle_agreement",
                                                                               "sparsity"}
    assert columns.get("kid").title == "KID ↓ (kit features)" and columns.get("cout").title == "COUT ↑"


def test_the_figure_grid_grows_with_the_columns() -> None:
    rows = [{"method": AdversarialAttack.name, "pair": "mean", "im1": 1.0}]
    extra = [columns.Column(f"extra_{i}", f"extra {i}", score=_darkness) for i in range(3)]
    shapes = []
    for count in range(len(extra) + 1):
        for column in extra[:count]:
            columns.register(column)
        try:
            figure = plots.table_figure(rows)
            shapes.append((len([ax for ax in figure.axes if ax.get_visible()]), len(figure.axes)))
            plt.close(figure)
        finally:
            for column in extra[:count]:
                columns._COLUMNS.pop(column.name)
    panels = len(columns.panels())
    assert [visible for visible, _ in shapes] == [panels, panels + 1, panels + 2, panels + 3], "no panel dropped"
    assert shapes[-1][1] == -(-(panels + 3) // plots.PANELS_PER_ROW) * plots.PANELS_PER_ROW


def test_registration_errors() -> None:
    with pytest.raises(InputError, match="already has a column 'im1'"):
        columns.register(columns.Column("im1", "IM1 again"))
    with pytest.raises(InputError, match="takes a Column"):
        columns.register("im1")
    with columns.registered(columns.Column("stray", "stray", beside="no_such_column")):
        with pytest.raises(InputError, match="beside 'no_such_column', which is not a column"):
            columns.display_order()
    with pytest.raises(InputError, match="already in the catalog"):
        catalog.register(catalog.MethodEntry(AdversarialAttack, "PGD again"))
    with pytest.raises(InputError, match=r"unknown method 'magic'; the catalog knows original_data, adv_attack"):
        catalog.get("magic")


def test_the_catalog_is_the_table_order() -> None:
    entries = catalog.entries()
    assert entries[0].reference and not any(e.reference for e in entries[1:])
    assert [e.name for e in entries if e.per_pair] == ["expgan", "c3lt"]
    assert set(catalog.paper_im1().values()) == {1.68, 1.44, 1.02, 0.72, 0.70, 0.47}
    assert all(e.notebook and (ROOT / "notebooks" / f"{e.notebook}.ipynb").is_file() for e in entries)
    assert all(e.name == e.method.name for e in entries)


def test_a_plugin_module_registers_in_every_process(tmp_path, monkeypatch) -> None:
    """CFKIT_PLUGINS names modules the catalog imports when it is read: how kernels and benchmark workers see
    a method registered outside the package."""
    (tmp_path / "my_methods.py").write_text(
        "from cfkit.methods import catalog\nfrom cfkit.methods.adversarial import AdversarialAttack\n\n"
        "class Wide(AdversarialAttack):\n    name = 'wide_attack'\n\n"
        "catalog.register(catalog.MethodEntry(Wide, 'Wide attack'))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(catalog.PLUGINS_VARIABLE, "my_methods")
    try:
        assert catalog.names()[-1] == "wide_attack" and catalog.label("wide_attack") == "Wide attack"
    finally:
        catalog.unregister("wide_attack")
    monkeypatch.setenv(catalog.PLUGINS_VARIABLE, "no_such_module_here")
    with pytest.raises(InputError, match="CFKIT_PLUGINS names 'no_such_module_here', which cannot be imported"):
        catalog.entries()


def _code(path: Path) -> str:
    """A module's source, or a notebook's code cells one after another."""
    if path.suffix != ".ipynb":
        return path.read_text()
    cells = json.loads(path.read_text())["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")


def _string_literals(source: str) -> set[str]:
    return {node.value for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Constant)
            and isinstance(node.value, str)}


def test_method_names_are_literals_only_in_the_catalog_and_their_own_module() -> None:
    """Everything else (modules, benchmarks, notebooks) asks the catalog or the class's ``name``. The per-pair zoo
    families (the checkpoints ``c3lt_4_9``, ``expgan_4_9``) are declared by the zoo module that defines their
    model."""
    own = {entry.name: {Path(entry.method.__module__.replace(".", "/") + ".py")} for entry in catalog.entries()}
    own["c3lt"].add(Path("cfkit/zoo/latent_maps.py"))
    own["expgan"].add(Path("cfkit/zoo/explaingan.py"))
    sources = [p.relative_to(ROOT) for p in [*ROOT.glob("cfkit/**/*.py"), *ROOT.glob("benchmarks/*.py"),
                                             *ROOT.glob("notebooks/*.ipynb")]]
    offenders = []
    for path in sources:
        literals = _string_literals(_code(ROOT / path))
        for name, allowed in own.items():
            if name in literals and path not in allowed and path != Path("cfkit/methods/catalog.py"):
                offenders.append(f"{path}: {name!r}")
    assert not offenders, "method names spelled out outside the catalog: " + ", ".join(offenders)

"""Split a classifier into its convolutional trunk and its head at the last spatial feature map: what CVE swaps.

CVE (Goyal et al., 2019) needs ``f`` (image -> last feature map, (N, C, H, W)) and ``g`` (map -> logits) with
``g(f(x)) == classifier(x)``. :func:`split_classifier` finds them for the common shapes of a model:

1. ``.features`` and ``.head`` attributes (the zoo's classifier), used as they are;
2. an ``nn.Sequential`` (TorchScript's included): cut after the last layer whose output is still a map;
3. any model whose forward is a graph: a ``torch.export`` module, or one ``torch.fx`` can trace. The cut is the
   last node with a (N, C, H, W) output that every later computation depends on alone (a single-input head).

"A map" is a 4-d output of the batch's size with height and width of at least 2: a 1×1 map has no cells to swap.
The split is checked on real digits (``g(f(x))`` equals the classifier's logits) before it is used.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass

import torch
from torch import fx, nn

from ..errors import InputError
from ..zoo.classifiers import probe_digits

MIN_CELLS_SIDE = 2
"""A feature map needs at least this many rows and columns to have cells to swap."""
SPLIT_TOLERANCE = 1e-4
"""How far (relative to the largest logit, at least 1) ``head(features(x))`` may be from the classifier's logits."""
HOW_TO_SPLIT = ("give the model .features (image -> last feature map) and .head (map -> logits) modules, make it an "
                "nn.Sequential, or export it with torch.export (README: Explain your own classifier)")


@dataclass(frozen=True)
class FeatureSplit:
    """A classifier as ``head(features(x))``; ``how`` says which of the module docstring's ways found it."""

    features: nn.Module
    head: nn.Module
    how: str
    grid: tuple[int, int]  # the feature map's (height, width): its cells


def split_classifier(model: nn.Module) -> FeatureSplit:
    """The classifier's trunk and head at its last spatial feature map; an :class:`InputError` naming the ways to
    make a model splittable when none applies."""
    if hasattr(model, "features") and hasattr(model, "head") and not isinstance(model, fx.GraphModule):
        # (an exported module keeps its submodules' names, but as containers of weights without a forward)
        split = FeatureSplit(model.features, model.head, "its .features and .head", (0, 0))
    elif isinstance(model, nn.Sequential) or getattr(model, "original_name", None) == "Sequential":
        split = _split_sequential(model)
    else:
        split = _split_graph(model)
    return _checked(model, split)


def _probe(model: nn.Module) -> torch.Tensor:
    """A few real test digits on the model's device."""
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    return probe_digits()[0][:4].to(device)


def _is_map(value: object, batch: int) -> bool:
    return (isinstance(value, torch.Tensor) and value.dim() == 4 and value.shape[0] == batch
            and min(value.shape[2:]) >= MIN_CELLS_SIDE)


def _split_sequential(model: nn.Module) -> FeatureSplit:
    """Cut an ``nn.Sequential`` after its last layer whose output is a feature map."""
    layers = list(model.children())
    x = _probe(model)
    cut, value = None, x
    with torch.inference_mode():
        for index, layer in enumerate(layers):
            value = layer(value)
            if _is_map(value, len(x)):
                cut = index
    if cut is None or cut == len(layers) - 1:
        raise InputError(f"CVE cannot split this nn.Sequential: no layer before the last outputs a feature map "
                         f"(N, C, H, W) with H, W >= {MIN_CELLS_SIDE}; {HOW_TO_SPLIT}.")
    return FeatureSplit(nn.Sequential(*layers[: cut + 1]), nn.Sequential(*layers[cut + 1:]),
                        f"an nn.Sequential cut after layer {cut} ({type(layers[cut]).__name__})", (0, 0))


def _split_graph(model: nn.Module) -> FeatureSplit:
    """Cut the model's graph (its own, for a torch.export module; torch.fx's trace otherwise) at the last feature
    map that the rest of the graph depends on alone."""
    if isinstance(model, torch.jit.ScriptModule):
        raise InputError(f"CVE cannot split a TorchScript model that is not an nn.Sequential; {HOW_TO_SPLIT}.")
    if isinstance(model, fx.GraphModule):
        graph_module, how = model, "its torch.export graph"
    else:
        try:
            graph_module, how = fx.GraphModule(model, _Tracer().trace(model)), "its torch.fx graph"
        except Exception as exc:  # fx raises TraceError, TypeError or others on control flow it cannot follow
            raise InputError(f"CVE cannot split {type(model).__name__}: torch.fx cannot trace it "
                             f"({type(exc).__name__}: {' '.join(str(exc).split())[:200]}); {HOW_TO_SPLIT}.") from None
    name = "the exported classifier" if graph_module is model else type(model).__name__
    graph = graph_module.graph
    inputs = [node for node in graph.nodes if node.op == "placeholder"]
    output = next(node for node in graph.nodes if node.op == "output")
    logits = _only_output(output)
    if len(inputs) != 1 or logits is None:
        raise InputError(f"CVE cannot split {name}: its graph has {len(inputs)} inputs or several outputs; "
                         f"{HOW_TO_SPLIT}.")
    values = _node_values(graph_module, _probe(model))
    order = {node: index for index, node in enumerate(graph.nodes)}
    batch = len(values[inputs[0]])
    maps = [n for n in _ancestors(logits) if n.op != "placeholder" and _is_map(values.get(n), batch)]
    for cut in sorted(maps, key=order.get, reverse=True):
        head_nodes = _ancestors(logits, stop=cut)
        if inputs[0] not in head_nodes:  # every path from the image to the logits passes through the cut
            features = _subgraph(graph_module, _ancestors(cut), inputs[0], cut, order)
            head = _subgraph(graph_module, head_nodes, cut, logits, order)
            return FeatureSplit(features, head, f"{how} cut at {cut.name}", (0, 0))
    raise InputError(f"CVE cannot split {name}: no feature map (N, C, H, W) with H, W >= "
                     f"{MIN_CELLS_SIDE} carries everything the logits depend on (a skip connection around the last "
                     f"map, say); {HOW_TO_SPLIT}.")


class _Tracer(fx.Tracer):
    """torch.fx's tracer, keeping every pooling layer whole (torch's leaves, and subclasses such as the zoo's fast
    ``MaxPool2x2``, whose forward branches on whether a gradient is wanted)."""

    def is_leaf_module(self, module: nn.Module, qualified_name: str) -> bool:
        return isinstance(module, nn.modules.pooling._MaxPoolNd) or super().is_leaf_module(module, qualified_name)


def _only_output(output: fx.Node) -> fx.Node | None:
    """The node of the graph's one output (export's graphs return a 1-tuple), or None for several outputs."""
    value = output.args[0]
    while isinstance(value, (tuple, list)) and len(value) == 1:
        value = value[0]
    return value if isinstance(value, fx.Node) else None


def _node_values(graph_module: fx.GraphModule, x: torch.Tensor) -> dict[fx.Node, object]:
    """Every node's value on the probe digits."""
    values: dict[fx.Node, object] = {}

    class Recorder(fx.Interpreter):
        def run_node(self, node: fx.Node) -> object:
            values[node] = super().run_node(node)
            return values[node]

    with torch.inference_mode():
        Recorder(graph_module).run(x)
    return values


def _ancestors(node: fx.Node, stop: fx.Node | None = None) -> set[fx.Node]:
    """``node`` and every node it is computed from, not looking past ``stop`` (left out) nor into what a batch-size
    read (:func:`_is_batch_size`) reads: a head can take the batch size from its own input."""
    seen, stack = set(), [node]
    while stack:
        current = stack.pop()
        if current in seen or current is stop:
            continue
        seen.add(current)
        if not (stop is not None and _is_batch_size(current)):
            stack.extend(current.all_input_nodes)
    return seen


def _is_batch_size(node: fx.Node) -> bool:
    """``t.size(0)`` / ``t.shape[0]`` / export's ``sym_size(t, 0)``: the batch size, which the cut map has too."""
    if node.op == "call_method" and node.target == "size" and node.args[1:] == (0,):
        return True
    if node.op == "call_function" and node.target is torch.ops.aten.sym_size.int and node.args[1:] == (0,):
        return True
    return (node.op == "call_function" and node.target is operator.getitem and node.args[1:] == (0,)
            and isinstance(node.args[0], fx.Node) and node.args[0].op == "call_function"
            and node.args[0].target is getattr and node.args[0].args[1:] == ("shape",))


def _subgraph(graph_module: fx.GraphModule, nodes: set[fx.Node], source: fx.Node, result: fx.Node,
              order: dict[fx.Node, int]) -> fx.GraphModule:
    """A module computing ``result`` from ``source`` with ``nodes`` (copied in graph order); every batch-size read
    reads the new input's."""
    graph = fx.Graph()
    remap: dict[fx.Node, fx.Node] = {source: graph.placeholder("x")}
    for node in sorted(nodes - {source}, key=order.get):
        if node.op == "placeholder":
            continue
        if _is_batch_size(node):
            remap[node] = graph.call_method("size", (remap[source], 0))
        else:
            remap[node] = graph.node_copy(node, lambda n: remap[n])
    graph.output(remap[result])
    return fx.GraphModule(graph_module, graph)


def _checked(model: nn.Module, split: FeatureSplit) -> FeatureSplit:
    """The split with its grid, after checking that ``head(features(x))`` gives the model's logits on real digits."""
    x = _probe(model)
    try:
        with torch.inference_mode():
            maps = split.features(x)
            logits, composed = model(x), split.head(maps)
    except Exception as exc:  # a user's module may raise anything on the parts
        raise InputError(f"CVE's split of the classifier ({split.how}) fails on real digits "
                         f"({type(exc).__name__}: {exc}); {HOW_TO_SPLIT}.") from None
    if not _is_map(maps, len(x)):
        raise InputError(f"CVE's feature part ({split.how}) returns shape {tuple(getattr(maps, 'shape', ()))}, not a "
                         f"feature map (N, C, H, W) with H, W >= {MIN_CELLS_SIDE}; {HOW_TO_SPLIT}.")
    if not isinstance(composed, torch.Tensor) or composed.shape != logits.shape or not (
            (composed - logits).abs().max() <= SPLIT_TOLERANCE * max(1.0, logits.abs().max().item())):
        raise InputError(f"CVE's split of the classifier ({split.how}) does not give its logits: head(features(x)) "
                         f"differs from classifier(x) on real digits; {HOW_TO_SPLIT}.")
    return FeatureSplit(split.features, split.head, split.how, (maps.shape[2], maps.shape[3]))

"""Data, models and measurements of chapter 8's graph-attention experiments.

Graphs follow PyTorch Geometric and :mod:`attention_src.graph`: node features ``x: (N, d)``
and an ``edge_index: (2, E)`` of int64 whose column ``e`` is the edge ``j -> i`` (source
``j = edge_index[0, e]``, target ``i = edge_index[1, e]``); the target is the query.

Data, built without any download:

* :func:`karate_club`: Zachary's karate club, from PyTorch Geometric's ``KarateClub``, whose
  34 nodes, 156 directed edges (78 friendships, both directions) and 4 community labels are
  written into its source code;
* :func:`knn_graph` and :func:`digits_graph`: the k-nearest-neighbour graph of scikit-learn's
  8x8 digits (1797 images shipped with the package), with a few labelled nodes per class;
* :func:`lookup_batch`: Brody et al.'s (2022) dictionary-lookup task, a bipartite graph in
  which every query node must attend to the one key node that carries its key.

Models: :class:`NodeClassifier` (two layers of GAT, GATv2, uniform neighbour weights or
none, the MLP), :class:`MeanAggregation` (the uniform-weight layer) and :class:`LookupModel`
(one attention layer and a linear read-out). Training: :func:`train_node_classifier`,
:func:`train_lookup`, :func:`lookup_accuracy`. Measurements: :func:`attention_entropy`,
:func:`uniform_entropy`, :func:`ranking_consistency`, :func:`top_key_agreement`,
:func:`asked_key_hits` and :func:`spring_layout` (a drawing of a graph, written in NumPy
since networkx is not needed). The heads-by-keys sweep: :func:`lookup_parameter_count`,
:func:`matched_gat_hidden` (GAT's head width for a parameter count equal to GATv2's) and
:func:`lookup_run` (one trained and measured model).
"""

from __future__ import annotations

import math
import warnings
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from attention_src.graph import (
    GraphAttention,
    GraphAttentionV2,
    _check_bool,
    _check_edge_index,
    _check_num_nodes,
    add_self_loops,
)
from attention_src.optim import Adam, CosineAnnealingLR
from attention_src.utils import module_device, place
from attention_src.validation import (
    check_device,
    check_positive_int,
    check_same_device,
    check_tensor,
)

__all__ = [
    "GraphData",
    "LookupBatch",
    "KINDS",
    "karate_club",
    "knn_graph",
    "digits_graph",
    "lookup_batch",
    "MeanAggregation",
    "NodeClassifier",
    "LookupModel",
    "train_node_classifier",
    "accuracy",
    "train_lookup",
    "lookup_accuracy",
    "attention_entropy",
    "uniform_entropy",
    "ranking_consistency",
    "top_key_agreement",
    "asked_key_hits",
    "lookup_parameter_count",
    "matched_gat_hidden",
    "lookup_run",
    "spring_layout",
]

#: The four node classifiers compared in chapter 8.
KINDS = ("gat", "gatv2", "uniform", "mlp")


class GraphData(NamedTuple):
    """A node-classification graph.

    ``x: (N, d)`` float32 features, ``edge_index: (2, E)`` int64 (source -> target),
    ``y: (N,)`` int64 labels, ``train_mask`` and ``test_mask``: ``(N,)`` bool, disjoint.
    """

    x: torch.Tensor
    edge_index: torch.Tensor
    y: torch.Tensor
    train_mask: torch.Tensor
    test_mask: torch.Tensor

    def to(self, device: str | torch.device) -> GraphData:
        """The same graph with every tensor on ``device``."""
        return GraphData(*_moved(self, device))


class LookupBatch(NamedTuple):
    """A batch of ``B`` dictionary-lookup graphs with ``k`` keys each.

    Graph ``b`` has nodes ``b*2k .. b*2k + k - 1`` (keys) and ``b*2k + k .. b*2k + 2k - 1``
    (queries). ``x: (B*2k, 2k + 1)``: a key node is ``[one_hot(key), one_hot(value), 0]``, a
    query node ``[one_hot(key), 0, 1]`` (the last feature marks a query).
    ``edge_index: (2, B*k*k)``: every key of a graph sends an edge to every query of the same
    graph, ordered by graph, then query, then key. ``y: (B*k,)`` the value each query must
    return (in the order of the query nodes), ``query_mask: (B*2k,)`` bool, ``True`` on query
    nodes; ``key_of_query: (B, k)`` and ``value_of_key: (B, k)`` the ids that made the batch.
    """

    x: torch.Tensor
    edge_index: torch.Tensor
    y: torch.Tensor
    query_mask: torch.Tensor
    key_of_query: torch.Tensor
    value_of_key: torch.Tensor

    def to(self, device: str | torch.device) -> LookupBatch:
        """The same batch with every tensor on ``device``."""
        return LookupBatch(*_moved(self, device))


def _moved(tensors, device: str | torch.device) -> list[torch.Tensor]:
    """Each of ``tensors`` on ``device`` (a ``str`` or ``torch.device``, not ``None``)."""
    device = check_device(device)
    if device is None:
        raise TypeError("device must be a str or a torch.device, got NoneType")
    return [t.to(device) for t in tensors]


# ----------------------------------------------------------------------------- data
def karate_club(*, device: str | torch.device | None = None) -> GraphData:
    """Zachary's karate club, as PyTorch Geometric ships it (no file, no network).

    34 members, ``x = I_34`` (one-hot identity features: a node is known only by its edges),
    156 directed edges (each of the 78 friendships in both directions), 4 labels from a
    modularity clustering (Kipf and Welling's version), one labelled node per class
    (nodes 0, 4, 8 and 24); every other node is a test node.

    Returns:
        :class:`GraphData` with ``x: (34, 34)``, ``edge_index: (2, 156)``, ``y: (34,)``, on
        ``device`` when one is given (default: the CPU).
    """
    device = check_device(device)
    with warnings.catch_warnings():  # PyG's first import: tqdm and torch.jit notices
        warnings.simplefilter("ignore")
        from torch_geometric.datasets import KarateClub  # the data: literal lists in its code

    data = KarateClub()[0]
    train = data.train_mask.clone()
    graph = GraphData(data.x.float(), data.edge_index.long(), data.y.long(), train, ~train)
    return graph if device is None else graph.to(device)


def knn_graph(points: torch.Tensor, k: int, symmetric: bool = False) -> torch.Tensor:
    """The k-nearest-neighbour graph of a point cloud (Euclidean distance, no self-loops).

    Every node ``i`` receives an edge ``j -> i`` from each of its ``k`` nearest other points
    ``j`` (ties broken by the smaller index), so it has exactly ``k`` incoming edges. With
    ``symmetric=True`` the reverse of every edge is added too (without duplicates): ``i`` and
    ``j`` are then linked when either is among the other's ``k`` nearest, the graph is
    undirected (both directions present) and every node has at least ``k`` neighbours.

    Args:
        points: ``(N, d)`` floating point, ``N > k``.
        k: neighbours per node, a positive int.
        symmetric: add the reverse edges.

    Returns:
        ``(2, E)`` int64, sources in row 0, targets in row 1, sorted by target and then
        source; ``E = N k`` when not ``symmetric``; on the device of ``points``.
    """
    check_tensor("points", points, min_rank=2)
    if points.dim() != 2:
        raise ValueError(f"points must have shape (N, d), got shape {tuple(points.shape)}")
    check_positive_int("k", k)
    if not isinstance(symmetric, bool):
        raise TypeError(f"symmetric must be a bool, got {type(symmetric).__name__}")
    n = points.shape[0]
    if k >= n:
        raise ValueError(f"k = {k} neighbours need at least k + 1 = {k + 1} points, got {n}")
    p = points.double()
    sq = (p * p).sum(1)  # (N,)
    dist = sq[:, None] + sq[None, :] - 2.0 * p @ p.T  # (N, N) squared distances
    dist.fill_diagonal_(math.inf)  # no self-loops
    # stable sort: equal distances keep the smaller index first
    order = torch.sort(dist, dim=1, stable=True).indices[:, :k]  # (N, k): neighbours of i
    targets = torch.arange(n, device=points.device).repeat_interleave(k)  # (N k,)
    sources = order.reshape(-1)  # (N, k) -> (N k,)
    if symmetric:
        sources, targets = torch.cat([sources, targets]), torch.cat([targets, sources])
    key = torch.unique(targets * n + sources)  # sorted, duplicates removed
    return torch.stack([key % n, key // n])  # (2, E)


def digits_graph(k: int = 10, labelled_per_class: int = 5, seed: int = 0, *,
                 device: str | torch.device | None = None) -> GraphData:
    """scikit-learn's 8x8 digits as a graph: one node per image, linked to its kNN.

    Features are the 64 pixel intensities scaled to [0, 1]; the graph is the symmetric
    :func:`knn_graph` of those features; ``labelled_per_class`` images of each digit, drawn
    with ``seed``, are the training nodes and all the others the test nodes (semi-supervised
    node classification, as on citation graphs). Built on the CPU (the CPU generator draws
    the training nodes) and moved to ``device`` when one is given: the same graph on every
    device.

    Returns:
        :class:`GraphData` with ``x: (1797, 64)`` float32, ``y: (1797,)`` int64.
    """
    from sklearn.datasets import load_digits  # shipped inside scikit-learn

    check_positive_int("labelled_per_class", labelled_per_class)
    device = check_device(device)
    digits = load_digits()
    x = torch.tensor(digits.data, dtype=torch.float32) / 16.0  # (N, 64)
    y = torch.tensor(digits.target, dtype=torch.int64)  # (N,)
    edge_index = knn_graph(x, k, symmetric=True)
    g = torch.Generator().manual_seed(seed)
    train = torch.zeros(len(y), dtype=torch.bool)
    for c in range(10):
        members = (y == c).nonzero().flatten()  # (n_c,)
        if len(members) < labelled_per_class:
            raise ValueError(
                f"labelled_per_class = {labelled_per_class} exceeds the {len(members)} "
                f"images of digit {c}"
            )
        pick = torch.randperm(len(members), generator=g)[:labelled_per_class]
        train[members[pick]] = True
    graph = GraphData(x, edge_index, y, train, ~train)
    return graph if device is None else graph.to(device)


def _lookup_edges(k: int, batch: int, device: torch.device | None = None) -> torch.Tensor:
    """Edges of ``batch`` lookup graphs: key j -> query k + i, by graph, query, key."""
    src = torch.arange(k, device=device).repeat(k)  # (k k,)
    dst = k + torch.arange(k, device=device).repeat_interleave(k)  # (k k,)
    offset = (2 * k * torch.arange(batch, device=device))[:, None]  # (B, 1)
    return torch.stack([(src + offset).reshape(-1), (dst + offset).reshape(-1)])  # (2, B k k)


def lookup_batch(k: int, batch: int, generator: torch.Generator, *,
                 device: str | torch.device | None = None) -> LookupBatch:
    """A batch of dictionary-lookup graphs (Brody et al., 2022, section 4.1).

    Each graph holds a random dictionary: ``k`` key nodes with keys ``0..k-1`` and values
    ``value_of_key`` (a random permutation of ``0..k-1``), and ``k`` query nodes that ask for
    the keys ``key_of_query`` (another permutation). Every key node sends an edge to every
    query node, so every query sees the same ``k`` neighbours, and the answer of query ``i``
    is the value of the one key whose id equals its own: a target must choose its source by
    comparing their features. A layer with static attention, which ranks the sources the
    same way for every target, cannot do this for more than one query per graph.

    Args:
        k: keys (and queries) per graph, at least 2.
        batch: number of graphs ``B``.
        generator: the (CPU) ``torch.Generator`` that draws the permutations.
        device: where the batch goes; drawn on the CPU and then moved, so a seed gives the
            same graphs on every device.

    Returns:
        :class:`LookupBatch`.
    """
    check_positive_int("k", k)
    check_positive_int("batch", batch)
    if k < 2:
        raise ValueError(f"k must be at least 2 (one key leaves nothing to look up), got {k}")
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    device = check_device(device)
    value_of_key = torch.argsort(torch.rand(batch, k, generator=generator), dim=1)  # (B, k)
    key_of_query = torch.argsort(torch.rand(batch, k, generator=generator), dim=1)  # (B, k)
    width = 2 * k + 1
    rows = torch.arange(batch)[:, None]  # (B, 1)
    ids = torch.arange(k)[None, :]  # (1, k)
    keys = torch.zeros(batch, k, width)  # (B, k, 2k + 1)
    keys[rows, ids, ids] = 1.0  # key id
    keys[rows, ids, k + value_of_key] = 1.0  # its value
    queries = torch.zeros(batch, k, width)
    queries[rows, ids, key_of_query] = 1.0  # the key asked for
    queries[:, :, 2 * k] = 1.0  # "I am a query"
    x = torch.cat([keys, queries], dim=1).reshape(batch * 2 * k, width)  # (B, 2k, w) -> (2Bk, w)
    y = torch.gather(value_of_key, 1, key_of_query).reshape(-1)  # (B, k) -> (B k,)
    edge_index = _lookup_edges(k, batch)  # (2, B k k)
    query_mask = torch.zeros(batch, 2 * k, dtype=torch.bool)
    query_mask[:, k:] = True
    made = LookupBatch(x, edge_index, y, query_mask.reshape(-1), key_of_query, value_of_key)
    return made if device is None else made.to(device)


# ----------------------------------------------------------------------------- models
class MeanAggregation(nn.Module):
    """Uniform neighbour weights: ``o_i = (1 / |N(i)|) sum_{j in N(i)} x_j W + b``.

    Graph attention with every score equal, so ``alpha_ij = 1 / |N(i)|`` over the in-neighbours
    and the node itself (self-loops added as in :func:`attention_src.graph.add_self_loops`): a
    mean aggregator, like a GCN layer without its symmetric degree normalisation.

    Args:
        in_features: ``d``; out_features: ``d_v``.
        device, dtype: keywords; where the layer goes and its floating dtype, applied after
            the weights are drawn on the CPU (:func:`attention_src.utils.place`).
    """

    def __init__(self, in_features: int, out_features: int, *,
                 device: str | torch.device | None = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        check_positive_int("in_features", in_features)
        check_positive_int("out_features", out_features)
        self.lin = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_features))
        place(self, device, dtype)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        """``x: (N, in_features)``, ``edge_index: (2, E)`` -> ``(N, out_features)``."""
        check_tensor("x", x, min_rank=2)
        if x.dim() != 2 or x.shape[1] != self.lin.in_features:
            raise ValueError(
                f"x must have shape (N, in_features) = (N, {self.lin.in_features}), "
                f"got shape {tuple(x.shape)}"
            )
        n = x.shape[0]
        edges = add_self_loops(edge_index, n)  # (2, E' + N), checks the edge list
        src, dst = edges[0], edges[1]
        z = self.lin(x)  # (N, d_v)
        total = z.new_zeros(n, z.shape[1]).index_add_(0, dst, z[src])  # (N, d_v)
        degree = torch.bincount(dst, minlength=n).to(z.dtype)  # (N,), >= 1 with the loop
        return total / degree[:, None] + self.bias


class NodeClassifier(nn.Module):
    """Two graph layers (or two linear layers) for node classification.

    ``kind``: ``"gat"`` (:class:`~attention_src.graph.GraphAttention`), ``"gatv2"``
    (:class:`~attention_src.graph.GraphAttentionV2`), ``"uniform"`` (:class:`MeanAggregation`)
    or ``"mlp"`` (``nn.Linear``, no graph). The first layer has ``heads`` heads of width
    ``hidden`` concatenated (the other kinds a width of ``heads * hidden``), then ELU; the
    second maps to ``num_classes`` with one head. Dropout with probability ``dropout`` acts on
    the features entering each layer, in training mode, as in Velickovic et al. (2018).

    ``forward(x: (N, in_features), edge_index: (2, E)) -> logits (N, num_classes)``.
    ``device`` and ``dtype`` (keywords) place the model after its weights are drawn on the
    CPU (:func:`attention_src.utils.place`): the same weights on every device.
    """

    def __init__(self, kind: str, in_features: int, num_classes: int, hidden: int = 8,
                 heads: int = 4, dropout: float = 0.5, *,
                 device: str | torch.device | None = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        for name, value in (("in_features", in_features), ("num_classes", num_classes),
                            ("hidden", hidden), ("heads", heads)):
            check_positive_int(name, value)
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)):
            raise TypeError(f"dropout must be a real number, got {type(dropout).__name__}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.kind, self.dropout = kind, float(dropout)
        width = hidden * heads
        if kind == "gat":
            self.layer1 = GraphAttention(in_features, hidden, heads=heads)
            self.layer2 = GraphAttention(width, num_classes, heads=1, concat=False)
        elif kind == "gatv2":
            self.layer1 = GraphAttentionV2(in_features, hidden, heads=heads)
            self.layer2 = GraphAttentionV2(width, num_classes, heads=1, concat=False)
        elif kind == "uniform":
            self.layer1 = MeanAggregation(in_features, width)
            self.layer2 = MeanAggregation(width, num_classes)
        else:
            self.layer1 = nn.Linear(in_features, width)
            self.layer2 = nn.Linear(width, num_classes)
        place(self, device, dtype)

    def _run(self, layer: nn.Module, x: torch.Tensor, edge_index: torch.Tensor):
        return layer(x) if self.kind == "mlp" else layer(x, edge_index)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        h = F.dropout(x, self.dropout, self.training)
        h = F.elu(self._run(self.layer1, h, edge_index))  # (N, heads * hidden)
        h = F.dropout(h, self.dropout, self.training)
        return self._run(self.layer2, h, edge_index)  # (N, num_classes)

    def attention(self, x: torch.Tensor, edge_index: torch.Tensor):
        """The attention of both layers (eval mode): ``[(edges, alpha), (edges, alpha)]``.

        ``edges: (2, E')`` with self-loops, ``alpha: (E', heads)`` for layer 1 and
        ``(E', 1)`` for layer 2. Only for ``"gat"`` and ``"gatv2"``.
        """
        # `with`, not a decorator: mutmut (`make mutate`) skips decorated functions.
        if self.kind not in ("gat", "gatv2"):
            raise ValueError(f"a {self.kind!r} model has no attention weights")
        was_training = self.training
        self.eval()
        with torch.no_grad():
            h, first = self.layer1(x, edge_index, return_attention=True)
            _, second = self.layer2(F.elu(h), edge_index, return_attention=True)
        self.train(was_training)
        return [first, second]


class LookupModel(nn.Module):
    """One attention layer over the lookup graph, ReLU, and a linear read-out of the value.

    ``kind``: ``"gat"`` or ``"gatv2"``; the layer has ``heads`` heads of width ``hidden``,
    concatenated, and no self-loops (a query attends only to the keys).
    ``readout_relu=False`` drops the ReLU, so the read-out is linear in the layer's output,
    as in Brody et al.'s own lookup model.
    ``forward(x: (N, 2k + 1), edge_index) -> logits (N, k)`` (meaningful on query nodes).
    ``device`` and ``dtype`` (keywords) as in :class:`NodeClassifier`.
    """

    def __init__(self, kind: str, k: int, hidden: int = 16, heads: int = 4,
                 readout_relu: bool = True, *, device: str | torch.device | None = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        layers = {"gat": GraphAttention, "gatv2": GraphAttentionV2}
        if kind not in layers:
            raise ValueError(f"kind must be 'gat' or 'gatv2', got {kind!r}")
        check_positive_int("k", k)
        self.kind, self.k = kind, k
        self.readout_relu = _check_bool("readout_relu", readout_relu)
        self.conv = layers[kind](2 * k + 1, hidden, heads=heads, add_self_loops=False)
        self.out = nn.Linear(hidden * heads, k)
        place(self, device, dtype)

    def _read_out(self, h: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(h) if self.readout_relu else h)  # (N, h d) -> (N, k)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor,
                return_attention: bool = False):
        if return_attention:
            h, attn = self.conv(x, edge_index, return_attention=True)
            return self._read_out(h), attn
        return self._read_out(self.conv(x, edge_index))


# ----------------------------------------------------------------------------- training
def accuracy(logits: torch.Tensor, y: torch.Tensor, mask: torch.Tensor) -> float:
    """Fraction of the nodes in ``mask: (N,)`` whose argmax of ``logits: (N, C)`` is ``y``.

    ``y: (N,)`` int64 labels; ``mask`` must be bool (an integer mask would index rows).
    """
    check_tensor("logits", logits, min_rank=2)
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        got = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise TypeError(
            f"mask must be a bool tensor (True = node counted), got {got}; an integer "
            "tensor would select rows by index"
        )
    if not isinstance(y, torch.Tensor) or logits.dim() != 2 or not (
        y.shape == mask.shape == logits.shape[:1]
    ):
        y_shape = tuple(y.shape) if isinstance(y, torch.Tensor) else type(y).__name__
        raise ValueError(
            f"logits (N, C), y (N,) and mask (N,) must agree in N, got logits "
            f"{tuple(logits.shape)}, y {y_shape}, mask {tuple(mask.shape)}"
        )
    check_same_device(logits=logits, y=y, mask=mask)
    if int(mask.sum()) == 0:
        raise ValueError("mask selects no node: accuracy is undefined")
    return float((logits[mask].argmax(-1) == y[mask]).float().mean())


def train_node_classifier(model: NodeClassifier, data: GraphData, steps: int = 200,
                          lr: float = 0.01, weight_decay: float = 5e-4) -> dict:
    """Full-batch Adam on the cross-entropy of the training nodes.

    Seed torch before building ``model`` and before calling (dropout draws from torch's
    global generator). Returns ``{"loss": [steps floats], "train_acc", "test_acc"}``, the
    accuracies of the final model in eval mode. ``data`` is moved to the model's device.
    """
    check_positive_int("steps", steps)
    data = data.to(module_device(model))
    opt = Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    losses = []
    model.train()
    for _ in range(steps):
        logits = model(data.x, data.edge_index)
        loss = F.cross_entropy(logits[data.train_mask], data.y[data.train_mask])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    model.eval()
    with torch.no_grad():
        logits = model(data.x, data.edge_index)
    return {"loss": losses, "train_acc": accuracy(logits, data.y, data.train_mask),
            "test_acc": accuracy(logits, data.y, data.test_mask)}


def train_lookup(model: LookupModel, steps: int = 400, batch: int = 32, lr: float = 0.01,
                 seed: int = 0, horizon: int | None = None) -> list[float]:
    """Adam with a cosine learning-rate decay on fresh lookup graphs at every step.

    The graphs are drawn from ``torch.Generator().manual_seed(seed)``; the learning rate
    decays to 0 over ``horizon`` steps (default ``steps``), so the first ``steps`` steps of
    a longer run can be repeated exactly with ``horizon`` set to its length. Returns the loss
    of every step (cross-entropy over the query nodes). The graphs are drawn on the CPU (the
    same graphs on every device) and moved to the model's device.
    """
    check_positive_int("steps", steps)
    horizon = steps if horizon is None else check_positive_int("horizon", horizon)
    g = torch.Generator().manual_seed(seed)
    device = module_device(model)
    opt = Adam(model.parameters(), lr=lr)
    sched = CosineAnnealingLR(opt, horizon)
    losses = []
    model.train()
    for _ in range(steps):
        b = lookup_batch(model.k, batch, g, device=device)
        loss = F.cross_entropy(model(b.x, b.edge_index)[b.query_mask], b.y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
    model.eval()
    return losses


def lookup_accuracy(model: LookupModel, batch: int = 200, seed: int = 12345) -> float:
    """Accuracy over the query nodes of ``batch`` fresh lookup graphs drawn with ``seed`` (on
    the CPU, then moved to the model's device)."""
    b = lookup_batch(model.k, batch, torch.Generator().manual_seed(seed),
                     device=module_device(model))
    model.eval()
    with torch.no_grad():
        logits = model(b.x, b.edge_index)
    return float((logits[b.query_mask].argmax(-1) == b.y).float().mean())


# ----------------------------------------------------------------------------- measurements
def _check_edges_alpha(edge_index: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    if alpha.dim() == 1:
        alpha = alpha[:, None]  # (E,) -> (E, 1)
    if alpha.dim() != 2 or alpha.shape[0] != edge_index.shape[1]:
        raise ValueError(
            f"alpha must have shape (E,) or (E, h) with E = {edge_index.shape[1]}, "
            f"got {tuple(alpha.shape)}"
        )
    return alpha


def attention_entropy(edge_index: torch.Tensor, alpha: torch.Tensor,
                      num_nodes: int) -> torch.Tensor:
    """Entropy (nats) of each target's attention distribution, per head.

    ``H_i = -sum_{j in N(i)} alpha_ij log alpha_ij``, with ``0 log 0 = 0``.

    Args:
        edge_index: ``(2, E)`` the edges ``alpha`` belongs to; alpha: ``(E, h)`` or ``(E,)``.
        num_nodes: ``N``.

    Returns:
        ``(N, h)``; 0 for a node without incoming edges.
    """
    num_nodes = _check_num_nodes(num_nodes)
    _check_edge_index(edge_index, num_nodes, what="num_nodes is")
    check_tensor("alpha", alpha, min_rank=1)
    alpha = _check_edges_alpha(edge_index, alpha)
    if not bool((alpha >= 0).all()):  # also false for NaN
        bad = alpha[~(alpha >= 0)][0].item()
        raise ValueError(f"alpha must hold attention weights (>= 0), got {bad}")
    plogp = torch.special.xlogy(alpha, alpha)  # (E, h), with 0 log 0 = 0 in any dtype
    out = alpha.new_zeros(num_nodes, alpha.shape[1])
    return -out.index_add_(0, edge_index[1], plogp)


def uniform_entropy(edge_index: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """``log |N(i)|``, the entropy of uniform weights over each target's in-edges: ``(N,)``.

    The largest entropy a distribution over ``|N(i)|`` neighbours can have; 0 for a node
    with one incoming edge or none.
    """
    num_nodes = _check_num_nodes(num_nodes)
    _check_edge_index(edge_index, num_nodes, what="num_nodes is")
    degree = torch.bincount(edge_index[1], minlength=num_nodes).double()  # (N,)
    return degree.clamp_min(1).log()


def ranking_consistency(attention: torch.Tensor, mask: torch.Tensor) -> float:
    """Fraction of key pairs that every query ranks in the same order.

    For each pair of keys ``j != j'`` that at least two queries both attend to, the pair is
    *consistent* when no query puts ``j`` strictly above ``j'`` while another puts it strictly
    below. Static attention (GAT) gives 1 exactly: its ranking of keys is the same for every
    query, and rounding cannot reverse an order (floating-point operations are monotone; it
    can only make two keys tie, and a tie reverses nothing).

    A value of 1 is necessary for one order of the keys common to all queries, not
    sufficient: the pairs are checked one at a time, so queries that each see only some of
    the keys can agree on every shared pair and still rank ``a`` above ``b``, ``b`` above
    ``c`` and ``c`` above ``a``, an order no single ranking has.

    Args:
        attention: ``(L_q, L_k)`` weights (or any scores), queries down, keys across.
        mask: ``(L_q, L_k)`` bool, ``True`` where query ``i`` attends to key ``j``.

    Returns:
        the fraction in [0, 1]; ``nan`` if no pair is shared by two queries.
    """
    check_tensor("attention", attention, min_rank=2)
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        got = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise TypeError(f"mask must be a bool tensor (True = query attends to key), got {got}")
    check_same_device(attention=attention, mask=mask)
    if attention.shape != mask.shape or attention.dim() != 2:
        raise ValueError(
            f"attention {tuple(attention.shape)} and mask {tuple(mask.shape)} must be the "
            "same (L_q, L_k) shape"
        )
    a = attention.double()
    diff = a[:, :, None] - a[:, None, :]  # (L_q, L_k, L_k): a_ij - a_ij'
    both = mask[:, :, None] & mask[:, None, :]  # (L_q, L_k, L_k)
    above = ((diff > 0) & both).any(0)  # (L_k, L_k): some query ranks j above j'
    below = ((diff < 0) & both).any(0)
    shared = both.sum(0) >= 2  # pairs seen by two queries or more
    off_diag = ~torch.eye(a.shape[1], dtype=torch.bool, device=a.device)
    pairs = shared & off_diag
    if int(pairs.sum()) == 0:
        return float("nan")
    return float((~(above & below))[pairs].double().mean())


def _lookup_weights(model: LookupModel, batch: LookupBatch, head: int) -> torch.Tensor:
    """One head's weights on a lookup batch: ``(B, k, k)``, query by key, per graph."""
    k = model.k
    with torch.no_grad():
        _, (edges, alpha) = model(batch.x, batch.edge_index, return_attention=True)
    n_graphs = batch.x.shape[0] // (2 * k)
    # the reshape below needs the edges ordered by graph, query, key, as lookup_batch makes
    if not torch.equal(edges, _lookup_edges(k, n_graphs, edges.device)):
        raise ValueError(
            "the attention's edges are not in lookup_batch's order (graph, query, key)"
        )
    if not 0 <= head < alpha.shape[1]:
        raise ValueError(f"head must be in [0, {alpha.shape[1]}), got {head}")
    return alpha[:, head].reshape(n_graphs, k, k)  # (B k k,) -> (B, queries, keys)


def top_key_agreement(model: LookupModel, batch: LookupBatch, head: int = 0) -> float:
    """Fraction of queries whose top key (largest weight in ``head``) is their graph's most common.

    In a lookup graph all ``k`` queries attend over the same ``k`` keys. Static attention
    gives every query the same top key, so the fraction is 1; a query that finds its own key
    has a different top key from the others, and a perfect lookup gives ``1 / k``.

    Ties: ``argmax`` takes the first of equal weights. In float32 a static head can tie two
    keys for some queries and not for others (keys whose ``kappa_j`` differ by less than the
    rounding of ``u_i + kappa_j`` tie for a query with a large ``u_i``), and then scores
    below 1. The fraction is 1 for a static head whose top key is not tied.
    """
    weights = _lookup_weights(model, batch, head)  # (B, k, k)
    top = weights.argmax(-1)  # (B, k): top key of each query
    mode = top.mode(dim=1).values  # (B,)
    return float((top == mode[:, None]).double().mean())


def asked_key_hits(model: LookupModel, batch: LookupBatch, head: int = 0) -> tuple[float, float]:
    """How much one head attends to the key each query asks for.

    Returns ``(hit, weight)``: ``hit`` is the fraction of queries whose top key (largest
    weight in ``head``) is the key with their own id, ``weight`` the mean weight they give
    that key. Uniform attention gives ``weight = 1 / k``; a head that looks up the key gives
    ``hit = 1``. A model can solve the task without any head doing so (for example by
    attending *away* from the asked key and letting the read-out infer the missing value),
    so these measure a mechanism, not the accuracy. A static head whose top key is not tied
    (see :func:`top_key_agreement`) gives ``hit = 1 / k``: one query per graph asks for the
    shared top key.
    """
    weights = _lookup_weights(model, batch, head)  # (B, queries, keys)
    asked = batch.key_of_query  # (B, k): key id (= key node position) each query asks for
    hit = (weights.argmax(-1) == asked).double().mean()
    on_asked = torch.gather(weights, 2, asked[:, :, None])  # (B, k, 1)
    return float(hit), float(on_asked.double().mean())


# ----------------------------------------------------------------------------- the sweep
def lookup_parameter_count(kind: str, k: int, hidden: int, heads: int) -> int:
    """Trainable parameters of ``LookupModel(kind, k, hidden, heads)``, in closed form.

    With ``h = heads``, ``d = hidden`` and input width ``2k + 1``:

    * GAT: ``lin`` ``(2k + 1) h d``; ``att_src``, ``att_dst`` and ``bias`` ``h d`` each; the
      read-out ``h d k + k``. In all ``h d (3k + 4) + k``.
    * GATv2: ``lin_l`` and ``lin_r`` ``(2k + 1) h d + h d`` each (weight and bias); ``att``
      and ``bias`` ``h d`` each; the read-out ``h d k + k``. In all ``h d (5k + 6) + k``.

    GATv2 has about ``5/3`` as many parameters at the same width, for its second projection.
    """
    if kind not in ("gat", "gatv2"):
        raise ValueError(f"kind must be 'gat' or 'gatv2', got {kind!r}")
    for name, value in (("k", k), ("hidden", hidden), ("heads", heads)):
        check_positive_int(name, value)
    per_width = 3 * k + 4 if kind == "gat" else 5 * k + 6  # parameters per unit of h d
    return heads * hidden * per_width + k


def matched_gat_hidden(k: int, heads: int, gatv2_hidden: int) -> int:
    """The GAT head width that matches GATv2's parameter count as closely as an integer can.

    Returns the ``d`` for which ``lookup_parameter_count("gat", k, d, heads)`` is nearest to
    ``lookup_parameter_count("gatv2", k, gatv2_hidden, heads)`` (the smaller ``d`` on a tie).
    Both counts are ``h d c + k`` with ``c = 3k + 4`` for GAT and ``5k + 6`` for GATv2, so the
    exact match ``d = gatv2_hidden (5k + 6) / (3k + 4)`` lies between the two candidates
    ``floor`` and ``floor + 1``, and the returned width leaves the counts at most
    ``h (3k + 4) / 2`` apart: within ``(3k + 4) / (2 gatv2_hidden (5k + 6))`` of GATv2's count
    in relative terms (below 2 % for ``gatv2_hidden = 16``).
    """
    check_positive_int("gatv2_hidden", gatv2_hidden)
    target = lookup_parameter_count("gatv2", k, gatv2_hidden, heads)
    per_width = heads * (3 * k + 4)  # GAT's parameters per unit of head width
    low = (target - k) // per_width  # >= gatv2_hidden, since 3k + 4 < 5k + 6
    return min((low, low + 1),
               key=lambda d: abs(lookup_parameter_count("gat", k, d, heads) - target))


def lookup_run(kind: str, k: int, heads: int, hidden: int, seed: int, steps: int = 400,
               batch: int = 32, lr: float = 0.01, readout_relu: bool = True, *,
               device: str | torch.device | None = None) -> dict:
    """Train one :class:`LookupModel` and measure it, as chapter 8's heads-by-keys sweep does.

    ``torch.manual_seed(seed)`` (the global generator: it draws the initial weights), a
    ``LookupModel(kind, k, hidden, heads, readout_relu)``, then :func:`train_lookup` with
    ``seed`` (the training graphs). Measured on the trained model:
    the accuracy of :func:`lookup_accuracy` (200 new graphs, its fixed seed), the mean loss of
    the last ``min(50, steps)`` steps, and for every head its :func:`top_key_agreement` and
    its asked-key hit rate (:func:`asked_key_hits`) on 100 other new graphs (generator seed
    7). A static head has agreement exactly 1. With ``device`` the model is built on the
    CPU (the same initial weights) and trained and measured there, on graphs drawn on the CPU.

    Returns:
        ``dict`` with ``kind, k, heads, hidden, seed, steps`` as given, ``params`` (the
        model's trainable parameters), ``test_acc``, ``loss_end``, and ``agreement`` and
        ``hit``: lists of ``heads`` floats, one per head.
    """
    check_positive_int("steps", steps)
    torch.manual_seed(seed)
    model = LookupModel(kind, k, hidden=hidden, heads=heads, readout_relu=readout_relu,
                        device=device)
    losses = train_lookup(model, steps=steps, batch=batch, lr=lr, seed=seed)
    probe = lookup_batch(k, 100, torch.Generator().manual_seed(7),
                         device=module_device(model))
    tail = losses[-50:]  # the last min(50, steps) losses
    return {
        "kind": kind, "k": k, "heads": heads, "hidden": hidden, "seed": seed, "steps": steps,
        "params": sum(p.numel() for p in model.parameters()),
        "test_acc": lookup_accuracy(model),
        "loss_end": sum(tail) / len(tail),
        "agreement": [top_key_agreement(model, probe, head=m) for m in range(heads)],
        "hit": [asked_key_hits(model, probe, head=m)[0] for m in range(heads)],
    }


# ----------------------------------------------------------------------------- drawing
def spring_layout(edge_index: torch.Tensor, num_nodes: int, iterations: int = 300,
                  seed: int = 0) -> np.ndarray:
    """Node positions for a drawing: Fruchterman-Reingold forces, written in NumPy.

    Starts from the spectral layout (the Laplacian's eigenvectors 2 and 3, plus a little
    noise drawn with ``seed``), then ``iterations`` steps in which linked nodes attract
    (force ``d^2 / c``) and all pairs repel (``c^2 / d``), with ``c = 1 / sqrt(N)`` and a step
    that cools linearly. Deterministic for a given seed.

    Returns:
        ``(N, 2)`` float64 positions, centred and scaled into [-1, 1].
    """
    n = _check_num_nodes(num_nodes)
    _check_edge_index(edge_index, n, what="num_nodes is")
    check_positive_int("iterations", iterations)
    adj = np.zeros((n, n))
    ei = edge_index.cpu().numpy()
    adj[ei[0], ei[1]] = 1.0
    adj = np.maximum(adj, adj.T)
    np.fill_diagonal(adj, 0.0)
    lap = np.diag(adj.sum(1)) - adj
    _, vecs = np.linalg.eigh(lap)
    rng = np.random.default_rng(seed)
    pos = vecs[:, 1:3] + 0.01 * rng.standard_normal((n, 2))  # (N, 2)
    pos = pos / np.abs(pos).max()
    c = 1.0 / math.sqrt(n)
    temperature = 0.1
    for it in range(iterations):
        delta = pos[:, None, :] - pos[None, :, :]  # (N, N, 2)
        dist = np.sqrt((delta**2).sum(-1)) + 1e-9  # (N, N)
        force = c * c / dist**2 - adj * dist / c  # repulsion minus attraction, per distance
        np.fill_diagonal(force, 0.0)
        disp = (delta * force[:, :, None]).sum(1)  # (N, 2)
        length = np.sqrt((disp**2).sum(1)) + 1e-9
        step = temperature * (1.0 - it / iterations)
        pos = pos + disp / length[:, None] * np.minimum(length, step)[:, None]
    pos = pos - pos.mean(0)
    return pos / np.abs(pos).max()

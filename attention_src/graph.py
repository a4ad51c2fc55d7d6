"""Graph attention: self-attention in which node ``i`` scores only its neighbours (chapter 8).

A graph with ``N`` nodes is given, as in PyTorch Geometric, by node features ``x: (N, d)`` and
an ``edge_index: (2, E)`` of ``int64``: column ``e`` is the edge ``j -> i`` with source
``j = edge_index[0, e]`` and target ``i = edge_index[1, e]``. A message flows from the source
to the target, so in the book's notation the **target** ``i`` is the query and the **source**
``j`` is the key: ``alpha_ij`` is the weight node ``i`` gives to its in-neighbour ``j``, and the
softmax runs over the incoming edges of each target (its neighbourhood ``N(i)``, plus ``i``
itself when self-loops are added). Full self-attention is graph attention on the complete
graph with self-loops.

Two layers, written with plain tensor operations (gather by ``edge_index``, a per-target
softmax with ``scatter_reduce``/``index_add_``) and parameter names equal to PyTorch
Geometric's, so that a ``state_dict`` copies either way:

* :class:`GraphAttention`, GAT (Velickovic et al., 2018), the computation of ``GATConv``;
* :class:`GraphAttentionV2`, GATv2 (Brody et al., 2022), the computation of ``GATv2Conv``.

Helpers: :func:`add_self_loops` (the edge list the layers attend over),
:func:`edge_index_to_adjacency` (the boolean mask ``M`` of the dense view) and
:func:`attention_to_dense` (the weights as ``(h, N, N)`` matrices, for heatmaps and comparisons).
"""

from __future__ import annotations

import math
import numbers

import torch
import torch.nn.functional as F
from torch import nn

from attention_src.utils import place
from attention_src.validation import check_positive_int, check_same_device, check_tensor

__all__ = [
    "GraphAttention",
    "GraphAttentionV2",
    "add_self_loops",
    "attention_to_dense",
    "edge_index_to_adjacency",
    "segment_softmax",
]


# ----------------------------------------------------------------------------- input checks
def _check_num_nodes(num_nodes: object) -> int:
    if isinstance(num_nodes, bool) or not isinstance(num_nodes, int):
        raise TypeError(f"num_nodes must be an int, got {type(num_nodes).__name__}")
    if num_nodes < 0:
        raise ValueError(f"num_nodes must be >= 0, got {num_nodes}")
    return num_nodes


def _check_edge_index(edge_index: object, num_nodes: int, what: str = "x has") -> torch.Tensor:
    """Require an ``int64`` tensor of shape ``(2, E)`` whose entries are node ids in [0, N)."""
    if not isinstance(edge_index, torch.Tensor):
        raise TypeError(f"edge_index must be a torch.Tensor, got {type(edge_index).__name__}")
    if edge_index.dtype != torch.int64:
        raise TypeError(
            f"edge_index must have dtype torch.int64, got {edge_index.dtype}; "
            "convert it with edge_index.long()"
        )
    if edge_index.dim() != 2 or edge_index.shape[0] != 2:
        raise ValueError(
            "edge_index must have shape (2, E) (row 0: sources, row 1: targets), "
            f"got shape {tuple(edge_index.shape)}"
        )
    if edge_index.numel() > 0:
        low, high = int(edge_index.min()), int(edge_index.max())
        if low < 0:
            raise ValueError(f"edge_index holds a negative node id ({low}); node ids start at 0")
        if high >= num_nodes:
            raise ValueError(
                f"edge_index holds node {high}, but {what} {num_nodes} nodes (ids 0..N-1)"
            )
    return edge_index


def _check_bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return value


# ----------------------------------------------------------------------------- helpers
def add_self_loops(edge_index: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """The edge list a layer with ``add_self_loops=True`` attends over, in ``GATConv``'s order.

    Existing self-loops are removed first, then one loop ``i -> i`` per node is appended, so
    every node appears exactly once as its own neighbour and the order of the other edges is
    kept (the layers' returned attention lines up with this list column by column).

    Args:
        edge_index: ``(2, E)`` int64, sources in row 0 and targets in row 1.
        num_nodes: ``N``, the number of nodes.

    Returns:
        ``(2, E' + N)`` int64, where ``E'`` counts the edges of ``edge_index`` that are not
        self-loops; the last ``N`` columns are the loops ``0 -> 0, ..., N-1 -> N-1``.
    """
    num_nodes = _check_num_nodes(num_nodes)
    edge_index = _check_edge_index(edge_index, num_nodes, what="num_nodes gives")
    keep = edge_index[0] != edge_index[1]  # (E,) bool, False on self-loops
    loops = torch.arange(num_nodes, device=edge_index.device).expand(2, num_nodes)  # (2, N)
    return torch.cat([edge_index[:, keep], loops], dim=1)  # (2, E' + N)


def segment_softmax(scores: torch.Tensor, index: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """Softmax of edge scores over the edges that share a target: the graph's row softmax.

    ``alpha_e = exp(s_e - m_i) / sum_{e': index[e'] = i} exp(s_e' - m_i)`` with ``i = index[e]``
    and ``m_i`` the largest score of target ``i``: subtracting it changes nothing mathematically
    and keeps every exponent <= 0, so ``exp`` cannot overflow. The denominator is then at least
    1 (the maximum contributes ``exp(0)``), so no division by zero either.

    Args:
        scores: ``(E, ...)`` floating point, one score (per head) per edge.
        index: ``(E,)`` int64, the target node of each edge, in [0, num_nodes).
        num_nodes: ``N``; targets without edges simply get no weights.

    Returns:
        ``(E, ...)``: non-negative weights that sum to 1 over the edges of each target.
    """
    check_tensor("scores", scores, min_rank=1)
    num_nodes = _check_num_nodes(num_nodes)
    if not isinstance(index, torch.Tensor) or index.dtype != torch.int64 or index.dim() != 1:
        raise TypeError("index must be a 1-D torch.int64 tensor (the target of each edge)")
    if index.shape[0] != scores.shape[0]:
        raise ValueError(
            f"index has {index.shape[0]} entries but scores has {scores.shape[0]} edges"
        )
    if index.numel() > 0 and (int(index.min()) < 0 or int(index.max()) >= num_nodes):
        raise ValueError(f"index holds node ids outside [0, {num_nodes})")
    trailing = scores.shape[1:]
    idx = index.view(-1, *([1] * len(trailing))).expand_as(scores)  # (E,) -> (E, ...)
    # Per-target maximum; the gradient of a softmax does not depend on the shift, so it is
    # treated as a constant (as PyTorch Geometric does).
    m = scores.new_full((num_nodes, *trailing), -math.inf)  # (N, ...)
    m = m.scatter_reduce(0, idx, scores.detach(), reduce="amax", include_self=True)
    exp = (scores - m[index]).exp()  # (E, ...), every exponent <= 0
    total = scores.new_zeros((num_nodes, *trailing)).index_add_(0, index, exp)  # (N, ...)
    return exp / total[index]  # (E, ...)


def edge_index_to_adjacency(
    edge_index: torch.Tensor, num_nodes: int, add_self_loops: bool = False
) -> torch.Tensor:
    """The dense boolean adjacency in the book's attention layout: row = target, column = source.

    ``adjacency[i, j]`` is ``True`` when the graph has the edge ``j -> i``, i.e. when query
    ``i`` may attend to key ``j``: the mask ``M`` of :func:`attention_src.masked_softmax`, with
    which dense attention over ``(N, N)`` scores equals graph attention.

    Args:
        edge_index: ``(2, E)`` int64, sources in row 0 and targets in row 1.
        num_nodes: ``N``.
        add_self_loops: also set the diagonal (every node attends to itself).

    Returns:
        ``(N, N)`` bool.
    """
    num_nodes = _check_num_nodes(num_nodes)
    edge_index = _check_edge_index(edge_index, num_nodes, what="num_nodes gives")
    _check_bool("add_self_loops", add_self_loops)
    adjacency = torch.zeros(num_nodes, num_nodes, dtype=torch.bool, device=edge_index.device)
    adjacency[edge_index[1], edge_index[0]] = True  # row = target i, column = source j
    if add_self_loops:
        adjacency.fill_diagonal_(True)
    return adjacency


def attention_to_dense(
    edge_index: torch.Tensor, alpha: torch.Tensor, num_nodes: int
) -> torch.Tensor:
    """Edge attention as dense matrices ``A``: ``A[k, i, j]`` is head ``k``'s weight of ``j -> i``.

    Pairs without an edge get 0, so each row ``i`` of ``A[k]`` sums to 1 when node ``i`` has
    incoming edges (and to 0 when it has none). Duplicate edges add up: ``A[k, i, j]`` is the
    total weight ``i`` gives to ``j``.

    Args:
        edge_index: ``(2, E)`` int64, the edges ``alpha`` belongs to (for a layer, the edge list
            it returns, with self-loops).
        alpha: ``(E, h)`` weights per edge and head, or ``(E,)`` for one head.
        num_nodes: ``N``.

    Returns:
        ``(h, N, N)`` for ``alpha`` of shape ``(E, h)``; ``(N, N)`` for ``alpha`` of shape ``(E,)``.
    """
    num_nodes = _check_num_nodes(num_nodes)
    edge_index = _check_edge_index(edge_index, num_nodes, what="num_nodes gives")
    check_tensor("alpha", alpha, min_rank=1)
    if alpha.dim() > 2 or alpha.shape[0] != edge_index.shape[1]:
        raise ValueError(
            f"alpha must have shape (E,) or (E, h) with E = {edge_index.shape[1]} edges, "
            f"got shape {tuple(alpha.shape)}"
        )
    one_head = alpha.dim() == 1
    per_head = alpha.unsqueeze(1) if one_head else alpha  # (E, h)
    heads = per_head.shape[1]
    dense = per_head.new_zeros(heads, num_nodes, num_nodes)  # (h, N, N)
    head_ids = torch.arange(heads, device=alpha.device).expand(edge_index.shape[1], heads)
    targets = edge_index[1].unsqueeze(1).expand(-1, heads)  # (E, h)
    sources = edge_index[0].unsqueeze(1).expand(-1, heads)  # (E, h)
    dense = dense.index_put((head_ids, targets, sources), per_head, accumulate=True)
    return dense[0] if one_head else dense


# ----------------------------------------------------------------------------- layers
class _GraphAttentionBase(nn.Module):
    """What GAT and GATv2 share: the checks, the edge list, the softmax and the aggregation.

    A subclass defines ``_project(x) -> (sources, targets)``, each ``(N, h, d_v)`` (the values
    are the source projections), and ``_scores(sources, targets, src, dst) -> (E, h)``.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        heads: int,
        concat: bool,
        negative_slope: float,
        dropout: float,
        add_self_loops: bool,
        bias: bool,
    ) -> None:  # no defaults: the subclasses own them and pass every argument
        super().__init__()
        self.in_features = check_positive_int("in_features", in_features)
        self.out_features = check_positive_int("out_features", out_features)
        self.heads = check_positive_int("heads", heads)
        self.concat = _check_bool("concat", concat)
        self.add_self_loops = _check_bool("add_self_loops", add_self_loops)
        _check_bool("bias", bias)
        if isinstance(negative_slope, bool) or not isinstance(negative_slope, numbers.Real):
            raise TypeError(
                f"negative_slope must be a real number, got {type(negative_slope).__name__}"
            )
        if not math.isfinite(negative_slope):
            raise ValueError(f"negative_slope must be finite, got {negative_slope}")
        self.negative_slope = float(negative_slope)
        if isinstance(dropout, bool) or not isinstance(dropout, numbers.Real):
            raise TypeError(f"dropout must be a real number, got {type(dropout).__name__}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.dropout = float(dropout)
        self.out_width = out_features * (heads if concat else 1)

    def _init_bias(self, bias: bool) -> None:
        if bias:
            self.bias = nn.Parameter(torch.zeros(self.out_width))  # zeros, as in PyG
        else:
            self.register_parameter("bias", None)

    def _project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError  # pragma: no cover

    def _scores(self, sources, targets, src, dst) -> torch.Tensor:
        raise NotImplementedError  # pragma: no cover

    def forward(
        self, x: torch.Tensor, edge_index: torch.Tensor, return_attention: bool = False
    ):
        """Attend over the graph.

        Args:
            x: ``(N, in_features)`` floating point, of the layer's dtype.
            edge_index: ``(2, E)`` int64, edge ``e`` is ``edge_index[0, e] -> edge_index[1, e]``
                (source ``j`` -> target ``i``).
            return_attention: also return the edges attended over and their weights.

        Returns:
            ``out``: ``(N, heads * out_features)`` if ``concat`` else ``(N, out_features)``
            (the mean over heads). With ``return_attention=True``, ``(out, (edges, alpha))``:
            ``edges: (2, E')`` the edge list used (with self-loops, see :func:`add_self_loops`,
            when ``add_self_loops``) and ``alpha: (E', heads)`` the weight of each edge, after
            dropout in training mode (the weights actually used, as ``GATConv`` returns them).
        """
        check_tensor("x", x, min_rank=2)
        if x.dim() != 2:
            raise ValueError(f"x must have shape (N, in_features), got shape {tuple(x.shape)}")
        if x.shape[1] != self.in_features:
            raise ValueError(
                f"x has {x.shape[1]} features, the layer expects {self.in_features}"
            )
        check_same_device(x=x, edge_index=edge_index)
        device = next(self.parameters()).device
        if x.device != device:
            raise ValueError(
                f"x is on {x.device} but the layer's parameters are on {device}; move one of "
                f"them, e.g. layer.to('{x.device}')"
            )
        dtype = next(self.parameters()).dtype
        if x.dtype != dtype:
            raise TypeError(
                f"x has dtype {x.dtype} but the layer's parameters are {dtype}; "
                f"convert one of them, e.g. layer.to({x.dtype})"
            )
        _check_bool("return_attention", return_attention)
        n = x.shape[0]
        edge_index = _check_edge_index(edge_index, n)
        if self.add_self_loops:
            edge_index = add_self_loops(edge_index, n)  # (2, E')
        src, dst = edge_index[0], edge_index[1]  # (E',) sources j, targets i

        sources, targets = self._project(x)  # (N, h, d_v) each
        scores = self._scores(sources, targets, src, dst)  # (E', h): s_ij per edge and head
        alpha = segment_softmax(scores, dst, n)  # (E', h), sums to 1 over each target's edges
        alpha = F.dropout(alpha, p=self.dropout, training=self.training)

        messages = alpha.unsqueeze(-1) * sources[src]  # (E', h, 1) * (E', h, d_v)
        out = x.new_zeros(n, self.heads, self.out_features)  # (N, h, d_v)
        out = out.index_add_(0, dst, messages)  # o_i = sum_j alpha_ij z_j
        if self.concat:
            out = out.reshape(n, self.heads * self.out_features)  # (N, h, d_v) -> (N, h d_v)
        else:
            out = out.mean(dim=1)  # (N, h, d_v) -> (N, d_v)
        if self.bias is not None:
            out = out + self.bias
        if return_attention:
            return out, (edge_index, alpha)
        return out

    def extra_repr(self) -> str:
        return (
            f"{self.in_features}, {self.out_features}, heads={self.heads}, "
            f"concat={self.concat}, negative_slope={self.negative_slope}, "
            f"dropout={self.dropout}, add_self_loops={self.add_self_loops}, "
            f"bias={self.bias is not None}"
        )


class GraphAttention(_GraphAttentionBase):
    r"""GAT, the graph attention layer of Velickovic et al. (2018), computed as ``GATConv``.

    With row vectors, per head: ``z_j = x_j W`` (``W`` in ``R^{d x d_v}``, ``d_v = out_features``),

    .. math::

        s_{ij} = \operatorname{LeakyReLU}\big(z_i a_{\mathrm{dst}}^\top
                 + z_j a_{\mathrm{src}}^\top\big),
        \qquad \alpha_{ij} = \frac{\exp s_{ij}}{\sum_{j' \in \mathcal{N}(i)} \exp s_{ij'}},
        \qquad o_i = \sum_{j \in \mathcal{N}(i)} \alpha_{ij} z_j,

    where ``N(i)`` are the sources of the edges into ``i`` (plus ``i`` itself when
    ``add_self_loops``), ``i`` is the query and ``j`` the key. The paper writes the score as
    ``LeakyReLU(a^T [W h_i || W h_j])``: splitting ``a`` into its halves gives the two terms above.
    The ``h`` heads are concatenated (``concat=True``) or averaged, then ``bias`` is added.
    Because the target's term only shifts all of ``i``'s scores by the same amount and
    LeakyReLU is non-decreasing for ``negative_slope >= 0``, the neighbour with the largest
    ``z_j a_src`` scores highest for every target that sees it: GAT's attention is *static* in
    the sense of Brody et al. (2022), who ask only for a common highest-scoring key. For
    ``negative_slope > 0`` LeakyReLU is strictly increasing and more holds: every target
    ranks its neighbours in the one strict order of ``z_j a_src`` (at 0, keys below the kink
    tie). A negative slope makes LeakyReLU non-monotone and the ranking can then depend on
    the target.

    Parameters, named as in ``GATConv`` (a ``state_dict`` loads either way):
    ``lin`` (``nn.Linear(in_features, heads * out_features, bias=False)``, its ``.weight`` is
    ``W^T`` for all heads stacked), ``att_src`` and ``att_dst`` ``(1, heads, out_features)``,
    ``bias`` ``(heads * out_features,)`` if ``concat`` else ``(out_features,)``, or ``None``.
    Initialised like ``GATConv``: Glorot-uniform weights and attention vectors, zero bias.

    Args:
        in_features: ``d``, the width of the node features.
        out_features: ``d_v``, the width of each head's output.
        heads: ``h``, the number of heads.
        concat: concatenate the heads (``True``) or average them.
        negative_slope: LeakyReLU's slope for negative inputs.
        dropout: probability of zeroing each attention weight, in training mode only (kept
            weights are scaled by ``1 / (1 - dropout)``, as ``F.dropout`` does).
        add_self_loops: remove any self-loops of the graph and add one per node.
        bias: learn an additive output bias.
        device, dtype: keywords; where the layer goes and its floating dtype, applied after
            the weights are drawn on the CPU (:func:`attention_src.utils.place`): a seed gives
            the same weights on every device. ``x`` and ``edge_index`` must be on the layer's
            device.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        heads: int = 1,
        concat: bool = True,
        negative_slope: float = 0.2,
        dropout: float = 0.0,
        add_self_loops: bool = True,
        bias: bool = True,
        *,
        device: str | torch.device | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(in_features, out_features, heads, concat, negative_slope, dropout,
                         add_self_loops, bias)
        self.lin = nn.Linear(in_features, heads * out_features, bias=False)
        self.att_src = nn.Parameter(torch.empty(1, heads, out_features))
        self.att_dst = nn.Parameter(torch.empty(1, heads, out_features))
        self._init_bias(bias)
        self.reset_parameters()
        place(self, device, dtype)

    def reset_parameters(self) -> None:
        """Glorot-uniform ``lin``, ``att_src``, ``att_dst`` (PyG's ``glorot``); zero ``bias``."""
        nn.init.xavier_uniform_(self.lin.weight)
        for att in (self.att_src, self.att_dst):  # PyG's glorot: fans = the last two sizes
            bound = math.sqrt(6.0 / (att.shape[-2] + att.shape[-1]))
            nn.init.uniform_(att, -bound, bound)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def _project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z = self.lin(x).view(-1, self.heads, self.out_features)  # (N, h d_v) -> (N, h, d_v)
        return z, z  # one projection for sources and targets

    def _scores(self, sources, targets, src, dst) -> torch.Tensor:
        score_src = (sources * self.att_src).sum(dim=-1)  # (N, h): z_j a_src per node
        score_dst = (targets * self.att_dst).sum(dim=-1)  # (N, h): z_i a_dst per node
        scores = score_src[src] + score_dst[dst]  # (E', h)
        return F.leaky_relu(scores, self.negative_slope)


class GraphAttentionV2(_GraphAttentionBase):
    r"""GATv2 (Brody et al., 2022), computed as ``GATv2Conv``: the nonlinearity moved inside.

    With row vectors, per head: ``z_j = x_j W_l + b_l`` (source / key and value) and
    ``r_i = x_i W_r + b_r`` (target / query),

    .. math::

        s_{ij} = \operatorname{LeakyReLU}\big(r_i + z_j\big)\, a^\top,
        \qquad \alpha_{ij} = \frac{\exp s_{ij}}{\sum_{j' \in \mathcal{N}(i)} \exp s_{ij'}},
        \qquad o_i = \sum_{j \in \mathcal{N}(i)} \alpha_{ij} z_j.

    The score is chapter 2's additive score with LeakyReLU for tanh: the query enters before
    the nonlinearity, so different targets can rank the same neighbours differently, which
    GAT cannot. Brody et al. (2022, theorem 2) show more: GATv2 can compute *dynamic*
    attention, that is, for any choice of one key per query some setting of the weights puts
    each query's chosen key strictly first.

    Parameters, named as in ``GATv2Conv`` (``share_weights=False``): ``lin_l`` (source) and
    ``lin_r`` (target), each ``nn.Linear(in_features, heads * out_features)`` with a bias when
    ``bias`` (PyG ties both to the one ``bias`` flag), ``att`` ``(1, heads, out_features)`` and
    ``bias`` ``(heads * out_features,)`` if ``concat`` else ``(out_features,)``, or ``None``.
    Initialised like ``GATv2Conv``: Glorot-uniform weights and ``att``, linear biases uniform
    in ``±1/sqrt(in_features)``, zero output bias. Arguments as :class:`GraphAttention`.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        heads: int = 1,
        concat: bool = True,
        negative_slope: float = 0.2,
        dropout: float = 0.0,
        add_self_loops: bool = True,
        bias: bool = True,
        *,
        device: str | torch.device | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(in_features, out_features, heads, concat, negative_slope, dropout,
                         add_self_loops, bias)
        self.lin_l = nn.Linear(in_features, heads * out_features, bias=bias)
        self.lin_r = nn.Linear(in_features, heads * out_features, bias=bias)
        self.att = nn.Parameter(torch.empty(1, heads, out_features))
        self._init_bias(bias)
        self.reset_parameters()
        place(self, device, dtype)

    def reset_parameters(self) -> None:
        """Glorot-uniform weights and ``att``, PyG's uniform linear biases, zero ``bias``."""
        for lin in (self.lin_l, self.lin_r):
            nn.init.xavier_uniform_(lin.weight)
            if lin.bias is not None:
                bound = 1.0 / math.sqrt(self.in_features)
                nn.init.uniform_(lin.bias, -bound, bound)
        bound = math.sqrt(6.0 / (self.att.shape[-2] + self.att.shape[-1]))
        nn.init.uniform_(self.att, -bound, bound)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def _project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        sources = self.lin_l(x).view(-1, self.heads, self.out_features)  # (N, h d_v) -> (N, h, d_v)
        targets = self.lin_r(x).view(-1, self.heads, self.out_features)  # (N, h d_v) -> (N, h, d_v)
        return sources, targets

    def _scores(self, sources, targets, src, dst) -> torch.Tensor:
        hidden = F.leaky_relu(targets[dst] + sources[src], self.negative_slope)  # (E', h, d_v)
        return (hidden * self.att).sum(dim=-1)  # (E', h)

"""GraphAttention, GraphAttentionV2 and the graph helpers (attention_src.graph).

Peers: PyTorch Geometric's ``GATConv`` and ``GATv2Conv`` (2.8.1) with copied weights — the
``state_dict`` keys are the same, so ``load_state_dict`` copies them. Independent references
for the properties: :func:`attention_src.masked_softmax` over dense ``(N, N)`` scores computed
from the parameters by hand.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from attention_src.graph import (
    GraphAttention,
    GraphAttentionV2,
    add_self_loops,
    attention_to_dense,
    edge_index_to_adjacency,
    segment_softmax,
)
from attention_src.softmax import masked_softmax
from tests.conftest import PROPERTY, TOL, randn, seeds

with warnings.catch_warnings():  # PyG's import: torch.jit.script deprecation notices
    warnings.simplefilter("ignore", DeprecationWarning)
    from torch_geometric.nn import GATConv, GATv2Conv

F64 = TOL[torch.float64]
N, D, C = 8, 5, 4  # nodes, in_features, out_features
PAIRS = {"gat": (GraphAttention, GATConv), "gatv2": (GraphAttentionV2, GATv2Conv)}


# ----------------------------------------------------------------------------- graphs
def _edges(pairs: list[tuple[int, int]]) -> torch.Tensor:
    """``[(j, i), ...]`` (source, target) -> ``(2, E)`` int64."""
    return torch.tensor(pairs, dtype=torch.int64).reshape(-1, 2).T.contiguous()


def _graph(kind: str) -> torch.Tensor:
    """Directed test graphs on ``N = 8`` nodes, edges source -> target."""
    g = torch.Generator().manual_seed(1)
    if kind == "random":  # directed, no self-loops, no duplicates
        adjacency = torch.rand(N, N, generator=g) < 0.35
        adjacency.fill_diagonal_(False)
        i, j = adjacency.nonzero(as_tuple=True)
        perm = torch.randperm(i.numel(), generator=g)
        return torch.stack([j, i])[:, perm]
    if kind == "with_loops":  # random edges plus self-loops on some nodes, in the middle
        base = _graph("random")
        loops = _edges([(2, 2), (5, 5), (0, 0)])
        return torch.cat([base[:, :4], loops, base[:, 4:]], dim=1)
    if kind == "isolated":  # nodes 6 and 7 are in no edge at all
        return _edges([(0, 1), (1, 2), (2, 0), (3, 4), (4, 5), (5, 3), (0, 5), (3, 1)])
    if kind == "no_incoming":  # nodes 4..7 only send: without loops they receive nothing
        return _edges([(4, 0), (5, 0), (6, 1), (7, 2), (0, 3), (1, 3), (2, 3), (5, 1)])
    if kind == "duplicates":  # the edge 1 -> 0 three times, 2 -> 3 twice
        return _edges([(1, 0), (2, 0), (1, 0), (2, 3), (4, 3), (1, 0), (2, 3), (6, 7), (7, 6)])
    if kind == "empty":
        return torch.zeros(2, 0, dtype=torch.int64)
    raise AssertionError(kind)  # pragma: no cover


KINDS = ["random", "with_loops", "isolated", "no_incoming", "duplicates", "empty"]


def _layer(name: str, seed: int = 0, dtype=torch.float64, **kwargs):
    """Our layer with a random non-zero bias (a wrong bias copy must be visible)."""
    torch.manual_seed(seed)
    layer = PAIRS[name][0](D, C, **kwargs).to(dtype)
    with torch.no_grad():
        if layer.bias is not None:
            layer.bias.normal_()
    return layer


def _peer(layer, name: str):
    """The PyTorch Geometric layer with ``layer``'s weights, dtype and mode."""
    ref = PAIRS[name][1](
        D, C, heads=layer.heads, concat=layer.concat, negative_slope=layer.negative_slope,
        dropout=layer.dropout, add_self_loops=layer.add_self_loops,
        bias=layer.bias is not None,
    ).to(layer.lin_l.weight.dtype if name == "gatv2" else layer.lin.weight.dtype)
    ref.load_state_dict(layer.state_dict())  # strict: every key matches
    return ref.train(layer.training)


@st.composite
def graphs(draw, max_nodes: int = 7):
    """``(x, edge_index)``: a random directed graph without duplicate edges, in random order."""
    n = draw(st.integers(1, max_nodes))
    seed = draw(seeds)
    g = torch.Generator().manual_seed(seed)
    adjacency = torch.rand(n, n, generator=g) < draw(st.sampled_from([0.2, 0.5, 1.0]))
    i, j = adjacency.nonzero(as_tuple=True)
    perm = torch.randperm(i.numel(), generator=g)
    return randn(seed + 1, n, D), torch.stack([j, i])[:, perm]


# ----------------------------------------------------------------------------- parity
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("loops", [True, False])
@pytest.mark.parametrize("slope", [0.2, 0.0, 0.5])
@pytest.mark.parametrize("concat", [True, False])
@pytest.mark.parametrize("heads", [1, 3])
@pytest.mark.parametrize("name", ["gat", "gatv2"])
def test_equal_to_pyg(name, heads, concat, slope, loops, kind, dtype):
    layer = _layer(name, dtype=dtype, heads=heads, concat=concat, negative_slope=slope,
                   add_self_loops=loops)
    ref = _peer(layer, name)
    x, edge_index = randn(3, N, D, dtype=dtype), _graph(kind)
    out, (edges, alpha) = layer(x, edge_index, return_attention=True)
    ref_out, (ref_edges, ref_alpha) = ref(x, edge_index, return_attention_weights=True)
    tol = TOL[dtype]
    assert out.shape == (N, heads * C if concat else C) and out.dtype == dtype
    torch.testing.assert_close(out, ref_out, **tol)
    assert torch.equal(edges, ref_edges)  # same edges in the same order ...
    assert alpha.shape == (edges.shape[1], heads)
    if edges.shape[1] > 0:  # ... so the weights compare edge by edge
        torch.testing.assert_close(alpha, ref_alpha, **tol)
    # without the return flag: the same output
    torch.testing.assert_close(layer(x, edge_index), out, atol=0.0, rtol=0.0)


@pytest.mark.parametrize("name", ["gat", "gatv2"])
def test_targets_without_incoming_edges_get_bias_only(name):
    layer = _layer(name, heads=2, add_self_loops=False)
    x = randn(0, N, D)
    out = layer(x, _graph("no_incoming"))
    torch.testing.assert_close(out[4:], layer.bias.expand(4, -1), atol=0.0, rtol=0.0)
    assert (out[:4] - layer.bias).abs().min() > 0  # nodes 0..3 do receive messages
    torch.testing.assert_close(out, _peer(layer, name)(x, _graph("no_incoming")), **F64)


@pytest.mark.parametrize("name", ["gat", "gatv2"])
def test_no_bias_and_state_dict_both_ways(name):
    layer = _layer(name, heads=2, bias=False)
    assert layer.bias is None
    ref = PAIRS[name][1](D, C, heads=2, bias=False).double()
    layer.load_state_dict(ref.state_dict())  # PyG -> ours, strict
    x, edge_index = randn(4, N, D), _graph("random")
    torch.testing.assert_close(layer(x, edge_index), ref(x, edge_index), **F64)
    assert sorted(layer.state_dict()) == sorted(ref.state_dict())
    for key, value in ref.state_dict().items():
        assert layer.state_dict()[key].shape == value.shape, key


@pytest.mark.parametrize("concat", [True, False])
@pytest.mark.parametrize("name", ["gat", "gatv2"])
def test_parameter_names_and_shapes(name, concat):
    layer = PAIRS[name][0](D, C, heads=3, concat=concat)
    shapes = {k: tuple(v.shape) for k, v in layer.named_parameters()}
    bias = (3 * C,) if concat else (C,)
    if name == "gat":
        assert shapes == {"lin.weight": (3 * C, D), "att_src": (1, 3, C),
                          "att_dst": (1, 3, C), "bias": bias}
    else:
        assert shapes == {"lin_l.weight": (3 * C, D), "lin_l.bias": (3 * C,),
                          "lin_r.weight": (3 * C, D), "lin_r.bias": (3 * C,),
                          "att": (1, 3, C), "bias": bias}


@pytest.mark.parametrize("name", ["gat", "gatv2"])
def test_initialisation_equals_pyg(name):
    """Same seed, same draws: the init is PyG's (Glorot weights, PyG's linear biases, zeros)."""
    layer = PAIRS[name][0](D, C, heads=3)
    ref = PAIRS[name][1](D, C, heads=3)
    torch.manual_seed(7)
    layer.reset_parameters()
    torch.manual_seed(7)
    ref.reset_parameters()
    for key, value in ref.state_dict().items():
        torch.testing.assert_close(layer.state_dict()[key], value, atol=0.0, rtol=0.0)
    assert torch.all(layer.bias == 0)
    bound = math.sqrt(6.0 / (3 * C + D))  # Glorot-uniform bound of the (3C, D) weight
    weight = layer.lin.weight if name == "gat" else layer.lin_l.weight
    assert weight.abs().max() <= bound and weight.std() > bound / 4


@pytest.mark.parametrize("name", ["gat", "gatv2"])
def test_gradients_equal_to_pyg(name):
    layer = _layer(name, heads=3, concat=False)
    ref = _peer(layer, name)
    x, edge_index = randn(5, N, D), _graph("with_loops")
    weights = randn(6, N, C)
    (layer(x, edge_index) * weights).sum().backward()
    (ref(x, edge_index) * weights).sum().backward()
    ref_grads = dict(ref.named_parameters())
    for key, p in layer.named_parameters():
        torch.testing.assert_close(p.grad, ref_grads[key].grad, **F64)


@pytest.mark.parametrize("name", ["gat", "gatv2"])
def test_large_scores_do_not_overflow(name):
    """Scores of order 1e4 overflow exp() without the per-target max subtraction."""
    layer = _layer(name, dtype=torch.float32, heads=2)
    with torch.no_grad():
        (layer.att_src if name == "gat" else layer.att).mul_(1e4)
    ref = _peer(layer, name)
    x, edge_index = randn(8, N, D, dtype=torch.float32), _graph("random")
    out, (edges, alpha) = layer(x, edge_index, return_attention=True)
    ref_out, (_, ref_alpha) = ref(x, edge_index, return_attention_weights=True)
    assert torch.isfinite(out).all() and torch.isfinite(alpha).all()
    assert alpha.max() > 0.999  # the scores are so spread that softmax is nearly one-hot
    torch.testing.assert_close(alpha, ref_alpha, **TOL[torch.float32])
    torch.testing.assert_close(out, ref_out, **TOL[torch.float32])


# ----------------------------------------------------------------------------- dropout
@pytest.mark.parametrize("name", ["gat", "gatv2"])
def test_dropout_has_no_effect_in_eval_mode(name):
    layer = _layer(name, heads=2, dropout=0.6).eval()
    plain = _layer(name, heads=2, dropout=0.0)
    plain.load_state_dict(layer.state_dict())
    x, edge_index = randn(9, N, D), _graph("random")
    torch.testing.assert_close(layer(x, edge_index), plain(x, edge_index), atol=0.0, rtol=0.0)


@pytest.mark.parametrize("name", ["gat", "gatv2"])
def test_dropout_in_training_mode_equals_pyg_draw_for_draw(name):
    """GATConv applies ``F.dropout`` to alpha after the softmax; so do we, on the same tensor
    shape, so the same seed gives the same mask and the same outputs."""
    layer = _layer(name, heads=3, dropout=0.4).train()
    ref = _peer(layer, name)
    x, edge_index = randn(10, N, D), _graph("random")
    for seed in range(3):
        torch.manual_seed(seed)
        out, (_, alpha) = layer(x, edge_index, return_attention=True)
        torch.manual_seed(seed)
        ref_out, (_, ref_alpha) = ref(x, edge_index, return_attention_weights=True)
        torch.testing.assert_close(alpha, ref_alpha, **F64)
        torch.testing.assert_close(out, ref_out, **F64)


@pytest.mark.parametrize("p", [0.2, 0.5])
def test_dropout_rate_and_scaling(p):
    """Each weight is zeroed with probability p, the kept ones are scaled by 1 / (1 - p).

    The zero count over R draws of E' weights is Binomial(R E', p); the bound is 5 standard
    errors (a false alarm has probability below 1e-6)."""
    layer = _layer("gat", heads=2, dropout=p)
    x, edge_index = randn(11, N, D), _graph("random")
    layer.eval()
    _, (_, clean) = layer(x, edge_index, return_attention=True)
    layer.train()
    torch.manual_seed(0)
    draws = torch.stack([layer(x, edge_index, return_attention=True)[1][1] for _ in range(200)])
    dropped = draws == 0
    rate = dropped.double().mean().item()
    se = math.sqrt(p * (1 - p) / dropped.numel())
    assert abs(rate - p) < 5 * se, (rate, p, se)
    scaled = (clean / (1 - p)).expand_as(draws)
    torch.testing.assert_close(draws[~dropped], scaled[~dropped], **F64)
    # so the expected weights are the clean ones: mean over draws within 5 SE per entry
    se_mean = clean * math.sqrt(p / (1 - p)) / math.sqrt(draws.shape[0])
    assert ((draws.mean(0) - clean).abs() <= 5 * se_mean + 1e-12).all()


# ----------------------------------------------------------------------------- properties
def _dense_scores(layer, x: torch.Tensor) -> torch.Tensor:
    """``(h, N, N)`` scores ``s_ij`` of every (target i, source j) pair, computed by hand."""
    h, c = layer.heads, layer.out_features
    slope = layer.negative_slope
    if isinstance(layer, GraphAttentionV2):
        z = (x @ layer.lin_l.weight.T + layer.lin_l.bias).view(-1, h, c).transpose(0, 1)
        r = (x @ layer.lin_r.weight.T + layer.lin_r.bias).view(-1, h, c).transpose(0, 1)
        pair = r[:, :, None, :] + z[:, None, :, :]  # (h, N_i, N_j, c): r_i + z_j
        hidden = torch.nn.functional.leaky_relu(pair, slope)
        return torch.einsum("hijc,hc->hij", hidden, layer.att[0])  # (h, N, N)
    z = (x @ layer.lin.weight.T).view(-1, h, c).transpose(0, 1)  # (h, N, c)
    dst = torch.einsum("hnc,hc->hn", z, layer.att_dst[0])  # (h, N): z_i a_dst
    src = torch.einsum("hnc,hc->hn", z, layer.att_src[0])  # (h, N): z_j a_src
    return torch.nn.functional.leaky_relu(dst[:, :, None] + src[:, None, :], slope)


def _dense_values(layer, x: torch.Tensor) -> torch.Tensor:
    h, c = layer.heads, layer.out_features
    if isinstance(layer, GraphAttentionV2):
        return layer.lin_l(x).view(-1, h, c).transpose(0, 1)  # (h, N, c)
    return layer.lin(x).view(-1, h, c).transpose(0, 1)  # (h, N, c)


@PROPERTY
@given(graphs(), st.sampled_from(["gat", "gatv2"]), st.integers(1, 3), st.booleans())
def test_weights_sum_to_one_over_incoming_edges(graph, name, heads, loops):
    x, edge_index = graph
    layer = _layer(name, heads=heads, add_self_loops=loops)
    _, (edges, alpha) = layer(x, edge_index, return_attention=True)
    n = x.shape[0]
    assert (alpha >= 0).all()
    totals = torch.zeros(n, heads, dtype=alpha.dtype).index_add_(0, edges[1], alpha)
    has_incoming = torch.zeros(n, dtype=torch.bool)
    has_incoming[edges[1]] = True
    if loops:
        assert has_incoming.all()  # every node attends at least to itself
        assert torch.equal(edges[:, -n:], torch.arange(n).expand(2, n))
        assert (edges[0, :-n] != edges[1, :-n]).all()  # the graph's own loops were removed
    torch.testing.assert_close(totals[has_incoming], torch.ones_like(totals[has_incoming]),
                               **F64)
    assert (totals[~has_incoming] == 0).all()


@PROPERTY
@given(graphs(), st.sampled_from(["gat", "gatv2"]), st.booleans(), seeds)
def test_permutation_equivariance(graph, name, loops, seed):
    """Relabel the nodes: the outputs are relabelled the same way, nothing else changes."""
    x, edge_index = graph
    n = x.shape[0]
    layer = _layer(name, heads=2, add_self_loops=loops)
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))  # new -> old
    inverse = torch.empty_like(perm)
    inverse[perm] = torch.arange(n)  # old -> new
    out = layer(x, edge_index)
    torch.testing.assert_close(layer(x[perm], inverse[edge_index]), out[perm], **F64)


@PROPERTY
@given(graphs(), st.sampled_from(["gat", "gatv2"]), st.integers(1, 3),
       st.sampled_from([0.2, 0.0, 0.5]))
def test_equal_to_dense_masked_softmax(graph, name, heads, slope):
    """Graph attention = dense attention over (N, N) scores with the adjacency as the mask.
    With probability 1.0 in ``graphs`` the graph is complete: full self-attention."""
    x, edge_index = graph
    n = x.shape[0]
    layer = _layer(name, heads=heads, negative_slope=slope, concat=False)
    out, (edges, alpha) = layer(x, edge_index, return_attention=True)
    mask = edge_index_to_adjacency(edge_index, n, add_self_loops=True)  # (N, N)
    weights = masked_softmax(_dense_scores(layer, x), mask)  # (h, N, N)
    torch.testing.assert_close(attention_to_dense(edges, alpha, n), weights, **F64)
    dense_out = (weights @ _dense_values(layer, x)).mean(0) + layer.bias  # (N, c)
    torch.testing.assert_close(out, dense_out, **F64)


@PROPERTY
@given(st.integers(2, 7), seeds, st.sampled_from([0.2, 0.01, 0.5]))
def test_gat_attention_is_static(n, seed, slope):
    """GAT, one head: on the complete graph every target ranks the nodes in the same order
    (by z_j a_src, since z_i a_dst shifts a whole row and LeakyReLU is increasing)."""
    layer = _layer("gat", seed=seed % 1000, heads=1, negative_slope=slope)
    x = randn(seed, n, D)
    everything = torch.ones(n, n, dtype=torch.bool).nonzero().T  # (2, N^2), loops included
    _, (edges, alpha) = layer(x, everything, return_attention=True)
    weights = attention_to_dense(edges, alpha, n)[0]  # (N, N), row = target
    key_score = (layer.lin(x) * layer.att_src[0]).sum(-1)  # (N,)
    order = key_score.argsort()
    for i in range(n):  # every row is increasing along the same key order
        assert (weights[i, order].diff() >= 0).all()
    assert torch.equal(weights.argmax(1), torch.full((n,), int(key_score.argmax())))


def test_gatv2_attention_is_dynamic():
    """A GATv2 counterexample: s_ij = a LeakyReLU(r_i + z_j) with z = r = x (1, -1), a = (1, 1)
    gives s_ij = 0.8 |x_i + x_j|: node x = 1 prefers x = 1, node x = -1 prefers x = -1."""
    layer = GraphAttentionV2(1, 2, negative_slope=0.2).double()
    with torch.no_grad():
        for lin in (layer.lin_l, layer.lin_r):
            lin.weight.copy_(torch.tensor([[1.0], [-1.0]]))
            lin.bias.zero_()
        layer.att.copy_(torch.ones(1, 1, 2))
    x = torch.tensor([[-1.0], [0.0], [1.0]], dtype=torch.float64)
    everything = torch.ones(3, 3, dtype=torch.bool).nonzero().T
    _, (edges, alpha) = layer(x, everything, return_attention=True)
    weights = attention_to_dense(edges, alpha, 3)[0]
    assert weights[0].argmax() == 0 and weights[2].argmax() == 2  # different favourites
    expected = torch.softmax(0.8 * (x + x.T).abs(), dim=1)
    torch.testing.assert_close(weights, expected, **F64)


# ----------------------------------------------------------------------------- helpers
def test_add_self_loops_removes_then_appends():
    edge_index = _edges([(0, 1), (2, 2), (1, 0), (0, 0), (1, 2)])
    expected = _edges([(0, 1), (1, 0), (1, 2), (0, 0), (1, 1), (2, 2), (3, 3)])
    assert torch.equal(add_self_loops(edge_index, 4), expected)


def test_edge_index_to_adjacency_rows_are_targets():
    edge_index = _edges([(0, 1), (2, 1), (1, 0)])  # 0 -> 1, 2 -> 1, 1 -> 0
    expected = torch.tensor([[0, 1, 0], [1, 0, 1], [0, 0, 0]], dtype=torch.bool)
    assert torch.equal(edge_index_to_adjacency(edge_index, 3), expected)
    with_loops = edge_index_to_adjacency(edge_index, 3, add_self_loops=True)
    assert torch.equal(with_loops, expected | torch.eye(3, dtype=torch.bool))


def test_attention_to_dense_layout_and_duplicates():
    edge_index = _edges([(0, 1), (2, 1), (0, 1)])
    alpha = torch.tensor([[0.25, 1.0], [0.5, 2.0], [0.25, 3.0]], dtype=torch.float64)
    dense = attention_to_dense(edge_index, alpha, 3)
    assert dense.shape == (2, 3, 3)
    expected0 = torch.zeros(3, 3, dtype=torch.float64)
    expected0[1, 0], expected0[1, 2] = 0.5, 0.5  # duplicates add up
    torch.testing.assert_close(dense[0], expected0, atol=0.0, rtol=0.0)
    assert dense[1, 1, 0] == 4.0 and dense[1, 1, 2] == 2.0
    torch.testing.assert_close(attention_to_dense(edge_index, alpha[:, 0], 3), expected0,
                               atol=0.0, rtol=0.0)


def test_segment_softmax_against_dense_softmax():
    scores = randn(12, 6, 2)
    index = torch.tensor([2, 0, 2, 2, 0, 3])
    alpha = segment_softmax(scores, index, 5)
    for node in range(5):
        rows = index == node
        if rows.any():
            torch.testing.assert_close(alpha[rows], torch.softmax(scores[rows], 0), **F64)


@pytest.mark.parametrize("name", ["gat", "gatv2"])
def test_repr_names_the_settings(name):
    text = repr(PAIRS[name][0](3, 2, heads=4, concat=False, dropout=0.1))
    assert "3, 2, heads=4, concat=False" in text and "dropout=0.1" in text


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("name", ["gat", "gatv2"])
@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"heads": 0}, ValueError, "heads must be positive, got 0"),
        ({"heads": 2.0}, TypeError, "heads must be an int, got float"),
        ({"in_features": 0}, ValueError, "in_features must be positive"),
        ({"out_features": True}, TypeError, "out_features must be an int, got bool"),
        ({"concat": 1}, TypeError, "concat must be a bool, got int"),
        ({"add_self_loops": None}, TypeError, "add_self_loops must be a bool"),
        ({"bias": "yes"}, TypeError, "bias must be a bool, got str"),
        ({"negative_slope": True}, TypeError, "negative_slope must be a real number, got bool"),
        ({"negative_slope": "0.2"}, TypeError, "negative_slope must be a real number"),
        ({"negative_slope": math.inf}, ValueError, "negative_slope must be finite, got inf"),
        ({"dropout": 1.0}, ValueError, r"dropout must be in \[0, 1\), got 1.0"),
        ({"dropout": -0.1}, ValueError, r"dropout must be in \[0, 1\), got -0.1"),
        ({"dropout": False}, TypeError, "dropout must be a real number, got bool"),
    ],
)
def test_bad_constructor_arguments(name, kwargs, error, match):
    args = {"in_features": 5, "out_features": 4, **kwargs}
    with pytest.raises(error, match=match):
        PAIRS[name][0](**args)


def test_negative_slope_may_be_any_finite_real():
    assert GraphAttention(2, 2, negative_slope=-0.5).negative_slope == -0.5
    assert GraphAttentionV2(2, 2, negative_slope=1).negative_slope == 1.0


X10 = torch.zeros(10, 5, dtype=torch.float64)
E_OK = _edges([(0, 1), (2, 3)])


@pytest.mark.parametrize("name", ["gat", "gatv2"])
@pytest.mark.parametrize(
    "x, edge_index, error, match",
    [
        ([[0.0] * 5], E_OK, TypeError, "x must be a torch.Tensor, got list"),
        (X10.long(), E_OK, TypeError, "x must be a floating-point tensor, got dtype torch.int64"),
        (X10[0], E_OK, ValueError, r"x must have at least 2 dimensions, got shape \(5,\)"),
        (X10[None], E_OK, ValueError,
         r"x must have shape \(N, in_features\), got shape \(1, 10, 5\)"),
        (torch.zeros(10, 7, dtype=torch.float64), E_OK, ValueError,
         "x has 7 features, the layer expects 5"),
        (X10.float(), E_OK, TypeError,
         "x has dtype torch.float32 but the layer's parameters are torch.float64"),
        (X10, [[0, 1], [1, 2]], TypeError, "edge_index must be a torch.Tensor, got list"),
        (X10, E_OK.int(), TypeError, "edge_index must have dtype torch.int64, got torch.int32"),
        (X10, E_OK.double(), TypeError, "edge_index must have dtype torch.int64"),
        (X10, E_OK[0], ValueError, r"edge_index must have shape \(2, E\).*got shape \(2,\)"),
        (X10, torch.zeros(3, 4, dtype=torch.int64), ValueError, r"got shape \(3, 4\)"),
        (X10, _edges([(0, 1), (12, 3)]), ValueError,
         "edge_index holds node 12, but x has 10 nodes"),
        (X10, _edges([(0, 10)]), ValueError, "edge_index holds node 10, but x has 10 nodes"),
        (X10, _edges([(0, -1)]), ValueError, r"edge_index holds a negative node id \(-1\)"),
    ],
)
def test_bad_forward_input(name, x, edge_index, error, match):
    layer = PAIRS[name][0](5, 4).double()
    with pytest.raises(error, match=match):
        layer(x, edge_index)


def test_bad_return_attention():
    with pytest.raises(TypeError, match="return_attention must be a bool, got int"):
        GraphAttention(5, 4).double()(X10, E_OK, return_attention=1)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: edge_index_to_adjacency(E_OK, 3), ValueError,
         "edge_index holds node 3, but num_nodes gives 3 nodes"),
        (lambda: edge_index_to_adjacency(E_OK, -1), ValueError, "num_nodes must be >= 0, got -1"),
        (lambda: edge_index_to_adjacency(E_OK, 4.0), TypeError,
         "num_nodes must be an int, got float"),
        (lambda: edge_index_to_adjacency(E_OK, 4, add_self_loops=1), TypeError,
         "add_self_loops must be a bool, got int"),
        (lambda: add_self_loops(E_OK, 2), ValueError, "edge_index holds node 3, but num_nodes"),
        (lambda: attention_to_dense(E_OK, torch.ones(3, 1), 4), ValueError,
         r"alpha must have shape \(E,\) or \(E, h\) with E = 2 edges, got shape \(3, 1\)"),
        (lambda: attention_to_dense(E_OK, torch.ones(2, 1, 1), 4), ValueError,
         r"got shape \(2, 1, 1\)"),
        (lambda: attention_to_dense(E_OK, torch.ones(2, 1, dtype=torch.int64), 4), TypeError,
         "alpha must be a floating-point tensor"),
        (lambda: segment_softmax(torch.ones(3, 2), torch.tensor([0, 1]), 2), ValueError,
         "index has 2 entries but scores has 3 edges"),
        (lambda: segment_softmax(torch.ones(2, 2), torch.tensor([0, 2]), 2), ValueError,
         r"index holds node ids outside \[0, 2\)"),
        (lambda: segment_softmax(torch.ones(2, 2), torch.tensor([0, -1]), 2), ValueError,
         r"index holds node ids outside \[0, 2\)"),
        (lambda: segment_softmax(torch.ones(2, 2), torch.tensor([0.0, 1.0]), 2), TypeError,
         "index must be a 1-D torch.int64 tensor"),
    ],
)
def test_bad_helper_input(call, error, match):
    with pytest.raises(error, match=match):
        call()


# ----------------------------------------------------------------------------- issue 13
# Tests added for the mutation run: every bad-input path names its argument (anchored
# matches, so a mangled name or message fails), the boundaries of the checks on both sides,
# the layers' defaults and their repr.
@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: edge_index_to_adjacency(E_OK.double(), 4), TypeError,
         r"^edge_index must have dtype torch\.int64, got torch\.float64; "
         r"convert it with edge_index\.long\(\)$"),
        (lambda: edge_index_to_adjacency(E_OK.tolist(), 4), TypeError,
         r"^edge_index must be a torch\.Tensor, got list$"),
        (lambda: edge_index_to_adjacency(E_OK[None], 4), ValueError,
         r"^edge_index must have shape \(2, E\) \(row 0: sources, row 1: targets\), "
         r"got shape \(1, 2, 2\)$"),
        (lambda: edge_index_to_adjacency(torch.zeros(3, 1, dtype=torch.int64), 4), ValueError,
         r"^edge_index must have shape \(2, E\) .*, got shape \(3, 1\)$"),
        (lambda: edge_index_to_adjacency(_edges([(0, -2)]), 4), ValueError,
         r"^edge_index holds a negative node id \(-2\); node ids start at 0$"),
        (lambda: edge_index_to_adjacency(E_OK, True), TypeError,
         r"^num_nodes must be an int, got bool$"),
        (lambda: edge_index_to_adjacency(E_OK, -1), ValueError,
         r"^num_nodes must be >= 0, got -1$"),
        (lambda: edge_index_to_adjacency(E_OK, 4, add_self_loops=None), TypeError,
         r"^add_self_loops must be a bool, got NoneType$"),
        (lambda: add_self_loops(E_OK, 3), ValueError,
         r"^edge_index holds node 3, but num_nodes gives 3 nodes \(ids 0\.\.N-1\)$"),
        (lambda: add_self_loops(E_OK, 4.0), TypeError, r"^num_nodes must be an int, got float$"),
        (lambda: attention_to_dense(E_OK, torch.ones(2, 1), 3), ValueError,
         r"^edge_index holds node 3, but num_nodes gives 3 nodes"),
        (lambda: attention_to_dense(E_OK, torch.ones(2, 1), 4.0), TypeError,
         r"^num_nodes must be an int, got float$"),
        (lambda: attention_to_dense(E_OK, [[1.0], [1.0]], 4), TypeError,
         r"^alpha must be a torch\.Tensor, got list$"),
        (lambda: attention_to_dense(E_OK, torch.ones(2, 1, dtype=torch.int64), 4), TypeError,
         r"^alpha must be a floating-point tensor, got dtype torch\.int64"),
        (lambda: attention_to_dense(E_OK, torch.tensor(1.0), 4), ValueError,
         r"^alpha must have at least 1 dimensions, got shape \(\)$"),
        (lambda: attention_to_dense(E_OK, torch.ones(3), 4), ValueError,
         r"^alpha must have shape \(E,\) or \(E, h\) with E = 2 edges, got shape \(3,\)$"),
        (lambda: segment_softmax(torch.ones(2, dtype=torch.int64), torch.tensor([0, 1]), 2),
         TypeError, r"^scores must be a floating-point tensor, got dtype torch\.int64"),
        (lambda: segment_softmax(torch.tensor(1.0), torch.tensor([0]), 2), ValueError,
         r"^scores must have at least 1 dimensions, got shape \(\)$"),
        (lambda: segment_softmax([1.0, 2.0], torch.tensor([0, 1]), 2), TypeError,
         r"^scores must be a torch\.Tensor, got list$"),
        (lambda: segment_softmax(torch.ones(2), torch.tensor([0, 1]), -1), ValueError,
         r"^num_nodes must be >= 0, got -1$"),
        (lambda: segment_softmax(torch.ones(2), [0, 1], 2), TypeError,
         r"^index must be a 1-D torch\.int64 tensor \(the target of each edge\)$"),
        (lambda: segment_softmax(torch.ones(2), torch.tensor([0, 1], dtype=torch.int32), 2),
         TypeError, r"^index must be a 1-D torch\.int64 tensor \(the target of each edge\)$"),
        (lambda: segment_softmax(torch.ones(2, 1), torch.tensor([[0], [1]]), 2), TypeError,
         r"^index must be a 1-D torch\.int64 tensor \(the target of each edge\)$"),
        (lambda: segment_softmax(torch.ones(3), torch.tensor([0, 1]), 2), ValueError,
         r"^index has 2 entries but scores has 3 edges$"),
        (lambda: segment_softmax(torch.ones(2), torch.tensor([0, 2]), 2), ValueError,
         r"^index holds node ids outside \[0, 2\)$"),
    ],
)
def test_helpers_name_each_bad_argument(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_helpers_accept_the_boundaries():
    """num_nodes = 0 (an empty graph) and node ids up to N - 1 are valid."""
    empty = torch.zeros(2, 0, dtype=torch.int64)
    assert edge_index_to_adjacency(empty, 0).shape == (0, 0)
    assert add_self_loops(empty, 0).shape == (2, 0)
    assert attention_to_dense(empty, torch.ones(0, 2), 0).shape == (2, 0, 0)
    assert segment_softmax(torch.ones(0, 2), torch.zeros(0, dtype=torch.int64), 0).shape == (0, 2)
    top = _edges([(0, 3), (3, 0)])  # the largest id, N - 1 = 3
    assert edge_index_to_adjacency(top, 4)[3, 0] and edge_index_to_adjacency(top, 4)[0, 3]
    torch.testing.assert_close(segment_softmax(torch.zeros(2), torch.tensor([3, 3]), 4),
                               torch.full((2,), 0.5))


@pytest.mark.parametrize(
    "x, edge_index, error, match",
    [
        ([[0.0] * 5], E_OK, TypeError, r"^x must be a torch\.Tensor, got list$"),
        (X10.long(), E_OK, TypeError,
         r"^x must be a floating-point tensor, got dtype torch\.int64; convert it first"),
        (X10[0], E_OK, ValueError, r"^x must have at least 2 dimensions, got shape \(5,\)$"),
        (X10[None], E_OK, ValueError,
         r"^x must have shape \(N, in_features\), got shape \(1, 10, 5\)$"),
        (torch.zeros(10, 4, dtype=torch.float64), E_OK, ValueError,
         r"^x has 4 features, the layer expects 5$"),
        (X10.float(), E_OK, TypeError,
         r"^x has dtype torch\.float32 but the layer's parameters are torch\.float64; "
         r"convert one of them, e\.g\. layer\.to\(torch\.float32\)$"),
        (X10, E_OK.int(), TypeError,
         r"^edge_index must have dtype torch\.int64, got torch\.int32; "
         r"convert it with edge_index\.long\(\)$"),
        (X10, E_OK[:, :, None], ValueError,
         r"^edge_index must have shape \(2, E\) \(row 0: sources, row 1: targets\), "
         r"got shape \(2, 2, 1\)$"),
        (X10, _edges([(10, 3)]), ValueError,
         r"^edge_index holds node 10, but x has 10 nodes \(ids 0\.\.N-1\)$"),
    ],
)
@pytest.mark.parametrize("name", ["gat", "gatv2"])
def test_forward_names_each_bad_argument(name, x, edge_index, error, match):
    layer = PAIRS[name][0](5, 4).double()
    with pytest.raises(error, match=match):
        layer(x, edge_index)
    with pytest.raises(TypeError, match=r"^return_attention must be a bool, got NoneType$"):
        layer(X10, E_OK, return_attention=None)


@pytest.mark.parametrize("name", ["gat", "gatv2"])
@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"in_features": 0}, ValueError, r"^in_features must be positive, got 0$"),
        ({"in_features": 5.0}, TypeError, r"^in_features must be an int, got float$"),
        ({"out_features": 0}, ValueError, r"^out_features must be positive, got 0$"),
        ({"heads": -1}, ValueError, r"^heads must be positive, got -1$"),
        ({"concat": None}, TypeError, r"^concat must be a bool, got NoneType$"),
        ({"add_self_loops": 0}, TypeError, r"^add_self_loops must be a bool, got int$"),
        ({"bias": 1}, TypeError, r"^bias must be a bool, got int$"),
        ({"negative_slope": None}, TypeError,
         r"^negative_slope must be a real number, got NoneType$"),
        ({"negative_slope": False}, TypeError, r"^negative_slope must be a real number, got bool$"),
        ({"negative_slope": math.nan}, ValueError, r"^negative_slope must be finite, got nan$"),
        ({"negative_slope": -math.inf}, ValueError, r"^negative_slope must be finite, got -inf$"),
        ({"dropout": "0"}, TypeError, r"^dropout must be a real number, got str$"),
        ({"dropout": True}, TypeError, r"^dropout must be a real number, got bool$"),
        ({"dropout": 1}, ValueError, r"^dropout must be in \[0, 1\), got 1$"),
        ({"dropout": -1e-9}, ValueError, r"^dropout must be in \[0, 1\), got -1e-09$"),
    ],
)
def test_constructor_names_each_bad_argument(name, kwargs, error, match):
    args = {"in_features": 5, "out_features": 4, **kwargs}
    with pytest.raises(error, match=match):
        PAIRS[name][0](**args)


@pytest.mark.parametrize("name", ["gat", "gatv2"])
def test_constructor_accepts_the_boundaries(name):
    cls = PAIRS[name][0]
    assert cls(1, 1, heads=1).heads == 1  # 1 is positive
    assert cls(2, 2, dropout=0.0).dropout == 0.0 and cls(2, 2, dropout=0).dropout == 0.0
    assert cls(2, 2, dropout=0.999).dropout == 0.999
    assert cls(2, 2, negative_slope=0).negative_slope == 0.0  # LeakyReLU -> ReLU
    assert isinstance(cls(2, 2, negative_slope=0).negative_slope, float)


@pytest.mark.parametrize("name", ["gat", "gatv2"])
def test_layer_defaults(name):
    """heads=1, concat=True, negative_slope=0.2, dropout=0.0, add_self_loops=True, bias=True:
    the same draws, settings and outputs (in training mode, where dropout would act) as with
    every argument given."""
    cls = PAIRS[name][0]
    torch.manual_seed(0)
    default = cls(D, C).double().train()
    torch.manual_seed(0)
    explicit = cls(D, C, heads=1, concat=True, negative_slope=0.2, dropout=0.0,
                   add_self_loops=True, bias=True).double().train()
    assert default.extra_repr() == explicit.extra_repr() == (
        f"{D}, {C}, heads=1, concat=True, negative_slope=0.2, dropout=0.0, "
        "add_self_loops=True, bias=True")
    for (key, p), q in zip(default.state_dict().items(), explicit.state_dict().values(),
                           strict=True):
        assert torch.equal(p, q), key
    with torch.no_grad():
        default.bias.normal_()
        explicit.bias.copy_(default.bias)
    x, edge_index = randn(3, N, D), _graph("with_loops")
    out, (edges, alpha) = default(x, edge_index, return_attention=True)
    ref_out, (ref_edges, ref_alpha) = explicit(x, edge_index, return_attention=True)
    assert torch.equal(out, ref_out) and torch.equal(edges, ref_edges)
    assert torch.equal(alpha, ref_alpha)
    # and the two-argument call is the same as return_attention=False
    assert torch.equal(default(x, edge_index), out)


@pytest.mark.parametrize("name", ["gat", "gatv2"])
def test_extra_repr_states_every_setting(name):
    cls = PAIRS[name][0]
    layer = cls(3, 2, heads=4, concat=False, negative_slope=0.1, dropout=0.25,
                add_self_loops=False, bias=False)
    assert layer.extra_repr() == ("3, 2, heads=4, concat=False, negative_slope=0.1, "
                                  "dropout=0.25, add_self_loops=False, bias=False")
    assert repr(layer).startswith(f"{cls.__name__}(\n  3, 2, heads=4, concat=False")


def test_single_out_of_range_entries_are_caught():
    """One edge, one index entry: still checked (not only lists of two or more)."""
    with pytest.raises(ValueError, match=r"^index holds node ids outside \[0, 2\)$"):
        segment_softmax(torch.ones(1), torch.tensor([2]), 2)
    with pytest.raises(ValueError, match=r"^index holds node ids outside \[0, 2\)$"):
        segment_softmax(torch.ones(1, 3), torch.tensor([-1]), 2)
    with pytest.raises(ValueError, match=r"^edge_index holds node 4, but num_nodes gives 4 "
                       r"nodes \(ids 0\.\.N-1\)$"):
        edge_index_to_adjacency(_edges([(4, 0)]), 4)


def test_dense_views_follow_the_input_device():
    """The dense views are allocated on the input's device; PyTorch's meta device stands in
    for a GPU on a CPU-only build (an empty graph, since the id checks read values)."""
    empty = torch.zeros(2, 0, dtype=torch.int64, device="meta")
    assert edge_index_to_adjacency(empty, 3).device.type == "meta"
    assert edge_index_to_adjacency(empty, 3, add_self_loops=True).device.type == "meta"
    alpha = torch.ones(0, 2, device="meta")
    assert attention_to_dense(empty, alpha, 3).device.type == "meta"
    assert attention_to_dense(empty, alpha, 3).shape == (2, 3, 3)

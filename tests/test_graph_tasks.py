"""Tests of ``attention_src.graph_tasks``, the data, models and measurements of chapter 8.

The kNN graph is checked against scikit-learn's ``NearestNeighbors`` (an independent
implementation) and by its definition on hand-made points; the lookup task by decoding each
query's answer from the node features; the measurements on hand-computed cases; static
attention (``ranking_consistency`` = 1 for GAT) on random untrained layers. The sweep's helpers:
parameter counts against the models' own parameters, the matched GAT width against a search
over widths, and ``lookup_run`` against the pieces its docstring names. Planted cases show
where the measurements stop: a float32 tie that takes a static head's top-key agreement
below 1, and a cycle of agreeing pairs that gives ``ranking_consistency`` 1 without a common
order.
"""

from __future__ import annotations

import math
import socket

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from sklearn.neighbors import NearestNeighbors

from attention_src import graph_tasks as G
from attention_src.graph import GraphAttention, GraphAttentionV2, edge_index_to_adjacency
from tests.conftest import PROPERTY, randn, seeds


# ----------------------------------------------------------------------------- karate
def test_karate_club_loads_without_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise OSError("network access attempted")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    data = G.karate_club()
    assert data.x.shape == (34, 34) and torch.equal(data.x, torch.eye(34))
    assert data.edge_index.shape == (2, 156) and data.edge_index.dtype == torch.int64
    assert sorted(set(data.y.tolist())) == [0, 1, 2, 3]
    assert data.train_mask.nonzero().flatten().tolist() == [0, 4, 8, 24]
    assert not (data.train_mask & data.test_mask).any()
    assert (data.train_mask | data.test_mask).all()
    adj = edge_index_to_adjacency(data.edge_index, 34)
    assert torch.equal(adj, adj.T) and not adj.diagonal().any()  # undirected, no loops
    assert int(adj.sum(1)[33]) == 17 and int(adj.sum(1)[0]) == 16  # the two leaders


# ----------------------------------------------------------------------------- kNN graph
def test_knn_graph_on_a_line_by_hand():
    points = torch.tensor([[0.0], [1.0], [3.0], [7.0]])
    edges = G.knn_graph(points, k=1)
    # nearest of 0 is 1, of 1 is 0 (distance 1 < 2), of 3 is 1, of 7 is 3
    assert edges.tolist() == [[1, 0, 1, 2], [0, 1, 2, 3]]
    sym = G.knn_graph(points, k=1, symmetric=True)
    pairs = set(zip(*sym.tolist(), strict=True))
    assert pairs == {(1, 0), (0, 1), (1, 2), (2, 1), (2, 3), (3, 2)}


def test_knn_graph_breaks_ties_by_smaller_index():
    points = torch.tensor([[0.0], [-1.0], [1.0]])  # 1 and 2 are equally far from 0
    edges = G.knn_graph(points, k=1)
    assert edges[0, edges[1] == 0].tolist() == [1]


def test_knn_graph_breaks_many_ties_by_smaller_index():
    """Points on a small integer grid, with repeats, tie at many distances. Against a loop
    that sorts each node's other points by (squared distance, index): PyTorch's unstable sort
    orders equal keys differently once a row has more than about 32 entries."""
    g = torch.Generator().manual_seed(0)
    points = torch.randint(0, 3, (60, 2), generator=g).double()  # (N, 2), 9 distinct points
    k = 7
    edges = G.knn_graph(points, k)
    d2 = ((points[:, None] - points[None]) ** 2).sum(-1).tolist()  # (N, N), exact integers
    expected = sorted((j, i) for i in range(60)
                      for j in sorted((j for j in range(60) if j != i),
                                      key=lambda j: (d2[i][j], j))[:k])
    assert sorted(zip(*edges.tolist(), strict=True)) == expected
    assert edges.tolist() == [list(c) for c in zip(*sorted(expected, key=lambda e: e[::-1]),
                                                    strict=True)]  # by target, then source


@PROPERTY
@given(n=st.integers(3, 30), d=st.integers(1, 5), k=st.integers(1, 4), seed=seeds)
def test_knn_graph_matches_sklearn_and_its_invariants(n, d, k, seed):
    k = min(k, n - 1)
    points = randn(seed, n, d)
    edges = G.knn_graph(points, k)
    src, dst = edges.tolist()
    assert edges.shape == (2, n * k)
    assert all(s != t for s, t in zip(src, dst, strict=True))  # no self-loops
    assert torch.bincount(edges[1], minlength=n).tolist() == [k] * n  # k in-edges each
    nn_ = NearestNeighbors(n_neighbors=k + 1).fit(points.numpy())
    dist, _ = nn_.kneighbors(points.numpy())
    p = points.numpy()
    for i in range(n):
        mine = [s for s, t in zip(src, dst, strict=True) if t == i]
        mine_d = np.sort(np.linalg.norm(p[mine] - p[i], axis=1))
        # the same k distances as sklearn's k nearest other points (ties may swap ids)
        np.testing.assert_allclose(mine_d, dist[i, 1:], rtol=0, atol=1e-9)
    sym = G.knn_graph(points, k, symmetric=True)
    adj = edge_index_to_adjacency(sym, n)
    assert torch.equal(adj, adj.T)  # symmetric
    assert not adj.diagonal().any()
    assert (adj.sum(1) >= k).all()
    assert sym.shape[1] == int(adj.sum())  # no duplicate edges
    assert edge_index_to_adjacency(edges, n).logical_and(~adj).sum() == 0  # contains kNN


@pytest.mark.parametrize(
    ("points", "k", "symmetric", "error", "match"),
    [
        (torch.zeros(3, 2), 3, False, ValueError, "k = 3 neighbours need at least"),
        (torch.zeros(3, 2), 0, False, ValueError, "k must be positive"),
        (torch.zeros(3, 2, 1), 1, False, ValueError, r"points must have shape \(N, d\)"),
        (torch.zeros(3, 2, dtype=torch.int64), 1, False, TypeError, "floating-point"),
        (torch.zeros(3, 2), 1, 1, TypeError, "symmetric must be a bool"),
    ],
)
def test_knn_graph_rejects_bad_input(points, k, symmetric, error, match):
    with pytest.raises(error, match=match):
        G.knn_graph(points, k, symmetric=symmetric)


def test_digits_graph_split_and_shapes():
    data = G.digits_graph(k=5, labelled_per_class=3, seed=1)
    assert data.x.shape == (1797, 64) and float(data.x.max()) <= 1.0
    assert torch.bincount(data.y[data.train_mask]).tolist() == [3] * 10
    assert not (data.train_mask & data.test_mask).any()
    assert torch.equal(data.edge_index, G.knn_graph(data.x, 5, symmetric=True))
    with pytest.raises(ValueError, match="exceeds the .* images of digit"):
        G.digits_graph(labelled_per_class=1000)


# ----------------------------------------------------------------------------- lookup task
@PROPERTY
@given(k=st.integers(2, 6), batch=st.integers(1, 4), seed=seeds)
def test_lookup_batch_encodes_a_dictionary(k, batch, seed):
    b = G.lookup_batch(k, batch, torch.Generator().manual_seed(seed))
    n = batch * 2 * k
    assert b.x.shape == (n, 2 * k + 1) and b.edge_index.shape == (2, batch * k * k)
    assert b.query_mask.sum() == batch * k and b.y.shape == (batch * k,)
    x = b.x.reshape(batch, 2 * k, 2 * k + 1)
    for g in range(batch):
        keys, queries = x[g, :k], x[g, k:]
        assert (keys[:, 2 * k] == 0).all() and (queries[:, 2 * k] == 1).all()
        assert (queries[:, k:2 * k] == 0).all()  # queries carry no value
        key_ids = keys[:, :k].argmax(1).tolist()
        assert key_ids == list(range(k)) and (keys[:, :k].sum(1) == 1).all()
        values = keys[:, k:2 * k].argmax(1)
        assert sorted(values.tolist()) == list(range(k))  # a permutation
        asked = queries[:, :k].argmax(1)
        assert sorted(asked.tolist()) == list(range(k))
        # the answer is the value of the key whose id the query asks for
        assert b.y[g * k:(g + 1) * k].tolist() == values[asked].tolist()
        # edges: every key of graph g to every query of graph g, query-major
        e = b.edge_index[:, g * k * k:(g + 1) * k * k] - g * 2 * k
        assert e[0].tolist() == list(range(k)) * k
        assert e[1].tolist() == [k + i for i in range(k) for _ in range(k)]
    assert b.query_mask.reshape(batch, 2 * k)[:, k:].all()


def test_lookup_batch_rejects_bad_input():
    g = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="k must be at least 2"):
        G.lookup_batch(1, 3, g)
    with pytest.raises(ValueError, match="batch must be positive"):
        G.lookup_batch(3, 0, g)
    with pytest.raises(TypeError, match="generator must be a torch.Generator"):
        G.lookup_batch(3, 2, 0)


# ----------------------------------------------------------------------------- models
def test_mean_aggregation_is_uniform_attention():
    torch.manual_seed(0)
    layer = G.MeanAggregation(3, 2).double()
    with torch.no_grad():
        layer.bias.copy_(torch.tensor([0.5, -1.0], dtype=torch.float64))
    x = randn(1, 4, 3)
    edges = torch.tensor([[1, 2, 0, 3], [0, 0, 1, 1]])  # 1, 2 -> 0; 0, 3 -> 1; none -> 2, 3
    out = layer(x, edges)
    z = x @ layer.lin.weight.T
    expected = torch.stack([(z[0] + z[1] + z[2]) / 3, (z[1] + z[0] + z[3]) / 3, z[2], z[3]])
    torch.testing.assert_close(out, expected + layer.bias, rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind", G.KINDS)
def test_node_classifier_shapes_and_training(kind):
    data = G.karate_club()
    torch.manual_seed(0)
    model = G.NodeClassifier(kind, 34, 4, hidden=4, heads=2)
    assert model(data.x, data.edge_index).shape == (34, 4)
    run = G.train_node_classifier(model, data, steps=40)
    assert len(run["loss"]) == 40 and run["loss"][-1] < run["loss"][0]
    assert run["train_acc"] == 1.0  # four labelled nodes are easy to fit
    if kind in ("gat", "gatv2"):
        (e1, a1), (e2, a2) = model.attention(data.x, data.edge_index)
        assert a1.shape == (156 + 34, 2) and a2.shape == (156 + 34, 1)
        sums = torch.zeros(34, 2).index_add_(0, e1[1], a1)
        torch.testing.assert_close(sums, torch.ones(34, 2))
    else:
        with pytest.raises(ValueError, match="has no attention weights"):
            model.attention(data.x, data.edge_index)


def test_node_classifier_converts_to_float64():
    data = G.karate_club()
    for kind in G.KINDS:
        model = G.NodeClassifier(kind, 34, 4).double().eval()  # nn.Module._apply intact
        assert model(data.x.double(), data.edge_index).dtype == torch.float64


def test_node_classifier_rejects_bad_arguments():
    with pytest.raises(ValueError, match="kind must be one of"):
        G.NodeClassifier("gcn", 3, 2)
    with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\)"):
        G.NodeClassifier("gat", 3, 2, dropout=1.0)
    with pytest.raises(ValueError, match="hidden must be positive"):
        G.NodeClassifier("mlp", 3, 2, hidden=0)
    with pytest.raises(ValueError, match="kind must be 'gat' or 'gatv2'"):
        G.LookupModel("mlp", 4)
    with pytest.raises(TypeError, match="dropout must be a real number, got str"):
        G.NodeClassifier("gat", 3, 2, dropout="0.5")


def test_mean_aggregation_rejects_bad_features():
    layer = G.MeanAggregation(3, 2)
    edges = torch.tensor([[0], [1]])
    with pytest.raises(ValueError, match=r"x must have shape \(N, in_features\) = \(N, 3\), "
                       r"got shape \(2, 4\)"):
        layer(torch.zeros(2, 4), edges)
    with pytest.raises(TypeError, match="x must be a floating-point tensor"):
        layer(torch.zeros(2, 3, dtype=torch.int64), edges)
    with pytest.raises(ValueError, match="edge_index holds node 5"):
        layer(torch.zeros(2, 3), torch.tensor([[5], [1]]))


def test_lookup_training_runs_and_gat_is_static():
    torch.manual_seed(0)
    model = G.LookupModel("gat", 4, hidden=4, heads=2)
    losses = G.train_lookup(model, steps=5, batch=4)
    assert len(losses) == 5 and all(math.isfinite(v) for v in losses)
    with torch.no_grad():  # a read-out that always answers value 0
        model.out.weight.zero_()
        model.out.bias.copy_(torch.tensor([1.0, 0.0, 0.0, 0.0]))
    # the answers of a graph are a permutation of the values: one query in k wants 0
    assert G.lookup_accuracy(model, batch=10) == 0.25
    b = G.lookup_batch(4, 6, torch.Generator().manual_seed(3))
    assert G.top_key_agreement(model, b) == 1.0  # static: every query, the same top key
    assert G.top_key_agreement(model, b, head=1) == 1.0
    with pytest.raises(ValueError, match=r"head must be in \[0, 2\), got 2"):
        G.top_key_agreement(model, b, head=2)
    shuffled = b._replace(edge_index=b.edge_index.flip(1), x=b.x)
    with pytest.raises(ValueError, match="not in lookup_batch's order"):
        G.top_key_agreement(model, shuffled)


def test_asked_key_hits_by_hand_and_for_static_attention():
    torch.manual_seed(1)
    b = G.lookup_batch(4, 6, torch.Generator().manual_seed(3))
    flat = G.LookupModel("gatv2", 4, hidden=4, heads=2)
    with torch.no_grad():  # zero attention vector: every score 0, uniform weights
        flat.conv.att.zero_()
    hit, weight = G.asked_key_hits(flat, b, head=1)
    # uniform weights: mean weight 1/k; argmax picks key 0, asked by one query in k
    assert weight == pytest.approx(0.25, abs=1e-7) and hit == 0.25
    static = G.LookupModel("gat", 4, hidden=4, heads=2)
    for head in range(2):  # one top key for all k queries; exactly one of them asks it
        assert G.asked_key_hits(static, b, head=head)[0] == 0.25
    with pytest.raises(ValueError, match=r"head must be in \[0, 2\), got 3"):
        G.asked_key_hits(static, b, head=3)
    shuffled = b._replace(edge_index=b.edge_index.flip(1))
    with pytest.raises(ValueError, match="not in lookup_batch's order"):
        G.asked_key_hits(static, shuffled)


def _tied_static_head() -> G.LookupModel:
    """A GAT head (k = 2, width 2) with kappa = (1, 1 + 2^-20) for the keys, and u = 0 for the
    query that asks key 0 but u = 1e4 for the one that asks key 1: in float32
    1e4 + 1 + 2^-20 rounds to 1e4 + 1, so the second query sees the two keys tied."""
    model = G.LookupModel("gat", 2, hidden=2, heads=1)
    with torch.no_grad():
        w = torch.zeros(2, 5)  # lin.weight: W^T, (hidden, 2k + 1)
        w[0, 1] = 2.0**-20  # key id 1 -> kappa
        w[0, 2] = w[0, 3] = 1.0  # either value -> kappa 1
        w[1, 1] = 1e4  # asked id 1 -> u
        model.conv.lin.weight.copy_(w)
        model.conv.att_src.copy_(torch.tensor([[[1.0, 0.0]]]))  # kappa_j = z_j[0]
        model.conv.att_dst.copy_(torch.tensor([[[0.0, 1.0]]]))  # u_i = z_i[1]
    return model


def test_static_head_with_a_float32_tie_scores_below_one():
    """Static in exact arithmetic (kappa_1 > kappa_0 for every query), but the query with the
    large u sees a tie, argmax takes the first key, and the two queries' top keys differ."""
    model = _tied_static_head()
    b = G.lookup_batch(2, 3, torch.Generator().manual_seed(0))
    with torch.no_grad():
        _, (_, alpha) = model(b.x, b.edge_index, return_attention=True)
    w = alpha[:, 0].reshape(3, 2, 2)  # (graphs, queries, keys)
    asks_1 = b.key_of_query == 1  # (graphs, queries)
    assert torch.all(w[asks_1][:, 0] == w[asks_1][:, 1])  # tied: weights 1/2 each
    assert torch.all(w[~asks_1][:, 1] > w[~asks_1][:, 0])  # untied: key 1 on top
    assert G.top_key_agreement(model, b) == 0.5
    assert G.asked_key_hits(model, b)[0] == 0.0  # each query's top key is the other key
    attn = G._lookup_weights(model, b, 0)[0]  # one graph: a tie reverses no pair
    assert G.ranking_consistency(attn, torch.ones(2, 2, dtype=torch.bool)) == 1.0
    with torch.no_grad():  # in float64 the tie is gone: agreement 1, hits 1/k
        model.double()
        b64 = b._replace(x=b.x.double())
        assert G.top_key_agreement(model, b64) == 1.0
        assert G.asked_key_hits(model, b64)[0] == 0.5


# ----------------------------------------------------------------------------- measurements
def test_entropies_by_hand():
    edges = torch.tensor([[0, 1, 2, 1], [1, 1, 1, 2]])  # node 1: 3 in-edges, node 2: 1
    alpha = torch.tensor([0.5, 0.25, 0.25, 1.0], dtype=torch.float64)
    h = G.attention_entropy(edges, alpha, 3)
    expected = -(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25))
    assert h.shape == (3, 1)
    torch.testing.assert_close(h[:, 0], torch.tensor([0.0, expected, 0.0],
                                                     dtype=torch.float64))
    u = G.uniform_entropy(edges, 3)
    torch.testing.assert_close(u, torch.tensor([0.0, math.log(3), 0.0], dtype=torch.float64))
    zero = torch.tensor([1.0, 0.0, 0.0, 1.0], dtype=torch.float64)  # 0 log 0 = 0
    assert G.attention_entropy(edges, zero, 3).abs().max() == 0
    with pytest.raises(ValueError, match=r"alpha must have shape \(E,\) or \(E, h\)"):
        G.attention_entropy(edges, alpha[:3], 3)


def test_ranking_consistency_by_hand():
    mask = torch.ones(2, 3, dtype=torch.bool)
    same = torch.tensor([[0.5, 0.3, 0.2], [0.6, 0.3, 0.1]])
    assert G.ranking_consistency(same, mask) == 1.0
    swapped = torch.tensor([[0.5, 0.3, 0.2], [0.2, 0.3, 0.5]])  # every pair reversed
    assert G.ranking_consistency(swapped, mask) == 0.0
    one = torch.tensor([[0.5, 0.3, 0.2], [0.3, 0.5, 0.2]])  # only pair (0, 1) reversed
    assert G.ranking_consistency(one, mask) == pytest.approx(2 / 3)
    assert math.isnan(G.ranking_consistency(same, torch.eye(2, 3, dtype=torch.bool)))
    with pytest.raises(ValueError, match="must be the same"):
        G.ranking_consistency(same, mask[:1])
    with pytest.raises(TypeError, match="mask must be a bool tensor .* got torch.float32"):
        G.ranking_consistency(same, mask.float())


def test_ranking_consistency_is_one_for_a_cycle_of_agreeing_pairs():
    """1 is necessary for a common order, not sufficient: six queries, each seeing two of three
    keys, agree on every shared pair, yet a > b, b > c and c > a form a cycle."""
    rows, mask = torch.zeros(6, 3), torch.zeros(6, 3, dtype=torch.bool)
    for q, (hi, lo) in enumerate([(0, 1), (0, 1), (1, 2), (1, 2), (2, 0), (2, 0)]):
        rows[q, hi], rows[q, lo] = 2.0, 1.0
        mask[q, hi] = mask[q, lo] = True
    assert G.ranking_consistency(rows, mask) == 1.0
    # no order of the three keys agrees with all six queries
    orders = [(0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0)]
    for order in orders:
        rank = {key: pos for pos, key in enumerate(order)}
        assert any(rank[int(r.argmax())] > rank[int(r.masked_fill(~m, 9).argmin())]
                   for r, m in zip(rows, mask, strict=True))


def test_entropies_reject_bad_edges():
    alpha = torch.full((2,), 0.5, dtype=torch.float64)
    bad = torch.tensor([[0, 1], [1, 3]])  # node 3 in a 3-node graph
    with pytest.raises(ValueError, match="edge_index holds node 3, but num_nodes is 3"):
        G.attention_entropy(bad, alpha, 3)
    with pytest.raises(ValueError, match="edge_index holds node 3, but num_nodes is 3"):
        G.uniform_entropy(bad, 3)
    neg = torch.tensor([[0, 1], [1, -1]])
    with pytest.raises(ValueError, match="negative node id"):
        G.attention_entropy(neg, alpha, 3)
    with pytest.raises(ValueError, match="negative node id"):
        G.uniform_entropy(neg, 3)
    with pytest.raises(TypeError, match="num_nodes must be an int"):
        G.uniform_entropy(bad, 3.0)


@PROPERTY
@given(seed=seeds, heads=st.integers(1, 3), slope=st.sampled_from([0.01, 0.2, 0.5]))
def test_gat_ranking_is_static_on_random_graphs(seed, heads, slope):
    torch.manual_seed(seed)
    n = 12
    x = randn(seed, n, 5)
    g = torch.Generator().manual_seed(seed)
    adj = torch.rand(n, n, generator=g) < 0.5
    edges = adj.nonzero().T.flip(0)  # adj[i, j] = edge j -> i: row 0 sources
    layer = GraphAttention(5, 3, heads=heads, negative_slope=slope).double()
    _, (e, alpha) = layer(x, edges, return_attention=True)
    from attention_src.graph import attention_to_dense

    dense = attention_to_dense(e, alpha, n)  # (h, N, N)
    mask = edge_index_to_adjacency(e, n)
    for k in range(heads):
        assert G.ranking_consistency(dense[k], mask) == 1.0


def test_gatv2_ranking_can_depend_on_the_query():
    torch.manual_seed(0)
    n = 12
    x = randn(0, n, 5)
    edges = torch.ones(n, n, dtype=torch.bool).nonzero().T.flip(0)
    layer = GraphAttentionV2(5, 8).double()
    _, (e, alpha) = layer(x, edges, return_attention=True)
    from attention_src.graph import attention_to_dense

    dense = attention_to_dense(e, alpha, n)[0]
    assert G.ranking_consistency(dense, edge_index_to_adjacency(e, n)) < 1.0


def test_spring_layout_is_deterministic_and_scaled():
    data = G.karate_club()
    pos = G.spring_layout(data.edge_index, 34, iterations=50)
    assert pos.shape == (34, 2) and np.isfinite(pos).all()
    assert np.abs(pos).max() == pytest.approx(1.0)
    np.testing.assert_array_equal(pos, G.spring_layout(data.edge_index, 34, iterations=50))
    # linked nodes end up closer on average than unlinked ones
    adj = edge_index_to_adjacency(data.edge_index, 34).numpy()
    dist = np.linalg.norm(pos[:, None] - pos[None], axis=-1)
    off = ~np.eye(34, dtype=bool)
    assert dist[adj].mean() < dist[off & ~adj].mean()


def test_spring_layout_rejects_too_few_nodes():
    data = G.karate_club()
    with pytest.raises(ValueError, match="edge_index holds node 33, but num_nodes is 20"):
        G.spring_layout(data.edge_index, 20)
    with pytest.raises(ValueError, match="iterations must be positive"):
        G.spring_layout(data.edge_index, 34, iterations=0)


def test_accuracy_by_hand_and_rejects_bad_masks():
    logits = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])  # predicts 0, 1, 0
    y = torch.tensor([0, 0, 0])
    assert G.accuracy(logits, y, torch.tensor([True, True, False])) == 0.5
    with pytest.raises(TypeError, match="mask must be a bool tensor .* got torch.int64"):
        G.accuracy(logits, y, torch.tensor([1, 1, 0]))
    with pytest.raises(ValueError, match=r"must agree in N, got logits \(3, 2\), y \(2,\)"):
        G.accuracy(logits, y[:2], torch.tensor([True, True, False]))


def test_accuracy_rejects_an_empty_mask():
    with pytest.raises(ValueError, match="mask selects no node"):
        G.accuracy(torch.zeros(3, 2), torch.zeros(3, dtype=torch.int64),
                   torch.zeros(3, dtype=torch.bool))


# ----------------------------------------------------------------------------- issue 13
# Tests added after a mutation run of attention_src.graph_tasks: each checks a contract that
# a surviving mutant broke (a default, an argument named in its error, the schedule, the
# layout's arithmetic) against an independent reference or a hand-computed case.
def _spring_reference(edge_index: torch.Tensor, n: int, iterations: int,
                      seed: int) -> np.ndarray:
    """Fruchterman-Reingold as the docstring states it, node by node in plain loops.

    Undirected simple graph (self-loops dropped); start at the Laplacian's eigenvectors 2 and
    3 plus 0.01 N(0, 1) noise from ``default_rng(seed)``, scaled to max |coordinate| = 1;
    per step, node i moves along the sum over j != i of the unit vector (p_i - p_j) / d
    times repulsion c^2 / d minus attraction d^2 / c (linked pairs), by at most a
    temperature 0.1 (1 - t / T); d carries the implementation's 1e-9 softening, as does the
    displacement's length. Finally centred and scaled into [-1, 1].
    """
    adj = np.zeros((n, n))
    for s, t in edge_index.T.tolist():
        if s != t:
            adj[s, t] = adj[t, s] = 1.0
    lap = np.diag(adj.sum(1)) - adj
    vecs = np.linalg.eigh(lap)[1]
    pos = vecs[:, 1:3] + 0.01 * np.random.default_rng(seed).standard_normal((n, 2))
    pos = pos / np.abs(pos).max()
    c = 1.0 / math.sqrt(n)
    for t in range(iterations):
        new = pos.copy()
        for i in range(n):
            disp = np.zeros(2)
            for j in range(n):
                if j == i:
                    continue
                d = math.hypot(*(pos[i] - pos[j])) + 1e-9
                magnitude = c * c / d - adj[i, j] * d * d / c  # repulsion - attraction
                disp += (pos[i] - pos[j]) / d * magnitude
            length = math.hypot(*disp) + 1e-9
            new[i] = pos[i] + disp / length * min(length, 0.1 * (1.0 - t / iterations))
        pos = new
    pos = pos - pos.mean(0)
    return pos / np.abs(pos).max()


# a kite with a tail, given with one direction per link, a duplicate and a self-loop
_KITE = torch.tensor([[0, 0, 1, 1, 2, 3, 5, 6, 6, 4], [1, 2, 2, 3, 3, 4, 4, 5, 6, 5]])


@pytest.mark.parametrize("iterations", [1, 3, 12])
@pytest.mark.parametrize("seed", [0, 5])
def test_spring_layout_matches_a_loop_reference(iterations, seed):
    pos = G.spring_layout(_KITE, 7, iterations=iterations, seed=seed)
    ref = _spring_reference(_KITE, 7, iterations, seed)
    np.testing.assert_allclose(pos, ref, rtol=0, atol=1e-12)
    np.testing.assert_allclose(pos.mean(0), 0.0, atol=1e-15)  # centred ...
    assert np.abs(pos).max() == 1.0  # ... and scaled into [-1, 1]


def test_spring_layout_defaults():
    default = G.spring_layout(_KITE, 7)
    np.testing.assert_array_equal(default, G.spring_layout(_KITE, 7, iterations=300, seed=0))


def test_uniform_entropy_counts_nodes_without_in_edges():
    edges = torch.tensor([[1, 2, 0], [0, 0, 1]])  # nodes 2, 3 and 4 receive nothing
    u = G.uniform_entropy(edges, 5)
    torch.testing.assert_close(u, torch.tensor([math.log(2), 0.0, 0.0, 0.0, 0.0],
                                               dtype=torch.float64))
    alpha = torch.tensor([[0.5], [0.5], [1.0]], dtype=torch.float64)
    h = G.attention_entropy(edges, alpha, 5)
    torch.testing.assert_close(h[:, 0], u)  # uniform weights reach the bound


def test_attention_entropy_float32_zero_weights():
    """Float32 weights that are exactly 0 (a dropped edge) count as 0 log 0 = 0, not NaN."""
    edges = torch.tensor([[0, 1, 2, 1], [1, 1, 1, 2]])
    alpha = torch.tensor([0.5, 0.0, 0.5, 1.0])
    h = G.attention_entropy(edges, alpha, 3)
    assert h.dtype == torch.float32
    torch.testing.assert_close(h[:, 0], torch.tensor([0.0, math.log(2), 0.0]))


@pytest.mark.parametrize(
    ("alpha", "error", "match"),
    [
        ([0.5, 0.5], TypeError, r"^alpha must be a torch\.Tensor, got list"),
        (torch.ones(2, dtype=torch.int64), TypeError,
         r"^alpha must be a floating-point tensor, got dtype torch\.int64"),
        (torch.tensor(0.5), ValueError, r"^alpha must have at least 1 dimensions"),
        (torch.tensor([[0.0, 0.5], [-0.25, 1.0]]), ValueError,  # 0 is a valid weight
         r"^alpha must hold attention weights \(>= 0\), got -0\.25$"),
        (torch.tensor([float("nan"), 1.0]), ValueError,
         r"^alpha must hold attention weights \(>= 0\), got nan$"),
    ],
)
def test_attention_entropy_names_a_bad_alpha(alpha, error, match):
    edges = torch.tensor([[0, 1], [1, 0]])
    with pytest.raises(error, match=match):
        G.attention_entropy(edges, alpha, 2)


def _lookup_head_model(k: int) -> G.LookupModel:
    """GATv2 with 2 heads of width k: head 0 built by hand to look up the asked key, head 1
    all zeros (every score 0: uniform weights)."""
    model = G.LookupModel("gatv2", k, hidden=k, heads=2)
    conv = model.conv
    with torch.no_grad():
        for p in (conv.lin_l.weight, conv.lin_l.bias, conv.lin_r.weight, conv.att):
            p.zero_()
        conv.lin_l.weight[:k, :k] = torch.eye(k)  # z_j = one_hot(id of key j)
        conv.lin_r.weight[:k, :k] = torch.eye(k)  # r_i = one_hot(asked) - 1
        conv.lin_r.bias[:k] = -1.0
        conv.att[0, 0] = 1.0
    return model


def test_lookup_measurements_on_a_hand_built_lookup_head():
    """s_ij = sum LeakyReLU(r_i + z_j): the asked key scores 1 - 0.2 (k - 1), any other key
    -0.2 (k - 2), a margin of 0.8; so every query's top key is the one it asks for."""
    k = 4
    model = _lookup_head_model(k)
    b = G.lookup_batch(k, 5, torch.Generator().manual_seed(2))
    weight = math.exp(0.8) / (math.exp(0.8) + k - 1)
    hit, w = G.asked_key_hits(model, b, head=0)
    assert hit == 1.0 and w == pytest.approx(weight, abs=1e-6)
    assert G.asked_key_hits(model, b) == (hit, w)  # head 0 is the default
    hit1, w1 = G.asked_key_hits(model, b, head=1)  # uniform: key 0 wins every argmax
    assert hit1 == 0.25 and w1 == pytest.approx(0.25, abs=1e-7)
    # the asked keys of a graph are a permutation: k different top keys, the mode holds 1 / k
    assert G.top_key_agreement(model, b, head=0) == 0.25
    assert G.top_key_agreement(model, b) == 0.25  # head 0 is the default
    assert G.top_key_agreement(model, b, head=1) == 1.0


def test_lookup_weights_reject_reordered_edges_by_name():
    model = _lookup_head_model(3)
    b = G.lookup_batch(3, 2, torch.Generator().manual_seed(0))
    shuffled = b._replace(edge_index=b.edge_index.flip(1))
    with pytest.raises(ValueError, match=r"^the attention's edges are not in lookup_batch's "
                       r"order \(graph, query, key\)$"):
        G.asked_key_hits(model, shuffled)


def test_lookup_model_defaults_and_bad_k():
    torch.manual_seed(0)
    default = G.LookupModel("gatv2", 3)
    torch.manual_seed(0)
    explicit = G.LookupModel("gatv2", 3, hidden=16, heads=4)
    assert default.conv.heads == 4 and default.conv.out_features == 16
    for (name, p), q in zip(default.state_dict().items(), explicit.state_dict().values(),
                            strict=True):
        assert torch.equal(p, q), name
    with pytest.raises(ValueError, match=r"^k must be positive, got 0"):
        G.LookupModel("gat", 0)
    with pytest.raises(TypeError, match=r"^k must be an int, got float"):
        G.LookupModel("gat", 2.0)


def test_lookup_model_read_out_with_and_without_relu():
    torch.manual_seed(0)
    with_relu = G.LookupModel("gat", 3, hidden=4, heads=2)
    torch.manual_seed(0)
    linear = G.LookupModel("gat", 3, hidden=4, heads=2, readout_relu=False)
    assert with_relu.readout_relu is True and linear.readout_relu is False
    b = G.lookup_batch(3, 2, torch.Generator().manual_seed(1))
    with torch.no_grad():
        h = with_relu.conv(b.x, b.edge_index)  # (N, h d): the same weights in both
        assert (h < 0).any() and (h > 0).any()  # the ReLU changes something
        torch.testing.assert_close(with_relu(b.x, b.edge_index),
                                   with_relu.out(torch.relu(h)), rtol=0, atol=0)
        torch.testing.assert_close(linear(b.x, b.edge_index), linear.out(h),
                                   rtol=0, atol=0)
        logits, (_, alpha) = linear(b.x, b.edge_index, return_attention=True)
        torch.testing.assert_close(logits, linear.out(h), rtol=0, atol=0)
        _, (_, alpha_ref) = with_relu(b.x, b.edge_index, return_attention=True)
        torch.testing.assert_close(alpha, alpha_ref, rtol=0, atol=0)
        logits_r, _ = with_relu(b.x, b.edge_index, return_attention=True)
        torch.testing.assert_close(logits_r, with_relu.out(torch.relu(h)), rtol=0, atol=0)
    with pytest.raises(TypeError, match=r"^readout_relu must be a bool, got int$"):
        G.LookupModel("gat", 3, readout_relu=1)


def _adam_step(params, grads, moments, t: int, lr: float, weight_decay: float = 0.0):
    """One step of Adam (beta 0.9, 0.999, eps 1e-8; L2 weight decay added to the gradient),
    written out; ``t`` counts from 0, ``moments`` is a list of ``[m, v]`` per parameter."""
    with torch.no_grad():
        for p, gr, (m, v) in zip(params, grads, moments, strict=True):
            gr = gr + weight_decay * p
            m.mul_(0.9).add_(0.1 * gr)
            v.mul_(0.999).add_(0.001 * gr * gr)
            m_hat = m / (1 - 0.9 ** (t + 1))
            v_hat = v / (1 - 0.999 ** (t + 1))
            p.sub_(lr * m_hat / (v_hat.sqrt() + 1e-8))


def _adam_cosine_reference(model, k, steps, batch, lr, seed, horizon):
    """train_lookup written out: Adam by hand, with the learning rate of step t (from 0)
    equal to lr (1 + cos(pi t / horizon)) / 2."""
    g = torch.Generator().manual_seed(seed)
    params = list(model.parameters())
    moments = [[torch.zeros_like(p), torch.zeros_like(p)] for p in params]
    losses = []
    for t in range(steps):
        b = G.lookup_batch(k, batch, g)
        loss = torch.nn.functional.cross_entropy(model(b.x, b.edge_index)[b.query_mask], b.y)
        grads = torch.autograd.grad(loss, params)
        _adam_step(params, grads, moments, t, lr * (1 + math.cos(math.pi * t / horizon)) / 2)
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("horizon", [None, 6])
def test_train_lookup_is_adam_with_a_cosine_schedule(horizon):
    torch.manual_seed(0)
    model = G.LookupModel("gatv2", 3, hidden=4, heads=2)
    ref = G.LookupModel("gatv2", 3, hidden=4, heads=2)
    ref.load_state_dict(model.state_dict())
    state = {name: p.clone() for name, p in model.state_dict().items()}
    losses = G.train_lookup(model, steps=3, batch=5, lr=0.05, seed=4, horizon=horizon)
    ref_losses = _adam_cosine_reference(ref, 3, 3, 5, 0.05, 4, horizon or 3)
    # the losses of 3 steps (the 3rd sees the decayed rate of step 2); parameters are
    # compared after one step only: some gradients are round-off noise (shifts the softmax
    # ignores), which Adam's normalisation turns into lr-sized, run-dependent moves
    np.testing.assert_allclose(losses, ref_losses, rtol=0, atol=1e-5)
    model.load_state_dict(state)
    ref.load_state_dict(state)
    G.train_lookup(model, steps=1, batch=5, lr=0.05, seed=4, horizon=horizon)
    _adam_cosine_reference(ref, 3, 1, 5, 0.05, 4, 1)
    for (name, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-6, msg=name)


def test_train_lookup_repeats_the_start_of_a_longer_run():
    """With horizon = the longer run's length, its first steps are reproduced exactly."""
    torch.manual_seed(0)
    model = G.LookupModel("gat", 3, hidden=4, heads=2)
    state = {name: p.clone() for name, p in model.state_dict().items()}
    long = G.train_lookup(model, steps=6, batch=4)
    model.load_state_dict(state)
    assert G.train_lookup(model, steps=4, batch=4, horizon=6) == long[:4]
    model.load_state_dict(state)
    assert G.train_lookup(model, steps=4, batch=4)[3] != long[3]  # its own horizon: not


class _ConstantLogits(torch.nn.Module):
    """A stand-in for LookupModel that costs nothing: the same logits ``w`` for every node."""

    k = 2

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(2))

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        return self.w.expand(x.shape[0], 2)  # (N, k)


def test_train_lookup_defaults():
    """batch, lr, seed and horizon by comparison with explicit values at 2 steps; the 400
    default steps (seconds with a real model) with a stand-in model of one parameter."""
    torch.manual_seed(0)
    model = G.LookupModel("gat", 3, hidden=4, heads=2)
    state = {name: p.clone() for name, p in model.state_dict().items()}
    default = G.train_lookup(model, steps=2)
    default_params = [p.clone() for p in model.parameters()]
    model.load_state_dict(state)
    explicit = G.train_lookup(model, steps=2, batch=32, lr=0.01, seed=0, horizon=2)
    assert default == explicit
    for p, q in zip(default_params, model.parameters(), strict=True):
        assert torch.equal(p, q)
    assert len(G.train_lookup(_ConstantLogits())) == 400


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"steps": 0}, ValueError, r"^steps must be positive, got 0"),
        ({"steps": 2.0}, TypeError, r"^steps must be an int, got float"),
        ({"steps": 2, "horizon": 0}, ValueError, r"^horizon must be positive, got 0"),
        ({"steps": 2, "horizon": 1.5}, TypeError, r"^horizon must be an int, got float"),
    ],
)
def test_train_lookup_names_bad_steps_and_horizon(kwargs, error, match):
    model = G.LookupModel("gat", 2, hidden=2, heads=1)
    with pytest.raises(error, match=match):
        G.train_lookup(model, **kwargs)


def test_mean_aggregation_names_bad_widths():
    with pytest.raises(ValueError, match=r"^in_features must be positive, got 0"):
        G.MeanAggregation(0, 2)
    with pytest.raises(ValueError, match=r"^out_features must be positive, got 0"):
        G.MeanAggregation(3, 0)
    with pytest.raises(TypeError, match=r"^out_features must be an int, got float"):
        G.MeanAggregation(3, 2.0)


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        (("gcn", 3, 2), {}, ValueError,
         r"^kind must be one of \('gat', 'gatv2', 'uniform', 'mlp'\), got 'gcn'"),
        (("mlp", 0, 2), {}, ValueError, r"^in_features must be positive, got 0"),
        (("mlp", 3, 0), {}, ValueError, r"^num_classes must be positive, got 0"),
        (("mlp", 3, 2), {"hidden": 0}, ValueError, r"^hidden must be positive, got 0"),
        (("mlp", 3, 2), {"heads": 0}, ValueError, r"^heads must be positive, got 0"),
        (("mlp", 3, 2), {"heads": 2.0}, TypeError, r"^heads must be an int, got float"),
        (("mlp", 3, 2), {"dropout": True}, TypeError,
         r"^dropout must be a real number, got bool"),
        (("mlp", 3, 2), {"dropout": "0.5"}, TypeError,
         r"^dropout must be a real number, got str"),
        (("mlp", 3, 2), {"dropout": 1.0}, ValueError, r"^dropout must be in \[0, 1\), got 1\.0"),
        (("mlp", 3, 2), {"dropout": -0.1}, ValueError,
         r"^dropout must be in \[0, 1\), got -0\.1"),
    ],
)
def test_node_classifier_names_each_bad_argument(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        G.NodeClassifier(*args, **kwargs)


def test_node_classifier_defaults_and_dropout_bounds():
    for kind in G.KINDS:
        torch.manual_seed(0)
        default = G.NodeClassifier(kind, 5, 3)
        torch.manual_seed(0)
        explicit = G.NodeClassifier(kind, 5, 3, hidden=8, heads=4, dropout=0.5)
        assert default.dropout == 0.5
        for (name, p), q in zip(default.state_dict().items(), explicit.state_dict().values(),
                                strict=True):
            assert torch.equal(p, q), (kind, name)
    assert G.NodeClassifier("mlp", 3, 2, dropout=0.0).dropout == 0.0  # 0 is allowed
    assert G.NodeClassifier("mlp", 3, 2, dropout=0).dropout == 0.0  # an int is a real


@pytest.mark.parametrize("kind", G.KINDS)
def test_node_classifier_eval_is_the_two_layers_without_dropout(kind):
    """In eval mode: logits = layer2(elu(layer1(x))), each layer called on its own."""
    data = G.karate_club()
    torch.manual_seed(0)
    model = G.NodeClassifier(kind, 34, 4, hidden=3, heads=2, dropout=0.6).eval()

    def run(layer, h):
        return layer(h) if kind == "mlp" else layer(h, data.edge_index)

    expected = run(model.layer2, torch.nn.functional.elu(run(model.layer1, data.x)))
    torch.testing.assert_close(model(data.x, data.edge_index), expected, rtol=0, atol=0)


def test_node_classifier_dropout_acts_on_both_layer_inputs_in_training():
    """mlp, identity-like weights: with ``x`` all ones and biases 0, layer 1's input is the
    dropout mask times 1 / (1 - p); counting zeros of the hidden layer shows the rate."""
    torch.manual_seed(0)
    p = 0.5
    model = G.NodeClassifier("mlp", 1, 1, hidden=1, heads=1, dropout=p).train()
    with torch.no_grad():
        for lin in (model.layer1, model.layer2):
            lin.weight.fill_(1.0)
            lin.bias.zero_()
    x = torch.ones(4000, 1)
    out = model(x, torch.zeros(2, 0, dtype=torch.int64))  # (N, 1)
    # layer 1 sees 0 or 2 (kept and scaled), elu keeps both; layer 2's dropout zeroes half
    # again: the output is 0 (prob. 1 - (1 - p)^2 = 0.75) or 2 / (1 - p) = 4
    values = set(out.flatten().tolist())
    assert values == {0.0, 4.0}
    rate = float((out == 0).double().mean())
    se = math.sqrt(0.75 * 0.25 / 4000)
    assert abs(rate - 0.75) < 5 * se
    model.eval()
    assert torch.equal(model(x, torch.zeros(2, 0, dtype=torch.int64)), torch.ones(4000, 1))


def test_lookup_batch_names_bad_arguments():
    g = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match=r"^k must be at least 2 \(one key leaves nothing "
                       r"to look up\), got 1"):
        G.lookup_batch(1, 3, g)
    with pytest.raises(ValueError, match=r"^k must be positive, got 0"):
        G.lookup_batch(0, 3, g)
    with pytest.raises(TypeError, match=r"^batch must be an int, got float"):
        G.lookup_batch(3, 2.0, g)
    with pytest.raises(TypeError, match=r"^generator must be a torch\.Generator, got int"):
        G.lookup_batch(3, 2, 0)
    assert G.lookup_batch(2, 1, g).x.shape == (4, 5)  # k = 2 is the smallest allowed


def test_knn_graph_names_bad_points():
    with pytest.raises(TypeError, match=r"^points must be a floating-point tensor"):
        G.knn_graph(torch.zeros(3, 2, dtype=torch.int64), 1)
    with pytest.raises(ValueError, match=r"^points must have at least 2 dimensions"):
        G.knn_graph(torch.zeros(3), 1)
    with pytest.raises(ValueError, match=r"^points must have shape \(N, d\), got shape "
                       r"\(3, 2, 1\)"):
        G.knn_graph(torch.zeros(3, 2, 1), 1)
    with pytest.raises(ValueError, match=r"^k = 3 neighbours need at least k \+ 1 = 4 "
                       r"points, got 3"):
        G.knn_graph(torch.zeros(3, 2), 3)
    with pytest.raises(ValueError, match=r"^k must be positive, got 0"):
        G.knn_graph(torch.zeros(3, 2), 0)
    with pytest.raises(TypeError, match=r"^symmetric must be a bool, got int"):
        G.knn_graph(torch.zeros(3, 2), 1, symmetric=1)
    assert G.knn_graph(torch.tensor([[0.0], [1.0], [3.0]]), 2).shape == (2, 6)  # k = N - 1


def test_digits_graph_defaults_split_and_features(monkeypatch):
    """The kNN graph is stubbed (its own tests check it): the call it receives, the split
    and the features are checked here, at the cost of loading the digits only."""
    from sklearn.datasets import load_digits

    calls = []

    def fake_knn(points, k, symmetric=False):
        calls.append((tuple(points.shape), k, symmetric))
        return torch.zeros(2, 0, dtype=torch.int64)

    monkeypatch.setattr(G, "knn_graph", fake_knn)
    data = G.digits_graph()
    assert calls == [((1797, 64), 10, True)]  # k = 10, symmetric
    digits = load_digits()
    np.testing.assert_array_equal(data.x.numpy(), (digits.data / 16).astype(np.float32))
    assert data.x.dtype == torch.float32 and data.y.dtype == torch.int64  # as documented
    assert data.x.max() == 1.0 and data.y.tolist() == digits.target.tolist()
    assert torch.bincount(data.y[data.train_mask]).tolist() == [5] * 10
    assert torch.equal(data.test_mask, ~data.train_mask)
    explicit = G.digits_graph(k=10, labelled_per_class=5, seed=0)
    assert torch.equal(data.train_mask, explicit.train_mask)
    assert not torch.equal(G.digits_graph(seed=1).train_mask, data.train_mask)
    # digit 8 has the fewest images, 174: all of them may be labelled, not one more
    all8 = G.digits_graph(labelled_per_class=174)
    assert bool(all8.train_mask[all8.y == 8].all())
    with pytest.raises(ValueError, match=r"^labelled_per_class = 175 exceeds the 174 images "
                       r"of digit 8$"):
        G.digits_graph(labelled_per_class=175)
    with pytest.raises(ValueError, match=r"^labelled_per_class must be positive, got 0"):
        G.digits_graph(labelled_per_class=0)


def test_accuracy_names_each_bad_argument():
    logits, y = torch.zeros(3, 2), torch.zeros(3, dtype=torch.int64)
    mask = torch.ones(3, dtype=torch.bool)
    assert G.accuracy(logits, y, mask) == 1.0  # argmax of ties is class 0
    with pytest.raises(TypeError, match=r"^logits must be a floating-point tensor"):
        G.accuracy(logits.long(), y, mask)
    with pytest.raises(ValueError, match=r"^logits must have at least 2 dimensions"):
        G.accuracy(logits[:, 0], y, mask)
    with pytest.raises(TypeError, match=r"^mask must be a bool tensor \(True = node "
                       r"counted\), got torch\.int64; an integer tensor would select rows"):
        G.accuracy(logits, y, mask.long())
    with pytest.raises(TypeError, match=r"^mask must be a bool tensor .*, got list"):
        G.accuracy(logits, y, [True, True, True])
    with pytest.raises(ValueError, match=r"^logits \(N, C\), y \(N,\) and mask \(N,\) must "
                       r"agree in N, got logits \(3, 2\), y list, mask \(3,\)"):
        G.accuracy(logits, [0, 0, 0], mask)
    with pytest.raises(ValueError, match=r"^logits .* must agree in N, got logits "
                       r"\(3, 2, 1\), y \(3,\), mask \(3,\)"):
        G.accuracy(logits[..., None], y, mask)
    with pytest.raises(ValueError, match=r"must agree in N, got logits \(3, 2\), y \(3,\), "
                       r"mask \(2,\)$"):
        G.accuracy(logits, y, mask[:2])
    with pytest.raises(ValueError, match=r"^mask selects no node: accuracy is undefined$"):
        G.accuracy(logits, y, ~mask)
    one = torch.tensor([False, True, False])  # one node selected is enough
    assert G.accuracy(torch.tensor([[0.0, 1.0]] * 3), y, one) == 0.0


def test_ranking_consistency_names_bad_arguments():
    att = torch.rand(2, 3)
    mask = torch.ones(2, 3, dtype=torch.bool)
    with pytest.raises(TypeError, match=r"^attention must be a floating-point tensor"):
        G.ranking_consistency(att.long(), mask)
    with pytest.raises(ValueError, match=r"^attention must have at least 2 dimensions"):
        G.ranking_consistency(att[0], mask)
    with pytest.raises(TypeError, match=r"^mask must be a bool tensor \(True = query attends "
                       r"to key\), got torch\.float32$"):
        G.ranking_consistency(att, mask.float())
    with pytest.raises(TypeError, match=r"^mask must be a bool tensor .*, got list$"):
        G.ranking_consistency(att, mask.tolist())
    with pytest.raises(ValueError, match=r"^attention \(2, 3\) and mask \(1, 3\) must be the "
                       r"same \(L_q, L_k\) shape$"):
        G.ranking_consistency(att, mask[:1])
    with pytest.raises(ValueError, match=r"^attention \(1, 2, 3\) and mask \(1, 2, 3\)"):
        G.ranking_consistency(att[None], mask[None])


def test_ranking_consistency_against_a_pair_loop():
    """Random weights and masks against the definition, pair by pair."""
    g = torch.Generator().manual_seed(0)
    for trial in range(20):
        lq, lk = 2 + trial % 4, 2 + trial % 5
        att = torch.randint(0, 3, (lq, lk), generator=g).double()  # ties on purpose
        mask = torch.rand(lq, lk, generator=g) < 0.7
        consistent = total = 0
        for j in range(lk):
            for jj in range(lk):
                if j == jj:
                    continue
                seen = [i for i in range(lq) if mask[i, j] and mask[i, jj]]
                if len(seen) < 2:
                    continue
                above = any(att[i, j] > att[i, jj] for i in seen)
                below = any(att[i, j] < att[i, jj] for i in seen)
                total += 1
                consistent += not (above and below)
        got = G.ranking_consistency(att, mask)
        if total == 0:
            assert math.isnan(got)
        else:
            assert got == pytest.approx(consistent / total, abs=1e-12)


class _LinearOnX(torch.nn.Module):
    """A node classifier that ignores the edges (one Linear layer): cheap to train."""

    def __init__(self, d: int, c: int) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(d, c)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        return self.lin(x)


def test_train_node_classifier_is_adam_with_weight_decay():
    data = G.karate_club()
    torch.manual_seed(0)
    model, ref = _LinearOnX(34, 4), _LinearOnX(34, 4)
    ref.load_state_dict(model.state_dict())
    run = G.train_node_classifier(model, data, steps=3, lr=0.05, weight_decay=0.1)
    params = list(ref.parameters())
    moments = [[torch.zeros_like(p), torch.zeros_like(p)] for p in params]
    losses = []
    for t in range(3):
        logits = ref(data.x, data.edge_index)
        loss = torch.nn.functional.cross_entropy(logits[data.train_mask],
                                                 data.y[data.train_mask])
        _adam_step(params, torch.autograd.grad(loss, params), moments, t, 0.05, 0.1)
        losses.append(loss.item())
    np.testing.assert_allclose(run["loss"], losses, rtol=0, atol=1e-6)
    for p, q in zip(model.parameters(), params, strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-6)
    with torch.no_grad():
        logits = ref(data.x, data.edge_index)
    assert run["train_acc"] == G.accuracy(logits, data.y, data.train_mask)
    assert run["test_acc"] == G.accuracy(logits, data.y, data.test_mask)


def test_train_node_classifier_defaults_and_modes():
    data = G.karate_club()
    torch.manual_seed(0)
    model = _LinearOnX(34, 4)
    state = {name: p.clone() for name, p in model.state_dict().items()}
    default = G.train_node_classifier(model, data)
    model.load_state_dict(state)
    assert default == G.train_node_classifier(model, data, steps=200, lr=0.01,
                                              weight_decay=5e-4)
    assert len(default["loss"]) == 200
    # trained in training mode (dropout on), evaluated in eval mode (dropout off)
    torch.manual_seed(1)
    net = G.NodeClassifier("mlp", 34, 4, hidden=2, heads=2, dropout=0.5).eval()
    run = G.train_node_classifier(net, data, steps=2)
    assert not net.training
    with torch.no_grad():
        logits = net(data.x, data.edge_index)
    assert run["test_acc"] == G.accuracy(logits, data.y, data.test_mask)
    # a model handed over in eval mode is trained in training mode: the first loss is that
    # of a forward with dropout, drawn from the same seed
    torch.manual_seed(1)
    net = G.NodeClassifier("mlp", 34, 4, hidden=2, heads=2, dropout=0.5).eval()
    twin = G.NodeClassifier("mlp", 34, 4, hidden=2, heads=2, dropout=0.5).train()
    twin.load_state_dict(net.state_dict())
    torch.manual_seed(2)
    first = G.train_node_classifier(net, data, steps=1)["loss"][0]
    torch.manual_seed(2)
    logits = twin(data.x, data.edge_index)
    expected = torch.nn.functional.cross_entropy(logits[data.train_mask],
                                                 data.y[data.train_mask])
    assert first == expected.item()
    with pytest.raises(ValueError, match=r"^steps must be positive, got 0"):
        G.train_node_classifier(model, data, steps=0)


def test_node_classifier_layer_widths():
    """Layer 1: heads heads of width hidden (the other kinds one layer of width
    heads * hidden); layer 2: one head (or a plain layer) onto the classes."""
    hidden, heads = 3, 2  # 6 = 3 * 2, unlike 3 + 2 or 3 ** 2
    shapes = {
        "gat": {"layer1.lin.weight": (6, 5), "layer1.att_src": (1, 2, 3),
                "layer1.bias": (6,), "layer2.lin.weight": (4, 6),
                "layer2.att_src": (1, 1, 4), "layer2.bias": (4,)},
        "gatv2": {"layer1.lin_l.weight": (6, 5), "layer1.att": (1, 2, 3),
                  "layer1.bias": (6,), "layer2.lin_l.weight": (4, 6),
                  "layer2.att": (1, 1, 4), "layer2.bias": (4,)},
        "uniform": {"layer1.lin.weight": (6, 5), "layer1.bias": (6,),
                    "layer2.lin.weight": (4, 6), "layer2.bias": (4,)},
        "mlp": {"layer1.weight": (6, 5), "layer1.bias": (6,), "layer2.weight": (4, 6),
                "layer2.bias": (4,)},
    }
    for kind, expected in shapes.items():
        model = G.NodeClassifier(kind, 5, 4, hidden=hidden, heads=heads)
        got = {k: tuple(v.shape) for k, v in model.state_dict().items()}
        assert {k: got[k] for k in expected} == expected, kind
        if kind in ("gat", "gatv2"):
            assert model.layer1.concat and model.layer1.heads == 2
            assert model.layer2.heads == 1


def test_lookup_batch_draws_only_from_its_generator_and_is_one_hot():
    torch.manual_seed(0)
    a = G.lookup_batch(3, 4, torch.Generator().manual_seed(5))
    torch.manual_seed(1)  # torch's global generator must play no part
    b = G.lookup_batch(3, 4, torch.Generator().manual_seed(5))
    for name, t in a._asdict().items():
        assert torch.equal(t, getattr(b, name)), name
    # features are 0/1: key rows [id, value, 0] and query rows [asked, 0, 1] hold two ones
    assert set(a.x.unique().tolist()) == {0.0, 1.0}
    assert (a.x.sum(1) == 2).all()
    # the ids returned are those the features encode
    x = a.x.reshape(4, 6, 7)
    assert torch.equal(a.value_of_key, x[:, :3, 3:6].argmax(-1))
    assert torch.equal(a.key_of_query, x[:, 3:, :3].argmax(-1))


def test_lookup_accuracy_against_a_per_query_count():
    torch.manual_seed(3)
    model = G.LookupModel("gatv2", k=4, hidden=8, heads=2)  # untrained: about 1/k right
    b = G.lookup_batch(4, 30, torch.Generator().manual_seed(7))
    with torch.no_grad():
        logits = model(b.x, b.edge_index)[b.query_mask]  # (30 * 4, 4)
    right = sum(int(max(range(4), key=lambda v: row[v]) == int(y))
                for row, y in zip(logits.tolist(), b.y, strict=True))
    assert G.lookup_accuracy(model, batch=30, seed=7) == right / len(b.y)


def test_lookup_accuracy_defaults_are_200_graphs_drawn_with_seed_12345():
    torch.manual_seed(4)
    model = G.LookupModel("gat", k=4, hidden=8, heads=2)
    explicit = G.lookup_accuracy(model, batch=200, seed=12345)
    assert G.lookup_accuracy(model) == explicit
    # and the defaults matter: another batch size or seed measures another number
    assert G.lookup_accuracy(model, batch=201, seed=12345) != explicit
    assert G.lookup_accuracy(model, batch=200, seed=12346) != explicit


# ----------------------------------------------------------------------------- the sweep
@pytest.mark.parametrize("kind", ["gat", "gatv2"])
@pytest.mark.parametrize(("k", "hidden", "heads"), [(2, 1, 1), (3, 5, 2), (8, 16, 4), (5, 3, 7)])
def test_lookup_parameter_count_equals_the_models_parameters(kind, k, hidden, heads):
    model = G.LookupModel(kind, k, hidden=hidden, heads=heads)
    assert G.lookup_parameter_count(kind, k, hidden, heads) == sum(
        p.numel() for p in model.parameters())


def test_lookup_parameter_count_by_hand_for_the_chapter_setting():
    # k = 8, 4 heads of width 16: h d = 64; GAT 64 (17 + 1 + 1 + 1 + 8) + 8,
    # GATv2 64 (2 (17 + 1) + 1 + 1 + 8) + 8
    assert G.lookup_parameter_count("gat", 8, 16, 4) == 64 * 28 + 8 == 1800
    assert G.lookup_parameter_count("gatv2", 8, 16, 4) == 64 * 46 + 8 == 2952


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        (("mlp", 3, 2, 2), ValueError, r"^kind must be 'gat' or 'gatv2', got 'mlp'$"),
        (("gat", 0, 2, 2), ValueError, r"^k must be positive, got 0$"),
        (("gat", 3, 0, 2), ValueError, r"^hidden must be positive, got 0$"),
        (("gatv2", 3, 2, 0), ValueError, r"^heads must be positive, got 0$"),
        (("gatv2", 3, 2.0, 2), TypeError, r"^hidden must be an int, got float$"),
    ],
)
def test_lookup_parameter_count_names_bad_arguments(args, error, match):
    with pytest.raises(error, match=match):
        G.lookup_parameter_count(*args)


def _nearest_width_by_search(k: int, heads: int, gatv2_hidden: int) -> int:
    """Every GAT width up to 3 gatv2_hidden + 2, the first with the smallest count gap."""
    target = G.lookup_parameter_count("gatv2", k, gatv2_hidden, heads)
    gaps = [(abs(G.lookup_parameter_count("gat", k, d, heads) - target), d)
            for d in range(1, 3 * gatv2_hidden + 3)]
    return min(gaps)[1]


@PROPERTY
@given(k=st.integers(2, 24), heads=st.integers(1, 8), gatv2_hidden=st.integers(1, 40))
def test_matched_gat_hidden_is_the_nearest_width(k, heads, gatv2_hidden):
    d = G.matched_gat_hidden(k, heads, gatv2_hidden)
    assert d == _nearest_width_by_search(k, heads, gatv2_hidden)
    target = G.lookup_parameter_count("gatv2", k, gatv2_hidden, heads)
    gap = abs(G.lookup_parameter_count("gat", k, d, heads) - target)
    assert gap <= heads * (3 * k + 4) / 2  # half a width step of GAT
    assert gap / target <= (3 * k + 4) / (2 * gatv2_hidden * (5 * k + 6))


def test_matched_gat_hidden_by_hand_and_on_a_tie():
    # k = 4: 26 parameters per unit of h d for GATv2, 16 for GAT, so 16 -> 26 exactly
    assert G.matched_gat_hidden(4, 3, 16) == 26
    assert G.lookup_parameter_count("gat", 4, 26, 3) == G.lookup_parameter_count(
        "gatv2", 4, 16, 3)
    # k = 8: 46 / 28 per unit; 16 * 46 / 28 = 26.3, so 26 (gap 8 h) rather than 27 (20 h)
    assert G.matched_gat_hidden(8, 2, 16) == 26
    # k = 2: 16 per unit for GATv2, 10 for GAT; width 1 -> 1.6, so 2 (gap 4) beats 1 (gap 6)
    assert G.matched_gat_hidden(2, 1, 1) == 2
    # k = 4, width 4: 4 * 26 / 16 = 6.5 exactly, a tie between 6 and 7: the smaller wins
    assert G.matched_gat_hidden(4, 1, 4) == 6
    assert (G.lookup_parameter_count("gatv2", 4, 4, 1)
            - G.lookup_parameter_count("gat", 4, 6, 1)
            == G.lookup_parameter_count("gat", 4, 7, 1)
            - G.lookup_parameter_count("gatv2", 4, 4, 1))


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        ((4, 2, 0), ValueError, r"^gatv2_hidden must be positive, got 0$"),
        ((4, 2, 1.5), TypeError, r"^gatv2_hidden must be an int, got float$"),
        ((0, 2, 16), ValueError, r"^k must be positive, got 0$"),
        ((4, 0, 16), ValueError, r"^heads must be positive, got 0$"),
    ],
)
def test_matched_gat_hidden_names_bad_arguments(args, error, match):
    with pytest.raises(error, match=match):
        G.matched_gat_hidden(*args)


def _lookup_run_by_hand(kind, k, heads, hidden, seed, steps, batch, lr, readout_relu=True):
    """lookup_run written out from the pieces its docstring names."""
    torch.manual_seed(seed)
    model = G.LookupModel(kind, k, hidden=hidden, heads=heads, readout_relu=readout_relu)
    losses = G.train_lookup(model, steps=steps, batch=batch, lr=lr, seed=seed)
    probe = G.lookup_batch(k, 100, torch.Generator().manual_seed(7))
    tail = losses[-50:] if steps > 50 else losses
    return {
        "kind": kind, "k": k, "heads": heads, "hidden": hidden, "seed": seed,
        "steps": steps, "params": G.lookup_parameter_count(kind, k, hidden, heads),
        "test_acc": G.lookup_accuracy(model, batch=200, seed=12345),
        "loss_end": float(np.mean(tail)),
        "agreement": [G.top_key_agreement(model, probe, head=m) for m in range(heads)],
        "hit": [G.asked_key_hits(model, probe, head=m)[0] for m in range(heads)],
    }


@pytest.mark.parametrize(("kind", "steps"), [("gat", 3), ("gatv2", 3), ("gatv2", 53)])
def test_lookup_run_against_the_pieces_it_names(kind, steps):
    run = G.lookup_run(kind, 3, 2, 4, seed=5, steps=steps, batch=4, lr=0.02)
    ref = _lookup_run_by_hand(kind, 3, 2, 4, 5, steps, 4, 0.02)
    assert run.keys() == ref.keys()
    loss_end = run.pop("loss_end")
    assert loss_end == pytest.approx(ref.pop("loss_end"), abs=1e-12)
    assert run == ref
    if kind == "gat":  # static heads: the same top key for every query of a graph
        assert run["agreement"] == [1.0, 1.0]


def test_lookup_run_passes_readout_relu_to_the_model():
    run = G.lookup_run("gatv2", 3, 2, 4, seed=5, steps=3, batch=4, readout_relu=False)
    ref = _lookup_run_by_hand("gatv2", 3, 2, 4, 5, 3, 4, 0.01, readout_relu=False)
    with_relu = G.lookup_run("gatv2", 3, 2, 4, seed=5, steps=3, batch=4)
    assert run["loss_end"] == pytest.approx(ref.pop("loss_end"), abs=1e-12)
    assert run["loss_end"] != with_relu["loss_end"]  # the ReLU made a difference
    run.pop("loss_end")
    assert run == ref
    explicit = G.lookup_run("gatv2", 3, 2, 4, seed=5, steps=3, batch=4, readout_relu=True)
    assert explicit == with_relu  # the default keeps the ReLU


def test_lookup_run_defaults_are_the_chapter_training(monkeypatch):
    """steps 400, batch 32, lr 0.01: the arguments reach train_lookup (run for 2 steps)."""
    seen = []
    real = G.train_lookup

    def short(model, **kwargs):
        seen.append(kwargs)
        return real(model, **{**kwargs, "steps": 2})

    monkeypatch.setattr(G, "train_lookup", short)
    run = G.lookup_run("gat", 2, 1, 2, seed=3)
    assert seen == [{"steps": 400, "batch": 32, "lr": 0.01, "seed": 3}]
    assert run["steps"] == 400


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        (("gat", 3, 1, 2, 0), {"steps": 0}, ValueError, r"^steps must be positive, got 0$"),
        (("mlp", 3, 1, 2, 0), {"steps": 1}, ValueError, r"^kind must be 'gat' or 'gatv2'"),
        (("gat", 1, 1, 2, 0), {"steps": 1}, ValueError, r"^k must be at least 2"),
    ],
)
def test_lookup_run_names_bad_arguments(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        G.lookup_run(*args, **kwargs)

"""Tests of ``attention_src.graph_tasks``, the data, models and measurements of chapter 8.

The kNN graph is checked against scikit-learn's ``NearestNeighbors`` (an independent
implementation) and by its definition on hand-made points; the lookup task by decoding each
query's answer from the node features; the measurements on hand-computed cases; static
attention (``ranking_consistency`` = 1 for GAT) on random untrained layers.
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

"""SelfAttention, MultiHeadAttention, MultiHeadSelfAttention, PerHeadMultiHeadAttention,
fuse_heads and to_torch_multihead (attention_src.multihead).

Peer: ``torch.nn.MultiheadAttention(batch_first=True)`` with copied weights. Its boolean
``attn_mask`` / ``key_padding_mask`` mean the OPPOSITE of ours (True = blocked): pass ``~mask``.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

import attention_src as att
from attention_src.attention import scaled_dot_product_attention
from attention_src.multihead import (
    MultiHeadAttention,
    MultiHeadSelfAttention,
    PerHeadMultiHeadAttention,
    SelfAttention,
    fuse_heads,
    to_torch_multihead,
)
from attention_src.softmax import causal_mask, lengths_to_mask
from attention_src.utils import count_parameters
from tests.conftest import PROPERTY, TOL, check_dropout_rate, randn, random_mask, seeds

F64 = TOL[torch.float64]
B, L_Q, L_K, E, H = 2, 4, 5, 6, 3


def _mha(seed: int = 0, dtype=torch.float64, **kwargs) -> MultiHeadAttention:
    torch.manual_seed(seed)
    m = MultiHeadAttention(E, H, **kwargs).to(dtype)
    with torch.no_grad():  # non-zero biases, so that a wrong bias copy is visible
        for p in m.parameters():
            if p.dim() == 1:
                p.normal_()
    return m.eval()


def _inputs(kdim=E, vdim=E, L_q=L_Q, L_k=L_K, dtype=torch.float64, seed=10):
    return (randn(seed, B, L_q, E, dtype=dtype), randn(seed + 1, B, L_k, kdim, dtype=dtype),
            randn(seed + 2, B, L_k, vdim, dtype=dtype))


def _safe_mask(seed: int, *shape: int) -> torch.Tensor:
    """A random mask in which every row keeps key 0 (PyTorch gives NaN for fully masked rows)."""
    mask = random_mask(seed, *shape, p=0.6)
    mask[..., 0] = True
    return mask


def _torch_attn_mask(mask: torch.Tensor | None, num_heads: int):
    """Our mask (True = may attend) as PyTorch's attn_mask (True = blocked)."""
    if mask is None:
        return None
    if mask.dim() == 2:  # (L_q, L_k)
        return ~mask
    if mask.dim() == 3:  # (B, L_q, L_k) -> (B*h, L_q, L_k), PyTorch's per-head layout
        return ~mask.repeat_interleave(num_heads, dim=0)
    b, h, lq, lk = mask.shape  # (B, h or 1, L_q, L_k)
    return ~mask.expand(b, num_heads, lq, lk).reshape(b * num_heads, lq, lk)


MASK_SHAPES = {
    "none": None,
    "(L_q,L_k)": (L_Q, L_K),
    "(B,L_q,L_k)": (B, L_Q, L_K),
    "(B,1,L_q,L_k)": (B, 1, L_Q, L_K),
    "(B,h,L_q,L_k)": (B, H, L_Q, L_K),
}


# --- MultiHeadAttention vs torch.nn.MultiheadAttention -------------------------------------


@pytest.mark.parametrize("mask_kind", list(MASK_SHAPES))
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("dims", [(E, E), (4, 7), (E, 2)], ids=lambda d: f"kdim{d[0]}vdim{d[1]}")
def test_mha_equals_torch_cross_attention(dims, bias, mask_kind):
    kdim, vdim = dims
    mha = _mha(kdim=kdim, vdim=vdim, bias=bias)
    ref = to_torch_multihead(mha).eval()
    q, k, v = _inputs(kdim, vdim)
    shape = MASK_SHAPES[mask_kind]
    mask = None if shape is None else _safe_mask(3, *shape)
    out, w = mha(q, k, v, mask=mask)
    ref_out, ref_w = ref(q, k, v, attn_mask=_torch_attn_mask(mask, H), need_weights=True,
                         average_attn_weights=False)
    assert out.shape == (B, L_Q, E) and w.shape == (B, H, L_Q, L_K)
    torch.testing.assert_close(out, ref_out, **F64)
    torch.testing.assert_close(w, ref_w, **F64)
    out_fast, w_none = mha(q, k, v, mask=mask, need_weights=False)
    assert w_none is None
    torch.testing.assert_close(out_fast, out, **F64)


@pytest.mark.parametrize("bias", [True, False])
def test_mha_equals_torch_self_attention_with_key_padding(bias):
    mha = _mha(bias=bias)
    ref = to_torch_multihead(mha).eval()
    x = randn(5, B, L_K, E)
    pad = lengths_to_mask(torch.tensor([L_K, 2]), L_K)  # (B, L_k)
    out, w = mha(x, x, x, mask=pad[:, None, None, :])  # (B, 1, 1, L_k)
    ref_out, ref_w = ref(x, x, x, key_padding_mask=~pad, average_attn_weights=False)
    torch.testing.assert_close(out, ref_out, **F64)
    torch.testing.assert_close(w, ref_w, **F64)
    _, ref_avg = ref(x, x, x, key_padding_mask=~pad)  # average over heads
    torch.testing.assert_close(w.mean(1), ref_avg, **F64)


def test_mha_float32_equals_torch_within_1e_5():
    mha = _mha(dtype=torch.float32)
    ref = to_torch_multihead(mha)
    assert ref.in_proj_weight.dtype == torch.float32
    q, k, v = _inputs(dtype=torch.float32)
    mask = _safe_mask(1, B, L_Q, L_K)
    out, w = mha(q, k, v, mask=mask)
    ref_out, ref_w = ref(q, k, v, attn_mask=_torch_attn_mask(mask, H),
                         average_attn_weights=False)
    torch.testing.assert_close(out, ref_out, **TOL[torch.float32])
    torch.testing.assert_close(w, ref_w, **TOL[torch.float32])


@torch.no_grad()
def _manual_torch_copy(mha: MultiHeadAttention) -> nn.MultiheadAttention:
    """Copy weights by hand, independently of to_torch_multihead, to check that function."""
    bias = mha.q_proj.bias is not None
    ref = nn.MultiheadAttention(E, H, bias=bias, kdim=mha.kdim, vdim=mha.vdim,
                                batch_first=True).double().eval()
    if mha.kdim == mha.vdim == E:  # one packed (3E, E) matrix: rows [W_q; W_k; W_v]
        ref.in_proj_weight[:E] = mha.q_proj.weight
        ref.in_proj_weight[E:2 * E] = mha.k_proj.weight
        ref.in_proj_weight[2 * E:] = mha.v_proj.weight
    else:
        ref.q_proj_weight[:] = mha.q_proj.weight
        ref.k_proj_weight[:] = mha.k_proj.weight
        ref.v_proj_weight[:] = mha.v_proj.weight
    if bias:
        ref.in_proj_bias[:E] = mha.q_proj.bias
        ref.in_proj_bias[E:2 * E] = mha.k_proj.bias
        ref.in_proj_bias[2 * E:] = mha.v_proj.bias
        ref.out_proj.bias[:] = mha.out_proj.bias
    ref.out_proj.weight[:] = mha.out_proj.weight
    return ref


@pytest.mark.parametrize("dims", [(E, E), (4, 7)])
@pytest.mark.parametrize("bias", [True, False])
def test_to_torch_multihead_equals_a_manual_weight_copy(dims, bias):
    mha = _mha(kdim=dims[0], vdim=dims[1], bias=bias)
    manual = _manual_torch_copy(mha)
    copied = to_torch_multihead(mha)
    assert set(manual.state_dict()) == set(copied.state_dict())
    for name, tensor in manual.state_dict().items():
        torch.testing.assert_close(copied.state_dict()[name], tensor, atol=0, rtol=0, msg=name)
    q, k, v = _inputs(*dims)
    out, w = mha(q, k, v)
    ref_out, ref_w = manual(q, k, v, average_attn_weights=False)
    torch.testing.assert_close(out, ref_out, **F64)
    torch.testing.assert_close(w, ref_w, **F64)


def test_to_torch_multihead_copies_the_training_mode():
    mha = _mha(dropout=0.5).eval()
    ref = to_torch_multihead(mha)  # no .eval() here: the copy must already be in eval mode
    assert not ref.training
    q, k, v = _inputs()
    torch.testing.assert_close(mha(q, k, v)[0], ref(q, k, v)[0], **F64)
    assert to_torch_multihead(mha.train()).training


def test_parameter_counts_match_torch():
    for kwargs in ({}, {"bias": False}, {"kdim": 4, "vdim": 7}):
        mha = _mha(**kwargs)
        assert count_parameters(mha) == count_parameters(to_torch_multihead(mha))
    assert count_parameters(MultiHeadAttention(8, 2)) == 4 * (8 * 8 + 8)


# --- need_weights, dropout ----------------------------------------------------------------


def test_need_weights_modes_agree_with_fully_masked_rows():
    mha = _mha()
    q, k, v = _inputs()
    mask = random_mask(7, B, H, L_Q, L_K, p=0.5)
    mask[0, 1, 2] = False  # head 1, query 2 of batch 0 sees nothing
    mask[1, :, 0] = False  # query 0 of batch 1 sees nothing in any head
    out, w = mha(q, k, v, mask=mask)
    out_fast, _ = mha(q, k, v, mask=mask, need_weights=False)
    assert torch.isfinite(out).all() and torch.isfinite(out_fast).all()
    torch.testing.assert_close(out_fast, out, **F64)
    assert (w[0, 1, 2] == 0).all() and (w[1, :, 0] == 0).all()
    # a query that sees nothing in any head: zero heads, so the output is out_proj's bias
    torch.testing.assert_close(out[1, 0], mha.out_proj.bias, **F64)


@pytest.mark.parametrize("need_weights", [True, False])
def test_dropout_in_eval_mode_equals_no_dropout(need_weights):
    plain = _mha(dropout=0.0)
    dropping = _mha(dropout=0.4)
    dropping.load_state_dict(plain.state_dict())
    q, k, v = _inputs()
    mask = _safe_mask(2, L_Q, L_K)
    out, _ = dropping.eval()(q, k, v, mask=mask, need_weights=need_weights)
    ref, _ = plain(q, k, v, mask=mask, need_weights=need_weights)
    torch.testing.assert_close(out, ref, atol=0, rtol=0)
    torch.manual_seed(0)
    trained, _ = dropping.train()(q, k, v, mask=mask, need_weights=need_weights)
    assert not torch.allclose(trained, ref)


def test_dropout_in_training_returns_undropped_weights():
    mha = _mha(dropout=0.4)
    q, k, v = _inputs()
    _, w_eval = mha.eval()(q, k, v)
    torch.manual_seed(1)
    _, w_train = mha.train()(q, k, v)
    torch.testing.assert_close(w_train, w_eval, atol=0, rtol=0)



# --- dropout statistics: the rate itself, on every path ---------------------------------------
# A layer whose output IS its attention weights after dropout: one-hot values (head i's slice of
# value row j is e_j, so each head's output row is its weights row) and identity v_proj and
# out_proj without bias. head_dim = L_k = 4 makes the one-hot values fit a head. The fraction of
# zeros over many draws estimates the rate (see check_dropout_rate: 5 binomial SE), and each
# kept weight must be the eval-mode weight divided by 1 - p.
DROP_E, DROP_H, DROP_L_Q, DROP_L_K, DROP_B, DROP_DRAWS = 8, 2, 5, 4, 4, 200


def _readout_inputs():
    q = randn(20, DROP_B, DROP_L_Q, DROP_E)
    k = randn(21, DROP_B, DROP_L_K, DROP_E)
    one_hot = torch.eye(DROP_L_K, dtype=torch.float64).repeat(1, DROP_H)  # (L_k, E) = [I | I]
    return q, k, one_hot.expand(DROP_B, DROP_L_K, DROP_E)                # v: (B, L_k, E)


def _weights_readout(p: float) -> MultiHeadAttention:
    torch.manual_seed(0)
    mha = MultiHeadAttention(DROP_E, DROP_H, dropout=p).double()
    with torch.no_grad():
        for proj in (mha.v_proj, mha.out_proj):
            proj.weight.copy_(torch.eye(DROP_E))
            proj.bias.zero_()
    return mha


def _as_output_layout(w: torch.Tensor) -> torch.Tensor:
    """Weights (B, h, L_q, L_k) laid out like the readout's output (B, L_q, h * L_k)."""
    return w.transpose(1, 2).reshape(w.shape[0], w.shape[2], -1)


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
@pytest.mark.parametrize("path", ["weights", "fused", "torch copy", "per-head", "fuse_heads"])
def test_dropout_rate_is_p_on_every_path(path, p):
    """Kills a fused path with another rate, a to_torch_multihead copy without dropout, and a
    per-head module or its fuse_heads copy losing the rate."""
    mha = _weights_readout(p)
    q, k, v = _readout_inputs()
    _, w = mha.eval()(q, k, v)                                        # before dropout
    torch.testing.assert_close(mha(q, k, v)[0], _as_output_layout(w), **F64)  # readout works
    if path == "weights":
        run = lambda: mha.train()(q, k, v)[0]  # noqa: E731
    elif path == "fused":
        run = lambda: mha.train()(q, k, v, need_weights=False)[0]  # noqa: E731
    elif path == "torch copy":
        ref = to_torch_multihead(mha.train())
        run = lambda: ref(q, k, v, need_weights=False)[0]  # noqa: E731
    else:
        # h heads whose value projections pick their slice of the one-hot values
        per_head = PerHeadMultiHeadAttention(DROP_E, DROP_H, dropout=p).double()
        with torch.no_grad():
            for i, head in enumerate(per_head.heads):
                head.v_proj.weight.copy_(torch.eye(DROP_E)[i * 4:(i + 1) * 4])  # (d_head, E)
                head.v_proj.bias.zero_()
            per_head.out_proj.weight.copy_(torch.eye(DROP_E))
            per_head.out_proj.bias.zero_()
        _, w = per_head.eval()(q, k, v)
        module = per_head.train() if path == "per-head" else fuse_heads(per_head.train())
        run = lambda: module(q, k, v)[0]  # noqa: E731
    torch.manual_seed(1)
    dropped = torch.stack([run() for _ in range(DROP_DRAWS)])        # (draws, B, L_q, E)
    check_dropout_rate(dropped, _as_output_layout(w), p)


def test_dropout_rate_check_fails_for_a_rate_off_by_0_1():
    """The test above can fail: draws at p' = p + 0.1 do not pass as rate p."""
    mha = _weights_readout(0.4)
    q, k, v = _readout_inputs()
    _, w = mha.eval()(q, k, v)
    mha.train()
    torch.manual_seed(1)
    dropped = torch.stack([mha(q, k, v, need_weights=False)[0] for _ in range(DROP_DRAWS)])
    check_dropout_rate(dropped, _as_output_layout(w), 0.4)
    with pytest.raises(AssertionError, match="expected p=0.3"):
        check_dropout_rate(dropped * 0.6 / 0.7, _as_output_layout(w), 0.3)
    with pytest.raises(AssertionError, match="expected p=0.5"):
        check_dropout_rate(dropped * 0.6 / 0.5, _as_output_layout(w), 0.5)


# --- MultiHeadSelfAttention ----------------------------------------------------------------


def _mhsa(seed=0, **kwargs) -> MultiHeadSelfAttention:
    torch.manual_seed(seed)
    m = MultiHeadSelfAttention(E, H, **kwargs).double()
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() == 1:
                p.normal_()
    return m.eval()


@pytest.mark.parametrize("need_weights", [True, False])
def test_causal_self_attention_equals_torch(need_weights):
    mhsa = _mhsa()
    ref = to_torch_multihead(mhsa).eval()
    x = randn(0, B, L_K, E)
    out, w = mhsa(x, causal=True, need_weights=need_weights)
    ref_out, ref_w = ref(x, x, x, attn_mask=~causal_mask(L_K), average_attn_weights=False)
    torch.testing.assert_close(out, ref_out, **F64)
    if need_weights:
        torch.testing.assert_close(w, ref_w, **F64)
        assert (w.triu(diagonal=1) == 0).all()  # no weight on the future
    # the explicit mask gives the same as causal=True
    explicit, _ = mhsa(x, mask=causal_mask(L_K), need_weights=need_weights)
    torch.testing.assert_close(explicit, out, atol=0, rtol=0)


@pytest.mark.parametrize("pad_shape", ["(B,1,1,L)", "(B,L,L)", "(L,L)"])
@pytest.mark.parametrize("need_weights", [True, False])
def test_causal_combined_with_padding_equals_torch(pad_shape, need_weights):
    mhsa = _mhsa(seed=1)
    ref = to_torch_multihead(mhsa).eval()
    x = randn(1, B, L_K, E)
    lens = torch.tensor([L_K, 3])
    pad = lengths_to_mask(lens, L_K)  # (B, L): key j valid when j < len
    if pad_shape == "(B,1,1,L)":
        mask = pad[:, None, None, :]
        ref_out, ref_w = ref(x, x, x, attn_mask=~causal_mask(L_K), key_padding_mask=~pad,
                             average_attn_weights=False)
    elif pad_shape == "(B,L,L)":
        mask = pad[:, None, :].expand(B, L_K, L_K)
        ref_out, ref_w = ref(x, x, x, attn_mask=~causal_mask(L_K), key_padding_mask=~pad,
                             average_attn_weights=False)
    else:  # a (L, L) mask shared by the batch: block key 1 for every query after it
        mask = torch.ones(L_K, L_K, dtype=torch.bool)
        mask[2:, 1] = False
        ref_out, ref_w = ref(x, x, x, attn_mask=~(mask & causal_mask(L_K)),
                             average_attn_weights=False)
    out, w = mhsa(x, mask=mask, causal=True, need_weights=need_weights)
    torch.testing.assert_close(out, ref_out, **F64)
    if need_weights:
        torch.testing.assert_close(w, ref_w, **F64)


def test_mhsa_non_causal_equals_torch_self_attention():
    """Independent reference: PyTorch's layer called with x three times, its mask inverted."""
    mhsa = _mhsa()
    x = randn(2, B, L_K, E)
    mask = _safe_mask(3, B, L_K, L_K)                       # (B, L, L), True = may attend
    out, w = mhsa(x, mask=mask)
    ref = to_torch_multihead(mhsa).eval()
    torch_mask = (~mask).repeat_interleave(H, dim=0)        # (B*h, L, L), True = blocked
    ref_out, ref_w = ref(x, x, x, attn_mask=torch_mask, average_attn_weights=False)
    torch.testing.assert_close(out, ref_out, **F64)
    torch.testing.assert_close(w, ref_w, **F64)


# --- permutation equivariance --------------------------------------------------------------


@PROPERTY
@given(seed=seeds, L=st.integers(1, 6), data=st.data())
def test_self_attention_is_permutation_equivariant(seed, L, data):
    perm = torch.as_tensor(data.draw(st.permutations(range(L))))
    torch.manual_seed(seed % 1000)
    sa = SelfAttention(4, 3, 5, bias=True).double()
    x = randn(seed, 2, L, 4)
    keys = random_mask(seed + 1, 2, 1, L)
    keys[..., 0] = True
    out, w = sa(x, mask=keys)
    out_p, w_p = sa(x[:, perm], mask=keys[..., perm])
    torch.testing.assert_close(out_p, out[:, perm], atol=1e-12, rtol=0)
    torch.testing.assert_close(w_p, w[:, perm][:, :, perm], atol=1e-12, rtol=0)


@PROPERTY
@given(seed=seeds, L=st.integers(1, 6), data=st.data())
def test_multihead_self_attention_is_permutation_equivariant(seed, L, data):
    perm = torch.as_tensor(data.draw(st.permutations(range(L))))
    mhsa = _mhsa(seed=seed % 1000)
    x = randn(seed, B, L, E)
    for need_weights in (True, False):
        out, w = mhsa(x, need_weights=need_weights)
        out_p, w_p = mhsa(x[:, perm], need_weights=need_weights)
        torch.testing.assert_close(out_p, out[:, perm], atol=1e-12, rtol=0)
        if need_weights:
            torch.testing.assert_close(w_p, w[:, :, perm][:, :, :, perm], atol=1e-12, rtol=0)


# --- SelfAttention -------------------------------------------------------------------------


@pytest.mark.parametrize("batch", [(), (2,), (2, 3)], ids=str)
@pytest.mark.parametrize("bias", [True, False])
def test_self_attention_equals_sdpa_of_its_projections(batch, bias):
    torch.manual_seed(0)
    sa = SelfAttention(d_in=4, d_k=3, d_v=5, bias=bias).double()
    x = randn(1, *batch, 6, 4)
    mask = _safe_mask(2, *batch, 6, 6)
    for m in (None, mask):
        out, w = sa(x, mask=m)
        q = x @ sa.q_proj.weight.T + (sa.q_proj.bias if bias else 0)
        k = x @ sa.k_proj.weight.T + (sa.k_proj.bias if bias else 0)
        v = x @ sa.v_proj.weight.T + (sa.v_proj.bias if bias else 0)
        ref_out, ref_w = scaled_dot_product_attention(q, k, v, mask=m)
        assert out.shape == (*batch, 6, 5) and w.shape == (*batch, 6, 6)
        torch.testing.assert_close(out, ref_out, **F64)
        torch.testing.assert_close(w, ref_w, **F64)
    assert count_parameters(sa) == 4 * (3 + 3 + 5) + (3 + 3 + 5) * bias


def test_self_attention_rejects_bad_input():
    sa = SelfAttention(4, 3, 5)
    with pytest.raises(ValueError, match=r"x must have 4 features \(d_in\), got shape \(2, 6, 5\)"):
        sa(torch.ones(2, 6, 5))
    with pytest.raises(ValueError, match=r"x must have at least 2 dimensions, got shape \(4,\)"):
        sa(torch.ones(4))
    with pytest.raises(TypeError, match="x must be a floating-point tensor.*torch.int64"):
        sa(torch.ones(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="d_k must be positive, got 0"):
        SelfAttention(4, 0, 5)
    with pytest.raises(TypeError, match="d_v must be an int, got float"):
        SelfAttention(4, 3, 5.0)


# --- PerHeadMultiHeadAttention and fuse_heads ----------------------------------------------


def _per_head(seed=0, dtype=torch.float64, **kwargs) -> PerHeadMultiHeadAttention:
    torch.manual_seed(seed)
    m = PerHeadMultiHeadAttention(E, H, **kwargs).to(dtype)
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() == 1:
                p.normal_()
    return m


@pytest.mark.parametrize("mask_kind", list(MASK_SHAPES))
@pytest.mark.parametrize("kwargs", [{}, {"bias": False}, {"kdim": 4, "vdim": 7}], ids=str)
def test_fuse_heads_computes_the_same_function(kwargs, mask_kind):
    per_head = _per_head(**kwargs)
    fused = fuse_heads(per_head)
    assert isinstance(fused, MultiHeadAttention)
    assert fused.q_proj.weight.dtype == torch.float64  # the dtype of the per-head module
    assert count_parameters(fused) == count_parameters(per_head)
    q, k, v = _inputs(kwargs.get("kdim", E), kwargs.get("vdim", E))
    shape = MASK_SHAPES[mask_kind]
    mask = None if shape is None else random_mask(4, *shape, p=0.6)  # fully masked rows too
    out, w = per_head(q, k, v, mask=mask)
    fused_out, fused_w = fused(q, k, v, mask=mask)
    torch.testing.assert_close(fused_out, out, **F64)
    torch.testing.assert_close(fused_w, w, **F64)
    fast, _ = fused(q, k, v, mask=mask, need_weights=False)
    torch.testing.assert_close(fast, out, **F64)


def test_per_head_module_is_a_loop_over_heads():
    per_head = _per_head()
    q, k, v = _inputs()
    mask = random_mask(5, B, H, L_Q, L_K)
    out, w = per_head(q, k, v, mask=mask)
    heads = []
    for i, head in enumerate(per_head.heads):
        o, wi = scaled_dot_product_attention(head.q_proj(q), head.k_proj(k), head.v_proj(v),
                                             mask=mask[:, i])
        torch.testing.assert_close(w[:, i], wi, atol=0, rtol=0)
        heads.append(o)
    torch.testing.assert_close(out, per_head.out_proj(torch.cat(heads, -1)), atol=0, rtol=0)


def test_per_head_equals_torch_via_fuse_heads():
    per_head = _per_head(seed=3)
    ref = to_torch_multihead(fuse_heads(per_head)).eval()
    q, k, v = _inputs()
    out, w = per_head(q, k, v)
    ref_out, ref_w = ref(q, k, v, average_attn_weights=False)
    torch.testing.assert_close(out, ref_out, **F64)
    torch.testing.assert_close(w, ref_w, **F64)
    # a different mask per head, checked against PyTorch's (B*h, L_q, L_k) layout, inverted
    mask = _safe_mask(6, B, H, L_Q, L_K)                    # (B, h, L_q, L_k)
    out, w = per_head(q, k, v, mask=mask)
    ref_out, ref_w = ref(q, k, v, attn_mask=~mask.reshape(B * H, L_Q, L_K),
                         average_attn_weights=False)
    torch.testing.assert_close(out, ref_out, **F64)
    torch.testing.assert_close(w, ref_w, **F64)


def test_per_head_dropout_is_off_in_eval_mode_and_carried_by_fuse_heads():
    plain, dropping = _per_head(), _per_head(dropout=0.4)
    dropping.load_state_dict(plain.state_dict())
    q, k, v = _inputs()
    mask = _safe_mask(3, L_Q, L_K)
    ref, w_ref = plain(q, k, v, mask=mask)
    out, w = dropping.eval()(q, k, v, mask=mask)
    torch.testing.assert_close(out, ref, atol=0, rtol=0)
    fused = fuse_heads(dropping)
    assert fused.dropout == 0.4 and not fused.training
    torch.testing.assert_close(fused(q, k, v, mask=mask)[0], ref, **F64)
    torch.manual_seed(0)
    trained, w_trained = dropping.train()(q, k, v, mask=mask)
    assert fuse_heads(dropping).training
    assert not torch.allclose(trained, ref)
    torch.testing.assert_close(w_trained, w_ref, atol=0, rtol=0)  # weights before dropout


def test_per_head_dropout_is_unbiased_on_average():
    # Inverted dropout rescales kept weights by 1/(1-p) and out_proj is affine, so the mean
    # output over many draws tends to the eval-mode output.
    per_head = _per_head(dropout=0.5).train()
    q, k, v = _inputs()
    torch.manual_seed(0)
    draws = torch.stack([per_head(q, k, v)[0] for _ in range(1000)])
    ref, _ = per_head.eval()(q, k, v)
    spread = draws.std(dim=0) / 1000**0.5  # standard error of the mean, per entry
    assert ((draws.mean(dim=0) - ref).abs() < 5 * spread + 1e-12).all()


# --- bad input -----------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [MultiHeadAttention, MultiHeadSelfAttention,
                                 PerHeadMultiHeadAttention])
def test_embed_dim_must_be_divisible_by_num_heads(cls):
    with pytest.raises(ValueError, match=r"embed_dim \(10\) must be divisible by num_heads \(4\)"):
        cls(10, 4)
    with pytest.raises(ValueError, match="num_heads must be positive, got 0"):
        cls(8, 0)
    with pytest.raises(TypeError, match="embed_dim must be an int, got float"):
        cls(8.0, 2)


def test_mha_rejects_bad_constructor_arguments():
    with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\), got 1.0"):
        MultiHeadAttention(8, 2, dropout=1.0)
    with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\), got -0.5"):
        MultiHeadSelfAttention(8, 2, dropout=-0.5)
    with pytest.raises(ValueError, match="kdim must be positive, got 0"):
        MultiHeadAttention(8, 2, kdim=0)
    with pytest.raises(TypeError, match="vdim must be an int, got str"):
        MultiHeadAttention(8, 2, vdim="4")
    with pytest.raises(ValueError, match="kdim must be positive, got 0"):
        PerHeadMultiHeadAttention(8, 2, kdim=0)
    with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\), got 1.5"):
        PerHeadMultiHeadAttention(8, 2, dropout=1.5)


@pytest.mark.parametrize("module", [_mha, _per_head], ids=["fused", "per_head"])
def test_mha_rejects_bad_inputs(module):
    m = module()
    q, k, v = _inputs()
    with pytest.raises(ValueError, match=r"query must have at least 3 dimensions, got shape "
                                         r"\(4, 6\)"):
        m(q[0], k, v)
    with pytest.raises(ValueError, match=r"key must be \(B, L, features\), got shape "
                                         r"\(1, 2, 5, 6\)"):
        m(q, k[None], v)
    with pytest.raises(ValueError, match=r"value must have 6 features, got shape \(2, 5, 4\)"):
        m(q, k, v[..., :4])
    with pytest.raises(ValueError, match=r"share the batch size, got \(2, 4, 6\), \(1, 5, 6\), "
                                         r"\(2, 5, 6\)"):
        m(q, k[:1], v)
    with pytest.raises(ValueError, match=r"same length L_k, got key \(2, 5, 6\) and value "
                                         r"\(2, 3, 6\)"):
        m(q, k, v[:, :3])
    with pytest.raises(TypeError, match="query must be a floating-point tensor.*torch.int64"):
        m(q.long(), k, v)
    with pytest.raises(TypeError, match="key must be a torch.Tensor, got list"):
        m(q, k.tolist(), v)
    with pytest.raises(TypeError, match="one dtype.*query: torch.float32, key: torch.float64"):
        m(q.float(), k, v)
    with pytest.raises(TypeError, match="dtype torch.float32.*parameters.*torch.float64"):
        m(q.float(), k.float(), v.float())


@pytest.mark.parametrize("module", [_mha, _per_head], ids=["fused", "per_head"])
def test_mha_rejects_bad_masks(module):
    m = module()
    q, k, v = _inputs()
    bool_ones = lambda *s: torch.ones(*s, dtype=torch.bool)  # noqa: E731
    with pytest.raises(ValueError, match=r"mask of shape \(2, 2, 4, 5\) does not broadcast to "
                                         r"the scores' shape \(2, 3, 4, 5\)"):
        m(q, k, v, mask=bool_ones(B, 2, L_Q, L_K))  # 2 heads' masks for 3 heads
    with pytest.raises(ValueError, match=r"mask of shape \(1, 2, 3, 4, 5\) .* \(2, 3, 4, 5\)"):
        m(q, k, v, mask=bool_ones(1, B, H, L_Q, L_K))  # more leading dims: no silent broadcast
    with pytest.raises(ValueError, match=r"mask of shape \(2, 1, 5, 4\) .* \(2, 3, 4, 5\)"):
        m(q, k, v, mask=bool_ones(B, L_K, L_Q))  # transposed (B, L_k, L_q)
    with pytest.raises(ValueError, match=r"mask of shape \(4, 4\) .* \(2, 3, 4, 5\)"):
        m(q, k, v, mask=bool_ones(L_Q, L_Q))
    with pytest.raises(TypeError, match="mask must have dtype torch.bool.*torch.float64"):
        m(q, k, v, mask=torch.ones(L_Q, L_K, dtype=torch.float64))


def test_mhsa_rejects_bad_input():
    mhsa = _mhsa()
    with pytest.raises(ValueError, match=r"x must have at least 3 dimensions, got shape \(5, 6\)"):
        mhsa(randn(0, L_K, E), causal=True)
    with pytest.raises(TypeError, match="x must be a torch.Tensor, got list"):
        mhsa([[0.0] * E])
    with pytest.raises(ValueError, match=r"mask of shape \(3, 5\) .* \(2, 3, 5, 5\)"):
        mhsa(randn(0, B, L_K, E), mask=torch.ones(3, L_K, dtype=torch.bool), causal=True)
    with pytest.raises(TypeError, match="mask must have dtype torch.bool"):
        mhsa(randn(0, B, L_K, E), mask=torch.ones(B, L_K, L_K), causal=True)


def test_top_level_exports():
    assert att.MultiHeadAttention is MultiHeadAttention
    assert att.fuse_heads is fuse_heads and att.to_torch_multihead is to_torch_multihead


def test_fused_path_does_not_depend_on_what_pytorch_returns_for_empty_rows(monkeypatch):
    """Before torch 2.5 the fused kernel gave NaN for a query with no allowed key. Stand in such
    a kernel (a plain -inf softmax): outputs and gradients must stay finite and equal the
    weights path, since the layer never hands PyTorch an empty row."""
    import attention_src.multihead as multihead

    def nan_for_empty_rows(q, k, v, attn_mask=None, dropout_p=0.0):
        scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
        if attn_mask is not None:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        return torch.softmax(scores, dim=-1) @ v  # NaN where a row is all -inf

    mha = _mha()
    q, k, v = _inputs()
    mask = random_mask(7, B, H, L_Q, L_K, p=0.5)
    mask[1, :, 0] = False  # query 0 of batch 1 sees nothing in any head
    ref, _ = mha(q, k, v, mask=mask)
    monkeypatch.setattr(multihead.F, "scaled_dot_product_attention", nan_for_empty_rows)
    q, v = q.clone().requires_grad_(True), v.clone().requires_grad_(True)
    out, _ = mha(q, k, v, mask=mask, need_weights=False)
    torch.testing.assert_close(out, ref, **F64)
    out.sum().backward()  # a NaN row of weights would reach v.grad = A^T dL/dO (chapter 3)
    assert torch.isfinite(q.grad).all() and torch.isfinite(v.grad).all()


def test_conversions_name_the_module_they_need():
    with pytest.raises(TypeError, match="fuse_heads takes a PerHeadMultiHeadAttention .*got "
                                        "MultiHeadAttention"):
        fuse_heads(MultiHeadAttention(6, 3))
    with pytest.raises(TypeError, match=r"takes a MultiHeadAttention, got "
                                        r"PerHeadMultiHeadAttention \(fuse_heads\(\) it first\)"):
        to_torch_multihead(PerHeadMultiHeadAttention(6, 3))
    with pytest.raises(TypeError, match="takes a MultiHeadAttention, got Linear$"):
        to_torch_multihead(torch.nn.Linear(6, 6))


# --- constructor defaults, bad input named per argument, masks per head, devices -------------


def test_constructor_defaults_are_the_documented_ones():
    """bias=True, kdim = vdim = embed_dim, dropout=0.0 (SelfAttention: bias=False): a default
    call builds the same module, parameter for parameter, as the explicit one."""
    def same(make_default, make_explicit):
        torch.manual_seed(0)
        a = make_default()
        torch.manual_seed(0)
        b = make_explicit()
        sa, sb = a.state_dict(), b.state_dict()
        assert list(sa) == list(sb)
        assert all(torch.equal(sa[n], sb[n]) for n in sa)
        return a

    mha = same(lambda: MultiHeadAttention(6, 3),
               lambda: MultiHeadAttention(6, 3, bias=True, kdim=6, vdim=6, dropout=0.0))
    assert (mha.kdim, mha.vdim, mha.dropout) == (6, 6, 0.0) and mha.out_proj.bias is not None
    mhsa = same(lambda: MultiHeadSelfAttention(6, 3),
                lambda: MultiHeadSelfAttention(6, 3, bias=True, dropout=0.0))
    assert mhsa.dropout == 0.0 and mhsa.q_proj.bias is not None
    per_head = same(lambda: PerHeadMultiHeadAttention(6, 3),
                    lambda: PerHeadMultiHeadAttention(6, 3, bias=True, kdim=6, vdim=6,
                                                      dropout=0.0))
    assert per_head.dropout == 0.0 and per_head.heads[0].k_proj.bias is not None
    sa = same(lambda: SelfAttention(4, 3, 5), lambda: SelfAttention(4, 3, 5, bias=False))
    assert sa.q_proj.bias is None


def test_forward_defaults_are_no_mask_not_causal_with_weights():
    mha, mhsa = _mha(), _mhsa()
    q, k, v = _inputs()
    out, w = mha(q, k, v)
    out_explicit, w_explicit = mha(q, k, v, mask=None, need_weights=True)
    assert w is not None and w.shape == (B, H, L_Q, L_K)
    torch.testing.assert_close(out, out_explicit, atol=0, rtol=0)
    torch.testing.assert_close(w, w_explicit, atol=0, rtol=0)
    x = randn(3, B, L_K, E)
    out, w = mhsa(x)
    out_explicit, w_explicit = mhsa(x, mask=None, causal=False, need_weights=True)
    torch.testing.assert_close(out, out_explicit, atol=0, rtol=0)
    torch.testing.assert_close(w, w_explicit, atol=0, rtol=0)
    assert (w[..., 0, 1:] > 0).all()  # not causal: the first query sees the later keys


def test_mhsa_passes_bias_dropout_and_need_weights_on():
    torch.manual_seed(0)
    mhsa = MultiHeadSelfAttention(E, H, bias=False, dropout=0.3).double().eval()
    assert mhsa.dropout == 0.3
    assert all(getattr(mhsa, n).bias is None for n in ("q_proj", "k_proj", "v_proj", "out_proj"))
    x = randn(4, B, L_K, E)
    out, w = mhsa(x, causal=True, need_weights=False)
    assert w is None
    ref, w_ref = mhsa(x, causal=True)
    torch.testing.assert_close(out, ref, **F64)
    assert w_ref is not None


@pytest.mark.parametrize("module", [_mha, _per_head], ids=["fused", "per_head"])
def test_a_mask_that_is_not_a_tensor_is_named(module):
    q, k, v = _inputs()
    with pytest.raises(TypeError, match=r"^mask must be a boolean torch\.Tensor, got list$"):
        module()(q, k, v, mask=[[True] * L_K] * L_Q)


def test_mhsa_names_a_mask_that_is_not_a_tensor():
    x = randn(0, B, L_K, E)
    for causal in (False, True):
        with pytest.raises(TypeError, match=r"^mask must be a boolean torch\.Tensor, got list$"):
            _mhsa()(x, mask=[[True] * L_K] * L_K, causal=causal)


@pytest.mark.parametrize("cls", [MultiHeadAttention, MultiHeadSelfAttention,
                                 PerHeadMultiHeadAttention])
def test_constructor_messages_name_the_bad_argument(cls):
    with pytest.raises(ValueError, match=r"^embed_dim must be positive, got 0$"):
        cls(0, 1)
    with pytest.raises(TypeError, match=r"^num_heads must be an int, got float$"):
        cls(8, 2.0)
    with pytest.raises(ValueError, match=r"^embed_dim \(10\) must be divisible by num_heads "
                                         r"\(4\)$"):
        cls(10, 4)
    # dropout: 0 is allowed, 1 is not (every weight would be dropped)
    assert cls(8, 2, dropout=0.0).dropout == 0.0
    with pytest.raises(ValueError, match=r"^dropout must be in \[0, 1\), got 1\.0$"):
        cls(8, 2, dropout=1.0)
    if cls is not MultiHeadSelfAttention:
        with pytest.raises(ValueError, match=r"^kdim must be positive, got 0$"):
            cls(8, 2, kdim=0)
        with pytest.raises(ValueError, match=r"^vdim must be positive, got -1$"):
            cls(8, 2, vdim=-1)
        with pytest.raises(TypeError, match=r"^vdim must be an int, got str$"):
            cls(8, 2, vdim="4")


def test_self_attention_messages_name_the_bad_argument():
    with pytest.raises(ValueError, match=r"^d_in must be positive, got 0$"):
        SelfAttention(0, 3, 5)
    with pytest.raises(ValueError, match=r"^d_k must be positive, got -2$"):
        SelfAttention(4, -2, 5)
    with pytest.raises(TypeError, match=r"^d_v must be an int, got NoneType$"):
        SelfAttention(4, 3, None)
    sa = SelfAttention(4, 3, 5)
    with pytest.raises(TypeError, match=r"^x must be a torch\.Tensor, got list$"):
        sa([[0.0] * 4])
    with pytest.raises(ValueError, match=r"^x must have 4 features \(d_in\), got shape "
                                         r"\(6, 5\)$"):
        sa(torch.ones(6, 5))


@pytest.mark.parametrize("mask_shape", [(B, 2, L_Q, L_K), (B, 1, L_Q, L_K), (B, L_Q, L_K)],
                         ids=str)
def test_per_head_masks_with_two_heads_equal_the_fused_broadcast(mask_shape):
    """With h = 2, head i must use slice i of a (B, h, L_q, L_k) mask (and slice 0 of a
    (B, 1, L_q, L_k) one). Reference: the fused module, which broadcasts the mask against its
    (B, h, L_q, L_k) scores instead of slicing it."""
    torch.manual_seed(0)
    per_head = PerHeadMultiHeadAttention(4, 2).double()
    fused = fuse_heads(per_head)
    q = randn(1, B, L_Q, 4)
    k, v = randn(2, B, L_K, 4), randn(3, B, L_K, 4)
    mask = _safe_mask(8, *mask_shape)
    out, w = per_head(q, k, v, mask=mask)
    ref_out, ref_w = fused(q, k, v, mask=mask)
    torch.testing.assert_close(out, ref_out, **F64)
    torch.testing.assert_close(w, ref_w, **F64)
    full = mask if mask.dim() == 4 else mask[:, None]
    assert (w[~full.expand_as(w)] == 0).all()


def test_fuse_heads_and_mhsa_follow_the_device_of_the_module():
    # the meta device (shapes, no data) stands in for a GPU on this CPU-only test machine
    per_head = PerHeadMultiHeadAttention(6, 3).to("meta")
    fused = fuse_heads(per_head)
    assert all(p.device.type == "meta" for p in fused.parameters())
    mhsa = MultiHeadSelfAttention(6, 3).to("meta")
    x = torch.empty(2, 5, 6, device="meta")
    out, w = mhsa(x, causal=True)  # the look-ahead mask is moved to x's device
    assert out.device.type == "meta" and w.shape == (2, 3, 5, 5)


@pytest.mark.parametrize("module", [_mha, _per_head], ids=["fused", "per_head"])
def test_a_value_of_another_dtype_is_named(module):
    q, k, v = _inputs()
    with pytest.raises(TypeError, match=r"^inputs must share one dtype, got query: "
                                        r"torch\.float64, key: torch\.float64, value: "
                                        r"torch\.float32$"):
        module()(q, k, v.float())

"""Tests of ``attention_src.training``: the teacher-forced loop and greedy-decoding accuracy."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attention_src import AdditiveScore
from attention_src.data import SequencePairs, Vocab, encode_pairs, reverse_task
from attention_src.optim import Adam
from attention_src.seq2seq import AttentionDecoder, ContextDecoder, GRUEncoder, Seq2Seq
from attention_src.training import seq2seq_accuracy, train_seq2seq

VOCAB = Vocab("abcd")


def _reverse_data(n: int = 256, seed: int = 0) -> SequencePairs:
    return encode_pairs(reverse_task(n, 2, 5, num_symbols=4, seed=seed), VOCAB, VOCAB)


def _model(seed: int = 0, attention: bool = True) -> Seq2Seq:
    torch.manual_seed(seed)
    encoder = GRUEncoder(len(VOCAB), 8, 16)
    if attention:
        decoder = AttentionDecoder(len(VOCAB), 8, 32, 32, AdditiveScore(32, 32, 16))
    else:
        decoder = ContextDecoder(len(VOCAB), 8, 32, 32)
    return Seq2Seq(encoder, decoder)


@pytest.mark.parametrize("attention", [True, False], ids=["attention", "context"])
def test_training_lowers_the_loss_on_a_tiny_reverse_task(attention):
    data = _reverse_data()
    model = _model(attention=attention)
    losses = train_seq2seq(model, data, steps=60, batch_size=32, lr=1e-2)
    assert len(losses) == 60 and all(isinstance(x, float) for x in losses)
    first, last = sum(losses[:10]) / 10, sum(losses[-10:]) / 10
    assert last < 0.8 * first, (first, last)
    assert not model.training  # left in evaluation mode



def test_training_runs_the_model_in_training_mode_and_leaves_it_in_eval_mode():
    """Dropout layers must be active while training: a model handed over in eval mode is
    switched to training mode for every step, and left in eval mode afterwards."""
    data = _reverse_data(16)
    model = _model().eval()
    modes = []
    original = model.forward

    def spy(*args, **kwargs):
        modes.append(model.training)
        return original(*args, **kwargs)

    model.forward = spy
    train_seq2seq(model, data, steps=3, batch_size=4)
    assert modes == [True, True, True]
    assert not model.training


def test_training_defaults_are_the_documented_ones(monkeypatch):
    """batch_size=64, lr=3e-3, clip=1.0, seed=0, pad_id=0: a call that leaves them out trains
    exactly like one that spells them out, and clips to norm 1 (logits scaled by 50 make the
    raw gradient norm larger than 1, so the default clip acts)."""

    class Loud(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, src, src_len, tgt_in):
            logits, w = self.inner(src, src_len, tgt_in)
            return 50 * logits, w

    data = _reverse_data(80)
    norms = _spy_on_adam(monkeypatch)
    implicit, explicit = Loud(_model(seed=2).double()), Loud(_model(seed=2).double())
    a = train_seq2seq(implicit, data, steps=2)
    assert len(norms) == 2 and all(1 - 1e-4 < n <= 1.0 for n in norms), norms
    b = train_seq2seq(explicit, data, steps=2, batch_size=64, lr=3e-3, clip=1.0, seed=0,
                      pad_id=0, log_every=None)
    assert a == b
    for p, q in zip(implicit.parameters(), explicit.parameters(), strict=True):
        assert torch.equal(p, q)


def test_training_is_reproducible_with_the_same_seed():
    data = _reverse_data(64)
    runs = []
    for _ in range(2):
        model = _model(seed=3)
        losses = train_seq2seq(model, data, steps=8, batch_size=16, seed=5)
        runs.append((losses, [p.detach().clone() for p in model.parameters()]))
    assert runs[0][0] == runs[1][0]
    for a, b in zip(runs[0][1], runs[1][1], strict=True):
        assert torch.equal(a, b)
    other = train_seq2seq(_model(seed=3), data, steps=8, batch_size=16, seed=6)
    assert other != runs[0][0]  # another batch order, another run


def test_training_logs_the_mean_loss_every_log_every_steps(capsys):
    data = _reverse_data(32)
    losses = train_seq2seq(_model(), data, steps=7, batch_size=8, log_every=3)
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"step     3  loss {sum(losses[:3]) / 3:.4f}",
                     f"step     6  loss {sum(losses[3:6]) / 3:.4f}"]


def _spy_on_batches(monkeypatch) -> list[list[int]]:
    """Record the row indices of every batch train_seq2seq draws (via SequencePairs.subset)."""
    batches: list[list[int]] = []
    original = SequencePairs.subset

    def spy(self, index):
        if isinstance(index, torch.Tensor):
            batches.append(index.tolist())
        return original(self, index)

    monkeypatch.setattr(SequencePairs, "subset", spy)
    return batches


def test_batch_larger_than_the_data_is_cut_to_the_data_size(monkeypatch):
    """batch_size=64 on 5 pairs: each batch has 5 rows (drawn with replacement, so not
    necessarily all five pairs), all of them valid indices."""
    data = _reverse_data(5)
    batches = _spy_on_batches(monkeypatch)
    losses = train_seq2seq(_model(), data, steps=3, batch_size=64)
    assert len(losses) == 3
    assert [len(b) for b in batches] == [5, 5, 5]
    assert all(0 <= i < 5 for b in batches for i in b)


def _train_by_hand(model, data, steps, batch_size, lr, clip, seed, pad_id=0,
                   betas=(0.9, 0.999), eps=1e-8):
    """Reference loop, written out: the loss over real tokens by log-softmax and gather, fresh
    gradients each step, gradient-norm clipping and Adam's update formulas (Kingma & Ba, 2015,
    Algorithm 1). Returns the losses and the gradient norm of each step before clipping."""
    generator = torch.Generator().manual_seed(seed)
    params = list(model.parameters())
    m = [torch.zeros_like(p) for p in params]
    v = [torch.zeros_like(p) for p in params]
    losses, norms = [], []
    model.train()
    for t in range(1, steps + 1):
        idx = torch.randint(len(data), (min(batch_size, len(data)),), generator=generator)
        batch = data.subset(idx)
        logits, _ = model(batch.src, batch.src_len, batch.tgt_in)        # (B, L_t, V)
        log_p = logits.log_softmax(dim=-1)
        picked = log_p.gather(-1, batch.tgt_out.unsqueeze(-1)).squeeze(-1)  # (B, L_t)
        real = batch.tgt_out != pad_id
        loss = -(picked * real).sum() / real.sum()
        grads = torch.autograd.grad(loss, params)
        norm = torch.sqrt(sum((g**2).sum() for g in grads))
        scale = min(1.0, clip / (float(norm) + 1e-6))
        with torch.no_grad():
            for p, g, m_i, v_i in zip(params, grads, m, v, strict=True):
                g = g * scale
                m_i.mul_(betas[0]).add_((1 - betas[0]) * g)
                v_i.mul_(betas[1]).add_((1 - betas[1]) * g * g)
                m_hat = m_i / (1 - betas[0] ** t)
                v_hat = v_i / (1 - betas[1] ** t)
                p.sub_(lr * m_hat / (v_hat.sqrt() + eps))
        losses.append(float(loss.detach()))
        norms.append(float(norm))
    model.eval()
    return losses, norms


@pytest.mark.parametrize("clip", [0.05, 1e9], ids=["clipping", "no-clipping"])
def test_training_steps_equal_a_hand_written_adam_loop(clip):
    """Three steps, parameter by parameter: kills a loss that counts padding, a missing
    ``zero_grad`` (gradients would accumulate from step 2) and missing clipping."""
    data = _reverse_data(64, seed=3)
    assert bool((data.tgt_out == VOCAB.pad_id).any())        # padding is there to be ignored
    ours, ref = _model(seed=4).double(), _model(seed=4).double()
    losses = train_seq2seq(ours, data, steps=3, batch_size=16, lr=0.01, clip=clip, seed=9)
    ref_losses, norms = _train_by_hand(ref, data, steps=3, batch_size=16, lr=0.01, clip=clip,
                                       seed=9)
    if clip < 1:
        assert min(norms) > 2 * clip                          # clipping acted on every step
    assert losses == pytest.approx(ref_losses, rel=1e-10)
    for (name, p), q in zip(ours.named_parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p, q, atol=1e-10, rtol=0, msg=name)


def _spy_on_adam(monkeypatch) -> list[float]:
    """Record the total norm of the gradients Adam is handed at each step."""
    norms: list[float] = []
    original = Adam.step

    def spy(self, *args, **kwargs):
        grads = [p.grad for p in self.params if p.grad is not None]
        norms.append(float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Adam, "step", spy)
    return norms


def test_the_optimizer_is_handed_gradients_clipped_to_norm_clip(monkeypatch):
    """Adam's first step moves each weight by about lr whatever the gradient's size, so the
    weights after runs with two clip values barely differ (9.6e-4 vs 1.0e-3 apart). So read
    what Adam receives instead: with clip = 1e-3 every step's gradient norm is 1e-3 (up to
    clip_grad_norm_'s 1e-6 guard), while the same first step unclipped is far larger."""
    data = _reverse_data(32)
    norms = _spy_on_adam(monkeypatch)
    train_seq2seq(_model().double(), data, steps=3, batch_size=8, lr=1e-2, clip=1e9)
    raw = norms[:]
    norms.clear()
    clip = 1e-3
    train_seq2seq(_model().double(), data, steps=3, batch_size=8, lr=1e-2, clip=clip)
    assert len(raw) == len(norms) == 3
    assert raw[0] > 100 * clip                                   # clipping has work to do
    assert all(clip * (1 - 1e-4) < n <= clip for n in norms), norms


def test_training_loss_ignores_the_logits_at_padded_positions():
    """A model that shouts the wrong token at every padded position (logits + 1e3 * token id)
    trains exactly like the plain one: same losses, same weights. A loss that counted padding
    would see losses of order 1e3."""
    data = _reverse_data(64, seed=3)
    # tgt_in = <bos> y_1..y_n <pad>..., tgt_out = y_1..y_n <eos> <pad>...: padded alike
    assert torch.equal(data.tgt_in == VOCAB.pad_id, data.tgt_out == VOCAB.pad_id)
    assert bool((data.tgt_out == VOCAB.pad_id).any())

    class LoudAtPads(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, src, src_len, tgt_in):
            logits, w = self.inner(src, src_len, tgt_in)               # (B, L_t, V)
            pads = (tgt_in == VOCAB.pad_id)[..., None]                  # (B, L_t, 1)
            return logits + 1e3 * pads * torch.arange(logits.shape[-1]), w

    plain, loud = _model(seed=4).double(), LoudAtPads(_model(seed=4).double())
    kwargs = {"steps": 3, "batch_size": 16, "lr": 0.01, "seed": 9}
    assert train_seq2seq(loud, data, **kwargs) == pytest.approx(
        train_seq2seq(plain, data, **kwargs), rel=1e-12)
    for p, q in zip(plain.parameters(), loud.inner.parameters(), strict=True):
        torch.testing.assert_close(p, q, atol=1e-12, rtol=0)


def test_every_batch_is_drawn_from_the_whole_data_set(monkeypatch):
    """Batches are drawn with replacement from all N pairs: over many steps, every pair is
    seen (a loop that only ever used the first batch_size pairs would fail)."""
    data = _reverse_data(24)
    batches = _spy_on_batches(monkeypatch)
    train_seq2seq(_model(), data, steps=40, batch_size=4)
    assert len(batches) == 40 and all(len(b) == 4 for b in batches)
    assert {i for b in batches for i in b} == set(range(24))


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"steps": 0}, ValueError, "steps must be positive"),
        ({"steps": 2.5}, TypeError, "steps must be an int"),
        ({"batch_size": 0}, ValueError, "batch_size must be positive"),
    ],
)
def test_training_bad_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        train_seq2seq(_model(), _reverse_data(8), **({"steps": 1} | kwargs))


# ------------------------------------------------------------------------ seq2seq_accuracy


class _Stub(nn.Module):
    """Returns fixed tokens per example; ``src[:, 0]`` holds the example's row number."""

    def __init__(self, outputs: torch.Tensor):
        super().__init__()
        self.outputs = outputs
        self.calls: list[tuple[int, int]] = []

    def greedy_decode(self, src, src_len, steps, bos_id):
        self.calls.append((src.shape[0], steps))
        return self.outputs[src[:, 0], :steps], None


def test_seq2seq_accuracy_hand_case():
    a, b, c = VOCAB.encode("abc")
    eos, pad = VOCAB.eos_id, VOCAB.pad_id
    tgt_out = torch.tensor([
        [a, b, c, eos],      # 4 real tokens
        [a, eos, pad, pad],  # 2 real tokens
        [b, b, eos, pad],    # 3 real tokens
    ])
    predicted = torch.tensor([
        [a, b, c, eos],      # all right
        [a, c, eos, eos],    # <eos> missed: 1 of 2
        [b, b, eos, a],      # right; what follows the target's padding is not scored
    ])
    data = SequencePairs(
        src=torch.tensor([[0, 3], [1, 3], [2, 3]]), src_len=torch.tensor([2, 2, 2]),
        tgt_in=torch.zeros_like(tgt_out), tgt_out=tgt_out,
    )
    stub = _Stub(predicted)
    token_acc, exact = seq2seq_accuracy(stub, data, batch_size=2)
    torch.testing.assert_close(token_acc, torch.tensor([1.0, 0.5, 1.0]))
    assert exact.tolist() == [True, False, True]
    assert stub.calls == [(2, 4), (1, 4)]  # two batches, decoded for the padded target length


def test_seq2seq_accuracy_does_not_score_padded_positions_even_when_predicted_pad():
    """A model that predicts <pad> where the target pads gets no credit for it: the scores are
    over real tokens only (1 of 2 here, not 3 of 4, and never above 1)."""
    a, b = VOCAB.encode("ab")
    eos, pad = VOCAB.eos_id, VOCAB.pad_id
    tgt_out = torch.tensor([[a, eos, pad, pad], [b, a, b, eos]])
    predicted = torch.tensor([[b, eos, pad, pad], [b, a, pad, pad]])
    data = SequencePairs(torch.tensor([[0], [1]]), torch.tensor([1, 1]), tgt_out, tgt_out)
    token_acc, exact = seq2seq_accuracy(_Stub(predicted), data)
    torch.testing.assert_close(token_acc, torch.tensor([0.5, 0.5]))
    assert exact.tolist() == [False, False]


def test_seq2seq_accuracy_penalises_stopping_early():
    a, b = VOCAB.encode("ab")
    eos = VOCAB.eos_id
    tgt_out = torch.tensor([[a, b, a, eos]])
    data = SequencePairs(torch.tensor([[0]]), torch.tensor([1]), tgt_out, tgt_out)
    token_acc, exact = seq2seq_accuracy(_Stub(torch.tensor([[a, eos, eos, eos]])), data)
    # positions 0 ("a") and 3 (the final <eos>) happen to match; 1 and 2 do not
    assert float(token_acc[0]) == 0.5 and not bool(exact[0])


def test_seq2seq_accuracy_of_a_real_model_is_consistent_with_greedy_decode():
    data = _reverse_data(40, seed=9)
    model = _model()
    token_acc, exact = seq2seq_accuracy(model, data, batch_size=16)
    assert token_acc.shape == (40,) and exact.shape == (40,) and exact.dtype == torch.bool
    assert ((token_acc >= 0) & (token_acc <= 1)).all()
    assert torch.equal(exact, token_acc == 1)
    tokens, _ = model.greedy_decode(data.src, data.src_len, data.tgt_out.shape[1], VOCAB.bos_id)
    # by hand, one example at a time: hits over the target's non-<pad> positions
    for n, (said, target) in enumerate(zip(tokens.tolist(), data.tgt_out.tolist(), strict=True)):
        scored = [t for t, y in enumerate(target) if y != VOCAB.pad_id]
        hits = sum(said[t] == target[t] for t in scored)
        assert float(token_acc[n]) == pytest.approx(hits / len(scored), abs=1e-7)
        assert bool(exact[n]) == (hits == len(scored))


# --- teacher_forced_loss -------------------------------------------------------------------


def _loss_by_hand(model: Seq2Seq, data: SequencePairs, pad_id: int = 0) -> float:
    """Reference: one example at a time, -log p(target token) summed over real tokens only."""
    total, count = 0.0, 0
    with torch.no_grad():
        for n in range(len(data)):
            one = data.subset(slice(n, n + 1))
            logits, _ = model(one.src, one.src_len, one.tgt_in)       # (1, L_t, V)
            log_p = logits[0].double().log_softmax(dim=-1)             # (L_t, V)
            for t, token in enumerate(one.tgt_out[0].tolist()):
                if token != pad_id:
                    total -= float(log_p[t, token])
                    count += 1
    return total / count


def test_teacher_forced_loss_equals_a_token_by_token_reference():
    from attention_src.training import teacher_forced_loss

    data = _reverse_data(40, seed=2)          # lengths 2..5: the targets are padded
    assert bool((data.tgt_out == VOCAB.pad_id).any())
    model = _model(seed=1)
    got = teacher_forced_loss(model, data, batch_size=7)   # batches of 7: a ragged last one
    assert got == pytest.approx(_loss_by_hand(model, data), rel=1e-5)
    assert not model.training


def test_teacher_forced_loss_ignores_what_the_model_says_at_padded_positions():
    from attention_src.training import teacher_forced_loss

    data = _reverse_data(24, seed=4)
    model = _model(seed=2)
    real = (data.tgt_out != VOCAB.pad_id)

    class LoudAtPads(nn.Module):
        """The same model, but with huge logits for the wrong token wherever the target pads."""

        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, src, src_len, tgt_in):
            logits, w = self.inner(src, src_len, tgt_in)
            rows = {tuple(r.tolist()): i for i, r in enumerate(data.src)}
            pads = torch.stack([~real[rows[tuple(r.tolist())]] for r in src])  # (B, L_t)
            return logits + 1e3 * pads[..., None] * torch.arange(logits.shape[-1]), w

    assert teacher_forced_loss(LoudAtPads(model), data) == pytest.approx(
        teacher_forced_loss(model, data), rel=1e-6)


def test_teacher_forced_loss_rejects_empty_or_all_pad_data():
    from attention_src.training import teacher_forced_loss

    data = _reverse_data(8)
    with pytest.raises(ValueError, match="data is empty"):
        teacher_forced_loss(_model(), data.subset(slice(0, 0)))
    all_pad = SequencePairs(data.src, data.src_len, data.tgt_in, torch.zeros_like(data.tgt_out))
    with pytest.raises(ValueError, match="every target token of data is pad_id=0"):
        teacher_forced_loss(_model(), all_pad)
    with pytest.raises(ValueError, match="batch_size"):
        teacher_forced_loss(_model(), data, batch_size=0)


# --- defaults and bad input, argument by argument (issue 13) ----------------------------------


def _pairs_513(steps: int = 3) -> SequencePairs:
    """513 pairs (one more than the default batch), row ``n`` holding ``n`` in ``src[:, 0]``;
    targets ``a b <eos>`` with the last position padded in odd rows."""
    a, b = VOCAB.encode("ab")
    n = 513
    src = torch.stack([torch.arange(n), torch.full((n,), a)], dim=1)
    tgt_out = torch.tensor([a, b, VOCAB.eos_id]).repeat(n, 1)
    tgt_out[1::2, -1] = VOCAB.pad_id
    return SequencePairs(src, torch.full((n,), 2), torch.zeros_like(tgt_out), tgt_out)


class _Recorder(_Stub):
    """A stub that also records ``bos_id``, and as a model returns fixed logits."""

    def __init__(self, outputs: torch.Tensor, vocab: int):
        super().__init__(outputs)
        self.bos: list[int] = []
        self.rows: list[int] = []
        self.vocab = vocab

    def greedy_decode(self, src, src_len, steps, bos_id):
        self.bos.append(bos_id)
        return super().greedy_decode(src, src_len, steps, bos_id)

    def forward(self, src, src_len, tgt_in):
        self.rows.append(src.shape[0])
        # logits (float64): 0 on the stored output token, -10 on every other
        logits = torch.full((src.shape[0], tgt_in.shape[1], self.vocab), -10.0,
                            dtype=torch.float64)
        logits.scatter_(2, self.outputs[src[:, 0], : tgt_in.shape[1], None], 0.0)
        return logits, None


def test_seq2seq_accuracy_defaults_are_bos_1_pad_0_and_batches_of_512():
    data = _pairs_513()
    predicted = data.tgt_out.clone()
    predicted[:, -1] = VOCAB.pad_id  # right on the padded rows, wrong <eos> on the others
    stub = _Recorder(predicted, len(VOCAB))
    token_acc, exact = seq2seq_accuracy(stub, data)
    assert stub.calls == [(512, 3), (1, 3)] and set(stub.bos) == {1} == {VOCAB.bos_id}
    # pad_id = 0 = VOCAB.pad_id: a padded position is not scored, so odd rows are perfect
    assert VOCAB.pad_id == 0
    expected = torch.where(torch.arange(513) % 2 == 1, 1.0, 2 / 3)
    torch.testing.assert_close(token_acc, expected)
    assert torch.equal(exact, torch.arange(513) % 2 == 1)


def test_teacher_forced_loss_defaults_are_pad_0_and_batches_of_512():
    from attention_src.training import teacher_forced_loss

    data = _pairs_513()
    said = data.tgt_out.clone()
    said[data.tgt_out == VOCAB.pad_id] = VOCAB.encode("a")[0]  # wrong where the target pads
    stub = _Recorder(said, len(VOCAB))
    got = teacher_forced_loss(stub, data)
    assert stub.rows == [512, 1]
    # every real token gets logit 0 against V - 1 logits of -10: one and the same loss; a
    # padded position, if it counted, would cost about 10
    logits = torch.tensor([0.0] + [-10.0] * (len(VOCAB) - 1), dtype=torch.float64)
    assert got == pytest.approx(float(-torch.log_softmax(logits, 0)[0]), rel=1e-9)
    assert got == teacher_forced_loss(stub, data, pad_id=0, batch_size=512)


def test_teacher_forced_loss_names_its_bad_arguments_in_full():
    from attention_src.training import teacher_forced_loss

    data = _reverse_data(8)
    with pytest.raises(ValueError, match=r"^data is empty: no target token to score$"):
        teacher_forced_loss(_model(), data.subset(slice(0, 0)))
    with pytest.raises(ValueError, match=r"^batch_size must be positive, got 0$"):
        teacher_forced_loss(_model(), data, batch_size=0)
    with pytest.raises(TypeError, match=r"^batch_size must be an int, got float$"):
        teacher_forced_loss(_model(), data, batch_size=8.0)
    one = data.subset(slice(0, 1))  # one pair is enough: not "empty"
    assert teacher_forced_loss(_model(), one) > 0

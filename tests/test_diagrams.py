"""attention_src.diagrams: the structure of every diagram (boxes, arrows, labels, colours),
checked on its data and on the rendered artists, never on pixels; the SVG's determinism and
text; named errors for bad input."""

from __future__ import annotations

import html
import re

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
from matplotlib.colors import to_hex  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from attention_src import diagrams as D  # noqa: E402
from attention_src.plotting import MAX_FIGURE_WIDTH, OKABE_ITO  # noqa: E402

ALT = "Diagram: two boxes."

# What each diagram's alt text must name (lower case), beyond "Diagram:".
ALT_NAMES = {
    "scaled_dot_product_graph": ["queries q", "keys k", "values v", "softmax", "mask",
                                 "(b, l_q, l_k)", "(b, l_q, d_v)", "square root of d_k"],
    "multi_head": ["w_q", "w_k", "w_v", "h heads", "d_head", "concatenated", "w_o",
                   "(b, l, d_model)"],
    "encoder_block_pre_norm": ["encoder", "pre-norm", "self-attention", "feed-forward",
                               "residual"],
    "encoder_block_post_norm": ["encoder", "post-norm", "residual"],
    "decoder_block_pre_norm": ["decoder", "pre-norm", "masked self-attention",
                               "cross-attention", "encoder memory", "residual"],
    "decoder_block_post_norm": ["decoder", "post-norm", "cross-attention"],
    "encoder_decoder": ["source tokens", "n encoder blocks", "memory", "shifted right",
                        "n decoder blocks", "cross-attention", "keys and values",
                        "next token"],
    "encoder_decoder_pre_norm_tied": [
        "pre-norm", "source tokens", "with their positions", "n encoder blocks",
        "then a final layer norm, into the memory", "n decoder blocks", "cross-attention",
        "from the memory, then a final layer norm; a linear layer", "tied to the target "
        "embedding", "dashed arrow marked tied", "embedding's matrix", "next token"],
    "encoder_decoder_pre_norm_rotary_tied": [
        "pre-norm", "scaled by the square root of d_model with no position added",
        "n encoder blocks, then a final layer norm", "embedded the same way",
        "rotary positions", "self-attention in every block rotates its queries and keys",
        "cross-attention is not rotated", "dashed arrow marked tied", "next token"],
    "self_attention_projections": ["one sequence x", "w_q", "w_k", "w_v"],
    "soft_lookup": ["query q", "keys k_j", "softmax", "alpha_j", "values v_j"],
    "rnn_encoder_decoder": ["one fixed context vector c", "c_i", "h_j", "s_i",
                            "weights of c_i depend on the previous decoder state s_{i-1}"],
    "band_window": ["band window", "|i - j| < 2", "at most 3 keys", "masked"],
    "flash_tiling": ["hbm", "sram", "q_i", "k_j", "v_j", "running maximum m", "sum s",
                     "accumulator u", "o_i = u / s", "written back", "never stored",
                     "flashattention-2's loop order", "query block outside",
                     "written once", "p = e^(s - m)"],
    "kv_cache_growth": ["kv cache", "numbered from 0", "q_t", "k_0 to k_t", "v_0 to v_t",
                        "whole cache", "thick outline", "appended", "not recomputed"],
    "receptive_fields": ["causal convolutions", "all 5 inputs, the first through 2 layers",
                         "recurrent chain",
                         "through 5 steps", "self-attention", "every input directly"],
    "gpu_memory_hierarchy": ["hbm", "shared memory (on-chip sram)", "registers",
                             "tensor cores", "running maximum m", "written back to hbm, once",
                             "log-sum-exp l_i",
                             "largest and slowest"],
    "pretrained_encoder": ["word piece", "position", "segment", "summed and layer-normed",
                           "(b, l, 384)", "6 post-norm encoder blocks", "key mask m",
                           "padding", "mean over the real tokens", "sentence vector"],
    "node_neighbourhood": ["node i is the query", "neighbours 1 to 4", "alpha_ij", "itself",
                           "no weight"],
}


@pytest.fixture(scope="module")
def built():
    return {name: build() for name, build in D.BUILDERS.items()}


@pytest.fixture(scope="module")
def svgs(built):
    return {name: D.to_svg(d) for name, d in built.items()}


def _data_path(diagram, path):
    """Assert each consecutive pair of ``path`` is joined by a data edge."""
    for a, b in zip(path, path[1:], strict=False):
        assert diagram.edge(a, b).kind == "data", (a, b)


def _reaches(diagram, src, dst, kinds=("data",)):
    """Whether ``dst`` can be reached from ``src`` along edges of ``kinds``."""
    seen, todo = set(), [src]
    while todo:
        node = todo.pop()
        if node == dst:
            return True
        if node in seen:
            continue
        seen.add(node)
        todo += [e.dst for e in diagram.edges_from(node) if e.kind in kinds]
    return False


# ---------------------------------------------------------------- roles and colours


def test_every_role_colour_comes_from_okabe_ito_and_roles_look_different():
    palette = {c.lower() for c in OKABE_ITO.values()}
    looks = set()
    for role in D.ROLES:
        edge, fill = D.role_colours(role)
        assert edge in palette, role
        looks.add((edge, fill, D.ROLE_STYLE[role][2]))
    assert len(looks) == len(D.ROLES)  # no two roles drawn alike
    assert D.role_colours("query")[0] == OKABE_ITO["blue"].lower()
    assert D.role_colours("key")[0] == OKABE_ITO["vermillion"].lower()
    assert D.role_colours("value")[0] == OKABE_ITO["green"].lower()
    assert D.role_colours("output")[0] == OKABE_ITO["purple"].lower()
    assert D.role_colours("weights")[0] == OKABE_ITO["orange"].lower()


def test_fill_is_the_colour_mixed_with_white():
    assert D.role_colours("input")[1] == "#ffffff"  # strength 0: white
    # blue #0072B2 at 0.3, by hand: 255 - 0.3 * (255 - c) per channel is 178.5 (rounded
    # half to even: b2), 212.7 (d5), 231.9 (e8)
    assert D.role_colours("query")[1] == "#b2d5e8"
    assert D._fill(OKABE_ITO["green"], 1.0) == OKABE_ITO["green"].lower()


def test_unknown_role_is_named():
    with pytest.raises(ValueError, match="unknown role 'scores'"):
        D.role_colours("scores")


def test_every_rendered_box_has_its_roles_colours(built):
    for name, diagram in built.items():
        fig = D.render(diagram)
        for node in diagram.nodes:
            box, text = fig.diagram_artists["nodes"][node.id]
            edge, fill = D.role_colours(node.role)
            assert to_hex(box.get_edgecolor()) == edge, (name, node.id)
            assert to_hex(box.get_facecolor()) == fill, (name, node.id)
            assert text.get_text() == node.label


def test_every_text_is_at_least_13_pt_and_edge_labels_14_pt_at_the_books_width(built):
    # a phone shows the book's 5.8 in width 358 px wide: a 12 pt label's subscripts came
    # out about 7 px there, too small; 14 pt edge labels keep theirs readable
    for name, diagram in built.items():
        assert diagram.width <= MAX_FIGURE_WIDTH
        fig = D.render(diagram)
        sizes = [t.get_fontsize() for t in fig.axes[0].texts]
        assert sizes and min(sizes) >= 13, name
        assert {t.get_fontsize() for t in fig.diagram_artists["edge_labels"]} <= {14}, name
        assert fig.get_size_inches()[0] == pytest.approx(diagram.width)


# ---------------------------------------------------------------- every diagram


def test_every_diagram_reads_cleanly(built):
    """No label overflows its box, covers a box or another label, or leaves the canvas."""
    for name, diagram in built.items():
        assert D.layout_problems(D.render(diagram)) == [], name


def test_every_alt_text_starts_with_diagram_and_names_what_is_drawn(built):
    assert set(ALT_NAMES) == set(built)
    for name, diagram in built.items():
        assert diagram.alt.startswith("Diagram: "), name
        alt = diagram.alt.lower()
        missing = [word for word in ALT_NAMES[name] if word not in alt]
        assert not missing, (name, missing)


def test_every_edge_joins_existing_nodes_and_every_node_is_connected(built):
    for name, diagram in built.items():
        ids = {n.id for n in diagram.nodes}
        targets = ids | {r.id for r in diagram.regions if r.id}
        for e in diagram.edges:
            assert e.src in ids and e.dst in targets, (name, e)
        if name == "band_window":  # a grid of cells, no arrows
            assert not diagram.edges
            continue
        touched = {e.src for e in diagram.edges} | {e.dst for e in diagram.edges}
        for region in diagram.regions:  # an arrow to a region reaches each of its boxes
            if region.id in touched:
                touched |= set(region.members) - {region.id}
        touched -= {r.id for r in diagram.regions}
        assert touched == ids, (name, ids - touched)


# ---------------------------------------------------------------- chapter 3


def test_sdpa_graph_runs_scores_scale_mask_softmax_weights_product_output():
    d = D.scaled_dot_product_graph()
    _data_path(d, ["scores", "scale", "mask", "softmax", "weights", "product", "O"])
    assert d.edge("Q", "scores").label == "$(B, L_q, d_k)$"
    assert d.edge("K", "scores").label == "$(B, L_k, d_k)$"
    assert d.edge("V", "product").label == "$(B, L_k, d_v)$"
    assert d.edge("weights", "product").label == "$(B, L_q, L_k)$"  # the weights' shape
    assert "$(B, L_q, L_k)$" in d.edge("softmax", "weights").label
    assert d.edge("product", "O").label == "$(B, L_q, d_v)$"
    assert all(e.label for e in d.edges)  # a shape at every edge
    # the mask comes after the scaling and before the softmax, and is drawn as the mask
    assert d.node("mask").role == "mask" and r"\infty" in d.edge("mask", "softmax").label
    # the chapter's S is the scaled product: QK^T, then S = QK^T / sqrt(d_k) (the radical as
    # a character, which a browser draws whole in the SVG's text)
    assert d.node("scores").label == r"$QK^\top$"
    assert d.node("scale").label.startswith("$S =") and "\u221a$d_k$" in d.node("scale").label
    roles = d.roles()
    assert (roles["query"], roles["key"], roles["value"]) == (["Q"], ["K"], ["V"])
    assert roles["weights"] == ["weights"] and roles["output"] == ["O"]
    # V joins only at the product: it never reaches the softmax
    assert not _reaches(d, "V", "softmax") and _reaches(d, "Q", "O")


# ---------------------------------------------------------------- chapter 5


@pytest.mark.parametrize("h_shown", [2, 3])
def test_multi_head_projects_splits_attends_in_parallel_concatenates_and_projects(h_shown):
    d = D.multi_head(h_shown)
    for proj, role in (("Wq", "query"), ("Wk", "key"), ("Wv", "value")):
        assert d.node(proj).role == role
        _data_path(d, ["X", proj, "split"])
    heads = [n.id for n in d.nodes if n.id.startswith("head")]
    assert heads == [f"head{r}" for r in range(1, h_shown + 1)]
    assert d.node(heads[-1]).label == "head $h$"
    for head in heads:
        _data_path(d, ["split", head, "concat"])
    (region,) = d.regions
    assert set(region.members) == set(heads) and "parallel" in region.label
    assert r"d_{\mathrm{head}}" in region.label
    assert d.edge("concat", "Wo").label == r"$(B, L, h\,d_{\mathrm{head}})$"
    assert d.edge("Wo", "O").label == r"$(B, L, d_{\mathrm{model}})$"
    assert d.edge("X", "Wq").label == r"$(B, L, d_{\mathrm{model}})$"
    assert d.node("Wo").label == "$W_o$"


def test_multi_head_refuses_a_head_count_that_does_not_fit():
    with pytest.raises(ValueError, match="h_shown must be 2 or 3, .*got 4|got 4"):
        D.multi_head(4)


# ---------------------------------------------------------------- chapter 6


def _residuals(d):
    return [(e.src, e.dst) for e in d.edges if e.kind == "residual"]


def test_pre_norm_encoder_residual_bypasses_the_norm_and_the_sublayer():
    d = D.encoder_block(norm_first=True)
    _data_path(d, ["x", "norm1", "attn", "add1", "norm2", "ffn", "add2", "out"])
    assert _residuals(d) == [("x", "add1"), ("add1", "add2")]
    for src, _dst in _residuals(d):
        assert d.node(src).role != "norm"  # pre-norm: the residual stream is never normed
    assert d.node("norm1").role == "norm"
    # as attention_src.transformer builds it: no norm after the block's last sum (the stack
    # has one final norm, Transformer.encoder_norm)
    assert [n.id for n in d.nodes if n.role == "norm"] == ["norm1", "norm2"]
    assert "final layer norm after its last block" in d.alt


def test_post_norm_encoder_normalises_after_each_sum():
    d = D.encoder_block(norm_first=False)
    _data_path(d, ["x", "attn", "add1", "norm1", "ffn", "add2", "norm2", "out"])
    assert _residuals(d) == [("x", "add1"), ("norm1", "add2")]
    assert "final_norm" not in {n.id for n in d.nodes}
    assert d.name == "encoder_block_post_norm"


@pytest.mark.parametrize("norm_first", [True, False])
def test_decoder_block_masks_self_attention_and_reads_the_encoder_memory(norm_first):
    d = D.decoder_block(norm_first)
    sublayers = ["attn", "cross", "ffn"]
    for i, sub in enumerate(sublayers, start=1):
        assert _reaches(d, sub, f"add{i}")
        assert d.edge(f"add{i}" if norm_first else f"norm{i}", (
            f"norm{i + 1}" if norm_first and i < 3 else
            "out" if norm_first else
            sublayers[i] if i < 3 else "out"))
    assert d.node("attn").label == "masked self-attention"
    assert d.node("mask").role == "mask" and d.edge("mask", "attn").kind == "data"
    read = d.edge("memory", "cross")
    assert read.kind == "read" and read.label == "$K, V$"
    assert d.node("memory").role == "memory"
    assert len(_residuals(d)) == 3
    assert not _reaches(d, "memory", "attn")  # the memory enters at cross-attention only


def test_a_residual_lane_passes_right_of_every_box_it_bypasses(built):
    for name in ("encoder_block_pre_norm", "decoder_block_post_norm"):
        d = built[name]
        for e in d.edges:
            if e.kind != "residual":
                continue
            a, b = d.node(e.src), d.node(e.dst)
            lane = D._residual_lane(d, a, b, e.lane)
            between = [n for n in d.nodes if min(a.y, b.y) <= n.y <= max(a.y, b.y)]
            assert len(between) >= 3  # at least one box bypassed
            assert all(lane >= n.box[2] + e.lane - 1e-9 for n in between)
            assert lane == pytest.approx(max(n.box[2] for n in between) + e.lane)


def test_encoder_decoder_feeds_the_memory_to_every_decoder_block_only():
    d = D.encoder_decoder()
    _data_path(d, ["src", "src_embed", "encoder", "memory"])
    _data_path(d, ["tgt", "tgt_embed", "decoder", "head", "probs"])
    read = d.edge("memory", "decoder")
    assert read.kind == "read" and read.label == "$K, V$"
    assert [e.dst for e in d.edges_from("memory")] == ["decoder"]
    assert not _reaches(d, "tgt", "memory", kinds=("data", "read"))  # no target leak
    assert "L_k" in d.edge("src_embed", "encoder").label  # the source: keys of cross-attn
    assert "L_q" in d.edge("tgt_embed", "decoder").label
    assert [(r.members, r.label) for r in d.regions] == [
        (("encoder",), r"$\times N$"), (("decoder",), r"$\times N$")]
    assert d.node("memory").role == "memory" and d.node("probs").role == "output"


#: SHA-256 of chapter 6's stored drawing, ``to_svg(encoder_decoder())``, taken before the
#: chapter 10 options existed: the defaults must still draw exactly this.
ENCODER_DECODER_SVG_SHA256 = "c7ca67b0bae98157a837b0a13d2f4795315001f5bd78a460b161244a6f8405a8"


def test_encoder_decoder_defaults_draw_chapter_6s_svg_byte_for_byte(svgs):
    import hashlib

    assert hashlib.sha256(svgs["encoder_decoder"].encode()).hexdigest() == \
        ENCODER_DECODER_SVG_SHA256
    explicit = D.encoder_decoder(norm_first=False, positions="sinusoidal", tied=False)
    assert explicit == D.encoder_decoder() and explicit.name == "encoder_decoder"


def _variants():
    return [(nf, pos, tied) for nf in (False, True) for pos in ("sinusoidal", "rotary")
            for tied in (False, True)]


@pytest.mark.parametrize(("norm_first", "positions", "tied"), _variants())
def test_encoder_decoder_variants_draw_final_norms_positions_and_tie(norm_first, positions,
                                                                     tied):
    d = D.encoder_decoder(norm_first=norm_first, positions=positions, tied=tied)
    rotary = positions == "rotary"
    ids = {n.id for n in d.nodes}
    # pre-norm: one final layer norm after each stack, on the path to the memory and to the
    # linear layer; post-norm: none (the blocks end with theirs)
    if norm_first:
        _data_path(d, ["src", "src_embed", "encoder", "enc_norm", "memory"])
        _data_path(d, ["tgt", "tgt_embed", "decoder", "dec_norm", "head", "probs"])
        assert d.roles()["norm"] == ["enc_norm", "dec_norm"]
        assert [d.node(n).label for n in ("enc_norm", "dec_norm")] == ["final norm"] * 2
        assert d.node("encoder").y < d.node("enc_norm").y < d.node("memory").y
        assert d.node("decoder").y < d.node("dec_norm").y < d.node("head").y
    else:
        _data_path(d, ["src", "src_embed", "encoder", "memory"])
        _data_path(d, ["tgt", "tgt_embed", "decoder", "head", "probs"])
        assert "norm" not in d.roles() and not ids & {"enc_norm", "dec_norm"}
    # the memory is read by the decoder blocks only, and the final norms are outside x N
    assert [(e.dst, e.kind) for e in d.edges_from("memory")] == [("decoder", "read")]
    assert [r.members for r in d.regions] == [("encoder",), ("decoder",)]
    assert not _reaches(d, "tgt", "memory", kinds=("data", "read"))
    # positions: added to the embeddings, or rotary in every block's self-attention
    for embed in ("src_embed", "tgt_embed"):
        label = d.node(embed).label
        assert ("position" in label) != rotary
        assert (label == "embed \u00d7 \u221a$d_{\\mathrm{model}}$") == rotary
    for block, word in (("encoder", "encoder block"), ("decoder", "decoder block")):
        label = d.node(block).label
        assert label.startswith(word)
        assert ("rotary $q$, $k$" in label and "self-attention" in label) == rotary
    # tied: one dashed arrow from the target embedding to the output layer, around the
    # decoder's column
    tie = [e for e in d.edges if e.dst == "head" and e.src != ("dec_norm" if norm_first
                                                              else "decoder")]
    if tied:
        assert tie == [d.edge("tgt_embed", "head")]
        assert (tie[0].kind, tie[0].label, tie[0].around) == ("read", "tied", True)
    else:
        assert tie == []
    assert not any(e.src == "src_embed" and e.dst == "head" for e in d.edges)
    # the alt text says exactly what is drawn
    alt = d.alt.lower()
    assert alt.startswith("diagram: the transformer encoder-decoder,")
    assert ("final layer norm" in alt) == norm_first == ("pre-norm" in alt)
    assert ("rotary" in alt) == rotary == ("no position added" in alt)
    assert ("with their positions" in alt) != rotary
    assert ("tied" in alt) == tied == ("dashed arrow marked tied" in alt)
    assert d.name == ("encoder_decoder" + "_pre_norm" * norm_first + "_rotary" * rotary
                      + "_tied" * tied)
    assert D.layout_problems(D.render(d)) == []


@pytest.mark.parametrize(("norm_first", "positions", "tied"), _variants())
def test_no_arrow_of_the_encoder_decoder_runs_through_another_arrows_or_regions_label(
        norm_first, positions, tied):
    # layout_problems checks labels against boxes and labels, not against lines: the memory's
    # arrow, lifted by a final norm or a taller block, would cross the decoder's "x N"
    from matplotlib.patches import FancyArrowPatch
    from matplotlib.path import Path

    d = D.encoder_decoder(norm_first=norm_first, positions=positions, tied=tied)
    fig = D.render(d)
    renderer = fig.canvas.get_renderer()
    fig.draw(renderer)
    ax = fig.axes[0]
    arrows = [p for p in ax.patches if isinstance(p, FancyArrowPatch)]
    texts = fig.diagram_artists["edge_labels"] + fig.diagram_artists["region_labels"]
    own = dict(zip([e for e in d.edges if e.label], fig.diagram_artists["edge_labels"],
                   strict=True))
    crossings = []
    for edge, arrow in zip(d.edges, arrows, strict=True):
        path = arrow.get_path()
        n = 1 + list(path.codes[1:]).index(Path.MOVETO)  # the shaft, without its head
        shaft = ax.transData.transform_path(Path(path.vertices[:n], path.codes[:n]))
        crossings += [(edge.src, edge.dst, t.get_text()) for t in texts
                      if t is not own.get(edge)
                      and shaft.intersects_bbox(t.get_window_extent(renderer), filled=False)]
    assert crossings == []


def test_the_tie_is_drawn_dashed_around_the_decoder_column():
    from matplotlib.patches import FancyArrowPatch

    d = D.encoder_decoder(norm_first=True, tied=True)
    fig = D.render(d)
    arrows = [p for p in fig.axes[0].patches if isinstance(p, FancyArrowPatch)]
    assert len(arrows) == len(d.edges)
    dashed = [a for a in arrows if a.get_linestyle() == "--"]
    assert len(dashed) == 2  # the memory read by the decoder, and the tie
    embed, head = d.node("tgt_embed"), d.node("head")
    lane = D._residual_lane(d, embed, head, d.edge("tgt_embed", "head").lane)
    # right of every box in the decoder's column between the two, and of its x N box
    assert lane > max(n.box[2] for n in d.nodes) and lane > D._region_box(d, d.regions[1])[2]
    tie = dashed[1].get_path().vertices
    assert tie[:3].ravel().tolist() == pytest.approx([embed.box[2], embed.y, lane, embed.y,
                                                      lane, head.y])
    assert tie[3][1] == pytest.approx(head.y) and tie[3][0] <= head.box[2] + 0.05
    # the tie's label sits on the lane, inside the canvas
    (label,) = [t for t in fig.diagram_artists["edge_labels"] if t.get_text() == "tied"]
    assert label.get_position()[0] == pytest.approx(lane)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"norm_first": "yes"}, TypeError, "norm_first must be a bool, got str 'yes'"),
        ({"norm_first": 1}, TypeError, "norm_first must be a bool, got int 1"),
        ({"tied": None}, TypeError, "tied must be a bool, got NoneType None"),
        ({"positions": "learned"}, ValueError,
         "positions must be 'sinusoidal' or 'rotary', got 'learned'"),
        ({"positions": "Rotary"}, ValueError, "got 'Rotary'"),
        ({"positions": None}, ValueError, "got None"),
    ],
    ids=["norm-first-str", "norm-first-int", "tied-none", "positions-learned",
         "positions-case", "positions-none"],
)
def test_encoder_decoder_refuses_bad_options_by_name(kwargs, error, message):
    with pytest.raises(error, match=re.escape(message)):
        D.encoder_decoder(**kwargs)


def test_encoder_decoder_options_are_keyword_only():
    with pytest.raises(TypeError, match="positional argument"):
        D.encoder_decoder(True)


def test_block_norm_first_must_be_a_bool():
    with pytest.raises(TypeError, match="norm_first must be a bool, got str"):
        D.encoder_block("yes")


# ---------------------------------------------------------------- chapters 1, 2 and 4


def test_self_attention_takes_queries_keys_and_values_from_one_sequence():
    d = D.self_attention_projections()
    assert [e.src for e in d.edges] == ["X", "X", "X"]
    for dst, role, w in (("Q", "query", "W_q"), ("K", "key", "W_k"), ("V", "value", "W_v")):
        assert d.node(dst).role == role
        assert d.edge("X", dst).label.startswith(f"${w}$")
        assert f"XW_{w[-1]}" in d.node(dst).label


@pytest.mark.parametrize("n_pairs", [2, 3, 4])
def test_soft_lookup_scores_every_key_and_sums_every_value(n_pairs):
    d = D.soft_lookup(n_pairs)
    for j in range(1, n_pairs + 1):
        _data_path(d, ["q", f"k{j}", f"a{j}", f"v{j}", "o"])
        assert d.node(f"a{j}").role == "weights"
    (region,) = d.regions
    assert region.members == tuple(f"a{j}" for j in range(1, n_pairs + 1))
    assert "softmax" in region.label
    fig = D.render(d)
    assert D.layout_problems(fig) == []
    # the region's label stays inside the dashed box (the layout check does not look at it)
    (label,) = fig.diagram_artists["region_labels"]
    extent = label.get_window_extent(fig.canvas.get_renderer())
    x0, _, x1, _ = D._region_box(d, region)
    assert x0 * fig.dpi < extent.x0 and extent.x1 < x1 * fig.dpi


def test_soft_lookup_refuses_too_many_pairs():
    with pytest.raises(ValueError, match="n_pairs must be 2 to 4.*got 5"):
        D.soft_lookup(5)


@pytest.mark.parametrize("steps", [2, 3])
def test_rnn_encoder_decoder_one_context_against_one_per_step(steps):
    d = D.rnn_encoder_decoder(steps)
    for i in range(1, steps + 1):
        # without attention every decoder state reads the same C, and no encoder state
        assert [e.src for e in d.edges_to(f"s{i}")] == ["C"] + ([f"s{i - 1}"] if i > 1 else [])
        # with attention every step has its own context, fed by every encoder state ...
        assert sorted(e.src for e in d.edges_to(f"c{i}") if e.kind == "data") == [
            f"ah{j}" for j in range(1, steps + 1)]
        # ... with weights alpha_ij = softmax_j a(s_{i-1}, h_j): the previous decoder state
        # (s_0, the initial state, for i = 1) is the query, read by c_i
        assert [e.src for e in d.edges_to(f"c{i}") if e.kind == "read"] == [f"as{i - 1}"]
        assert d.node(f"as{i - 1}").role == "query"
        assert d.edge(f"c{i}", f"as{i}") and d.edge(f"as{i - 1}", f"as{i}")
    assert [e.src for e in d.edges_to("C")] == [f"h{steps}"]
    left, right = d.regions
    assert "C" in left.members and not any(m.startswith("c") for m in left.members)
    assert {f"c{i}" for i in range(1, steps + 1)} <= set(right.members)
    assert d.node("as0").label == "$s_0$" and "as0" in right.members
    assert D.layout_problems(D.render(d)) == []


def test_rnn_encoder_decoder_refuses_steps_that_do_not_fit():
    with pytest.raises(ValueError, match="steps must be 2 or 3.*got 4"):
        D.rnn_encoder_decoder(4)


@pytest.mark.parametrize(("length", "window", "causal"),
                         [(8, 2, False), (6, 3, True), (5, 1, False), (2, 4, False)])
def test_band_window_colours_exactly_the_cells_band_mask_allows(length, window, causal):
    from attention_src.softmax import band_mask  # the book's mask, the reference

    d = D.band_window(length, window, causal)
    allowed = band_mask(length, window, causal=causal)
    for i in range(length):
        for j in range(length):
            role = d.node(f"c{i}_{j}").role
            assert role == ("weights" if allowed[i, j] else "mask"), (i, j)
        assert d.node(f"q{i}").role == "query" and d.node(f"k{i}").role == "key"
    assert D.layout_problems(D.render(d)) == []
    assert d.name == ("band_window_causal" if causal else "band_window")
    assert r"j \leq i" in d.node("note").label if causal else "leq" not in d.node("note").label


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"length": 9}, "length must be an int from 2 to 8.*got 9"),
    ({"length": True}, "length must be an int.*got True"),
    ({"window": 0}, "window must be an int >= 1, got 0"),
    ({"window": 1.5}, "window must be an int >= 1, got 1.5"),
])
def test_band_window_refuses_bad_sizes(kwargs, message):
    with pytest.raises(ValueError, match=message):
        D.band_window(**kwargs)


def test_flash_tiling_loads_blocks_into_sram_and_writes_the_output_once():
    d = D.flash_tiling()
    hbm, sram = d.regions
    assert set(hbm.members) == {"Q", "K", "V", "O"} and hbm.label == "HBM"
    assert set(sram.members) == {"Qi", "Kj", "Vj", "S", "stats", "Oi"}
    for big, block in (("Q", "Qi"), ("K", "Kj"), ("V", "Vj")):
        assert d.edge(big, block).kind == "read"  # loaded, not computed
        assert d.node(big).role == d.node(block).role  # a block has its tensor's colour
    # the loads name their blocks: I for the queries, J for the keys and values
    assert [d.edge(big, block).label for big, block in (("Q", "Qi"), ("K", "Kj"), ("V", "Vj"))
            ] == ["block $I$", "block $J$", "block $J$"]
    _data_path(d, ["Qi", "S", "stats", "Oi"])
    _data_path(d, ["Kj", "S"])
    _data_path(d, ["Vj", "Oi"])
    # the scores reach the accumulator as P = e^{S - m}: U += P V_J
    assert d.edge("S", "Oi").kind == "data" and d.edge("S", "Oi").label == "$P = e^{S - m}$"
    assert "FlashAttention-2" in D.flash_tiling.__doc__
    assert d.edges_to("O") == [d.edge("Oi", "O")]  # the only write to HBM
    # chapter 9's letters: blocks I and J, running maximum m and sum s, accumulator U
    assert [d.node(n).label for n in ("Qi", "Kj", "Vj")] == ["$Q_I$", "$K_J$", "$V_J$"]
    assert d.node("stats").role == "memory" and d.node("stats").label.endswith("$m$, $s$")
    assert d.node("Oi").label.startswith("$U$") and "O_I = U/s" in d.edge("Oi", "O").label
    # the scores never go back to HBM: no edge leaves S for a node outside SRAM
    assert all(e.dst in sram.members for e in d.edges_from("S"))


@pytest.mark.parametrize("steps", [2, 4, 5])
def test_kv_cache_grows_by_one_key_and_value_a_step_and_keeps_the_old_ones(steps):
    d = D.kv_cache_growth(steps)
    ids = {n.id for n in d.nodes}
    regions = {r.id: r for r in d.regions if r.id}
    for t in range(steps):  # positions from 0, as chapter 9 numbers them
        keys = [d.node(f"k{t}_{j}") for j in range(t + 1)]
        values = [d.node(f"v{t}_{j}") for j in range(t + 1)]
        assert f"k{t}_{t + 1}" not in ids and f"v{t}_{t + 1}" not in ids  # exactly t + 1
        assert [k.label for k in keys] == [f"$k_{j}$" for j in range(t + 1)]
        assert [v.label for v in values] == [f"$v_{j}$" for j in range(t + 1)]
        assert {k.role for k in keys} == {"key"} and {v.role for v in values} == {"value"}
        # only the newest key and value, k_t and v_t, are marked new
        assert [k.emphasis for k in keys] == [False] * t + [True]
        assert [v.emphasis for v in values] == [False] * t + [True]
        # q_t reads the whole cache: one arrow to the row of all keys, one to all values
        assert d.node(f"q{t}").label == f"$q_{t}$" and d.node(f"q{t}").role == "query"
        assert sorted(e.dst for e in d.edges_from(f"q{t}")) == [f"K{t}", f"V{t}"]
        assert {e.kind for e in d.edges_from(f"q{t}")} == {"read"}
        assert regions[f"K{t}"].members == tuple(k.id for k in keys)
        assert regions[f"V{t}"].members == tuple(v.id for v in values)
        if t > 0:  # the cache of step t - 1 is kept in place; the new entry goes on the end
            for j in range(t):
                assert d.node(f"k{t}_{j}").x == d.node(f"k{t - 1}_{j}").x
            assert keys[-1].x > keys[-2].x
    fig = D.render(d)
    assert D.layout_problems(fig) == []
    widths = {n.id: b.get_linewidth() for n, (b, _) in zip(
        d.nodes, fig.diagram_artists["nodes"].values(), strict=True)}
    assert widths[f"k{steps - 1}_{steps - 1}"] > widths["k1_0"] == widths["q0"]


def test_an_edge_to_a_region_ends_on_its_border():
    nodes = (D.Node("q", "q", "query", 0.5, 1.0, w=0.6),
             D.Node("a", "a", "key", 2.0, 1.0, w=0.6), D.Node("b", "b", "key", 3.0, 1.0, w=0.6))
    d = D.Diagram("t", nodes, (D.Edge("q", "row"),),
                  (D.Region("", ("a", "b"), pad=0.1, id="row"),), alt=ALT, width=4, height=2)
    row = d.target("row")  # a stand-in box the size of the border
    assert (row.x, row.y, row.w, row.h) == pytest.approx((2.5, 1.0, 1.8, 0.65))
    assert d.target("a") == d.node("a")
    assert D.layout_problems(D.render(d)) == []
    with pytest.raises(ValueError, match=r"duplicate node ids \['a'\]"):
        D.Diagram("t", nodes, (), (D.Region("", ("b",), id="a"),), alt=ALT, width=4)
    with pytest.raises(ValueError, match="edges name unknown nodes: \\['q -> rows'\\]"):
        D.Diagram("t", nodes, (D.Edge("q", "rows"),),
                  (D.Region("", ("a",), id="row"),), alt=ALT, width=4)


def test_kv_cache_refuses_steps_that_do_not_fit():
    with pytest.raises(ValueError, match="steps must be an int from 2 to 5.*got 6"):
        D.kv_cache_growth(6)


def test_node_attends_to_its_neighbours_and_not_beyond():
    d = D.node_neighbourhood()
    into_i = d.edges_to("i")
    assert sorted(e.src for e in into_i) == ["j1", "j2", "j3", "j4"]
    for e in into_i:
        assert e.label == rf"$\alpha_{{i{e.src[1]}}}$"
        assert d.node(e.src).role == "key"
    assert d.node("i").role == "query" and r"\alpha_{ii}" in d.node("i").label
    # u is a neighbour of a neighbour: it reaches i only in two steps
    assert not any(e.src == "far" and e.dst == "i" for e in d.edges)
    assert _reaches(d, "far", "i")


def _hops(diagram, src, dst):
    """The fewest edges from ``src`` to ``dst`` (breadth first); None when unreachable."""
    frontier, seen, hops = {src}, {src}, 0
    while frontier:
        if dst in frontier:
            return hops
        frontier = {e.dst for n in frontier for e in diagram.edges_from(n)} - seen
        seen |= frontier
        hops += 1
    return None


@pytest.mark.parametrize("length", [3, 5])
def test_receptive_fields_conv_grows_by_layers_rnn_by_steps_attention_at_once(length):
    d = D.receptive_fields(length)
    inputs = range(1, length + 1)
    conv = {t for t in inputs if _reaches(d, f"conv_x{t}", "conv_out")}
    assert conv == set(range(max(1, length - 4), length + 1))  # 2 causal layers of 3
    # causal: position t of the first layer reads inputs t - 2, t - 1 and t, none later
    for e in (e for t in inputs for e in d.edges_from(f"conv_x{t}")):
        reach = int(e.dst.removeprefix("conv_l")) - int(e.src.removeprefix("conv_x"))
        assert 0 <= reach <= 2
    for panel in ("conv", "rnn", "attn"):  # every output sits above the last input
        assert d.node(f"{panel}_out").x == d.node(f"{panel}_x{length}").x
    assert all(_reaches(d, f"rnn_x{t}", "rnn_out") for t in inputs)
    assert all(_reaches(d, f"attn_x{t}", "attn_out") for t in inputs)
    assert [_hops(d, f"attn_x{t}", "attn_out") for t in inputs] == [1] * length
    assert [_hops(d, f"rnn_x{t}", "rnn_out") for t in inputs] == [
        length - t + 2 for t in inputs]  # into its state, along the chain, out
    assert {_hops(d, f"conv_x{t}", "conv_out") for t in conv} == {2}
    assert [r.label for r in d.regions] == ["2 convolutions", "recurrence", "self-attention"]
    assert D.layout_problems(D.render(d)) == []


def test_receptive_fields_refuses_a_length_that_does_not_fit():
    with pytest.raises(ValueError, match="length must be 3 or 5.*got 4"):
        D.receptive_fields(4)


# ---------------------------------------------------------------- SVG and notebook display


def test_svg_is_deterministic(built, svgs):
    for name, diagram in built.items():
        assert D.to_svg(diagram) == svgs[name], name


def test_svg_has_text_as_text_no_raster_no_date_and_its_alt(built, svgs):
    for name, svg in svgs.items():
        assert "<image" not in svg and "base64" not in svg, name
        assert "<dc:date>" not in svg, name
        alt = html.escape(built[name].alt, quote=False)
        assert f"<dc:description>{alt}</dc:description>" in svg
        assert "<text" in svg
        texts = set(re.findall(r"<text[^>]*>([^<]*)</text>", svg))
        for label in built[name].labels():
            for line in label.split("\n"):  # one <text> a line
                if "$" in line:  # mathtext: drawn glyph by glyph, its source in a comment
                    assert f"<!-- {html.escape(line, quote=False)} -->" in svg, (name, line)
                else:  # plain words: whole, searchable
                    assert line in texts, (name, line)


def test_svg_font_sizes_are_13_pt_or_more_except_mathtext_scripts(svgs):
    for name, svg in svgs.items():
        sizes = [float(s) for s in re.findall(r"font-size: ([0-9.]+)px", svg)]
        assert sizes, name
        plain = {s for s in sizes if s >= 13}
        assert plain <= {13.0, 14.0}, (name, plain)
        # sub- and superscripts are matplotlib's 0.7 of 13 or 14 pt (and a radical's glyph)
        assert min(sizes) >= 0.7 * 13 - 1e-9, (name, min(sizes))


def test_svg_is_small(svgs):
    for name, svg in svgs.items():
        assert len(svg.encode()) < 40_000, (name, len(svg.encode()))


def test_diagram_view_gives_svg_and_the_alt_text():
    d = D.soft_lookup()
    bundle = D.DiagramView(d)._repr_mimebundle_()
    assert set(bundle) == {"image/svg+xml", "text/plain"}
    assert bundle["image/svg+xml"] == D.to_svg(d)
    assert bundle["text/plain"] == d.alt == repr(D.DiagramView(d))
    # what a notebook stores: IPython's formatter takes the bundle as it is
    from IPython.core.formatters import DisplayFormatter

    data, _metadata = DisplayFormatter().format(D.DiagramView(d))
    assert data == bundle
    with pytest.raises(TypeError, match="DiagramView needs a Diagram, got str"):
        D.DiagramView("soft_lookup")


# ---------------------------------------------------------------- layout checks


def _two(**first):
    a = dict(id="a", label="a", role="query", x=1.0, y=1.0)
    a.update(first)
    return (D.Node(**a), D.Node("b", "b", "key", 3.0, 1.0))


def test_layout_problems_finds_a_label_too_wide_for_its_box():
    d = D.Diagram("t", _two(label="a very long label", w=0.5), alt=ALT, height=2)
    assert D.layout_problems(D.render(d)) == [
        "node 'a': label 'a very long label' does not fit its box"]


def test_layout_problems_finds_labels_on_boxes_outside_and_on_each_other():
    nodes = _two()
    covering = D.Diagram("t", nodes, (D.Edge("a", "b", "a label far too long to fit"),),
                         alt=ALT, height=2)
    assert any("covers box" in p for p in D.layout_problems(D.render(covering)))
    outside = D.Diagram("t", nodes, (D.Edge("a", "b", "x" * 60, side="above"),
                                     D.Edge("b", "a", "y", side="below", bend=0.3)),
                        alt=ALT, height=2)
    problems = D.layout_problems(D.render(outside))
    assert any("outside the canvas" in p for p in problems)
    both = D.Diagram("t", nodes, (D.Edge("a", "b", "first", side="on"),
                                  D.Edge("b", "a", "second", side="on")), alt=ALT, height=2)
    assert "labels 'first' and 'second' overlap" in D.layout_problems(D.render(both))
    left = D.Diagram("t", nodes, (D.Edge("a", "b", "left", side="left"),),
                     regions=(D.Region("group", ("a",), label_at="left"),), alt=ALT, height=2)
    assert any("'group'" in p for p in D.layout_problems(D.render(left)))


def test_regions_draw_dashed_groups_dotted_repeats_and_unlabelled_boxes():
    nodes = _two()
    d = D.Diagram("t", nodes, regions=(D.Region("", ("a",)), D.Region("N", ("b",),
                                                                    style="repeat")),
                  alt=ALT, height=2.5)
    fig = D.render(d)
    group, repeat = [p for p in fig.axes[0].patches if type(p).__name__ == "Rectangle"]
    assert group.get_linestyle() == "--" and repeat.get_linestyle() == ":"
    assert [t.get_text() for t in fig.diagram_artists["region_labels"]] == ["N"]
    # an unlabelled region leaves no room for a label above its members
    assert D._region_box(d, d.regions[0])[3] == pytest.approx(nodes[0].box[3] + 0.15)
    assert D._region_box(d, d.regions[1])[3] == pytest.approx(nodes[1].box[3] + 0.45)


def test_layout_problems_and_render_want_a_diagram():
    with pytest.raises(TypeError, match="needs a Figure made by diagrams.render"):
        D.layout_problems(Figure())
    with pytest.raises(TypeError, match="render needs a Diagram, got dict"):
        D.render({})


# ---------------------------------------------------------------- bad input, named


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: D.Diagram("t", _two(id="b"), alt=ALT), r"duplicate node ids \['b'\]"),
        (lambda: D.Diagram("t", _two(), (D.Edge("a", "z"),), alt=ALT),
         r"edges name unknown nodes: \['a -> z'\]"),
        (lambda: D.Diagram("t", _two(), regions=(D.Region("g", ("a", "q")),), alt=ALT),
         r"region 'g' names unknown nodes \['q'\]"),
        (lambda: D.Diagram("t", _two(x=2.5), alt=ALT), r"overlapping boxes \[\('a', 'b'\)\]"),
        (lambda: D.Diagram("t", _two(x=0.2), alt=ALT), r"outside the .* canvas: \['a'\]"),
        (lambda: D.Diagram("t", _two(y=3.9), alt=ALT), r"outside the .* canvas: \['a'\]"),
        (lambda: D.Diagram("t", _two(), alt="Two boxes."), "alt text must start with 'Diagram:'"),
        (lambda: D.Diagram("t", _two(), alt="Diagram:  "), "say what is drawn"),
        (lambda: D.Diagram("t", _two(), alt=ALT, width=7.0), r"the width must be in \(0, 5.8\]"),
        (lambda: D.Diagram("t", _two(), alt=ALT, height=0), "canvas"),
        (lambda: D.Node("a", "a", "scores", 1, 1), "node 'a': unknown role 'scores'"),
        (lambda: D.Node("a", "a", "key", 1, 1, w=0), "node 'a': size must be positive"),
        (lambda: D.Node("", "a", "key", 1, 1), "non-empty id"),
        (lambda: D.Edge("a", "b", kind="skip"), "unknown kind 'skip'"),
        (lambda: D.Edge("a", "b", side="top"), "unknown side 'top'"),
        (lambda: D.Edge("a", "a"), "joins a node to itself"),
        (lambda: D.Region("g", ()), "region 'g' has no members"),
        (lambda: D.Region("g", ("a",), style="solid"), "unknown style 'solid'"),
        (lambda: D.Region("g", ("a",), label_at="right"), "label_at must be 'top' or 'left'"),
    ],
    ids=["duplicate", "edge-unknown", "region-unknown", "overlap", "outside-left",
         "outside-top", "alt-prefix", "alt-empty", "too-wide", "no-height", "role", "size",
         "empty-id", "edge-kind", "label-side", "self-loop", "empty-region", "region-style",
         "label-at"],
)
def test_bad_input_is_named(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_edge_around_must_be_a_bool():
    with pytest.raises(TypeError, match="edge 'a' -> 'b': around must be a bool, got str"):
        D.Edge("a", "b", around="yes")


def test_lookups_name_what_is_missing():
    d = D.Diagram("t", _two(), (D.Edge("a", "b"),), alt=ALT)
    assert d.node("a").role == "query" and d.edge("a", "b").dst == "b"
    assert d.labels() == ["a", "b"]
    with pytest.raises(KeyError, match="no node 'z'"):
        d.node("z")
    with pytest.raises(KeyError, match="no edge 'b' -> 'a'"):
        d.edge("b", "a")


def test_diagrams_are_frozen_and_take_lists():
    d = D.Diagram("t", list(_two()), [D.Edge("a", "b")], alt=ALT)
    assert isinstance(d.nodes, tuple) and isinstance(d.edges, tuple)
    with pytest.raises(AttributeError, match="cannot assign"):
        d.name = "u"


def test_pretrained_encoder_sums_three_embeddings_masks_keys_and_pools():
    d = D.pretrained_encoder()
    assert {e.src for e in d.edges_to("sum")} == {"word", "position", "segment"}
    assert [e.dst for e in d.edges_from("sum")] == ["embed_norm"]
    assert d.node("embed_norm").role == "norm" and d.node("mask").role == "mask"
    assert {e.src for e in d.edges_to("block")} == {"embed_norm", "mask"}
    (repeat,) = d.regions
    assert repeat.members == ("block",) and repeat.style == "repeat" and "6" in repeat.label
    # the chain from the block to the sentence vector: pool, normalise, output
    chain, node = [], "block"
    while d.edges_from(node):
        (edge,) = d.edges_from(node)
        node = edge.dst
        chain.append(node)
    assert chain == ["pool", "normalise", "vector"] and d.node("vector").role == "output"
    assert "post-norm" in d.node("block").label and "12 heads" in d.node("block").label


def test_gpu_memory_hierarchy_keeps_the_scores_on_chip_and_writes_the_output_once():
    d = D.gpu_memory_hierarchy()
    hbm, sram, registers = d.regions
    assert (hbm.label, sram.label, registers.label) == ("HBM", "SRAM", "registers")
    assert set(hbm.members) == {"Q", "K", "V", "O"}
    assert set(sram.members) == {"Qi", "Kj", "Vj"}
    assert set(registers.members) == {"S", "stats", "Oi"}
    # slowest memory on the left: every HBM box left of every SRAM box, SRAM left of registers
    right = {r.label: max(d.node(m).box[2] for m in r.members) for r in d.regions}
    left = {r.label: min(d.node(m).box[0] for m in r.members) for r in d.regions}
    assert right["HBM"] < left["SRAM"] and right["SRAM"] < left["registers"]
    for big, block in (("Q", "Qi"), ("K", "Kj"), ("V", "Vj")):
        assert d.edge(big, block).kind == "read"  # loaded, not computed
        assert d.node(big).role == d.node(block).role
    _data_path(d, ["Qi", "S", "stats", "Oi"])
    _data_path(d, ["Kj", "S"])
    _data_path(d, ["Vj", "stats"])
    # the scores never leave the registers; the only write to HBM is O_I, once
    assert all(e.dst in registers.members for e in d.edges_from("S"))
    assert d.edges_to("O") == [d.edge("Oi", "O")] and "once" in d.edge("Oi", "O").label
    assert "tensor cores" in d.node("S").label
    assert r"\ell_I" in d.node("Oi").label  # the log-sum-exp goes back with O_I

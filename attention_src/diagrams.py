"""Diagrams of the machine: attention's computation graphs and blocks, drawn by code.

A diagram is **data plus a renderer**. The data are small frozen dataclasses: :class:`Node`
(a box with a role), :class:`Edge` (an arrow, with the shape of the tensor it carries),
:class:`Region` (a dashed group, e.g. "h heads in parallel") and :class:`Diagram` (all of them,
with an alt text that starts with ``"Diagram:"``). Their structure (which box feeds which, what
each arrow carries, which colour each box has) is tested without comparing pixels. The builders
(:func:`scaled_dot_product_graph`, :func:`multi_head`, :func:`encoder_block`, ...) return
data; :func:`render` draws it, :func:`to_svg` writes it, :class:`DiagramView` shows it in a
notebook.

One visual language for the whole book: every box has a *role* (:data:`ROLES`), and a role
always has the same colour, taken from :data:`attention_src.plotting.OKABE_ITO` (queries blue,
keys vermillion, values green, outputs purple, scores and weights orange, ...). Shapes are
written in the notation page's symbols, as matplotlib mathtext: ``$(B, L_q, d_k)$``.

Why matplotlib and not Graphviz: matplotlib is already a dependency of the book (Graphviz
needs a system binary, ``dot``, that a reader's machine or Colab may lack); the layout is
exact (each box sits where its builder puts it, so a diagram reads the same in every
chapter, where Graphviz would re-flow it); and the text uses the same fonts, sizes and
mathtext as every figure of the book. The SVG is deterministic (a fixed ``svg.hashsalt``, no
date) and keeps its text as text (``svg.fonttype = 'none'``), so it is small and searchable.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field

import matplotlib as mpl
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_hex, to_rgb
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle
from matplotlib.path import Path

from attention_src.plotting import MAX_FIGURE_WIDTH, OKABE_ITO

__all__ = [
    "ROLES", "ROLE_STYLE", "Node", "Edge", "Region", "Diagram", "role_colours",
    "render", "to_svg", "layout_problems", "DiagramView", "BUILDERS",
    "scaled_dot_product_graph", "multi_head", "encoder_block", "decoder_block",
    "encoder_decoder", "self_attention_projections", "soft_lookup", "rnn_encoder_decoder",
    "band_window", "flash_tiling", "kv_cache_growth", "node_neighbourhood",
    "receptive_fields", "pretrained_encoder",
]

#: Every role a box can have; one colour (and fill) per role, the same in every diagram.
ROLES = ("input", "query", "key", "value", "output", "weights", "operation", "memory",
         "norm", "mask")

#: role -> (Okabe-Ito colour name, fill strength 0..1, hatch). The edge is the colour itself;
#: the fill is the colour mixed with white at that strength, so black text stays readable.
ROLE_STYLE = {
    "input": ("black", 0.0, ""),
    "query": ("blue", 0.3, ""),
    "key": ("vermillion", 0.3, ""),
    "value": ("green", 0.3, ""),
    "output": ("purple", 0.35, ""),
    "weights": ("orange", 0.4, ""),     # scores and attention weights
    "operation": ("sky", 0.25, ""),     # matmul, softmax, projections, attention layers
    "memory": ("yellow", 0.5, ""),      # a recurrent state, the encoder memory, a cache
    "norm": ("black", 0.12, ""),        # layer norm
    "mask": ("black", 0.0, "//"),
}

#: Edge kinds: a tensor flowing forward, a residual (skip) path drawn beside the chain, and a
#: dashed arrow for what is read rather than computed (the encoder memory, a cache).
EDGE_KINDS = ("data", "residual", "read")
#: Region styles: a dashed group of boxes (heads in parallel, one tile in fast memory), or
#: a dotted box around what repeats (a block stacked N times).
REGION_STYLES = ("group", "repeat")
LABEL_SIDES = ("right", "left", "above", "below", "on")

NODE_FONTSIZE = 13
EDGE_FONTSIZE = 14
REGION_FONTSIZE = 13


def _fill(colour: str, strength: float) -> str:
    """``colour`` mixed with white: ``strength`` 1 is the colour, 0 is white."""
    r, g, b = to_rgb(colour)
    return to_hex((1 - strength * (1 - r), 1 - strength * (1 - g), 1 - strength * (1 - b)))


def role_colours(role: str) -> tuple[str, str]:
    """``(edge colour, fill colour)`` of a box with ``role``, both as ``#rrggbb``."""
    if role not in ROLE_STYLE:
        raise ValueError(f"unknown role {role!r}; roles are {', '.join(ROLES)}")
    name, strength, _ = ROLE_STYLE[role]
    colour = OKABE_ITO[name]
    return colour.lower(), _fill(colour, strength)


@dataclass(frozen=True)
class Node:
    """A box: ``id`` (unique in its diagram), ``label`` (mathtext allowed, ``\\n`` for lines),
    ``role`` (one of :data:`ROLES`), centre ``(x, y)`` and size ``(w, h)`` in inches;
    ``emphasis`` draws its outline twice as thick (what is new, e.g. a cache's newest entry)."""

    id: str
    label: str
    role: str
    x: float
    y: float
    w: float = 1.5
    h: float = 0.45
    emphasis: bool = False

    def __post_init__(self):
        if not self.id:
            raise ValueError("a node needs a non-empty id")
        if self.role not in ROLES:
            raise ValueError(f"node {self.id!r}: unknown role {self.role!r}; roles are "
                             f"{', '.join(ROLES)}")
        if not (self.w > 0 and self.h > 0):
            raise ValueError(f"node {self.id!r}: size must be positive, got w={self.w}, "
                             f"h={self.h}")

    @property
    def box(self) -> tuple[float, float, float, float]:
        """``(left, bottom, right, top)`` in inches."""
        return (self.x - self.w / 2, self.y - self.h / 2, self.x + self.w / 2,
                self.y + self.h / 2)


@dataclass(frozen=True)
class Edge:
    """An arrow from node ``src`` to node ``dst`` (or to a region with that ``id``: the
    arrow then ends on the region's dashed border, e.g. a query reading a whole row).
    ``label``: what it carries (a shape in the notation's symbols), written on ``side`` of
    the arrow's middle. ``kind``: ``"data"``, ``"residual"`` (drawn out to the right,
    ``lane`` inches beyond every box between the two, and in) or ``"read"`` (dashed).
    ``bend``: curvature of a data arrow (0 = straight). ``around``: draw a data or read
    arrow the way a residual path is drawn (out to the right along its ``lane`` and in), to
    join two boxes of one column past the boxes between them; its label sits on the lane."""

    src: str
    dst: str
    label: str = ""
    kind: str = "data"
    side: str = "right"
    bend: float = 0.0
    lane: float = 0.3
    around: bool = False

    def __post_init__(self):
        if self.kind not in EDGE_KINDS:
            raise ValueError(f"edge {self.src!r} -> {self.dst!r}: unknown kind {self.kind!r}; "
                             f"kinds are {', '.join(EDGE_KINDS)}")
        if self.side not in LABEL_SIDES:
            raise ValueError(f"edge {self.src!r} -> {self.dst!r}: unknown side {self.side!r}")
        if self.src == self.dst:
            raise ValueError(f"edge {self.src!r} -> {self.dst!r} joins a node to itself")
        if not isinstance(self.around, bool):
            raise TypeError(f"edge {self.src!r} -> {self.dst!r}: around must be a bool, got "
                            f"{type(self.around).__name__}")


@dataclass(frozen=True)
class Region:
    """A dashed rectangle around ``members`` (node ids), ``pad`` inches beyond their boxes,
    with ``label`` written at its top left inside (``label_at="top"``) or outside on its left
    (``"left"``, right-aligned and vertically centred). An ``id`` lets an edge end on it."""

    label: str
    members: tuple[str, ...]
    style: str = "group"
    pad: float = 0.15
    label_at: str = "top"
    id: str = ""

    def __post_init__(self):
        if not self.members:
            raise ValueError(f"region {self.label!r} has no members")
        if self.style not in REGION_STYLES:
            raise ValueError(f"region {self.label!r}: unknown style {self.style!r}; styles "
                             f"are {', '.join(REGION_STYLES)}")
        if self.label_at not in ("top", "left"):
            raise ValueError(f"region {self.label!r}: label_at must be 'top' or 'left', got "
                             f"{self.label_at!r}")


@dataclass(frozen=True)
class Diagram:
    """A whole diagram: ``nodes``, ``edges``, ``regions``, an ``alt`` text that starts with
    ``"Diagram:"``, drawn on a canvas ``width`` x ``height`` inches (origin bottom left).

    Raises ``ValueError`` naming the fault: duplicate node ids, an edge or region naming an
    unknown node, two boxes that overlap, a box outside the canvas, an alt text that does not
    start with ``"Diagram:"``, a canvas wider than :data:`MAX_FIGURE_WIDTH`.
    """

    name: str
    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...] = ()
    regions: tuple[Region, ...] = ()
    alt: str = ""
    width: float = MAX_FIGURE_WIDTH
    height: float = 4.0
    _index: dict = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self):
        for name in ("nodes", "edges", "regions"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if not self.alt.startswith("Diagram:") or not self.alt[len("Diagram:"):].strip():
            raise ValueError(f"diagram {self.name!r}: alt text must start with 'Diagram:' and "
                             f"say what is drawn, got {self.alt!r}")
        if not (0 < self.width <= MAX_FIGURE_WIDTH) or self.height <= 0:
            raise ValueError(f"diagram {self.name!r}: canvas {self.width} x {self.height} in; "
                             f"the width must be in (0, {MAX_FIGURE_WIDTH}]")
        index: dict[str, Node] = {}
        duplicates = []
        for node in self.nodes:
            if node.id in index:
                duplicates.append(node.id)
            index[node.id] = node
        targets = {r.id for r in self.regions if r.id}
        duplicates += sorted(targets & set(index))
        if duplicates:
            raise ValueError(f"diagram {self.name!r}: duplicate node ids {sorted(duplicates)}")
        unknown = [f"{e.src} -> {e.dst}" for e in self.edges
                   if e.src not in index or e.dst not in set(index) | targets]
        if unknown:
            raise ValueError(f"diagram {self.name!r}: edges name unknown nodes: {unknown}")
        for region in self.regions:
            missing = [m for m in region.members if m not in index]
            if missing:
                raise ValueError(f"diagram {self.name!r}: region {region.label!r} names "
                                 f"unknown nodes {missing}")
        outside = [n.id for n in self.nodes
                   if n.box[0] < 0 or n.box[1] < 0 or n.box[2] > self.width
                   or n.box[3] > self.height]
        if outside:
            raise ValueError(f"diagram {self.name!r}: boxes outside the {self.width} x "
                             f"{self.height} in canvas: {outside}")
        overlaps = []
        for i, a in enumerate(self.nodes):
            for b in self.nodes[i + 1:]:
                if (min(a.box[2], b.box[2]) > max(a.box[0], b.box[0])
                        and min(a.box[3], b.box[3]) > max(a.box[1], b.box[1])):
                    overlaps.append((a.id, b.id))
        if overlaps:
            raise ValueError(f"diagram {self.name!r}: overlapping boxes {overlaps}")
        object.__setattr__(self, "_index", index)

    def node(self, node_id: str) -> Node:
        """The node with id ``node_id`` (``KeyError`` naming it if there is none)."""
        if node_id not in self._index:
            raise KeyError(f"diagram {self.name!r} has no node {node_id!r}")
        return self._index[node_id]

    def target(self, target_id: str) -> Node:
        """The node ``target_id``, or for a region with that id a stand-in box (role
        ``"input"``, no label) the size of its dashed border, where an arrow ends."""
        for region in self.regions:
            if region.id and region.id == target_id:
                x0, y0, x1, y1 = _region_box(self, region)
                return Node(target_id, "", "input", (x0 + x1) / 2, (y0 + y1) / 2,
                            w=x1 - x0, h=y1 - y0)
        return self.node(target_id)

    def edges_from(self, node_id: str) -> list[Edge]:
        return [e for e in self.edges if e.src == node_id]

    def edges_to(self, node_id: str) -> list[Edge]:
        return [e for e in self.edges if e.dst == node_id]

    def edge(self, src: str, dst: str) -> Edge:
        """The edge ``src -> dst`` (``KeyError`` naming both if there is none)."""
        for e in self.edges:
            if e.src == src and e.dst == dst:
                return e
        raise KeyError(f"diagram {self.name!r} has no edge {src!r} -> {dst!r}")

    def roles(self) -> dict[str, list[str]]:
        """role -> ids of the nodes with that role."""
        out: dict[str, list[str]] = {}
        for node in self.nodes:
            out.setdefault(node.role, []).append(node.id)
        return out

    def labels(self) -> list[str]:
        """Every text the diagram draws: node, edge and region labels."""
        return ([n.label for n in self.nodes if n.label]
                + [e.label for e in self.edges if e.label]
                + [r.label for r in self.regions if r.label])


# ------------------------------------------------------------------------------------------
# Rendering


def _region_box(diagram: Diagram, region: Region) -> tuple[float, float, float, float]:
    boxes = [diagram.node(m).box for m in region.members]
    top_pad = region.pad + (0.3 if region.label and region.label_at == "top" else 0.0)
    return (min(b[0] for b in boxes) - region.pad, min(b[1] for b in boxes) - region.pad,
            max(b[2] for b in boxes) + region.pad, max(b[3] for b in boxes) + top_pad)


def _residual_lane(diagram: Diagram, a: Node, b: Node, lane: float) -> float:
    """The x of a residual path from ``a`` to ``b``: ``lane`` inches right of every box whose
    centre lies between theirs (inclusive), so the path bypasses them."""
    low, high = min(a.y, b.y), max(a.y, b.y)
    return max(n.box[2] for n in diagram.nodes if low <= n.y <= high) + lane


def _residual_path(a: Node, b: Node, x: float) -> Path:
    """Out of ``a``'s right side, down (or up) the lane at ``x``, into ``b``'s right side."""
    return Path([(a.box[2], a.y), (x, a.y), (x, b.y), (b.box[2], b.y)])


def _exit(node: Node, dx: float, dy: float) -> float:
    """Where a line from ``node``'s centre along ``(dx, dy)`` leaves its box, as a fraction
    of ``(dx, dy)``."""
    fractions = [node.w / 2 / abs(dx)] if dx else []
    fractions += [node.h / 2 / abs(dy)] if dy else []
    return min(fractions)


def render(diagram: Diagram) -> Figure:
    """Draw ``diagram`` as a matplotlib Figure, ``diagram.width`` x ``diagram.height`` inches.

    The Figure is made without pyplot (nothing is shown or kept open by it). Node and region
    labels are 13 pt, edge labels 14 pt (mathtext sub- and superscripts at matplotlib's usual
    0.7 of that, about 10 pt: 7 px tall on a phone, where the book's 5.8 in width is shown
    358 px wide). The artists are kept in ``fig.diagram_artists`` (``"nodes"``: id ->
    ``(box, text)``, ``"edge_labels"``, ``"region_labels"``) for :func:`layout_problems`.
    """
    if not isinstance(diagram, Diagram):
        raise TypeError(f"render needs a Diagram, got {type(diagram).__name__}")
    fig = Figure(figsize=(diagram.width, diagram.height), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, diagram.width)
    ax.set_ylim(0, diagram.height)
    ax.set_axis_off()
    artists = {"nodes": {}, "edge_labels": [], "region_labels": []}
    patches = {}
    for region in diagram.regions:
        x0, y0, x1, y1 = _region_box(diagram, region)
        patches[region.id] = ax.add_patch(Rectangle((x0, y0), x1 - x0, y1 - y0, fill=False,
                               linestyle="--" if region.style == "group" else ":",
                               linewidth=1.2 if region.style == "group" else 1.8,
                               edgecolor=OKABE_ITO["black"], zorder=1))
        if region.label:
            x, y, ha, va = ((x0 + 0.08, y1 - 0.06, "left", "top") if region.label_at == "top"
                            else (x0 - 0.1, (y0 + y1) / 2, "right", "center"))
            artists["region_labels"].append(
                ax.text(x, y, region.label, ha=ha, va=va, fontsize=REGION_FONTSIZE, zorder=4))
    for node in diagram.nodes:
        edge, face = role_colours(node.role)
        hatch = ROLE_STYLE[node.role][2]
        box = FancyBboxPatch((node.box[0], node.box[1]), node.w, node.h,
                             boxstyle=("round,pad=0,rounding_size=0.06"
                                       if min(node.w, node.h) >= 0.4 else "square,pad=0"),
                             facecolor=face,
                             edgecolor=edge, linewidth=4.0 if node.emphasis else 2.0,
                             hatch=hatch or None, zorder=3)
        ax.add_patch(box)
        text = ax.text(node.x, node.y, node.label, ha="center", va="center",
                       fontsize=NODE_FONTSIZE, zorder=5,
                       bbox={"facecolor": face, "edgecolor": "none", "pad": 0.5}
                       if hatch else None)
        patches[node.id] = box
        artists["nodes"][node.id] = (box, text)
    for e in diagram.edges:
        a, b = diagram.node(e.src), diagram.target(e.dst)
        style = {"arrowstyle": "-|>", "mutation_scale": 14, "linewidth": 1.6,
                 "color": OKABE_ITO["black"], "zorder": 2}
        if e.kind == "residual" or e.around:
            lane = _residual_lane(diagram, a, b, e.lane)
            if e.kind == "read":
                style["linestyle"] = "--"
            arrow = FancyArrowPatch(path=_residual_path(a, b, lane), **style)
            mid = (lane, (a.y + b.y) / 2)
        else:
            arrow = FancyArrowPatch((a.x, a.y), (b.x, b.y), patchA=patches[e.src],
                                    patchB=patches[e.dst], shrinkA=1, shrinkB=1,
                                    connectionstyle=f"arc3,rad={e.bend}",
                                    linestyle="--" if e.kind == "read" else "-", **style)
            dx, dy = b.x - a.x, b.y - a.y
            if e.bend:  # the middle of arc3's quadratic curve
                mid = ((a.x + b.x) / 2 + 0.5 * e.bend * dy, (a.y + b.y) / 2 - 0.5 * e.bend * dx)
            else:  # the middle of the part of the line between the two boxes
                t = (_exit(a, dx, dy) + 1 - _exit(b, dx, dy)) / 2
                mid = (a.x + t * dx, a.y + t * dy)
        ax.add_patch(arrow)
        if e.label:
            offset = {"right": (0.1, 0, "left", "center"), "left": (-0.1, 0, "right", "center"),
                      "above": (0, 0.06, "center", "bottom"),
                      "below": (0, -0.06, "center", "top"),
                      "on": (0, 0, "center", "center")}[e.side]
            artists["edge_labels"].append(
                ax.text(mid[0] + offset[0], mid[1] + offset[1], e.label, ha=offset[2],
                        va=offset[3], fontsize=EDGE_FONTSIZE, zorder=4,
                        bbox={"facecolor": "white", "edgecolor": "none", "pad": 1.0}))
    fig.diagram_artists = artists
    fig.diagram = diagram
    return fig


def layout_problems(fig: Figure) -> list[str]:
    """What a reader could not read in a rendered diagram, one line each: a node label wider
    or taller than its box, an edge or region label that covers a box or another label, any
    label outside the canvas. Empty for a good layout."""
    artists = getattr(fig, "diagram_artists", None)
    if artists is None:
        raise TypeError("layout_problems needs a Figure made by diagrams.render")
    renderer = fig.canvas.get_renderer()
    fig.draw(renderer)
    canvas = fig.bbox
    problems = []
    boxes = {}
    for node_id, (box, text) in artists["nodes"].items():
        outer, inner = box.get_window_extent(renderer), text.get_window_extent(renderer)
        boxes[node_id] = outer
        if inner.width > outer.width - 4 or inner.height > outer.height - 2:
            problems.append(f"node {node_id!r}: label {text.get_text()!r} does not fit its box")
    labels = artists["edge_labels"] + artists["region_labels"]
    extents = [t.get_window_extent(renderer) for t in labels]
    for t, ext in zip(labels, extents, strict=True):
        if (ext.x0 < canvas.x0 - 0.5 or ext.y0 < canvas.y0 - 0.5 or ext.x1 > canvas.x1 + 0.5
                or ext.y1 > canvas.y1 + 0.5):
            problems.append(f"label {t.get_text()!r} is outside the canvas")
        for node_id, outer in boxes.items():
            if ext.overlaps(outer):
                problems.append(f"label {t.get_text()!r} covers box {node_id!r}")
    for i in range(len(labels)):
        for j in range(i + 1, len(labels)):
            if extents[i].overlaps(extents[j]):
                problems.append(f"labels {labels[i].get_text()!r} and "
                                f"{labels[j].get_text()!r} overlap")
    return problems


#: The settings that make the SVG deterministic, text as text.
SVG_SETTINGS = {"svg.hashsalt": "attention-executed", "svg.fonttype": "none"}


def to_svg(diagram: Diagram) -> str:
    """``diagram`` as an SVG document: deterministic (the same bytes on every call: a fixed
    ``svg.hashsalt``, no date), text kept as ``<text>`` (small, searchable), the diagram's
    name as its title and the alt text as its description."""
    fig = render(diagram)
    buffer = io.StringIO()
    with mpl.rc_context(SVG_SETTINGS):
        fig.savefig(buffer, format="svg", metadata={
            "Date": None, "Title": diagram.name, "Description": diagram.alt})
    return buffer.getvalue()


class DiagramView:
    """Shows a diagram in a notebook: ``image/svg+xml`` with ``text/plain`` = its alt text."""

    def __init__(self, diagram: Diagram):
        if not isinstance(diagram, Diagram):
            raise TypeError(f"DiagramView needs a Diagram, got {type(diagram).__name__}")
        self.diagram = diagram

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"image/svg+xml": to_svg(self.diagram), "text/plain": self.diagram.alt}

    def __repr__(self):
        return self.diagram.alt


# ------------------------------------------------------------------------------------------
# Builders, in the order the chapters need them.


def scaled_dot_product_graph() -> Diagram:
    """Chapter 3: scaled dot-product attention as a computation graph, the shape at every
    edge: Q, K -> Q K^T -> / sqrt(d_k) -> mask -> softmax -> A; A, V -> A V -> O."""
    cx, vx = 1.55, 4.3
    ys = [6.4, 5.55, 4.7, 3.85, 3.0, 2.15, 1.3, 0.45]
    nodes = (
        Node("Q", "$Q$", "query", 0.75, ys[0], w=0.8),
        Node("K", "$K$", "key", 2.35, ys[0], w=0.8),
        Node("V", "$V$", "value", vx, ys[6], w=0.8),
        Node("scores", r"$QK^\top$", "operation", cx, ys[1], w=1.7),
        # the radical as a character: mathtext's \sqrt draws its bar as a path, which a
        # browser's font for the SVG text does not meet
        Node("scale", "$S = QK^\\top/$\u221a$d_k$", "operation", cx, ys[2], w=1.9),
        Node("mask", "mask $M$", "mask", cx, ys[3], w=1.7),
        Node("softmax", "softmax", "operation", cx, ys[4], w=1.7),
        Node("weights", "$A$", "weights", cx, ys[5], w=1.7),
        Node("product", "$AV$", "operation", cx, ys[6], w=1.7),
        Node("O", "$O$", "output", cx, ys[7], w=1.7),
    )
    edges = (
        Edge("Q", "scores", "$(B, L_q, d_k)$", side="left"),
        Edge("K", "scores", "$(B, L_k, d_k)$", side="right"),
        Edge("scores", "scale", "$(B, L_q, L_k)$"),
        Edge("scale", "mask", "$(B, L_q, L_k)$"),
        Edge("mask", "softmax", r"$(B, L_q, L_k)$, $-\infty$ where $M$ is False"),
        Edge("softmax", "weights", "$(B, L_q, L_k)$, rows sum to 1"),
        Edge("weights", "product", "$(B, L_q, L_k)$"),
        Edge("V", "product", "$(B, L_k, d_v)$", side="below"),
        Edge("product", "O", "$(B, L_q, d_v)$"),
    )
    alt = ("Diagram: scaled dot-product attention as a computation graph. Queries Q and keys "
           "K are multiplied into QK^T of shape (B, L_q, L_k), divided by the square root of "
           "d_k into the scores S, masked (minus infinity where the mask M is False), and turned "
           "by a softmax over the keys into the weights A; A times the values V gives the "
           "output O of shape (B, L_q, d_v).")
    return Diagram("scaled_dot_product_graph", nodes, edges, alt=alt, height=6.85)


def multi_head(h_shown: int = 3) -> Diagram:
    """Chapter 5: multi-head attention: X -> X W_q, X W_k, X W_v -> split into h heads ->
    attend in parallel -> concatenate -> W_o, with the shapes. ``h_shown`` head boxes are
    drawn (the last one labelled head h)."""
    if h_shown not in (2, 3):
        raise ValueError(f"h_shown must be 2 or 3 (boxes that fit the width), got {h_shown}")
    xs = (1.0, 2.9, 4.8)
    nodes = [
        Node("X", "$X$", "input", 2.9, 6.4, w=0.8),
        Node("Wq", "$XW_q$", "query", xs[0], 5.35, w=1.3),
        Node("Wk", "$XW_k$", "key", xs[1], 5.35, w=1.3),
        Node("Wv", "$XW_v$", "value", xs[2], 5.35, w=1.3),
        Node("split", "split into $h$ heads", "operation", 2.9, 4.3, w=3.2),
    ]
    head_x = (2.35, 3.7, 5.05) if h_shown == 3 else (3.0, 4.6)
    heads = []
    for r, x in enumerate(head_x, start=1):
        label = "head $h$" if r == h_shown else f"head {r}"
        heads.append(Node(f"head{r}", label, "operation", x, 3.0, w=1.1))
    nodes += heads
    nodes += [
        Node("concat", "concatenate", "operation", 2.9, 1.85, w=2.0),
        Node("Wo", "$W_o$", "operation", 2.9, 1.05, w=0.9),
        Node("O", "output", "output", 2.9, 0.3, w=1.3),
    ]
    edges = [Edge("X", w, "") for w in ("Wq", "Wk", "Wv")]
    edges[0] = Edge("X", "Wq", r"$(B, L, d_{\mathrm{model}})$", side="left")
    edges += [Edge(w, "split") for w in ("Wq", "Wk", "Wv")]
    edges += [Edge("split", n.id) for n in heads]
    edges += [Edge(n.id, "concat") for n in heads]
    edges += [
        Edge("concat", "Wo", r"$(B, L, h\,d_{\mathrm{head}})$"),
        Edge("Wo", "O", r"$(B, L, d_{\mathrm{model}})$"),
    ]
    regions = (Region("attend in\nparallel:\n" + r"$(B, h, L, d_{\mathrm{head}})$",
                      tuple(n.id for n in heads), pad=0.12, label_at="left"),)
    alt = ("Diagram: multi-head attention. The input X of shape (B, L, d_model) is projected "
           "by W_q, W_k and W_v, split into h heads of width d_head = d_model / h, each head "
           "attends on its own and in parallel, the heads' outputs are concatenated back to "
           "(B, L, h d_head) and the output projection W_o maps them to (B, L, d_model).")
    return Diagram("multi_head", tuple(nodes), tuple(edges), regions, alt=alt, height=6.75)


def _block(kind: str, norm_first: bool) -> Diagram:
    """The encoder block (``kind="encoder"``) or decoder block (``"decoder"``), pre-norm
    (``norm_first``) or post-norm, drawn top to bottom with residual paths on the right."""
    if not isinstance(norm_first, bool):
        raise TypeError(f"norm_first must be a bool, got {type(norm_first).__name__}")
    if kind == "encoder":
        sublayers = [("attn", "self-attention", None)]
    else:
        sublayers = [("attn", "masked self-attention", "mask"),
                     ("cross", "cross-attention", "memory")]
    sublayers.append(("ffn", "feed-forward", None))
    step, cx = 0.62, 2.95
    nodes, edges, chain = [], [], []
    y = 0.45 + step * (2 + len(sublayers) * 3 + (0 if norm_first else 0))
    nodes.append(Node("x", "input", "input", cx, y, w=1.2))
    chain.append("x")
    last = "x"
    residual_from = "x"
    side_nodes = []
    for i, (sid, label, extra) in enumerate(sublayers, start=1):
        if norm_first:
            y -= step
            nodes.append(Node(f"norm{i}", "layer norm", "norm", cx, y, w=1.9))
            edges.append(Edge(last, f"norm{i}"))
            last = f"norm{i}"
        y -= step
        nodes.append(Node(sid, label, "operation", cx, y, w=2.1))
        edges.append(Edge(last, sid))
        if extra == "mask":
            side_nodes.append(Node("mask", "causal $M$", "mask", 0.6, y, w=1.05))
            edges.append(Edge("mask", sid))
        elif extra == "memory":
            side_nodes.append(Node("memory", "encoder\nmemory", "memory", 0.55, y, w=1.0,
                                   h=0.55))
            edges.append(Edge("memory", sid, "$K, V$", kind="read", side="above"))
        y -= step
        nodes.append(Node(f"add{i}", "$+$", "operation", cx, y, w=0.5, h=0.4))
        edges.append(Edge(sid, f"add{i}"))
        edges.append(Edge(residual_from, f"add{i}", kind="residual", lane=0.35))
        last = f"add{i}"
        if not norm_first:
            y -= step
            nodes.append(Node(f"norm{i}", "layer norm", "norm", cx, y, w=1.9))
            edges.append(Edge(last, f"norm{i}"))
            last = f"norm{i}"
        residual_from = last
    # a pre-norm block ends at its last sum: the one final layer norm belongs to the stack,
    # after its last block (Transformer.encoder_norm / decoder_norm), not to every block
    y -= step
    nodes.append(Node("out", "output", "output", cx, y, w=1.2))
    edges.append(Edge(last, "out"))
    # move everything up so that the output sits at the bottom margin
    shift = 0.35 - (y - 0.225)
    nodes = [Node(n.id, n.label, n.role, n.x, n.y + shift, n.w, n.h)
             for n in nodes + side_nodes]
    height = max(n.box[3] for n in nodes) + 0.3
    order = ("pre-norm (layer norm before each sublayer; the stack adds one final layer norm "
             "after its last block)") if norm_first else \
        "post-norm (layer norm after each residual sum)"
    if kind == "encoder":
        what = "self-attention and a feed-forward network"
    else:
        what = ("masked self-attention under a causal mask, cross-attention whose keys and "
                "values come from the encoder memory, and a feed-forward network")
    name = f"{kind}_block_{'pre' if norm_first else 'post'}_norm"
    alt = (f"Diagram: a Transformer {kind} block, {order}: {what}, each sublayer wrapped in a "
           "residual path that carries its input around it to a sum.")
    return Diagram(name, tuple(nodes), tuple(edges), alt=alt, height=round(height, 2))


def encoder_block(norm_first: bool = True) -> Diagram:
    """Chapter 6: the Transformer encoder block, pre-norm (``norm_first=True``: x + f(LN(x));
    the stack, not the block, ends with one layer norm) or post-norm (LN(x + f(x))), residual
    paths on the right."""
    return _block("encoder", norm_first)


def decoder_block(norm_first: bool = True) -> Diagram:
    """Chapter 6: the Transformer decoder block: masked self-attention (causal mask), cross-
    attention reading keys and values from the encoder memory, feed-forward; residual paths
    and layer norms as in :func:`encoder_block`."""
    return _block("decoder", norm_first)


def self_attention_projections() -> Diagram:
    """Chapter 4: self-attention's queries, keys and values all come from one sequence X:
    Q = X W_q, K = X W_k, V = X W_v, each a different projection of the same rows."""
    nodes = (
        Node("X", "$X$\n$(L, d)$", "input", 0.7, 1.6, w=1.0, h=0.75),
        Node("Q", "$Q = XW_q$", "query", 4.1, 2.7, w=1.8),
        Node("K", "$K = XW_k$", "key", 4.1, 1.6, w=1.8),
        Node("V", "$V = XW_v$", "value", 4.1, 0.5, w=1.8),
    )
    edges = (
        Edge("X", "Q", r"$W_q$: $d \times d_k$", side="above"),
        Edge("X", "K", r"$W_k$: $d \times d_k$", side="above"),
        Edge("X", "V", r"$W_v$: $d \times d_v$", side="below"),
    )
    alt = ("Diagram: self-attention. One sequence X of shape (L, d) gives the queries Q = X "
           "W_q, the keys K = X W_k and the values V = X W_v, three projections of the same "
           "rows, so every token is a query, a key and a value.")
    return Diagram("self_attention_projections", nodes, edges, alt=alt, height=3.2)


def soft_lookup(n_pairs: int = 3) -> Diagram:
    """Chapter 2: attention as a soft lookup: a query q is scored against every key k_j, a
    softmax over j turns the scores into weights alpha_j, and the output is the sum of the
    values weighted by them."""
    if not (2 <= n_pairs <= 4):
        raise ValueError(f"n_pairs must be 2 to 4 (rows that fit), got {n_pairs}")
    top = 0.5 + 0.8 * (n_pairs - 1)
    rows = [top - 0.8 * j for j in range(n_pairs)]
    mid = (rows[0] + rows[-1]) / 2
    nodes = [Node("q", "$q$", "query", 0.4, mid, w=0.6)]
    for j, y in enumerate(rows, start=1):
        nodes += [Node(f"k{j}", f"$k_{j}$", "key", 1.7, y, w=0.7),
                  Node(f"a{j}", rf"$\alpha_{j}$", "weights", 2.9, y, w=0.7),
                  Node(f"v{j}", f"$v_{j}$", "value", 4.1, y, w=0.7)]
    nodes.append(Node("o", r"$\sum_j \alpha_j v_j$", "output", 5.25, mid, w=1.0, h=0.55))
    edges = []
    for j in range(1, n_pairs + 1):
        edges += [Edge("q", f"k{j}"), Edge(f"k{j}", f"a{j}"), Edge(f"a{j}", f"v{j}"),
                  Edge(f"v{j}", "o")]
    # the label is chapter 2's softmax_j: "softmax over $j$" is wider than the region
    regions = (Region(r"$\operatorname{softmax}_j$",
                      tuple(f"a{j}" for j in range(1, n_pairs + 1)), pad=0.12),)
    height = top + 0.25 + 0.55
    alt = (f"Diagram: attention as a soft lookup. A query q is compared with each of "
           f"{n_pairs} keys k_j; a softmax over j turns the scores into weights alpha_j that "
           "sum to 1; the output is the sum of the values v_j weighted by alpha_j, a blend of "
           "every value rather than the one value of the best key.")
    return Diagram("soft_lookup", tuple(nodes), tuple(edges), regions, alt=alt,
                   height=round(height, 2))


def rnn_encoder_decoder(steps: int = 3) -> Diagram:
    """Chapter 1: the RNN encoder-decoder with one fixed context vector C (left panel)
    against one context c_i per output step with attention (right panel): encoder states
    h_j at the bottom, decoder states s_i at the top; ``steps`` input and output steps.

    With attention (Bahdanau et al.), the weights of c_i are
    alpha_ij = softmax_j a(s_{i-1}, h_j): the previous decoder state s_{i-1} is the query,
    so a dashed "read" arrow runs from s_{i-1} to c_i (from the initial state s_0 for
    i = 1), beside the arrows from every h_j."""
    if steps not in (2, 3):
        raise ValueError(f"steps must be 2 or 3 (boxes that fit the width), got {steps}")
    left = [0.45 + 0.75 * j for j in range(steps)]
    right = [3.7 + 0.75 * j for j in range(steps)]
    y_h, y_c, y_s = 0.45, 1.5, 2.55
    nodes, edges = [], []
    # left panel: without attention, the last encoder state becomes C
    for j, x in enumerate(left, start=1):
        nodes.append(Node(f"h{j}", f"$h_{j}$", "memory", x, y_h, w=0.55))
        if j > 1:
            edges.append(Edge(f"h{j - 1}", f"h{j}"))
    nodes.append(Node("C", "$C$", "output", left[-1], y_c, w=0.55))
    edges.append(Edge(f"h{steps}", "C"))
    for i, x in enumerate(left, start=1):
        nodes.append(Node(f"s{i}", f"$s_{i}$", "query", x, y_s, w=0.55))
        edges.append(Edge("C", f"s{i}"))
        if i > 1:
            edges.append(Edge(f"s{i - 1}", f"s{i}"))
    n_left = len(nodes)
    # right panel: with attention, every output step gets its own context, whose weights
    # the previous decoder state (the query) decides: s_0 is the decoder's initial state
    nodes.append(Node("as0", "$s_0$", "query", right[0] - 0.7, y_s, w=0.55))
    for j, x in enumerate(right, start=1):
        nodes.append(Node(f"ah{j}", f"$h_{j}$", "memory", x, y_h, w=0.55))
        if j > 1:
            edges.append(Edge(f"ah{j - 1}", f"ah{j}"))
    for i, x in enumerate(right, start=1):
        nodes.append(Node(f"c{i}", f"$c_{i}$", "output", x, y_c, w=0.55))
        nodes.append(Node(f"as{i}", f"$s_{i}$", "query", x, y_s, w=0.55))
        edges.append(Edge(f"c{i}", f"as{i}"))
        edges.append(Edge(f"as{i - 1}", f"as{i}"))
        edges.append(Edge(f"as{i - 1}", f"c{i}", kind="read"))
        for j in range(1, steps + 1):
            edges.append(Edge(f"ah{j}", f"c{i}"))
    regions = (
        Region("no attention: one $C$", tuple(n.id for n in nodes[:n_left]), pad=0.15),
        Region("attention: $c_i$ per step", tuple(n.id for n in nodes[n_left:]), pad=0.15),
    )
    alt = ("Diagram: an RNN encoder-decoder two ways. Left, without attention: the encoder "
           "states h_j end in one fixed context vector C that every decoder state s_i reads. "
           "Right, with attention: each output step i gets its own context c_i, a weighted "
           "sum of all the encoder states h_j, so an arrow runs from every h_j to every c_i. "
           "The weights of c_i depend on the previous decoder state s_{i-1} (the query; s_0 "
           "is the initial state), so a dashed arrow runs from s_{i-1} to c_i.")
    return Diagram("rnn_encoder_decoder", tuple(nodes), tuple(edges), regions, alt=alt,
                   height=3.35)


def band_window(length: int = 8, window: int = 2, causal: bool = False) -> Diagram:
    """Chapter 4: a band window over the ``(L, L)`` score grid: query ``i`` (rows, down) may
    attend to key ``j`` (columns, across) when ``|i - j| < window`` (and ``j <= i`` when
    ``causal``), the rule of :func:`attention_src.softmax.band_mask`. Cells inside the band
    have the weights' colour, cells outside the mask's hatching."""
    if isinstance(length, bool) or not isinstance(length, int) or not 2 <= length <= 8:
        raise ValueError(f"length must be an int from 2 to 8 (cells that fit), got {length!r}")
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be an int >= 1, got {window!r}")
    cell, x0 = 0.36, 0.9
    top = 0.3 + cell * length + 0.2
    nodes = []
    for j in range(length):
        nodes.append(Node(f"k{j}", f"$k_{j + 1}$", "key",
                          x0 + cell * (j + 0.5), top + 0.2, w=cell - 0.04, h=0.34))
    for i in range(length):
        y = top - cell * (i + 0.5) - 0.05
        nodes.append(Node(f"q{i}", f"$q_{i + 1}$", "query",
                          x0 - 0.3, y, w=0.36, h=cell - 0.04))
        for j in range(length):
            inside = abs(i - j) < window and (j <= i or not causal)
            nodes.append(Node(f"c{i}_{j}", "", "weights" if inside else "mask",
                              x0 + cell * (j + 0.5), y, w=cell - 0.04, h=cell - 0.04))
    band = "|i - j| < " + str(window) + (", j <= i" if causal else "")
    band_tex = "$|i - j| < " + str(window) + (r",\ j \leq i" if causal else "") + "$"
    nodes.append(Node("note", "query $i$ sees\nkey $j$ when\n" + band_tex, "weights",
                      x0 + cell * length + 1.05, top - cell * length / 2, w=1.7, h=1.1))
    alt = (f"Diagram: a band window over the {length} by {length} grid of queries (rows) and "
           f"keys (columns). Query i may attend to key j only when {band}, so each query "
           f"sees at most {2 * window - 1 if not causal else window} keys; the cells outside "
           "the band are masked.")
    height = top + 0.45
    name = f"band_window{'_causal' if causal else ''}"
    return Diagram(name, tuple(nodes), alt=alt, height=round(height, 2))


def flash_tiling() -> Diagram:
    """Chapter 9: FlashAttention's tiling, in the chapter's notation and FlashAttention-2's
    loop order: the query block is the outer loop, so O_I is written once. Q, K, V and O
    stay in slow, large memory (HBM); one block Q_I and, in turn, each block K_J, V_J are
    loaded into fast, small memory (SRAM), where the block of scores S_IJ updates the
    running maximum m and sum s (one number per query) and, as P = e^{S - m}, the rescaled
    accumulator U (U += P V_J); the output block O_I = U / s is written back once, after the
    last key block."""
    hbm_x, tile_x, op_x = 0.75, 3.0, 4.72
    nodes = (
        Node("Q", "$Q$", "query", hbm_x, 3.25, w=0.9),
        Node("K", "$K$", "key", hbm_x, 2.45, w=0.9),
        Node("V", "$V$", "value", hbm_x, 1.65, w=0.9),
        Node("O", "$O$", "output", hbm_x, 0.55, w=0.9),
        Node("Qi", "$Q_I$", "query", tile_x, 3.25, w=0.8),
        Node("Kj", "$K_J$", "key", tile_x, 2.45, w=0.8),
        Node("Vj", "$V_J$", "value", tile_x, 1.65, w=0.8),
        Node("S", r"$S_{IJ} = Q_I K_J^\top\, d_k^{-1/2}$", "weights", op_x, 2.85, w=1.9,
             h=0.5),
        Node("stats", "running\n$m$, $s$", "memory", 5.25, 1.7, w=0.8, h=0.6),
        Node("Oi", "$U$,\nrescaled", "output", op_x, 0.55, w=0.95, h=0.6),
    )
    edges = (
        Edge("Q", "Qi", "block $I$", kind="read", side="above"),
        Edge("K", "Kj", "block $J$", kind="read", side="above"),
        Edge("V", "Vj", "block $J$", kind="read", side="above"),
        Edge("Qi", "S"),
        Edge("Kj", "S"),
        Edge("S", "stats"),
        Edge("S", "Oi", "$P = e^{S - m}$", side="left"),
        Edge("stats", "Oi"),
        Edge("Vj", "Oi"),
        Edge("Oi", "O", "once:\n$O_I = U/s$", side="above"),
    )
    regions = (
        Region("HBM", ("Q", "K", "V", "O"), pad=0.12),
        Region("SRAM: one $Q_I$, each $J$ in turn", ("Qi", "Kj", "Vj", "S", "stats", "Oi"),
               pad=0.12),
    )
    alt = ("Diagram: FlashAttention's tiling, in FlashAttention-2's loop order (the query "
           "block outside, each output block written once). Q, K, V and the output O stay "
           "in the slow, large HBM; a block Q_I and, one after another, each block K_J and "
           "V_J are loaded into the fast, small SRAM, where the block of scores S_IJ updates "
           "the running maximum m and sum s (one number per query) and, as P = e^(S - m) "
           "times V_J, the rescaled accumulator U; the output block O_I = U / s is written "
           "back to HBM once. The full L_q by L_k score matrix is never stored.")
    return Diagram("flash_tiling", nodes, edges, regions, alt=alt, height=3.95)


def kv_cache_growth(steps: int = 4) -> Diagram:
    """Chapter 9: the KV cache during decoding, positions numbered from 0 as the chapter
    does. Each step ``t`` (0 to ``steps - 1``) is one row: the new token's query q_t reads
    the whole cache, the keys k_0..k_t (one arrow to the key row) and the values v_0..v_t
    (one arrow to the value row); the cache grows by one key and one value a step, the
    newest (k_t, v_t) drawn with a thick outline, and nothing cached is recomputed or moved."""
    if isinstance(steps, bool) or not isinstance(steps, int) or not 2 <= steps <= 5:
        raise ValueError(f"steps must be an int from 2 to 5 (rows that fit), got {steps!r}")
    cell, pitch, sub = 0.5, 1.0, 0.24
    k_x = 1.75
    nodes, edges, regions = [], [], []
    for t in range(steps):
        y = 0.55 + pitch * (steps - 1 - t)
        nodes.append(Node(f"q{t}", f"$q_{t}$", "query", 0.6, y, w=0.55))
        for j in range(t + 1):
            x, new = k_x + cell * j, j == t
            nodes.append(Node(f"k{t}_{j}", f"$k_{j}$", "key", x, y + sub, w=cell - 0.06,
                              h=0.34, emphasis=new))
            nodes.append(Node(f"v{t}_{j}", f"$v_{j}$", "value", x, y - sub, w=cell - 0.06,
                              h=0.34, emphasis=new))
        for kind in "kv":
            regions.append(Region("", tuple(f"{kind}{t}_{j}" for j in range(t + 1)),
                                  pad=0.05, id=f"{kind.upper()}{t}"))
            edges.append(Edge(f"q{t}", f"{kind.upper()}{t}", kind="read"))
    top = 0.55 + pitch * (steps - 1) + sub + 0.17 + 0.05
    regions.append(Region("thick outline: new", tuple(n.id for n in nodes),
                          style="repeat", pad=0.12))
    alt = (f"Diagram: the KV cache over {steps} decoding steps, positions numbered from 0. At "
           "step t the new query q_t reads the whole cache, the keys k_0 to k_t and the "
           "values v_0 to v_t (one arrow to the row of keys, one to the row of values). "
           "Only k_t and v_t, drawn with a thick outline, are new: one key and one value "
           "are appended each step and the cached ones are reused where they are, not "
           "recomputed, so the cache grows linearly with the number of generated tokens.")
    return Diagram("kv_cache_growth", tuple(nodes), tuple(edges), tuple(regions), alt=alt,
                   height=round(top + 0.55, 2))


def node_neighbourhood() -> Diagram:
    """Chapter 8: a node attending to its neighbours. Node i is the query; each neighbour j
    (an edge j -> i) and i itself are keys, with weight alpha_ij; a node that is not a
    neighbour gets no weight."""
    centre = (2.9, 1.9)
    nodes = [Node("i", r"$i$: $\alpha_{ii}$", "query", *centre, w=0.95)]
    edges = []
    neighbours = ((1.2, 3.1), (4.6, 3.1), (1.2, 0.7), (4.6, 0.7))
    for n, (x, y) in enumerate(neighbours, start=1):
        nodes.append(Node(f"j{n}", f"${n}$", "key", x, y, w=0.55))
        edges.append(Edge(f"j{n}", "i", rf"$\alpha_{{i{n}}}$",
                          side="left" if x < centre[0] else "right"))
    nodes.append(Node("far", "$u$", "input", 5.35, 1.9, w=0.55))
    edges.append(Edge("far", "j2"))
    alt = ("Diagram: graph attention at one node. Node i is the query; its neighbours 1 to 4 "
           "(an edge from each to i) are the keys, each with a weight alpha_ij, and i "
           "also attends to itself; node u, two edges away, gets no weight from i in one "
           "layer.")
    return Diagram("node_neighbourhood", tuple(nodes), tuple(edges), alt=alt, height=3.6)


def receptive_fields(length: int = 5) -> Diagram:
    """Chapter 7: how the output at the last position reaches the inputs, three ways, with
    causal layers as the chapter measures them. A stack of two causal convolutions of width
    3 (``conv``: each layer reaches 2 positions further back, so the last output sees 5
    inputs, the first through 2 layers), a recurrent chain (``rnn``: the last state sees
    every input, the first through ``length`` steps) and one self-attention layer
    (``attn``: the output sees every input in one step). Node ids: ``{panel}_x{t}``
    inputs, ``conv_l{t}`` the first convolution, ``rnn_h{t}`` the states, ``{panel}_out``
    the output."""
    if isinstance(length, bool) or not isinstance(length, int) or length not in (3, 5):
        raise ValueError(f"length must be 3 or 5 (positions that fit), got {length!r}")
    size, step, panel_w = 0.26, 0.34, 1.93
    nodes, edges = [], []
    for p, panel in enumerate(("conv", "rnn", "attn")):
        x0 = 0.05 + p * panel_w + (panel_w - step * length) / 2

        def at(t, x0=x0):
            return x0 + step * (t - 0.5)

        for t in range(1, length + 1):
            nodes.append(Node(f"{panel}_x{t}", "", "input", at(t), 0.35, w=size, h=size))
        if panel == "conv":  # causal: position t reads t - 2, t - 1 and t
            for t in range(max(1, length - 2), length + 1):
                nodes.append(Node(f"conv_l{t}", "", "operation", at(t), 1.1, w=size, h=size))
                edges += [Edge(f"conv_x{u}", f"conv_l{t}") for u in (t - 2, t - 1, t)
                          if u >= 1]
                edges.append(Edge(f"conv_l{t}", "conv_out"))
        elif panel == "rnn":
            for t in range(1, length + 1):
                nodes.append(Node(f"rnn_h{t}", "", "memory", at(t), 1.1, w=size, h=size))
                edges.append(Edge(f"rnn_x{t}", f"rnn_h{t}"))
                if t > 1:
                    edges.append(Edge(f"rnn_h{t - 1}", f"rnn_h{t}"))
            edges.append(Edge(f"rnn_h{length}", "rnn_out"))
        else:
            edges += [Edge(f"attn_x{t}", "attn_out") for t in range(1, length + 1)]
        nodes.append(Node(f"{panel}_out", "", "output", at(length), 1.85, w=size, h=size))
    regions = tuple(Region(label, tuple(n.id for n in nodes if n.id.startswith(panel)),
                           pad=0.1)
                    for panel, label in (("conv", "2 convolutions"), ("rnn", "recurrence"),
                                         ("attn", "self-attention")))
    alt = (f"Diagram: receptive fields of the output at the last of {length} positions. Two "
           "stacked causal convolutions of width 3, each reaching 2 positions further back, "
           f"let it see all {length} inputs, the first through 2 layers; a recurrent chain "
           "lets the last state see every input, the first one through "
           f"{length} steps; one self-attention layer connects the output to every input "
           "directly, in one step.")
    return Diagram("receptive_fields", tuple(nodes), tuple(edges), regions, alt=alt,
                   height=2.45)


#: The positions :func:`encoder_decoder` can draw.
POSITIONS = ("sinusoidal", "rotary")


def encoder_decoder(*, norm_first: bool = False, positions: str = "sinusoidal",
                    tied: bool = False) -> Diagram:
    """Chapters 6 and 10: the full Transformer encoder-decoder, bottom to top: the source
    tokens are embedded and pass N encoder blocks into the memory; the shifted target tokens
    are embedded and pass N decoder blocks, whose cross-attention reads keys and values from
    the memory; a linear layer and a softmax give the next token's probabilities.

    The defaults draw chapter 6's post-norm model with sinusoidal positions. As
    :class:`attention_src.transformer.Transformer` builds the options:

    - ``norm_first=True``: a pre-norm stack ends with one final layer norm, a ``"norm"``
      box after the N encoder blocks (``enc_norm``, before the memory) and one after the N
      decoder blocks (``dec_norm``, before the linear layer).
    - ``positions="rotary"``: no position is added to the embeddings (they are only scaled,
      "embed × √d_model"); each block's self-attention rotates its queries and keys, which
      the block boxes say (cross-attention is not rotated: the alt text says so).
    - ``tied=True``: a dashed arrow ``tied`` from the target embedding to the linear layer,
      drawn around the decoder's column: the output layer uses the embedding's matrix.

    Raises ``TypeError`` for a ``norm_first`` or ``tied`` that is not a bool, ``ValueError``
    for ``positions`` not in :data:`POSITIONS`, naming the value.
    """
    for name, value in (("norm_first", norm_first), ("tied", tied)):
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")
    if positions not in POSITIONS:
        raise ValueError(f"positions must be 'sinusoidal' or 'rotary', got {positions!r}")
    rotary = positions == "rotary"
    ex, dx = 1.35, 4.2
    # rows bottom to top: tokens, embedding, the block (its x N box 0.42 above it), then
    # 0.23 higher the final norm (pre-norm), the memory and the linear layer, the output
    block_h = 0.8 if rotary else 0.45
    block_y = round(2.125 + block_h / 2, 3)
    above = round(2.125 + block_h + 0.42 + 0.23 + 0.225, 3)  # 3.45 for the default
    head_y = round(above + 0.95, 3) if norm_first else above
    probs_y = round(head_y + 0.95, 3)
    embed = "embed \u00d7 \u221a$d_{\\mathrm{model}}$" if rotary else "embed + position"
    rotates = "\nrotary $q$, $k$ in\nself-attention" if rotary else ""
    nodes = [
        Node("src", "source tokens", "input", ex, 0.4, w=1.9),
        Node("src_embed", embed, "operation", ex, 1.3, w=2.1),
        Node("encoder", "encoder block" + rotates, "operation", ex, block_y, w=1.9,
             h=block_h),
    ]
    if norm_first:
        nodes.append(Node("enc_norm", "final norm", "norm", ex, above, w=1.7))
    nodes += [
        Node("memory", "memory", "memory", ex, head_y, w=1.5),
        Node("tgt", "target, shifted", "input", dx, 0.4, w=1.9),
        Node("tgt_embed", embed, "operation", dx, 1.3, w=2.1),
        Node("decoder", "decoder block" + rotates, "operation", dx, block_y, w=1.9,
             h=block_h),
    ]
    if norm_first:
        nodes.append(Node("dec_norm", "final norm", "norm", dx, above, w=1.7))
    nodes += [
        Node("head", "linear + softmax", "operation", dx, head_y, w=2.0),
        Node("probs", "next-token\nprobabilities", "output", dx, probs_y, w=1.9, h=0.6),
    ]
    enc_top, dec_top = ("enc_norm", "dec_norm") if norm_first else ("encoder", "decoder")
    edges = [
        Edge("src", "src_embed"),
        Edge("src_embed", "encoder", r"$(B, L_k, d_{\mathrm{model}})$", side="left"),
    ]
    if norm_first:
        edges.append(Edge("encoder", "enc_norm"))
    edges += [
        Edge(enc_top, "memory"),
        Edge("memory", "decoder", "$K, V$", kind="read", side="above"),
        Edge("tgt", "tgt_embed"),
        Edge("tgt_embed", "decoder", r"$(B, L_q, d_{\mathrm{model}})$", side="right"),
    ]
    if norm_first:
        edges.append(Edge("decoder", "dec_norm"))
    edges += [Edge(dec_top, "head"), Edge("head", "probs")]
    if tied:
        edges.append(Edge("tgt_embed", "head", "tied", kind="read", side="on", around=True,
                          lane=0.3))
    # the memory's arrow passes right of the decoder's "x N" while the memory sits level
    # with the linear layer; a final norm lifts the memory a row higher, and the arrow would
    # cross the label in the box's top left corner: then the label goes left of the box
    regions = (Region(r"$\times N$", ("encoder",), style="repeat", pad=0.12),
               Region(r"$\times N$", ("decoder",), style="repeat", pad=0.12,
                      label_at="left" if norm_first else "top"))
    final = ", then a final layer norm," if norm_first else ""
    if rotary:
        embedded = ("embedded, scaled by the square root of d_model with no position added, "
                    "and pass N encoder blocks")
        target = "embedded the same way and pass N decoder blocks"
    else:
        embedded = "embedded with their positions and pass N encoder blocks"
        target = "embedded and pass N decoder blocks"
    alt = (f"Diagram: the Transformer encoder-decoder,{' pre-norm,' if norm_first else ''} "
           f"read bottom to top. The source tokens are {embedded}{final} into the memory; "
           f"the target tokens, shifted right, are {target}, whose cross-attention takes its "
           f"keys and values from the memory{final.rstrip(',')}; a linear layer and a "
           "softmax give the probabilities of the next token.")
    if rotary:
        alt += (" Rotary positions: the self-attention in every block rotates its queries and "
                "keys by their positions; cross-attention is not rotated.")
    if tied:
        alt += (" The linear layer is tied to the target embedding: a dashed arrow marked "
                "tied shows that it uses the embedding's matrix.")
    name = ("encoder_decoder" + ("_pre_norm" if norm_first else "") + ("_rotary" if rotary
            else "") + ("_tied" if tied else ""))
    return Diagram(name, tuple(nodes), tuple(edges), regions, alt=alt,
                   height=round(probs_y + 0.5, 3))


def pretrained_encoder() -> Diagram:
    """Chapter 11: all-MiniLM-L6-v2 as the book builds it, bottom to top: the word pieces'
    three learned vectors (word piece, position, segment) summed and layer-normed, six
    post-norm encoder blocks reading only the real tokens (the key mask hides the padding),
    then the mean over the real tokens, normalised to length 1: the sentence vector."""
    cx = 2.7
    nodes = (
        Node("tokens", "[CLS] word pieces [SEP]", "input", cx, 0.4, w=3.0),
        Node("word", "word piece\n30522 × 384", "operation", 0.95, 1.35, w=1.55, h=0.6),
        Node("position", "position\n512 × 384", "operation", cx, 1.35, w=1.45, h=0.6),
        Node("segment", "segment\n2 × 384", "operation", 4.4, 1.35, w=1.3, h=0.6),
        Node("sum", "$+$", "operation", cx, 2.2, w=0.5, h=0.4),
        Node("embed_norm", "layer norm", "norm", cx, 2.85, w=1.9),
        Node("block", "encoder block\npost-norm, 12 heads", "operation", cx, 3.85, w=2.3,
             h=0.6),
        Node("mask", "key mask $m$", "mask", 0.75, 3.85, w=1.3),
        Node("pool", "mean over\nreal tokens", "operation", cx, 5.05, w=1.9, h=0.6),
        Node("normalise", "divide by its norm", "operation", cx, 5.85, w=2.3),
        Node("vector", "sentence vector (384)", "output", cx, 6.6, w=2.6),
    )
    edges = (
        Edge("tokens", "word"), Edge("tokens", "position"), Edge("tokens", "segment"),
        Edge("word", "sum"), Edge("position", "sum"), Edge("segment", "sum"),
        Edge("sum", "embed_norm"),
        Edge("embed_norm", "block", "$(B, L, 384)$", side="right"),
        Edge("mask", "block"),
        Edge("block", "pool"),
        Edge("pool", "normalise"), Edge("normalise", "vector"),
    )
    regions = (Region(r"$\times 6$", ("block",), style="repeat", pad=0.12),)
    alt = ("Diagram: all-MiniLM-L6-v2 read bottom to top. Each word piece, from [CLS] to "
           "[SEP], gets three learned vectors, for the word piece, its position and its "
           "segment; they are summed and layer-normed into a (B, L, 384) tensor, which passes "
           "6 post-norm encoder blocks of 12 heads whose key mask m hides the padding; the "
           "mean over the real tokens, divided by its norm, is the sentence vector of 384 "
           "numbers.")
    return Diagram("pretrained_encoder", nodes, edges, regions, alt=alt, height=7.0)


def gpu_memory_hierarchy() -> Diagram:
    """Chapter 12: where FlashAttention's tensors live on a GPU, slowest and largest memory
    on the left. Q, K, V and O stay in HBM (the GPU's main memory, reached through the L2
    cache). One Triton program, running on one streaming multiprocessor (SM), loads a block
    Q_I and, in turn, each block K_J, V_J into the SM's shared memory (on-chip SRAM); the
    tensor cores multiply tiles into the scores S_IJ, which, with the running m, s and the
    accumulator U, stay in the program's registers; only O_I goes back to HBM, once. Many
    SMs run programs for different blocks at the same time. With O_I goes the log-sum-exp
    l_I of its queries, which the backward pass reads."""
    hbm_x, smem_x, reg_x = 0.55, 2.0, 4.3
    nodes = (
        Node("Q", "$Q$", "query", hbm_x, 3.35, w=0.7),
        Node("K", "$K$", "key", hbm_x, 2.55, w=0.7),
        Node("V", "$V$", "value", hbm_x, 1.75, w=0.7),
        Node("O", r"$O$, $\ell$", "output", hbm_x, 0.6, w=0.8),
        Node("Qi", "$Q_I$", "query", smem_x, 3.35, w=0.8),
        Node("Kj", "$K_J$", "key", smem_x, 2.55, w=0.8),
        Node("Vj", "$V_J$", "value", smem_x, 1.75, w=0.8),
        Node("S", "tensor cores:\n" + r"$S_{IJ} = Q_I K_J^\top$", "weights", reg_x, 3.0,
             w=1.9, h=0.6),
        Node("stats", "$m$, $s$, $U$", "memory", reg_x, 1.75, w=1.5),
        Node("Oi", r"$O_I = U / s$, $\ell_I$", "output", reg_x, 0.6, w=1.9),
    )
    edges = (
        Edge("Q", "Qi", kind="read"),
        Edge("K", "Kj", kind="read"),
        Edge("V", "Vj", kind="read"),
        Edge("Qi", "S"),
        Edge("Kj", "S"),
        Edge("S", "stats", "$P = e^{S - m}$", side="right"),
        Edge("Vj", "stats", "$P V_J$", side="below"),
        Edge("stats", "Oi"),
        Edge("Oi", "O", "written once", side="above"),
    )
    regions = (
        Region("HBM", ("Q", "K", "V", "O"), pad=0.12),
        Region("SRAM", ("Qi", "Kj", "Vj"), pad=0.12),
        Region("registers", ("S", "stats", "Oi"), pad=0.12),
    )
    alt = ("Diagram: where FlashAttention's tensors live on a GPU, from the largest and "
           "slowest memory on the left to the smallest and fastest on the right. Q, K, V and "
           "the output O stay in HBM, the GPU's main memory. One program, running on one "
           "streaming multiprocessor, loads a block Q_I and, one after another, each block "
           "K_J and V_J into the multiprocessor's shared memory (on-chip SRAM). The tensor "
           "cores multiply these tiles into the scores S_IJ, which stay in the program's "
           "registers with the running maximum m, the sum s and the accumulator U "
           "(P = e^(S - m), U gains P V_J). Only the output block O_I = U / s and the "
           "log-sum-exp l_I of its queries (one number each) are written back to HBM, once.")
    return Diagram("gpu_memory_hierarchy", nodes, edges, regions, alt=alt, height=4.2)


#: name -> builder with its default arguments, for tests and for the closing note's list.
BUILDERS = {
    "scaled_dot_product_graph": scaled_dot_product_graph,
    "multi_head": multi_head,
    "encoder_block_pre_norm": lambda: encoder_block(True),
    "encoder_block_post_norm": lambda: encoder_block(False),
    "decoder_block_pre_norm": lambda: decoder_block(True),
    "decoder_block_post_norm": lambda: decoder_block(False),
    "encoder_decoder": encoder_decoder,
    "encoder_decoder_pre_norm_tied": lambda: encoder_decoder(norm_first=True, tied=True),
    "encoder_decoder_pre_norm_rotary_tied": lambda: encoder_decoder(
        norm_first=True, positions="rotary", tied=True),
    "self_attention_projections": self_attention_projections,
    "soft_lookup": soft_lookup,
    "rnn_encoder_decoder": rnn_encoder_decoder,
    "band_window": band_window,
    "flash_tiling": flash_tiling,
    "kv_cache_growth": kv_cache_growth,
    "node_neighbourhood": node_neighbourhood,
    "receptive_fields": receptive_fields,
    "pretrained_encoder": pretrained_encoder,
    "gpu_memory_hierarchy": gpu_memory_hierarchy,
}

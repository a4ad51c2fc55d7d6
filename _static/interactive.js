
/* Attention, Executed: interactive figures, rendered from the JSON a notebook cell wrote.
   Every number shown was computed in Python (attention_src.interactive); this script only
   displays it. No network, no library. Idempotent: each <div data-interactive> is drawn once,
   however often the script is loaded. */
(function () {
  "use strict";
  var VERSION = 1;
  var C = {blue: "#0072B2", vermillion: "#D55E00", green: "#009E73", orange: "#E69F00"};
  if (window.AttentionInteractive && window.AttentionInteractive.version >= VERSION) {
    window.AttentionInteractive.renderAll();
    return;
  }
  var CSS = [
    ".aei{font-size:14px;line-height:1.35;max-width:100%;margin:.5em 0;" +
      "font-variant-numeric:tabular-nums}",
    ".aei-toks{display:flex;flex-wrap:wrap;gap:4px;margin:.3em 0}",
    ".aei-tok{font:inherit;padding:2px 7px;border:1px solid currentColor;border-radius:4px;" +
      "background:transparent;color:inherit;cursor:pointer}",
    ".aei-tok[aria-pressed=true]{background:" + C.blue + ";border-color:" + C.blue + ";color:#fff}",
    ".aei-tok:focus-visible,.aei input:focus-visible{outline:3px solid " + C.orange +
      ";outline-offset:1px}",
    ".aei-bar{display:flex;align-items:center;gap:6px;margin:2px 0}",
    ".aei-label{flex:0 0 6.5em;overflow:hidden;text-overflow:ellipsis;white-space:nowrap;" +
      "text-align:right}",
    ".aei-track{flex:1 1 auto;height:14px;position:relative;min-width:60px}",
    ".aei-track::before{content:'';position:absolute;inset:0;background:currentColor;opacity:.12}",
    ".aei-fill{display:block;height:100%;background:" + C.blue + ";position:relative}",
    ".aei-num{flex:0 0 4.2em;text-align:right}",
    ".aei-row{margin:.25em 0}.aei-row label{margin-right:.5em}",
    ".aei input[type=range]{width:100%;max-width:320px;vertical-align:middle;" +
      "accent-color:" + C.blue + "}",
    ".aei-strip{display:flex;gap:2px;margin:.3em 0}",
    ".aei-key{flex:1 1 0;height:16px;max-width:24px;background:currentColor;opacity:.2}",
    ".aei-key.read{background:" + C.blue + ";opacity:1}",
    ".aei-key.now{background:" + C.vermillion + ";opacity:1}",
    ".aei-grid{display:grid;gap:1px;max-width:300px;margin:.3em 0}",
    ".aei-cell{aspect-ratio:1;background:" + C.blue + ";cursor:pointer}",
    ".aei-cell.sel{outline:2px solid " + C.vermillion + "}",
    ".aei dl{display:grid;grid-template-columns:auto 1fr;gap:1px 8px;margin:.3em 0}",
    ".aei dd{margin:0}",
    ".aei-cap{font-weight:600}"
  ].join("\n");

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function fmt(x) { return x.toFixed(3); }
  function vec(xs) { return "[" + xs.map(fmt).join(", ") + "]"; }

  /* rows of bars: label, a bar of width value/scale, the value as text */
  function bars(box, labels) {
    var rows = labels.map(function (lab, j) {
      var r = el("div", "aei-bar"), fill = el("span", "aei-fill"), t = el("span", "aei-track");
      r.setAttribute("data-j", String(j));
      r.appendChild(el("span", "aei-label", lab)).title = lab;
      t.appendChild(fill);
      r.appendChild(t);
      r.appendChild(el("span", "aei-num"));
      box.appendChild(r);
      return {fill: fill, num: r.lastChild};
    });
    return function (values) {
      values.forEach(function (v, j) {
        rows[j].fill.style.width = (100 * Math.max(0, Math.min(1, v))) + "%";
        rows[j].num.textContent = fmt(v);
      });
    };
  }

  /* a readout list: field name -> <dd data-field=name> */
  function readout(box, fields) {
    var dl = el("dl"), dd = {};
    dl.setAttribute("aria-live", "polite");
    fields.forEach(function (f) {
      dl.appendChild(el("dt", null, f[1]));
      dd[f[0]] = dl.appendChild(el("dd"));
      dd[f[0]].setAttribute("data-field", f[0]);
    });
    box.appendChild(dl);
    return dd;
  }

  function slider(box, label, n, onChange, start) {
    var row = el("div", "aei-row"), input = el("input"), lab = el("label", null, label);
    var id = "aei-" + Math.random().toString(36).slice(2);
    input.type = "range"; input.min = "0"; input.max = String(n - 1); input.step = "1";
    input.value = String(start || 0); input.id = id; lab.htmlFor = id;
    input.addEventListener("input", function () { onChange(+input.value); });
    row.appendChild(lab); row.appendChild(input); box.appendChild(row);
    return input;
  }

  /* token buttons: click, Enter/Space, hover or focus selects; arrow keys move */
  function tokens(box, toks, onSelect) {
    var wrap = el("div", "aei-toks"), buttons = [];
    wrap.setAttribute("role", "group");
    wrap.setAttribute("aria-label", "query token");
    toks.forEach(function (t, i) {
      var b = el("button", "aei-tok", t);
      b.type = "button";
      b.setAttribute("data-i", String(i));
      b.addEventListener("click", function () { onSelect(i); });
      b.addEventListener("mouseenter", function () { onSelect(i); });
      b.addEventListener("keydown", function (ev) {
        var k = ev.key === "ArrowRight" ? 1 : ev.key === "ArrowLeft" ? -1 : 0;
        if (!k) return;
        ev.preventDefault();
        var next = buttons[(i + k + buttons.length) % buttons.length];
        next.focus(); next.click();
      });
      buttons.push(wrap.appendChild(b));
    });
    box.appendChild(wrap);
    return function (i) {
      buttons.forEach(function (b, j) { b.setAttribute("aria-pressed", String(i === j)); });
    };
  }

  /* one query's row of weights over the keys, and the weighted sum when given */
  function rowView(box, toks) {
    var cap = box.appendChild(el("div", "aei-cap"));
    var draw = bars(box, toks), dd = null;
    return function (i, weights, output) {
      cap.textContent = "Weights of the query \u201c" + toks[i] + "\u201d over the keys";
      draw(weights);
      if (output) {
        if (!dd) dd = readout(box, [["output", "weighted sum of values"]]);
        dd.output.textContent = vec(output);
      }
    };
  }

  var RENDER = {
    attention_explorer: function (box, d) {
      box.appendChild(el("div", null, "Query (click, hover or Tab + Enter):"));
      var mark = tokens(box, d.tokens, select), show = rowView(box, d.tokens);
      function select(i) {
        mark(i); show(i, d.weights[i], d.outputs ? d.outputs[i] : null);
        box.parentNode.setAttribute("data-query", String(i));
      }
      select(d.query);
    },
    softmax_temperature: function (box, d) {
      slider(box, d.parameter, d.temperatures.length, select, d.start);
      var dd = readout(box, [["parameter", "value of " + d.parameter]]);
      var draw = bars(box, d.labels);
      var dd2 = readout(box, [["max", "largest weight"]]);
      function select(t) {
        dd.parameter.textContent = fmt(d.temperatures[t]);
        draw(d.weights[t]);
        dd2.max.textContent = fmt(Math.max.apply(null, d.weights[t]));
        box.parentNode.setAttribute("data-step", String(t));
      }
      select(d.start);
    },
    online_softmax_steps: function (box, d) {
      var n = d.scores.length, keys = [];
      slider(box, "key blocks read", d.steps.length, select, 0);
      var strip = box.appendChild(el("div", "aei-strip"));
      strip.setAttribute("aria-hidden", "true");
      for (var j = 0; j < n; j++) {
        keys.push(strip.appendChild(el("span", "aei-key")));
        keys[j].title = "key " + (j + 1) + ": score " + fmt(d.scores[j]);
      }
      var dd = readout(box, [["keys", "keys read"], ["max", "running maximum m"],
        ["sum", "running sum s"], ["rescale", "rescale exp(m_old \u2212 m)"],
        ["output", "running output"], ["exact", "exact output"],
        ["error", "largest difference"]]);
      dd.exact.textContent = vec(d.exact);
      function select(b) {
        var s = d.steps[b];
        keys.forEach(function (k, j) {
          var now = j >= s.start && j < s.stop;
          k.className = "aei-key" + (now ? " now" : j < s.stop ? " read" : "");
        });
        dd.keys.textContent = s.stop + " of " + n;
        dd.max.textContent = fmt(s.max);
        dd.sum.textContent = fmt(s.sum);
        dd.rescale.textContent = s.rescale === null ? "\u2014 (first block)" : fmt(s.rescale);
        dd.output.textContent = vec(s.output);
        dd.error.textContent = s.error === 0 ? "< 1e-12" : s.error.toExponential(1);
        box.parentNode.setAttribute("data-step", String(b));
      }
      select(0);
    },
    head_explorer: function (box, d) {
      var L = d.tokens.length, layer = 0, head = 0, query = 0, cells = [];
      var info = readout(box, [["head", "showing"]]);
      slider(box, "layer", d.weights.length, function (v) { layer = v; update(); }, 0);
      slider(box, "head", d.weights[0].length, function (v) { head = v; update(); }, 0);
      var grid = box.appendChild(el("div", "aei-grid"));
      grid.style.gridTemplateColumns = "repeat(" + L + ",1fr)";
      grid.setAttribute("aria-hidden", "true");
      for (var c = 0; c < L * L; c++) {
        cells.push(grid.appendChild(el("span", "aei-cell")));
        cells[c].addEventListener("click", pick.bind(null, Math.floor(c / L)));
      }
      var mark = tokens(box, d.tokens, pick);
      var show = rowView(box, d.tokens);
      function pick(i) { query = i; update(); }
      function update() {
        var w = d.weights[layer][head];
        cells.forEach(function (cell, c) {
          var i = Math.floor(c / L), v = w[i][c % L];
          cell.style.opacity = String(0.08 + 0.92 * v);
          cell.title = d.tokens[i] + " \u2192 " + d.tokens[c % L] + ": " + fmt(v);
          cell.classList.toggle("sel", i === query);
        });
        mark(query);
        show(query, w[query], null);
        info.head.textContent = "layer " + (layer + 1) + " of " + d.weights.length +
          ", head " + (head + 1) + " of " + d.weights[0].length;
        box.parentNode.setAttribute("data-layer", String(layer));
        box.parentNode.setAttribute("data-head", String(head));
        box.parentNode.setAttribute("data-query", String(query));
      }
      update();
    }
  };

  function renderAll() {
    if (!document.getElementById("aei-style")) {
      var style = el("style", null, CSS);
      style.id = "aei-style";
      document.head.appendChild(style);
    }
    var boxes = document.querySelectorAll("div[data-interactive]:not([data-rendered])");
    Array.prototype.forEach.call(boxes, function (box) {
      var name = box.getAttribute("data-interactive");
      var data = box.querySelector("script[type='application/json']");
      if (!RENDER[name] || !data) return;
      box.setAttribute("data-rendered", "true");
      var payload = JSON.parse(data.textContent);
      var old = box.querySelectorAll(".aei-fallback");
      for (var k = 0; k < old.length; k++) old[k].remove();
      var view = box.appendChild(el("div", "aei-view"));
      RENDER[name](view, payload);
    });
  }

  window.AttentionInteractive = {version: VERSION, renderAll: renderAll};
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", renderAll);
  renderAll();
})();

// ctxlm explore: scores the text through POST /api/score (docs/explore.md) and draws what comes back.
"use strict";
(() => {
  const $ = (id) => document.getElementById(id);
  const YL_OR_RD = ["#ffffcc", "#ffeda0", "#fed976", "#feb24c", "#fd8d3c", "#fc4e2a", "#e31a1c", "#bd0026", "#800026"];
  const BLUES = ["#ffffff", "#c6dbef", "#6baed6", "#2171b5", "#08306b"];
  const MAX_SURPRISAL = 16;      // nats at the darkest colour
  const HEAT_ROWS = 8, HEAT_COLUMNS = 30;
  const heat = globalThis.ctxlmAttention;         // attention.js: rows and columns of the heatmap

  let data = null;               // the last answer of /api/score
  let sent = null;               // the request that produced it
  let views = [];                // per run: {run, spans, detail}; the compare view has detail = null
  let selected = -1, pinned = false, sequence = 0, timer = 0;
  let underlined = [];           // spans marked as attended by the selected position

  // ---------------------------------------------------------------- helpers
  function el(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs)) {
      if (key === "class") node.className = value; else node.setAttribute(key, value);
    }
    node.append(...children);
    return node;
  }
  const rgb = (hex) => [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));
  function ramp(stops, x) {      // x in [0, 1] -> colour interpolated along the stops
    const at = Math.min(Math.max(x, 0), 1) * (stops.length - 1), i = Math.min(Math.floor(at), stops.length - 2);
    const [a, b] = [rgb(stops[i]), rgb(stops[i + 1])];
    return `rgb(${a.map((v, j) => Math.round(v + (b[j] - v) * (at - i))).join(",")})`;
  }
  const surprisalColour = (s) => ramp(YL_OR_RD, s / MAX_SURPRISAL);
  const inkOn = (s) => (s > 0.6 * MAX_SURPRISAL ? "#fff" : "#1d2530");
  const differenceShade = (d, threshold) => Math.min(Math.abs(d) / (2 * Math.max(threshold, 0.1)), 1);
  const differenceColour = (d, threshold) =>
    ramp(d > 0 ? ["#ffffff", "#f4a582", "#b2182b"] : ["#ffffff", "#92c5de", "#2166ac"], differenceShade(d, threshold));
  const differenceInk = (d, threshold) => (differenceShade(d, threshold) > 0.7 ? "#fff" : "#1d2530");
  const label = (token) => (token === "<eos>" ? "↵" : token);
  const fmtP = (p) => (p >= 0.001 ? p.toFixed(3) : p > 0 ? p.toExponential(1) : "0");
  const surprisals = (run) => run.log_probs.map((lp) => (lp === null ? Infinity : -lp));   // null: probability 0
  const nats = (s) => (Number.isFinite(s) ? s.toFixed(2) : s > 0 ? "∞" : "−∞");
  const pplText = (ppl) => (ppl === null ? "∞" : ppl.toFixed(2));
  const surprisalDelta = (sa, sb) => sb.map((s, i) => (s === sa[i] ? 0 : s - sa[i]));      // ∞ − ∞: no difference
  function bar(p) {
    const span = el("span", { class: "bar" });
    span.style.width = `${Math.max(1, Math.round(p * 120))}px`;
    return span;
  }

  function showError(message) { $("error").textContent = message; $("error").hidden = !message; }
  function status(message) { $("status").textContent = message; }

  async function api(path, body) {
    let response;
    try {
      response = await fetch(path, body === undefined ? {} :
        { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
    } catch (error) {
      throw new Error("Cannot reach the server: is `ctxlm explore` still running?");
    }
    const answer = await response.json().catch(() => ({}));
    if (!response.ok) throw new Error(answer.error || `The server answered ${response.status}.`);
    return answer;
  }

  // ---------------------------------------------------------------- scoring
  async function scoreText(fromTyping) {
    const lower = $("lower").checked, raw = $("text").value;
    if (fromTyping && !raw.trim()) return;
    const request = { text: lower ? raw.toLowerCase() : raw, top_k: Number($("top-k").value),
                      stream: !$("separate").checked };
    const mine = ++sequence;
    status("scoring…");
    try {
      const started = performance.now();
      const answer = await api("/api/score", request);
      if (mine !== sequence) return;                 // a newer request is under way
      data = answer;
      sent = { ...request, lowercase: lower };
      showError("");
      render();
      status(`${answer.tokens.length.toLocaleString()} tokens, ${((performance.now() - started) / 1000).toFixed(2)} s`);
    } catch (error) {
      if (mine !== sequence) return;
      showError(error.message);
      status("");
    }
  }

  // ---------------------------------------------------------------- drawing the runs
  function tokenSpans(container, colours) {
    const spans = [];
    let line = el("div", { class: "line" });
    data.tokens.forEach((token, i) => {
      const [background, ink, title, extra] = colours(i);
      const span = el("span", { class: "tok" + (token === "<eos>" ? " eos" : "") + extra, "data-i": i, title },
                      label(token));
      span.style.background = background;
      span.style.color = ink;
      line.append(span, " ");
      spans.push(span);
      if (token === "<eos>") { container.append(line); line = el("div", { class: "line" }); }
    });
    container.addEventListener("mouseover", (event) => {
      const span = event.target.closest(".tok");
      if (span && !pinned) select(Number(span.dataset.i));
    });
    container.addEventListener("click", (event) => {
      const span = event.target.closest(".tok");
      if (!span) return;
      const i = Number(span.dataset.i);
      pinned = !(pinned && i === selected);
      select(i);
    });
    return spans;
  }

  function render() {
    views = [];
    const results = $("results");
    results.replaceChildren();
    for (const run of data.runs) {
      const s = surprisals(run);
      const tokens = el("div", { class: "tokens" });
      const spans = tokenSpans(tokens, (i) => [surprisalColour(s[i]), inkOn(s[i]),
        `${data.tokens[i]}${run.unknown[i] ? " (scored as <unk>)" : ""}: −ln p = ${nats(s[i])}`,
        run.unknown[i] ? " unk" : ""]);
      const detail = el("div", { class: "detail" }, el("p", { class: "empty" }, "Hover over a word to see what the model expected there."));
      results.append(el("div", { class: "run", "data-run": run.run },
        el("h2", {}, `${run.run} `, el("small", {}, run.model)),
        el("div", { class: "stats" }, "perplexity ", el("b", { class: "ppl" }, pplText(run.ppl)),
           ` · ${run.tokens.toLocaleString()} tokens · ${run.unknown_count} unknown`),
        tokens, detail));
      views.push({ run, spans, detail });
    }
    $("legend").hidden = false;
    $("export").hidden = false;
    const keep = selected < data.tokens.length ? selected : -1;   // the same position, re-scored
    selected = -1;
    renderCompareChoices();
    if (keep >= 0) select(keep); else pinned = false;
  }

  function select(i, scroll = false) {
    if (!data || i < 0 || i >= data.tokens.length) return;
    underlined.forEach((span) => { span.style.boxShadow = ""; });
    underlined = [];
    for (const view of views) {
      if (selected >= 0) view.spans[selected].classList.remove("selected", "pinned");
      view.spans[i].classList.add("selected");
      view.spans[i].classList.toggle("pinned", pinned);
      if (scroll) view.spans[i].scrollIntoView({ block: "nearest" });
      if (!view.detail) continue;
      for (const [source, weight] of view.run.attention ? view.run.attention[i] : []) {
        if (typeof source === "number" && source >= 0) {     // underline the words this position attends to
          view.spans[source].style.boxShadow = `inset 0 -${Math.max(2, Math.round(weight * 7))}px 0 rgba(33,102,172,${0.3 + 0.7 * weight})`;
          underlined.push(view.spans[source]);
        }
      }
      view.detail.replaceChildren(...detail(view.run, i));
    }
    selected = i;
  }

  function detail(run, i) {
    const token = data.tokens[i], lp = run.log_probs[i], actual = run.unknown[i] ? "<unk>" : token;
    const probability = lp === null ? 0 : Math.exp(lp);          // null: probability 0
    const before = data.tokens.slice(Math.max(0, i - 6), i).map(label).join(" ");
    const parts = [el("p", {}, `#${i + 1} `, el("b", {}, token), run.unknown[i] ? " (scored as <unk>)" : "",
      `: p = ${fmtP(probability)}, −ln p = ${nats(lp === null ? Infinity : -lp)}`,
      run.rank ? `, rank ${run.rank[i].toLocaleString()} of ${run.vocab_size.toLocaleString()}` : "",
      el("br"), el("span", { class: "hint" }, `after “${before ? "… " + before : "<eos>"}”`))];
    const panes = [];
    if (run.top) {
      const rows = run.top[i].map(([word, p], k) => el("tr", { class: word === actual ? "actual" : "" },
        el("td", {}, `${k + 1}.`), el("td", {}, word), el("td", {}, fmtP(p)),
        el("td", {}, bar(p))));
      if (run.rank[i] > run.top[i].length) {      // the actual word, below the list
        rows.push(el("tr", { class: "actual" }, el("td", {}, `${run.rank[i].toLocaleString()}.`), el("td", {}, actual),
          el("td", {}, fmtP(probability)), el("td", {}, bar(probability))));
      }
      panes.push(el("table", { class: "topk" }, el("tbody", {}, ...rows)));
    }
    if (run.attention) panes.push(el("div", {}, ...heatmap(run, i)));
    parts.push(el("div", { class: "panes" }, ...panes));
    if (run.mixture_weight) {
      const w = run.mixture_weight[i];
      parts.push(el("p", { class: "mixture" }, `mixture weight (the cache's, pointer's or names softmax's share) ${w.toFixed(3)} `, bar(w)));
    }
    return parts;
  }

  function heatmap(run, i) {
    const rows = [];
    for (let r = Math.max(0, i - HEAT_ROWS + 1); r <= i; r++) rows.push(r);
    const weights = rows.map((r) => heat.row(run.attention[r]));
    const columns = heat.columns(weights, HEAT_COLUMNS);
    const title = el("p", { class: "heat-title", title: "rows: the predicted words up to this one; columns: the " +
      "memory, the outputs made after reading each earlier word" }, "attention (rows: predicted, columns: memory)");
    if (!run.attention[i].length) return [title, el("p", { class: "hint" }, "nothing in memory yet at this position")];
    const names = new Map(columns.map((c) => [c, heat.name(c, run.extra_slot, (k) => label(data.tokens[k]))]));
    const name = (c) => names.get(c)[0];
    const head = el("tr", {}, el("th"), ...columns.map((c) => el("th", { title: names.get(c)[1] }, name(c))));
    const body = rows.map((r, k) => el("tr", { class: r === i ? "current" : "" }, el("th", {}, label(data.tokens[r])),
      ...columns.map((c) => {
        const w = weights[k].get(c) || 0;
        const cell = el("td", { title: `${label(data.tokens[r])} → ${name(c)}: ${w.toFixed(3)}` }, w >= 0.05 ? w.toFixed(2).replace(/^0/, "") : "");
        cell.style.background = ramp(BLUES, w);
        cell.style.color = w > 0.5 ? "#fff" : "#1d2530";
        return cell;
      })));
    return [title, el("table", { class: "heatmap" }, el("thead", {}, head), el("tbody", {}, ...body))];
  }

  // ---------------------------------------------------------------- comparing two runs
  function renderCompareChoices() {
    const section = $("compare");
    section.hidden = data.runs.length < 2;
    if (section.hidden) return;
    for (const [id, k] of [["compare-a", 0], ["compare-b", 1]]) {
      const choice = $(id), old = choice.value;
      choice.replaceChildren(...data.runs.map((run) => el("option", { value: run.run }, run.run)));
      choice.value = data.runs.some((run) => run.run === old) ? old : data.runs[k].run;
    }
    renderCompare();
  }

  function renderCompare() {
    views = views.filter((view) => view.detail);
    const [a, b] = ["compare-a", "compare-b"].map((id) => data.runs.find((run) => run.run === $(id).value));
    const threshold = Number($("threshold").value) || 0;
    const sa = surprisals(a), sb = surprisals(b), delta = surprisalDelta(sa, sb);
    const tokens = $("compare-tokens");
    tokens.replaceWith(tokens.cloneNode(false));        // drop the old listeners with the old spans
    const fresh = $("compare-tokens");
    const spans = tokenSpans(fresh, (i) => [differenceColour(delta[i], threshold), differenceInk(delta[i], threshold),
      `${data.tokens[i]}: ${a.run} ${nats(sa[i])}, ${b.run} ${nats(sb[i])}, Δ ${nats(delta[i])} nats`,
      Math.abs(delta[i]) >= threshold ? " big" : ""]);
    views.push({ run: null, spans, detail: null });
    const more = delta.filter((d) => d >= threshold).length, less = delta.filter((d) => d <= -threshold).length;
    $("compare-summary").textContent = `Red: ${b.run} at least ${threshold} nats more surprised than ${a.run} ` +
      `(${more} tokens). Blue: ${a.run} at least ${threshold} nats more surprised than ${b.run} (${less} tokens). ` +
      `Perplexity ${pplText(a.ppl)} (${a.run}) vs ` +
      `${pplText(b.ppl)} (${b.run}).` + (a.vocab_size !== b.vocab_size || a.unknown_count !== b.unknown_count ?
      " The vocabularies differ: a word unknown to a run is scored as <unk> there." : "");
    const order = delta.map((d, i) => i).sort((i, j) => Math.abs(delta[j]) - Math.abs(delta[i])).slice(0, 10);
    $("compare-top").replaceChildren(...order.map((i) => {
      const item = el("li", {}, el("b", {}, label(data.tokens[i])), ` (#${i + 1}): ${delta[i] > 0 ? b.run : a.run} ` +
        `${nats(Math.abs(delta[i]))} nats more surprised`);
      item.addEventListener("click", () => { pinned = true; select(i, true); });
      return item;
    }));
    if (selected >= 0) select(selected);
  }

  // ---------------------------------------------------------------- export
  function download(name, blob) {
    const link = el("a", { href: URL.createObjectURL(blob), download: name });
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(link.href), 5000);
  }

  function layout() {            // the coloured texts as boxes, for SVG and PNG alike
    const width = 960, pad = 16, lineHeight = 26, font = "15px Georgia, 'DejaVu Serif', serif";
    const bold = "bold 14px system-ui, 'DejaVu Sans', sans-serif";
    const measure = document.createElement("canvas").getContext("2d");
    const items = [];
    let y = pad;
    const block = (heading, colours) => {
      items.push({ text: heading, x: pad, y: y + 16, font: bold, ink: "#1d2530" });
      y += lineHeight;
      let x = pad;
      data.tokens.forEach((token, i) => {
        measure.font = font;
        const w = measure.measureText(label(token)).width + 8;
        if (x + w > width - pad) { x = pad; y += lineHeight; }
        const [fill, ink, dashed] = colours(i);
        items.push({ box: [x, y, w, lineHeight - 4], fill, dashed, text: label(token), x: x + 4, y: y + 16, font, ink });
        x += w + 3;
        if (token === "<eos>" && i < data.tokens.length - 1) { x = pad; y += lineHeight; }
      });
      y += lineHeight + 10;
    };
    for (const run of data.runs) {
      const s = surprisals(run);
      block(`${run.run} (${run.model}): perplexity ${pplText(run.ppl)}, ${run.tokens} tokens, ${run.unknown_count} unknown`,
            (i) => [surprisalColour(s[i]), inkOn(s[i]), run.unknown[i]]);
    }
    if (!$("compare").hidden) {
      const [a, b] = ["compare-a", "compare-b"].map((id) => data.runs.find((run) => run.run === $(id).value));
      const threshold = Number($("threshold").value) || 0;
      const delta = surprisalDelta(surprisals(a), surprisals(b));
      block(`Δ surprisal ${b.run} − ${a.run} (red: ${b.run} more surprised)`,
            (i) => [differenceColour(delta[i], threshold), differenceInk(delta[i], threshold), false]);
    }
    items.push({ text: "colour: surprisal −ln p in nats, 0 (light) to 16+ (dark red); dashed: scored as <unk>",
                 x: pad, y: y + 4, font: "12px system-ui, 'DejaVu Sans', sans-serif", ink: "#5d6875" });
    return { width, height: y + pad, items };
  }

  function svg() {
    const { width, height, items } = layout();
    const esc = (s) => String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
    const n = (v) => +v.toFixed(1);
    const body = items.map((item) => (item.box ?
      `<rect x="${n(item.box[0])}" y="${item.box[1]}" width="${n(item.box[2])}" height="${item.box[3]}" rx="3" fill="${item.fill}"` +
      (item.dashed ? ' stroke="#333" stroke-dasharray="3 2"' : "") + "/>" : "") +
      `<text x="${n(item.x)}" y="${item.y}" fill="${item.ink}" style="font:${esc(item.font)}">${esc(item.text)}</text>`);
    return `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}">` +
      `<rect width="100%" height="100%" fill="#fff"/>${body.join("")}</svg>`;
  }

  function png() {
    const { width, height, items } = layout(), scale = 2;
    const canvas = el("canvas", { width: width * scale, height: height * scale });
    const g = canvas.getContext("2d");
    g.scale(scale, scale);
    g.fillStyle = "#fff";
    g.fillRect(0, 0, width, height);
    for (const item of items) {
      if (item.box) {
        g.fillStyle = item.fill;
        g.beginPath();
        g.roundRect(...item.box, 3);
        g.fill();
        if (item.dashed) { g.setLineDash([3, 2]); g.strokeStyle = "#333"; g.stroke(); g.setLineDash([]); }
      }
      g.font = item.font;
      g.fillStyle = item.ink;
      g.fillText(item.text, item.x, item.y);
    }
    return new Promise((resolve) => canvas.toBlob(resolve, "image/png"));
  }

  // ---------------------------------------------------------------- wiring
  $("score").addEventListener("click", () => { clearTimeout(timer); scoreText(false); });
  $("text").addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(() => scoreText(true), 700); });
  $("text").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) { event.preventDefault(); clearTimeout(timer); scoreText(false); }
  });
  for (const id of ["top-k", "lower", "separate"]) $(id).addEventListener("change", () => data && scoreText(false));
  for (const id of ["compare-a", "compare-b", "threshold"]) $(id).addEventListener("input", () => data && renderCompare());
  document.addEventListener("keydown", (event) => {
    if (!data || ["TEXTAREA", "INPUT", "SELECT"].includes(document.activeElement.tagName)) return;
    if (event.key === "Escape") { pinned = false; select(selected); }
    if (pinned && (event.key === "ArrowLeft" || event.key === "ArrowRight")) {
      select(selected + (event.key === "ArrowLeft" ? -1 : 1), true);
    }
  });
  $("export-json").addEventListener("click", () => download("ctxlm-explore.json",
    new Blob([JSON.stringify({ request: sent, ...data }, null, 1)], { type: "application/json" })));
  $("export-svg").addEventListener("click", () => download("ctxlm-explore.svg", new Blob([svg()], { type: "image/svg+xml" })));
  $("export-png").addEventListener("click", async () => download("ctxlm-explore.png", await png()));

  $("scale").append(...[0, 2, 4, 6, 8, 10, 12, 14, 16].map((s) => {
    const cell = el("span", {}, s === MAX_SURPRISAL ? `${s}+` : String(s));
    cell.style.background = surprisalColour(s);
    cell.style.color = inkOn(s);
    return cell;
  }));
  api("/api/runs").then((info) => {
    $("runs-info").textContent = `${info.runs.length} run${info.runs.length > 1 ? "s" : ""}: ` + info.runs.map((run) =>
      `${run.name} (${run.model}, ${run.vocab_size.toLocaleString()} words)`).join(" · ") +
      ` · up to ${info.limits.max_tokens.toLocaleString()} tokens`;
    $("top-k").max = info.limits.max_top_k;
  }).catch((error) => showError(error.message));
})();

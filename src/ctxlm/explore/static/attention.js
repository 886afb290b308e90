// ctxlm explore: the attention heatmap's rows and columns from an answer's [source, weight] pairs (docs/explore.md).
// No DOM here: the page (explore.js) draws what these return, and tests/test_explore_slots.py runs them under Node.
"use strict";
globalThis.ctxlmAttention = (() => {
  const START = "start";         // the start state's slots, from before the line (a line read alone)
  const EXTRA = { h0: ["h₀", "zero slot"], sentinel: ["sentinel", "the pointer's sentinel: its vocabulary share g"] };

  // One row: source -> total weight; a source sent twice is summed, so no weight is lost.
  function row(pairs) {
    const weights = new Map();
    for (const [source, w] of pairs) weights.set(source, (weights.get(source) || 0) + w);
    return weights;
  }

  // The columns of `rows` (Maps): the slot that is no position (null), the start state, then the last `most` sources.
  function columns(rows, most) {
    const seen = new Set(rows.flatMap((m) => [...m.keys()]));
    const sources = [...seen].filter((c) => typeof c === "number").sort((a, b) => a - b).slice(-most);
    return [null, START].filter((c) => seen.has(c)).concat(sources);
  }

  // [short name, longer description] of a column; `extra` is the run's "extra_slot" ("h0", "sentinel"), `word(c)`
  // the token of source c.
  function name(column, extra, word) {
    if (column === null) return EXTRA[extra] || ["h₀", "a slot that is no position"];
    if (column === START) return ["start state", "the run's start state: its slots, from before this line, summed"];
    return column < 0 ? ["<eos>", "the <eos> before the text"] : [word(column), `#${column + 1}`];
  }

  return { row, columns, name, START };
})();
if (typeof module === "object") module.exports = globalThis.ctxlmAttention;

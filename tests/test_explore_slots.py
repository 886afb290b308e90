"""`ctxlm explore`'s attention answer: one entry per source, weights that add up to what the model attends to, and the
slots that are no word named for what they are (a zero slot, a pointer's sentinel, the start state before a line)."""
import json
import shutil
import subprocess
from importlib import resources

import pytest
import torch

from conftest import tiny_config, write_corpus
from ctxlm.data.vocab import EOS
from ctxlm.explore.scoring import MAX_SLOTS, load_runs, score
from ctxlm.training.trainer import Trainer

# a blank line (a lone <eos>) among three short lines; 24 tokens, so no row reaches MAX_SLOTS reading one stream
TEXT = "the cat sat on a mat\nbird flew over the red house while dog ran\n\nsmall bird and big dog"
# attention: Daniluk's, no slot that is no position; psmm: a pointer whose window (100) holds more start-state
# slots than MAX_SLOTS, so a sum taken after the top 64 would miss some
MODELS = {"attention": {"name": "attention", "window": 3}, "psmm": {"name": "psmm"}}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("explore_slots")
    corpus = write_corpus(root)
    for name, model in MODELS.items():
        config = tiny_config(corpus, **model)
        config.train.epochs = 1
        Trainer(config, root / name, log=lambda *a: None).fit()      # stores the run's start state too
    return load_runs([root / name for name in MODELS])


def answer(served, name, stream):
    return score(served, {"text": TEXT, "runs": [name], "top_k": 0, "stream": stream})


def rounding(row):
    """How far a row's sum may be from its exact total: each weight is rounded to 4 decimals."""
    return 1e-5 + 5e-5 * len(row)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "lines-separately"])
@pytest.mark.parametrize("name", list(MODELS))
def test_each_row_sums_to_one_with_one_entry_per_source(served, name, stream):
    whole = answer(served, name, stream)
    scored = whole["runs"][0]
    tokens = whole["tokens"]
    starts = [0] + [i + 1 for i, token in enumerate(tokens[:-1]) if token == "<eos>"]     # each line's first token
    assert starts == [0, 7, 17, 18]
    for t, row in enumerate(scored["attention"]):
        sources = [source for source, _ in row]
        assert len(sources) == len(set(sources)), (t, row)
        assert len(row) < MAX_SLOTS                  # nothing cut: the sum is the whole of the attention
        if not row:                                  # an attention model's empty memory before its first output
            assert (name, stream, t) == ("attention", True, 0)
            continue
        assert sum(w for _, w in row) == pytest.approx(1.0, abs=rounding(row)), (t, row)
        assert [w for _, w in row] == sorted((w for _, w in row), reverse=True)
        line_start = max(s for s in starts if s <= t)
        floor = -1 if stream else line_start - 1     # the <eos> the reading (of the stream, of the line) began with
        for source in sources:
            assert source is None or source == "start" or floor <= source <= t - 1, (t, row)
        assert ("start" in sources) <= (not stream)  # a stream starts from the zero state: nothing before it
        assert (None in sources) <= (name == "psmm")  # Daniluk's attention has no slot that is no position
    if not stream and name == "attention":      # a line's first prediction has only the start state to look at
        first = [scored["attention"][s] for s in starts]
        assert all("start" in dict(row) for row in first)
    assert scored["extra_slot"] == ("sentinel" if name == "psmm" else "h0")      # what the page calls `null`


def test_the_sentinel_entry_is_the_pointers_gate(served):
    """The `null` source of a pointer is its sentinel: its weight is g = 1 − mixture_weight, in both readings."""
    for stream in (True, False):
        scored = answer(served, "psmm", stream)["runs"][0]
        for row, mixture in zip(scored["attention"], scored["mixture_weight"]):
            assert dict(row)[None] == pytest.approx(1 - mixture, abs=2e-4)


def test_the_start_entry_sums_every_start_state_slot(served):
    """Read line by line, the psmm run's first prediction of a line looks at the sentinel and at 99 start-state slots
    (more than MAX_SLOTS): one "start" entry holds all of their weight."""
    row = dict(answer(served, "psmm", False)["runs"][0]["attention"][0])
    model = served["psmm"].run.model.eval()
    with torch.no_grad():
        out = model(served["psmm"].run.vocab.encode([EOS]).view(1, 1), model.start_state())
    assert out.attention.size(-1) - 2 > MAX_SLOTS
    exact = out.attention[0, 0, :-2].sum().item()     # the window's slots but the current one (<eos>) and the sentinel
    assert set(row) <= {None, "start", -1} and row["start"] == pytest.approx(exact, abs=1e-4)


NODE_CHECK = r"""
const heat = require(process.argv[2]);
const answer = JSON.parse(require("fs").readFileSync(0, "utf8"));
const result = answer.runs.map((run) => {
  const rows = run.attention.map((pairs) => heat.row(pairs));
  const columns = heat.columns(rows, 30);
  return {
    totals: rows.map((m) => [...m.values()].reduce((a, b) => a + b, 0)),
    sizes: rows.map((m) => m.size),
    columns: columns.slice(0, 2),
    names: columns.slice(0, 2).map((c) => heat.name(c, run.extra_slot, (k) => answer.tokens[k])[0]),
  };
});
const doubled = heat.row([[null, 0.25], [3, 0.25], [null, 0.125], ["start", 0.25], ["start", 0.125]]);
result.push({ doubled: [...doubled.entries()], order: heat.columns([doubled, heat.row([[1, 0.5], [-1, 0.5]])], 2),
  word: heat.name(1, "h0", (k) => `w${k}`)[0], eos: heat.name(-1, "h0", () => "?")[0],
  h0: heat.name(null, "h0", () => "?")[0], start: heat.name("start", "sentinel", () => "?")[0] });
console.log(JSON.stringify(result));
"""


@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js to run the page's script")
def test_the_pages_heatmap_keeps_every_weight_and_names_each_column(served, tmp_path):
    """attention.js, as the page uses it: duplicate sources are summed, the columns of the slots that are no word come
    first and are named by the run's extra_slot."""
    script = resources.files("ctxlm.explore").joinpath("static", "attention.js")
    check = tmp_path / "check.js"
    check.write_text(NODE_CHECK)
    answers = {stream: score(served, {"text": TEXT, "top_k": 0, "stream": stream}) for stream in (True, False)}
    shown = {}
    for stream, data in answers.items():
        done = subprocess.run(["node", str(check), str(script)], input=json.dumps(data), capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, done.stderr
        shown[stream] = json.loads(done.stdout)
    for stream, data in answers.items():
        for scored, page in zip(data["runs"], shown[stream]):
            for row, total, size in zip(scored["attention"], page["totals"], page["sizes"]):
                assert total == pytest.approx(sum(w for _, w in row), abs=1e-9) and size == len(row)
                assert total == pytest.approx(1.0, abs=rounding(row)) or not row
    attention, psmm = shown[False][:2]
    assert attention["columns"][0] == "start" and attention["names"][0] == "start state"
    assert psmm["columns"] == [None, "start"] and psmm["names"] == ["sentinel", "start state"]
    assert shown[True][1]["names"][0] == "sentinel" and "start" not in shown[True][1]["columns"]
    checks = shown[False][2]
    assert checks["doubled"] == [[None, 0.375], [3, 0.25], ["start", 0.375]]
    assert checks["order"] == [None, "start", 1, 3]
    assert (checks["word"], checks["eos"], checks["h0"], checks["start"]) == ("w1", "<eos>", "h₀", "start state")

"""`ctxlm export-onnx` (docs/onnx.md): for every family that exports, onnxruntime streams the same
log-probabilities as PyTorch, chunk by chunk with the state carried; the rest are refused with one line."""
import dataclasses
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("onnx", reason="ONNX export needs the onnx package: pip install 'ctxlm[onnx]'")
pytest.importorskip("onnxruntime", reason="ONNX export needs onnxruntime: pip install 'ctxlm[onnx]'")

from conftest import WORDS, ctxlm, one_line_error, tiny_config, write_corpus  # noqa: E402
from ctxlm.config import OutputConfig  # noqa: E402
from ctxlm.data.text import TextRecipe  # noqa: E402
from ctxlm.data.vocab import EOS, UNK, Vocabulary  # noqa: E402
from ctxlm.evaluation.perplexity import evaluate_stream, stream_outputs  # noqa: E402
from ctxlm.export import OnnxStream, export_onnx, exportable_families, refusal, stream_log_probs  # noqa: E402
from ctxlm.models import MODELS, build_model  # noqa: E402
from ctxlm.models.base import families  # noqa: E402
from ctxlm.training import checkpoint  # noqa: E402

VOCAB = Vocabulary([EOS, UNK] + WORDS)
V = len(VOCAB)
EXPORTABLE = exportable_families()
REFUSED = families(lambda cls: refusal(cls) is not None)
CHUNKS = (5, 1, 70, 9)          # 70: longer than the memory block's 64 positions
TOLERANCE = 1e-5
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("onnx")
    (root / "names.txt").write_text("cat\ndog\nbird\n")
    return root, write_corpus(root)


def config_of(name, folder, **output):
    """Family `name` at tiny sizes and its own defaults (as tests/test_contract.py builds every family)."""
    root, corpus = folder
    sizes = {key: 12 for key in ("emb_size", "hidden_size") if key not in MODELS[name].unread_keys}
    own = {f.name for f in dataclasses.fields(MODELS[name].Options)}
    config = tiny_config(corpus, name=name, **sizes, **({"names": str(root / "names.txt")} if "names" in own else {}))
    config.output = OutputConfig(**output)
    return config


def ready(config):
    torch.manual_seed(0)
    model = build_model(config.model, V, config.output)
    model.use_vocabulary(VOCAB)
    if model.count_based:
        model.estimate(torch.randint(2, V, (400,)).numpy())
    return model.eval()


def save_run(config, model, run_dir: Path) -> Path:
    run_dir.mkdir()
    (run_dir / "config.toml").write_text(config.to_toml())
    VOCAB.save(run_dir / "vocab.txt")
    checkpoint.save_weights(model, run_dir / "model.safetensors", {"model": config.model.name, "vocab": VOCAB.fingerprint()})
    return run_dir


def onnx_stream(stream: OnnxStream, tokens: torch.Tensor, lengths) -> np.ndarray:
    pieces, start = [], 0
    for length in lengths:
        pieces.append(stream(tokens[:, start:start + length].numpy()))
        start += length
    return np.concatenate(pieces, 1)


# the recurrent, attention, memory and feed-forward families (issue 40), the pointer and names mixtures
MUST_EXPORT = {"lstm", "gru", "rnn-tanh", "rnn-relu", "attention", "key-value", "key-value-predict", "rnn-ngram", "rm",
               "rmr", "memn", "lstmn", "ffnn", "ffnn-baseline", "cnn", "mlpconv", "com", "ml-cnn", "psmm", "names-mixture"}


def test_the_recurrent_attention_memory_and_feed_forward_families_export_and_the_rest_say_why_not():
    assert MUST_EXPORT <= set(EXPORTABLE)
    assert set(EXPORTABLE) | set(REFUSED) == set(MODELS) and not set(EXPORTABLE) & set(REFUSED)
    assert {"kneser-ney", "bidirectional-rm", "attentive-lm"} <= set(REFUSED)


def compare_streams(model, path: Path, stepwise: bool):
    """onnxruntime against PyTorch: three rows over CHUNKS (full distributions), a restart of one row, and
    `ctxlm eval`'s own stream (batch 1, chunks of 7) token by token."""
    stream = OnnxStream(path)
    assert stream.chunk == (1 if stepwise else None)
    tokens = torch.randint(0, V, (3, sum(CHUNKS)), generator=torch.Generator().manual_seed(5))
    expected = stream_log_probs(model, tokens, CHUNKS)
    got = onnx_stream(stream, tokens, CHUNKS)
    assert got.shape == (3, sum(CHUNKS), V)
    assert np.abs(got - expected.numpy()).max() <= TOLERANCE

    more = torch.randint(0, V, (3, 6), generator=torch.Generator().manual_seed(6))
    carried = stream_log_probs(model, torch.cat([tokens, more], 1), (*CHUNKS, 6))[:, -6:]
    fresh = stream_log_probs(model, more, (6,))
    stream.restart([1])
    got = stream(more.numpy())
    assert np.abs(got[[0, 2]] - carried[[0, 2]].numpy()).max() <= TOLERANCE
    assert np.abs(got[1] - fresh[1].numpy()).max() <= TOLERANCE

    ids = torch.cat([torch.tensor([VOCAB.eos]), torch.randint(0, V, (60,), generator=torch.Generator().manual_seed(7))])
    stream.start(1)
    for batch, out in stream_outputs(model, ids, 7):
        with torch.no_grad():
            ours = model.target_log_probs(out, batch.targets).numpy()
        theirs = np.take_along_axis(stream(batch.inputs.numpy()), batch.targets.numpy()[..., None], -1)[..., 0]
        assert np.abs(ours - theirs).max() <= TOLERANCE
    return stream


@pytest.mark.parametrize("name", EXPORTABLE)
def test_onnxruntime_streams_the_log_probabilities_of_pytorch(name, folder, tmp_path):
    model = ready(config_of(name, folder))
    written = export_onnx(model, VOCAB, name, tmp_path / "m.onnx")
    assert written["max_difference"] <= TOLERANCE and not model.training
    stream = compare_streams(model, tmp_path / "m.onnx", MODELS[name].steps_through_time)
    assert stream.family == name and stream.words == VOCAB.words


@pytest.mark.parametrize("layer", ["class", "adaptive", "nce"])
def test_every_output_layer_exports(layer, folder, tmp_path):
    model = ready(config_of("lstm", folder, layer=layer, classes=4, cutoffs="8,14", div_value=2.0))
    export_onnx(model, VOCAB, "lstm", tmp_path / "m.onnx")
    compare_streams(model, tmp_path / "m.onnx", False)


def test_com_with_a_mapping_layer_per_branch_exports(folder, tmp_path):
    """Pham's COM presets (`mapping_per_branch`): their mapping layer is an autograd function (models/feedforward.py)."""
    config = config_of("com", folder)
    config.model.options = dataclasses.replace(config.model.options, mapping_per_branch=True, channel_major=True, carry=True)
    model = ready(config)
    assert export_onnx(model, VOCAB, "com", tmp_path / "m.onnx")["max_difference"] <= TOLERANCE
    compare_streams(model, tmp_path / "m.onnx", False)


@pytest.mark.parametrize("name", REFUSED)
def test_a_family_that_cannot_be_exported_is_refused_with_its_reason(name, folder, tmp_path):
    config = config_of(name, folder)
    run = save_run(config, ready(config), tmp_path / "run")
    line = one_line_error(ctxlm("export-onnx", run, tmp_path / "m.onnx"), f"model {name!r} cannot be exported to ONNX")
    assert line.split("ONNX: ", 1)[1]
    assert not (tmp_path / "m.onnx").exists()


def test_export_onnx_writes_a_graph_whose_state_is_an_input_and_an_output(folder, tmp_path):
    config = config_of("rm", folder)
    model = ready(config)
    run = save_run(config, model, tmp_path / "run")
    recipe = {"tokenize": "whitespace", "lower": True, "numbers": "N"}        # what the words went through
    (run / "text.json").write_text(json.dumps(recipe))
    done = ctxlm("export-onnx", run, tmp_path / "out" / "rm.onnx")
    assert done.returncode == 0, done.stderr
    assert "metadata ctxlm.text" in done.stdout
    assert re.match(r"wrote .*rm\.onnx: rm, [\d.]+ MB, 4 state tensors, with the run's start state, chunks of any "
                    r"length; onnxruntime's "
                    r"log-probabilities within [\d.e+-]+ of PyTorch's", done.stdout), done.stdout
    import onnx

    graph = onnx.load(tmp_path / "out" / "rm.onnx")
    info = json.loads({p.key: p.value for p in graph.metadata_props}["ctxlm"])
    assert [i.name for i in graph.graph.input] == ["tokens"] + [f"state_in_{i}" for i in range(4)]
    assert [o.name for o in graph.graph.output] == ["log_probs"] + [f"state_out_{i}" for i in range(4)]
    assert [piece["batch_axis"] for piece in info["state"]] == [1, 1, 0, 0]
    assert [piece["dtype"] for piece in info["state"]] == ["float32", "float32", "int64", "bool"]
    assert info["family"] == "rm" and info["vocab_size"] == V and info["chunk"] is None
    assert json.loads({p.key: p.value for p in graph.metadata_props}["ctxlm.text"]) == TextRecipe(**recipe).recipe()
    assert OnnxStream(tmp_path / "out" / "rm.onnx").text == TextRecipe(**recipe).recipe()
    compare_streams(model, tmp_path / "out" / "rm.onnx", False)


def test_a_text_read_alone_starts_in_onnxruntime_from_the_runs_start_state(folder, tmp_path):
    """The graph carries the run's start state: `start(batch, alone=True)` and `restart(rows, alone=True)` score a
    sentence as `Run.score` does; `start(batch)` is a document's start (zeros), which scores it otherwise."""
    import ctxlm as api

    config = config_of("lstm", folder)
    run_dir = save_run(config, ready(config), tmp_path / "run")      # its start state estimated on load
    done = ctxlm("export-onnx", run_dir, tmp_path / "m.onnx")
    assert done.returncode == 0 and "with the run's start state" in done.stdout, done.stderr
    run = api.load(run_dir)
    text = "the cat sat on a mat"
    expected = np.array(run.score([text], pretokenized=True)[0].log_probs)
    tokens = VOCAB.encode([EOS] + text.split() + [EOS]).numpy()[None].repeat(2, 0)

    def scored(stream, tokens):
        return np.take_along_axis(stream(tokens[:, :-1]), tokens[:, 1:, None], -1)[..., 0]

    stream = OnnxStream(tmp_path / "m.onnx")
    stream.start(2, alone=True)
    assert np.abs(scored(stream, tokens) - expected).max() < 1e-5
    stream.restart([1], alone=True)                       # row 1 a new text alone, row 0 goes on
    again = np.abs(scored(stream, tokens) - expected).max(1)
    assert again[1] < 1e-5 and again[0] > 100 * max(again[1], 1e-7)
    stream.restart(0, alone=True)                         # one row number, as numpy indexes
    assert np.abs(scored(stream, tokens)[0] - expected).max() < 1e-5
    stream.start(1)                                       # zeros: a document's start, not where texts alone start
    assert abs(scored(stream, tokens[:1])[0, 0] - expected[0]) > 100 * max(again[1], 1e-7)
    assert stream.start_row and [r.shape for r in stream.start_row] == [(1, 1, 12), (1, 1, 12)]


def test_export_onnx_says_when_it_found_no_start_state(tmp_path):
    """A stream-trained run whose training text is gone exports without a start state, and says so."""
    (tmp_path / "corpus").mkdir()
    corpus = write_corpus(tmp_path / "corpus")
    config = tiny_config(corpus, name="lstm", emb_size=12, hidden_size=12)
    run_dir = save_run(config, ready(config), tmp_path / "run")
    Path(corpus["train"]).unlink()
    done = ctxlm("export-onnx", run_dir, tmp_path / "m.onnx")
    assert done.returncode == 0 and "WITHOUT the run's start state" in done.stdout, done.stdout + done.stderr
    stream = OnnxStream(tmp_path / "m.onnx")
    assert stream.start_row == []
    stream.start(2, alone=True)
    assert all(not piece.any() for piece in stream.state)


def test_export_onnx_refuses_a_missing_run_and_outputs_it_cannot_write(folder, tmp_path):
    config = config_of("lstm", folder)
    run = save_run(config, ready(config), tmp_path / "run")
    one_line_error(ctxlm("export-onnx", tmp_path / "nowhere", tmp_path / "m.onnx"), "nowhere", "not a run directory")
    (tmp_path / "file").write_text("a file\n")
    one_line_error(ctxlm("export-onnx", run, tmp_path / "file" / "m.onnx"), "is a file, not a folder")
    one_line_error(ctxlm("export-onnx", run, tmp_path), "that is a folder")
    one_line_error(ctxlm("export-onnx", run, run / "m.onnx"), "which this command reads")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "run"]
    assert sorted(p.name for p in run.iterdir()) == ["config.toml", "model.safetensors", "vocab.txt"]


def test_without_onnxruntime_export_onnx_says_what_to_install(folder, tmp_path, monkeypatch):
    config = config_of("lstm", folder)
    run = save_run(config, ready(config), tmp_path / "run")
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    one_line_error(ctxlm("export-onnx", run, tmp_path / "m.onnx"), "pip install 'ctxlm[onnx]'")
    assert not (tmp_path / "m.onnx").exists()


def test_the_python_example_of_docs_onnx_gives_ctxlm_eval_perplexity(folder, tmp_path, monkeypatch, capsys):
    model = ready(config_of("lstm", folder))
    export_onnx(model, VOCAB, "lstm", tmp_path / "ptb-lstm.onnx")
    example = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "onnx.md").read_text(), flags=re.S)
    assert len(example) == 1
    monkeypatch.chdir(tmp_path)
    scope = {}
    exec(example[0], scope)
    text = scope["text"]
    expected = evaluate_stream(model, VOCAB.encode([EOS] + text.split() + [EOS]), 1, 1000)
    assert -scope["total"] == pytest.approx(expected["nll"], abs=1e-4)
    assert capsys.readouterr().out.strip() == f"perplexity {expected['ppl']:.2f}"


def test_onnx_stream_refuses_a_graph_ctxlm_did_not_write_and_a_chunk_without_tokens(folder, tmp_path):
    import onnx
    from onnx import TensorProto, helper

    from ctxlm.errors import CtxlmError

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    onnx.save(helper.make_model(helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [x],
                                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])),
              tmp_path / "other.onnx")
    with pytest.raises(CtxlmError, match="not written by `ctxlm export-onnx`"):
        OnnxStream(tmp_path / "other.onnx")
    export_onnx(ready(config_of("gru", folder)), VOCAB, "gru", tmp_path / "m.onnx")
    stream = OnnxStream(tmp_path / "m.onnx")
    for bad in (np.zeros((2, 0), dtype=np.int64), np.zeros(3, dtype=np.int64)):
        with pytest.raises(CtxlmError, match=r"tokens must be \[batch, time\]"):
            stream(bad)
    with pytest.raises(CtxlmError, match="no stream to restart yet; call start"):
        stream.restart([0])
    for bad in (-1, V):                                     # -1 would be read as the last word
        with pytest.raises(CtxlmError, match=f"tokens must be word ids 0 to {V - 1}"):
            stream(np.array([[0, bad]]))
    stream(np.array([[0, 3, 4]]))
    with pytest.raises(CtxlmError, match=r"tokens have 2 rows but the stream carries 1; call start\(2\)"):
        stream(np.array([[0, 3], [0, 5]]))
    stream.start(2)
    assert stream(np.array([[0, 3], [0, 5]])).shape == (2, 2, V)

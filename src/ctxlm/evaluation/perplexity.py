"""Perplexity exactly as SPEC §0.2: exp(total NLL / number of targets), every `<eos>`/`<unk>` counted,
padding never; sums are accumulated in float64 across batches, never averaged per batch. Given a `desc`, each
shows its progress in tokens on stderr (io.Progress)."""
from __future__ import annotations

import itertools
import tempfile
from contextlib import nullcontext
from pathlib import Path

import torch

from ..checks import argument, safe_exp, shown
from ..data.batching import IGNORE, SentenceBatches, Sentences, SpooledStreamBatches, StreamBatches, spool_ids
from ..data.load import sentences_of
from ..data.text import TextRecipe, file_tokens
from ..data.vocab import EOS
from ..errors import CtxlmError
from ..io import Progress
from ..models.base import LanguageModel
from .dynamic import DynamicWeights
from .scoring import score_sentences, stream_log_probs
from .texts import is_id_vector


def _accumulate(model, batches, device, carry: bool, desc: str | None = None, total: int | None = None) -> dict[str, float]:
    model.eval()
    state = None
    bar = Progress(total, desc, unit="tokens") if desc else None
    total = torch.zeros((), dtype=torch.float64, device=device)     # summed on the device, read back once
    count = torch.zeros((), dtype=torch.int64, device=device)
    with torch.no_grad():
        for batch in batches:
            inputs, targets = batch.inputs.to(device), batch.targets.to(device)
            reset = None if batch.reset is None else batch.reset.to(device)
            out = model(inputs, state if carry else None, reset)
            total -= model.target_log_probs(out, targets).sum(dtype=torch.float64)
            count += (targets != IGNORE).sum()
            state = out.state
            if bar is not None:
                bar.update(int((batch.targets != IGNORE).sum()))
    if bar is not None:
        bar.close()
    total, count = float(total), int(count)
    return {"nll": total, "tokens": count, "ppl": safe_exp(total / count) if count else float("nan")}


def check_model_and_ids(name: str, model, ids: list, **sizes) -> None:
    """A CtxlmError saying what `name` (a function of the Python API) needs, before torch meets a wrong argument:
    a ctxlm model, 1-D integer tensors of token ids, and each of `sizes` an integer at least 1."""
    if not isinstance(model, LanguageModel):
        hint = "; give a Run's model, run.model" if isinstance(getattr(model, "model", None), LanguageModel) else ""
        raise CtxlmError(f"{name}: model must be a ctxlm model (LanguageModel), got {type(model).__name__}{hint}")
    for tensor in ids:
        if not is_id_vector(tensor):
            raise CtxlmError(f"{name}: token ids must be a 1-D integer tensor (vocab.encode), got {shown(tensor)}")
    for option, value in sizes.items():
        argument("api.count", value, f"{name}: {option}")


def evaluate_stream(model, ids: torch.Tensor, batch_size: int = 1, chunk: int = 1000, doc_starts=None,
                    device="cpu", desc: str | None = None) -> dict[str, float]:
    """Regime A: `ids` starts with `<eos>`; state is carried across chunks (batch 1 = exact history)."""
    check_model_and_ids("evaluate_stream", model, [ids], batch_size=batch_size, chunk=chunk)
    return _accumulate(model, StreamBatches(ids, batch_size, chunk, doc_starts), device, True, desc, ids.numel() - 1)


@torch.no_grad()
def stream_outputs(model, ids: torch.Tensor, chunk: int = 1000):
    """(batch, ModelOutput) of each chunk of `ids` read as one stream (batch 1, state carried), in order."""
    model.eval()
    state = None
    for batch in StreamBatches(ids, 1, chunk):
        out = model(batch.inputs, state, batch.reset)
        state = out.state
        yield batch, out


def evaluate_dynamic(model, ids: torch.Tensor, weights: DynamicWeights, desc: str | None = None) -> dict[str, float]:
    """Perplexity of `ids` (starting with `<eos>`) read as one stream under dynamic evaluation (evaluation/dynamic.py),
    from the trained weights, which are back afterwards. `model` may wrap the one `weights` adapts (the cache)."""
    with Progress(ids.numel() - 1, desc, unit="tokens") if desc else nullcontext() as bar:
        log_probs = stream_log_probs(model, ids, dynamic=weights, progress=bar)
    total, count = -float(log_probs.double().sum()), log_probs.numel()
    return {"nll": total, "tokens": count, "ppl": safe_exp(total / count) if count else float("nan")}


def evaluate_file(model, vocab, path: str | Path, batch_size: int = 1, chunk: int = 1000, device="cpu",
                  recipe: TextRecipe | None = None, desc: str | None = None, config=None) -> dict[str, float]:
    """`evaluate_stream` of a text file (`<eos>` first, then its tokens by `recipe`, else its lines split on whitespace),
    in memory independent of its length: the ids are written to a temporary file and read back chunk by chunk.
    With the `config` of a run trained on sentences alone, its sentences are read alone, as `evaluate_split` reads
    a split of that run (the file's ids in memory, 8 bytes a token; batches of data.batch_size sentences).
    `unknown`: the tokens scored as `<unk>`."""
    tokens = itertools.chain([EOS], file_tokens(path, recipe))
    if config is not None and config.data.batching == "sentence":
        blocks = iter(lambda: list(itertools.islice(tokens, 1 << 16)), [])
        ids = torch.cat([vocab.encode(block) for block in blocks])
        return {**evaluate_split(model, config, ids, vocab, device, desc), "unknown": unknown_targets(ids, vocab)}
    unknown = [0]

    def encoded(block: list[str]) -> torch.Tensor:
        ids = vocab.encode(block)
        unknown[0] += int((ids == vocab.unk).sum())
        return ids

    blocks = (encoded(block) for block in iter(lambda: list(itertools.islice(tokens, 4096)), []))
    with tempfile.TemporaryFile() as spool:
        count = spool_ids(blocks, spool)
        result = _accumulate(model, SpooledStreamBatches(spool, count, batch_size, chunk), device, True, desc, count - 1)
    return {**result, "unknown": unknown[0]}


def unknown_targets(ids: torch.Tensor, vocab) -> int:
    """The targets of `ids` (after its leading `<eos>`) scored as `<unk>`."""
    return int((ids[1:] == vocab.unk).sum())


def evaluate_sentences(model, sentences: list[torch.Tensor], eos: int, batch_size: int = 32,
                       device="cpu", desc: str | None = None) -> dict[str, float]:
    """Regime B: each sentence alone, never truncated (SPEC §6.3 REC 24)."""
    if not isinstance(sentences, (list, tuple, Sentences)):
        raise CtxlmError(f"evaluate_sentences: sentences must be a list of 1-D integer tensors, got {shown(sentences)}")
    check_model_and_ids("evaluate_sentences", model, [] if isinstance(sentences, Sentences) else sentences, batch_size=batch_size)
    return _accumulate(model, SentenceBatches(sentences, batch_size, eos), device, False, desc,
                       sum(s.numel() for s in sentences))


def regime_log_probs(model, config, ids: torch.Tensor, vocab, desc: str | None = None) -> torch.Tensor:
    """[N − 1] log-probabilities (float64) of the targets ids[1:] read as `evaluate_split` reads them at batch 1:
    each sentence alone for a run trained on sentences alone, else one stream; a subset's perplexity (the names,
    SPEC §0.2 rule 6) comes from the same predictions as the whole's."""
    if config.data.batching == "sentence":
        return torch.cat(score_sentences(model, sentences_of(ids, vocab, config), vocab.eos, config.data.batch_size)).double()
    with Progress(ids.numel() - 1, desc, unit="tokens") if desc else nullcontext() as bar:
        return stream_log_probs(model, ids, config.data.eval_chunk, progress=bar)


def evaluate_split(model, config, ids: torch.Tensor, vocab, device, desc: str | None = None) -> dict:
    """Perplexity of one split in the model's regime (stream: carried state; sentence: each alone)."""
    if config.data.batching == "sentence":
        return evaluate_sentences(model, sentences_of(ids, vocab, config), vocab.eos, config.data.batch_size, device, desc)
    return evaluate_stream(model, ids, config.data.eval_batch_size, config.data.eval_chunk, device=device, desc=desc)

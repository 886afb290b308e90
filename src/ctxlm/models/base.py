"""The LanguageModel interface (ARCHITECTURE.md, "The model interface"); families register in ctxlm.registry."""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from ..errors import CtxlmError
from ..layers.output import SoftmaxOutput, build_output
from ..registry import MODELS, register  # noqa: F401  (families register through models.base)


def families(can: Callable[[type["LanguageModel"]], bool]) -> list[str]:
    """The registered family names, sorted, whose class `can` (a test of its declarations) accepts."""
    return sorted(name for name, cls in MODELS.items() if can(cls))


def spoken(names: list[str]) -> str:
    """Names as a sentence lists them: "a, b or c"."""
    return " or ".join(filter(None, [", ".join(names[:-1]), names[-1]])) if names else ""


def build_model(config, vocab_size: int, output=None, counts: torch.Tensor | None = None) -> "LanguageModel":
    """Model `config.name` (a ModelConfig) with the output layer `output` asks for (an OutputConfig; None:
    the model's own softmax). `counts`: training counts per word, for class bins and NCE noise."""
    if config.name not in MODELS:
        raise CtxlmError(f"unknown model {config.name!r} (model.name); known models: {', '.join(sorted(MODELS))}")
    if config.init_range < 0:
        raise CtxlmError(f"model.init_range must be ≥ 0 (0 = PyTorch's default initialisation), got {config.init_range}")
    if config.init_range > torch.finfo(torch.float32).max:
        raise CtxlmError(f"model.init_range = {config.init_range:g} is beyond the largest float32 ({torch.finfo(torch.float32).max:.3g}), "
                         "the weights' type; use a small range such as 0.1")
    try:
        model = MODELS[config.name].from_config(config, config.options, vocab_size)
        if output is not None and output.layer != "softmax":
            model.use_output(output, vocab_size, counts, config.tie_weights)
        if output is not None and output.blocked_loss:
            if not model.softmax_loss:
                raise ValueError("output.blocked_loss = true is not read: this model's training loss is its own, "
                                 "not its softmax's; leave it out")
            for part in model.modules():
                if isinstance(part, SoftmaxOutput):
                    part.blocked_loss = True
        return model
    except ValueError as exc:
        raise CtxlmError(f"model {config.name!r}: {exc}") from None
    except RecursionError as exc:       # no size problem: Ctrl-C in the middle of an import that building ran can leave one
        if _interrupted(exc):
            raise KeyboardInterrupt from None
        raise
    except (RuntimeError, TypeError, OverflowError) as exc:     # sizes torch cannot hold or memory cannot fit
        vocabulary = f", vocabulary {vocab_size:,}" if vocab_size > 2 else ""       # 2: a placeholder, before the data is read
        raise CtxlmError(f"model {config.name!r} (model.emb_size = {config.emb_size:,}, model.hidden_size = "
                         f"{config.hidden_size:,}{vocabulary}) cannot be built: {str(exc).splitlines()[0]}; "
                         "lower the sizes") from None


def _interrupted(exc: BaseException) -> bool:
    """Whether a KeyboardInterrupt is among the exceptions `exc` was raised while handling."""
    while exc is not None:
        if isinstance(exc, KeyboardInterrupt):
            return True
        exc = exc.__context__
    return False


def refuse_unread_keys(config, model: "LanguageModel", output_layer: str) -> None:
    """Before training: a shared [model] key the family does not read (its `unread_keys`), set away from
    its default, or tie_weights = true on a softmax the family keeps untied, is an error, so that no
    setting is silently ignored. `model`: the family built from `config` with its own softmax."""
    from ..config import _toml_value

    defaults = {f.name: f.default for f in fields(config)}
    for key in type(model).unread_keys:
        if getattr(config, key) != defaults[key]:
            raise CtxlmError(f"model.{key} = {_toml_value(getattr(config, key))} is not read by model {config.name!r}: "
                             f"leave it out or set it back to {_toml_value(defaults[key])} (`ctxlm models "
                             f"{config.name}` marks the keys it does not read)")
    if config.tie_weights and output_layer == "softmax" and not model.ties_weights():
        raise CtxlmError(f"model {config.name!r} keeps its softmax untied: model.tie_weights = true would change "
                         f"nothing; set it to false, or tie through output.layer = \"nce\"")


def refuse_untying(config, model: "LanguageModel", output_layer: str) -> None:
    """A family whose own softmax is always tied to the input embeddings, as its equations say (the attentive
    LMs, SPEC §1.15 eq 8), keeps the tie under another output layer or is refused: nce ties only with
    model.tie_weights = true, class and adaptive have no V x d weight to tie. `model`: built with its own softmax."""
    always = model.ties_weights() and not config.tie_weights
    if not always or output_layer == "softmax":
        return
    if output_layer == "nce":
        fix = "would untie them: set model.tie_weights = true to tie it"
    else:
        fix = 'has no V x d weight to tie: use output.layer = "softmax", or "nce" with model.tie_weights = true'
    raise CtxlmError(f"model {config.name!r} ties its output weights to the input embeddings (SPEC §1.15 eq 8); "
                     f"output.layer = \"{output_layer}\" {fix}")


def softmax_ties(name: str, tie_weights: bool = True) -> bool:
    """Whether family `name`, built at its defaults with this tie_weights, ties its softmax to the embeddings."""
    from ..config import ModelConfig

    config = ModelConfig.of(name=name)
    config.emb_size = config.hidden_size
    config.tie_weights = tie_weights
    with torch.device("meta"):
        return build_model(config, 2).ties_weights()


@dataclass
class NoOptions:
    """A family without options of its own: only the [model] keys every family shares."""


@dataclass
class ModelOutput:
    hidden: torch.Tensor                  # [B, T, H]: what the output layer reads
    state: Any                            # everything that crosses a chunk boundary
    attention: torch.Tensor | None = None  # [B, T, L] for analysis, where the model attends
    words: torch.Tensor | None = None      # the word each attended slot predicts: [B, L] (cache) or [B, T, L] (pointer)
    inner: "ModelOutput | None" = None     # a wrapper's (cache's) wrapped model's own output, for its distribution

    def last_position(self) -> "ModelOutput":
        """The output at the last position only, for the next-word distribution after a context."""
        return self.from_position(-1)

    def from_position(self, start: int) -> "ModelOutput":
        """The output at positions `start`, `start` + 1, ... only (a negative `start` counts from the end)."""
        per_position = self.words is not None and self.words.dim() == 3
        return ModelOutput(self.hidden[:, start:], self.state, None if self.attention is None else self.attention[:, start:],
                           self.words[:, start:] if per_position else self.words,
                           None if self.inner is None else self.inner.from_position(start))


def map_state(state: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """`fn` applied to every tensor of a carried state (None, a tensor, or nested tuples of them)."""
    if state is None:
        return None
    if isinstance(state, torch.Tensor):
        return fn(state)
    return type(state)(map_state(s, fn) for s in state)


def model_device(model) -> torch.device:
    """Where the model's weights are (Kneser-Ney has none: its tables are numpy arrays on the CPU)."""
    weight = next(model.parameters(), None)
    return weight.device if weight is not None else torch.device("cpu")


def detach_state(state: Any) -> Any:
    """Truncated BPTT: cut the graph at the chunk boundary, keep the values."""
    return map_state(state, torch.Tensor.detach)


def reset_segments(reset: torch.Tensor | None, length: int):
    """Split [0, length) at every column where some row resets: yields (start, end, rows or None)."""
    if reset is None or not bool(reset.any()):
        yield 0, length, None
        return
    columns = reset.any(0).nonzero().flatten().tolist()
    bounds = sorted(set([0] + columns)) + [length]
    for start, end in zip(bounds[:-1], bounds[1:]):
        rows = reset[:, start]
        yield start, end, rows if bool(rows.any()) else None


def extra_slot(model) -> str:
    """The name of the slot at distance −1 of `attention_distances` (a slot that is no position): a pointer's sentinel
    gate g in a model that mixes distributions, else the attentive LM's zero slot h0."""
    return "sentinel" if model.mixes_distributions else "h0"


class LanguageModel(nn.Module):
    """forward(inputs[B,T], state, reset[B,T]) -> ModelOutput; scoring goes through `self.output`.

    A family declares what it can do beyond this core as the class attributes and methods below,
    whose defaults are those of a plain left-to-right neural LM (ARCHITECTURE.md, "Model options")."""

    embedding: nn.Embedding
    output: nn.Module
    Options: type = NoOptions     # the family's own [model] options (ARCHITECTURE.md "Model options")
    unread_keys: tuple[str, ...] = ()  # shared [model] keys the family does not read: set, they are an error
    summaries: dict[str, str] = {}  # one line per registered name where names share the class (`ctxlm models`)
    count_based = False           # estimated from counts (`estimate`, stored by `tensors`), not trained by gradient
    left_to_right = True          # a next-word distribution from the words before; False: whole sentences only
    any_output_layer = True       # False: it reads its softmax beyond the interface, so [output] stays softmax
    softmax_loss = True           # its training loss is its output layer's `loss` (so output.blocked_loss applies)
    fixed_window = False          # reads a fixed window of `context_size` previous words (data.batching = window)
    exposes_attention = False     # fills ModelOutput.attention, placed by `attention_distances`
    memory_block = False          # that attention is a Memory Block's over the recent input words (analyze memory)
    mixes_distributions = False   # scores a mixture of two distributions, weighted by `mixture_weight`
    rnn_state_first = False       # the carried state opens with `self.rnn`'s (h, c) or h, layers first
    growing_state = False         # the carried state's length changes with the text (a memory of the sentence so far)
    steps_through_time = False    # forward loops over the time steps in Python (its recurrence reads its attention)
    start: Any = None             # the batch-1 state a text read alone starts from (evaluation/start.py); None: zero
    scores_at_once = False        # `texts_log_probs` and `sentence_sums` score many texts read alone in one pass, unpadded (n-gram tables)

    def start_state(self, batch: int = 1) -> Any:
        """The state a text read alone starts from, `start` repeated for `batch` rows on the model's device
        (None: the zero state, a fresh one)."""
        if self.start is None:
            return None
        pieces = self.start if isinstance(self.start, tuple) else (self.start,)
        device = model_device(self)
        dtype = next((p.dtype for p in self.parameters() if p.is_floating_point()), None)   # after .double(), .half()

        def placed(t: torch.Tensor) -> torch.Tensor:
            return t.to(device, dtype) if dtype is not None and t.is_floating_point() else t.to(device)

        grown = tuple(map_state(piece, lambda t, d=dim: placed(t).repeat_interleave(batch, d))
                      for piece, dim in zip(pieces, self.state_batch_dims(self.start)))
        return grown if isinstance(self.start, tuple) else grown[0]

    @classmethod
    def from_config(cls, config, options, vocab_size: int) -> "LanguageModel":
        """The family built from a ModelConfig `config`, its own `options` (an `Options`) and the vocabulary size."""
        raise NotImplementedError(f"{cls.__name__} does not say how to build it from a config")

    def forward(self, inputs: torch.Tensor, state: Any = None, reset: torch.Tensor | None = None) -> ModelOutput:
        raise NotImplementedError

    def use_output(self, settings, vocab_size: int, counts: torch.Tensor | None, tied: bool) -> None:
        """Replace the softmax by the output layer `settings` ([output]) asks for; it keeps its own
        initialisation. A model that reads more of its output layer than the interface (log_probs,
        target_log_probs, loss) refuses, as does a count-based model."""
        if self.count_based or not self.any_output_layer:
            raise ValueError(f"{type(self).__name__} works with output.layer = \"softmax\" only")
        layer = build_output(settings, self.output.weight.shape[1], vocab_size, counts, self.embedding if tied else None)
        self.output = layer
        for part in self.modules():                  # a wrapped base model scores through the same layer
            if part is not self and isinstance(part, LanguageModel):
                part.output = layer

    def use_vocabulary(self, vocab) -> None:
        """Read what the model needs from the run's vocabulary, once, when training starts (default: nothing)."""

    def ties_weights(self) -> bool:
        """Whether the output layer's weights are the input embeddings."""
        return isinstance(self.output, SoftmaxOutput) and self.output.tied

    def log_probs(self, out: ModelOutput) -> torch.Tensor:
        return self.output.log_probs(out.hidden)

    def target_log_probs(self, out: ModelOutput, targets: torch.Tensor) -> torch.Tensor:
        return self.output.target_log_probs(out.hidden, targets)

    def loss(self, out: ModelOutput, targets: torch.Tensor) -> tuple[torch.Tensor, int]:
        return self.output.loss(out.hidden, targets)

    def objective(self, out: ModelOutput, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
        """(what training minimises, summed; its NLL part, which the logs and train_ppl report; target count).
        The same tensor twice unless a family adds a penalty to its loss (names mixture: eq 5.8's gate term)."""
        nll, count = self.loss(out, targets)
        return nll, nll, count

    def sentence_log_prob(self, tokens: torch.Tensor) -> torch.Tensor:
        """[B] float64 scores of sentences `tokens` [B, T] = `<eos>` w_1 … w_L `<eos>`, rows right-padded
        with IGNORE: log p(sentence), the sum of each word's log-probability given the words before it,
        each read from the start state."""
        inputs = tokens[:, :-1].clamp(min=0)
        return self.target_log_probs(self(inputs, self.start_state(inputs.size(0))), tokens[:, 1:]).double().sum(1)

    def texts_log_probs(self, texts: list[torch.Tensor]) -> list[torch.Tensor]:
        """Each text's (ids ending in `<eos>`) token log-probabilities, float64, each read alone after `<eos>` from
        the start state, all in one pass: what `target_log_probs` gives on their padded batches, bit for bit
        (families that declare `scores_at_once`)."""
        raise NotImplementedError(f"{type(self).__name__} scores texts in padded batches")

    def sentence_sums(self, ids: np.ndarray, lengths: list[int]) -> np.ndarray:
        """log p of each text (`ids`: the texts one after another, each ending in `<eos>`), float64, each read alone
        (families that declare `scores_at_once`; this default sums `texts_log_probs`)."""
        texts = torch.from_numpy(np.asarray(ids, dtype=np.int64)).split(list(lengths))
        return np.array([float(t.sum()) for t in self.texts_log_probs(list(texts))], dtype=np.float64)

    def attention_distances(self, out: ModelOutput) -> torch.Tensor:
        """[B, T, L]: how many steps back each slot of `out.attention` [B, T, L] is, −1 for a slot that is no
        position (a zero slot, a sentinel); families that expose attention."""
        raise NotImplementedError(f"{type(self).__name__} exposes no attention")

    def mixture_weight(self, out: ModelOutput) -> torch.Tensor:
        """[B, T]: the second distribution's share of the mixture (families that mix distributions)."""
        raise NotImplementedError(f"{type(self).__name__} mixes no distributions")

    def estimate(self, ids, log=None) -> "LanguageModel":
        """Estimate a count-based model from a token-id stream (numpy, sentences ending in `<eos>`)."""
        raise NotImplementedError(f"{type(self).__name__} is not count-based")

    def arrays(self) -> dict:
        """A count-based model's tables by name (NumPy arrays, in memory or mapped), as its weights file stores them."""
        raise NotImplementedError(f"{type(self).__name__} is not count-based: its state dict is its weights")

    def load_arrays(self, arrays: dict) -> None:
        """Restore a count-based model's tables from the arrays `arrays()` gave (mapped from the weights file)."""
        raise NotImplementedError(f"{type(self).__name__} is not count-based: its state dict is its weights")

    def state_batch_dims(self, state: Any) -> tuple[int, ...]:
        """The batch dimension of each carried tensor: batch-first, except the (h, c) or h of an nn.RNN
        that opens the state (`rnn_state_first`), [layers, B, H]. A model whose state differs overrides this."""
        pieces = state if isinstance(state, tuple) else (state,)
        recurrent = (2 if isinstance(self.rnn, nn.LSTM) else 1) if self.rnn_state_first else 0
        return tuple(1 if i < recurrent else 0 for i in range(len(pieces)))

    def parameter_counts(self) -> dict[str, int]:
        """Counts as the seed tables report them: θ_{W+M} (total) and θ_M (all but input word vectors)."""
        total = sum(p.numel() for p in self.parameters())
        return {"total": total, "without_embeddings": total - self.embedding.weight.numel()}

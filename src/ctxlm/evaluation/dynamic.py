"""Dynamic evaluation (Krause, Kahembwe, Murray, Renals 2018, "Dynamic Evaluation of Neural Sequence
Models"; outside the sources): while a text is scored, each segment, once scored, becomes one gradient
step, and the weights decay back towards the trained ones θ₀.

    rms: θ ← θ − η ∇L(s) / (√MS + ε) + min(1, λ · √MS / mean √MS) ⊙ (θ₀ − θ)   (their "RMS with global prior")
    sgd: θ ← θ − η ∇L(s) + λ (θ₀ − θ)                                            (their "SGD with global prior")

L(s) is the segment's mean NLL; MS is the mean squared gradient of the trained model over training
mini-batches of segments of the same length (`mean_squared_gradients`), mean √MS the average over every weight.
Strictly causal: a segment's tokens are scored by the forward pass whose loss then makes the step, so no
token is scored by weights that have seen it (evaluation/scoring.py reads the segments). The weights are θ₀
again when a pass ends.
"""
from __future__ import annotations

import copy
import hashlib
import json
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from .. import schemas
from ..checks import argument
from ..data.batching import IGNORE, StreamBatches
from ..errors import CtxlmError, InvalidValue
from ..io import Progress, read_keyed_tensors, save_keyed_tensors
from ..models.base import detach_state, model_device

# RUN/dynamic.json as `ctxlm tune-dynamic` writes it: what `read` needs of it
RECORD = schemas.record({"best": schemas.nullable(schemas.record(
    {"rule": {"enum": ["rms", "sgd"], "description": "'rms' or 'sgd'"}, "lr": schemas.rule("dynamic.lr"),
     "decay": schemas.rule("dynamic.decay"), "segment": schemas.rule("dynamic.segment")},
    ("rule", "lr", "decay", "segment"), description="a setting {rule, lr, decay, segment}"))},
    ("best",), description="a tune-dynamic record {\"best\": ...}")
LOSS_LIMIT = 700.0     # a segment's mean NLL above this (or NaN): the steps diverged (as training's divergence check)
EPSILON = 2e-5     # bounds the rms step (≤ η/ε · g) where a weight's training gradient was ~0 (rare words' rows)


@dataclass
class DynamicSetting:
    """The update rule and its three numbers, chosen on validation (the defaults: the ptb-lstm preset's choice)."""
    rule: str = "rms"          # rms or sgd
    lr: float = 4e-5           # η
    decay: float = 0.001       # λ
    segment: int = 10          # tokens per step

    @classmethod
    def read(cls, record: Path) -> "DynamicSetting | None":
        """The setting a `ctxlm tune-dynamic` record (RUN/dynamic.json) chose, None without a record; a record
        that is unreadable or not of `RECORD`'s form, or whose grid lowered no perplexity, is a CtxlmError."""
        if not record.is_file():
            return None
        fix = "run `ctxlm tune-dynamic` again or delete it"
        try:
            data = json.loads(record.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise CtxlmError(f"{record} is unreadable ({type(exc).__name__}: {str(exc)[:80]}); {fix}") from None
        best = schemas.check(data, RECORD, record, fix)["best"]
        if best is None:
            raise CtxlmError(f"{record}: no setting tune-dynamic tried lowered the perplexity; tune again with smaller --lrs, "
                             "give all four of --dynamic-rule, --dynamic-lr, --dynamic-decay and --dynamic-segment (a "
                             "DynamicSetting in Python), or delete it")
        return cls(best["rule"], best["lr"], best["decay"], best["segment"])

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """InvalidValue (a CtxlmError and a ValueError) unless the rule is rms or sgd and the numbers follow
        `checks.RULES` (η in [0, 100], λ in [0, 1], the segment 1 to 100,000 tokens)."""
        if self.rule not in ("rms", "sgd"):
            raise InvalidValue(f"DynamicSetting.rule must be 'rms' or 'sgd', got {self.rule!r}")
        self.lr = argument("dynamic.lr", self.lr, "DynamicSetting.lr")
        self.decay = argument("dynamic.decay", self.decay, "DynamicSetting.decay")
        self.segment = argument("dynamic.segment", self.segment, "DynamicSetting.segment")


class Diverged(CtxlmError):
    """The steps made the weights diverge (a step size too large for the model)."""


class DynamicWeights:
    """The model's weights θ, the trained θ₀ they decay to, and the step of the chosen rule."""

    def __init__(self, model: torch.nn.Module, setting: DynamicSetting, mean_square: list[torch.Tensor] | None = None):
        setting.check()
        if setting.rule == "rms" and mean_square is None:
            raise ValueError("the rms rule needs the mean squared training gradients (mean_squared_gradients)")
        self.setting, self.model, self.steps = setting, model, 0
        self.holder = None          # the pass whose adapted weights these are (evaluation/scoring.py `_Reading`)
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.embeddings = [m for m in model.modules() if isinstance(m, torch.nn.Embedding)]
        self.trained = [p.detach().clone() for p in self.params]
        if setting.rule == "rms":
            rms = [m.sqrt() for m in mean_square]
            mean_rms = torch.cat([r.flatten() for r in rms]).mean()
            if not mean_rms > 0:                    # λ·√MS / mean √MS would be 0/0: every weight NaN
                raise ValueError("the mean squared training gradients are all zero (no training batch was read?)")
            self.scale = [1 / (r + EPSILON) for r in rms]
            self.pull = [(setting.decay * r / mean_rms).clamp(max=1.0) for r in rms]
        else:
            self.scale = [None] * len(self.params)
            self.pull = [setting.decay] * len(self.params)

    def trained_model(self) -> torch.nn.Module:
        """A copy of the model with the trained weights θ₀, whatever steps the model holds now."""
        model = copy.deepcopy(self.model)
        with torch.no_grad():
            for weight, trained in zip((p for p in model.parameters() if p.requires_grad), self.trained):
                weight.copy_(trained)
        return model

    @contextmanager
    def sparse_embeddings(self):
        """Within it, a forward pass gives its embedding tables sparse gradients (the rows it read), so a step
        neither fills nor reads a dense table of zeros (29% of a ptb-lstm step in a profile; 1.17× faster steps)."""
        flags = [m.sparse for m in self.embeddings]
        for m in self.embeddings:
            m.sparse = True
        try:
            yield
        finally:
            for m, flag in zip(self.embeddings, flags):
                m.sparse = flag

    @torch.no_grad()
    def step(self, loss: torch.Tensor) -> None:
        """One step on a segment's mean NLL; Diverged when it is not finite or above 700 (a perplexity past
        float64), which only steps too large make (the first segment is scored by the trained weights)."""
        value = float(loss)
        if not value <= LOSS_LIMIT:
            s = self.setting
            raise Diverged(f"dynamic evaluation diverged: after {self.steps} step{'s' * (self.steps != 1)} a segment's mean loss is {value:.3g} "
                           f"(rule {s.rule}, lr {s.lr:g}, decay {s.decay:g}, segment {s.segment}); give a smaller step "
                           "size (--dynamic-lr, tune-dynamic --lrs, DynamicSetting.lr)")
        self.steps += 1
        grads = torch.autograd.grad(loss, self.params, allow_unused=True)
        for p, g, p0, scale, pull in zip(self.params, grads, self.trained, self.scale, self.pull):
            p.lerp_(p0, pull)                       # p + pull · (p0 − p), fused; the pull is from θ before the step
            if g is None:
                continue
            if g.is_sparse:                         # rows of an embedding table (duplicates summed by coalesce)
                g = g.coalesce()
                rows, values = g.indices()[0], g.values()
                p.index_add_(0, rows, values if scale is None else values * scale[rows], alpha=-self.setting.lr)
            elif scale is None:
                p.add_(g, alpha=-self.setting.lr)
            else:
                p.addcmul_(g, scale, value=-self.setting.lr)

    @torch.no_grad()
    def restore(self) -> None:
        """Back to the trained weights (a new independent item, or the end of a pass)."""
        self.steps = 0
        for p, p0 in zip(self.params, self.trained):
            p.copy_(p0)


def mean_squared_gradients(model, ids: torch.Tensor, segment: int, batch_size: int = 64,
                           max_batches: int = 400) -> list[torch.Tensor]:
    """MS of each weight: over the first `max_batches` training batches of `batch_size` streams × `segment`
    tokens (state carried), the mean squared gradient of the batch's mean NLL, as Krause et al. compute it on
    training mini-batches (fewer streams where the text is short). The NLL is the one each step differentiates,
    not the model's training loss (NCE's sampled loss, a pointer's or a gate's supervision term), so the
    scales are those of the adapted loss and do not depend on random draws. A mini-batch's gradient averages away
    the noise of single segments, so rows of rare words get a smaller MS, hence larger steps, than from
    segments one at a time (first 20,000 PTB valid tokens, ptb-lstm: 127.5 against 129.4 at their best η)."""
    model.eval()
    params = [p for p in model.parameters() if p.requires_grad]
    device = model_device(model)
    sums = [torch.zeros_like(p) for p in params]
    state, seen = None, 0
    batches = StreamBatches(ids, max(1, min(batch_size, (ids.numel() - 1) // segment)), segment)
    bar = Progress(min(len(batches), max_batches), "dynamic evaluation: the rms rule's training gradients")
    for batch in batches:
        if seen == max_batches:
            break
        inputs, targets = batch.inputs.to(device), batch.targets.to(device)
        with torch.enable_grad():
            out = model(inputs, state, None)
            nll = -model.target_log_probs(out, targets).sum()          # IGNORE targets count 0
            grads = torch.autograd.grad(nll / max(int((targets != IGNORE).sum()), 1), params, allow_unused=True)
        for s, g in zip(sums, grads):
            if g is not None:
                s.add_(g.square())
        state, seen = detach_state(out.state), seen + 1
        bar.update()
    bar.close()
    if seen == 0:
        raise CtxlmError(f"the training text has {ids.numel()} tokens, too few to measure "
                         "the rms rule's gradient scales on: use the sgd rule")
    return [s / seen for s in sums]


MEAN_SQUARES_FILE = "dynamic_ms.safetensors"
MEAN_SQUARES_PASS = "64x400"       # `mean_squared_gradients`' batch size × batches: another pass is another key


def mean_squares_key(ids: torch.Tensor, segment: int, weights_sha256: str) -> dict[str, str]:
    """What a kept MS pass was measured on: the weights file's digest, the training ids (as int64), n, the pass."""
    text = hashlib.sha256(memoryview(ids.to(torch.int64).contiguous().cpu().numpy())).hexdigest()
    return {"weights_sha256": weights_sha256, "ids_sha256": text, "segment": str(segment), "pass": MEAN_SQUARES_PASS}


def stored_mean_squares(run_dir, model, ids: torch.Tensor, segment: int, weights_sha256: str) -> list[torch.Tensor]:
    """`mean_squared_gradients`, read from RUN/dynamic_ms.safetensors where `tune-dynamic` kept it for these
    weights (the digest of the run's weights file: a model changed in memory must measure its own), this
    training text and this n; else measured (400 training batches: minutes at 2 × 650)."""
    params = [p for p in model.parameters() if p.requires_grad]
    kept = (read_keyed_tensors(Path(run_dir) / MEAN_SQUARES_FILE, mean_squares_key(ids, segment, weights_sha256))
            if weights_sha256 else None)
    if kept is not None and len(kept) == len(params):
        found = [kept[str(i)].to(p) for i, p in enumerate(params)]
        if all(m.shape == p.shape for m, p in zip(found, params)):
            return found
    return mean_squared_gradients(model, ids, segment)


def keep_mean_squares(run_dir, mean_square: list[torch.Tensor], ids: torch.Tensor, segment: int,
                      weights_sha256: str) -> None:
    """Keep the chosen setting's MS pass in the run (`tune-dynamic`, beside dynamic.json) for `eval --dynamic`;
    a run that cannot be written keeps none."""
    if not weights_sha256:
        return
    tensors = {str(i): m.detach().float().cpu() for i, m in enumerate(mean_square)}
    try:
        save_keyed_tensors(Path(run_dir) / MEAN_SQUARES_FILE, tensors, mean_squares_key(ids, segment, weights_sha256))
    except (CtxlmError, OSError):
        pass

"""Output layers (ARCHITECTURE.md: separate modules; evaluation is always exactly normalised).

Every layer has the same interface: `log_probs(hidden) -> [..., V]`, `target_log_probs(hidden, targets)`
(exact log p(target), 0 at padding) and `loss(hidden, targets) -> (summed training loss, target count)`.
Only training may approximate (NCE); the large-vocabulary layers (class-based and NCE, SPEC §1.20; the
adaptive softmax, Grave et al. 2017, outside SPEC) are chosen with `build_output`. Vocabulary ids are ordered by training frequency (data/vocab.py), which the class-based
and adaptive softmax rely on.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..data.batching import IGNORE

CPU_BLOCK_ROWS = 128                    # positions per block of a training loss through the vocabulary layer
CPU_EVAL_BLOCK_FLOATS = 1 << 25         # an evaluation block's logits, at most (128 MB in float32)
LAYERS = ("softmax", "class", "adaptive", "nce")


def block_rows(positions: int, vocab_size: int, device: torch.device) -> int:
    """Positions per block through a vocabulary layer of `vocab_size` words. On a CPU, while gradients flow (a
    blocked training loss), CPU_BLOCK_ROWS: memory bounded by the block. Evaluating, as many as keep a block's
    logits within CPU_EVAL_BLOCK_FLOATS, at least CPU_BLOCK_ROWS: with freed memory kept (allocator.py) larger
    products run faster (PTB sizes, one chunk of 1,280 positions: 1.3x the 128-row blocks; docs/benchmarks.md).
    Elsewhere one block."""
    if device.type != "cpu":
        return max(1, positions)
    if torch.is_grad_enabled():
        return CPU_BLOCK_ROWS
    return max(CPU_BLOCK_ROWS, CPU_EVAL_BLOCK_FLOATS // max(1, vocab_size))


def target_count(keep: torch.Tensor):
    """How many targets a loss sums over (`keep`: True where not padding): an int, but a 0-d tensor while
    torch.compile traces the loss (train.compile), read by `train_step` after the compiled frame, so that
    tracing does not break the graph at `int(tensor)`."""
    count = keep.sum()
    return count if torch.compiler.is_compiling() else int(count)


class _CastOnceLinear(torch.autograd.Function):
    """F.linear(h, W, b) in autocast's dtype with W's low-precision copy made once by the caller for all blocks;
    each block's weight and bias gradients leave widened to W's dtype, so autograd sums the blocks in float32."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, weight_low):
        hidden_low = hidden.to(weight_low.dtype)
        ctx.save_for_backward(hidden_low, weight_low)
        ctx.hidden_dtype, ctx.weight_dtype = hidden.dtype, weight.dtype
        return F.linear(hidden_low, weight_low, bias.to(weight_low.dtype))

    @staticmethod
    def backward(ctx, grad):
        hidden_low, weight_low = ctx.saved_tensors
        grad = grad.to(weight_low.dtype)
        rows, hidden_rows = grad.flatten(0, -2), hidden_low.flatten(0, -2)
        return ((grad @ weight_low).to(ctx.hidden_dtype), (rows.T @ hidden_rows).to(ctx.weight_dtype),
                rows.sum(0).to(ctx.weight_dtype), None)


def block_weights(weight: torch.Tensor) -> torch.Tensor | None:
    """W in autocast's dtype, cast once for a loss over blocks of positions (`block_linear`); None outside
    autocast. Autocast's own cache would hand every block one low-precision copy and sum the blocks' weight
    gradients in bf16 (at V = 55k, 1.1% / 1.0% error in the weight / bias gradient against 0.4% / 0.1% for one
    cross-entropy; docs/benchmarks.md); casting W afresh per block gave these same numbers, training the names
    mixture 1.26× slower."""
    device = weight.device.type
    if not torch.is_autocast_enabled(device):
        return None
    with torch.autocast(device, enabled=False):
        return weight.detach().to(torch.get_autocast_dtype(device))


def block_linear(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                 weight_low: torch.Tensor | None) -> torch.Tensor:
    """A block's logits h Wᵀ + b: under autocast from `block_weights`' copy, with float32 gradients for W and b."""
    if weight_low is None:
        return F.linear(hidden, weight, bias)
    return _CastOnceLinear.apply(hidden, weight, bias, weight_low)


def widen(x: torch.Tensor) -> torch.Tensor:
    """At least float32: autocast's bf16 logits before a (log-)softmax or a logistic loss."""
    return x.float() if x.dtype in (torch.bfloat16, torch.float16) else x


def build_output(settings, in_dim: int, vocab_size: int, counts: torch.Tensor | None = None,
                 tied: nn.Embedding | None = None) -> nn.Module:
    """The output layer `settings` (config [output]) asks for.

    `counts[i]`: word i's training count, for the class bins and NCE's noise distribution; None when a
    saved run is rebuilt (the bins and the noise distribution are buffers, restored with the weights).
    """
    layer = settings.layer
    if layer not in LAYERS:
        raise ValueError(f"unknown output.layer {layer!r}; choose one of {', '.join(LAYERS)}")
    if tied is not None and layer not in ("softmax", "nce"):
        raise ValueError(f"output.layer = {layer!r} has no single V x d weight to tie to the embedding; "
                         "weight tying works with softmax and nce")
    if layer == "softmax":
        return SoftmaxOutput(in_dim, vocab_size, tied)
    if layer == "nce":
        return NCEOutput(in_dim, vocab_size, counts, settings.noise_samples, settings.log_z, tied)
    if layer == "class":
        return ClassOutput(in_dim, vocab_size, counts, settings.classes or math.ceil(math.sqrt(vocab_size)))
    return AdaptiveOutput(in_dim, vocab_size, parse_cutoffs(settings.cutoffs, vocab_size), settings.div_value)


class SoftmaxOutput(nn.Module):
    """Full softmax o = W h + b, p = softmax(o) (SPEC §1.0).

    With `tied`, W is the input embedding matrix (Press & Wolf; SPEC §1.15 eq 8), which needs
    dim(h) = embedding size. `blocked_loss` (output.blocked_loss, set by `build_model`): training's loss
    goes through `target_log_probs`' blocks on a CPU.
    """
    blocked_loss = False

    def __init__(self, in_dim: int, vocab_size: int, tied: nn.Embedding | None = None):
        super().__init__()
        if tied is not None:
            if tied.embedding_dim != in_dim:
                raise ValueError(f"weight tying needs emb_size == output input size ({tied.embedding_dim} != {in_dim})")
            self.weight = tied.weight
        else:
            self.weight = nn.Parameter(torch.empty(vocab_size, in_dim))
            nn.init.uniform_(self.weight, -in_dim ** -0.5, in_dim ** -0.5)    # nn.Linear's default
        self.bias = nn.Parameter(torch.zeros(vocab_size))
        self.tied = tied is not None

    def logits(self, hidden: torch.Tensor, weight_low: torch.Tensor | None = None) -> torch.Tensor:
        """o = W h + b; `weight_low`: W cast once for blocks of positions under autocast (`block_weights`)."""
        return block_linear(hidden, self.weight, self.bias, weight_low)

    def log_probs(self, hidden: torch.Tensor) -> torch.Tensor:
        """[..., V] log-probabilities."""
        return torch.log_softmax(self.logits(hidden), dim=-1)

    def target_log_probs(self, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """log p(target) at every position; 0 where the target is padding (cross_entropy's ignore_index).

        On a CPU the positions go through the vocabulary layer in blocks (`block_rows`), so memory is bounded
        by the block, not the chunk.
        """
        flat_hidden, flat_targets = hidden.flatten(0, -2), targets.flatten()
        rows = block_rows(flat_targets.numel(), self.weight.shape[0], hidden.device)
        weight_low = block_weights(self.weight)
        nll = [F.cross_entropy(self.logits(flat_hidden[i:i + rows], weight_low), flat_targets[i:i + rows],
                               ignore_index=IGNORE, reduction="none") for i in range(0, flat_targets.numel(), rows)]
        return -torch.cat(nll).view(targets.shape) if nll else hidden.new_zeros(targets.shape)

    def loss(self, hidden: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, int]:
        """(summed NLL over non-padding targets, their count).

        One cross-entropy over all positions, or with `blocked_loss` the blocks of `target_log_probs`: the same
        loss with memory bounded by the block (at one cross-entropy's speed under ctxlm's allocator), but the
        weight gradient's float sums run in another order, so a row trained without it would not train the same
        (docs/benchmarks.md).
        """
        if self.blocked_loss:
            return -self.target_log_probs(hidden, targets).sum(), target_count(targets != IGNORE)
        nll = F.cross_entropy(self.logits(hidden).flatten(0, -2), targets.flatten(), ignore_index=IGNORE, reduction="sum")
        return nll, target_count(targets != IGNORE)


def unigram(counts: torch.Tensor | None, vocab_size: int) -> torch.Tensor:
    """[V] float64 training distribution of the words, a word never seen (`<unk>` in some corpora) counted
    once; uniform without counts (a placeholder that loading the state dict replaces)."""
    counts = torch.ones(vocab_size, dtype=torch.float64, device="cpu") if counts is None else counts.detach().cpu().double()
    if counts.shape != (vocab_size,) or not bool((counts >= 0).all()):
        raise ValueError(f"word counts must be {vocab_size} non-negative numbers, one per vocabulary word")
    counts = counts.clamp(min=1)
    return counts / counts.sum()


class NCEOutput(SoftmaxOutput):
    """Full softmax trained by noise-contrastive estimation (SPEC §1.20 eqs 2.37–2.40, §6.5 REC 45).

    The unnormalised model is log p̃(w | h) = o_w − ln Z with a fixed ln Z (9 in [003]). For each
    target w and each of k noise words n ~ Q (the unigram distribution; one draw of k words shared by
    the whole batch), with Δ(w) = o_w − ln Z − ln(k Q(w)):

        loss = − Σ_targets [ log σ(Δ(w)) + Σ_{j=1..k} log σ(−Δ(n_j)) ]

    The bias starts at b = ln Q + ln Z (`start_at_unigram`), so p̃ starts as the unigram distribution,
    self-normalised under Z (from b ≈ 0 NCE learns the word frequencies slowly: on 40k PTB words,
    validation perplexity 1,168 instead of 282 after one epoch). Evaluation (`log_probs`,
    `target_log_probs`) is the exactly normalised softmax of the same W, b.
    """

    def __init__(self, in_dim: int, vocab_size: int, counts: torch.Tensor | None, noise_samples: int = 100,
                 log_z: float = 9.0, tied: nn.Embedding | None = None):
        super().__init__(in_dim, vocab_size, tied)
        if noise_samples < 1:
            raise ValueError(f"output.noise_samples must be at least 1, got {noise_samples}")
        if not math.isfinite(log_z):
            raise ValueError(f"output.log_z must be a finite number, got {log_z}")
        self.noise_samples, self.log_z = noise_samples, log_z
        self.register_buffer("noise", unigram(counts, vocab_size).float())
        self.start_at_unigram()

    @torch.no_grad()
    def start_at_unigram(self) -> None:
        """b = ln Q + ln Z. A model that re-initialises every parameter after building its output layer calls this after."""
        self.bias.copy_(self.noise.log() + self.log_z)

    def loss(self, hidden: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, int]:
        """(summed NCE loss over non-padding targets, their count); the logistic terms in float32."""
        flat_hidden, flat_targets = hidden.flatten(0, -2), targets.flatten()
        keep = flat_targets != IGNORE
        words = flat_targets.masked_fill(~keep, 0)
        noise = torch.multinomial(self.noise, self.noise_samples, replacement=True)           # [k]
        log_kq = torch.log(self.noise_samples * self.noise)
        data = widen((flat_hidden * self.weight[words]).sum(-1)) + self.bias[words]          # o_w, [N]
        sampled = widen(F.linear(flat_hidden, self.weight[noise], self.bias[noise]))        # o_n, [N, k]
        terms = (F.logsigmoid(data - self.log_z - log_kq[words])
                 + F.logsigmoid(log_kq[noise] + self.log_z - sampled).sum(-1))
        return -(terms * keep).sum(), target_count(keep)


def frequency_classes(counts: torch.Tensor | None, vocab_size: int, classes: int) -> torch.Tensor:
    """[classes + 1] class bounds: class c is the ids bounds[c] ≤ i < bounds[c+1], in frequency order, each
    holding about an equal share of the training mass (frequency binning, Mikolov et al. 2011).

    Each class ends at the first word where it reaches its share of the mass left (the mass left over the
    classes left), so a word heavier than its share fills a class alone and the lighter words share the
    remaining classes evenly; every class holds at least one word.
    """
    if not 1 <= classes <= vocab_size:
        raise ValueError(f"output.classes must be between 1 and the vocabulary size {vocab_size}, got {classes}")
    probs = unigram(counts, vocab_size)
    before = probs.cumsum(0) - probs                                           # mass of the ids before i
    bounds = [0]
    for left in range(classes - 1, 0, -1):                                     # classes still to place after this one
        start = bounds[-1]
        share = (1 - float(before[start])) / (left + 1)
        end = int(torch.searchsorted(before, before[start] + share))
        bounds.append(min(max(end, start + 1), vocab_size - left))
    return torch.tensor(bounds + [vocab_size])


class ClassOutput(nn.Module):
    """Class-factorised (two-level) softmax with frequency-binned classes (SPEC §1.20 eqs 2.34–2.36).

        p(w | h) = softmax(W^c h + b^c)_{c(w)} · softmax over the words of c(w) of (W h + b)

    Classes are contiguous id ranges (`frequency_classes`, default ⌈√V⌉ of them), so a class's rows of
    W are one slice. `loss` and `target_log_probs` are exact and compute only the target's class: the
    positions are grouped by their target's class and each group meets its own slice of W (about
    √V times less work than the full softmax). `log_probs` gives the whole distribution.
    """

    def __init__(self, in_dim: int, vocab_size: int, counts: torch.Tensor | None, classes: int):
        super().__init__()
        self.register_buffer("bounds", frequency_classes(counts, vocab_size, classes))
        self.class_weight = nn.Parameter(torch.empty(classes, in_dim))
        self.class_bias = nn.Parameter(torch.zeros(classes))
        self.weight = nn.Parameter(torch.empty(vocab_size, in_dim))
        self.bias = nn.Parameter(torch.zeros(vocab_size))
        for weight in (self.class_weight, self.weight):
            nn.init.uniform_(weight, -in_dim ** -0.5, in_dim ** -0.5)

    def class_log_probs(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(widen(F.linear(hidden, self.class_weight, self.class_bias)), -1)

    def log_probs(self, hidden: torch.Tensor) -> torch.Tensor:
        """[..., V]: log p(class) + the log-softmax of each class's slice of the logits."""
        logits = widen(F.linear(hidden, self.weight, self.bias))
        bounds = self.bounds.tolist()
        within = torch.cat([torch.log_softmax(logits[..., s:e], -1) for s, e in zip(bounds[:-1], bounds[1:])], -1)
        sizes = torch.tensor([e - s for s, e in zip(bounds[:-1], bounds[1:])], device=self.bounds.device)  # constants when traced for ONNX
        return within + self.class_log_probs(hidden).repeat_interleave(sizes, dim=-1)

    def target_log_probs(self, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        flat_hidden, flat_targets = hidden.flatten(0, -2), targets.flatten()
        rows = (flat_targets != IGNORE).nonzero().squeeze(1)
        result = widen(hidden.new_zeros(flat_targets.shape))
        if rows.numel() == 0:
            return result.view(targets.shape)
        word_class = torch.bucketize(flat_targets[rows], self.bounds, right=True) - 1
        order = word_class.argsort()                                  # the positions grouped by class
        rows, word_class = rows[order], word_class[order]
        h, within_class = flat_hidden[rows], flat_targets[rows] - self.bounds[word_class]
        class_log_p = self.class_log_probs(h).gather(1, word_class.unsqueeze(1)).squeeze(1)
        # split (not slicing) so that backward assembles each gradient once, not once per class
        groups = torch.bincount(word_class, minlength=self.bounds.numel() - 1).tolist()
        sizes = self.bounds.diff().tolist()
        nll = [F.cross_entropy(widen(F.linear(h_c, w_c, b_c)), words_c, reduction="none")
               for h_c, words_c, w_c, b_c in zip(h.split(groups), within_class.split(groups), self.weight.split(sizes),
                                                 self.bias.split(sizes)) if words_c.numel()]
        return result.index_copy(0, rows, class_log_p - torch.cat(nll)).view(targets.shape)

    def loss(self, hidden: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, int]:
        """(exact summed NLL over non-padding targets, their count)."""
        return -self.target_log_probs(hidden, targets).sum(), target_count(targets != IGNORE)


def parse_cutoffs(text: str, vocab_size: int | None) -> list[int]:
    """Cluster bounds "2000,10000": increasing word counts, each at least 1 and below V (`vocab_size`; None: not
    known yet, the form alone is checked). "" = a head of min(2000, V/4) words, then ×5 per cluster while below V
    (WikiText-2: 2000, 10000; PTB: 2000)."""
    from ..config import _toml_value
    from ..errors import CtxlmError

    if not text.strip():
        cutoffs, cut = [], max(1, min(2000, vocab_size // 4))
        while cut < vocab_size:
            cutoffs.append(cut)
            cut *= 5
        return cutoffs
    try:
        cutoffs = [int(part) for part in text.split(",")]
    except ValueError:
        cutoffs = []
    if not cutoffs or cutoffs[0] < 1 or any(b <= a for a, b in zip(cutoffs, cutoffs[1:])):
        raise CtxlmError(f"output.cutoffs = {_toml_value(text)}: give increasing word counts of at least 1, separated by commas, "
                         'such as "2000,10000" (or "" to choose them from the vocabulary)')
    if vocab_size is not None and cutoffs[-1] >= vocab_size:
        raise CtxlmError(f"output.cutoffs = {_toml_value(text)}: {cutoffs[-1]:,} is not below the vocabulary's {vocab_size:,} "
                         'words, so its cluster would be empty; give smaller cutoffs (or "" to choose them from the vocabulary)')
    return cutoffs


class AdaptiveOutput(nn.Module):
    """Adaptive softmax (Grave et al. 2017), PyTorch's nn.AdaptiveLogSoftmaxWithLoss over frequency-ordered ids.

    The head scores the words below cutoffs[0] and one entry per tail cluster; tail cluster i holds the ids
    [cutoffs[i], cutoffs[i+1]) behind a projection of size in_dim / div_value^(i+1). The head has a bias,
    as the full softmax (SPEC §1.0). Training and evaluation are exact; the layer runs in float32 even
    under bf16 autocast (PyTorch's module mixes dtypes there).
    """

    def __init__(self, in_dim: int, vocab_size: int, cutoffs: list[int], div_value: float = 4.0):
        super().__init__()
        if not div_value > 0 or int(in_dim // div_value ** len(cutoffs)) < 1:
            raise ValueError(f"output.div_value = {div_value} leaves no units for the last tail cluster "
                             f"(in_dim {in_dim} / div_value^{len(cutoffs)} < 1)")
        self.adaptive = nn.AdaptiveLogSoftmaxWithLoss(in_dim, vocab_size, cutoffs, div_value, head_bias=True)

    def log_probs(self, hidden: torch.Tensor) -> torch.Tensor:
        with torch.autocast(hidden.device.type, enabled=False):
            return self.adaptive.log_prob(widen(hidden.flatten(0, -2))).view(*hidden.shape[:-1], -1)

    def target_log_probs(self, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        flat_targets = targets.flatten()
        rows = (flat_targets != IGNORE).nonzero().squeeze(1)
        result = widen(hidden.new_zeros(flat_targets.shape))
        if rows.numel() == 0:
            return result.view(targets.shape)
        with torch.autocast(hidden.device.type, enabled=False):
            log_p = self.adaptive(widen(hidden.flatten(0, -2)[rows]), flat_targets[rows]).output
        return result.index_copy(0, rows, log_p.view(-1)).view(targets.shape)

    def loss(self, hidden: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, int]:
        """(exact summed NLL over non-padding targets, their count)."""
        return -self.target_log_probs(hidden, targets).sum(), target_count(targets != IGNORE)


OUTPUT_KEYS = {"blocked_loss": "softmax", "classes": "class", "cutoffs": "adaptive", "div_value": "adaptive", "noise_samples": "nce", "log_z": "nce"}


def refuse_unread_output_keys(output) -> None:
    """An [output] key of another layer than output.layer, set away from its default, would be silently ignored."""
    from dataclasses import fields

    from ..config import _toml_value
    from ..errors import CtxlmError

    for f in fields(output):
        layer = OUTPUT_KEYS.get(f.name)
        if layer and layer != output.layer and getattr(output, f.name) != f.default:
            raise CtxlmError(f"output.{f.name} = {_toml_value(getattr(output, f.name))} is read only by output.layer = "
                             f"\"{layer}\", not \"{output.layer}\": leave it out or choose that layer")

"""Feed-forward and convolutional LMs over the n previous words: Bengio's NNLM, Pham's baseline FFNN, CNN,
MLPConv, COM and ML-CNN (SPEC §1.2–1.4; Bengio et al. 2003; Pham 2016 [003] §3).

Position t reads the window c_t = (x_{t−n+1}, …, x_t) — the input at t and the n−1 before it — and
predicts x_{t+1}. The models follow the stream interface: `state` is the last n−1 input tokens of the
previous chunk ([B, n−1] ids), each chunk's windows are gathered at once with `unfold` over
[state ‖ inputs], so stream evaluation, `score`, `generate` and `explore` work unchanged, and window
batching (regime C, data/batching.py) trains on shuffled samples by handing each sample's first n−1
words in as the state. Where no word exists — before a stream's first token, before a reset
position — the window holds `<eos>` (SPEC §6.5 REC 43). Windows cross sentence ends (SPEC §2.4).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn

from ..checks import at_least, in_range, setting
from ..layers.highway import Highway
from ..layers.output import SoftmaxOutput
from .base import LanguageModel, ModelOutput, register

EOS_ID = 0      # the vocabulary's `<eos>` (data/vocab.py: ids 0 and 1 are `<eos>` and `<unk>`)


@dataclass
class FeedForwardOptions:
    context: int = setting(16, at_least(1))  # n: previous words each prediction reads (across sentence ends; <eos> before the start)
    direct: bool = False            # Bengio's direct connections: the softmax also reads the concatenated context embeddings
    hidden: bool = True             # false: no hidden layer, the softmax reads only the direct connections (Bengio's h = 0 rows)
    highway: bool = True            # a highway layer after the hidden layers (Pham eqs 3.1–3.2)


@dataclass
class BengioOptions(FeedForwardOptions):
    highway: bool = False           # a highway layer after the hidden layers (Pham eqs 3.1–3.2)


@dataclass
class ConvolutionalOptions:
    context: int = setting(16, at_least(1))  # n: previous words each prediction reads (across sentence ends; <eos> before the start)
    kernel_widths: str = "3"        # convolution widths w (odd), comma-separated; several = COM: parallel branches, concatenated
    kernels: int = setting(0, at_least(0))  # kernels per branch (0 = emb_size: Pham ties the kernel count to k)
    conv_layers: int = setting(1, at_least(1))  # convolution layers stacked in each branch (ML-CNN: 2 or 4)
    batch_norm: bool = True         # batch norm right after each convolution (SPEC §6.5 REC 41); after the 1×1 one too, as the authors' code has it (docs/feedforward.md)
    carry: bool = False             # gate each branch's map against the embeddings, as the authors' code does (docs/feedforward.md)
    mapping_per_branch: bool = False  # several widths: each branch its own mapping layer, outputs concatenated (authors' COM)
    channel_major: bool = False     # read maps back as the authors' code does (channel-major): 1×1 layer and carry mix positions
    highway: bool = True            # a highway layer after the mapping layer (Pham eqs 3.1–3.2)
    # the rest of the authors' code (docs/feedforward.md), off by default: the text has none of it
    position_embeddings: bool = False  # input 0.9·word + 0.1·learned position embedding
    conv_dropout: float = setting(0.0, in_range(0, 1, high_open=True))  # dropout on every convolution's input (code: 0.1)
    flat_batch_norm: bool = False   # batch norm over the n·k maps of each branch before its mapping layer
    gate_bias: float = 0.0          # added to the highway gate's pre-activation (code: −2)
    embedding_init: float = setting(0.0, at_least(0))  # word and position embeddings U(±r); 0 = init_range (code: 0.1)


@dataclass
class COMOptions(ConvolutionalOptions):
    kernel_widths: str = "3,5"      # convolution widths w (odd), comma-separated; several = COM: parallel branches, concatenated


@dataclass
class MLCNNOptions(ConvolutionalOptions):
    conv_layers: int = setting(2, at_least(1))  # convolution layers stacked in each branch (ML-CNN: 2 or 4)


def parse_widths(text: str) -> tuple[int, ...]:
    """"3,5" -> (3, 5); every width an odd number ≥ 1, so the window can be centred (SPEC §6.5 REC 42)."""
    try:
        widths = tuple(int(part) for part in text.replace(" ", "").split(",") if part)
    except ValueError:
        raise ValueError(f"kernel_widths must be odd numbers separated by commas, e.g. \"3\" or \"3,5\"; got {text!r}") from None
    if not widths or any(w < 1 or w % 2 == 0 for w in widths):
        raise ValueError(f"kernel_widths must be odd numbers ≥ 1 separated by commas, e.g. \"3\" or \"3,5\"; got {text!r}")
    return widths


class FeedForwardLM(LanguageModel):
    """One implementation for the family; the registered subclasses below fix activation and front end.

        e_i   = E x_i for the n words of the window                                  (SPEC §1.2)
        f     = [e_1; …; e_n]  (concatenation)   or, convolutional, per position i and kernel j
                z_ij = ReLU(BN(W_j · [e_{i−(w−1)/2} … e_{i+(w−1)/2}] + b_j))  (zero-padded, stride 1;
                MLPConv adds a 1×1 convolution → BN → ReLU; ML-CNN stacks blocks; COM concatenates widths;
                with `carry`, z = ReLU(T ⊙ z + (1 − T) ⊙ e), T = σ(a − 2), a = z before its ReLU;
                `channel_major` reads each map back as the authors' code does, see ChannelMajor;
                `position_embeddings`: e_i = 0.9 E x_i + 0.1 P_i; `conv_dropout` before every convolution;
                `flat_batch_norm`: f = BN(f) over its n·F features)                                   (§1.4)
        h_1   = g(W_1 f + b_1), …, h_L = g(W_L h_{L−1} + b_L)   (g = tanh or ReLU; for CNNs h_1 is the
                                                                 "mapping" layer)              (§1.2–1.4)
        h     = Highway(h_L)  where enabled (`gate_bias` added to the gate's pre-activation)    (§1.3)
        p     = softmax(U [h; f] + b)  with direct connections, else softmax(U h + b)          (Bengio eq. 1)
    Dropout acts on f, after every hidden layer and after the highway layer ("between each hidden layer").
    """

    fixed_window = True
    activation = "relu"
    mlpconv = False
    convolutional = False

    def __init__(self, vocab_size: int, emb_size: int = 128, hidden_size: int = 256, layers: int = 1,
                 dropout: float = 0.0, init_range: float = 0.01, context: int = 16, direct: bool = False,
                 hidden: bool = True, highway: bool = True, kernel_widths: str = "3", kernels: int = 0,
                 conv_layers: int = 1, batch_norm: bool = True, carry: bool = False, mapping_per_branch: bool = False,
                 channel_major: bool = False, position_embeddings: bool = False, conv_dropout: float = 0.0,
                 flat_batch_norm: bool = False, gate_bias: float = 0.0, embedding_init: float = 0.0):
        super().__init__()
        if context < 1:
            raise ValueError(f"context must be at least 1 word, got {context}")
        if not hidden and not direct:
            raise ValueError("with hidden = false the softmax can only read the context through direct = true")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.context_size, self.direct = context, direct
        self.visible_positions: int | None = None     # lesion analysis: only this many nearest positions are read
        self.embedding = nn.Embedding(vocab_size, emb_size)
        self.positions = nn.Parameter(torch.empty(context, emb_size)) if position_embeddings else None
        self.word_scale = 0.9 if position_embeddings else 1.0
        self.branches = nn.ModuleList()
        self.widths: tuple[int, ...] = ()
        per_position = emb_size
        self.carry, self.channel_major = carry, channel_major
        if self.convolutional:
            self.widths = parse_widths(kernel_widths)
            count = kernels or emb_size
            if carry and count != emb_size:
                raise ValueError(f"carry = true adds the embeddings to each map, so kernels must equal emb_size "
                                 f"({emb_size}) or be 0; got {kernels}")
            self.branches.extend(self._branch(emb_size, count, w, conv_layers, batch_norm, conv_dropout)
                                 for w in self.widths)
            per_position = count * len(self.widths)
        self.features_per_position = per_position
        self.flat_norm = nn.BatchNorm1d(context * per_position) if flat_batch_norm else None
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        groups = len(self.widths) if mapping_per_branch and hidden and len(self.widths) > 1 else 1
        width = hidden_size * groups                                             # H per branch, side by side
        sizes = [context * per_position] + [width] * (layers if hidden else 0)
        self.hidden_layers = nn.ModuleList(
            BranchMappings(groups, context, per_position // groups, hidden_size) if i == 0 and groups > 1
            else nn.Linear(a, b) for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])))
        self.act = torch.tanh if self.activation == "tanh" else torch.relu
        self.highway = Highway(width, gate_bias) if hidden and highway else None
        out_size = (width if hidden else 0) + (context * emb_size if direct else 0)
        self.output = SoftmaxOutput(out_size, vocab_size)
        self.reset_parameters(init_range, embedding_init)

    def _branch(self, emb_size: int, kernels: int, width: int, depth: int, batch_norm: bool,
                conv_dropout: float) -> nn.Sequential:
        """[dropout] conv(width) → [BN] → ReLU → [[dropout] 1×1 conv → [BN] → ReLU], `depth` times; keeps n positions.
        Batch norm follows every convolution (SPEC §1.4, REC 41: conv → BN → ReLU), the 1×1 one too, a choice
        from the authors' code (SPEC §1.4 counts the 1×1 layer as k² + k, without BN; docs/feedforward.md);
        with `channel_major`, every ReLU is preceded by the authors' channel-major read-back (a permutation,
        so it commutes with the ReLU; putting it first leaves the ReLU last, where `carry` expects it)."""
        convolutions = []
        for layer in range(depth):
            convolutions.append(nn.Conv1d(emb_size if layer == 0 else kernels, kernels, width, padding=(width - 1) // 2))
            if self.mlpconv:
                convolutions.append(nn.Conv1d(kernels, kernels, 1))
        blocks = []
        for convolution in convolutions:
            dropout = [nn.Dropout(conv_dropout)] if conv_dropout > 0 else []
            blocks += dropout + [convolution] + ([nn.BatchNorm1d(kernels)] if batch_norm else [])
            blocks += ([ChannelMajor()] if self.channel_major else []) + [nn.ReLU()]
        return nn.Sequential(*blocks)

    @classmethod
    def from_config(cls, config, options, vocab_size: int) -> "FeedForwardLM":
        return cls(vocab_size, config.emb_size, config.hidden_size, config.layers, config.dropout, config.init_range,
                   **asdict(options))

    def reset_parameters(self, init_range: float, embedding_init: float = 0.0) -> None:
        """SPEC §2.4 ([003]): every weight U(−r, r); batch norm starts as the identity (scale 1, shift 0).
        init_range = 0 keeps PyTorch's defaults (position embeddings N(0, 1), as word embeddings)."""
        if init_range > 0:
            for parameter in self.parameters():
                nn.init.uniform_(parameter, -init_range, init_range)
        elif self.positions is not None:
            nn.init.normal_(self.positions)
        if embedding_init > 0:
            for table in (self.embedding.weight, self.positions):
                if table is not None:
                    nn.init.uniform_(table, -embedding_init, embedding_init)
        for norm in (m for m in self.modules() if isinstance(m, nn.BatchNorm1d)):
            norm.reset_parameters()

    def windows(self, inputs: torch.Tensor, state, reset):
        """([B, T, n] windows, oldest word first, `<eos>` where no word may be read; the new state [B, n−1])."""
        batch, length = inputs.shape
        n = self.context_size
        if state is None:
            state = inputs.new_full((batch, n - 1), EOS_ID)
        extended = torch.cat([state.to(inputs.device), inputs], 1)               # [B, n−1+T]
        windows = extended.unfold(1, n, 1)                                       # [B, T, n]: extended[t : t+n]
        if reset is not None and bool(reset.any()):
            positions = torch.arange(length, device=inputs.device)
            last_reset = torch.where(reset, positions, -1).cummax(1).values      # [B, T]
            first_readable = torch.where(last_reset >= 0, last_reset + n - 1, 0)  # in extended indices
            slot = positions.view(-1, 1) + torch.arange(n, device=inputs.device)  # [T, n] extended index
            windows = windows.masked_fill(slot < first_readable.unsqueeze(-1), EOS_ID)
        return windows, windows[:, -1, 1:]

    def features(self, embedded: torch.Tensor) -> torch.Tensor:
        """[N, n, emb] -> [N, n, F]: the embeddings themselves, or the convolution maps of every branch."""
        if not self.branches:
            return embedded
        x = embedded.transpose(1, 2)                                             # [N, emb, n]
        maps = [self._carried(branch, x) if self.carry else branch(x) for branch in self.branches]
        return torch.cat(maps, 1).transpose(1, 2)

    def _carried(self, branch: nn.Sequential, x: torch.Tensor) -> torch.Tensor:
        """The authors' highway convolution: ReLU(T ⊙ ReLU(a) + (1 − T) ⊙ e), T = σ(a − 2), where a is the
        branch's last (normalised, and with `channel_major` read-back) convolution output before its ReLU
        and e the embeddings."""
        pre_activation = branch[:-1](x)
        transform = torch.sigmoid(pre_activation - 2.0)
        return torch.relu(transform * torch.relu(pre_activation) + (1 - transform) * x)

    def forward(self, inputs, state=None, reset=None) -> ModelOutput:
        windows, state = self.windows(inputs, state, reset)
        batch, length, n = windows.shape
        embedded = self.embedding(windows.flatten(0, 1))                        # [B·T, n, emb]
        if self.positions is not None:
            embedded = self.word_scale * embedded + (1 - self.word_scale) * self.positions
        features = self.features(embedded)
        if self.flat_norm is not None:
            features = self.flat_norm(features.flatten(1)).view_as(features)
        if self.visible_positions is not None:
            seen = torch.arange(n, device=inputs.device) >= n - self.visible_positions
            features = features * seen.view(1, n, 1)
            embedded = embedded * seen.view(1, n, 1)
        flat = features.flatten(1)
        parts = []
        if self.hidden_layers:
            h = self.dropout(flat)
            for layer in self.hidden_layers:
                h = self.dropout(self.act(layer(h)))
            if self.highway is not None:
                h = self.dropout(self.highway(h))
            parts.append(h)
        if self.direct:
            parts.append(embedded.flatten(1))
        hidden = parts[0] if len(parts) == 1 else torch.cat(parts, -1)
        return ModelOutput(hidden.view(batch, length, -1), state)

    def state_batch_dims(self, state) -> tuple[int, ...]:
        return (0,)

    def mapping_weight(self) -> torch.Tensor:
        """[H, n, F]: the weights of the first hidden layer (a CNN's mapping layer) by context position
        (0 = oldest, n−1 = the word nearest the target) and feature (kernel, or embedding dimension)."""
        if not self.hidden_layers:
            raise ValueError("this model has no hidden layer (hidden = false): no mapping weights to analyse")
        first = self.hidden_layers[0]
        if isinstance(first, BranchMappings):
            return first.dense_weight()
        return first.weight.view(first.weight.size(0), self.context_size, self.features_per_position)

    def first_convolutions(self) -> list[tuple[int, nn.Conv1d]]:
        """(width, first convolution) of each branch: the kernels that read the embeddings."""
        return [(w, next(m for m in branch if isinstance(m, nn.Conv1d))) for w, branch in zip(self.widths, self.branches)]


class ChannelMajor(nn.Module):
    """[N, k, n] maps read back the way the authors' Torch code does (`nn.Reshape(n, k)` of the channel-major
    convolution output, no transpose): position i of the result holds the flat memory i·k … i·k+k−1, that
    is k/n kernels at every position (docs/feedforward.md). Returned as [N, k, n] again."""

    def forward(self, maps: torch.Tensor) -> torch.Tensor:
        batch, kernels, positions = maps.shape
        return maps.reshape(batch, positions, kernels).transpose(1, 2)


class BranchMappings(nn.Module):
    """One mapping layer per COM branch, as the authors' code has it: branch b's n·k features -> its own H
    units, the G outputs side by side (G·H), so the highway and output layers are G·H wide.
    Reads the flat position-major features [N, n·G·k] the joint mapping layer would read."""

    def __init__(self, groups: int, positions: int, kernels: int, hidden: int):
        super().__init__()
        self.groups, self.positions, self.kernels = groups, positions, kernels
        self.weight = nn.Parameter(torch.empty(groups, hidden, positions * kernels))
        self.bias = nn.Parameter(torch.empty(groups, hidden))

    def forward(self, flat: torch.Tensor) -> torch.Tensor:
        per_branch = flat.view(-1, self.positions, self.groups, self.kernels).transpose(0, 2)   # [G, n, N, k]
        per_branch = per_branch.transpose(1, 2).flatten(2)                                      # [G, N, n·k]
        device = flat.device.type
        if device in ("cpu", "cuda") and torch.is_autocast_enabled(device):    # autocast's casts, made here (float64 it
            low = torch.get_autocast_dtype(device)                              # leaves); the product runs outside it
            cast = [t if t.dtype == torch.float64 else t.to(low) for t in (self.bias, per_branch, self.weight)]
            with torch.autocast(device, enabled=False):
                out = _BranchProduct.apply(*cast)
        else:
            out = _BranchProduct.apply(self.bias, per_branch, self.weight)                      # [G, N, H]
        return out.transpose(0, 1).flatten(1)

    def dense_weight(self) -> torch.Tensor:
        """[G·H, n, G·k]: the same map as one matrix, zero where a unit does not read a feature."""
        g, h, n, k = self.groups, self.weight.size(1), self.positions, self.kernels
        dense = self.weight.new_zeros(g, h, n, g, k)
        for b in range(g):
            dense[b, :, :, b] = self.weight[b].view(h, n, k)
        return dense.view(g * h, n, g * k)


class _BranchProduct(torch.autograd.Function):
    """bias[g] + x[g] weight[g]ᵀ for every branch g: autograd's numbers, but the weight's gradient is made as
    grad[g]ᵀ x[g] in the weight's own layout. Through `weight.transpose(1, 2)` autograd makes it transposed and
    copies it across strides into the gradient: a sixth of a k = 256 training step's CPU (bench/branch_mappings.py)."""

    @staticmethod
    def forward(ctx, bias, x, weight):
        ctx.save_for_backward(x, weight)
        return torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2))

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        return grad.sum(1), torch.bmm(grad, weight), torch.bmm(grad.transpose(1, 2), x)


@register("ffnn")
class BengioFFNN(FeedForwardLM):
    """Feed-forward NNLM (Bengio et al. 2003; Pham's vanilla FFNN, SPEC §1.2): tanh layers, optional direct connections."""

    Options = BengioOptions
    activation = "tanh"         # SPEC §6.5 REC 46


@register("ffnn-baseline")
class BaselineFFNN(FeedForwardLM):
    """Pham's baseline FFNN (SPEC §1.3): concatenated embeddings → ReLU layer → highway → softmax, with dropout."""

    Options = FeedForwardOptions


@register("cnn")
class ConvolutionalLM(FeedForwardLM):
    """Pham's CNN LM (SPEC §1.4): convolution → batch norm → ReLU, no pooling, mapping layer → highway → softmax."""

    Options = ConvolutionalOptions
    convolutional = True


@register("mlpconv")
class MLPConvLM(ConvolutionalLM):
    """Pham's +MLPConv (Network in Network, SPEC §1.4): each convolution followed by a 1×1 convolution → BN → ReLU."""

    mlpconv = True


@register("com")
class COMLM(MLPConvLM):
    """Pham's +MLPConv+COM (SPEC §1.4): MLPConv branches of widths 3 and 5 side by side, maps concatenated."""

    Options = COMOptions


@register("ml-cnn")
class MLCNNLM(ConvolutionalLM):
    """Pham's ML-CNN (SPEC §1.4): convolution blocks stacked (2 by default) before the mapping layer."""

    Options = MLCNNOptions

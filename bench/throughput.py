"""Training and evaluation tokens/s, as ratios measured in one run (rounds interleaved, medians).

Section `lstm`: ctxlm's LSTM against the textbook PyTorch loop (embedding -> nn.LSTM -> linear ->
cross-entropy, Adam, clipping, detached state) at the same sizes and batch.
Section `attention`: each attention model at its SPEC Table 4.8 sizes (vectorised over time, the
way ctxlm runs it) against (a) our plain LSTM of the same parameter budget (w = k = 300) and
(b) a step-by-step version that runs the LSTM and the attention one time step at a time for the
whole batch, checked equal to the vectorised forward before it is timed.
Section `precision`: training under `train.precision = "bf16"` against float32, same model, same batch.
Section `compile`: training with `train.compile = true` against eager.

    python bench/throughput.py                          # both sections, V=10k, B=64, T=20
    python bench/throughput.py --section attention --rounds 3 --steps 10
    python bench/throughput.py --section precision      # bf16 autocast vs float32 training, every family
    python bench/throughput.py --device cuda            # the same on a GPU, with the share of its bf16 peak

malloc keeps freed memory, as every ctxlm command sets it (src/ctxlm/allocator.py), unless `--allocator default`.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

from ctxlm.allocator import keep_freed_memory
from ctxlm.config import ModelConfig
from ctxlm.evaluation import evaluate_stream
from ctxlm.layers.history import empty_memory, masked_softmax
from ctxlm.models import build_model
from ctxlm.training.distributed import LossStep
from ctxlm.training.optim import build_optimizer
from ctxlm.training.trainer import compiled, train_step

# SPEC Table 4.8 sizes (name, w, k, window a or N)
ATTENTION_MODELS = [("attention", 287, 287, 4), ("key-value", 249, 498, 3), ("key-value-predict", 215, 645, 3),
                    ("rnn-ngram", 252, 504, 1)]


class ReferenceLSTM(nn.Module):
    def __init__(self, vocab, emb, hidden):
        super().__init__()
        self.embedding = nn.Embedding(vocab, emb)
        self.lstm = nn.LSTM(emb, hidden)
        self.decoder = nn.Linear(hidden, vocab)

    def forward(self, x, state):
        y, state = self.lstm(self.embedding(x), state)
        return self.decoder(y), state


def reference_train(model, optimizer, data, steps, bptt, clip):
    """data: [T_total, B]; returns tokens processed."""
    state, vocab = None, model.decoder.out_features
    for i in range(steps):
        x, y = data[i * bptt:(i + 1) * bptt], data[i * bptt + 1:(i + 1) * bptt + 1]
        logits, state = model(x, state)
        loss = F.cross_entropy(logits.view(-1, vocab), y.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        state = tuple(s.detach() for s in state)
    return steps * bptt * data.size(1)


@torch.no_grad()
def reference_eval(model, stream, batch, chunk):
    data = stream[: (stream.numel() // batch) * batch].view(batch, -1).t().contiguous()
    state, total, vocab = None, 0.0, model.decoder.out_features
    for i in range(0, data.size(0) - 1, chunk):
        x, y = data[i:i + chunk], data[i + 1:i + 1 + chunk]
        logits, state = model(x[: y.size(0)], state)
        total += float(F.cross_entropy(logits.view(-1, vocab), y.reshape(-1), reduction="sum"))
    return data.numel() - batch


def ours_train(model, optimizer, data, steps, bptt, clip, precision="fp32", step=None):
    carry = None
    for i in range(steps):
        x, y = data[:, i * bptt:(i + 1) * bptt], data[:, i * bptt + 1:(i + 1) * bptt + 1]
        _, _, carry = train_step(model, optimizer, x, y, None, carry, clip, precision=precision, step=step)
    return steps * bptt * data.size(0)


def ours_eval(model, stream, batch, chunk):
    return evaluate_stream(model, stream, batch, chunk, device=stream.device)["tokens"]


def step_by_step(model, inputs, state):
    """The same model, one time step at a time over the whole batch (what the vectorised code replaces)."""
    batch, length = inputs.shape
    recurrent, memory, valid = (None, *empty_memory(batch, getattr(model, "window", getattr(model, "ngram", 1)),
                                                    model.rnn.hidden_size, model.embedding.weight)) \
        if state is None else (state[:2], state[2], state[3])
    x, outputs = model.embedding(inputs), []
    for t in range(length):
        y, recurrent = model.rnn(x[:, t:t + 1], recurrent)
        h = y[:, 0]
        if hasattr(model, "split"):
            key, _, predict = model.split(h)
            keys, values, _ = model.split(memory)
            scores = model.w(torch.tanh(model.W_Y(keys) + model.W_h(key).unsqueeze(1))).squeeze(-1)
            context = (masked_softmax(scores, valid).unsqueeze(-1) * values).sum(1)
            outputs.append(torch.tanh(model.W_P(context) + model.W_X(predict)))
        else:
            q, n = model.slice, model.ngram
            past = memory * valid.unsqueeze(-1)
            parts = [h[:, :q]] + [past[:, n - m, m * q:(m + 1) * q] for m in range(1, n + 1)]
            outputs.append(torch.tanh(model.W_C(torch.cat(parts, -1))))
        memory = torch.cat([memory[:, 1:], h.unsqueeze(1)], 1)
        valid = torch.cat([valid[:, 1:], valid.new_ones(batch, 1)], 1)
    return torch.stack(outputs, 1), (*recurrent, memory, valid)


def step_by_step_train(model, optimizer, data, steps, bptt, clip, forward=step_by_step):
    """Training through a per-step Python forward, `forward(model, x, state) -> (hidden, state)`."""
    state = None
    for i in range(steps):
        x, y = data[:, i * bptt:(i + 1) * bptt], data[:, i * bptt + 1:(i + 1) * bptt + 1]
        hidden, state = forward(model, x, state)
        nll, count = model.output.loss(hidden, y)
        optimizer.zero_grad(set_to_none=True)
        (nll / count).backward()
        nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        state = tuple(s.detach() for s in state)
    return steps * bptt * data.size(0)


def interleaved(runners: dict, rounds: int) -> dict:
    """Median tokens/s of each runner, rounds interleaved so that machine noise hits all alike."""
    for run in runners.values():
        run()                                      # warm-up
    rates = {name: [] for name in runners}
    for _ in range(rounds):
        for name, run in runners.items():
            rates[name].append(run())
    return {name: statistics.median(values) for name, values in rates.items()}


def sized(name: str, w: int, k: int, a: int) -> ModelConfig:
    """Model `name` at w/k with its context size a (the window, or N for rnn-ngram; 0: none)."""
    context = {"ngram": a} if name == "rnn-ngram" else {"window": a} if a else {}
    return ModelConfig.of(name=name, emb_size=w, hidden_size=k, **context)


def attention_section(args, V, B, T) -> dict:
    data = torch.randint(0, V, (B, args.steps * T + 1))
    lstm = build_model(ModelConfig(emb_size=300, hidden_size=300), V)
    results = {}
    for name, w, k, a in ATTENTION_MODELS:
        torch.manual_seed(0)
        model = build_model(sized(name, w, k, a), V)
        with torch.no_grad():
            check = data[:4, :T]
            vectorised = model(check).hidden
            stepped, _ = step_by_step(model, check, None)
            assert torch.allclose(vectorised, stepped, atol=1e-5), f"{name}: step-by-step differs"
        optimizers = {key: build_optimizer("adam", m.parameters(), 1e-3, 0.0) for key, m in (("ours", model), ("lstm", lstm))}
        ours_opt, lstm_opt = optimizers["ours"], optimizers["lstm"]
        runners = {
            "vectorised": lambda m=model, o=ours_opt: timed(ours_train, m, o, data, args.steps, T, 5.0),
            "step_by_step": lambda m=model, o=ours_opt: timed(step_by_step_train, m, o, data, args.steps, T, 5.0),
            "lstm_same_budget": lambda o=lstm_opt: timed(ours_train, lstm, o, data, args.steps, T, 5.0),
        }
        rates = interleaved(runners, args.rounds)
        results[f"{name} ({w}/{k}, {'N' if name == 'rnn-ngram' else 'a'}={a})"] = {
            "train_tokens_per_s": round(rates["vectorised"]), "step_by_step_tokens_per_s": round(rates["step_by_step"]),
            "lstm_tokens_per_s": round(rates["lstm_same_budget"]),
            "ratio_to_lstm": round(rates["vectorised"] / rates["lstm_same_budget"], 3),
            "ratio_to_step_by_step": round(rates["vectorised"] / rates["step_by_step"], 3)}
    return results


def cpu_bf16_units() -> str:
    """What bf16 matrix hardware this CPU exposes: AMX tiles, AVX-512 BF16 dot products, or none."""
    try:
        flags = set(next(line for line in open("/proc/cpuinfo") if line.startswith("flags")).split())
    except (OSError, StopIteration):
        return "unknown"
    return "amx_bf16" if "amx_bf16" in flags else "avx512_bf16 (no AMX)" if "avx512_bf16" in flags else "none"


def timed(fn, *args):
    synchronize()
    start = time.perf_counter()
    tokens = fn(*args)
    synchronize()
    return tokens / (time.perf_counter() - start)


def synchronize() -> None:
    if torch.get_default_device().type == "cuda":
        torch.cuda.synchronize()


# Dense bf16 tensor-core peaks (FLOP/s, no sparsity) from the vendors' data sheets, by device name.
BF16_PEAKS = {"H200": 989e12, "H100 PCIe": 756e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "L4": 121e12,
              "A10": 125e12}


def share_of_bf16_peak(model, tokens_per_s: float) -> float | None:
    """Achieved FLOP/s over the GPU's bf16 peak, counting 6 FLOPs per weight per token (forward 2, backward 4)
    for every weight but the input embedding (a lookup)."""
    if torch.get_default_device().type != "cuda":
        return None
    name = torch.cuda.get_device_name()
    peak = next((v for k, v in BF16_PEAKS.items() if k in name), None)
    if peak is None:
        return None
    counts = model.parameter_counts()
    return round(6 * counts["without_embeddings"] * tokens_per_s / peak, 4)


def lstm_section(args, V, H, B, T) -> dict:
    ours = build_model(ModelConfig(emb_size=H, hidden_size=H), V)
    reference = ReferenceLSTM(V, H, H)
    opt_ours = build_optimizer("adam", ours.parameters(), 1e-3, 0.0)       # what `ctxlm train` uses
    opt_ref = torch.optim.Adam(reference.parameters(), lr=1e-3)             # the textbook default
    train_data = torch.randint(0, V, (B, args.steps * T + 1))
    stream = torch.randint(0, V, (args.eval_tokens,))
    cases = {
        "train": {"ours": lambda: timed(ours_train, ours.train(), opt_ours, train_data, args.steps, T, 5.0),
                  "reference": lambda: timed(reference_train, reference.train(), opt_ref, train_data.t().contiguous(),
                                             args.steps, T, 5.0)},
        f"eval_batch{B}_chunk{T}": {"ours": lambda: timed(ours_eval, ours, stream, B, T),
                                     "reference": lambda: timed(reference_eval, reference.eval(), stream, B, T)},
        "eval_batch1_chunk1000": {"ours": lambda: timed(ours_eval, ours, stream, 1, 1000),
                                  "reference": lambda: timed(reference_eval, reference.eval(), stream, 1, 1000)},
    }
    results = {}
    for name, runners in cases.items():
        rates = interleaved(runners, args.rounds)
        results[name] = {"ours_tokens_per_s": round(rates["ours"]), "reference_tokens_per_s": round(rates["reference"]),
                         "ratio": round(rates["ours"] / rates["reference"], 3)}
    return results


def precision_section(args, V, B, T) -> dict:
    """The ptb-lstm preset's model (w = k = 300, V = 10k, B = 64, BPTT 20): bf16 autocast against float32."""
    data = torch.randint(0, V, (B, args.steps * T + 1))
    results = {}
    for name, w, k, a in [("lstm", 300, 300, 0)] + ATTENTION_MODELS:
        torch.manual_seed(0)
        model = build_model(sized(name, w, k, a), V)
        optimizer = build_optimizer("adam", model.parameters(), 1e-3, 0.0)
        rates = interleaved({p: lambda p=p: timed(ours_train, model, optimizer, data, args.steps, T, 5.0, p)
                             for p in ("fp32", "bf16")}, args.rounds)
        results[f"{name} ({w}/{k})"] = {"fp32_tokens_per_s": round(rates["fp32"]), "bf16_tokens_per_s": round(rates["bf16"]),
                                        "bf16_ratio": round(rates["bf16"] / rates["fp32"], 3),
                                        "bf16_share_of_gpu_bf16_peak": share_of_bf16_peak(model, rates["bf16"])}
    return results


def compile_section(args, V, B, T) -> dict:
    """train.compile = true (torch.compile of forward + loss) against eager, same model, same batch."""
    data = torch.randint(0, V, (B, args.steps * T + 1))
    results = {}
    for name, w, k, a in [("lstm", 300, 300, 0)] + ATTENTION_MODELS[:1]:
        torch.manual_seed(0)
        model = build_model(sized(name, w, k, a), V)
        optimizer = build_optimizer("adam", model.parameters(), 1e-3, 0.0)
        started = time.perf_counter()
        step = compiled(LossStep(model))
        ours_train(model, optimizer, data, 2, T, 5.0, step=step)
        compile_s = time.perf_counter() - started
        rates = interleaved({"eager": lambda: timed(ours_train, model, optimizer, data, args.steps, T, 5.0),
                             "compiled": lambda: timed(ours_train, model, optimizer, data, args.steps, T, 5.0, "fp32", step)},
                            args.rounds)
        results[f"{name} ({w}/{k})"] = {"eager_tokens_per_s": round(rates["eager"]), "compiled_tokens_per_s": round(rates["compiled"]),
                                        "compiled_ratio": round(rates["compiled"] / rates["eager"], 3),
                                        "first_steps_with_compilation_s": round(compile_s, 1)}
    return results


def add_allocator_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--allocator", choices=["kept", "default"], default="kept",
                        help="kept: malloc keeps freed memory, as every ctxlm command sets it, so the rates are "
                             "training's; default: glibc's own (docs/benchmarks.md, \"Allocator\")")


def set_allocator(parser: argparse.ArgumentParser, args) -> None:
    if args.allocator == "kept" and not keep_freed_memory():
        parser.error("cannot keep freed memory here (not glibc, or CTXLM_ALLOCATOR / MALLOC_* set): use --allocator default")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--section", choices=["lstm", "attention", "precision", "compile", "all"], default="all")
    parser.add_argument("--vocab", type=int, default=10_000)
    parser.add_argument("--size", type=int, default=300, help="LSTM section: embedding = hidden size")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--bptt", type=int, default=20)
    parser.add_argument("--steps", type=int, default=20, help="training steps per round")
    parser.add_argument("--eval-tokens", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--device", default="cpu", help="cpu or cuda (everything is built on it)")
    add_allocator_option(parser)
    args = parser.parse_args()
    set_allocator(parser, args)
    torch.set_default_device(args.device)
    on_gpu = torch.device(args.device).type == "cuda"
    if on_gpu:                  # full float32 everywhere: TF32 in cuDNN's LSTM fails the 1e-5 vectorised == stepped check
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    V, B, T = args.vocab, args.batch, args.bptt
    report = {"machine": f"{platform.machine()} {platform.processor() or ''}".strip(), "threads": torch.get_num_threads(),
              "device": torch.cuda.get_device_name() if on_gpu else "cpu",
              "tf32": torch.backends.cudnn.allow_tf32 or torch.backends.cuda.matmul.allow_tf32 if on_gpu else None,
              "cpu_bf16_units": cpu_bf16_units(),
              "torch": torch.__version__, "malloc": args.allocator, "vocab": V, "batch": B, "bptt": T}
    if args.section in ("lstm", "all"):
        report["lstm_vs_reference"] = lstm_section(args, V, args.size, B, T)
    if args.section in ("attention", "all"):
        report["attention_models"] = attention_section(args, V, B, T)
    if args.section in ("precision", "all"):
        report["bf16_vs_fp32_training"] = precision_section(args, V, B, T)
    if args.section in ("compile", "all"):
        report["compiled_vs_eager_training"] = compile_section(args, V, B, T)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

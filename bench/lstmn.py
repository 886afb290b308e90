"""LSTMN training and evaluation tokens/s, as ratios measured in one run (rounds interleaved, medians).

Training (batch 64 × BPTT 20, V = 10,000, Adam, clipping 5, `ctxlm`'s train_step), three runners:
- `lstmn`: ctxlm's LSTMN at the preset's sizes (w = k = 277, a = 5), the lean step loop;
- `lstm`: ctxlm's fused LSTM at the same sizes (w = k = 277);
- `naive`: the same LSTMN parameters in a plain step loop over the batch (every step projects x_t and
  the whole tape again, one product per weight matrix, the tape shifted with torch.cat, a masked
  softmax), checked equal to the lean forward before it is timed.
Recurrence only: the same three, forward and backward of the hidden states alone (no vocabulary layer,
no optimizer), which is where the three differ.
Evaluation: batch 1, chunks of 1,000 tokens (`ctxlm eval`'s default), LSTMN against the LSTM.
With --variants: the step loop (`ctxlm.models.lstmn.tape_steps`) eager, under TorchScript and (training
only: it unrolls the loop) under torch.compile, in training and in evaluation.

    python bench/lstmn.py                        # PTB sizes, 5 rounds of 10 steps
    python bench/lstmn.py --rounds 3 --steps 5 --threads 1
    python bench/lstmn.py --threads 1 --clock cpu   # on a shared machine: CPU time, not wall time
    python bench/lstmn.py --variants --threads 1
"""
from __future__ import annotations

import argparse
import json
import platform
import time
import warnings

import torch

from ctxlm.config import ModelConfig
from ctxlm.layers.history import masked_softmax
from ctxlm.models import build_model
from ctxlm.models import lstmn as lstmn_module
from ctxlm.training.optim import build_optimizer
from throughput import interleaved, ours_eval, ours_train, step_by_step_train

CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
clock = CLOCKS["wall"]


def timed(fn, *args):
    """Tokens per second of `fn(*args)` by `clock`: wall time, or this process's CPU time (steadier on a shared
    machine with one thread: time spent waiting for a core does not count)."""
    start = clock()
    tokens = fn(*args)
    return tokens / (clock() - start)


def naive_forward(model, inputs, state):
    """LSTMN the plain way: per step, project x_t and every tape entry, shift the tape with cat. No resets."""
    k = model.hidden_size
    tape, valid, hbar = state if state is not None else model.initial_state(inputs.size(0), model.embedding.weight)
    tape_h, tape_c = tape[..., :k], tape[..., k:]
    x, hs = model.embedding(inputs), []
    for t in range(inputs.size(1)):
        x_t = x[:, t]
        scores = model.v(torch.tanh(model.W_h(tape_h) + model.W_x(x_t).unsqueeze(1)
                                    + model.W_hbar(hbar).unsqueeze(1))).squeeze(-1)
        weights = masked_softmax(scores, valid).unsqueeze(-1)
        hbar, cbar = (weights * tape_h).sum(1), (weights * tape_c).sum(1)
        z = model.gates_x(x_t) + model.gates_h(hbar)
        i, f, o, candidate = z.chunk(4, -1)
        c = torch.sigmoid(f) * cbar + torch.sigmoid(i) * torch.tanh(candidate)
        h = torch.sigmoid(o) * torch.tanh(c)
        tape_h = torch.cat([tape_h[:, 1:], h.unsqueeze(1)], 1)
        tape_c = torch.cat([tape_c[:, 1:], c.unsqueeze(1)], 1)
        valid = torch.cat([valid[:, 1:], valid.new_ones(valid.size(0), 1)], 1)
        hs.append(h)
    return torch.stack(hs, 1), (torch.cat([tape_h, tape_c], -1), valid, hbar)


def recurrence_only(forward, model, data, steps, bptt):
    """Forward and backward of the hidden states alone, carried state detached between chunks."""
    state = None
    for i in range(steps):
        hidden, state = forward(model, data[:, i * bptt:(i + 1) * bptt], state)
        model.zero_grad(set_to_none=True)
        hidden.sum().backward()
        state = tuple(s.detach() for s in state)
    return steps * bptt * data.size(0)


def ours(model, inputs, state):
    out = model(inputs, state)
    return out.hidden, out.state


def check_naive(model, data, bptt):
    """The naive loop computes the same as the model, over two chunks with carried state."""
    with torch.no_grad():
        state, naive_state = None, None
        for chunk in (data[:4, :bptt], data[:4, bptt:2 * bptt]):
            out = model(chunk, state)
            naive_hidden, naive_state = naive_forward(model, chunk, naive_state)
            assert torch.allclose(out.hidden, naive_hidden, atol=1e-5), "naive LSTMN differs from the model"
            state = out.state


def with_loop(loop, run):
    """`run()` with LSTMN.forward using `loop` as its step loop."""
    eager = lstmn_module.tape_steps
    lstmn_module.tape_steps = loop
    try:
        return run()
    finally:
        lstmn_module.tape_steps = eager


def variants(model, optimizer, data, stream, args) -> dict:
    """The step loop eager, scripted and compiled (the first call of each, compilation included, is not timed)."""
    warnings.simplefilter("ignore")                  # TorchScript's deprecation warnings
    T = args.bptt
    eager = lstmn_module.tape_steps
    loops = {"eager": eager, "torchscript": torch.jit.script(eager), "compiled": torch.compile(eager)}
    started = time.perf_counter()
    with_loop(loops["compiled"], lambda: ours_train(model.train(), optimizer, data, 2, T, 5.0))
    compile_s = time.perf_counter() - started
    def train_with(loop):
        return with_loop(loop, lambda: timed(ours_train, model.train(), optimizer, data, args.steps, T, 5.0))

    def eval_with(loop):
        return with_loop(loop, lambda: timed(ours_eval, model.eval(), stream, 1, 1000))

    train = interleaved({name: lambda loop=loop: train_with(loop) for name, loop in loops.items()}, args.rounds)
    evaluation = interleaved({name: lambda loop=loops[name]: eval_with(loop) for name in ("eager", "torchscript")},
                             args.rounds)
    return {"train_tokens_per_s": {name: round(rate) for name, rate in train.items()},
            "train_ratio_to_eager": {name: round(rate / train["eager"], 3) for name, rate in train.items()},
            "compile_first_two_steps_s": round(compile_s, 1),
            "eval_batch1_chunk1000_tokens_per_s": {name: round(rate) for name, rate in evaluation.items()},
            "eval_ratio_to_eager": {name: round(rate / evaluation["eager"], 3) for name, rate in evaluation.items()}}


def comparisons(lstmn, lstm, optimizers, data, stream, args) -> dict:
    """LSTMN against the LSTM and the naive loop: training, recurrence only, evaluation."""
    T = args.bptt
    train = interleaved({
        "lstmn": lambda: timed(ours_train, lstmn, optimizers["lstmn"], data, args.steps, T, 5.0),
        "lstm": lambda: timed(ours_train, lstm, optimizers["lstm"], data, args.steps, T, 5.0),
        "naive": lambda: timed(step_by_step_train, lstmn, optimizers["lstmn"], data, args.steps, T, 5.0, naive_forward),
    }, args.rounds)
    recurrence = interleaved({
        "lstmn": lambda: timed(recurrence_only, ours, lstmn, data, args.steps, T),
        "lstm": lambda: timed(recurrence_only, ours, lstm, data, args.steps, T),
        "naive": lambda: timed(recurrence_only, naive_forward, lstmn, data, args.steps, T),
    }, args.rounds)
    evaluation = interleaved({"lstmn": lambda: timed(ours_eval, lstmn.eval(), stream, 1, 1000),
                              "lstm": lambda: timed(ours_eval, lstm.eval(), stream, 1, 1000)}, args.rounds)
    return {
        "train_tokens_per_s": {name: round(rate) for name, rate in train.items()},
        "train_ratio_to_lstm": round(train["lstmn"] / train["lstm"], 3),
        "train_ratio_to_naive": round(train["lstmn"] / train["naive"], 3),
        "recurrence_only_tokens_per_s": {name: round(rate) for name, rate in recurrence.items()},
        "recurrence_ratio_to_lstm": round(recurrence["lstmn"] / recurrence["lstm"], 3),
        "recurrence_ratio_to_naive": round(recurrence["lstmn"] / recurrence["naive"], 3),
        "eval_batch1_chunk1000_tokens_per_s": {name: round(rate) for name, rate in evaluation.items()},
        "eval_ratio_to_lstm": round(evaluation["lstmn"] / evaluation["lstm"], 3),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vocab", type=int, default=10_000)
    parser.add_argument("--size", type=int, default=277, help="w = k of both models")
    parser.add_argument("--window", type=int, default=5)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--bptt", type=int, default=20)
    parser.add_argument("--steps", type=int, default=10, help="training steps per round")
    parser.add_argument("--eval-tokens", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = PyTorch's default)")
    parser.add_argument("--variants", action="store_true", help="only: the step loop eager, scripted, compiled")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall", help="wall time or this process's CPU time")
    args = parser.parse_args()
    global clock
    clock = CLOCKS[args.clock]
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    V, B, T, size = args.vocab, args.batch, args.bptt, args.size
    lstmn = build_model(ModelConfig.of(name="lstmn", emb_size=size, hidden_size=size, window=args.window), V)
    lstm = build_model(ModelConfig.of(name="lstm", emb_size=size, hidden_size=size), V)
    data = torch.randint(0, V, (B, args.steps * T + 1))
    check_naive(lstmn, data, T)
    optimizers = {name: build_optimizer("adam", m.parameters(), 1e-3, 0.0) for name, m in (("lstmn", lstmn), ("lstm", lstm))}
    stream = torch.randint(0, V, (args.eval_tokens,))
    report = {"machine": f"{platform.machine()} {platform.processor() or ''}".strip(), "threads": torch.get_num_threads(),
              "torch": torch.__version__, "clock": args.clock, "vocab": V, "batch": B, "bptt": T, "size": size, "window": args.window}
    if args.variants:
        report["loop_variants"] = variants(lstmn, optimizers["lstmn"], data, stream, args)
    else:
        report.update(comparisons(lstmn, lstm, optimizers, data, stream, args))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

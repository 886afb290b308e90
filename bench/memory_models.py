"""Training tokens/s of the Recurrent Memory Networks, as ratios measured in one run (rounds interleaved, medians).

Each setting trains RM and RMR (+tM-g) vectorised over the chunk, the way ctxlm runs them, against
(a) our plain one-layer LSTM of the same size d, the same batch and optimizer, and (b) a step-by-step
version of the same model that runs the LSTM, the Memory Block (and RMR's top LSTM) one time step at a
time for the whole batch; it is checked equal to the vectorised forward before it is timed.

Settings: `tran` = Tran et al.'s PTB setting (d = 128, n = 15, 20 sentences of 25 tokens per batch,
state fresh per batch, SGD); `daniluk` = the daniluk/ptb-rm preset (d = 300, n = 20, 64 streams × 20
tokens, carried state, Adam). Targets on CPU: ≥ 0.7 of the LSTM at d = 128, never slower than step-by-step.

    python bench/memory_models.py                     # both settings, V = 10k
    python bench/memory_models.py --setting tran --rounds 15 --steps 5 --threads 1
"""
from __future__ import annotations

import argparse
import json
import platform

import torch
from torch import nn

from ctxlm.config import ModelConfig
from ctxlm.models import build_model
from ctxlm.models.memory import recent_words
from ctxlm.training.optim import build_optimizer
from ctxlm.training.trainer import train_step
from throughput import interleaved, timed

# name: (d, memory n, batch, tokens per batch row, optimizer, carry state across batches)
SETTINGS = {"tran": (128, 15, 20, 25, "sgd", False), "daniluk": (300, 20, 64, 20, "adam", True)}


def step_by_step(model, inputs, state):
    """RM / RMR one time step at a time over the whole batch: LSTM step, block on that step's memory, top LSTM step."""
    top = model.top is not None
    bottom, upper, words = (None, None, None) if state is None else (state[:2], state[2:4] if top else None, state[-2:])
    x, outputs = model.embedding(inputs), []
    for t in range(inputs.size(1)):
        h, bottom = model.rnn(x[:, t:t + 1], bottom)
        held, slot_valid, words = recent_words(inputs[:, t:t + 1], words, None, model.memory)
        hidden, _ = model.block(model.dropout(h), [(held, True)], slot_valid)
        if top:
            hidden, upper = model.top(hidden, upper)
        outputs.append(hidden)
    return torch.cat(outputs, 1), (*bottom, *(upper if top else ()), *words)


def train(model, optimizer, data, steps, length, carry_state, stepwise=False):
    """`steps` updates on consecutive [B, length] chunks of `data`; returns the tokens processed."""
    carry = None
    for i in range(steps):
        x, y = data[:, i * length:(i + 1) * length], data[:, i * length + 1:(i + 1) * length + 1]
        if not stepwise:
            _, _, carry = train_step(model, optimizer, x, y, None, carry if carry_state else None, 5.0)
            continue
        hidden, carry = step_by_step(model, x, carry if carry_state else None)
        nll, count = model.output.loss(hidden, y)
        optimizer.zero_grad(set_to_none=True)
        (nll / count).backward()
        nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()
        carry = tuple(s.detach() for s in carry)
    return steps * length * data.size(0)


def setting_section(name, args, V) -> dict:
    d, n, B, T, optimizer_name, carry_state = SETTINGS[name]
    lr = 1.0 if optimizer_name == "sgd" else 1e-3
    data = torch.randint(0, V, (B, args.steps * T + 1))
    torch.manual_seed(0)
    lstm = build_model(ModelConfig.of(name="lstm", emb_size=d, hidden_size=d, init_range=0.05), V)
    lstm_optimizer = build_optimizer(optimizer_name, lstm.parameters(), lr, 0.0)
    results = {}
    for architecture in ("rm", "rmr"):
        torch.manual_seed(0)
        model = build_model(ModelConfig.of(name=architecture, emb_size=d, hidden_size=d, memory=n, init_range=0.05), V)
        with torch.no_grad():
            check, state = data[:4, :T], None
            for _ in range(2):                       # twice: the second chunk reads the carried memory
                out = model(check, state)
                stepped, _ = step_by_step(model, check, state)
                assert torch.allclose(out.hidden, stepped, atol=1e-5), f"{architecture}: step-by-step differs"
                state = out.state
        optimizer = build_optimizer(optimizer_name, model.parameters(), lr, 0.0)
        runners = {
            "vectorised": lambda m=model, o=optimizer: timed(train, m, o, data, args.steps, T, carry_state),
            "step_by_step": lambda m=model, o=optimizer: timed(train, m, o, data, args.steps, T, carry_state, True),
            "lstm": lambda: timed(train, lstm, lstm_optimizer, data, args.steps, T, carry_state),
        }
        rates = interleaved(runners, args.rounds)
        results[f"{architecture} (+tM-g, d={d}, n={n})"] = {
            "train_tokens_per_s": round(rates["vectorised"]), "step_by_step_tokens_per_s": round(rates["step_by_step"]),
            "lstm_tokens_per_s": round(rates["lstm"]), "ratio_to_lstm": round(rates["vectorised"] / rates["lstm"], 3),
            "ratio_to_step_by_step": round(rates["vectorised"] / rates["step_by_step"], 3)}
    return {"d": d, "memory": n, "batch": B, "tokens_per_row": T, "optimizer": optimizer_name,
            "state_carried": carry_state, "models": results}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--setting", choices=[*SETTINGS, "all"], default="all")
    parser.add_argument("--vocab", type=int, default=10_000)
    parser.add_argument("--steps", type=int, default=10, help="training steps per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0, help="CPU threads for PyTorch (0 = its default)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (everything is built on it)")
    args = parser.parse_args()
    torch.set_default_device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    report = {"machine": f"{platform.machine()} {platform.processor() or ''}".strip(), "threads": torch.get_num_threads(),
              "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu", "torch": torch.__version__,
              "vocab": args.vocab, "steps_per_round": args.steps, "rounds": args.rounds}
    for name in SETTINGS if args.setting == "all" else [args.setting]:
        report[name] = setting_section(name, args, args.vocab)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

"""How much a trained Salton et al. attentive LM (SPEC §1.15) uses its attention: PTB validation perplexity
with the learned weights, with uniform weights over the same slots, and with the context taken away.
Backs: docs/results.md, Salton section, the verdict (what attention adds to the trained model).

    uniform:    v_s = 0, so every score is 0 and a_i = 1 / slots over h_0, h_1 … h_{t-1} (eqs 3-4, 9-10)
    no context: the context half of W_c set to 0, so h̃_t = tanh(W_c [h_t; 0] (+ b_t)) (eq 7)
    last state: all weight on h_{t-1} (h_0 at a sentence's first word), the context of a plain skip link

Validation only: the test split is read once, by `ctxlm reproduce`.

    python probes/salton_ablation.py RUN [RUN ...]
"""
from __future__ import annotations

import argparse
import os

import torch

from ctxlm.data.load import load_corpus
from ctxlm.data.vocab import EOS
from ctxlm.models import attention
from ctxlm.run import load


def valid_lines(run, data_dir) -> list[str]:
    data = run.config.data
    tokens = load_corpus(data.dataset, data_dir, {"valid": data.valid}).splits["valid"]
    return " ".join(tokens).replace(f" {EOS}", "\n").replace(EOS, "").strip().split("\n")


def last_state_softmax(scores: torch.Tensor, usable: torch.Tensor) -> torch.Tensor:
    """All weight on the latest usable slot (the zero slot h_0 when it is the only one)."""
    latest = (usable * torch.arange(usable.size(-1), device=usable.device)).argmax(-1, keepdim=True)
    return torch.zeros_like(scores).scatter_(-1, latest, 1.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="run folders of attentive-lm models")
    parser.add_argument("--data-dir", default=os.environ.get("CTXLM_DATA_DIR"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    for path in args.runs:
        run = load(path)
        if run.config.model.name != "attentive-lm":
            raise SystemExit(f"{path}: an attentive-lm run, please (this one is {run.config.model.name})")
        model, lines = run.model, valid_lines(run, args.data_dir)
        hidden = model.v_s.in_features
        print(f"{path}: learned {run.perplexity(lines, document=True, pretokenized=True):.2f}", flush=True)
        with torch.no_grad():
            v_s = model.v_s.weight.clone()
            model.v_s.weight.zero_()
            print(f"{path}: uniform {run.perplexity(lines, document=True, pretokenized=True):.2f}", flush=True)
            model.v_s.weight.copy_(v_s)
            original = attention.masked_softmax
            attention.masked_softmax = last_state_softmax
            try:
                print(f"{path}: last state {run.perplexity(lines, document=True, pretokenized=True):.2f}", flush=True)
            finally:
                attention.masked_softmax = original
            context_half = model.W_c.weight[:, hidden:].clone()
            model.W_c.weight[:, hidden:] = 0
            print(f"{path}: no context {run.perplexity(lines, document=True, pretokenized=True):.2f}", flush=True)
            model.W_c.weight[:, hidden:] = context_half


if __name__ == "__main__":
    main()

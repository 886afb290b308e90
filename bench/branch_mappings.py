"""COM's per-branch mapping layer: its own weight gradient against autograd's, training a Pham row.

`BranchMappings` (src/ctxlm/models/feedforward.py) computes bias[g] + x[g] weight[g]ᵀ for each branch g.
Through `weight.transpose(1, 2)` autograd makes the weight's gradient transposed and copies it across
strides into the gradient; ours makes it as grad[g]ᵀ x[g] in the weight's own layout. Each measurement
is a fresh process that trains the preset on PTB through the Trainer (allocator.py's `child`, the code
`ctxlm train` runs) for --warmup batches and then --batches more, with the layer as it is ("ours") or
with autograd's product put back ("autograd"); the two alternate, --rounds times; figures are medians.
"same curve": the summed training NLL after the last batch, which must be equal to the bit.

    python bench/branch_mappings.py                                 # pham-4.2 mlpconv-com-k256, bf16, 1 thread
    python bench/branch_mappings.py --precision fp32 --size 128     # the k = 128 row
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from allocator import child, cpu_name  # noqa: E402

PRESET = "pham/ptb-mlpconv-com-code"
MODES = ("autograd", "ours")


def autograd_product(layer, flat: torch.Tensor) -> torch.Tensor:
    """The layer as autograd would train it: one baddbmm through the transposed weight."""
    per_branch = flat.view(-1, layer.positions, layer.groups, layer.kernels).transpose(0, 2).transpose(1, 2).flatten(2)
    out = torch.baddbmm(layer.bias.unsqueeze(1), per_branch, layer.weight.transpose(1, 2))
    return out.transpose(0, 1).flatten(1)


def overrides(size: int, precision: str) -> tuple[str, ...]:
    """The Table 4.2 row of kernel count `size` (k = emb_size = kernels, H = 2k), in `precision`."""
    return (f"model.emb_size={size}", f"model.hidden_size={2 * size}", f"model.kernels={size}", f"train.precision={precision}")


def measure(mode: str, args) -> dict:
    command = [sys.executable, __file__, "--child", mode, str(args.size), args.precision, str(args.warmup), str(args.batches)]
    out = subprocess.run(command, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=256, help="k: kernels per branch = embedding size; H = 2k (default 256)")
    parser.add_argument("--precision", choices=["bf16", "fp32"], default="bf16")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--batches", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        mode, size, precision, warmup, batches = args.child
        if mode == "autograd":
            from ctxlm.models.feedforward import BranchMappings
            BranchMappings.forward = autograd_product
        print(json.dumps(child(PRESET, 1, int(warmup), int(batches), overrides(int(size), precision))))
        return
    runs = {mode: [] for mode in MODES}
    for _ in range(args.rounds):
        for mode in MODES:
            runs[mode].append(measure(mode, args))
            print(mode, json.dumps(runs[mode][-1]), file=sys.stderr, flush=True)
    medians = {mode: {key: round(statistics.median(m[key] for m in measured), 3) for key in ("tokens_per_s", "tokens_per_cpu_s")}
               for mode, measured in runs.items()}
    report = {"machine": cpu_name(), "torch": torch.__version__, "preset": PRESET, "size": args.size, "precision": args.precision,
              "batches": args.batches, "rounds": args.rounds, **medians,
              **{f"{rate}_ratio": round(medians["ours"][rate] / medians["autograd"][rate], 3) for rate in ("tokens_per_s", "tokens_per_cpu_s")},
              "same_curve": len({m["nll"] for measured in runs.values() for m in measured}) == 1}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

"""Highway layer (Srivastava et al. 2015), as Pham uses it ([003] eqs 3.1–3.2, SPEC §1.3)."""
from __future__ import annotations

import torch
from torch import nn


class Highway(nn.Module):
    """H = ReLU(x W_h + b_h),  T = σ(x W_t + b_t + c),  y = H ⊙ T + x ⊙ (1 − T).

    The gate has a sigmoid (SPEC §6.5 REC 40: eq 3.2 prints it without one); input and output size agree.
    c is a fixed offset, 0 by default (the authors' code, after Srivastava et al., uses −2: carry at first).
    """

    def __init__(self, size: int, gate_bias: float = 0.0):
        super().__init__()
        self.transform = nn.Linear(size, size)
        self.gate = nn.Linear(size, size)
        self.gate_bias = gate_bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = torch.sigmoid(self.gate(x) + self.gate_bias)
        return torch.relu(self.transform(x)) * gate + x * (1 - gate)

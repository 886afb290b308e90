"""Run under torchrun by test_distributed.py: train a config, optionally stopping at (epoch, batch)."""
import sys

import torch

from ctxlm.config import load_toml
from ctxlm.training.trainer import Trainer

config_path, run_dir, stop_epoch, stop_batch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(1)
trainer = Trainer(load_toml(config_path), run_dir, log=lambda *args: None)
trainer.on_batch = lambda t, epoch, batch: t.request_stop("test") if (epoch, batch) == (stop_epoch, stop_batch) else None
try:
    trainer.fit()
except KeyboardInterrupt:
    sys.exit(130)

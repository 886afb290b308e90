"""Loading a finished run directory: `ctxlm.load(run_dir)` -> Run(model, vocab, config)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .config import Config
from .data.vocab import Vocabulary
from .models.base import LanguageModel, build_model
from .training.rundir import RunDir, identity


@dataclass
class Run:
    path: Path
    config: Config
    vocab: Vocabulary
    model: LanguageModel


def load(run_dir: str | Path, device: str = "cpu") -> Run:
    """Build the model from the run's config.toml and vocab.txt and load its best weights, on `device`
    (count-based models, Kneser-Ney, always on the CPU: their tables are numpy arrays)."""
    files = RunDir(run_dir)
    config = files.read_config("train one with `ctxlm train`")
    vocab = files.read_vocab()
    model = build_model(config.model, len(vocab), config.output)
    files.load_weights(model, identity(config.model.name, vocab))
    model.to("cpu" if model.count_based else device).eval()
    return Run(files.path, config, vocab, model)

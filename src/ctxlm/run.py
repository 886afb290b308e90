"""Loading a finished run directory: `ctxlm.load(run_dir)` -> Run(model, vocab, config)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .config import Config, load_toml
from .data.vocab import Vocabulary
from .errors import CtxlmError
from .models.base import LanguageModel, build_model
from .training.checkpoint import load_weights


@dataclass
class Run:
    path: Path
    config: Config
    vocab: Vocabulary
    model: LanguageModel


def load(run_dir: str | Path, device: str = "cpu") -> Run:
    """Build the model from the run's config.toml and vocab.txt and load its best weights, on `device`
    (count-based models, Kneser-Ney, always on the CPU: their tables are numpy arrays)."""
    run_dir = Path(run_dir)
    if not (run_dir / "config.toml").is_file():
        raise CtxlmError(f"{run_dir}: not a run directory (no config.toml); train one with `ctxlm train`")
    config = load_toml(run_dir / "config.toml", saved=True)
    vocab = Vocabulary.load(run_dir / "vocab.txt")
    model = build_model(config.model, len(vocab), config.output)
    load_weights(model, run_dir / "model.safetensors", {"model": config.model.name, "vocab": vocab.fingerprint()})
    model.to("cpu" if model.count_based else device).eval()
    return Run(run_dir, config, vocab, model)

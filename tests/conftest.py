import os
from pathlib import Path

import pytest
import torch

from ctxlm.config import Config

DATA_DIR = os.environ.get("CTXLM_DATA_DIR", "")

WORDS = "the cat sat on a mat while dog ran to big red house and small bird flew over".split()


def write_corpus(folder: Path, lines_per_split=(60, 12, 12), seed=0) -> dict[str, str]:
    """A small synthetic corpus with some structure, as train/valid/test files."""
    generator = torch.Generator().manual_seed(seed)
    paths = {}
    for split, count in zip(("train", "valid", "test"), lines_per_split):
        lines = []
        for _ in range(count):
            length = int(torch.randint(3, 12, (1,), generator=generator))
            ids = torch.randint(0, len(WORDS), (length,), generator=generator).tolist()
            lines.append(" ".join(WORDS[i] for i in ids))
        path = folder / f"{split}.txt"
        path.write_text("\n".join(lines) + "\n")
        paths[split] = str(path)
    return paths


def tiny_config(paths: dict[str, str], **model) -> Config:
    config = Config()
    config.data.dataset = "files"
    config.data.train, config.data.valid, config.data.test = paths["train"], paths["valid"], paths["test"]
    config.data.batch_size, config.data.bptt, config.data.eval_chunk = 4, 7, 50
    config.model.emb_size, config.model.hidden_size = 16, 16
    config.model.dropout = 0.1
    for key, value in model.items():
        setattr(config.model, key, value)
    config.train.epochs, config.train.checkpoint_every = 2, 0
    config.train.device = "cpu"
    return config


@pytest.fixture
def corpus(tmp_path):
    return write_corpus(tmp_path)


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path):
    """Tests never download: no network, and a private cache folder."""
    monkeypatch.setenv("CTXLM_OFFLINE", "1")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def needs_data(*relative):
    missing = not DATA_DIR or not all((Path(DATA_DIR) / r).exists() for r in relative)
    return pytest.mark.skipif(missing, reason=f"needs {', '.join(relative)} under $CTXLM_DATA_DIR")


torch.set_num_threads(1)   # tiny models: one thread is fastest and stable next to other jobs

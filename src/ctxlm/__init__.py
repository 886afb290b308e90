"""ctxlm: word-level language models that look back at their context."""
from importlib.metadata import PackageNotFoundError, version

from .config import Config, load_toml
from .data.vocab import Vocabulary
from .errors import CtxlmError
from .evaluation import evaluate_sentences, evaluate_stream
from .models import build_model
from .run import Run, load
from .training import launch
from .training.trainer import Trainer

try:
    __version__ = version("ctxlm")
except PackageNotFoundError:        # a source tree on PYTHONPATH, not pip-installed (a borrowed GPU machine)
    __version__ = "0+source"


def train(config: Config, run_dir, data_dir=None, resume: bool = False) -> dict:
    """Train (or resume) a run directory and return its results (valid/test perplexity of the best epoch);
    a count-based family (Kneser-Ney) is estimated from counts instead, in seconds."""
    return launch.train(config, run_dir, data_dir, resume)


evaluate = evaluate_stream

__all__ = ["Config", "CtxlmError", "Run", "Trainer", "Vocabulary", "build_model", "evaluate", "evaluate_sentences",
           "evaluate_stream", "load", "load_toml", "train"]

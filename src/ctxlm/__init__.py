"""ctxlm: word-level language models that look back at their context.

The public API is imported on first use (PEP 562), so that `import ctxlm` — and the `ctxlm` command, which
imports this package first — does not load PyTorch before the command can answer Ctrl-C in one line.
"""
from importlib import import_module

# name: the module that defines it
API = {"Config": "config", "load_toml": "config", "Vocabulary": "data.vocab", "CtxlmError": "errors",
       "evaluate_sentences": "evaluation", "evaluate_stream": "evaluation", "build_model": "models", "Run": "run",
       "load": "run", "Trainer": "training.trainer", "Scored": "run",
       "Continued": "run", "TextRecipe": "data.text", "CacheSettings": "models.cache",
       "DynamicSetting": "evaluation.dynamic"}
NEEDS_FAMILIES = {"Config", "load_toml"}      # a config checks model names and options against the registered families


def __getattr__(name: str):
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = version("ctxlm")
        except PackageNotFoundError:        # a source tree on PYTHONPATH, not pip-installed (a borrowed GPU machine)
            found = "0+source"
        globals()["__version__"] = found
        return found
    if name == "evaluate":
        return __getattr__("evaluate_stream")
    if name in API:
        if name in NEEDS_FAMILIES:
            import_module(f"{__name__}.models")         # registers every family (config sits below the models)
        value = getattr(import_module(f"{__name__}.{API[name]}"), name)
    else:
        try:
            value = import_module(f"{__name__}.{name}")       # a submodule: `import ctxlm; ctxlm.io`
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":          # a missing dependency of a submodule that exists
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    globals()[name] = value
    return value


def __dir__():
    return sorted({*globals(), *__all__})


def train(config, run_dir, data_dir=None, resume: bool = False) -> dict:
    """Train (or resume) a run directory and return its results (valid/test perplexity of the best epoch);
    a count-based family (Kneser-Ney) is estimated from counts instead, in seconds.

    `config`: a `Config`, or the path of a TOML preset (`load_toml`); None with `resume` (the run's own)."""
    from os import PathLike

    from .errors import CtxlmError
    from .training import launch

    if isinstance(config, (str, PathLike)):
        config = __getattr__("load_toml")(config)
    elif config is not None and not isinstance(config, __getattr__("Config")):
        raise CtxlmError(f"train: config is of type {type(config).__name__}; give a ctxlm.Config or the path of a TOML preset")
    return launch.train(config, run_dir, data_dir, resume)


__all__ = ["CacheSettings", "Config", "Continued", "CtxlmError", "DynamicSetting", "Run", "Scored", "TextRecipe", "Trainer",
           "Vocabulary", "build_model", "evaluate", "evaluate_sentences", "evaluate_stream", "load", "load_toml", "train"]

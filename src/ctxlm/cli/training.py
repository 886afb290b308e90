"""`ctxlm train`: train a preset into a run directory, or continue one."""
from __future__ import annotations

import signal
from pathlib import Path

from ..checks import MEMORY_SIZE, option
from ..errors import CtxlmError, Terminated
from .common import data_dir_option, match_params_option, set_option


def add_train(sub) -> None:
    p = sub.add_parser("train", help="train a model (from a preset) into a run directory",
                       description="Train a model from a preset, or continue a run. Example: ctxlm train --config "
                                   "configs/daniluk/ptb-lstm.toml")
    p.add_argument("--config", help="TOML preset (see configs/); defaults apply where it is silent (without a preset: "
                   "the defaults with --set on top)")
    set_option(p, "override one setting, e.g. --set train.epochs=3")
    p.add_argument("--run-dir", help="where to write the run (default runs/<preset file name>, or runs/<model.name> without "
                   "--config); must be new or empty")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue an interrupted run exactly where it stopped; "
                   "--set train.KEY=VALUE changes its [train] settings from there on (kept in its config.toml; "
                   "docs/reliability.md lists what cannot change; a kneser-ney run takes --memory and model.tmp_dir too)")
    p.add_argument("--allow-changed-data", action="store_true", help="with --resume: go on although the corpus "
                   "changed since the run recorded its fingerprint (refused otherwise)")
    p.add_argument("--memory", metavar="SIZE", type=option(str, MEMORY_SIZE),
                   help="kneser-ney: estimate in about this much working memory, e.g. 2G, counting on disk in sorted runs "
                        "(the same model, bit for bit; = --set model.memory_budget=SIZE; model.tmp_dir says where the runs go)")
    match_params_option(p)
    data_dir_option(p)
    p.set_defaults(func=cmd_train)


def cmd_train(args) -> int:
    from ..training.distributed import main_process
    from ..training.launch import train
    from .common import config_from_args

    if not (args.config or args.resume or args.set):
        raise CtxlmError("nothing to train: give --config PRESET (a preset file of configs/, e.g. --config "
                         "configs/daniluk/ptb-lstm.toml) or --resume RUN_DIR (a run to continue)")
    if args.resume:
        if args.config or args.match_params or args.run_dir:
            raise CtxlmError("--resume continues a run with its own config.toml in its own folder; only --set train.KEY=VALUE may change it")
        config, run_dir = None, args.resume
        if args.memory:
            from ..training.rundir import RunDir

            counted(RunDir(run_dir).saved_config(), args.memory)
            args.set = [*(args.set or []), f"model.memory_budget={args.memory}"]
    else:
        if args.allow_changed_data:
            raise CtxlmError("--allow-changed-data goes with --resume RUN_DIR (a new run records its data)")
        config = config_from_args(args)
        if args.memory:
            counted(config, args.memory).model.options.memory_budget = args.memory
        run_dir = args.run_dir or Path("runs") / (Path(args.config).stem if args.config else config.model.name)
    try:
        results = train(config, run_dir, args.data_dir, resume=bool(args.resume), allow_changed_data=args.allow_changed_data,
                        overrides=args.set if args.resume else None)
    except KeyboardInterrupt as stop:
        if not getattr(stop, "said", False):    # stopped before the trainer could say where its state is
            raise                               # `ctxlm: interrupted` / `terminated`, from cli.main
        return 128 + signal.SIGTERM if isinstance(stop, Terminated) else 130
    if main_process():        # under torchrun, one process reports
        print_table(run_dir, results)
    return 0


def counted(config, memory: str):
    """`config` if its model is estimated from counts (the one kind --memory bounds), else one line saying so."""
    from ..registry import MODELS

    family = MODELS.get(config.model.name) if config is not None else None
    if family is not None and not family.count_based:
        raise CtxlmError(f"--memory {memory}: only a count-based model (kneser-ney) counts in a memory budget; "
                         f"{config.model.name} trains by gradient steps: leave --memory out")
    return config


def print_table(run_dir, results) -> None:
    from ..config import load_toml
    from ..registry import MODELS

    trained = (f"estimated from counts in {results['train_wall_s']:.0f} s" if "ngrams" in results     # count-based: no epochs
               else f"best epoch {results['best_epoch']}, {results['train_wall_s']:.0f} s training")
    if results.get("max_batches"):         # epochs cut short: the tokens trained on, not the corpus's
        tokens = (f", trained on {results['trained_tokens']:,} tokens of a {results['train_tokens']:,}-token corpus "
                  f"(train.max_batches = {results['max_batches']:,} an epoch)")
    else:
        tokens = f", {results['train_tokens']:,} training tokens" if "train_tokens" in results else ""
    print(f"\nrun {run_dir} ({trained}{tokens}" + (f", vocabulary {results['vocabulary']:,})" if "vocabulary" in results else ")"))
    both_sides = not MODELS[load_toml(Path(run_dir) / "config.toml", saved=True).model.name].left_to_right
    label, width = ("pseudo-perplexity", 19) if both_sides else ("perplexity", 12)
    print(f"{'split':<8}{'tokens':>10}{label:>{width}}")
    for split in ("valid", "test"):
        if split in results:
            print(f"{split:<8}{results[split]['tokens']:>10,}{results[split]['ppl']:>{width}.2f}")
    if both_sides:
        print("(each word scored from the words before and after it, so not a perplexity; `ctxlm complete` uses such models)")

"""The `ctxlm` command. Each module holds a group of subcommands, each command's parser beside its
handler: training (train), evaluation (eval, tune-cache, lambada, complete), data (prepare, names,
datasets), dynamic (tune-dynamic), scoring (score, generate, explore), models (info, start-state, export-arpa, import-arpa, export-onnx, models),
analysis (attention, analyze), curves, harness (harness, lambada-task), rescore and reproduce; common holds the options they share.

Only the standard library is imported before `main` runs: the subcommands (and PyTorch) are imported inside
it, where Ctrl-C and SIGTERM end the command with one line at any point, start-up included."""
from __future__ import annotations

import os
import signal
import sys
import threading

from ..errors import CtxlmError, Terminated


def commands():
    """Each subcommand's `add` function, in the order `ctxlm --help` lists them."""
    from . import analysis, curves, data, dynamic, evaluation, harness, models, reproduce, rescore, scoring, training

    return (training.add_train, evaluation.add_eval, evaluation.add_lambada, harness.add_harness, harness.add_lambada_task, rescore.add_rescore,
            data.add_prepare, evaluation.add_complete, data.add_names, evaluation.add_tune_cache, dynamic.add_tune_dynamic, scoring.add_score,
            scoring.add_generate, models.add_info, models.add_start_state, models.add_export_arpa, models.add_import_arpa, models.add_export_onnx, scoring.add_explore,
            analysis.add_attention, analysis.add_analyze, curves.add_curves, reproduce.add_reproduce, data.add_datasets, models.add_models)


def build_parser():
    from .common import Parser

    parser = Parser(prog="ctxlm", description="Word-level language models that look back at their context.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for add in commands():
        add(sub)
    return parser


def _terminate(signum, frame):
    raise Terminated()


def _dataset_files(name: str, data_dir) -> list:
    """A named corpus's files (imported here: only a command that loads a run asks, and it imports torch anyway)."""
    from ..data.registry import dataset_files

    return dataset_files(name, data_dir)


def main(argv=None) -> int:
    from ..allocator import keep_freed_memory

    keep_freed_memory()
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminate) if main_thread else None
    try:
        from ..outputs import check_outputs
        from .common import check_switched

        args = build_parser().parse_args(argv)
        check_outputs(args, _dataset_files)
        check_switched(args)
        return args.func(args)
    except BrokenPipeError:                 # the reader has gone (`ctxlm score RUN | head`): stop quietly, as a pipe's writer does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())     # nothing more to flush at exit
        return 141                          # 128 + SIGPIPE: the status of a writer the closed pipe stopped
    except (CtxlmError, OSError) as exc:     # OSError: a file we were told to read or write (missing, no permission, disk full)
        print("ctxlm: error: " + " ".join(str(exc).split("\n")), file=sys.stderr)
        return 2
    except Terminated:
        print("ctxlm: terminated", file=sys.stderr)
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        print("ctxlm: interrupted", file=sys.stderr)
        return 130
    finally:
        if main_thread and previous is not None:
            signal.signal(signal.SIGTERM, previous)

"""The `ctxlm` command. Each module holds a group of subcommands, each command's parser beside its
handler: training (train), evaluation (eval, tune-cache, lambada, complete), data (prepare, names,
datasets), dynamic (tune-dynamic), scoring (score, generate, explore), models (info, start-state, export-arpa, import-arpa, export-onnx, models),
analysis (attention, analyze, curves), harness (harness, lambada-task), rescore and reproduce; common holds the options they share."""
from __future__ import annotations

import os
import sys

from ..errors import CtxlmError
from . import analysis, data, dynamic, evaluation, harness, models, reproduce, rescore, scoring, training
from .common import Parser, check_switched

# in the order `ctxlm --help` lists them
COMMANDS = (training.add_train, evaluation.add_eval, evaluation.add_lambada, harness.add_harness, harness.add_lambada_task, rescore.add_rescore, data.add_prepare, evaluation.add_complete,
            data.add_names, evaluation.add_tune_cache, dynamic.add_tune_dynamic, scoring.add_score, scoring.add_generate, models.add_info,
            models.add_start_state, models.add_export_arpa, models.add_import_arpa, models.add_export_onnx, scoring.add_explore, analysis.add_attention,
            analysis.add_analyze, analysis.add_curves, reproduce.add_reproduce, data.add_datasets, models.add_models)


def build_parser() -> Parser:
    parser = Parser(prog="ctxlm", description="Word-level language models that look back at their context.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for add in COMMANDS:
        add(sub)
    return parser


def main(argv=None) -> int:
    from ..outputs import check_outputs

    args = build_parser().parse_args(argv)
    try:
        check_outputs(args)
        check_switched(args)
        return args.func(args)
    except BrokenPipeError:                 # the reader has gone (`ctxlm score RUN | head`): stop quietly, as a pipe's writer does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())     # nothing more to flush at exit
        return 141                          # 128 + SIGPIPE: the status of a writer the closed pipe stopped
    except (CtxlmError, OSError) as exc:     # OSError: a file we were told to read or write (missing, no permission, disk full)
        print("ctxlm: error: " + " ".join(str(exc).split("\n")), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("ctxlm: interrupted", file=sys.stderr)
        return 130

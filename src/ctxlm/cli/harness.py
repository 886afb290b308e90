"""A run in other people's evaluations: `harness` (lm-evaluation-harness tasks, docs/harness.md) and
`lambada-task` (the LAMBADA file as the harness's local task)."""
from __future__ import annotations

from ..checks import at_least, option, rule_option
from ..errors import CtxlmError
from ..io import atomic_write_text
from ..jsonio import json_text
from .common import data_dir_option, json_option, out_file_option, pretokenized_option, run_argument

INSTALL = "pip install 'ctxlm[harness]' (or pip install lm-eval)"


def harness_module():
    """ctxlm.harness, or a one-line error saying how to install lm-eval."""
    try:
        from ..harness import model as harness
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] != "lm_eval":
            raise
        raise CtxlmError(f"this command runs lm-evaluation-harness, which is not installed here: {INSTALL}") from None
    return harness


def add_harness(sub) -> None:
    p = sub.add_parser("harness", help="lm-evaluation-harness tasks (loglikelihood ones) on a run",
                       description="Runs lm-evaluation-harness (`lm-eval`) tasks with the run as its model `ctxlm`: "
                                   "requests are tokenised by the run's text recipe into its words (docs/harness.md). "
                                   "Generation tasks are refused. Needs " + INSTALL + ".")
    run_argument(p)
    p.add_argument("--tasks", required=True, help="comma-separated task, group or tag names (the harness's own, or "
                   "ones in --include-path, e.g. from `ctxlm lambada-task`)")
    p.add_argument("--include-path", help="a folder of task YAML files to add to the harness's own tasks")
    p.add_argument("--only-include-path", action="store_true", help="look for the tasks in --include-path only, not "
                   "among the harness's own (indexing its 14,000 tasks takes most of a minute)")
    p.add_argument("--limit", type=option(int, at_least(1)), help="only the first N documents of each task")
    p.add_argument("--num-fewshot", type=rule_option("harness.num_fewshot"), help="few-shot examples per prompt (default: "
                   "the task's, else 0; a task whose YAML sets num_fewshot: 0 keeps 0, as lm-eval does)")
    p.add_argument("--greedy", choices=["token", "word"], default="token",
                   help="acc counts a continuation when each of its tokens is the likeliest token (token, the harness's "
                        "definition, default) or the likeliest word, <unk>, <eos> and punctuation passed over "
                        "(word, `ctxlm lambada`'s accuracy)")
    p.add_argument("--bootstrap-iters", type=option(int, at_least(0)), default=1000,
                   help="bootstrap samples for the standard errors (default 1000; 0: none)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="cpu",
                   help="where the model scores (default cpu; auto: a GPU when there is one)")
    pretokenized_option(p, "each request")
    out_file_option(p, "harness.json", "the harness's results, JSON")
    p.add_argument("--cache", action="store_true", help="add the neural cache with the settings `ctxlm tune-cache` "
                   "recorded in the run (else the defaults; a record of a tuning that helped nothing is refused)")
    p.add_argument("--dynamic", action="store_true", help="score with dynamic evaluation, each request from the trained "
                   "weights, with the setting `ctxlm tune-dynamic` recorded (else the defaults; the rms rule reads the "
                   "run's training split from --data-dir)")
    json_option(p, "print the results as JSON")
    data_dir_option(p)
    p.set_defaults(func=cmd_harness)


def cmd_harness(args) -> int:
    from ..run import load
    from ..training.preflight import pick_device

    if args.only_include_path and not args.include_path:
        raise CtxlmError("--only-include-path: give --include-path DIR too (the folder of task YAML files to use)")
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    if not tasks:
        raise CtxlmError(f"--tasks {args.tasks!r}: no task named; give e.g. --tasks lambada_local")
    harness = harness_module()
    run = load(args.run, pick_device(args.device, "--device"), data_dir=args.data_dir)
    run = run.with_dynamic(data_dir=args.data_dir) if args.dynamic else run
    run = run.with_cache() if args.cache else run
    results = harness.evaluate(run, tasks, args.include_path, args.limit, args.num_fewshot, args.bootstrap_iters,
                               not args.only_include_path, greedy=args.greedy, device=args.device, pretokenized=args.pretokenized)
    results.update(run=str(args.run), tasks=tasks, greedy=args.greedy, cache=args.cache, limit=args.limit,
                   dynamic=vars(run.dynamic.setting) if run.dynamic else None)
    atomic_write_text(args.out, json_text(results, indent=1) + "\n")
    if args.json:
        print(json_text(results, indent=2))
        return 0
    print(f"{'task':<24}{'metric':<20}{'value':>12}{'stderr':>12}{'documents':>11}")
    for task, figures in results["results"].items():
        count = results.get("n-samples", {}).get(task, {}).get("effective", "")
        for key, value in figures.items():
            metric, _, _ = key.partition(",")
            if metric in ("alias", "name", "sample_len") or metric.endswith("_stderr") or not isinstance(value, (int, float)):
                continue
            stderr = figures.get(key.replace(",", "_stderr,", 1))
            shown = f"{stderr:12.4f}" if isinstance(stderr, (int, float)) else f"{'':>12}"
            print(f"{task:<24}{metric:<20}{value:12.4f}{shown}{count:>11}")
    print(f"results: {args.out}")
    return 0


def add_lambada_task(sub) -> None:
    p = sub.add_parser("lambada-task", help="a LAMBADA passage file as a local lm-evaluation-harness task",
                       description="Writes OUT/NAME.jsonl (one {\"text\": passage} a line) and OUT/NAME.yaml, a harness task "
                                   "defined as the harness's lambada_standard / lambada_openai (context: the passage "
                                   "without its last word; target: the last word; metrics perplexity and acc). Run it "
                                   "with `ctxlm harness RUN --tasks NAME --include-path OUT` or lm-eval's --include_path.")
    p.add_argument("file", help="passages in LAMBADA's format, e.g. $CTXLM_DATA_DIR/lambada/lambada_development_plain_text.txt")
    p.add_argument("--out", metavar="FOLDER", required=True, help="folder for the task's two files, made if need be")
    p.add_argument("--name", default="lambada_local", help="the task's name (default lambada_local)")
    p.set_defaults(func=cmd_lambada_task)


def cmd_lambada_task(args) -> int:
    import re

    from ..data.corpus import read_lambada
    from ..harness.tasks import write_lambada_task

    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", args.name):
        raise CtxlmError(f"--name {args.name!r}: a task name is letters, digits, '_', '.' and '-', e.g. lambada_local")
    passages = read_lambada(args.file)
    task = write_lambada_task(passages, args.out, args.name)
    print(f"{len(passages):,} passages -> {task} (run: ctxlm harness RUN --tasks {args.name} --include-path {args.out})")
    return 0

"""Dynamic evaluation from the command line: `eval --dynamic` (its options and scoring) and `tune-dynamic`,
which chooses the rule's numbers on validation and records them in RUN/dynamic.json for `eval --dynamic`."""
from __future__ import annotations

import itertools
import math

from ..checks import at_least, edge_note, grid_edges, option, rule_option
from ..errors import CtxlmError
from ..evaluation.dynamic import DynamicSetting
from ..io import warn
from ..jsonio import json_text
from ..training.rundir import RunDir, git_commit
from .common import (
    check_split_files,
    comma_values,
    data_dir_option,
    left_to_right,
    neural_only,
    note_if_tuned_on_other_weights,
    note_read_as_stream,
    ppl_text,
    print_perplexities,
    replace_tuning_record,
    run_argument,
    split_data,
    with_cache,
)

STEPS = "dynamic evaluation takes gradient steps on a neural model's weights"


def dynamic_options(p, items: str = "") -> None:
    group = p.add_argument_group("dynamic evaluation (Krause et al. 2018): each segment, once scored, is a gradient "
                                 "step that adapts the weights to the text, decaying back to the trained ones; the run "
                                 "is never changed. The numbers: RUN/dynamic.json from `ctxlm tune-dynamic` (a record of a "
                                 "tuning that helped nothing is refused unless all four options below are given), "
                                 "else untuned defaults; the options below override either")
    group.add_argument("--dynamic", action="store_true", help="score with dynamic evaluation "
                       f"({items or 'read as one stream'})")
    group.add_argument("--dynamic-rule", choices=["rms", "sgd"], help="rms: steps divided by the training gradients' "
                       "RMS (√MS + 2e-5), measured first on 400 training mini-batches (default); sgd: plain steps (docs/dynamic.md)")
    group.add_argument("--dynamic-lr", type=rule_option("dynamic.lr"), help=f"step size η (default {DynamicSetting.lr})")
    group.add_argument("--dynamic-decay", type=rule_option("dynamic.decay"),
                       help="λ, the decay back to the trained weights per step: sgd pulls every weight by λ; rms by "
                            "min(1, λ·√MS/mean √MS), more for weights with larger training gradients (docs/dynamic.md; "
                            f"default {DynamicSetting.decay})")
    group.add_argument("--dynamic-segment", type=rule_option("dynamic.segment"),
                       help=f"tokens per step (default {DynamicSetting.segment})")


def chosen_setting(run, args) -> DynamicSetting:
    """RUN/dynamic.json's best setting (or the defaults), with the command line's options on top; all four given,
    the record is not read (it may hold no choice)."""
    given = {key: getattr(args, f"dynamic_{key}") for key in ("rule", "lr", "decay", "segment")}
    if None not in given.values():
        return DynamicSetting(**given)
    record = RunDir(run.path).dynamic
    setting = DynamicSetting.read(record)
    if setting is not None:
        note_if_tuned_on_other_weights(record, run, "tune-dynamic")
    setting = setting or DynamicSetting()
    for key in ("rule", "lr", "decay", "segment"):
        given = getattr(args, f"dynamic_{key}")
        if given is not None:
            setattr(setting, key, given)
    return setting


def with_dynamic(run, args, data=None, setting: DynamicSetting | None = None):
    """The run as it is, or with --dynamic: scoring with the chosen setting (`setting`, else `chosen_setting`; the
    rms rule measures the training gradients first, on `data`'s train split or the run's own)."""
    if not args.dynamic:
        return run
    neural_only(run, "--dynamic", STEPS)
    setting = setting or chosen_setting(run, args)
    train = None
    if setting.rule == "rms":
        check_split_files(run, "train")
        train = (data or split_data(run, args, "train")).ids["train"]
    return run.with_dynamic(setting, train)


def eval_dynamic(run, args) -> int:
    """`eval --dynamic` (with --cache too): each split (or --file) as one stream, batch 1, weights adapted
    segment by segment."""
    from ..data.vocab import EOS
    from ..evaluation.perplexity import evaluate_dynamic, unknown_targets

    if args.names or args.precision != "fp32":
        raise CtxlmError("--dynamic goes without --names and --precision: drop them")
    if args.batch_size is not None or args.chunk is not None:
        raise CtxlmError("--dynamic reads one stream in segments of --dynamic-segment tokens: drop --batch-size and --chunk")
    note_read_as_stream(run, "--dynamic", f"compare with `ctxlm eval {run.path} --dynamic --dynamic-lr 0`")
    setting = chosen_setting(run, args)
    needs_corpus = not args.file or setting.rule == "rms"          # sgd on a file: no corpus
    data = split_data(run, args, *(args.split or [])) if needs_corpus else None
    run = with_dynamic(run, args, data, setting)
    model, cache = with_cache(run, args)
    texts = ({args.file: run.vocab.encode([EOS, *run.file_tokens(args.file, args.pretokenized)])} if args.file else
             {split: data.ids[split] for split in args.split or [s for s in ("valid", "test") if s in data.ids]})
    results = {name: {**evaluate_dynamic(model, ids, run.dynamic, f"eval {name} (dynamic)"), "unknown": unknown_targets(ids, run.vocab),
                      "dynamic": vars(setting)} for name, ids in texts.items()}
    if cache is not None:
        for r in results.values():
            r["cache"] = {"window": cache.window, "theta": cache.theta, "lambda": cache.lam}
    if args.json:
        print(json_text(results, indent=2))
        return 0
    print(f"dynamic evaluation: rule {setting.rule}, lr {setting.lr}, decay {setting.decay}, segment {setting.segment}")
    if cache is not None:
        print(f"with the neural cache: window {cache.window}, theta {cache.theta}, lambda {cache.lam}")
    print_perplexities(results)
    return 0


def add_tune_dynamic(sub) -> None:
    p = sub.add_parser("tune-dynamic", help="choose dynamic evaluation's rule, step size, decay and segment on validation",
                       description="Grid search of dynamic evaluation (Krause et al. 2018) around a trained run, on its "
                                   "validation split (one full pass per setting); writes RUN/dynamic.json, which "
                                   "`ctxlm eval RUN --dynamic` then uses.")
    run_argument(p, "run directory of a neural model")
    p.add_argument("--split", default="valid", choices=["valid", "train"],
                   help="split to tune on (never test; default %(default)s)")
    p.add_argument("--rules", default="rms", help="rules to try: rms, sgd or rms,sgd (default %(default)s)")
    p.add_argument("--lrs", default="0.00002,0.00004,0.00006", help="step sizes η to try (comma-separated; the defaults "
                   "bracket the best on the ptb-lstm preset, docs/results.md: %(default)s)")
    p.add_argument("--decays", default="0.001,0.005,0.02", help="decays λ to try (comma-separated; default %(default)s)")
    p.add_argument("--segments", default="10", help="segment lengths to try (comma-separated; default %(default)s)")
    p.add_argument("--tokens", type=option(int, at_least(1)), help="tune on the split's first N tokens only (default: all; "
                   "one pass per setting costs about 3 backward passes per token)")
    data_dir_option(p)
    p.set_defaults(func=cmd_tune_dynamic)


def cmd_tune_dynamic(args) -> int:
    from ..evaluation.dynamic import Diverged, DynamicWeights, keep_mean_squares, stored_mean_squares
    from ..evaluation.perplexity import evaluate_dynamic, evaluate_stream
    from ..run import load

    rules, lrs, decays, segments = (comma_values("--rules", args.rules, str), comma_values("--lrs", args.lrs, "dynamic.lr"),
                                    comma_values("--decays", args.decays, "dynamic.decay"),
                                    comma_values("--segments", args.segments, "dynamic.segment"))
    if set(rules) - {"rms", "sgd"}:
        raise CtxlmError(f"--rules {args.rules!r}: the rules are rms and sgd (comma-separated)")
    run = load(args.run, start=False)
    neural_only(run, "tune-dynamic", STEPS)
    left_to_right(run, "tune-dynamic")
    note_read_as_stream(run, "tune-dynamic", "its perplexity without steps is that stream's, not `ctxlm eval`'s")
    data = split_data(run, args, args.split, "train")
    ids = data.ids[args.split][:args.tokens + 1 if args.tokens else None]
    plain = evaluate_stream(run.model, ids, 1, run.config.data.eval_chunk, desc=f"tune-dynamic: {args.split} without steps")["ppl"]
    count = len(rules) * len(lrs) * len(decays) * len(segments)
    print(f"{args.split} ({ids.numel() - 1:,} token{'s' * (ids.numel() != 2)}) perplexity without steps {plain:.2f}; {count} settings", flush=True)
    grid, passes = [], {}
    for segment in segments:
        mean_square = passes[segment] = (stored_mean_squares(run.path, run.model, data.ids["train"], segment,
                                                             run.weights_sha256) if "rms" in rules else None)
        for rule, lr, decay in itertools.product(rules, lrs, decays):
            setting = DynamicSetting(rule, lr, decay, segment)
            weights = DynamicWeights(run.model, setting, mean_square if rule == "rms" else None)
            try:
                ppl = evaluate_dynamic(run.model, ids, weights, f"tune-dynamic: setting {len(grid) + 1} of {count}")["ppl"]
            except Diverged:
                ppl = math.inf                      # recorded as null: this setting diverged
            finally:
                weights.restore()
            grid.append({**vars(setting), "ppl": ppl})
            print(f"  rule {rule}, lr {lr}, decay {decay}, segment {segment}: {shown_ppl(ppl)}", flush=True)
    best = min(grid, key=lambda r: math.inf if math.isnan(r["ppl"]) else r["ppl"])      # NaN: diverged
    record = RunDir(run.path).dynamic
    helped = best["ppl"] < plain and best["lr"] > 0         # steps of size 0 change no weight: no gain but float noise
    replaced = replace_tuning_record(record, {"split": args.split, "tokens": ids.numel() - 1, "model_ppl": plain,
                                              "best": best if helped else None, "grid": grid, "commit": git_commit(),
                                              "weights": run.weights_sha256})
    if helped and best["rule"] == "rms":
        keep_mean_squares(run.path, passes[best["segment"]], data.ids["train"], best["segment"], run.weights_sha256)
    if not helped:
        print(f"no setting lowered {args.split} perplexity {plain:.2f} (best {shown_ppl(best['ppl'])}); recorded in {record} "
              "without a choice, so `eval --dynamic` asks for one: try smaller non-zero --lrs")
    else:
        print(f"best: {best['ppl']:.2f} ({100 * (1 - best['ppl'] / plain):.1f}% lower) with rule {best['rule']}, "
              f"lr {best['lr']}, decay {best['decay']}, segment {best['segment']}; recorded in {record} "
              f"(used by `ctxlm eval {args.run} --dynamic`)")
        edges = grid_edges(best, {"lr": (lrs, "step size", "low high"),
                                  "decay": (decays, "decay", ("low" if min(decays) > 0 else "") + (" high" if max(decays) < 1 else "")),
                                  "segment": (segments, "segment", "low high" if min(segments) > 1 else "high")})
        if edges:
            warn(edge_note(edges, "--lrs, --decays, --segments"))
    if replaced:
        warn(replaced)
    return 0


def shown_ppl(ppl: float) -> str:
    """A tried setting's perplexity as printed: "diverged" (recorded as null), or two decimals up to 10⁹."""
    return "diverged" if not math.isfinite(ppl) else ppl_text(ppl)

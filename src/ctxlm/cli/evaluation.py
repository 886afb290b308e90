"""Evaluation commands: `eval` (perplexity, also with the neural cache or mixed with another run),
`tune-cache`, `lambada` and `complete`."""
from __future__ import annotations

from pathlib import Path

from ..checks import at_least, edge_note, grid_edges, in_range, option
from ..errors import CtxlmError
from ..io import atomic_write_text, warn
from ..jsonio import json_text
from ..outputs import check_output
from .common import (
    SPLITS,
    cache_options,
    check_split_files,
    comma_values,
    data_dir_option,
    json_option,
    left_to_right,
    name_words,
    names_in_vocabulary,
    names_option,
    neural_only,
    note_read_as_stream,
    out_file_option,
    ppl_text,
    pretokenized_option,
    print_perplexities,
    replace_tuning_record,
    run_argument,
    split_data,
    with_cache,
)
from .dynamic import dynamic_options, eval_dynamic, with_dynamic


def add_eval(sub) -> None:
    p = sub.add_parser("eval", help="perplexity of a trained run on its dataset's splits or on a file",
                       description="Perplexity = exp(total NLL / tokens), every <eos> and <unk> counted (SPEC §0.2). "
                                   "Stream evaluation uses batch size 1 in chunks of 1,000 tokens unless told otherwise.")
    run_argument(p)
    what = p.add_mutually_exclusive_group()
    what.add_argument("--split", action="append", choices=SPLITS, help="split to evaluate; repeat for several, e.g. "
                      "--split valid --split test (default: valid and test, those the dataset has)")
    what.add_argument("--file", help="evaluate a text file (one sentence per line, tokenised by the run's text recipe; read "
                      "as a stream, or each sentence alone for a run trained on sentences alone) instead")
    pretokenized_option(p, "--file")
    p.add_argument("--batch-size", type=option(int, at_least(1)), help="streams read side by side (default: the run's "
                   "data.eval_batch_size, 1 unless set); a run read a sentence at a time reads data.batch_size "
                   "sentences at once and ignores it")
    p.add_argument("--chunk", type=option(int, at_least(1)), help="tokens per forward pass of stream evaluation "
                   "(default: the run's data.eval_chunk, 1000 unless set); the result is the same for any")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                   help="fp32 (default, exact) or bf16 autocast (faster on bf16 hardware, approximate, reported as such)")
    cache_options(p)
    names_option(p, "also the perplexity of the name targets only (SPEC §1.19): a file of name words, one per line, "
                 "e.g. from `ctxlm names`")
    p.add_argument("--mix", metavar="OTHER_RUN", help="also evaluate the mixture (1 - λ) p_RUN + λ p_OTHER (same dataset "
                   "and vocabulary, e.g. a feed-forward run with a Kneser-Ney trigram as Bengio et al. 2003 mix them)")
    p.add_argument("--mix-weight", type=option(float, in_range(0, 1)), help="λ in [0, 1] for --mix (default: chosen by "
                   "maximum likelihood on the valid split)")
    dynamic_options(p)
    json_option(p, "print JSON: per split, the targets (tokens), their summed NLL in nats (nll), the perplexity (ppl) and the "
                "targets scored as <unk> (unknown); the table shows the NLL per token")
    data_dir_option(p)
    p.set_defaults(func=cmd_eval)


def cmd_eval(args) -> int:
    import itertools

    import torch

    from ..data.vocab import EOS
    from ..evaluation import evaluate_file
    from ..evaluation.perplexity import evaluate_split, unknown_targets
    from ..run import load
    from ..training.precision import autocast

    if args.mix_weight is not None and not args.mix:
        raise CtxlmError("--mix-weight is the weight of the run given with --mix; add --mix OTHER_RUN")
    if args.pretokenized and not args.file:
        raise CtxlmError("--pretokenized says how to read --file; the splits are tokens already: add --file FILE or drop it")
    run = load(args.run, start=False)
    left_to_right(run, "ctxlm eval")
    if args.mix:
        return _eval_mixture(run, args)
    names = names_in_vocabulary(args, run) if args.names else None   # up front: fails at once
    if args.precision != "fp32" and run.model.scores_at_once:
        raise CtxlmError(f"--precision {args.precision}: {run.path} is an n-gram model ({run.config.model.name}), whose "
                         "probabilities are looked up, not computed in a precision; drop --precision")
    if args.dynamic:
        return eval_dynamic(run, args)
    model, settings = with_cache(run, args)
    if settings is not None:
        note_read_as_stream(run, "--cache", f"compare with `ctxlm eval {run.path} --cache --cache-lambda 0`")
        run.config.data.batching = "stream"          # the cache spans sentence boundaries (Grave et al.)
    if args.batch_size is not None:
        run.config.data.eval_batch_size = args.batch_size
    if args.chunk is not None:
        run.config.data.eval_chunk = args.chunk
    if names is not None and run.config.data.batching != "sentence" and run.config.data.eval_batch_size > 1:
        raise CtxlmError(f"--names reads the text as one stream, so that the names and all targets come from the same "
                         f"predictions; --batch-size {run.config.data.eval_batch_size} reads it as several: give --batch-size 1")
    results = {}
    with autocast("cpu", args.precision):
        if args.file and names is None:
            results[args.file] = evaluate_file(model, run.vocab, args.file, run.config.data.eval_batch_size,
                                               run.config.data.eval_chunk, recipe=None if args.pretokenized else run.text_recipe(),
                                               desc=f"eval {args.file}", config=run.config)
        elif args.file:                 # the file's ids in memory (8 bytes a token), read a block at a time
            tokens = itertools.chain([EOS], run.file_tokens(args.file, args.pretokenized))
            ids = torch.cat([run.vocab.encode(block) for block in iter(lambda: list(itertools.islice(tokens, 1 << 16)), [])])
            results[args.file] = _with_names(model, run, ids, names, f"eval {args.file}")
        else:
            data = split_data(run, args, *(args.split or []))
            for split in args.split or [s for s in ("valid", "test") if s in data.ids]:     # holmes has no test
                if names is not None:
                    results[split] = _with_names(model, run, data.ids[split], names, f"eval {split}")
                    continue
                results[split] = evaluate_split(model, run.config, data.ids[split], run.vocab, "cpu", f"eval {split}")
                results[split]["unknown"] = unknown_targets(data.ids[split], run.vocab)
    for r in results.values():
        r["precision"] = args.precision
        if settings is not None:
            r["cache"] = {"window": settings.window, "theta": settings.theta, "lambda": settings.lam}
    if args.json:
        print(json_text(results, indent=2))
    else:
        if settings is not None:
            print(f"with the neural cache: window {settings.window}, theta {settings.theta}, lambda {settings.lam}")
        if args.precision != "fp32":
            print(f"evaluated under {args.precision} autocast (approximate; the default fp32 is exact)")
        print_perplexities(results)
    return 0


def _with_names(model, run, ids, names, desc: str) -> dict:
    """`eval`'s row of a text with its names row (SPEC §0.2 rule 6), both from one reading of its targets."""
    from ..checks import safe_exp
    from ..evaluation.names import names_perplexity
    from ..evaluation.perplexity import regime_log_probs, unknown_targets

    log_probs = regime_log_probs(model, run.config, ids, run.vocab, desc)
    nll, count = -float(log_probs.sum()), log_probs.numel()
    return {"nll": nll, "tokens": count, "ppl": safe_exp(nll / count) if count else float("nan"),
            "unknown": unknown_targets(ids, run.vocab), "names": names_perplexity(log_probs, ids, names)}


def _eval_mixture(run, args) -> int:
    """`ctxlm eval RUN --mix OTHER`: p = (1 − λ) p_RUN + λ p_OTHER on the dataset's splits, λ given or
    chosen by maximum likelihood on valid (evaluation/interpolation.py)."""
    from ..data.load import prepare_data
    from ..evaluation.interpolation import best_weight, check_mixable, mixed, perplexity, split_log_probs
    from ..run import load

    given = [option for option, value in (("--file", args.file), ("--cache", args.cache), ("--dynamic", args.dynamic),
                                           ("--names", args.names), ("--batch-size", args.batch_size),
                                           ("--chunk", args.chunk), ("--precision", args.precision != "fp32")) if value]
    if given:
        raise CtxlmError(f"--mix scores the dataset's splits with both runs as trained, in float32; it does not combine "
                         f"with {', '.join(given)}: drop {'it' if len(given) == 1 else 'them'}")
    other = load(args.mix)
    check_mixable(run, other)
    splits = args.split or ["valid", "test"]
    read = list(dict.fromkeys(splits + ([] if args.mix_weight is not None else ["valid"])))   # valid chooses λ
    check_split_files(run, *read)
    data = prepare_data(run.config, args.data_dir, run.vocab)
    for split in read:
        if split not in data.ids:
            raise CtxlmError(f"--split {split}: dataset {run.config.data.dataset!r} has splits {', '.join(data.ids)}"
                             + ("" if split in splits else " (λ is chosen on valid: give --mix-weight)"))
    scores = {}
    for split in read:
        scores[split] = (split_log_probs(run, data.ids[split], f"eval {split}: {args.run}"),
                         split_log_probs(other, data.ids[split], f"eval {split}: {args.mix}"))
    lam = args.mix_weight if args.mix_weight is not None else best_weight(*scores["valid"])
    chosen = "given" if args.mix_weight is not None else "maximum likelihood on valid"
    results = {"lambda": lam, "chosen": chosen, "run": str(args.run), "mix": str(args.mix)}
    for split in splits:
        a, b = scores[split]
        results[split] = {"run": perplexity(a), "mix_run": perplexity(b), "mixture": perplexity(mixed(a, b, lam)),
                          "unknown": int((data.ids[split][1:] == run.vocab.unk).sum())}
    if args.json:
        print(json_text(results, indent=2))
        return 0
    print(f"mixture p = (1 - λ) p_RUN + λ p_MIX with λ = {lam:.4f} ({chosen}); RUN = {args.run}, MIX = {args.mix}")
    print(f"{'split':<12}{'tokens':>10}{'RUN':>12}{'MIX':>12}{'mixture':>12}")
    for split in splits:
        r = results[split]
        print(f"{split:<12}{r['mixture']['tokens']:>10,}" + "".join(f"{ppl_text(r[k]['ppl']):>12}" for k in ("run", "mix_run", "mixture")))
    return 0


def add_tune_cache(sub) -> None:
    p = sub.add_parser("tune-cache", help="choose the neural cache's window, θ and λ on validation data",
                       description="Grid search of the neural cache (Grave et al. 2017) around a trained run, on its "
                                   "validation split; writes RUN/cache.json (used by `ctxlm eval RUN --cache`) and "
                                   "RUN/cache_grid.png.")
    run_argument(p, "run directory of a neural model")
    p.add_argument("--split", default="valid", choices=["valid", "train"],
                   help="split to tune on (never test; default %(default)s)")
    p.add_argument("--windows", default="100,500,1000,2000", help="cache sizes to try (comma-separated; default %(default)s)")
    p.add_argument("--thetas", default="0.05,0.1,0.2,0.3,0.5,0.7,1.0", help="θ values to try (comma-separated; default %(default)s)")
    p.add_argument("--lambdas", default="0.05,0.1,0.15,0.2,0.25,0.3,0.4", help="λ values to try (comma-separated; default %(default)s)")
    data_dir_option(p)
    p.set_defaults(func=cmd_tune_cache)


def cmd_tune_cache(args) -> int:
    import itertools

    from ..analysis.cache import plot_cache_grid
    from ..evaluation.cache import cache_grid
    from ..models.cache import CacheSettings
    from ..run import load
    from ..training.rundir import git_commit

    windows, thetas, lambdas = (comma_values("--windows", args.windows, "cache.window"),
                                comma_values("--thetas", args.thetas, "cache.theta"),
                                comma_values("--lambdas", args.lambdas, "cache.lambda"))
    try:
        for setting in itertools.product(windows, thetas, lambdas):
            CacheSettings(*setting).check()
    except ValueError as exc:
        raise CtxlmError(f"tune-cache: {exc}") from None
    run = load(args.run, start=False)
    neural_only(run, "tune-cache")
    left_to_right(run, "tune-cache")
    data = split_data(run, args, args.split)
    note_read_as_stream(run, "tune-cache", "its perplexity without cache is that stream's, not `ctxlm eval`'s")
    result = cache_grid(run.model, data.ids[args.split], windows, thetas, lambdas, run.config.data.eval_chunk)
    best = result["best"]
    helped = best["ppl"] < result["model_ppl"] and best["lambda"] > 0         # λ = 0 is the model alone: no gain but noise
    result.update(best=best if helped else None, split=args.split, commit=git_commit(), weights=run.weights_sha256)
    record, plot = CacheSettings.record_path(args.run), Path(args.run) / "cache_grid.png"
    replaced = replace_tuning_record(record, result)
    plot_cache_grid(result, plot)
    print(f"{'window':>8}{'theta':>8}{'lambda':>8}{'perplexity':>12}")
    for row in sorted(result["grid"], key=lambda r: r["ppl"])[:10]:
        print(f"{row['window']:>8}{row['theta']:>8}{row['lambda']:>8}{row['ppl']:>12.2f}")
    if not helped:
        print(f"no setting lowered {args.split} perplexity {result['model_ppl']:.2f} (best {best['ppl']:.2f}); recorded in "
              f"{record} without a choice, so `eval --cache` asks for one: try smaller non-zero --lambdas; grid plot {plot}")
    else:
        print(f"{args.split} perplexity without cache {result['model_ppl']:.2f}; best with cache {best['ppl']:.2f} "
              f"({100 * (1 - best['ppl'] / result['model_ppl']):.1f}% lower) at window {best['window']}, "
              f"theta {best['theta']}, lambda {best['lambda']}")
        print(f"recorded in {record} (used by `ctxlm eval {args.run} --cache`); grid plot {plot}")
        edges = grid_edges(best, {"window": (windows, "window", "low high"), "theta": (thetas, "θ", "low high"),
                                  "lambda": (lambdas, "λ", "low high")})
        if edges:
            warn(edge_note(edges, "--windows, --thetas, --lambdas"))
    if replaced:
        warn(replaced)
    return 0


def add_lambada(sub) -> None:
    p = sub.add_parser("lambada", help="LAMBADA: last-word accuracy and perplexities of a run on a passage file",
                       description="Scores a file in LAMBADA's format (one tokenised passage per line; the target is the "
                                   "last word): last-word accuracy, target-word and whole-passage perplexity, the "
                                   "trivial baselines, and with --names the names subset. Conventions: docs/lambada.md.")
    run_argument(p)
    p.add_argument("file", nargs="?", help="passages (default: the LAMBADA development set of the data folder, "
                   "lambada/lambada_development_plain_text.txt)")
    names_option(p, "capitalised-in-training words, one per line (`ctxlm names` writes one)")
    p.add_argument("--top", type=option(int, at_least(1)), default=5, help="predictions kept per passage in the JSON (default 5)")
    out_file_option(p, "lambada.jsonl", "per-passage results, JSON lines")
    cache_options(p)
    dynamic_options(p, "each passage from the trained weights")
    json_option(p, "print the summary as JSON")
    data_dir_option(p)
    p.set_defaults(func=cmd_lambada)


def cmd_lambada(args) -> int:
    from ..data.corpus import read_lambada
    from ..data.registry import locate
    from ..evaluation.lambada import score_passages
    from ..io import Progress
    from ..run import load

    if args.file is None:
        args.file = str(locate("lambada", "test", args.data_dir))
        check_output(args.out, "--out", [args.file])         # the default passages, as a given file is checked
    passages = read_lambada(args.file)
    run = with_dynamic(load(args.run, data_dir=args.data_dir), args)
    model, _ = with_cache(run, args)
    names = frozenset(name_words(args.names, run, args.data_dir)) if args.names else frozenset()
    if names:
        names_in_vocabulary(args, run, sorted(names))      # none of them known (cased names?): one line
    bar = Progress(len(passages), "lambada", unit="passages")
    summary, records = score_passages(model, run.vocab, passages, names, args.top, bar, run.dynamic, run.config.data.eval_chunk)
    bar.close()
    out = Path(args.out)
    atomic_write_text(out, "".join(json_text(r) + "\n" for r in records))
    summary.update(file=args.file, run=args.run, cache=args.cache, names_file=args.names,
                   dynamic=vars(run.dynamic.setting) if run.dynamic else None)
    if args.json:
        print(json_text(summary, indent=2))
        return 0
    print(f"{args.file}: {summary['passages']:,} passages ({summary['unknown_targets']:,} targets outside the vocabulary)")
    print(f"last-word accuracy            {100 * summary['accuracy']:6.2f}%")
    print(f"target-word perplexity   {summary['target_ppl']:11.1f}")
    print(f"whole-passage perplexity {summary['passage_ppl']:11.2f}")
    print(f"baseline: random passage word        {100 * summary['baseline_random_word']:6.2f}%")
    if names:
        print(f"baseline: random capitalised word    {100 * summary['baseline_random_capitalised']:6.2f}%")
        named = summary["names"]
        print(f"names subset ({named['passages']:,} passages): accuracy {100 * named['accuracy']:.2f}%, target perplexity "
              f"{named['target_ppl']:.1f}" if named["passages"] else "names subset: no passage's target is in the names list")
    else:
        print("(give --names FILE, e.g. from `ctxlm names`, for the names subset and the capitalised-word baseline)")
    print(f"per-passage results: {out}")
    return 0


def add_complete(sub) -> None:
    p = sub.add_parser("complete", help="MSR Sentence Completion: accuracy of a run on the five-candidate questions",
                       description="Fill each blank with each candidate, score the whole sentence (sum of log-probs, "
                                   "final <eos> included), choose the highest; prints accuracy and writes every "
                                   "question's scores as JSON (docs/holmes.md).")
    run_argument(p, "run directory (any model, Kneser-Ney included)")
    p.add_argument("--questions", help="Kaggle CSV (id,question,a)..e)) or Holmes.machine_format.questions.txt "
                   "(default: the msr-completion dataset's testing_data.csv, with its answers)")
    p.add_argument("--answers", help="CSV id,answer or Holmes.machine_format.answers.txt; every question needs its "
                   "answer, and answers to questions not asked are ignored (score a subset against the full key); "
                   "without it, choices only")
    out_file_option(p, "completion.json", "per-question results")
    p.add_argument("--against", metavar="JSON", help="another run's --out file: count the questions each run alone "
                   "gets right and give the exact McNemar p-value of the difference")
    p.add_argument("--batch-size", type=option(int, at_least(1)), default=50,
                   help="sentences per forward pass, five per question (default 50)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="cpu",
                   help="where the model scores (default cpu; auto: a GPU when there is one)")
    pretokenized_option(p, "each filled question (by default read by the run's text recipe; a run whose recipe only "
                        "splits on whitespace reads it by the MSR rule, docs/holmes.md)")
    dynamic_options(p, "each candidate sentence from the trained weights")
    json_option(p, "print the summary (accuracy, counts, files) as JSON")
    data_dir_option(p)
    p.set_defaults(func=cmd_complete)


def cmd_complete(args) -> int:
    from ..data.questions import read_msr_completion
    from ..data.registry import locate
    from ..evaluation.completion import answer_questions, compare_answers, question_reader, read_answers
    from ..io import Progress
    from ..run import load
    from ..training.preflight import pick_device

    questions_file, answers_file = args.questions, args.answers
    if questions_file is None:          # the registry's Kaggle CSV and its answers
        questions_file = locate("msr-completion", "questions", args.data_dir)
        answers_file = answers_file or locate("msr-completion", "answers", args.data_dir)
        check_output(args.out, "--out", [questions_file, answers_file])    # as given files are checked
    questions = read_msr_completion(questions_file, answers_file)
    other = read_answers(args.against, questions) if args.against else None
    run = with_dynamic(load(args.run, pick_device(args.device, "--device"), data_dir=args.data_dir), args)
    bar = Progress(len(questions), "complete", unit="questions")
    summary, records = answer_questions(run.model, run.vocab, questions, args.batch_size, bar.update, run.dynamic,
                                        str.split if args.pretokenized else question_reader(run), str(questions_file))
    bar.close()
    summary.update(run=str(args.run), model=run.config.model.name, questions_file=str(questions_file),
                   dynamic=vars(run.dynamic.setting) if run.dynamic else None,
                   answers_file=str(answers_file) if answers_file else None)
    if other is not None:
        summary["comparison"] = compare_answers(records, other, str(args.against))
    atomic_write_text(args.out, json_text({**summary, "records": records}, indent=1) + "\n")
    if args.json:
        print(json_text(summary, indent=2))
        return 0
    print(f"{questions_file}: {summary['questions']:,} question{'s' * (summary['questions'] != 1)}, {summary['unknown_candidates']:,} candidates "
          f"and {summary['unknown_question_words']:,} question words outside the vocabulary of {args.run} ({summary['seconds']:.0f} s)")
    if summary["answered"]:
        print(f"accuracy {100 * summary['accuracy']:.2f}% ({summary['correct']:,} of {summary['answered']:,})")
    else:
        print("no answers given (--answers FILE): choices only")
    if other is not None:
        c = summary["comparison"]
        print(f"against {args.against}: both right {c['both']:,}, only this run {c['only_this']:,}, only the other "
              f"{c['only_other']:,}, neither {c['neither']:,}; exact McNemar p = {c['mcnemar_p']:.3g}")
    print(f"per-question scores and choices: {args.out}")
    return 0

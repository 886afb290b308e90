"""The `ctxlm` command: train, eval, score, generate, info, curves, attention, analyze, export-arpa, import-arpa, explore,
datasets, models, prepare, complete, reproduce."""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from .checks import PROBABILITY, SEED, at_least, in_range, option
from .errors import CtxlmError
from .io import atomic_write_text
from .jsonio import json_text


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, non-zero exit
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def _get_values(self, action, arg_strings):
        # Python < 3.12 drops the value of `--top=--` and gives [] without checking it; check "--" like any value
        if action.nargs is None and arg_strings == ["--"]:
            return self._get_value(action, "--")
        return super()._get_values(action, arg_strings)


def _config(args):
    from .config import Config, apply_overrides, load_toml, validate

    config = load_toml(args.config) if args.config else Config()
    apply_overrides(config, args.set or [])
    validate(config)
    if getattr(args, "match_params", None):
        from .data.load import prepare_data
        from .models.budget import match_params

        vocab_size = getattr(args, "vocab_size", None) or len(prepare_data(config, args.data_dir).vocab)
        match_params(config.model, vocab_size, args.match_params)
        print(f"--match-params {args.match_params}: emb_size = {config.model.emb_size}, hidden_size = {config.model.hidden_size}")
    return config


def cmd_train(args) -> int:
    from .models import MODELS
    from .training.trainer import Trainer

    if args.resume:
        from .config import apply_overrides, load_toml

        if args.config or args.match_params or args.run_dir:
            raise CtxlmError("--resume continues a run with its own config.toml in its own folder; only --set train.KEY=VALUE may change it")
        saved_path = Path(args.resume) / "config.toml"
        saved = load_toml(saved_path, saved=True) if saved_path.is_file() else None
        config = apply_overrides(saved, args.set) if saved and args.set else None
        if saved and MODELS[saved.model.name].count_based:
            from .training.count import estimate_run  # seconds long and deterministic: estimated again

            _print_table(args.resume, estimate_run(saved, args.resume, args.data_dir, again=True))
            return 0
        trainer = Trainer(config, args.resume, args.data_dir, resume=True, allow_changed_data=args.allow_changed_data)
    else:
        if args.allow_changed_data:
            raise CtxlmError("--allow-changed-data goes with --resume RUN_DIR (a new run records its data)")
        config = _config(args)
        run_dir = args.run_dir or Path("runs") / (Path(args.config).stem if args.config else config.model.name)
        if MODELS[config.model.name].count_based:
            from .training.count import estimate_run

            _print_table(run_dir, estimate_run(config, run_dir, args.data_dir))
            return 0
        trainer = Trainer(config, run_dir, args.data_dir)
    try:
        results = trainer.fit()
    except KeyboardInterrupt:
        return 130
    if trainer.world.main:        # under torchrun, one process reports
        _print_table(trainer.run_dir, results)
    return 0


def _print_table(run_dir, results) -> None:
    print(f"\nrun {run_dir} (best epoch {results['best_epoch']}, {results['train_wall_s']:.0f} s training"
          + (f", {results['train_tokens']:,} training tokens, vocabulary {results['vocabulary']:,})" if "train_tokens" in results else ")"))
    print(f"{'split':<8}{'tokens':>10}{'perplexity':>12}")
    for split in ("valid", "test"):
        if split in results:
            print(f"{split:<8}{results[split]['tokens']:>10,}{results[split]['ppl']:>12.2f}")


def cmd_eval(args) -> int:
    from .data.vocab import read_names
    from .evaluation import evaluate_file
    from .evaluation.categories import stream_log_probs
    from .evaluation.names import names_perplexity
    from .evaluation.perplexity import evaluate_split
    from .run import load
    from .training.precision import autocast

    if args.mix_weight is not None and not args.mix:
        raise CtxlmError("--mix-weight is the weight of the run given with --mix; add --mix OTHER_RUN")
    run = load(args.run)
    _left_to_right(run, "ctxlm eval")
    names = read_names(args.names, run.vocab) if args.names else None     # up front: a bad file fails at once
    if args.mix:
        return _eval_mixture(run, args)
    model, settings = _with_cache(run, args)
    if settings is not None:
        run.config.data.batching = "stream"          # the cache spans sentence boundaries (Grave et al.)
    if args.batch_size is not None:
        run.config.data.eval_batch_size = args.batch_size
    if args.chunk is not None:
        run.config.data.eval_chunk = args.chunk
    results = {}
    with autocast("cpu", args.precision):
        if args.file:
            results[args.file] = evaluate_file(model, run.vocab, args.file, run.config.data.eval_batch_size,
                                               run.config.data.eval_chunk)
        else:
            data = _split_data(run, args, *(args.split or []))
            for split in args.split or [s for s in ("valid", "test") if s in data.ids]:     # holmes has no test
                results[split] = evaluate_split(model, run.config, data.ids[split], run.vocab, "cpu")
                if args.names:
                    results[split]["names"] = names_perplexity(stream_log_probs(model, data.ids[split], run.config.data.eval_chunk),
                                                               data.ids[split], names)
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
        print(f"{'split':<12}{'tokens':>10}{'nll':>10}{'perplexity':>12}")
        for name, r in results.items():
            print(f"{name:<12}{r['tokens']:>10,}{r['nll'] / r['tokens']:>10.4f}{r['ppl']:>12.2f}")
            if not math.isfinite(r["ppl"]):
                print(f"  ({name}: some target has probability 0, e.g. a word outside a model without <unk>)")
            if "names" in r:
                n = r["names"]
                print(f"{'  names':<12}{n['tokens']:>10,}{n['nll'] / max(n['tokens'], 1):>10.4f}{n['ppl']:>12.2f}")
    return 0


def _eval_mixture(run, args) -> int:
    """`ctxlm eval RUN --mix OTHER`: p = (1 − λ) p_RUN + λ p_OTHER on the dataset's splits, λ given or
    chosen by maximum likelihood on valid (evaluation/interpolation.py)."""
    from .data.load import prepare_data
    from .evaluation.interpolation import best_weight, check_mixable, mixed, perplexity, split_log_probs
    from .run import load

    if args.file or args.cache or args.precision != "fp32":
        raise CtxlmError("--mix scores the dataset's splits with both runs in float32; it does not combine with "
                         "--file, --cache or --precision")
    other = load(args.mix)
    check_mixable(run, other)
    data = prepare_data(run.config, args.data_dir, run.vocab)
    splits = args.split or ["valid", "test"]
    for split in splits + ([] if args.mix_weight is not None else ["valid"]):
        if split not in data.ids:
            raise CtxlmError(f"--split {split}: dataset {run.config.data.dataset!r} has splits {', '.join(data.ids)}"
                             + ("" if split in splits else " (λ is chosen on valid: give --mix-weight)"))
    scores = {}
    for split in dict.fromkeys(splits + ([] if args.mix_weight is not None else ["valid"])):
        scores[split] = split_log_probs(run, data.ids[split]), split_log_probs(other, data.ids[split])
    lam = args.mix_weight if args.mix_weight is not None else best_weight(*scores["valid"])
    chosen = "given" if args.mix_weight is not None else "maximum likelihood on valid"
    results = {"lambda": lam, "chosen": chosen, "run": str(args.run), "mix": str(args.mix)}
    for split in splits:
        a, b = scores[split]
        results[split] = {"run": perplexity(a), "mix_run": perplexity(b), "mixture": perplexity(mixed(a, b, lam))}
    if args.json:
        print(json_text(results, indent=2))
        return 0
    print(f"mixture p = (1 - λ) p_RUN + λ p_MIX with λ = {lam:.4f} ({chosen}); RUN = {args.run}, MIX = {args.mix}")
    print(f"{'split':<12}{'tokens':>10}{'RUN':>12}{'MIX':>12}{'mixture':>12}")
    for split in splits:
        r = results[split]
        print(f"{split:<12}{r['mixture']['tokens']:>10,}{r['run']['ppl']:>12.2f}{r['mix_run']['ppl']:>12.2f}{r['mixture']['ppl']:>12.2f}")
    return 0


def _with_cache(run, args):
    """(the run's model, None), or with --cache (the model inside the neural cache, its settings): those
    `ctxlm tune-cache` recorded in the run, with any --cache-* option on top."""
    from .models.cache import CacheSettings, NeuralCache

    if not args.cache:
        return run.model, None
    _neural_only(run, "--cache")
    settings = CacheSettings.recorded(run.path)
    if settings is None:
        settings = CacheSettings()
        if None in (args.cache_window, args.cache_theta, args.cache_lambda):
            print(f"note: {run.path / 'cache.json'} not found (run `ctxlm tune-cache {run.path}` to choose on "
                  "validation); defaults fill the settings not given", file=sys.stderr)
    for name, value in (("window", args.cache_window), ("theta", args.cache_theta), ("lam", args.cache_lambda)):
        if value is not None:
            setattr(settings, name, value)
    try:
        return NeuralCache(run.model, settings), settings
    except ValueError as exc:
        raise CtxlmError(f"--cache: {exc}") from None


def _left_to_right(run, what: str) -> None:
    """Perplexity needs a model of each word given the words before it; the bidirectional RM is not one."""
    if not run.model.left_to_right:
        raise CtxlmError(f"{what}: model {run.config.model.name!r} of {run.path} predicts each word from the words before "
                         "and after it, so it has no perplexity; score whole sentences with `ctxlm complete` "
                         "(results.json holds the validation pseudo-perplexity that chose its epoch)")


def _neural_only(run, what: str) -> None:
    if run.model.count_based:
        raise CtxlmError(f"{what}: the neural cache reads a neural model's hidden states; {run.path} is an n-gram run")


def cmd_tune_cache(args) -> int:
    import itertools

    from .analysis.cache import plot_cache_grid
    from .evaluation.cache import cache_grid
    from .models.cache import CacheSettings
    from .run import load
    from .training.trainer import git_commit

    def numbers(option, text, kind):
        try:
            values = tuple(kind(v) for v in text.split(","))
        except ValueError:
            raise CtxlmError(f"{option} {text!r}: expected comma-separated numbers, e.g. {option} 0.1,0.2") from None
        return values

    windows, thetas, lambdas = (numbers("--windows", args.windows, int), numbers("--thetas", args.thetas, float),
                                numbers("--lambdas", args.lambdas, float))
    try:
        for setting in itertools.product(windows, thetas, lambdas):
            CacheSettings(*setting).check()
    except ValueError as exc:
        raise CtxlmError(f"tune-cache: {exc}") from None
    run = load(args.run)
    _neural_only(run, "tune-cache")
    _left_to_right(run, "tune-cache")
    data = _split_data(run, args, args.split)
    result = cache_grid(run.model, data.ids[args.split], windows, thetas, lambdas, run.config.data.eval_chunk)
    result.update(split=args.split, commit=git_commit())
    atomic_write_text(Path(args.run) / "cache.json", json_text(result, indent=1) + "\n")
    plot_cache_grid(result, Path(args.run) / "cache_grid.png")
    best = result["best"]
    print(f"{args.split} perplexity without cache {result['model_ppl']:.2f}; best with cache {best['ppl']:.2f} "
          f"({100 * (1 - best['ppl'] / result['model_ppl']):.1f}% lower) at window {best['window']}, "
          f"theta {best['theta']}, lambda {best['lambda']}")
    print(f"{'window':>8}{'theta':>8}{'lambda':>8}{'perplexity':>12}")
    for row in sorted(result["grid"], key=lambda r: r["ppl"])[:10]:
        print(f"{row['window']:>8}{row['theta']:>8}{row['lambda']:>8}{row['ppl']:>12.2f}")
    print(f"recorded in {Path(args.run) / 'cache.json'} (used by `ctxlm eval {args.run} --cache`); grid plot "
          f"{Path(args.run) / 'cache_grid.png'}")
    return 0


def cmd_lambada(args) -> int:
    from .data.corpus import read_lambada, read_text
    from .evaluation.lambada import score_passages
    from .io import Progress
    from .run import load

    run = load(args.run)
    model, _ = _with_cache(run, args)
    names = frozenset(read_text(args.names).split()) if args.names else frozenset()
    passages = read_lambada(args.file)
    bar = Progress(len(passages), "lambada")
    summary, records = score_passages(model, run.vocab, passages, names, args.top, bar)
    bar.close()
    out = Path(args.out)
    atomic_write_text(out, "".join(json_text(r) + "\n" for r in records))
    summary.update(file=args.file, run=args.run, cache=args.cache, names_file=args.names)
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
        print(f"names subset ({summary['names']['passages']:,} passages): accuracy {100 * summary['names']['accuracy']:.2f}%, "
              f"target perplexity {summary['names']['target_ppl']:.1f}")
    else:
        print("(give --names FILE, e.g. from `ctxlm names`, for the names subset and the capitalised-word baseline)")
    print(f"per-passage results: {out}")
    return 0


def cmd_prepare(args) -> int:
    from .data import holmes
    from .data.registry import spec

    folder, manifest, made = holmes.prepare(args.data_dir, args.out, args.valid_sentences, args.seed, args.force)
    print(f"prepared in {manifest['seconds']:.0f} s" if made else
          f"already prepared, nothing to do (prepared in {manifest['seconds']:.0f} s; --force prepares it again)")
    for line in holmes.summary(folder, manifest, spec("holmes").min_count):
        print(line)
    return 0


def cmd_complete(args) -> int:
    from .data.corpus import read_msr_completion
    from .data.registry import locate
    from .evaluation.completion import answer_questions, compare_answers, read_answers
    from .io import Progress
    from .run import load
    from .training.trainer import pick_device

    questions_file, answers_file = args.questions, args.answers
    if questions_file is None:          # the registry's Kaggle CSV and its answers
        questions_file = locate("msr-completion", "questions", args.data_dir)
        answers_file = answers_file or locate("msr-completion", "answers", args.data_dir)
    questions = read_msr_completion(questions_file, answers_file)
    other = read_answers(args.against, questions) if args.against else None
    run = load(args.run, pick_device(args.device, "--device"))
    bar = Progress(len(questions), "complete")
    summary, records = answer_questions(run.model, run.vocab, questions, args.batch_size, bar.update)
    bar.close()
    summary.update(run=str(args.run), model=run.config.model.name, questions_file=str(questions_file),
                   answers_file=str(answers_file) if answers_file else None)
    if other is not None:
        summary["comparison"] = compare_answers(records, other, str(args.against))
    atomic_write_text(args.out, json_text({**summary, "records": records}, indent=1) + "\n")
    print(f"{questions_file}: {summary['questions']:,} questions, {summary['unknown_candidates']:,} candidates outside "
          f"the vocabulary of {args.run} ({summary['seconds']:.0f} s)")
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


def cmd_names(args) -> int:
    from .evaluation.lambada import capitalised_words

    paths = [p for given in args.files for p in (sorted(Path(given).glob("*")) if Path(given).is_dir() else [Path(given)])]
    words = capitalised_words(paths, args.min_count, args.share)
    atomic_write_text(args.out, "".join(w + "\n" for w in words))
    print(f"{len(words):,} capitalised word types from {len(paths):,} files written to {args.out}")
    return 0


def cmd_score(args) -> int:
    from .checks import safe_exp
    from .data.corpus import iter_lines
    from .generate import score_tokens
    from .run import load

    run = load(args.run)
    state = None
    for line in iter_lines(args.input or "-", allow_empty=True):
        tokens = line.split() + ["<eos>"]
        log_probs, new_state = score_tokens(run.model, run.vocab, tokens, state if args.stream else None)
        state = new_state
        total = sum(log_probs)
        print(json_text({"text": line, "tokens": tokens,
                          "unknown": [t not in run.vocab.index for t in tokens],
                          "log_probs": [round(x, 5) for x in log_probs], "total": round(total, 5),
                          "ppl": round(safe_exp(-total / len(tokens)), 4)}))
    return 0


def cmd_generate(args) -> int:
    import torch

    from .generate import sample
    from .run import load

    run = load(args.run)
    generator = torch.Generator().manual_seed(args.seed)
    for _ in range(args.num):
        words = sample(run.model, run.vocab, args.prompt.split(), args.max_tokens, args.temperature, args.top_k,
                       args.top_p, generator)
        print(" ".join(args.prompt.split() + words).replace(" <eos>", "\n").strip())
    return 0


def cmd_info(args) -> int:
    import torch

    from .models import build_model

    target = Path(args.target)
    if target.is_dir():
        from .run import load

        run = load(target)
        config, vocab_size, model = run.config, len(run.vocab), run.model
    else:
        args.config = str(target)
        config = _config(args)
        if args.vocab_size:
            vocab_size = args.vocab_size
        else:
            from .data.load import prepare_data

            vocab_size = len(prepare_data(config, args.data_dir).vocab)
        with torch.device("meta"):          # sizes only: nothing is allocated
            model = build_model(config.model, vocab_size, config.output)
    counts = model.parameter_counts()
    print(config.to_toml())
    print(f"vocabulary size          {vocab_size:,}")
    print(f"parameters (θ_W+M)        {counts['total']:,}  ({counts['total'] / 1e6:.2f}M)")
    print(f"without word embeddings (θ_M) {counts['without_embeddings']:,}  ({counts['without_embeddings'] / 1e6:.2f}M)")
    return 0


def cmd_export_arpa(args) -> int:
    from .models.arpa import write_arpa
    from .run import load

    run = load(args.run)
    if not run.model.count_based:
        raise CtxlmError(f"{args.run}: ARPA export needs an n-gram run (model.name = kneser-ney), not {run.config.model.name!r}")
    write_arpa(run.model, run.vocab, args.output)
    print(f"wrote {args.output}")
    return 0


def cmd_import_arpa(args) -> int:
    from .config import Config, apply_overrides
    from .models.arpa import read_arpa
    from .training import checkpoint
    from .training.trainer import check_config

    run_dir = Path(args.run_dir)
    if run_dir.exists() and any(run_dir.iterdir()):
        raise CtxlmError(f"run directory {run_dir} is not empty; pick another")
    model, vocab = read_arpa(args.arpa)
    config = apply_overrides(Config(), [*(args.set or []), "model.name=kneser-ney", f"model.order={model.order}"])
    check_config(config)
    if "<unk>" not in model.arpa_words:
        print(f"warning: {args.arpa} has no <unk> unigram: a word outside its {len(vocab):,} words gets probability 0 "
              "(perplexity inf); estimate it with <unk> (KenLM does by default)", file=sys.stderr)
    atomic_write_text(run_dir / "config.toml", config.to_toml())
    vocab.save(run_dir / "vocab.txt")
    checkpoint.save_weights(model, run_dir / "model.safetensors", {"model": "kneser-ney", "vocab": vocab.fingerprint()})
    print(f"imported a {model.order}-gram model with {len(vocab):,} words into {run_dir}")
    return 0


def cmd_explore(args) -> int:
    from .explore.server import serve

    serve(args.runs, args.host, args.port, args.cache)
    return 0


def cmd_attention(args) -> int:
    from .analysis.attention import explain, plot_heatmap, plot_top_predictions, write_json
    from .run import load

    run = load(args.run)
    if args.text is not None:
        words = args.text.split()
        if not words:
            raise CtxlmError("--text has no words; give the text to explain, or leave --text out for --split/--line")
    else:
        import itertools

        from .data.load import load_corpus
        from .data.vocab import EOS

        d = run.config.data
        splits = load_corpus(d.dataset, args.data_dir, {"train": d.train, "valid": d.valid, "test": d.test}).splits
        if args.split not in splits:
            raise CtxlmError(f"--split {args.split}: dataset {d.dataset!r} has splits {', '.join(splits)}")
        lines = [list(words) for end, words in itertools.groupby(splits[args.split], lambda t: t == EOS) if not end]
        if not 1 <= args.line <= len(lines):
            raise CtxlmError(f"--line {args.line}: the {args.split} split has {len(lines)} non-empty lines")
        words = lines[args.line - 1]
    result = explain(run, words, args.top)
    out = _output_dir(args)
    write_json(result, out / "attention.json")
    plot_heatmap(result, out / "attention.png")
    plot_top_predictions(result, out / "predictions.png")
    print(f"wrote {out / 'attention.png'}, {out / 'predictions.png'} and {out / 'attention.json'}")
    return 0


def cmd_analyze(args) -> int:
    from .analysis.attention import attention_by_distance, plot_by_distance, write_json
    from .run import load

    run = load(args.run)
    rows = attention_by_distance(run, _analysis_split(run, args), args.max_tokens)
    out = _output_dir(args)
    write_json(rows, out / "attention_by_position.json")
    plot_by_distance(rows, run.config.model.name, out / "attention_by_position.png")
    print(f"{'distance':>8}{'mean attention':>16}{'positions':>12}")
    for r in rows:
        print(f"{('h0' if r['distance'] < 0 else r['distance']):>8}{r['mean_attention']:>16.4f}{r['positions']:>12,}")
    print(f"wrote {out / 'attention_by_position.png'} and {out / 'attention_by_position.json'}")
    return 0


def cmd_analyze_memory(args) -> int:
    from .analysis import memory
    from .analysis.attention import write_json
    from .run import load

    run = load(args.run)
    memory.require_memory(run)
    data = _split_data(run, args, args.split)
    records = memory.memory_records(run, data.ids[args.split], args.max_tokens, run.config.data.eval_chunk)
    name = f"{run.config.model.name} ({Path(args.run).name})"
    out = _output_dir(args)
    positions = memory.position_means(records)
    sampled = memory.samples(records, run.vocab, args.samples, args.seed)
    table = memory.cooccurrence(records, data.ids["train"], run.vocab)
    for label, result in (("positions", positions), ("samples", sampled), ("cooccurrence", table)):
        write_json({"run": str(args.run), "split": args.split, label: result}, out / f"memory_{label}.json")
    memory.plot_positions(positions, name, out / "memory_positions.png")
    memory.plot_samples(sampled, name, out / "memory_samples.png")
    atomic_write_text(out / "memory_cooccurrence.md", memory.cooccurrence_markdown(
        table, f"{name}, {args.split} split: co-occurrence frequency against attention distance (Tran Table 3)"))
    print(f"{'position':>9}{'mean attention':>16}{'full memory':>13}{'predictions':>13}")
    for r in positions["positions"]:
        print(f"{r['position']:>9}{r['mean_attention']:>16.4f}{r['mean_attention_full_memory']:>13.4f}{r['predictions']:>13,}")
    print(f"\n{'d':>3}{'pairs':>9}{'mu':>10}   most frequent pairs")
    for r in table["rows"]:
        mu = "-" if r["mean_frequency"] is None else f"{r['mean_frequency']:.1f}"
        print(f"{r['d']:>3}{r['pairs']:>9,}{mu:>10}   " + ", ".join(f"{a}->{w} ({f})" for a, w, f in r["examples"]))
    print(f"wrote {', '.join(str(out / f) for f in ('memory_positions.png', 'memory_samples.png', 'memory_cooccurrence.md'))} "
          "and their JSON")
    return 0


def _split_data(run, args, *splits):
    """The run's dataset (prepared with its vocabulary), after checking that it has each of `splits`."""
    from .data.load import prepare_data

    data = prepare_data(run.config, args.data_dir, run.vocab)
    for split in splits:
        if split not in data.ids:
            raise CtxlmError(f"--split {split}: dataset {run.config.data.dataset!r} has splits {', '.join(data.ids)}")
    return data


def _output_dir(args) -> Path:
    """--out, created if need be."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    return out


def _analysis_split(run, args):
    """The ids of --split."""
    return _split_data(run, args, args.split).ids[args.split]


def cmd_kernel_ngrams(args) -> int:
    from .analysis.attention import write_json
    from .analysis.feedforward import plot_ngrams, require_feedforward, top_ngrams
    from .run import load

    run = load(args.run)
    model = require_feedforward(run, "kernel-ngrams", convolutional=True)
    rows = top_ngrams(model, run.vocab, _analysis_split(run, args), args.top)
    try:
        shown = [rows[int(k) - 1] for k in args.kernels.split(",")] if args.kernels else rows[:8]
    except (ValueError, IndexError):
        raise CtxlmError(f"--kernels {args.kernels!r}: kernel numbers from 1 to {len(rows)}, comma-separated") from None
    out = _output_dir(args)
    write_json(rows, out / "kernel_ngrams.json")
    plot_ngrams(shown, out / "kernel_ngrams.png")
    for row in shown:
        print(f"kernel {row['kernel'] + 1:>4} (w = {row['width']}): " + "; ".join(g["ngram"] for g in row["top"]))
    print(f"wrote {out / 'kernel_ngrams.png'} and {out / 'kernel_ngrams.json'} (all {len(rows)} kernels)")
    return 0


def cmd_position_weights(args) -> int:
    from .analysis.attention import write_json
    from .analysis.feedforward import plot_positions, positive_weight_by_position, require_feedforward
    from .run import load

    run = load(args.run)
    rows = positive_weight_by_position(require_feedforward(run, "position-weights", by_position=True))
    out = _output_dir(args)
    write_json(rows, out / "position_weights.json")
    plot_positions(rows, run.config.model.name, out / "position_weights.png")
    print(f"{'position':>8}{'positive weight':>18}{'share':>8}")
    for r in rows:
        print(f"{r['position']:>8}{r['positive_weight']:>18.4f}{r['share']:>8.3f}")
    print(f"wrote {out / 'position_weights.png'} and {out / 'position_weights.json'}")
    return 0


def cmd_lesion(args) -> int:
    from .analysis.attention import write_json
    from .analysis.feedforward import lesion_curve, plot_lesion, require_feedforward
    from .run import load

    run = load(args.run)
    model = require_feedforward(run, "lesion", by_position=True)
    ids = _analysis_split(run, args)
    if args.max_tokens:
        ids = ids[:args.max_tokens + 1]
    result = lesion_curve(model, ids, run.config.data.eval_chunk)
    out = _output_dir(args)
    write_json(result, out / "lesion.json")
    plot_lesion(result, run.config.model.name, out / "lesion.png")
    print(f"{'positions':>9}{'perplexity':>12}")
    for r in result["rows"]:
        print(f"{r['positions']:>9}{r['ppl']:>12.2f}")
    print(f"power-law fit: perplexity ≈ {result['scale']:.2f} · m^{result['exponent']:.3f} "
          f"({result['rows'][0]['tokens']:,} targets of {args.split})")
    print(f"wrote {out / 'lesion.png'} and {out / 'lesion.json'}")
    return 0


def cmd_categories(args) -> int:
    from .analysis.attention import write_json
    from .analysis.categories import plot_categories
    from .evaluation.categories import category_perplexities, stream_log_probs
    from .run import load

    tables = {}
    for run_dir in args.runs:
        run = load(run_dir)
        _left_to_right(run, "analyze categories")
        model, _ = _with_cache(run, args)
        data = _split_data(run, args, args.split)
        tags = data.tags[args.split] if data.tags else None
        log_probs = stream_log_probs(model, data.ids[args.split], run.config.data.eval_chunk)
        label = Path(run_dir).name + (" + cache" if args.cache else "")
        tables[label] = category_perplexities(log_probs, data.ids[args.split], run.vocab, tags)
    out = _output_dir(args)
    write_json(tables, out / "categories.json")
    plot_categories(tables, out / "categories.png")
    first = next(iter(tables.values()))
    if not any(r["group"] == "part of speech" for r in first):
        print("(this dataset has no part-of-speech tags: only frequency bands and <unk>/<eos>; Brown has gold tags)")
    print(f"{'category':<22}{'tokens':>9}" + "".join(f"{label[:18]:>20}" for label in tables))
    for i, row in enumerate(first):
        print(f"{row['category']:<22}{row['tokens']:>9,}" + "".join(f"{t[i]['ppl']:>20.1f}" for t in tables.values()))
    print(f"wrote {out / 'categories.png'} and {out / 'categories.json'}")
    return 0


def cmd_curves(args) -> int:
    from .analysis.attention import write_json
    from .analysis.curves import best_epoch, plot_curves, read_curve, read_test_ppl

    labels = [Path(run_dir).resolve().name for run_dir in args.runs]
    if len(set(labels)) < len(labels):              # folders of the same name: label them by the path given
        labels = [str(run_dir) for run_dir in args.runs]
    if len(set(labels)) < len(labels):
        raise CtxlmError("a run directory is given twice")
    curves = {label: read_curve(run_dir) for label, run_dir in zip(labels, args.runs)}
    for label, run_dir in zip(labels, args.runs):
        rows, test = curves[label], read_test_ppl(run_dir)
        best = best_epoch(rows)
        print(f"{label}: {len(rows)} epochs in {rows[-1]['elapsed_s'] / 3600:.2f} h, "
              + (f"best valid {best['valid_ppl']:.2f} (epoch {best['epoch']})" if best else "no finite validation perplexity")
              + (f", test {test:.2f}" if test else ", test not read yet"))
        print(f"{'epoch':>7}{'lr':>12}{'train ppl':>12}{'valid ppl':>12}{'hours':>8}")
        for r in rows:
            print(f"{r['epoch']:>7}{r['lr']:>12.6g}{r['train_ppl']:>12.2f}{r['valid_ppl']:>12.2f}"
                  f"{r['elapsed_s'] / 3600:>8.2f}" + (" *" if r is best else ""))
    out = _output_dir(args)
    write_json(curves, out / "curves.json")
    plot_curves(curves, out / "curves.png")
    print(f"wrote {out / 'curves.png'} and {out / 'curves.json'}")
    return 0


def cmd_datasets(args) -> int:
    from .data.registry import DATASETS, locate

    for name, info in DATASETS.items():
        status = []
        for key in info.files:
            try:
                status.append(f"{key}: {locate(name, key, args.data_dir, download=False)}")
            except CtxlmError:
                status.append(f"{key}: missing")
        if name == "holmes":
            from .data.holmes import find_prepared

            status.append(f"prepared: {find_prepared(args.data_dir) or 'not yet (ctxlm prepare holmes)'}")
        print(f"{name:<16}{info.description}\n{'':<16}" + f"\n{'':<16}".join(status))
    return 0


def cmd_reproduce(args) -> int:
    from .reproduce import report, runner
    from .reproduce.tables import load_tables

    stop_after = runner.parse_duration(args.stop_after) if args.stop_after else None
    root = _project_root()
    tables_dir, records_dir = Path(args.tables or root / "reproductions"), Path(args.records or root / "results")
    if args.list:
        for table in load_tables(tables_dir):
            print(f"{table.id:16} {sum(r.runnable for r in table.rows):3} of {len(table.rows):3} rows runnable  {table.title}")
        return 0
    names = [args.table] if args.table else []
    if not names and not (args.plan or args.report or args.check):
        raise CtxlmError("name a table to train (ctxlm reproduce --list shows them), or give --plan, --report or --check")
    tables = load_tables(tables_dir, names)
    runs = runner.row_runs(tables, args.rows, Path(args.runs), records_dir)
    extra = runner.thread_setting(args.set or [], args.jobs) if not args.check else args.set or []
    if args.report:
        text = report.report_markdown(tables, records_dir)
        if args.page:
            report.write_page(Path(args.page), text)
            print(f"wrote the report into {args.page}")
        else:
            print(text, end="")
        return 0
    if args.plan:
        print(report.plan_text(runs, extra, args.measure, args.data_dir))
        return 0
    if args.check:
        return 1 if runner.check(runs, args.data_dir) else 0
    return runner.Runner(args.jobs, stop_after, extra, args.data_dir).run(runs)


def _project_root() -> Path:
    """The folder with reproductions/ and results/: the current one, else this source checkout."""
    here = Path.cwd()
    if (here / "reproductions").is_dir():
        return here
    return Path(__file__).resolve().parents[2]


def cmd_models(args) -> int:
    from .config import ModelConfig, _toml_value, described, family_options, shared_fields
    from .models import MODELS
    from .models.base import softmax_ties

    if not args.name:
        for name, cls in sorted(MODELS.items()):
            print(f"{name:<20}{(cls.__doc__ or '').strip().splitlines()[0]}")
        print("\n`ctxlm models NAME` lists a model's [model] keys with their defaults.")
        return 0
    options = family_options(args.name)
    print(f"{args.name}: {(MODELS[args.name].__doc__ or '').strip().splitlines()[0]}\n")
    print("[model]  # keys every model shares")
    for key, default, comment in described(ModelConfig, shared_fields(ModelConfig)):
        if key in MODELS[args.name].unread_keys:
            comment = f"not read by {args.name}: leave it out"
        elif key == "tie_weights" and not softmax_ties(args.name):
            comment = f"{args.name}'s softmax is untied: true only with output.layer = \"nce\""
        print(f"{key} = {_toml_value(args.name if key == 'name' else default)}".ljust(28) + f"# {comment}")
    rows = described(options)
    print(f"# {args.name}'s own options" if rows else f"# {args.name} has no options of its own")
    for key, default, comment in rows:
        print(f"{key} = {_toml_value(default)}".ljust(28) + f"# {comment}")
    return 0


def cache_options(p) -> None:
    p.add_argument("--cache", action="store_true", help="add the neural cache (Grave et al. 2017) with the settings "
                   "`ctxlm tune-cache` recorded in the run; --cache-window/--cache-theta/--cache-lambda override them")
    p.add_argument("--cache-window", type=option(int, at_least(1)), help="cache size: (hidden state, next word) pairs kept (default 2000)")
    p.add_argument("--cache-theta", type=option(float, at_least(0)), help="flatness θ of the cache distribution (default 0.3)")
    p.add_argument("--cache-lambda", type=option(float, in_range(0, 1)), help="cache interpolation weight λ in [0, 1] (default 0.1)")


def build_parser() -> argparse.ArgumentParser:
    from .analysis.feedforward import convolutional_families
    from .models.base import families, spoken

    attending = f"run directory of a model that exposes attention: {spoken(families(lambda cls: cls.exposes_attention))}"
    with_memory_block = spoken(families(lambda cls: cls.memory_block))
    parser = _Parser(prog="ctxlm", description="Word-level language models that look back at their context.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def common_data(p):
        p.add_argument("--data-dir", help="folder with the corpora (default: $CTXLM_DATA_DIR, then ~/.cache/ctxlm/data)")

    p = sub.add_parser("train", help="train a model (from a preset) into a run directory",
                       description="Train a model. Example: ctxlm train --config configs/daniluk/ptb-lstm.toml")
    p.add_argument("--config", help="TOML preset (see configs/); defaults apply where it is silent")
    p.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE", help="override one setting, e.g. --set train.epochs=3")
    p.add_argument("--run-dir", help="where to write the run (default runs/<preset name>); must be new or empty")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue an interrupted run exactly where it stopped")
    p.add_argument("--allow-changed-data", action="store_true", help="with --resume: go on although the corpus "
                   "changed since the run recorded its fingerprint (refused otherwise)")
    p.add_argument("--match-params", metavar="MODEL:WxK", help="pick emb/hidden sizes so the model has at most the "
                   "parameters of MODEL with embedding W and hidden K, e.g. lstm:300x300 (Daniluk's budgets)")
    common_data(p)
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("eval", help="perplexity of a trained run on its dataset's splits or on a file",
                       description="Perplexity = exp(total NLL / tokens), every <eos> and <unk> counted (SPEC §0.2). "
                                   "Stream evaluation uses batch size 1 in chunks of 1,000 tokens unless told otherwise.")
    p.add_argument("run", help="run directory")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--split", action="append", choices=["train", "valid", "test"], help="split(s) to evaluate (default valid and test)")
    what.add_argument("--file", help="evaluate a text file (one sentence per line, read as a stream) instead")
    p.add_argument("--batch-size", type=option(int, at_least(1)), help="parallel streams (default from the run: 1)")
    p.add_argument("--chunk", type=option(int, at_least(1)), help="tokens per forward pass (default from the run: 1000)")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                   help="fp32 (default, exact) or bf16 autocast (faster on bf16 hardware, approximate, reported as such)")
    cache_options(p)
    p.add_argument("--names", help="also the perplexity of the name targets only (SPEC §1.19): a file of name words, "
                   "one per line, e.g. from `ctxlm names`")
    p.add_argument("--mix", metavar="OTHER_RUN", help="also evaluate the mixture (1 - λ) p_RUN + λ p_OTHER (same dataset "
                   "and vocabulary, e.g. a feed-forward run with a Kneser-Ney trigram as Bengio et al. 2003 mix them)")
    p.add_argument("--mix-weight", type=option(float, in_range(0, 1)), help="λ in [0, 1] for --mix (default: chosen by "
                   "maximum likelihood on the valid split)")
    p.add_argument("--json", action="store_true", help="print JSON")
    common_data(p)
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("lambada", help="LAMBADA: last-word accuracy and perplexities of a run on a passage file",
                       description="Scores a file in LAMBADA's format (one tokenised passage per line; the target is the "
                                   "last word): last-word accuracy, target-word and whole-passage perplexity, the "
                                   "trivial baselines, and with --names the names subset. Conventions: docs/lambada.md.")
    p.add_argument("run", help="run directory")
    p.add_argument("file", help="passages, e.g. $CTXLM_DATA_DIR/lambada/lambada_development_plain_text.txt")
    p.add_argument("--names", help="capitalised-in-training words, one per line (`ctxlm names` writes one)")
    p.add_argument("--top", type=option(int, at_least(1)), default=5, help="predictions kept per passage in the JSON (default 5)")
    p.add_argument("--out", default="lambada.jsonl", help="per-passage results, JSON lines (default ./lambada.jsonl)")
    cache_options(p)
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=cmd_lambada)

    p = sub.add_parser("prepare", help="prepare a corpus once, as integer arrays (holmes: the MSR training novels)",
                       description="Holmes: strip the Project Gutenberg licence from the 522 novels, split sentences, "
                                   "tokenise and lower-case like the MSR questions, hold out random validation "
                                   "sentences, and write int32 arrays to ROOT/holmes/ (docs/holmes.md). Running it "
                                   "again is a no-op.")
    p.add_argument("dataset", choices=["holmes"], help="the corpus to prepare")
    p.add_argument("--out", metavar="ROOT", help="data folder to write ROOT/holmes/ into (default: the user cache, "
                   "~/.cache/ctxlm/data); give training the same folder with --data-dir or $CTXLM_DATA_DIR")
    p.add_argument("--valid-sentences", type=option(int, at_least(1)), default=19_000,
                   help="random sentences held out for validation (default 19,000, as Tran et al.)")
    p.add_argument("--seed", type=option(int, SEED), default=1, help="seed of the hold-out and the book order (default 1)")
    p.add_argument("--force", action="store_true", help="prepare again even if a complete copy exists")
    common_data(p)
    p.set_defaults(func=cmd_prepare)

    p = sub.add_parser("complete", help="MSR Sentence Completion: accuracy of a run on the five-candidate questions",
                       description="Fill each blank with each candidate, score the whole sentence (sum of log-probs, "
                                   "final <eos> included), choose the highest; prints accuracy and writes every "
                                   "question's scores as JSON (docs/holmes.md).")
    p.add_argument("run", help="run directory (any model, Kneser-Ney included)")
    p.add_argument("--questions", help="Kaggle CSV (id,question,a)..e)) or Holmes.machine_format.questions.txt "
                   "(default: the msr-completion dataset's testing_data.csv, with its answers)")
    p.add_argument("--answers", help="CSV id,answer or Holmes.machine_format.answers.txt; without it, choices only")
    p.add_argument("--out", default="completion.json", help="per-question results (default ./completion.json)")
    p.add_argument("--against", metavar="JSON", help="another run's --out file: count the questions each run alone "
                   "gets right and give the exact McNemar p-value of the difference")
    p.add_argument("--batch-size", type=option(int, at_least(1)), default=50,
                   help="sentences per forward pass, five per question (default 50)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="cpu",
                   help="where the model scores (default cpu; auto: a GPU when there is one)")
    common_data(p)
    p.set_defaults(func=cmd_complete)

    p = sub.add_parser("names", help="list the capitalised-in-training words of cased text (names, for LAMBADA)",
                       description="A word type (lower-cased) is a name if it occurs at least --min-count times "
                                   "after a sentence's first word and is capitalised in at least --share of those.")
    p.add_argument("files", nargs="+", help="cased text files (.gz is fine) or folders of them, e.g. the Gutenberg novels")
    p.add_argument("--out", default="names.txt", help="output file, one word per line (default ./names.txt)")
    p.add_argument("--min-count", type=option(int, at_least(1)), default=5)
    p.add_argument("--share", type=option(float, in_range(0, 1, low_open=True)), default=0.9)
    p.set_defaults(func=cmd_names)

    p = sub.add_parser("tune-cache", help="choose the neural cache's window, θ and λ on validation data",
                       description="Grid search of the neural cache (Grave et al. 2017) around a trained run, on its "
                                   "validation split; writes RUN/cache.json (used by `ctxlm eval RUN --cache`) and "
                                   "RUN/cache_grid.png.")
    p.add_argument("run", help="run directory of a neural model")
    p.add_argument("--split", default="valid", choices=["valid", "train"], help="split to tune on (never test)")
    p.add_argument("--windows", default="100,500,1000,2000", help="cache sizes to try (comma-separated)")
    p.add_argument("--thetas", default="0.05,0.1,0.2,0.3,0.5,0.7,1.0", help="θ values to try")
    p.add_argument("--lambdas", default="0.05,0.1,0.15,0.2,0.25,0.3,0.4", help="λ values to try")
    common_data(p)
    p.set_defaults(func=cmd_tune_cache)

    p = sub.add_parser("score", help="per-token log-probabilities of text, as JSON lines",
                       description="Score each input line (whitespace-tokenised, <eos> appended); natural-log probabilities.")
    p.add_argument("run", help="run directory")
    p.add_argument("--input", help="text file, one sentence per line (default: standard input)")
    p.add_argument("--stream", action="store_true", help="carry the model state from line to line instead of starting each fresh")
    p.set_defaults(func=cmd_score)

    p = sub.add_parser("generate", help="sample text from a trained run")
    p.add_argument("run", help="run directory")
    p.add_argument("--prompt", default="", help="words to continue")
    p.add_argument("--max-tokens", type=option(int, at_least(1)), default=50)
    p.add_argument("--temperature", type=option(float, at_least(0)), default=1.0, help="0 = greedy")
    p.add_argument("--top-k", type=option(int, at_least(0)), default=0, help="sample among the k most likely words (0 = all)")
    p.add_argument("--top-p", type=option(float, PROBABILITY), default=1.0, help="nucleus sampling threshold in (0, 1]")
    p.add_argument("--num", type=option(int, at_least(1)), default=1, help="number of samples")
    p.add_argument("--seed", type=option(int, SEED), default=0)
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("info", help="configuration, vocabulary size and parameter counts of a run or preset")
    p.add_argument("target", help="run directory or TOML preset")
    p.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE")
    p.add_argument("--vocab-size", type=option(int, at_least(2)), help="for a preset: use this vocabulary size instead of reading the data")
    p.add_argument("--match-params", metavar="MODEL:WxK", help="pick emb/hidden sizes so the model has at most the "
                   "parameters of MODEL with embedding W and hidden K, e.g. lstm:300x300 (Daniluk's budgets)")
    common_data(p)
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("export-arpa", help="write an n-gram run as an ARPA file (KenLM, SRILM can read it)")
    p.add_argument("run", help="run directory of a kneser-ney model")
    p.add_argument("output", help="ARPA file to write")
    p.set_defaults(func=cmd_export_arpa)

    p = sub.add_parser("import-arpa", help="make a run directory from an ARPA file, to eval and score it like any model")
    p.add_argument("arpa", help="ARPA file")
    p.add_argument("run_dir", help="new run directory")
    p.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE", help="e.g. --set data.dataset=wikitext-2 for `ctxlm eval`")
    p.set_defaults(func=cmd_import_arpa)

    p = sub.add_parser("explore", help="a local web page: per-token surprisal, top-k, attention of runs side by side",
                       description="Serve a page (and a JSON API, docs/explore.md) that scores pasted text with "
                                   "each run. Example: ctxlm explore runs/ptb-lstm runs/ptb-attention")
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories, loaded once")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1, this machine only)")
    p.add_argument("--port", type=option(int, in_range(0, 65535)), default=8765, help="port (default 8765; 0 = any free port)")
    p.add_argument("--cache", action="store_true", help="also serve each neural run with its neural cache "
                   "(the setting `ctxlm tune-cache` recorded, else window 2000, θ 0.3, λ 0.1)")
    p.set_defaults(func=cmd_explore)

    p = sub.add_parser("attention", help="attention heatmap and top predictions of an attention model for one text",
                       description="Writes attention.png (predicted words x attended inputs), predictions.png "
                                   "(top-k next words with natural-log probabilities per position) and attention.json.")
    p.add_argument("run", help=attending)
    p.add_argument("--text", help="the text to explain (whitespace-tokenised)")
    p.add_argument("--split", default="valid", choices=["train", "valid", "test"], help="or take a line of this split")
    p.add_argument("--line", type=option(int, at_least(1)), default=1, help="1-based line number in --split (default 1)")
    p.add_argument("--top", type=option(int, at_least(1)), default=5, help="predictions shown per position")
    p.add_argument("--out", default="attention", help="output folder (default ./attention)")
    common_data(p)
    p.set_defaults(func=cmd_attention)

    p = sub.add_parser("analyze", help="corpus-level analyses of a trained model")
    analyses = p.add_subparsers(dest="analysis", required=True, parser_class=_Parser)
    a = analyses.add_parser("attention-by-position", help="mean attention weight per distance over a split (Daniluk Fig. 4.1)")
    a.add_argument("run", help=attending)
    a.add_argument("--split", default="valid", choices=["train", "valid", "test"])
    a.add_argument("--max-tokens", type=option(int, at_least(0)), default=0, help="only the first N tokens (0 = all)")
    a.add_argument("--out", default="analysis", help="output folder (default ./analysis)")
    common_data(a)
    a.set_defaults(func=cmd_analyze)
    a = analyses.add_parser("memory", help="what a memory network's block attends to (Tran et al. Fig. 3, Fig. 4, Table 3)",
                            description=f"For a run of {with_memory_block}: mean attention per memory position "
                                        "(memory_positions.png), the attention of randomly sampled predictions "
                                        "(memory_samples.png), and the training frequency of (most-attended word, word "
                                        "to predict) pairs by distance where the attention peaks 7 or more words back "
                                        "(memory_cooccurrence.md); JSON beside each. Details: docs/memory.md.")
    a.add_argument("run", help=f"run directory of a {with_memory_block} model")
    a.add_argument("--split", default="test", choices=["train", "valid", "test"])
    a.add_argument("--max-tokens", type=option(int, at_least(0)), default=0, help="only the first N tokens (0 = all)")
    a.add_argument("--samples", type=option(int, at_least(1)), default=100, help="predictions sampled for the heatmap (default 100)")
    a.add_argument("--seed", type=option(int, SEED), default=0, help="seed of the sample")
    a.add_argument("--out", default="analysis", help="output folder (default ./analysis)")
    common_data(a)
    a.set_defaults(func=cmd_analyze_memory)
    a = analyses.add_parser("kernel-ngrams", help="the n-grams each convolution kernel responds to most (Pham Fig. 4.1)",
                            description="Every first-layer kernel applied to every n-gram of a split (n = its width; "
                            "response before batch norm and ReLU, n-grams with <eos> skipped); the top n-grams of "
                            "each kernel go to kernel_ngrams.json, the chosen kernels to the plot and the screen.")
    a.add_argument("run", help=f"run directory of a {spoken(convolutional_families())} model")
    a.add_argument("--split", default="valid", choices=["train", "valid", "test"])
    a.add_argument("--top", type=option(int, at_least(1)), default=5, help="n-grams kept per kernel (default 5)")
    a.add_argument("--kernels", help="kernels to plot and print, 1-based, comma-separated (default the first 8)")
    a.add_argument("--out", default="analysis", help="output folder (default ./analysis)")
    common_data(a)
    a.set_defaults(func=cmd_kernel_ngrams)
    a = analyses.add_parser("position-weights", help="positive mapping-layer weights per context position (Pham Fig. 4.2)",
                            description="For each unit of the layer that reads the context (a CNN's mapping layer) and "
                            "each position, the sum of its positive weights; averaged over units. Position 1 is the "
                            "word nearest the prediction.")
    a.add_argument("run", help="run directory of a feed-forward or convolutional model")
    a.add_argument("--out", default="analysis", help="output folder (default ./analysis)")
    a.set_defaults(func=cmd_position_weights)
    a = analyses.add_parser("lesion", help="perplexity reading only the m nearest positions, m = 1..n, and its power-law "
                            "fit (Pham Fig. 4.3)", description="The mapping-layer weights that read positions beyond the "
                            "m nearest are zeroed; perplexity on a split for each m; log PPL = log c + b log m fitted "
                            "by least squares.")
    a.add_argument("run", help="run directory of a feed-forward or convolutional model")
    a.add_argument("--split", default="valid", choices=["train", "valid", "test"])
    a.add_argument("--max-tokens", type=option(int, at_least(0)), default=0, help="only the first N targets (0 = all)")
    a.add_argument("--out", default="analysis", help="output folder (default ./analysis)")
    common_data(a)
    a.set_defaults(func=cmd_lesion)
    a = analyses.add_parser("categories", help="perplexity by part of speech, frequency band, <unk> and <eos> (Daniluk "
                            "Table 4.12)", description="Perplexity of the targets of each category; part-of-speech "
                            "categories from the corpus's gold tags (Brown), mapped as docs/categories.md says.")
    a.add_argument("runs", nargs="+", help="run directories (trained on the same dataset), compared side by side")
    a.add_argument("--split", default="test", choices=["train", "valid", "test"])
    a.add_argument("--out", default="analysis", help="output folder (default ./analysis)")
    cache_options(a)
    common_data(a)
    a.set_defaults(func=cmd_categories)

    p = sub.add_parser("curves", help="per-epoch validation and training perplexity of runs, as a table and a plot",
                       description="Reads each run's metrics.jsonl (written after every epoch, also while a run is "
                                   "under way) and prints epoch, learning rate, training and validation perplexity "
                                   "and hours of training, the best epoch starred; curves.png overlays the runs. "
                                   "Example: ctxlm curves runs/pham-ptb-baseline-ffnn runs/pham-ptb-cnn")
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories to compare")
    p.add_argument("--out", default="analysis", help="output folder for curves.png and curves.json (default ./analysis)")
    p.set_defaults(func=cmd_curves)

    p = sub.add_parser("reproduce", help="train the rows of a source table, resumably, and report them beside the source",
                       description="Each table of the sources is a file in reproductions/ (ctxlm reproduce --list). "
                       "`ctxlm reproduce TABLE` trains every row without a finished record, each in RUNS/TABLE/ROW, and "
                       "writes results/TABLE/ROW.json after each; Ctrl-C, SIGTERM or --stop-after leaves every row "
                       "resumable, and the same command continues. Example: ctxlm reproduce tran-2 --jobs 2 --stop-after 8h")
    p.add_argument("table", nargs="?", help="table id, e.g. daniluk-4.8 (all tables for --plan, --report, --check)")
    p.add_argument("rows", nargs="*", help="only these rows of the table")
    p.add_argument("--jobs", type=option(int, at_least(1)), default=1, help="rows trained at once, as separate processes "
                   "(default 1); on the CPU each gets cores/N threads unless --set train.threads says otherwise")
    p.add_argument("--stop-after", metavar="DURATION", help="stop every row, resumably, after this long (e.g. 50m, 8h)")
    p.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE",
                   help="override a setting for every row, e.g. --set train.device=cuda (resumed rows: train.* only)")
    p.add_argument("--plan", action="store_true", help="print each row's state, remaining cost and `ctxlm train` command")
    p.add_argument("--measure", action="store_true", help="with --plan: time a few batches of each unstarted row now")
    p.add_argument("--report", action="store_true", help="our figures beside the source's, from the records alone (Markdown)")
    p.add_argument("--page", metavar="FILE", help="with --report: write it between the markers of FILE (docs/results.md)")
    p.add_argument("--check", action="store_true", help="train each recorded row's first batches again and say which rows "
                   "today's code no longer trains as recorded")
    p.add_argument("--list", action="store_true", help="list the tables")
    p.add_argument("--runs", default="runs/reproduce", help="folder of the rows' run directories (default runs/reproduce)")
    p.add_argument("--tables", help="folder of table files (default reproductions/)")
    p.add_argument("--records", help="folder of records (default results/)")
    common_data(p)
    p.set_defaults(func=cmd_reproduce)

    p = sub.add_parser("datasets", help="list the named datasets and where their files were found")
    common_data(p)
    p.set_defaults(func=cmd_datasets)

    p = sub.add_parser("models", help="list the registered models, or one model's options with their defaults")
    p.add_argument("name", nargs="?", help="a model name (e.g. attention): print its [model] keys, defaults and meaning")
    p.set_defaults(func=cmd_models)
    return parser


def main(argv=None) -> int:
    from .outputs import check_outputs

    args = build_parser().parse_args(argv)
    try:
        check_outputs(args)
        return args.func(args)
    except (CtxlmError, OSError) as exc:     # OSError: a file we were told to read or write (missing, no permission, disk full)
        print("ctxlm: error: " + " ".join(str(exc).split("\n")), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("ctxlm: interrupted", file=sys.stderr)
        return 130

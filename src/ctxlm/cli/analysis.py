"""Analysis commands: `attention` for one text, `analyze ANALYSIS` over a split."""
from __future__ import annotations

import functools
import sys
from pathlib import Path

from ..checks import SEED, at_least, in_range, option
from ..errors import CtxlmError
from ..io import atomic_write_text
from ..jsonio import json_text
from .common import (
    Parser,
    cache_options,
    check_split,
    data_dir_option,
    json_option,
    left_to_right,
    note_read_as_stream,
    out_folder_option,
    output_dir,
    pretokenized_option,
    run_argument,
    run_labels,
    split_data,
    split_ids,
    split_option,
    with_cache,
)

TOP = 20        # `attention --top` at most: predictions.png gives each a column


def _attending() -> str:
    from ..models.base import families, spoken

    return f"run directory of a model that exposes attention: {spoken(families(lambda cls: cls.exposes_attention))}"


def add_attention(sub) -> None:
    p = sub.add_parser("attention", help="attention heatmap and top predictions of an attention model for one text",
                       description="Writes attention.png (predicted words x attended inputs), predictions.png "
                                   "(top-k next words with natural-log probabilities per position) and attention.json "
                                   "for at most --words predictions from --start; a longer text's others are left out, "
                                   "with a note. The model reads the text only up to the last of them.")
    run_argument(p, _attending())
    p.add_argument("--text", help="the text to explain (tokenised by the run's text recipe, a line break read as <eos>), read from the run's start state as `ctxlm score` reads a line (each line from the zero state if trained on sentences)")
    pretokenized_option(p, "--text")
    split_option(p, "valid", "without --text, explain a line of this split")
    p.add_argument("--line", type=option(int, at_least(1)), help="without --text, the 1-based line number in --split (default 1)")
    p.add_argument("--top", type=option(int, in_range(1, TOP)), default=5,
                   help=f"predictions shown per position, at most {TOP} (default %(default)s)")
    p.add_argument("--start", type=option(int, at_least(1)), default=1,
                   help="1-based number of the first word whose prediction is explained (default %(default)s)")
    p.add_argument("--words", type=option(int, at_least(1)), default=50,
                   help="predictions explained and plotted, from --start (default %(default)s); the plot shows the inputs "
                        "they attend to, at most as many before them")
    out_folder_option(p, "attention")
    data_dir_option(p)
    p.set_defaults(func=cmd_attention)


def cmd_attention(args) -> int:
    from ..analysis.attention import explain, plot_heatmap, plot_top_predictions, write_json
    from ..run import load, pair_words

    if args.text is not None and (args.split_chosen or args.line is not None):
        raise CtxlmError("--text gives the text to explain, --split and --line choose a line of a split instead: give one or the other")
    args.line = args.line or 1
    run = load(args.run, data_dir=args.data_dir)
    if args.text is not None:           # a line break is `<eos>`, as explore and generate --prompt read it
        words = pair_words(args.text, split=functools.partial(run.words, pretokenized=args.pretokenized))[0]
        words = words[:-1] if words[-1:] == ["<eos>"] else words       # the text's end is read as <eos> anyway
        if not words:
            raise CtxlmError("--text has no words; give the text to explain, or leave --text out for --split/--line")
    else:
        import itertools

        from ..data.load import load_corpus
        from ..data.vocab import EOS

        d = run.config.data
        splits = load_corpus(d.dataset, args.data_dir, {"train": d.train, "valid": d.valid, "test": d.test},
                             prepared=d.prepared).splits
        check_split(run, args, list(splits), args.split)
        lines = [list(words) for end, words in itertools.groupby(splits[args.split], lambda t: t == EOS) if not end]
        if not 1 <= args.line <= len(lines):
            raise CtxlmError(f"--line {args.line}: the {args.split} split has {len(lines)} non-empty lines")
        words = lines[args.line - 1]
    result = explain(run, words, args.top, args.start, args.words)
    unknown = [word for word in dict.fromkeys(words) if word not in run.vocab]
    if unknown:
        print(f"note: word(s) outside the vocabulary of {args.run}, read and scored as <unk>: {' '.join(unknown)}",
              file=sys.stderr)
    last = args.start + len(result["targets"]) - 1
    if args.start > 1 or last < len(words) + 1:     # predictions of the text left out, before or after
        print(f"note: explained predictions {args.start}-{last} of {len(words) + 1} "
              f"(the {len(words)} words and the <eos> after them); --start and --words choose others", file=sys.stderr)
    out = output_dir(args)
    write_json(result, out / "attention.json")
    plot_heatmap(result, out / "attention.png")
    plot_top_predictions(result, out / "predictions.png")
    print(f"wrote {out / 'attention.png'}, {out / 'predictions.png'} and {out / 'attention.json'}"
          + ("" if args.text is not None else f" (line {args.line} of the {args.split} split)"))
    return 0


def add_analyze(sub) -> None:
    """`analyze` and its analyses, each with its options."""
    from ..analysis.feedforward import convolutional_families
    from ..models.base import families, spoken

    with_memory_block = spoken(families(lambda cls: cls.memory_block))
    feedforward = "run directory of a feed-forward or convolutional model"
    p = sub.add_parser("analyze", help="corpus-level analyses of a trained model",
                       description="Corpus-level analyses of a trained model.")
    analyses = p.add_subparsers(dest="analysis", required=True, parser_class=Parser)

    def max_tokens(a, what="tokens"):
        a.add_argument("--max-tokens", type=option(int, at_least(0)), default=0, help=f"only the first N {what} (default %(default)s: all)")

    a = analyses.add_parser("attention-by-position", help="mean attention weight per distance over a split (Daniluk "
                            "Fig. 4.1), and how peaked it is",
                            description="Mean attention weight per distance back (attention_by_position.png, .json) "
                            "and its spread: the entropy of each prediction's weights over log(slots), 1 when "
                            "uniform (Salton et al.'s 'smoothing effect'), and the largest weight against 1/slots.")
    run_argument(a, _attending())
    split_option(a, "valid", "the split to read")
    max_tokens(a)
    out_folder_option(a, "analysis")
    data_dir_option(a)
    a.set_defaults(func=cmd_attention_by_position)
    a = analyses.add_parser("memory", help="what a memory network's block attends to (Tran et al. Fig. 3, Fig. 4, Table 3)",
                            description=f"For a run of {with_memory_block}: mean attention per memory position "
                                        "(memory_positions.png), the attention of randomly sampled predictions "
                                        "(memory_samples.png), and the training frequency of (most-attended word, word "
                                        "to predict) pairs by distance where the attention peaks 7 or more words back "
                                        "(memory_cooccurrence.md); JSON beside each. Details: docs/memory.md.")
    run_argument(a, f"run directory of a {with_memory_block} model")
    split_option(a, "test", "the split to read")
    max_tokens(a)
    a.add_argument("--samples", type=option(int, at_least(1)), default=100, help="predictions in the heatmap (default %(default)s)")
    a.add_argument("--seed", type=option(int, SEED), default=0, help="seed of the sample (default %(default)s)")
    out_folder_option(a, "analysis")
    data_dir_option(a)
    a.set_defaults(func=cmd_memory)
    a = analyses.add_parser("kernel-ngrams", help="the n-grams each convolution kernel responds to most (Pham Fig. 4.1)",
                            description="Every first-layer kernel applied to every n-gram of a split (n = its width; "
                            "response before batch norm and ReLU, n-grams with <eos> skipped); the top n-grams of "
                            "each kernel go to kernel_ngrams.json, the chosen kernels to the plot and the screen.")
    run_argument(a, f"run directory of a {spoken(convolutional_families())} model")
    split_option(a, "valid", "the split whose n-grams are read")
    a.add_argument("--top", type=option(int, at_least(1)), default=5, help="n-grams kept per kernel (default %(default)s)")
    a.add_argument("--kernels", help="kernels to plot and print, 1-based, comma-separated (default the first 8)")
    out_folder_option(a, "analysis")
    data_dir_option(a)
    a.set_defaults(func=cmd_kernel_ngrams)
    a = analyses.add_parser("position-weights", help="positive mapping-layer weights per context position (Pham Fig. 4.2)",
                            description="For each unit of the layer that reads the context (a CNN's mapping layer) and "
                            "each position, the sum of its positive weights; averaged over units. Position 1 is the "
                            "word nearest the prediction.")
    run_argument(a, feedforward)
    out_folder_option(a, "analysis")
    json_option(a, 'print {"positions": the rows of position_weights.json, "highest": the 5 positions of the largest '
                'shares, largest first} as JSON instead of the table')
    a.set_defaults(func=cmd_position_weights)
    a = analyses.add_parser("lesion", help="perplexity reading only the m nearest positions, m = 1..n, and its power-law "
                            "fit (Pham Fig. 4.3)", description="The mapping-layer weights that read positions beyond the "
                            "m nearest are zeroed; perplexity on a split for each m; log PPL = log c + b log m fitted "
                            "by least squares.")
    run_argument(a, feedforward)
    split_option(a, "valid", "the split to score")
    max_tokens(a, "targets")
    out_folder_option(a, "analysis")
    json_option(a, "print lesion.json's content (rows, exponent, scale) as JSON instead of the table")
    data_dir_option(a)
    a.set_defaults(func=cmd_lesion)
    a = analyses.add_parser("categories", help="perplexity by part of speech, frequency band, <unk> and <eos> (Daniluk "
                            "Table 4.12)", description="Perplexity of the targets of each category; part-of-speech "
                            "categories from the corpus's gold tags (Brown), mapped as docs/categories.md says.")
    a.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories (trained on the same dataset), compared side by side")
    split_option(a, "test", "the split to score")
    out_folder_option(a, "analysis")
    cache_options(a)
    data_dir_option(a)
    a.set_defaults(func=cmd_categories)


def cmd_attention_by_position(args) -> int:
    from ..analysis.attention import PLOTTED, attention_by_distance, extra_slot, plot_by_distance, write_json
    from ..run import load

    run = load(args.run, start=False)
    ids = split_ids(run, args)
    found = attention_by_distance(run, ids, args.max_tokens)
    out = output_dir(args)
    write_json(found, out / "attention_by_position.json")
    extra = extra_slot(run.model)
    cut = plot_by_distance(found["by_distance"], run.config.model.name, out / "attention_by_position.png", extra, PLOTTED)
    print(f"{args.split} split" + (", each sentence read alone (the run's sentence regime)"
                                   if run.config.data.batching == "sentence" else ""))
    print(f"{'distance':>8}{'mean attention':>16}{'positions':>12}")
    for r in found["by_distance"]:
        print(f"{(extra if r['distance'] < 0 else r['distance']):>8}{r['mean_attention']:>16.4f}{r['positions']:>12,}")
    if cut:
        print(f"the plot shows distances up to {PLOTTED}; the {cut} beyond are in the table and the JSON")
    spread = found["spread"]
    if spread is None:
        print("spread: no prediction with 2 or more slots to spread over")
    else:
        print(f"spread over {spread['predictions']:,} predictions with 2 or more slots: entropy / log(slots) "
              f"{spread['normalised_entropy']:.3f} (1 = uniform), largest weight {spread['largest_weight']:.3f} "
              f"(uniform {spread['uniform_weight']:.3f})")
    print(f"wrote {out / 'attention_by_position.png'} and {out / 'attention_by_position.json'}")
    return 0


def cmd_memory(args) -> int:
    from ..analysis import memory
    from ..analysis.attention import write_json
    from ..run import load

    run = load(args.run, start=False)
    memory.require_memory(run)
    data = split_data(run, args, args.split, "train")
    records = memory.memory_records(run, data.ids[args.split], args.max_tokens, run.config.data.eval_chunk)
    name = f"{run.config.model.name} ({Path(args.run).name})"
    out = output_dir(args)
    positions = memory.position_means(records)
    sampled = memory.samples(records, run.vocab, args.samples, args.seed)
    table = memory.cooccurrence(records, data.ids["train"], run.vocab)
    for label, result in (("positions", positions), ("samples", sampled), ("cooccurrence", table)):
        write_json({"run": str(args.run), "split": args.split, label: result}, out / f"memory_{label}.json")
    memory.plot_positions(positions, name, out / "memory_positions.png")
    memory.plot_samples(sampled, name, out / "memory_samples.png")
    atomic_write_text(out / "memory_cooccurrence.md", memory.cooccurrence_markdown(
        table, f"{name}, {args.split} split: co-occurrence frequency against attention distance (Tran Table 3)"))
    print(f"{args.split} split")
    print(f"{'position':>9}{'mean attention':>16}{'full memory':>13}{'predictions':>13}")
    cell = lambda value, width: f"{'–' if value is None else f'{value:.4f}':>{width}}"     # noqa: E731  (no prediction has it)
    for r in positions["positions"]:
        print(f"{r['position']:>9}{cell(r['mean_attention'], 16)}{cell(r['mean_attention_full_memory'], 13)}{r['predictions']:>13,}")
    print(f"\n{'d':>3}{'pairs':>9}{'mu':>10}   most frequent pairs")
    for r in table["rows"]:
        mu = "-" if r["mean_frequency"] is None else f"{r['mean_frequency']:.1f}"
        print(f"{r['d']:>3}{r['pairs']:>9,}{mu:>10}   " + ", ".join(f"{a}->{w} ({f})" for a, w, f in r["examples"]))
    print(memory.eos_note(table))
    print(f"wrote {', '.join(str(out / f) for f in ('memory_positions.png', 'memory_samples.png', 'memory_cooccurrence.md'))} "
          "and their JSON")
    return 0


def cmd_kernel_ngrams(args) -> int:
    from ..analysis.attention import write_json
    from ..analysis.feedforward import plot_ngrams, require_feedforward, top_ngrams
    from ..run import load

    run = load(args.run, start=False)
    model = require_feedforward(run, "kernel-ngrams", convolutional=True)
    rows = top_ngrams(model, run.vocab, split_ids(run, args), args.top)
    numbers = args.kernels.split(",") if args.kernels is not None else []
    if not all(k.strip().isdecimal() and len(k.strip()) <= 6 and 1 <= int(k) <= len(rows) for k in numbers):
        raise CtxlmError(f"--kernels {args.kernels!r}: kernel numbers from 1 to {len(rows)}, comma-separated")
    shown = [rows[int(k) - 1] for k in numbers] or rows[:8]
    out = output_dir(args)
    write_json(rows, out / "kernel_ngrams.json")
    plot_ngrams(shown, out / "kernel_ngrams.png")
    for row in shown:
        print(f"kernel {row['number']:>4} (w = {row['width']}): " + "; ".join(g["ngram"] for g in row["top"]))
    print(f"wrote {out / 'kernel_ngrams.png'} and {out / 'kernel_ngrams.json'} (all {len(rows)} kernels, {args.split} split)")
    return 0


def cmd_position_weights(args) -> int:
    from ..analysis.attention import write_json
    from ..analysis.feedforward import plot_positions, positive_weight_by_position, require_feedforward
    from ..run import load

    run = load(args.run, start=False)
    rows = positive_weight_by_position(require_feedforward(run, "position-weights", by_position=True))
    out = output_dir(args)
    write_json(rows, out / "position_weights.json")
    plot_positions(rows, run.config.model.name, out / "position_weights.png")
    if args.json:
        highest = sorted(rows, key=lambda r: -r["share"])[:5]
        print(json_text({"positions": rows, "highest": [r["position"] for r in highest]}, indent=2))
        return 0
    print(f"{'position':>8}{'positive weight':>18}{'share':>8}")
    for r in rows:
        print(f"{r['position']:>8}{r['positive_weight']:>18.4f}{r['share']:>8.3f}")
    print(f"wrote {out / 'position_weights.png'} and {out / 'position_weights.json'}")
    return 0


def cmd_lesion(args) -> int:
    from ..analysis.attention import write_json
    from ..analysis.feedforward import lesion_curve, plot_lesion, require_feedforward
    from ..run import load

    run = load(args.run, start=False)
    model = require_feedforward(run, "lesion", by_position=True)
    ids = split_ids(run, args)
    if args.max_tokens:
        ids = ids[:args.max_tokens + 1]
    result = lesion_curve(model, ids, run.config.data.eval_chunk)
    out = output_dir(args)
    write_json(result, out / "lesion.json")
    plot_lesion(result, run.config.model.name, out / "lesion.png")
    if args.json:
        print(json_text(result, indent=2))
        return 0
    print(f"{'positions':>9}{'perplexity':>12}")
    for r in result["rows"]:
        print(f"{r['positions']:>9}{r['ppl']:>12.2f}")
    print(f"power-law fit: perplexity ≈ {result['scale']:.2f} · m^{result['exponent']:.3f} "
          f"({result['rows'][0]['tokens']:,} targets of the {args.split} split)")
    print(f"wrote {out / 'lesion.png'} and {out / 'lesion.json'}")
    return 0


def cmd_categories(args) -> int:
    from ..analysis.attention import write_json
    from ..analysis.categories import check_same_dataset, check_same_targets, plot_categories
    from ..evaluation.categories import category_perplexities
    from ..evaluation.scoring import stream_log_probs
    from ..run import load

    command = "analyze categories"
    check_same_dataset(args.runs, command)
    tables = {}
    for label, run_dir in zip(run_labels(args.runs), args.runs):
        run = load(run_dir)
        left_to_right(run, command)
        note_read_as_stream(run, command, f"'all targets' is not `ctxlm eval {run_dir}`'s perplexity")
        model, _ = with_cache(run, args)
        data = split_data(run, args, args.split, "train")
        tags = data.tags[args.split] if data.tags else None
        log_probs = stream_log_probs(model, data.ids[args.split], run.config.data.eval_chunk)
        tables[label + (" + cache" if args.cache else "")] = category_perplexities(log_probs, data.ids[args.split], run.vocab,
                                                                                   tags, data.counts("train"))
    check_same_targets(tables, args.split, command)
    out = output_dir(args)
    write_json({"split": args.split, "runs": tables}, out / "categories.json")
    plot_categories(tables, out / "categories.png")
    first = next(iter(tables.values()))
    if not any(r["group"] == "part of speech" for r in first):
        print("(this dataset has no part-of-speech tags: only frequency bands and <unk>/<eos>; Brown has gold tags)")
    print(f"{args.split} split")
    width = max(20, *(len(label) + 2 for label in tables))             # whole labels: two may differ only in a prefix
    print(f"{'category':<22}{'tokens':>9}" + "".join(f"{label:>{width}}" for label in tables))
    for i, row in enumerate(first):
        print(f"{row['category']:<22}{row['tokens']:>9,}" + "".join(f"{t[i]['ppl']:>{width}.1f}" for t in tables.values()))
    print(f"wrote {out / 'categories.png'} and {out / 'categories.json'}")
    return 0

"""Using a trained run directly: `score` text, `generate` text, `explore` runs in a local web page."""
from __future__ import annotations

import dataclasses

from ..checks import SEED, at_least, in_range, option
from ..generate import LIMITS
from ..jsonio import json_text
from .common import cache_options, data_dir_option, note_read_as_stream, pretokenized_option, run_argument, with_cache
from .dynamic import dynamic_options, with_dynamic


def add_score(sub) -> None:
    p = sub.add_parser("score", help="per-token log-probabilities of text, as JSON lines",
                       description="Score each input line (tokenised by the run's text recipe, <eos> appended); natural-log "
                                   "probabilities. The same numbers as the Python API's Run.score (docs/python.md).")
    run_argument(p)
    p.add_argument("--input", help="text file, one sentence per line (default: standard input)")
    pretokenized_option(p, "each line")
    p.add_argument("--stream", action="store_true", help="carry the model state from line to line instead of starting each "
                   "from the run's start state (the lines read as one document, as `ctxlm eval --file` reads a file of one "
                   "sentence per line, except for a run trained on sentences alone, which eval reads a sentence at a "
                   "time; a run whose recipe cuts sentences (gutenberg) still reads a line a text here)")
    cache_options(p)
    dynamic_options(p, "each line from the trained weights; with --stream, the lines as one stream")
    data_dir_option(p)
    p.set_defaults(func=cmd_score)


def cmd_score(args) -> int:
    from ..data.corpus import iter_lines
    from ..run import load

    run = with_dynamic(load(args.run, data_dir=args.data_dir), args)
    run = dataclasses.replace(run, model=with_cache(run, args)[0])
    lines = iter_lines(args.input or "-", allow_empty=True)
    if args.stream:
        note_read_as_stream(run, "score --stream", "its figures are not `ctxlm eval --file`'s, which reads the sentences alone")
    for scored in run.iter_score(lines, document=args.stream, pretokenized=args.pretokenized):
        print(json_text({"text": scored.text, "tokens": scored.tokens, "unknown": scored.unknown, "unknown_count": scored.unknown_count,
                          "log_probs": [round(x, 6) for x in scored.log_probs], "total": round(scored.total, 6),
                          "ppl": round(scored.perplexity, 4)}))
    return 0


def add_generate(sub) -> None:
    p = sub.add_parser("generate", help="sample text from a trained run",
                       description="Continue --prompt by sampling from the run's model, word by word, never <eos> or "
                                   "<unk> unless --special (each <eos> then ends a line) or --stop-at-eos (the first ends "
                                   "the sample); with --num above 1 a blank line separates the samples.")
    run_argument(p)
    p.add_argument("--prompt", default="", help="text to continue (tokenised by the run's text recipe)")
    pretokenized_option(p, "--prompt")
    p.add_argument("--max-tokens", type=option(*LIMITS["max_tokens"]), default=50, help="words to sample after the prompt "
                   "(default 50; with --special an `<eos>` counts, and ends a line of the output)")
    p.add_argument("--temperature", type=option(*LIMITS["temperature"]), default=1.0,
                   help="divides the log-probabilities: below 1 sharper, above 1 flatter, 0 = greedy (default %(default)s)")
    p.add_argument("--top-k", type=option(*LIMITS["top_k"]), default=0,
                   help="sample among the k most likely words (default %(default)s: all)")
    p.add_argument("--top-p", type=option(*LIMITS["top_p"]), default=1.0,
                   help="nucleus sampling threshold in (0, 1] (default %(default)s: all words)")
    p.add_argument("--num", type=option(int, at_least(1)), default=1, help="number of samples (default %(default)s)")
    p.add_argument("--seed", type=option(int, SEED), default=0, help="seed of the sampling (default 0: the same "
                   "samples on every call; give another number for others)")
    p.add_argument("--stop-at-eos", action="store_true", help="end each sample at its first <eos> (a sentence)")
    p.add_argument("--special", action="store_true", help="let <eos> and <unk> be drawn (by default they never are: the "
                   "other words' probabilities are renormalised); each <eos> drawn ends a line")
    data_dir_option(p)
    p.set_defaults(func=cmd_generate)


def cmd_generate(args) -> int:
    import functools

    import torch

    from ..io import warn
    from ..run import load, pair_words

    run = load(args.run, data_dir=args.data_dir)
    generator = torch.Generator().manual_seed(args.seed)        # one generator: the samples differ, reproducibly
    for number in range(args.num):
        words = run.generate(args.prompt, args.max_tokens, args.temperature, args.top_k, args.top_p, generator,
                             args.special, args.stop_at_eos, pretokenized=args.pretokenized)
        prompt = pair_words(args.prompt, split=functools.partial(run.words, pretokenized=args.pretokenized))[0]  # as read
        lines = " ".join(prompt + words).split("<eos>")
        print(("\n" if number else "") + "\n".join(line.strip() for line in lines if line.strip()))
    unknown = [word for word in dict.fromkeys(prompt) if word not in run.vocab]
    if unknown:         # after the samples: a run or prompt that generate refuses gets its one error line alone
        warn(f"note: prompt word(s) outside the vocabulary of {args.run}, read as <unk>: {' '.join(unknown)}")
    return 0


def add_explore(sub) -> None:
    p = sub.add_parser("explore", help="a local web page: per-token surprisal, top-k, attention of runs side by side",
                       description="Serve a page (and a JSON API, docs/explore.md) that scores pasted text with "
                                   "each run. Example: ctxlm explore runs/ptb-lstm runs/ptb-attention")
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories, loaded once")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1, this machine only)")
    p.add_argument("--port", type=option(int, in_range(0, 65535)), default=8765, help="port (default 8765; 0 = any free port)")
    p.add_argument("--cache", action="store_true", help="also serve each neural run with its neural cache "
                   "(the setting `ctxlm tune-cache` recorded, else window 2000, θ 0.3, λ 0.1; a record of a tuning that helped "
                   "nothing is refused)")
    p.add_argument("--dynamic", action="store_true", help="also serve each neural run with dynamic evaluation (the "
                   "setting `ctxlm tune-dynamic` recorded, else the defaults; each request from the trained weights)")
    pretokenized_option(p, "pasted text (unless a request says \"pretokenized\": false)")
    data_dir_option(p)
    p.set_defaults(func=cmd_explore)


def cmd_explore(args) -> int:
    from ..explore.server import serve

    serve(args.runs, args.host, args.port, args.cache, args.dynamic, args.data_dir, args.pretokenized)
    return 0

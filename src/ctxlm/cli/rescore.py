"""`rescore`: n-best lists rescored with a run or a mixture of two, LM weight and word-insertion penalty chosen
on a development list (docs/rescoring.md)."""
from __future__ import annotations

from pathlib import Path

from ..checks import at_least, edge_note, in_range, option, rule_option
from ..errors import CtxlmError
from ..io import atomic_write_text, warn
from ..jsonio import json_text
from .common import comma_values, data_dir_option, json_option, pretokenized_option, run_argument


def add_rescore(sub) -> None:
    p = sub.add_parser("rescore", help="rerank n-best lists with a run (or a mixture of two); word error rate",
                       description="Each hypothesis scores: first-pass score + α · log p_LM(words <eos>) + β · words. "
                                   "α (LM weight) and β (word-insertion penalty) are chosen on --dev by a grid (fewest "
                                   "word errors), or given. Writes the reranked lists and the one-best; with --refs, "
                                   "the word error rate. Formats: docs/rescoring.md.")
    run_argument(p, "run directory (any model, Kneser-Ney and the bidirectional RM included)")
    p.add_argument("nbest", help="the n-best lists to rescore: 'UTTERANCE-ID SCORE WORD ...' a line")
    p.add_argument("--refs", help="their references, 'UTTERANCE-ID WORD ...' a line: report the word error rate")
    p.add_argument("--dev", metavar="NBEST", help="development n-best lists on which α and β are chosen (never the lists rescored)")
    p.add_argument("--dev-refs", metavar="FILE", help="the development lists' references (needed with --dev)")
    p.add_argument("--lm-weight", type=rule_option("rescore.lm_weight"), help="α, instead of choosing it on --dev")
    p.add_argument("--penalty", type=rule_option("rescore.penalty"), help="β with --lm-weight (default 0)")
    p.add_argument("--lm-weights", help="the α grid for --dev, comma-separated (default 0,0.05,0.1,...,20)")
    p.add_argument("--penalties", help="the β grid for --dev, comma-separated (default -10,-7,-5,...,5,7,10)")
    p.add_argument("--mix", metavar="OTHER_RUN", help="score with the mixture (1 - λ) p_RUN + λ p_OTHER per token "
                   "(same vocabulary; e.g. an LSTM with a Kneser-Ney 5-gram)")
    p.add_argument("--mix-weight", type=option(float, in_range(0, 1)), help="λ for --mix (default: maximum likelihood "
                   "on the --dev references)")
    p.add_argument("--costs", action="store_true", help="the files' scores are costs, lower is better (as Kaldi "
                   "writes them): they are negated")
    p.add_argument("--out", metavar="FILE", default="rescored.jsonl", help="the reranked lists, one JSON line per hypothesis, best first "
                   "(default ./rescored.jsonl)")
    p.add_argument("--one-best", metavar="FILE", help="each utterance's chosen hypothesis, 'UTTERANCE-ID WORD ...' "
                   "(default one_best.txt in --out's folder)")
    p.add_argument("--batch-size", type=option(int, at_least(1)), default=50, help="hypotheses per forward pass (default 50)")
    pretokenized_option(p, "each hypothesis")
    data_dir_option(p)
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="cpu", help="where the runs score (default cpu; auto: a GPU when there is one)")
    json_option(p, "print the summary as JSON")
    p.set_defaults(func=cmd_rescore)


def _check(args) -> None:
    if args.mix_weight is not None and not args.mix:
        raise CtxlmError("--mix-weight is the weight of the run given with --mix; add --mix OTHER_RUN")
    if args.dev and not args.dev_refs:
        raise CtxlmError("--dev: give --dev-refs FILE too; α and β are chosen by the word errors against them")
    if args.dev_refs and not args.dev:
        raise CtxlmError("--dev-refs: give --dev NBEST too, the development lists they are the references of")
    if args.dev and args.lm_weight is not None:
        raise CtxlmError("--lm-weight fixes α, --dev chooses it: give one (to fix α and choose β, give --lm-weights A)")
    if not args.dev and args.lm_weight is None:
        raise CtxlmError("choose α and β on a development list (--dev NBEST --dev-refs FILE) or give --lm-weight "
                         "(and --penalty)")
    if args.penalty is not None and args.lm_weight is None:
        raise CtxlmError("--penalty goes with --lm-weight; with --dev give a grid with --penalties")
    if (args.lm_weights is not None or args.penalties is not None) and not args.dev:
        raise CtxlmError("--lm-weights and --penalties are the grid searched on --dev; add --dev and --dev-refs")
    if args.mix and args.mix_weight is None and not args.dev:
        raise CtxlmError("--mix: give --mix-weight, or --dev with --dev-refs to choose it")
    from ..outputs import same_file
    if args.dev and same_file(Path(args.dev), Path(args.nbest)):
        raise CtxlmError(f"--dev {args.dev}: that is {args.nbest}, the lists being rescored; α and β chosen on them would "
                         "make their word error rate optimistic: give held-out development lists")


def cmd_rescore(args) -> int:
    from ..outputs import check_output
    from ..rescore.nbest import error_rate, read_nbest, read_references, word_errors
    from ..rescore.rerank import LM_WEIGHTS, PENALTIES, LanguageModel, best, lm_scores, ranked, totals, tune
    from ..run import load
    from ..training.preflight import pick_device

    _check(args)
    inputs = [p for p in (args.run, args.nbest, args.refs, args.dev, args.dev_refs, args.mix) if p]
    check_output(args.one_best, "--one-best", inputs + [args.out])
    lists = read_nbest(args.nbest, args.costs)
    references = read_references(args.refs, lists, args.nbest) if args.refs else None
    dev = read_nbest(args.dev, args.costs) if args.dev else None
    dev_references = read_references(args.dev_refs, dev, args.dev) if dev else None
    weights = comma_values("--lm-weights", args.lm_weights, "rescore.lm_weight") if args.lm_weights is not None else LM_WEIGHTS
    penalties = comma_values("--penalties", args.penalties, "rescore.penalty") if args.penalties is not None else PENALTIES

    device = pick_device(args.device, "--device")
    runs = [load(args.run, device, data_dir=args.data_dir)] + ([load(args.mix, device, data_dir=args.data_dir)] if args.mix else [])
    model = LanguageModel(runs, args.mix_weight, args.batch_size, args.pretokenized)
    summary = {"run": str(args.run), "mix": args.mix, "nbest": str(args.nbest), "utterances": len(lists),
               "hypotheses": sum(len(h) for h in lists.values())}
    if args.mix and args.mix_weight is None:
        summary["mix_weight_chosen_on"] = str(args.dev_refs)
        model.choose_mix_weight(list(dev_references.values()))
    summary["mix_weight"] = model.mix_weight
    if dev is not None:
        tuned = _named(args.dev, tune, dev, lm_scores(model, dev, f"rescore: {args.dev}"), dev_references, weights, penalties)
        weight, penalty = tuned["lm_weight"], tuned["penalty"]
        summary["dev"] = {"nbest": str(args.dev), "utterances": len(dev), **tuned}
    else:
        weight, penalty = args.lm_weight, args.penalty or 0.0
    summary.update(lm_weight=weight, penalty=penalty)

    lm = lm_scores(model, lists, f"rescore: {args.nbest}")
    _named(args.nbest, lambda: [totals(h, lm[u], weight, penalty) for u, h in lists.items()])     # all finite
    records, chosen = [], {}
    for utterance, hypotheses in lists.items():
        total = totals(hypotheses, lm[utterance], weight, penalty)
        for rank, i in enumerate(ranked(hypotheses, lm[utterance], weight, penalty), 1):
            h = hypotheses[i]
            records.append({"id": utterance, "rank": rank, "total": round(total[i], 6), "score": h.score,
                            "lm": round(lm[utterance][i], 6), "words": len(h.words), "hypothesis": " ".join(h.words),
                            "line": h.line})
        chosen[utterance] = hypotheses[best(hypotheses, lm[utterance], weight, penalty)].words
    if references is not None:
        first_pass = {u: h[max(range(len(h)), key=lambda i: h[i].score)].words for u, h in lists.items()}
        oracle = {u: min((x.words for x in h), key=lambda w: word_errors(references[u], w)) for u, h in lists.items()}
        summary["wer"] = {"rescored": error_rate(references, chosen), "first_pass": error_rate(references, first_pass),
                          "oracle": error_rate(references, oracle)}
    atomic_write_text(args.out, "".join(json_text(r) + "\n" for r in records))
    atomic_write_text(args.one_best, "".join(f"{u} {' '.join(w)}".rstrip() + "\n" for u, w in chosen.items()))
    if args.json:
        print(json_text(summary, indent=2))
        return 0
    _print(summary, args)
    return 0


def _named(path, function, *args):
    """`function(*args)`, a CtxlmError about a line of `path` naming it."""
    try:
        return function(*args)
    except CtxlmError as exc:
        raise CtxlmError(f"{path}, {exc}") from None


def _print(summary: dict, args) -> None:
    print(f"{args.nbest}: {summary['utterances']:,} utterances, {summary['hypotheses']:,} hypotheses")
    if summary["mix"]:
        how = "given" if "mix_weight_chosen_on" not in summary else f"maximum likelihood on {args.dev_refs}"
        print(f"LM: (1 - λ) {args.run} + λ {args.mix}, λ = {summary['mix_weight']:.4f} ({how})")
    if "dev" in summary:
        d = summary["dev"]
        print(f"chosen on {args.dev} ({d['utterances']:,} utterances, grid of {len(d['grid'])}): LM weight {d['lm_weight']:g}, "
              f"penalty {d['penalty']:g}, dev WER {100 * d['wer']:.2f}% (oracle {100 * d['oracle_errors'] / d['reference_words']:.2f}%)")
        if d["at_edge"]:
            warn(edge_note(d["at_edge"], "--lm-weights, --penalties"))
        if d["lm_weight"] == 0:
            warn(f"note: LM weight 0 chosen: the language model lowers no error on {args.dev}; the one-best is the "
                 "first pass's (with the penalty)")
    else:
        print(f"LM weight {summary['lm_weight']:g}, penalty {summary['penalty']:g} (given)")
    if "wer" in summary:
        for name in ("first_pass", "rescored", "oracle"):
            w = summary["wer"][name]
            print(f"WER {name.replace('_', '-'):<11}{100 * w['wer']:7.2f}%  ({w['errors']:,} errors / {w['reference_words']:,} words)")
    print(f"reranked lists: {args.out}; one-best: {args.one_best}")

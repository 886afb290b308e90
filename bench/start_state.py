"""Issue 58: what a run's start state changes where texts are read alone, from zero (`load(start=False)`) and from
the start state (`load()`), in one process: the first-token gap on PTB valid sentences (mean log p of each
sentence's first token inside the document minus alone; the document's first sentence left out), LAMBADA dev
last-word accuracy (`ctxlm lambada`'s reading: each passage's tokens, as the file has them, alone after `<eos>`), MSR Sentence Completion accuracy (`ctxlm
complete`'s reading: each candidate sentence alone) and, with `--nbest DIR` (bench/synthetic_nbest.py's lists),
the rescoring WER of `ctxlm rescore --dev` (α and β chosen on the development lists, each hypothesis alone).

    python bench/start_state.py RUN [--sentences 200] [--passages N] [--no-msr] [--nbest DIR] [--data-dir DIR]

Prints JSON. Backs docs/python.md, "Texts read alone: the start state".
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def first_token_gap(run, lines: list[str]) -> dict:
    alone = [s.log_probs[0] for s in run.score(lines, pretokenized=True)][1:]
    inside = [s.log_probs[0] for s in run.score(lines, document=True, pretokenized=True)][1:]
    mean_alone, mean_inside = sum(alone) / len(alone), sum(inside) / len(inside)
    return {"alone": round(mean_alone, 4), "inside": round(mean_inside, 4), "gap_nats": round(mean_inside - mean_alone, 4)}


def rescoring_wer(run, folder: Path) -> dict:
    """Test WER of the lists in `folder` rescored with α, β chosen on its development lists (`ctxlm rescore --dev`)."""
    from ctxlm.rescore.nbest import error_rate, read_nbest, read_references
    from ctxlm.rescore.rerank import LanguageModel, best, lm_scores, tune

    dev, test = read_nbest(folder / "dev.txt"), read_nbest(folder / "test.txt")
    dev_refs, refs = read_references(folder / "dev_refs.txt", dev, folder / "dev.txt"), read_references(folder / "refs.txt", test, folder / "test.txt")
    model = LanguageModel([run], pretokenized=True)
    tuned = tune(dev, lm_scores(model, dev), dev_refs)
    lm = lm_scores(model, test)
    chosen = {u: h[best(h, lm[u], tuned["lm_weight"], tuned["penalty"])].words for u, h in test.items()}
    return {"lm_weight": tuned["lm_weight"], "penalty": tuned["penalty"], "dev_wer": round(tuned["wer"], 5),
            **{k: round(v, 5) if isinstance(v, float) else v for k, v in error_rate(refs, chosen).items()}}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", help="a trained run on PTB (its vocabulary is PTB's)")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--sentences", type=int, default=200, help="PTB valid sentences for the first-token gap (≥ 2)")
    parser.add_argument("--passages", type=int, default=0, help="LAMBADA dev passages (0: all; -1: none)")
    parser.add_argument("--no-msr", action="store_true", help="leave MSR Sentence Completion out")
    parser.add_argument("--nbest", type=Path, help="a folder of bench/synthetic_nbest.py's lists, for the rescoring WER")
    args = parser.parse_args()
    if args.sentences < 2:
        parser.error("--sentences: at least 2 (the document's first sentence is left out)")
    from ctxlm.data.corpus import read_lambada
    from ctxlm.data.questions import read_msr_completion
    from ctxlm.data.registry import locate
    from ctxlm.evaluation.completion import answer_questions
    from ctxlm.evaluation.lambada import score_passages
    from ctxlm.run import load

    valid = locate("ptb", "valid", args.data_dir)
    lines = [line.strip() for line in open(valid, encoding="utf-8") if line.strip()][:args.sentences]
    passages = []
    if args.passages >= 0:
        passages = read_lambada(locate("lambada", "test", args.data_dir))
        passages = passages[:args.passages or None]
    questions = [] if args.no_msr else read_msr_completion(locate("msr-completion", "questions", args.data_dir),
                                                           locate("msr-completion", "answers", args.data_dir))
    report = {"run": args.run, "sentences": len(lines), "passages": len(passages), "questions": len(questions)}
    for name, start in (("zero", False), ("start_state", True)):
        began = time.time()
        run = load(args.run, data_dir=args.data_dir, start=start)
        if start and run.model.start is None:
            report[name] = "none: the run's texts read alone start from zeros (trained on sentences alone, or no state)"
            break
        figures = {"first_token": first_token_gap(run, lines)}
        if passages:
            summary, _ = score_passages(run.model, run.vocab, passages, chunk=run.config.data.eval_chunk)
            figures["lambada"] = {k: summary[k] for k in ("accuracy", "target_ppl", "passage_ppl", "unknown_targets")}
        if questions:
            summary, _ = answer_questions(run.model, run.vocab, questions)
            figures["msr"] = {k: v for k, v in summary.items() if k in ("accuracy", "answered", "correct")}
        if args.nbest:
            figures["rescoring"] = rescoring_wer(run, args.nbest)
        figures["seconds"] = round(time.time() - began, 1)
        report[name] = figures
        print(json.dumps({name: figures}), flush=True)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()

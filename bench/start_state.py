"""Issue 58: what a run's start state changes where texts are read alone, from zero (`load(start=False)`) and from
the start state (`load()`), in one process: the first-token gap on PTB valid sentences (mean log p of each
sentence's first token inside the document minus alone; the document's first sentence left out), LAMBADA dev
last-word accuracy (`ctxlm lambada`'s reading: each passage alone after `<eos>`; the passage's words through the
run's text recipe, as `continuation` and the harness read them) and MSR Sentence Completion accuracy (`ctxlm
complete`'s reading: each candidate sentence alone).

    python bench/start_state.py RUN [--sentences 200] [--passages N] [--no-msr] [--data-dir DIR]

Prints JSON. Backs docs/python.md, "Texts read alone: the start state".
"""
from __future__ import annotations

import argparse
import json
import time


def first_token_gap(run, lines: list[str]) -> dict:
    alone = [s.log_probs[0] for s in run.score(lines, pretokenized=True)][1:]
    inside = [s.log_probs[0] for s in run.score(lines, document=True, pretokenized=True)][1:]
    mean_alone, mean_inside = sum(alone) / len(alone), sum(inside) / len(inside)
    return {"alone": round(mean_alone, 4), "inside": round(mean_inside, 4), "gap_nats": round(mean_inside - mean_alone, 4)}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", help="a trained run on PTB (its vocabulary is PTB's)")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--sentences", type=int, default=200, help="PTB valid sentences for the first-token gap")
    parser.add_argument("--passages", type=int, default=0, help="LAMBADA dev passages (0: all; -1: none)")
    parser.add_argument("--no-msr", action="store_true", help="leave MSR Sentence Completion out")
    args = parser.parse_args()
    from ctxlm.data.corpus import read_lambada, read_msr_completion
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
            read = [run.words(" ".join(p)) for p in passages]
            summary, _ = score_passages(run.model, run.vocab, read, chunk=run.config.data.eval_chunk)
            figures["lambada"] = {k: summary[k] for k in ("accuracy", "target_ppl", "passage_ppl", "unknown_targets")}
        if questions:
            summary, _ = answer_questions(run.model, run.vocab, questions)
            figures["msr"] = {k: v for k, v in summary.items() if k in ("accuracy", "answered", "correct")}
        figures["seconds"] = round(time.time() - began, 1)
        report[name] = figures
        print(json.dumps({name: figures}), flush=True)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()

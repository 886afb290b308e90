"""Issue 58, "speed where users compare": ARPA export and Kneser-Ney sentence scoring, each against a reference
measured in the same run.

- Export: `write_arpa` (whole arrays of lines, models/arpa_lines.py) against the same file written a line at a
  time (`entry_line` per n-gram, the writer before issue 58) and against the estimation of the same tables;
  both files' sha256 must agree.
- Scoring: `Run.sentence_log_probs` and `Run.score` (pretokenized: the corpus is tokenised already) on the first
  200 valid sentences against the `kenlm` module's `Model.score(bos=True, eos=True)` on the ARPA just written, and
  against the padded-batch path every model takes (`LanguageModel.sentence_log_prob` on `SentenceBatches`, the path
  KN took before issue 58): the best of `--repeat` timings each, and the first call on a freshly loaded run (which
  builds the tables' hash indexes) once; the differences of our sums from the batch path's (each sentence is summed
  on its own, the batches sum padded rows) and from KenLM's (the ARPA's 7 decimals) are reported.

Times are CPU seconds of this process (`time.process_time`; the machine may be shared) and wall seconds.

    python bench/kn_speed.py [--config configs/ngram/ptb-kn5.toml] [--data-dir DIR] [--run RUN] [--sentences 200]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import tempfile
import time
from pathlib import Path

import numpy as np
import torch


def timed(call):
    """(result, CPU seconds, wall seconds) of one call."""
    cpu, wall = time.process_time(), time.perf_counter()
    result = call()
    return result, time.process_time() - cpu, time.perf_counter() - wall


def best(call, repeat: int) -> float:
    """The least wall time of `repeat` calls (seconds)."""
    return min(timed(call)[2] for _ in range(repeat))


def one_line_at_a_time(model, vocab, path: Path) -> None:
    """The ARPA file as written before issue 58: each entry formatted on its own."""
    from ctxlm.data.vocab import EOS
    from ctxlm.models.arpa import LN10
    from ctxlm.models.arpa_lines import entry_line

    names = np.array([("</s>" if w == EOS else w) for w in vocab.words] + ["<s>"], dtype=object)
    words = [None, np.arange(model.base)[:, None]]
    for n in range(2, model.order + 1):
        keys = model.tables[n - 1].keys
        words.append(np.concatenate([words[n - 1][keys // model.base], (keys % model.base)[:, None]], 1))
    with open(path, "w", encoding="utf-8") as out:
        out.write("\\data\\\n")
        out.writelines(f"ngram {n}={table.keys.size}\n" for n, table in enumerate(model.tables, 1))
        for n, table in enumerate(model.tables, 1):
            out.write(f"\n\\{n}-grams:\n")
            log_prob = np.where(np.isfinite(table.log_prob), table.log_prob / LN10, -99.0)
            backoff = table.log_backoff / LN10 if n < model.order else np.zeros(table.keys.size)
            out.writelines(entry_line(p, " ".join(row), b) for p, row, b in zip(log_prob, names[words[n]], backoff))
        out.write("\n\\end\\\n")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def batched_sums(run, lines: list[str], batch_size: int = 50) -> list[float]:
    """Sentence log-probabilities through padded batches, the path of every model (KN's before issue 58)."""
    from ctxlm.data.batching import SentenceBatches
    from ctxlm.data.vocab import EOS

    batches = SentenceBatches([run.vocab.encode(line.split() + [EOS]) for line in lines], batch_size, run.vocab.eos)
    sums = [0.0] * len(lines)
    with torch.no_grad():
        for number, rows in enumerate(batches.indices):
            batch = batches.batch(number)
            total = run.model.sentence_log_prob(torch.cat([batch.inputs[:, :1], batch.targets], 1))
            for i, row in enumerate(rows):
                sums[row] = float(total[i])
    return sums


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/ngram/ptb-kn5.toml", help="a kneser-ney preset to estimate")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--run", default=None, help="score and export this n-gram run instead (no estimate timing)")
    parser.add_argument("--sentences", type=int, default=200, help="valid sentences scored")
    parser.add_argument("--repeat", type=int, default=30, help="timings of the scoring calls; the best is kept")
    args = parser.parse_args()
    import kenlm

    import ctxlm
    from ctxlm.config import load_toml
    from ctxlm.data.load import prepare_data
    from ctxlm.models import build_model
    from ctxlm.models.arpa import write_arpa
    from ctxlm.training.count import estimate_run

    report: dict = {"torch_threads": torch.get_num_threads()}
    scratch = Path(tempfile.mkdtemp(prefix="kn_speed."))
    config = load_toml(args.config)
    data = prepare_data(config, args.data_dir)
    if args.run is None:
        model, cpu, wall = timed(lambda: build_model(config.model, len(data.vocab)).estimate(data.ids["train"][1:].numpy()))
        report["estimate"] = {"cpu_s": round(cpu, 3), "wall_s": round(wall, 3), "ngrams": model.ngram_counts()}
        del model
        estimate_run(config, scratch / "run", args.data_dir, log=lambda *a: None)
    run = ctxlm.load(args.run or scratch / "run", data_dir=args.data_dir)

    write_arpa(run.model, run.vocab, scratch / "ours.arpa")          # the mapped tables read once, for both writers
    _, cpu, wall = timed(lambda: write_arpa(run.model, run.vocab, scratch / "ours.arpa"))
    _, ref_cpu, ref_wall = timed(lambda: one_line_at_a_time(run.model, run.vocab, scratch / "reference.arpa"))
    export = {"ngrams": sum(t.keys.size for t in run.model.tables), "cpu_s": round(cpu, 3), "wall_s": round(wall, 3),
              "a_line_at_a_time_cpu_s": round(ref_cpu, 3), "a_line_at_a_time_wall_s": round(ref_wall, 3),
              "speedup_cpu": round(ref_cpu / cpu, 1), "identical": sha256(scratch / "ours.arpa") == sha256(scratch / "reference.arpa")}
    if "estimate" in report:
        export["vs_estimate_cpu"] = round(cpu / report["estimate"]["cpu_s"], 2)
        export["a_line_at_a_time_vs_estimate_cpu"] = round(ref_cpu / report["estimate"]["cpu_s"], 2)
    report["export"] = export

    words = run.vocab.decode(data.prefix("valid", 200 * args.sentences)[1:].tolist())
    lines = " ".join(words).split(" <eos>")[:args.sentences]        # the first sentences of valid, tokenised
    lines = [line.strip() for line in lines]
    reference = kenlm.Model(str(scratch / "ours.arpa"))
    fresh = ctxlm.load(args.run or scratch / "run", data_dir=args.data_dir)
    _, _, first_wall = timed(lambda: fresh.sentence_log_probs(lines, pretokenized=True))     # builds the hash indexes
    ours = run.sentence_log_probs(lines, pretokenized=True)
    theirs = [reference.score(line, bos=True, eos=True) * math.log(10) for line in lines]
    times = {"kenlm": best(lambda: [reference.score(line, bos=True, eos=True) for line in lines], args.repeat),
             "sentence_log_probs": best(lambda: run.sentence_log_probs(lines, pretokenized=True), args.repeat),
             "score": best(lambda: run.score(lines, pretokenized=True), args.repeat),
             "padded_batches": best(lambda: batched_sums(run, lines), args.repeat)}
    report["scoring"] = {"sentences": len(lines), "tokens": sum(len(line.split()) + 1 for line in lines),
                         "first_call_ms": round(first_wall * 1e3, 1),
                         **{f"{k}_ms": round(v * 1e3, 3) for k, v in times.items()},
                         **{f"{k}_vs_kenlm": round(v / times["kenlm"], 1) for k, v in times.items() if k != "kenlm"},
                         "max_abs_diff_vs_padded_batches": float(max(abs(a - b) for a, b in zip(ours, batched_sums(run, lines)))),
                         "max_abs_diff_vs_kenlm": float(max(abs(a - b) for a, b in zip(ours, theirs)))}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()

"""`ctxlm curves`: the per-epoch curves of runs, as a table and a plot."""
from __future__ import annotations

import sys

from ..errors import CtxlmError
from .common import out_folder_option, output_dir, run_labels


def add_curves(sub) -> None:
    p = sub.add_parser("curves", help="per-epoch validation and training perplexity of runs, as a table and a plot",
                       description="Reads each run's metrics.jsonl (written after every epoch, also while a run is "
                                   "under way) and prints epoch, learning rate, training and validation perplexity "
                                   "and hours of training, the best epoch starred; curves.png overlays the runs. A run with no "
                                   "finished epoch (or a count-based one) is skipped with a note on stderr. "
                                   "Example: ctxlm curves runs/pham-ptb-baseline-ffnn runs/pham-ptb-cnn")
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories to compare")
    out_folder_option(p, "analysis", " for curves.png and curves.json")
    p.set_defaults(func=cmd_curves)


def cmd_curves(args) -> int:
    from ..analysis.attention import write_json
    from ..analysis.curves import NoCurve, best_epoch, figures_kind, perplexity_cell, plot_curves, read_curve, read_test_ppl

    labels = run_labels(args.runs)
    curves, shown, skipped = {}, [], []
    for label, run_dir in zip(labels, args.runs):
        try:
            curves[label] = read_curve(run_dir)
            shown.append((label, run_dir))
        except NoCurve as exc:
            skipped.append(str(exc))
    if not curves:
        raise CtxlmError(skipped[0] if len(skipped) == 1 else "no run has a curve to show: " + "; ".join(skipped))
    for reason in skipped:
        print(f"note: skipped {reason}", file=sys.stderr)
    for label, run_dir in shown:
        rows, test = curves[label], read_test_ppl(run_dir)
        best = best_epoch(rows)
        print(f"{label}: {len(rows)} epoch{'s' * (len(rows) != 1)} in {rows[-1]['elapsed_s'] / 3600:.2f} h, {figures_kind(run_dir)}; "
              + (f"best valid {best['valid_ppl']:.2f} (epoch {best['epoch']})" if best else "no finite validation perplexity")
              + (f", test {test:.2f}" if test else ", no test figure (not read yet, or no test split)"))
        print(f"{'epoch':>7}{'lr':>12}{'train ppl':>12}{'valid ppl':>12}{'hours':>8}")
        for r in rows:
            print(f"{r['epoch']:>7}{r['lr']:>12.6g}{perplexity_cell(r['train_ppl'])}{perplexity_cell(r['valid_ppl'])}"
                  f"{r['elapsed_s'] / 3600:>8.2f}" + (" *" if r is best else ""))
    out = output_dir(args)
    write_json(curves, out / "curves.json")
    plot_curves(curves, out / "curves.png")
    print(f"wrote {out / 'curves.png'} and {out / 'curves.json'}")
    return 0

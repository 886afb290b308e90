"""What `ctxlm reproduce` prints: the plan (state, cost, command per row) and the report (our figures
beside the source's, from the records alone), which is also the opening of docs/results.md."""
from __future__ import annotations

import shlex
from pathlib import Path

from ..errors import CtxlmError
from ..io import atomic_write_text, pyplot, save_figure
from ..registry import MODELS
from ..training.optim import next_lr
from . import records
from .rows import RowRun
from .scores import scores_markdown
from .tables import METRICS, Table

MEASURED_BATCHES = 40   # timed by --plan --measure (the first two are not: they warm up)
EVAL_OVERHEAD = 1.1     # validation after each epoch, on top of the training batches (measured: docs/results.md)
PAGE_BEGIN = "<!-- ctxlm reproduce --report: begin (made from results/ by `ctxlm reproduce --report --page docs/results.md`) -->"
PAGE_END = "<!-- ctxlm reproduce --report: end -->"


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 5400 else f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


def epochs_left(train, done: list[dict]) -> int:
    """Epochs left at most: up to train.epochs, and for a decaying rate only until it falls below
    train.min_lr (the rate a finished epoch records is the one it trained at)."""
    left = train.epochs - len(done)
    if train.schedule != "decay" or not train.min_lr:
        return left
    lr, epoch, count = (done[-1]["lr"], len(done), 0) if done else (train.lr, 1, 1)
    while count < left:
        lr = next_lr(lr, train.schedule, train.lr_factor, train.decay_start, epoch, True)
        if lr < train.min_lr:
            break
        epoch, count = epoch + 1, count + 1
    return count


def estimate(run: RowRun, extra: list[str], measure: bool, data_dir=None) -> str:
    """The remaining cost of a row on this machine, from rates measured on it (its own curve, or a
    few batches timed now with `measure`)."""
    resuming = [o for o in run.given(extra) if o.startswith("train.")] if run.started() else []
    config = run.config(run.settings(extra) + resuming)     # a begun run's own, and the train.* this resume gives
    if MODELS[config.model.name].count_based:
        return "count-based: seconds to minutes, no epochs"
    done = run.curve()
    left = max(0, epochs_left(config.train, done))
    if done:
        per_epoch = (done[-1]["elapsed_s"] - (done[-2]["elapsed_s"] if len(done) > 1 else 0)) * EVAL_OVERHEAD
        how = f"{done[-1]['tokens_per_s']:,.0f} tokens/s in its last epoch"
    elif measure:
        found = records.first_batches(config, data_dir, batches=MEASURED_BATCHES, device=config.train.device,
                                      threads=config.train.threads, precision=config.train.precision)
        if not found["tokens_per_s"]:
            return "unknown: the measurement took no time"
        per_epoch = found["train_tokens"] / found["tokens_per_s"] * EVAL_OVERHEAD
        how = f"{found['tokens_per_s']:,.0f} tokens/s measured now, under this machine's present load"
    else:
        return "unknown until measured: add --measure"
    return f"at most {_hours(left * per_epoch)} ({left} epoch{'s' * (left != 1)} left at {how})"


def plan_text(runs: list[RowRun], extra: list[str], measure: bool, data_dir=None) -> str:
    """A line per row (state and remaining cost, then its command), a line per table's unavailable rows."""
    lines, unavailable, states = [], {}, []
    for run in runs:
        if not run.row.runnable:
            unavailable.setdefault((run.table.id, run.row.unavailable), []).append(run.row.id)
            continue
        try:
            status, trainable = run.status(), not run.old_run_here()   # a folder not the row's is never continued
            cost = f"; {estimate(run, extra, measure, data_dir)}" if status != "done" and trainable else ""
            command = "    ctxlm " + shlex.join(run.train_argv(extra, data_dir))
        except CtxlmError as exc:       # this row's preset or run folder: the other rows are still planned
            status, trainable, cost = f"cannot plan: {exc}", False, ""
        states.append(_state(status))
        lines.append(f"{run.name}: {status}{cost}")
        if status != "done" and trainable and not status.startswith("training now"):
            lines.append(command)
    for (table, reason), rows in unavailable.items():
        lines.append(f"{table}: {_many(len(rows), 'row')} unavailable ({reason}): {', '.join(rows)}")
    others = "".join(f", {states.count(state)} {state}" for state in ("outdated", "not the row's run", "not plannable")
                     if state in states)
    lines.append(f"{_many(len(states), 'runnable row')}: {states.count('done')} done, {states.count('training now')} training "
                 f"now, {states.count('stopped')} stopped, {states.count('not started')} not started{others}; "
                 f"{sum(map(len, unavailable.values()))} unavailable")
    return "\n".join(lines)


def _state(status: str) -> str:
    """A row's state as the plan's summary counts it (started: stopped before its first epoch)."""
    for begins, state in (("done", "done"), ("training now", "training now"), ("stopped", "stopped"), ("started", "stopped"),
                          ("not started", "not started"), ("outdated", "outdated"), ("not the row's run", "not the row's run")):
        if status.startswith(begins):
            return state
    return "not plannable"


def _figure(value) -> str:
    """Ours with two decimals; the source's as it prints them (a float keeps its own digits)."""
    return "–" if value is None else f"{value:.2f}" if isinstance(value, float) else str(value)


def _source(row, table: Table) -> str:
    shown = str(row.source.get(table.metric, "–"))
    return shown + (f" ({row.source['valid_ppl']})" if table.metric == "test_ppl" and "valid_ppl" in row.source else "")


def shown(record: dict | None) -> tuple[dict | None, str]:
    """The record whose figures a row shows, and a note: while a row is trained again (`--again`), its newest
    finished earlier run, with how far the new one has come, so that the page keeps the measured figure."""
    if record and not record["finished"]:
        finished = [run for run in record.get("earlier", []) if run.get("finished")]
        if finished:
            epochs = len(record.get("curve", []))
            return finished[-1], f"; an earlier run, trained again now: {epochs} epoch{'s' * (epochs != 1)} so far"
    return record, ""


def verdict(table: Table, row, record: dict | None) -> str:
    """Whether our figure reproduces the source's: the band, or the row's own claim (`below`)."""
    if not row.runnable:
        return f"not here: {row.unavailable}"
    if not record:
        return "not run yet"
    if unset := records.unset_settings(record, row):
        return f"outdated: trained without {', '.join(unset)}, which the table now sets"
    ours = record.get(table.metric)
    if not record["finished"]:
        epochs = len(record.get("curve", []))
        return f"unfinished: {epochs} epoch{'s' * (epochs != 1)} so far"
    if ours is None:
        return f"finished, no {METRICS[table.metric]} in its record"
    if row.below is not None:
        return f"{'✓' if ours < row.below else '✗'} claim: below {row.below}"
    if row.stand_in:
        return "stand-in: no verdict"
    theirs = row.source.get(table.metric)
    if theirs is None:
        return "no source figure"
    gap = ours / theirs - 1
    better = gap < 0 if table.metric != "accuracy" else gap > 0
    if abs(gap) <= table.band:
        return f"✓ within {table.band:.0%}"
    return f"✗ {gap:+.1%}" + (" (better)" if better else "")


def _params(record: dict | None, row) -> str:
    ours = (record or {}).get("parameters") or {}
    total = ours.get("total")
    shown = "–" if not total else f"{total / 1e6:.2f}M" if total >= 1e5 else f"{total:,}"
    return shown + (f" ({row.source['params']})" if row.source.get("params") else "")


def _heading(table: Table) -> list[str]:
    lines = [f"### {table.title}", ""]
    if table.spec or table.note:
        lines += [" ".join(x for x in (f"({table.spec})" if table.spec else "", table.note) if x), ""]
    return lines


def table_markdown(table: Table, records_dir: Path) -> str:
    """One table: our figure, the source's, the verdict, and where ours comes from, row by row."""
    metric = METRICS[table.metric] + (" (valid)" if table.metric == "test_ppl" else "")
    if not any(row.runnable for row in table.rows):
        reasons = sorted({row.unavailable for row in table.rows})
        lines = _heading(table) + [f"Not here: {'; '.join(reasons)}.", "",
                                   f"| row | source: {metric} | params (source) |", "|---|---|---|"]
        lines += [f"| {row.label} | {_source(row, table)} | {row.source.get('params', '–')} |" for row in table.rows]
        return "\n".join(lines) + "\n"
    lines = _heading(table) + [
        f"| row | ours: {metric} | source: {metric} | verdict (band {table.band:.0%}) | params ours "
        "(source) | best epoch | commit | hardware | training |", "|---|---|---|---|---|---|---|---|---|"]
    scored = []
    for row in table.rows:
        record, note = shown(records.load_record(records.record_path(records_dir, *table.record_key(row))))
        if row.runnable:
            scored.append((row, record))
        r = record or {}
        valid = r.get("valid_ppl") if table.metric == "test_ppl" else None
        ours = _figure(r.get(table.metric)) + (f" ({_figure(valid)})" if valid else "")
        hardware = (r.get("hardware") or "–").split(",")[0] + (" (imported)" if r.get("imported") else "")
        commit = (r.get("commits") or ["–"])[-1]
        wall = _hours(r["wall_s"]) if r.get("wall_s") else "–"
        label = row.label + (f" [{row.stand_in}]" if row.stand_in else "") + (f" (= {row.same_as})" if row.same_as else "")
        lines.append(f"| {label} | {ours} | {_source(row, table)} | {verdict(table, row, record)}{note} | {_params(record, row)} | "
                     f"{r.get('best_epoch') or '–'} | {commit} | {hardware} | {wall} |")
    return "\n".join(lines + scores_markdown(table, scored)) + "\n"


def report_markdown(tables: list[Table], records_dir: Path) -> str:
    """The summary, the tables with rows that run here, then those that need data we do not have."""
    rows = [(t, r) for t in tables for r in t.rows]
    runs = {}                            # a row that is another table's run counts once, as --plan counts it: as that row
    for t, r in rows:
        if r.runnable and (t.record_key(r) not in runs or not r.same_as):
            runs[t.record_key(r)] = (t, r)
    found = {key: shown(records.load_record(records.record_path(records_dir, *key)))[0] for key in runs}
    measured = [key for key in runs if (found[key] or {}).get("finished") and not records.unset_settings(found[key], runs[key][1])]
    held = [key for key in measured if verdict(*runs[key], found[key]).startswith("✓")]
    claims = [key for key in held if runs[key][1].below is not None]       # a claim ("below X"), not a source figure
    repeated = sum(r.runnable for _, r in rows) - len(runs)
    summary = (f"{_many(len(rows), 'row')} in {_many(len(tables), 'table')}: {len(runs)} runnable here"
               + (f" (and {repeated} that repeat the run of one of them)" if repeated else "")
               + f", {len(measured)} measured, {len(held) - len(claims)} of them reproduced (within the band of the "
               + "source's figure)" + (f" and {_many(len(claims), 'claim')} holding (a row whose target is a "
                                         "claim, e.g. below our own LSTM)" if claims else "") + ".")
    here = [t for t in tables if any(r.runnable for r in t.rows)]
    elsewhere = [t for t in tables if t not in here]
    parts = [summary, ""]
    if here:
        parts += ["## Tables with rows that run here", ""] + [table_markdown(t, records_dir) for t in here]
    if elsewhere:
        parts += ["## Tables that need data we do not have", ""] + [table_markdown(t, records_dir) for t in elsewhere]
    return "\n".join(parts)


def compared_rows(tables: list[Table], records_dir: Path) -> list[dict]:
    """Every finished perplexity row with a source figure to hold it to (no stand-ins, each run once)."""
    found, seen = [], set()
    for table in tables:
        for row in table.rows:
            key = table.record_key(row)
            theirs = row.source.get("test_ppl")
            record = shown(records.load_record(records.record_path(records_dir, *key)))[0] if row.runnable else None
            if key in seen or table.metric != "test_ppl" or row.stand_in or not isinstance(theirs, (int, float)) \
                    or not (record or {}).get("finished") or record.get("test_ppl") is None \
                    or records.unset_settings(record, row):
                continue
            seen.add(key)
            found.append({"table": table.id, "row": row.label, "source": float(theirs), "ours": record["test_ppl"],
                          "band": table.band})
    return found


def plot_report(tables: list[Table], records_dir: Path, path: Path, named_beyond: float = 0.08) -> int:
    """Ours against the source's test perplexity, one point per measured row, the band shaded (the widest
    of the tables'); rows more than `named_beyond` off are named. Returns the number of points."""
    rows = compared_rows(tables, records_dir)
    if not rows:
        raise CtxlmError("--plot: no finished row with a source test perplexity in the records yet")
    gaps = [r["ours"] / r["source"] - 1 for r in rows]
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 6))
    line = [min(min(r["source"], r["ours"]) for r in rows) - 5, max(max(r["source"], r["ours"]) for r in rows) + 5]
    ax.plot(line, line, color="black", lw=0.8)
    band = max(r["band"] for r in rows)
    ax.fill_between(line, [v * (1 - band) for v in line], [v * (1 + band) for v in line], color="#dddddd",
                    label=f"within {band:.0%}")
    for source in sorted({r["table"].split("-")[0] for r in rows}):
        mine = [r for r in rows if r["table"].split("-")[0] == source]
        ax.scatter([r["source"] for r in mine], [r["ours"] for r in mine], s=18, label=source.capitalize(), zorder=3)
    for r, gap in zip(rows, gaps):
        if abs(gap) > named_beyond:
            ax.annotate(f"{r['table']} {r['row']}", (r["source"], r["ours"]), fontsize=6, xytext=(4, -3),
                        textcoords="offset points")
    held = sum(abs(gap) <= r["band"] for r, gap in zip(rows, gaps))
    ax.set(xlim=line, ylim=line, xlabel="source: test perplexity", ylabel="ctxlm: test perplexity (below the line: better)",
           title=f"{len(rows)} measured rows against their sources: {held} within the band")
    ax.set_aspect("equal")
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    save_figure(fig, path, dpi=100)
    plt.close(fig)
    return len(rows)


def write_page(page: Path, report: str) -> None:
    """Replace the report between the markers of `page` (atomically)."""
    try:
        text = page.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CtxlmError(f"--page {page}: cannot read it ({getattr(exc, 'strerror', None) or exc}); give a Markdown page "
                         "holding the report markers, e.g. docs/results.md") from None
    if PAGE_BEGIN not in text or PAGE_END not in text:
        raise CtxlmError(f"{page}: no report markers; put the lines\n{PAGE_BEGIN}\n{PAGE_END}\nwhere the tables go")
    before, rest = text.split(PAGE_BEGIN, 1)
    after = rest.split(PAGE_END, 1)[1]
    atomic_write_text(page, f"{before}{PAGE_BEGIN}\n{report}{PAGE_END}{after}")


def page_report(page: Path) -> str:
    """The report as the page holds it (what a test compares with `report_markdown`)."""
    text = page.read_text(encoding="utf-8")
    return text.split(PAGE_BEGIN, 1)[1].split(PAGE_END, 1)[0].lstrip("\n")


def _many(count: int, noun: str) -> str:
    """'1 row', '2 rows'."""
    return f"{count} {noun}{'s' * (count != 1)}"

"""`ctxlm reproduce`: train the rows of a source table resumably, and report them beside the source."""
from __future__ import annotations

from pathlib import Path

from ..checks import at_least, option
from ..errors import CtxlmError
from .common import data_dir_option, set_option


def add_reproduce(sub) -> None:
    p = sub.add_parser("reproduce", help="train the rows of a source table, resumably, and report them beside the source",
                       description="Each table of the sources is a file in reproductions/ (ctxlm reproduce --list). "
                       "`ctxlm reproduce TABLE` trains every row without a finished record, each in RUNS/TABLE/ROW, and "
                       "writes results/TABLE/ROW.json after each; Ctrl-C, SIGTERM or --stop-after leaves every row "
                       "resumable, and the same command continues. Example: ctxlm reproduce tran-2 --jobs 2 --stop-after 8h")
    p.add_argument("table", nargs="?", help="table id, e.g. daniluk-4.8 (all tables for --plan, --report, --check)")
    p.add_argument("rows", nargs="*", help="only these rows of the table (to train, --plan, --report, --check)")
    p.add_argument("--jobs", type=option(int, at_least(1)), default=1, help="rows trained at once, as separate processes "
                   "(default 1); on the CPU each gets cores/N threads unless --set train.threads says otherwise")
    p.add_argument("--stop-after", metavar="DURATION", help="stop every row, resumably, after this long (e.g. 50m, 8h)")
    set_option(p, "override a setting for every row, e.g. --set train.device=cuda (a resumed row takes train.* only; "
               "its record keeps the settings its run began with; a Kneser-Ney row takes train.threads alone)")
    p.add_argument("--again", action="store_true", help="train the named rows again though their records are "
                   "finished (e.g. rows --check finds drifted); the old figures stay in the record under 'earlier'. "
                   "Stopped, a row's new run continues without --again (which never continues a run folder)")
    p.add_argument("--plan", action="store_true", help="print each row's state, remaining cost and `ctxlm train` command")
    p.add_argument("--measure", action="store_true", help="with --plan: time a few batches of each unstarted row now")
    p.add_argument("--report", action="store_true", help="our figures beside the source's, from the records alone (Markdown)")
    p.add_argument("--page", metavar="FILE", help="with --report: write it between the markers of FILE (docs/results.md); "
                   "the page holds every table and row, so name none")
    p.add_argument("--plot", metavar="FILE", help="with --report: also draw ours against the source's test perplexity, "
                   "row by row, as a PNG (docs/img/reproduced.png)")
    p.add_argument("--check", action="store_true", help="train each recorded row's first batches again and say which rows "
                   "today's code no longer trains as recorded")
    p.add_argument("--list", action="store_true", help="list the tables")
    p.add_argument("--runs", help="folder of the rows' run directories (default runs/reproduce/ in the project folder: "
                   "the one holding --tables, else the current one if it has reproductions/, else this source checkout)")
    p.add_argument("--tables", help="folder of table files (default reproductions/ in the project folder); its folder "
                   "is the project folder")
    p.add_argument("--records", help="folder of records (default results/ in the project folder)")
    data_dir_option(p)
    p.set_defaults(func=cmd_reproduce)


def cmd_reproduce(args) -> int:
    from ..reproduce import report, rows, runner
    from ..reproduce.tables import load_tables

    _check_modes(args)
    stop_after = runner.parse_duration(args.stop_after) if args.stop_after is not None else None
    root = _project_root(args.tables)
    tables_dir, records_dir = Path(args.tables or root / "reproductions"), Path(args.records or root / "results")
    runs_dir = Path(args.runs or root / "runs" / "reproduce")
    if args.list:
        for table in load_tables(tables_dir):
            print(f"{table.id:16} {sum(r.runnable for r in table.rows):3} of {len(table.rows):3} rows runnable  {table.title}")
        return 0
    if (args.plot or args.page) and not args.report:
        raise CtxlmError("--plot and --page go with --report, e.g. ctxlm reproduce --report --plot rows.png")
    if args.page and args.table:
        raise CtxlmError(f"--page writes every table and row into {args.page}: leave out {' '.join([args.table, *args.rows])} "
                         f"(ctxlm reproduce --report --page {args.page})")
    if args.measure and not args.plan:
        raise CtxlmError("--measure goes with --plan, e.g. ctxlm reproduce tran-2 --plan --measure")
    names = [args.table] if args.table else []
    if not names and not (args.plan or args.report or args.check):
        raise CtxlmError("name a table to train (ctxlm reproduce --list shows them), or give --plan, --report or --check")
    tables = load_tables(tables_dir, names)
    runs = rows.row_runs(tables, args.rows, runs_dir, records_dir, args.again)
    extra = runner.thread_setting(args.set or [], args.jobs) if not args.check else args.set or []
    if args.report:
        if args.records and not records_dir.is_dir():           # training makes it; a report would read nothing
            raise CtxlmError(f"--records {args.records}: no such folder; give the folder that holds the records (TABLE/ROW.json)")
        tables = [table.only(args.rows) for table in tables]
        text = report.report_markdown(tables, records_dir)
        if args.page:
            report.write_page(Path(args.page), text)
            print(f"wrote the report into {args.page}")
        else:
            print(text, end="")
        if args.plot:
            shown = report.plot_report(tables, records_dir, Path(args.plot))
            print(f"wrote {args.plot} ({shown} row{'s' * (shown != 1)} against their sources)")
        return 0
    if args.plan:
        print(report.plan_text(runs, extra, args.measure, args.data_dir))
        return 0
    if args.check:
        return 1 if runner.check(runs, args.data_dir) else 0
    return runner.Runner(args.jobs, stop_after, extra, args.data_dir).run(runs)


def _check_modes(args) -> None:
    """One of --list, --plan, --report and --check at most, and no option that the chosen one would ignore."""
    modes = [name for name in ("--list", "--plan", "--report", "--check") if getattr(args, name[2:])]
    if len(modes) > 1:
        raise CtxlmError(f"{' and '.join(modes)}: give one of them (each is a command of its own)")
    ignored = {"--jobs": args.jobs != 1 and not args.plan, "--stop-after": args.stop_after is not None,   # --plan shows the threads
               "--set": args.set and not args.plan, "--again": args.again and not args.plan}
    for name, given in ignored.items():
        if modes and given:
            also = "" if name == "--stop-after" else " (and --plan, whose commands show it)"
            raise CtxlmError(f"{name} goes with training rows{also}, not with {modes[0]}: leave it out")


def _project_root(tables: str | None) -> Path:
    """The folder with reproductions/, results/ and runs/reproduce/: the one holding --tables, else the current
    one, else this source checkout."""
    if tables:
        return Path(tables).resolve().parent
    for folder in (Path.cwd(), Path(__file__).resolve().parents[3]):
        if (folder / "reproductions").is_dir():
            return folder
    raise CtxlmError("no project folder (one holding reproductions/) here or around this ctxlm: run ctxlm reproduce "
                     "in ctxlm's source folder, or give --tables (its folder's results/ and runs/reproduce/ are used)")

"""Reproduction tables: one TOML file per source table (reproductions/README.md gives the format)."""
from __future__ import annotations

import re
import shlex
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path

from .. import schemas
from ..config import apply_overrides, load_toml
from ..errors import CtxlmError

METRICS = {"test_ppl": "test perplexity", "valid_ppl": "validation perplexity", "accuracy": "accuracy (%)"}
_PPL, _TEXT = schemas.rule("table.perplexity"), schemas.text()
_SOURCE = schemas.record({"train_ppl": _PPL, "valid_ppl": _PPL, "test_ppl": _PPL, "accuracy": schemas.rule("table.accuracy"),
                          "params": _TEXT, "params_without_embeddings": _TEXT}, closed=True,
                         description="the source's figures {train_ppl, valid_ppl, test_ppl, accuracy, params, ...}")
_ROW = schemas.record({
    "id": schemas.text("lowercase letters, digits, dots and hyphens", pattern="^[a-z0-9][a-z0-9.-]*$"),
    "label": _TEXT, "preset": _TEXT, "stand_in": _TEXT, "unavailable": _TEXT, "source": _SOURCE,
    "set": {"type": "array", "items": schemas.text('a "section.key=value" string'), "description": 'a list of "section.key=value" strings'},
    "below": _PPL, "same_as": schemas.text('"TABLE/ROW", e.g. "daniluk-4.8/lstm"', pattern="^[a-z0-9.-]+/[a-z0-9.-]+$"),
}, ("id",), closed=True, description="a row")
_SCORE = schemas.record({
    "name": schemas.text("lowercase letters, digits and hyphens", pattern="^[a-z0-9][a-z0-9-]*$"),
    "command": schemas.text('a ctxlm command line on the run, {run} for its folder, printing JSON (e.g. "lambada {run} --json")',
                            pattern=r"\{run\}"),
    "show": {"type": "array", "items": schemas.text('a key of the JSON, dotted for nested ones ("names.accuracy")'),
             "description": "a list of the JSON's keys"},
    "metric": {"enum": ["accuracy"], "description": '"accuracy": the row\'s figure is this JSON\'s accuracy, in percent'},
}, ("name", "command"), closed=True, description="a score")
# a reproduction table file (reproductions/README.md): what `load_table` checks before it reads a value
TABLE = schemas.record({
    "title": _TEXT, "spec": _TEXT, "note": _TEXT, "band": schemas.rule("table.band"),
    "metric": {"enum": list(METRICS), "description": " or ".join(METRICS)},
    "row": {"type": "array", "items": _ROW, "description": "a list of [[row]] tables"},
    "score": {"type": "array", "items": _SCORE, "description": "a list of [[score]] tables"},
}, closed=True, description="a reproduction table")


@dataclass
class Row:
    id: str
    label: str
    preset: Path | None = None          # resolved against the project folder (the tables folder's parent)
    overrides: list[str] = field(default_factory=list)
    stand_in: str | None = None
    below: float | None = None
    unavailable: str | None = None
    source: dict = field(default_factory=dict)
    same_as: str | None = None          # "TABLE/ROW": the same run as a row of another table (one run, one record)

    @property
    def runnable(self) -> bool:
        return self.unavailable is None


@dataclass
class Score:
    """A ctxlm command run on each finished row's run directory, its JSON kept in the record (reproduce/scores.py)."""
    name: str
    command: str                        # "{run}" stands for the run directory
    show: list[str] = field(default_factory=list)
    metric: str | None = None           # "accuracy": the row's figure is the JSON's accuracy, as a percentage

    def argv(self, run_dir: Path | str) -> list[str]:
        return [part.replace("{run}", str(run_dir)) for part in shlex.split(self.command)]


@dataclass
class Table:
    id: str
    title: str
    spec: str
    metric: str
    band: float
    note: str
    rows: list[Row]
    path: Path
    scores: list[Score] = field(default_factory=list)

    def record_key(self, row: Row) -> tuple[str, str]:
        """(table, row) of the record that holds `row`'s run: its own, or the row it is the same run as."""
        return tuple(row.same_as.split("/")) if row.same_as else (self.id, row.id)

    def row(self, row_id: str) -> Row:
        for row in self.rows:
            if row.id == row_id:
                return row
        raise CtxlmError(f"{self.path}: no row {row_id!r}; rows: {', '.join(r.id for r in self.rows)}")

    def select(self, row_ids: list[str]) -> list[Row]:
        return [self.row(r) for r in row_ids] if row_ids else self.rows

    def only(self, row_ids: list[str]) -> Table:
        """The table with the named rows alone (all of them when none is named)."""
        return replace(self, rows=self.select(row_ids))


def load_table(path: str | Path) -> Table:
    """Read one table file and check it against `TABLE` (reproductions/README.md); presets are resolved against
    the project folder."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise CtxlmError(f"{path}: not valid TOML ({exc})") from None
    schemas.check(data, TABLE, path, "fix the table (reproductions/README.md gives the format)")
    metric = data.get("metric", "test_ppl")
    project, rows = path.resolve().parent.parent, []
    for raw in data.get("row", []):
        if ("preset" in raw) == ("unavailable" in raw):
            raise CtxlmError(f"{path}: row {raw['id']!r} needs either a preset or an `unavailable` reason")
        rows.append(Row(raw["id"], raw.get("label", raw["id"]), project / raw["preset"] if "preset" in raw else None,
                        raw.get("set", []), raw.get("stand_in"), raw.get("below"), raw.get("unavailable"), raw.get("source", {}),
                        raw.get("same_as")))
    ids = [r.id for r in rows]
    if len(set(ids)) != len(ids):
        raise CtxlmError(f"{path}: row {next(i for i in ids if ids.count(i) > 1)!r} appears twice")
    scores = [Score(raw["name"], raw["command"], raw.get("show", []), raw.get("metric")) for raw in data.get("score", [])]
    names = [score.name for score in scores]
    if len(set(names)) != len(names):
        raise CtxlmError(f"{path}: score {next(n for n in names if names.count(n) > 1)!r} appears twice")
    for score in scores:
        if score.metric and score.metric != metric:
            raise CtxlmError(f"{path}: score {score.name!r} gives the row's {score.metric}, but the table's metric is {metric}")
    return Table(path.stem, data.get("title", path.stem), data.get("spec", ""), metric, float(data.get("band", 0.03)),
                 data.get("note", ""), rows, path, scores)


def table_paths(folder: str | Path) -> list[Path]:
    folder = Path(folder)
    if not folder.is_dir():
        raise CtxlmError(f"{folder}: no tables folder (one TOML file per source table; reproductions/README.md)")
    return sorted(folder.glob("*.toml"), key=_natural)


def _natural(path: Path):
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path.stem)]


def load_tables(folder: str | Path, names: list[str] | None = None) -> list[Table]:
    """The named tables of `folder` (every table when `names` is empty)."""
    paths = {p.stem: p for p in table_paths(folder)}
    for name in names or []:
        if name not in paths:
            raise CtxlmError(f"no table {name!r} in {folder}; tables: {', '.join(paths)} (ctxlm reproduce --list)")
    tables = [load_table(paths[n]) for n in (names or paths)]
    loaded = {table.id: table for table in tables}
    for table in tables:
        for row in table.rows:
            if row.same_as:
                _check_same_as(table, row, paths, loaded)
    return tables


def _check_same_as(table: Table, row: Row, paths: dict[str, Path], loaded: dict[str, Table]) -> None:
    """A row that is the same run as another names a row that exists, is no such row itself, and trains with
    the same preset and settings (one run, one record): settings written otherwise to the same effect are the same."""
    where, (other_table, other_row) = f"{table.path}: row {row.id!r}: same_as {row.same_as!r}", row.same_as.split("/")
    if other_table not in paths:
        raise CtxlmError(f"{where}: no table {other_table!r} in {table.path.parent}; name a row of one of {', '.join(paths)}")
    if other_table not in loaded:
        loaded[other_table] = load_table(paths[other_table])
    other = next((r for r in loaded[other_table].rows if r.id == other_row), None)
    if other is None:
        raise CtxlmError(f"{where}: table {other_table} has no row {other_row!r}; "
                         f"its rows: {', '.join(r.id for r in loaded[other_table].rows)}")
    if other is row:
        raise CtxlmError(f"{where}: names the row itself; name the other row that is the same run, or drop same_as")
    if other.same_as:
        raise CtxlmError(f"{where}: that row is itself the same run as {other.same_as}; name {other.same_as}")
    if other.preset != row.preset or not _same_settings(row.preset, row.overrides, other.overrides):
        raise CtxlmError(f"{where}: its preset and set differ from that row's; give both rows the same preset and "
                         "set (one run, one record), or drop same_as")


def _same_settings(preset: Path | None, ours: list[str], theirs: list[str]) -> bool:
    """Whether two rows' `set` lists make the same config from `preset` (`train.lr=1.0` is `train.lr = 1`)."""
    if ours == theirs or preset is None:
        return ours == theirs
    try:
        return apply_overrides(load_toml(preset), ours).to_dict() == apply_overrides(load_toml(preset), theirs).to_dict()
    except CtxlmError:          # a preset or setting that does not load: the settings as written
        return False

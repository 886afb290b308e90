"""Reproduction tables: one TOML file per source table (reproductions/README.md gives the format)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import tomllib

from ..errors import CtxlmError

METRICS = {"test_ppl": "test perplexity", "accuracy": "accuracy (%)"}
_ID = re.compile(r"^[a-z0-9][a-z0-9.-]*$")
_TABLE_KEYS = {"title", "spec", "metric", "band", "note", "row"}
_ROW_KEYS = {"id", "label", "preset", "set", "stand_in", "below", "unavailable", "source", "same_as"}


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
class Table:
    id: str
    title: str
    spec: str
    metric: str
    band: float
    note: str
    rows: list[Row]
    path: Path

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


def _check_keys(path: Path, where: str, given: dict, allowed: set) -> None:
    unknown = sorted(set(given) - allowed)
    if unknown:
        raise CtxlmError(f"{path}: unknown key {unknown[0]!r} in {where}; keys: {', '.join(sorted(allowed))}")


def load_table(path: str | Path) -> Table:
    """Read and check one table file; presets are resolved against the project folder."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise CtxlmError(f"{path}: not valid TOML ({exc})") from None
    _check_keys(path, "the table", data, _TABLE_KEYS)
    metric = data.get("metric", "test_ppl")
    if metric not in METRICS:
        raise CtxlmError(f"{path}: metric {metric!r}; choose {' or '.join(METRICS)}")
    project, rows = path.resolve().parent.parent, []
    for number, raw in enumerate(data.get("row", []), 1):
        where = f"row {number}"
        _check_keys(path, where, raw, _ROW_KEYS)
        if not _ID.match(str(raw.get("id", ""))):
            raise CtxlmError(f"{path}: {where} needs an id of lowercase letters, digits, dots and hyphens")
        if "same_as" in raw and not re.match(r"^[a-z0-9.-]+/[a-z0-9.-]+$", str(raw["same_as"])):
            raise CtxlmError(f"{path}: row {raw['id']!r}: same_as is \"TABLE/ROW\", e.g. \"daniluk-4.8/lstm\"")
        if ("preset" in raw) == ("unavailable" in raw):
            raise CtxlmError(f"{path}: row {raw['id']!r} needs either a preset or an `unavailable` reason")
        overrides = raw.get("set", [])
        if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
            raise CtxlmError(f"{path}: row {raw['id']!r}: set is a list of \"section.key=value\" strings")
        rows.append(Row(raw["id"], raw.get("label", raw["id"]), project / raw["preset"] if "preset" in raw else None,
                        overrides, raw.get("stand_in"), raw.get("below"), raw.get("unavailable"), raw.get("source", {}),
                        raw.get("same_as")))
    ids = [r.id for r in rows]
    if len(set(ids)) != len(ids):
        raise CtxlmError(f"{path}: row {next(i for i in ids if ids.count(i) > 1)!r} appears twice")
    return Table(path.stem, data.get("title", path.stem), data.get("spec", ""), metric, float(data.get("band", 0.03)),
                 data.get("note", ""), rows, path)


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
    return [load_table(paths[n]) for n in (names or paths)]

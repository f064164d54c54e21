"""Strict CSV reading shared by the importers (standard library csv only).

`read_rows(path, required)` yields `Row` objects carrying their physical line number; the typed
getters on `Row` raise `ImportFormatError` naming file, line and column. Header names are stripped
of surrounding spaces (the Philly machine list writes `machineId, number of GPUs, ...`), as are cell
values; a column named twice in the header is an error. Blank lines are skipped. A row with a different number of fields than the header is an error.
`apportion` is the shared largest-remainder rule the importers use to split quotas.
"""
from __future__ import annotations

import csv
import math
import os
import unicodedata
from datetime import datetime
from typing import Iterator, Sequence

from .errors import ImportFormatError

MAX_TEXT = 256  # characters in a text cell (a name, a model, a queue): enough for every shipped trace
# A trace job's bounds, one for every importer (new-user trial 13, F6: a duration of 1e300 was replayed and printed
# as 300-digit numbers): a run of at most 366 days (the platform's longest time limit, time_limit_seconds), at most
# MAX_JOB_GPUS GPUs (Philly's largest job has 128, openb's largest pod 8).
MAX_DURATION = 366 * 86400
MAX_JOB_GPUS = 65_536


class Row:
    __slots__ = ("path", "line", "_cells")

    def __init__(self, path, line: int, cells: dict[str, str]):
        self.path = path
        self.line = line
        self._cells = cells

    def get(self, column: str, default: str = "") -> str:
        """The cell of an optional column, or `default` when the file has no such column."""
        return self._cells.get(column, default)

    def error(self, column: str | None, rule: str) -> ImportFormatError:
        return ImportFormatError(self.path, self.line, column, rule)

    def text(self, column: str, *, allow_empty: bool = False, max_length: int = MAX_TEXT) -> str:
        """A cell of at most `max_length` characters, none of them a control character (a NUL, an escape
        sequence: they would reach a terminal or a report raw; new-user trial 13, F6)."""
        value = self._cells[column]
        if not value and not allow_empty:
            raise self.error(column, "expected a non-empty value, got ''")
        bad = next((c for c in value if unicodedata.category(c) == "Cc"), None)
        if bad is not None:
            raise self.error(column, f"expected text without control characters, got {value!r} (holds {bad!r})")
        if len(value) > max_length:
            raise self.error(column, f"expected at most {max_length} characters, got {len(value)}")
        return value

    def integer(self, column: str, *, minimum: int | None = None, empty: int | None = None,
                maximum: int | None = None) -> int:
        """An integer >= minimum (and <= maximum). `empty` (if not None) is returned for an empty cell."""
        value = self._cells[column]
        if value == "" and empty is not None:
            return empty
        try:
            number = int(value)
        except ValueError:
            number = None
        if number is None or (minimum is not None and number < minimum):
            kind = {None: "an integer", 0: "a non-negative integer", 1: "a positive integer"}.get(
                minimum, f"an integer >= {minimum}")
            raise self.error(column, f"expected {kind}, got {value!r}")
        if maximum is not None and number > maximum:
            raise self.error(column, f"expected an integer <= {maximum:,}, got {value!r}")
        return number

    def number(self, column: str, *, minimum: float | None = None, maximum: float | None = None,
               unit: str = "") -> float:
        """A finite number >= minimum (and <= maximum; `unit` names the bound's unit in the message)."""
        value = self._cells[column]
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not math.isfinite(number) or (minimum is not None and number < minimum):
            kind = "a non-negative number" if minimum == 0 else "a number"
            if minimum not in (None, 0):
                kind = f"a number >= {minimum}"
            raise self.error(column, f"expected {kind}, got {value!r}")
        if maximum is not None and number > maximum:
            bound = f"{int(maximum):,}" if float(maximum).is_integer() else f"{maximum:,g}"
            raise self.error(column, f"expected a number <= {bound}{unit}, got {value!r}")
        return number

    def timestamp(self, column: str) -> datetime:
        """A naive 'YYYY-MM-DD HH:MM:SS' timestamp."""
        value = self._cells[column]
        try:
            if len(value) != 19 or value[10] != " ":
                raise ValueError(value)
            return datetime.fromisoformat(value)
        except ValueError:
            raise self.error(column, f"expected a timestamp like 2017-10-09 07:01:55, got {value!r}") from None


def read_rows(path, required: Sequence[str]) -> Iterator[Row]:
    """Yield the data rows of a CSV file whose header holds every column in `required`."""
    name = os.path.basename(os.fspath(path))
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        while header is not None and not any(cell.strip() for cell in header):
            header = next(reader, None)  # leading blank lines
        if header is None:
            raise ImportFormatError(name, 1, None, f"empty file: expected a header with columns {', '.join(required)}")
        header = [cell.strip() for cell in header]
        # a column named twice was read silently with the last one winning (new-user trial 14, F18)
        twice = next((column for i, column in enumerate(header) if column in header[:i]), None)
        if twice is not None:
            raise ImportFormatError(name, reader.line_num, twice or None,
                                    f"column {twice or '(empty name)'} given twice in the header: name each "
                                    f"column once (header has: {', '.join(header)})")
        missing = [column for column in required if column not in header]
        if missing:
            raise ImportFormatError(
                name, reader.line_num, None,
                f"missing required column(s) {', '.join(missing)} (header has: {', '.join(header)})")
        width = len(header)
        for cells in reader:
            if not cells or (len(cells) == 1 and not cells[0].strip()):
                continue
            if len(cells) != width:
                raise ImportFormatError(name, reader.line_num, None,
                                        f"expected {width} fields like the header, got {len(cells)}")
            yield Row(name, reader.line_num, {k: v.strip() for k, v in zip(header, cells)})


def apportion(total: int, weights: dict[str, int]) -> dict[str, int]:
    """Split `total` in proportion to `weights` (largest remainder, ties by name); sums to total."""
    weight_sum = sum(weights.values())
    if weight_sum == 0:
        return {key: 0 for key in weights}
    exact = {key: total * w / weight_sum for key, w in weights.items()}
    shares = {key: int(value) for key, value in exact.items()}
    left = total - sum(shares.values())
    for key in sorted(exact, key=lambda k: (-(exact[k] - shares[k]), k))[:left]:
        shares[key] += 1
    return shares

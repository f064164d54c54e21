"""The one error every importer raises on malformed input.

A message always names the file (base name), the 1-based physical line number (the header is line 1)
and, where one applies, the column, then the rule that was broken, e.g.

    philly_jobs_pollux.csv line 17, column num_gpus: expected a positive integer, got 'x'

Importers parse the whole file before returning, so an error means nothing was returned.
"""
from __future__ import annotations

import os


class ImportFormatError(ValueError):
    """Malformed importer input. Attributes: file, line (int or None), column (str or None), rule."""

    def __init__(self, file, line: int | None, column: str | None, rule: str):
        self.file = os.path.basename(os.fspath(file))
        self.line = line
        self.column = column
        self.rule = rule
        where = self.file
        if line is not None:
            where += f" line {line}"
        if column is not None:
            where += f", column {column}" if line is not None else f" column {column}"
        super().__init__(f"{where}: {rule}")

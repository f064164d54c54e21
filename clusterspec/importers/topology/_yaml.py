"""YAML loading that remembers the line of every mapping, for error messages naming a line.

`load_all(text, b)` returns the documents; every dict is a `LineDict` whose `.line` is the 1-based line
where the mapping starts. YAML syntax errors raise ImportFormatError with the parser's line.
"""
from __future__ import annotations

import yaml

__all__ = ["LineDict", "load_all", "line_of"]


class LineDict(dict):
    line: int | None = None


class _Loader(yaml.SafeLoader):
    pass


def _construct_mapping(loader, node, deep=False):
    mapping = LineDict(loader.construct_mapping(node, deep=deep))
    mapping.line = node.start_mark.line + 1
    return mapping


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_all(text: str, builder) -> list:
    """All documents of `text` (empty ones dropped). Raises ImportFormatError on a YAML syntax error."""
    try:
        return [d for d in yaml.load_all(text, Loader=_Loader) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise builder.error(mark.line + 1 if mark else None,
                            f"not valid YAML: {getattr(exc, 'problem', None) or exc}") from None


def line_of(obj, default: int | None = None) -> int | None:
    return getattr(obj, "line", None) or default

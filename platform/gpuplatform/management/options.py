"""argparse `type`s for the management commands' numeric options: a value outside its bounds is argparse's own
usage error naming the option (`argument --port: must be from 1 to 65535, got 99999`) before anything runs,
never a traceback from deep inside (new-user trial 7, F14; trial 10, F22: `demo --port 99999` ended in an
OverflowError from socket.bind)."""
from __future__ import annotations

import argparse
import math

# The longest span a day or second option of replay, demo and the what-if takes: 3660 days (ten years; the openb
# importer's time bound and the what-if variants' seconds bound, scheduler/forecast/variants.CONFIG_RANGES). A
# shipped trace spans under 150 days and a job runs at most 366; `replay --until 1e303` ended in a traceback and
# `--until 1e20` printed a 21-digit span and GPU-hour ledger (new-user trial 14, F1).
MAX_DAYS = 3660
MAX_SECONDS = MAX_DAYS * 86400


def _bound(minimum: float | None, above: float | None, at_most: float | None) -> str:
    """The rule of number()'s bounds in words, as replay's span options say it ("zero or more", "above zero")."""
    parts = []
    if above is not None:
        parts.append("above zero" if above == 0 else f"above {above:g}")
    if minimum is not None:
        parts.append("zero or more" if minimum == 0 else f"{minimum:g} or more")
    if at_most is not None:
        parts.append(f"at most {at_most:g}")
    return " and ".join(parts)


def number(minimum: float | None = None, *, above: float | None = None, at_most: float | None = None):
    """A finite float with bounds: `minimum` (>=), `above` (>), `at_most` (<=). A refusal says the whole rule
    ("must be a finite number zero or more, got -1"), the words replay's span checks use (new-user trial 14, F21)."""
    rule = _bound(minimum, above, at_most)
    message = f"must be a finite number{' ' + rule if rule else ''}, got {{}}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if (not math.isfinite(value) or (above is not None and value <= above)
                or (minimum is not None and value < minimum) or (at_most is not None and value > at_most)):
            raise argparse.ArgumentTypeError(message.format(text))
        return value

    parse.__name__ = "number"
    return parse


def integer(minimum: int | None = None, maximum: int | None = None):
    """A whole number from `minimum` to `maximum` (either bound optional)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if minimum is not None and maximum is not None and not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(f"must be from {minimum} to {maximum}, got {text}")
        if minimum is not None and value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {text}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"must be at most {maximum}, got {text}")
        return value

    parse.__name__ = "integer"
    return parse


PORT = integer(1, 65535)

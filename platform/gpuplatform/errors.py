"""The platform's one error for bad input, raised by every service before it writes anything."""
from __future__ import annotations

__all__ = ["ValidationError"]


class ValidationError(Exception):
    """Invalid input. `errors` maps the offending field (e.g. "roles[0].min_available") to the rule."""

    def __init__(self, errors: dict[str, str] | str, field: str = "__all__"):
        self.errors = dict(errors) if isinstance(errors, dict) else {field: errors}
        super().__init__("; ".join(f"{k}: {v}" for k, v in self.errors.items()))

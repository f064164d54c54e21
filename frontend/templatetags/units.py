"""Template filters for units: `{{ seconds|duration }}` -> "2h 5m" (human units on pages; JSON and CSV keep
the raw seconds)."""
from django import template

register = template.Library()


@register.filter
def duration(seconds) -> str:
    """Seconds (int, float or None) -> '42s', '1h 2m', '5d 3h 17m'; None -> '—'."""
    from ..views import human_seconds

    try:
        return human_seconds(None if seconds is None or seconds == "" else float(seconds))
    except (TypeError, ValueError):
        return "—"

"""Template filters for units: `{{ seconds|duration }}` -> "2h 5m" (human units on pages; JSON and CSV keep
the raw seconds). human_seconds is the one such formatting of the pages (the views call it too)."""
from django import template

register = template.Library()


def human_seconds(seconds: float | None) -> str:
    """3725 -> '1h 2m'; 443841 -> '5d 3h 17m'; None -> '—'."""
    if seconds is None:
        return "—"
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes = rest // 60
    parts = [f"{days}d"] if days else []
    if hours or days:
        parts.append(f"{hours}h")
    parts.append(f"{minutes}m")
    return " ".join(parts)


@register.filter
def duration(seconds) -> str:
    """Seconds (int, float or None) -> '42s', '1h 2m', '5d 3h 17m'; None -> '—'."""
    try:
        return human_seconds(None if seconds is None or seconds == "" else float(seconds))
    except (TypeError, ValueError):
        return "—"

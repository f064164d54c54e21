"""Events follow the map's visibility rule: another team's job is "a job of team X" (no name).

An event that mentions jobs other than its own (a reclaim / preempt decision names its victims; a victim's
event names its beneficiary) stores `data["mentions"]` = {"<job id>": {"name", "team_id", "team"}} and
`data["message_template"]`, its message with `{job:<id>}` where each mentioned job goes. `Event.message`
is the template rendered with every name (what platform admins read). `redacted(message, data,
visible_team_ids)` renders it for one reader: jobs of teams the reader does not see become
"a job of team X" in the message and in `data.victims[].name`, `data.mentions`, and the free-text
`data.reason` (the engine's sentence, which names both sides) is replaced by the redacted message.
Events written before mentions existed are returned unchanged.
"""
from __future__ import annotations

import re

_PLACEHOLDER = re.compile(r"\{job:(\d+)\}")


def other_team_label(team: str) -> str:
    return f"a job of team {team}"


def mention(job_id: int, name: str, team_id: int, team: str) -> dict:
    return {"name": name, "team_id": team_id, "team": team}


def render(template: str, mentions: dict, visible_team_ids: set[int] | None) -> str:
    """The template with each {job:<id>} replaced by the job's name, or "a job of team X" when the reader
    (visible_team_ids; None = every team) does not see its team."""
    def one(match: re.Match) -> str:
        m = mentions.get(match.group(1))
        if m is None:
            return f"job {match.group(1)}"
        if visible_team_ids is None or m["team_id"] in visible_team_ids:
            return m["name"]
        return other_team_label(m["team"])

    return _PLACEHOLDER.sub(one, template)


def redacted(message: str, data, visible_team_ids: set[int] | None) -> tuple[str, object]:
    """(message, data) as `visible_team_ids` may read them (None = every team: unchanged)."""
    if visible_team_ids is None or not isinstance(data, dict) or not data.get("mentions"):
        return message, data
    mentions = data["mentions"]
    hidden = {jid for jid, m in mentions.items() if m.get("team_id") not in visible_team_ids}
    if not hidden:
        return message, data
    out = dict(data)
    message = render(data.get("message_template", ""), mentions, visible_team_ids) or message
    out["mentions"] = {jid: ({"name": other_team_label(m["team"]), "team_id": m["team_id"], "team": m["team"]}
                             if jid in hidden else m) for jid, m in mentions.items()}
    if "victims" in out:
        out["victims"] = [{**v, "name": other_team_label(mentions[str(v["job"])]["team"])}
                          if str(v.get("job")) in hidden else v for v in out["victims"]]
    if "reason" in out:
        out["reason"] = message
    return message, out

"""Teams and their members (models/tenancy.py)."""
from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import ProtectedError, Q
from django.utils.text import slugify

from ..audit import record_event
from ..inputs import text_control_error
from ..models import Membership, Team
from ..models.tenancy import TEAM_KEY_FIELDS, canonical_key
from ..names import name_error
from ..scheduling.locks import lock_name, lock_queue_tree
from ..wording import one_of
from .base import raise_if

__all__ = ["create_team", "update_team", "delete_team", "add_member", "remove_member", "delete_user",
           "set_user_active", "deactivation_refusal",
           "TEAM_DESCRIPTION_MAX", "team_description_error", "team_name_taken", "TEAM_NAME_RULE", "team_named",
           "team_clashes"]

TEAM_DESCRIPTION_MAX = 2000  # characters of a team's description (the API, the admin's form; docs/api.md)


def team_description_error(description) -> str | None:
    """The rule a team's `description` breaks, or None: text of at most TEAM_DESCRIPTION_MAX characters (the
    column has no limit of its own: a megabyte was stored and shown on every teams list; trial 18a), without
    control characters (unicodedata category Cc: an escape, DEL, a C1 control such as U+0085, '\\v', '\\f') other
    than newline and tab, a carriage return only before a newline (a browser's textarea sends CRLF), nor a line or
    paragraph separator (U+2028 / U+2029; inputs.text_control_error): "\\x1b[31m" was stored and reached every
    terminal that printed the teams list (gpuctl, curl, logs) as the escape it is. Checked on the text as sent: the
    API's and the admin's description fields check it before they trim white space (trial 20, F7)."""
    if not isinstance(description, str):
        return "a team's description is text"
    if len(description) > TEAM_DESCRIPTION_MAX:
        return f"a team's description has at most {TEAM_DESCRIPTION_MAX} characters ({len(description)} given)"
    # the one free-text rule (inputs.text_control_error): Cc, and the line / paragraph separators U+2028 / U+2029
    where = text_control_error(description)
    if where:
        return (f"a team's description has no control characters other than newline and tab (a carriage return "
                f"only before a newline): {where}")
    return None


# The one rule of what makes two team names one team (models.tenancy.canonical_key), in the words every refusal uses
TEAM_NAME_RULE = ("team names and slugs that differ only in letter case or in the separators '.', '_' and '-' "
                  "name the same team (foo-bar, foo_bar, Foo.Bar and foobar are one)")


def team_name_taken(name, holder=None, holder_slug=None) -> str:
    """The one wording of a team name that clashes with another team (create_team, update_team: the API and the
    admin alike, however two requests meet), naming that team (`holder`, `holder_slug`; default: `name`) and the
    rule (TEAM_NAME_RULE)."""
    holder = name if holder is None else holder
    slug = f" (slug {holder_slug!r})" if holder_slug else ""
    return f"a team named {holder!r}{slug} already exists: {TEAM_NAME_RULE}"


def team_keys(*values) -> set[str]:
    """The canonical keys a team's name or slug occupies (models.tenancy.canonical_key: NFKC, case-folded, without
    '.', '_', '-' and white space; empty keys left out). Two teams clash when their keys meet (_team_clash, on the
    keys stored on each team's row), a name against a slug too; the name locks are taken on these keys
    (_lock_team_names), so any two writes that could clash wait for each other (trial 18f: renames to `Zeta`, `zeta`
    and `ze.ta` at once all succeeded)."""
    return {key for key in map(canonical_key, values) if key}


def team_named(value) -> Team | None:
    """The team a name (or slug) means by the rule (TEAM_NAME_RULE): the team whose name or slug has its canonical
    key, or None; of teams stored before the rule that share a key, the first by id. For the callers that take a
    team by name and create it when there is none (the cluster loader's queues' `team`, the demo): `Demo` or
    `de-mo` next to a team `demo` is that team, not a refused creation."""
    key = canonical_key(value)
    if not key:
        return None
    return Team.objects.filter(Q(name_key=key) | Q(slug_key=key)).order_by("pk").first()


def team_clashes(team: Team | None = None) -> list[str]:
    """One warning per team whose name is, by the rule (TEAM_NAME_RULE), another team's name or slug: rows stored
    before the rule (migration 0030 keeps them), naming both and what to do (rename it: a rename that keeps the
    clash is refused); only the warnings that name `team` when given. Two slugs that are one by the rule are not
    warned about: a slug does not change (URLs, jobs, metrics and federated jobs name the team by it), and each still
    names its own team (queries.find_team: the exact slug first). Shown by the teams admin (its list and each such
    team's page)."""
    rows = list(Team.objects.order_by("pk").values_list("pk", "name", "slug", *TEAM_KEY_FIELDS))
    holders: dict[str, list] = {}
    for pk, name, slug, name_key, slug_key in rows:
        for key in {name_key, slug_key} - {""}:
            holders.setdefault(key, []).append((pk, name, slug))
    out = []
    for pk, name, slug, name_key, _ in rows:
        others = [other for other in holders.get(name_key, ()) if other[0] != pk]
        if not others or (team is not None and team.pk not in {pk, *(o[0] for o in others)}):
            continue
        named = ", ".join(f"team {o[1]!r} (slug {o[2]!r})" for o in others)
        out.append(f"team {name!r} (slug {slug!r}) has a name that is one team with {named} by the rule "
                   f"({TEAM_NAME_RULE}), stored before the rule: rename it to a name of its own (a rename that keeps "
                   f"the clash is refused; slugs stay as they are)")
    return out


def _lock_team_names(names, slug=None) -> None:
    """lock_name("team name", key) on each canonical key (team_keys) of `names` and `slug`, in one order (sorted: a
    rename takes its old and its new name's keys, and two renames swapping names would otherwise deadlock), then
    lock_name("team slug", slug) when given: every writer of a team's name (create_team, update_team, delete_team)
    takes these before any row lock, so of two writes that could clash (`Zeta`, `zeta`, `ze.ta`; a name and a
    slug) the second waits for the first's commit and reads its row (the rule's 400, never the unique index's
    error)."""
    for key in sorted(team_keys(*names, slug)):
        lock_name("team name", key)
    if slug:
        lock_name("team slug", slug)


def _team_clash(keys: set[str], other_than=None):
    """(name, slug) of a team other than `other_than` whose keys (team_keys of its name and its slug, stored on its
    row: TEAM_KEY_FIELDS) meet `keys`, or None; the first such team by id. One query, an indexed lookup per key column
    (it read every team's name and slug). Stored rows are read as they are: a pair that breaks the rule already
    (written before it) is not refused until one of them is written again (migrations 0029, 0030)."""
    if not keys:
        return None
    keys = sorted(keys)
    meets = Q()
    for field in TEAM_KEY_FIELDS:
        meets |= Q(**{f"{field}__in": keys})
    teams = Team.objects.filter(meets)
    if other_than is not None:
        teams = teams.exclude(pk=other_than)
    # the few rows that meet them, the first by id taken here: an ORDER BY id LIMIT 1 in SQL may walk the primary
    # key's index over every team instead of the key columns' indexes
    found = min(teams.order_by().values_list("pk", "name", "slug"), default=None)
    return None if found is None else found[1:]


def _team_name_errors(name, *, slug: str | None = None, other_than=None) -> dict:
    """{"name" | "slug": rule broken} for `name` as a team's name, held with `slug` (None: the slug made from the
    name; a team's own row `other_than` excluded: a rename): the name rule (names.py); a name that clashes with
    another team (team_name_taken): its canonical key (team_keys: letter case, '.', '_' and '-' ignored) is the key
    of that team's name or slug; a name that makes no slug, no slug sent; a slug sent that clashes so with another
    team ("slug"). Called under _lock_team_names."""
    errors = {}
    if name_error("team", name):
        errors["name"] = name_error("team", name)
    elif (holder := _team_clash(team_keys(name), other_than)) is not None:
        errors["name"] = team_name_taken(name, *holder)
    given = bool(slug)
    if given:
        holder = _team_clash(team_keys(slug), other_than)
        if holder is not None:
            errors["slug"] = f"slug {slug!r} is taken by team {holder[0]!r}: {TEAM_NAME_RULE}"
    elif "name" not in errors and not slugify(name if isinstance(name, str) else ""):
        errors["name"] = "a team name needs a letter or digit to make its slug from (or send a slug)"
    return errors


@transaction.atomic
def create_team(name: str, *, slug: str | None = None, description: str = "", actor=None) -> Team:
    """Create a team. Raises ValidationError: name empty, taken (team_name_taken) or breaking the name rule
    (names.py) ("name"), a name whose slug (made from it when none is sent) is empty or another team's ("name"), a
    slug sent that another team has ("slug"), a description that is not text of at most TEAM_DESCRIPTION_MAX
    characters ("description"). Holds the name's and the slug's locks (_lock_team_names) from the check to the
    commit."""
    if isinstance(name, str):
        _lock_team_names([name], slug or slugify(name))  # (the keys of the name and the slug: team_keys)
    errors = _team_name_errors(name, slug=slug)
    slug = slug or slugify(name if isinstance(name, str) else "")
    if team_description_error(description):
        errors["description"] = team_description_error(description)
    raise_if(errors)
    team = Team.objects.create(name=name, slug=slug, description=description)
    record_event("team_created", f"team {name} created", actor=actor, data={"team": name})
    return team


@transaction.atomic
def update_team(team: Team, *, name: str | None = None, description: str | None = None, actor=None) -> Team | None:
    """Rename a team and / or change its description (None: unchanged); its slug stays, and with it everything
    that names the team by it: the API's URLs (/api/v1/teams/<slug>/), the `team` of jobs, memberships and queues
    in the API, the metrics' labels, federated jobs. What refers to the team by its row (queues, jobs, memberships,
    quotas) follows the rename; Events keep the name the team had when they were written. Returns the team as
    saved, or None, writing nothing, when it is gone (deleted meanwhile). Nothing changed: the row as it is, no
    Event. Otherwise one Event "team_updated" {"team", "slug", "changes": {field: {"from", "to"}}}.
    Raises ValidationError, with create_team's rules (_team_name_errors): a new name that breaks the name rule, is
    another team's (team_name_taken) or makes another team's slug ("name"); a description that is not text of at
    most TEAM_DESCRIPTION_MAX characters ("description"). Holds the old and the new name's locks and the new name's
    slug lock (_lock_team_names, as create_team and delete_team) from the check to the commit, then the team's row:
    of two renames to one name at once the second reads the first's row and answers the name's 400, never the
    unique index's IntegrityError."""
    current = Team.objects.filter(pk=team.pk).values_list("name", flat=True).first()  # not the caller's copy: the
    if current is None:  # admin hands its form's values, the new name already set
        return None
    own_slug = Team.objects.filter(pk=team.pk).values_list("slug", flat=True).first()
    # the keys (team_keys) of the old and the new name and of the slug the team keeps, then the new name's slug
    _lock_team_names([current, name, own_slug], slugify(name) if isinstance(name, str) else None)
    row = Team.objects.select_for_update(no_key=True).filter(pk=team.pk).first()
    if row is None:
        return None
    renamed = name is not None and name != row.name  # (renamed by a commit before the lock: its name, read again)
    errors = _team_name_errors(name, other_than=row.pk) if renamed else {}
    if description is not None and team_description_error(description):
        errors["description"] = team_description_error(description)
    raise_if(errors)
    changes = {}
    if renamed:
        changes["name"] = {"from": row.name, "to": name}
    if description is not None and description != row.description:
        changes["description"] = {"from": row.description, "to": description}
    if not changes:
        return row
    old = row.name
    for field, change in changes.items():
        setattr(row, field, change["to"])
    row.save(update_fields=list(changes))
    what = f"renamed {row.name}" if renamed else "updated"
    record_event("team_updated", f"team {old} {what} ({', '.join(changes)} changed)", actor=actor,
                 data={"team": row.name, "slug": row.slug, "changes": changes})
    return row


@transaction.atomic
def delete_team(team: Team, *, actor=None) -> bool:
    """Delete a team that holds nothing: its memberships go with it. Returns False, writing nothing, when it is gone
    already (a concurrent delete came first). Raises ValidationError ("team") while it has a queue, a job or a
    federated job, naming how many of each (they are protected: a team's jobs keep their history). Holds the
    queue tree's lock (scheduling.locks.lock_queue_tree, exclusive) from the check to the commit, so a queue
    created for the team or a job submitted to its queue at the same time waits, then finds it gone, or the
    delete finds them (new-user trial 16b, F5: a team deleted in the admin while a queue was created for it
    answered a 500, the database's ProtectedError)."""
    lock_queue_tree()
    _lock_team_names([team.name], team.slug)
    lock_team_members(team.pk)  # its memberships go with it: after a role change or removal under way
    if not Team.objects.filter(pk=team.pk).exists():
        return False
    held = {"queue(s)": team.queues.count(), "job(s)": team.jobs.count(),
            "federated job(s)": team.federated_jobs.count()}
    if any(held.values()):
        what = ", ".join(f"{n} {kind}" for kind, n in held.items() if n)
        raise_if({"team": f"team {team.name} still has {what}: they keep the team's history and quotas; delete or "
                          f"move its queues first (a team with jobs stays)"})
    name, members = team.name, team.memberships.count()
    try:
        with transaction.atomic():
            Team.objects.filter(pk=team.pk).delete()
    except ProtectedError as exc:  # a row that references the team without the tree's lock (none known)
        kinds = sorted({obj._meta.verbose_name_plural for obj in exc.protected_objects})
        raise_if({"team": f"team {name} is still referenced by {', '.join(kinds)}: it cannot be deleted"})
    record_event("team_deleted", f"team {name} deleted ({members} membership(s) with it)", actor=actor,
                 data={"team": name, "memberships": members})
    return True


@transaction.atomic
def add_member(team: Team, user, role: str = "member", *, actor=None, existing: bool = False) -> Membership | None:
    """Add `user` to `team` with `role` (member | admin | viewer), or change the role of an existing member.
    A member who already has that role is returned as is: nothing is written, no event recorded. The returned
    membership's `was_added` says whether this call created it (the API's 201 or 200); concurrent calls for one
    team run one after the other under the team's members lock (lock_team_members, taken before any membership
    row lock), so of calls for one user one adds. `existing`: a role change of a membership the caller read (the
    API's PATCH, the admin's change form): None, writing nothing, when it is gone. Raises ValidationError: a
    role that is none ("role"), the team deleted meanwhile ("team"), the user's account deleted meanwhile
    ("user"), the team's last admin demoted ("role"). The user's row is locked (FOR NO KEY UPDATE) after the team's
    members lock, delete_user's order (its teams' members locks, then the user's row): an account deleted at the
    same time is deleted before this reads it (then "user") or after this commits (then with this membership)."""
    raise_if({} if role in Membership.Role.values else {"role": f"role must be one of {one_of(Membership.Role.values)}"})
    lock_team_members(team.pk)
    users = get_user_model().objects.select_for_update(no_key=True)
    if users.filter(pk=user.pk).values_list("pk", flat=True).first() is None:
        # deleted (delete_user) since the caller read it: the membership's foreign key failed at commit, a 500
        if existing:
            return None  # its memberships went with it: the role change finds nothing to change
        raise_if({"user": f"user {user.get_username()} no longer exists"})
    if not Team.objects.filter(pk=team.pk).exists():  # deleted (delete_team) since the caller read it: trial 17c,
        # G7, a 500 from the foreign key at commit
        raise_if({"team": f"team {team.name} no longer exists"})
    current = Membership.objects.select_for_update().filter(user=user, team=team).first()
    if current is None and existing:  # a role change of a membership removed meanwhile: nothing is re-created
        return None  # (trial 17c, G16: a PATCH racing a DELETE brought the removed member back as admin)
    if current is not None and current.role == role:
        current.was_added = False
        return current
    if current is not None:
        _refuse_last_admin(current, f"cannot make them {role}")
    membership, _ = Membership.objects.update_or_create(user=user, team=team, defaults={"role": role})
    record_event("member_added", f"{user} is {role} of {team.name}", actor=actor,
                 data={"team": team.name, "user": str(user), "role": role})
    membership.was_added = current is None
    return membership


@transaction.atomic
def remove_member(membership: Membership, *, actor=None) -> bool:
    """Remove a user from a team. Their jobs stay (they belong to the team). Returns False, writing nothing, when
    the membership is gone already (a concurrent removal came first: the API's 404). Raises ValidationError
    ("role") for the team's last admin (_refuse_last_admin). Holds the team's members lock (lock_team_members)
    before any membership row lock: concurrent removals of one membership run one after the other, one removes."""
    lock_team_members(membership.team_id)
    if not Membership.objects.filter(pk=membership.pk).exists():
        return False
    _refuse_last_admin(membership, "cannot remove them")
    team, user, role = membership.team, membership.user, membership.role
    Membership.objects.filter(pk=membership.pk).delete()
    record_event("member_removed", f"{user} is no longer {role} of {team.name}", actor=actor,
                 data={"team": team.name, "user": str(user), "role": role})
    return True


@transaction.atomic
def user_history(user) -> str:
    """What `user` did that the audit trail keeps (delete_user refuses it: PROTECT, migration 0034), in words ("2
    job(s) submitted, 5 audit event(s) naming them as actor"), or "" when nothing."""
    from ..models import Event, FederatedJob, Job

    counts = ((Job.objects.filter(submitter=user).count(), "job(s) submitted"),
              (FederatedJob.objects.filter(submitter=user).count(), "federated job(s) submitted"),
              (Event.objects.filter(actor=user).count(), "audit event(s) naming them as actor"))
    return ", ".join(f"{n} {what}" for n, what in counts if n)


def history_refusal(name: str, history: str) -> str:
    """delete_user's refusal of a user with history (user_history's words) and what to do instead."""
    return (f"{name} cannot be deleted: the audit trail keeps who did what ({history}). Deactivate the account "
            f"instead: untick \u201cActive\u201d on its change page (sign-in and its API tokens are refused from then on; "
            f"its jobs and events keep naming it)")


def delete_user(user, *, actor=None) -> bool:
    """Delete a user account with no history; its memberships and API tokens go with it. Event "user_deleted"
    {"user", "teams": {slug: role}}. A user with history (a job or federated job submitted, an Event naming them as
    actor: user_history) is never deleted: ValidationError ("user") saying so and to deactivate the account instead
    (the foreign keys are PROTECT, migration 0034: the delete had emptied the job's submitter and the Event's actor,
    session 27).
    Returns False, writing nothing, when the account is gone already (a concurrent delete came first). Raises
    ValidationError ("user") when the user is the last admin of a team, naming every such team: a team that has
    an admin keeps one (_refuse_last_admin), and deleting the account removed its memberships without asking
    (trial 18a, G13), when `actor` is the user (an admin deleting their own account), and when the user is the last
    active platform admin (staff or superuser). Holds the members lock (lock_team_members) of each team the user is in, in team order, from
    the check to the commit, so a role change or removal in one of them at the same time comes before or after."""
    User = get_user_model()
    _lock_teams_of(user)
    if user.is_staff or user.is_superuser:  # the platform admins' rows, in one order, before this one's (no deadlock)
        _lock_platform_admins()
    row = User.objects.select_for_update().filter(pk=user.pk).first()
    if row is None:
        return False
    _lock_teams_of(row)  # a membership committed before the row's lock (added after the first read)
    name = row.get_username()
    # trial 19b, F11 / F12: an admin deleting their own account (with another in one "delete selected": the second's
    # Event named the deleted actor, a foreign-key error at commit, a 500) or the last platform admin (nobody could
    # administer the platform after it)
    if actor is not None and getattr(actor, "pk", None) == row.pk:
        raise_if({"user": f"{name}: you cannot delete your own account (another platform admin can)"})
    _refuse_last_platform_admin(row)
    _refuse_last_admin_of(row)
    history = user_history(row)
    if history:
        raise_if({"user": history_refusal(name, history)})
    teams = dict(Membership.objects.filter(user=row).order_by("team__slug").values_list("team__slug", "role"))
    # recorded before the delete: the Event's actor may be this user (its own account), emptied with the others
    record_event("user_deleted", f"user {name} deleted ({len(teams)} membership(s) with it)", actor=actor,
                 data={"user": name, "teams": teams})
    try:
        row.delete()
    except ProtectedError:  # history written after the check above (a submit at the same moment): nothing deleted
        raise_if({"user": history_refusal(name, user_history(row) or "history")})
    return True


def _lock_platform_admins() -> None:
    """The platform admins' rows (staff or superuser), in one order, locked until the transaction ends: a delete or a
    deactivation of one of them takes these before its own row (no deadlock), so two at once cannot both pass
    _refuse_last_platform_admin."""
    list(get_user_model().objects.select_for_update().filter(Q(is_staff=True) | Q(is_superuser=True)).order_by("pk")
         .values_list("pk", flat=True))


def _last_platform_admin_error(row) -> str:
    """The words refusing to delete or deactivate `row` (as stored) when it is the last active platform admin (staff
    or superuser: nobody could administer the platform after it), or ""."""
    User = get_user_model()
    if (row.is_active and (row.is_staff or row.is_superuser)
            and not User.objects.filter(Q(is_staff=True) | Q(is_superuser=True), is_active=True)
            .exclude(pk=row.pk).exists()):
        return f"{row.get_username()} is the last platform admin (staff or superuser): make another first"
    return ""


def _refuse_last_platform_admin(row) -> None:
    """ValidationError ("user") with _last_platform_admin_error's words (delete_user, set_user_active; `row` locked,
    after _lock_platform_admins)."""
    message = _last_platform_admin_error(row)
    if message:
        raise_if({"user": message})


def deactivation_refusal(user) -> str:
    """set_user_active's refusal of deactivating `user`, read without locks (the admin's form shows it on "Active"
    before saving; set_user_active checks it again under its locks), or ""."""
    row = get_user_model().objects.filter(pk=user.pk).first()
    return _last_platform_admin_error(row) if row is not None else ""


@transaction.atomic
def set_user_active(user, active: bool, *, actor=None) -> bool:
    """Deactivate (active=False) or reactivate a user account: the way to retire an account with history, which is
    never deleted (delete_user). Event "user_deactivated" / "user_reactivated" {"user"}, its actor the admin (session
    27: unticking "Active" on the admin's user page recorded nothing, so deactivations were missing from the audit
    log). Refused (ValidationError "user"), as delete_user refuses deleting one, when the user is the last active
    platform admin (staff or superuser), under the same lock of the platform admins' rows. Returns False, writing
    nothing, when the account is gone or already so (no Event for a save that did not change it). Writes only
    is_active; a form saving the other fields saves them itself."""
    User = get_user_model()
    active = bool(active)
    _lock_platform_admins()  # (whoever the user: `user` may be a stale object, its stored row staff)
    row = User.objects.select_for_update().filter(pk=user.pk).first()
    if row is None or row.is_active == active:
        return False
    name = row.get_username()
    if not active:
        _refuse_last_platform_admin(row)
    User.objects.filter(pk=row.pk).update(is_active=active)
    user.is_active = active
    if active:
        record_event("user_reactivated", f"user {name} reactivated (sign-in and API tokens accepted again)",
                     actor=actor, data={"user": name})
    else:
        record_event("user_deactivated", f"user {name} deactivated (sign-in and API tokens refused; its jobs and "
                                          f"events keep naming it)", actor=actor, data={"user": name})
    return True


def refuse_deleting_a_last_admin(sender, instance, **kwargs) -> None:
    """pre_delete of the user model (connected at start, apps.py): any other path that deletes an account (a
    queryset's delete, a shell, a third-party admin action) is held to delete_user's rule: ValidationError ("user")
    when it is the last admin of a team, under the same locks, before anything is deleted. delete_user itself passes
    it (its check, again, under the locks it holds)."""
    if not transaction.get_connection().in_atomic_block:  # (Django deletes in a transaction: never here)
        return
    _lock_teams_of(instance)
    _refuse_last_admin_of(instance)


def connect_user_delete_guard() -> None:
    """Called once at start (apps.py): refuse_deleting_a_last_admin on every delete of the user model."""
    from django.db.models.signals import pre_delete

    pre_delete.connect(refuse_deleting_a_last_admin, sender=get_user_model(), dispatch_uid="tenancy-user-delete-guard")


def _lock_teams_of(user) -> None:
    """lock_team_members of every team `user` is a member of, in team order (the ones already held are taken again
    at no cost: advisory locks of one transaction stack)."""
    for team_id in sorted(set(Membership.objects.filter(user_id=user.pk).values_list("team_id", flat=True))):
        lock_team_members(team_id)


def _refuse_last_admin_of(user) -> None:
    """ValidationError ("user") naming each team whose only admin `user` is (its admin rows locked, as
    _refuse_last_admin does)."""
    own = list(Membership.objects.filter(user_id=user.pk, role=Membership.Role.ADMIN).values_list("team_id", flat=True))
    if not own:
        return
    admins = Membership.objects.select_for_update().filter(team_id__in=own, role=Membership.Role.ADMIN).order_by("pk")
    count: dict[int, int] = {}
    for team_id in admins.values_list("team_id", flat=True):
        count[team_id] = count.get(team_id, 0) + 1
    last = sorted(Team.objects.filter(pk__in=[t for t in own if count.get(t) == 1]).values_list("name", flat=True))
    if last:
        raise_if({"user": f"{user} is the last admin of team(s) {', '.join(last)}: deleting the account would leave "
                          f"{'it' if len(last) == 1 else 'them'} with no admin; make another member admin of "
                          f"{'it' if len(last) == 1 else 'each'} first (a team keeps at least one admin)"})


def lock_team_members(team_id) -> None:
    """Serialize, until the current transaction ends, the writes to one team's memberships (add, role change,
    removal, the team's delete), taken before any membership row lock. It is the only lock these writes take for
    a membership: one per membership under it would only repeat it. The last-admin rule locks every admin row
    of the team, so two demotions each holding its own row and then asking for the other's deadlocked (new-user
    trial 17b, F10: three admins demoted at once answered 503 "the database is unavailable"); in one order, the
    later ones read the first's commit and get the rule's 400."""
    lock_name("team members", team_id)


def _refuse_last_admin(membership: Membership, what: str) -> None:
    """A team that has an admin keeps one: removing or demoting its last admin is refused (ValidationError
    naming "role"), whoever asks, a platform admin included (a team admin deleting their own membership left
    the team with nobody to manage it; new-user trial 7, F19). Deleting the team itself removes its
    memberships without asking. The team's admin rows are locked first, so two admins demoting each other
    at once cannot both succeed."""
    admins = list(Membership.objects.select_for_update().filter(team_id=membership.team_id, role=Membership.Role.ADMIN)
                  .order_by("pk").values_list("pk", flat=True))
    if admins == [membership.pk]:
        raise_if({"role": f"{membership.user} is the last admin of team {membership.team.name}: {what}; make another "
                          f"member admin first (a team keeps at least one admin)"})

"""Django admin for platform staff. Every write goes through `gpuplatform.services` (audited, validated):

- Queue and Quota: add/change call create_queue / update_queue / set_quota (ServiceAdmin: a ValidationError the
  service raises is shown on the form, one WARNING line in the log, nothing stored). A queue is deleted through
  services.delete_queue (an empty leaf only: refused, as a message, while it has child queues or jobs); a quota is
  never deleted (it is set to 0 instead). A queue's grace period is set here too, under the same rule.
- Job, Task, Allocation, Event, samples, cycles: read-only (jobs are submitted over REST or the pages);
  jobs have a "cancel" action, nodes "cordon / drain / uncordon" actions, all through services.
- Team: added, renamed (its slug stays) and described through services.create_team / update_team (audited, a name
  taken refused on the form), deleted through services.delete_team (refused, as a message, while it has queues or
  jobs). Teams stored before the team name rule that are one team by it (migration 0030) are a warning on the
  teams list and on their pages (services.tenancy.team_clashes).
- Quotas stored before the flavor letter-case rule (`h200` next to the nodes' `H200`) are a warning on the quotas
  and queues lists and on such a row's page (quota_rules.case_variant_quotas).
- User: Django's UserAdmin, but deleted through services.delete_user (refused, as a message, for a team's last admin),
  and "Active" changed through services.tenancy.set_user_active (audited as "user_deactivated" / "user_reactivated";
  the last active platform admin is not deactivated).
  A user with history (a job or federated job submitted, an Event naming them as actor) is never deleted (PROTECT,
  migration 0034): the delete page says so, with the counts, and to deactivate the account instead (Active unticked).
- Node: renamed and moved between domains here; what its registration reports (GPUs, flavor, CPU, memory) is shown,
  not edited; nodes join by registering. Gpu: read-only (sharing through the sharing API, health by heartbeats).
- Membership: through services.add_member / remove_member. Domain: plain admin for inventory fixes (no
  scheduling rules depend on its admin edits beyond what the database constraints enforce).
- Queue and Quota change forms carry the version of the row they were opened with (VersionedForm): a save
  after someone else changed the row (REST, gpuctl, another admin) is refused with a form error, as REST's
  If-Match answers 412, never a silent overwrite.
"""
from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.contrib.auth import admin as auth_admin, get_user_model
from django.db import transaction
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.html import format_html

from . import quota_rules, services
from .admin_services import ServiceAdmin, StoredTitleAdmin
from .inputs import TextRuleForm, error_text
from .names import name_error
from .services.tenancy import (TEAM_DESCRIPTION_MAX, deactivation_refusal, set_user_active, team_clashes,
                               team_description_error)
from .models import (
    Allocation, Attempt, ClusterSample, DiagnosisRule, HealthRule, Domain, Event, Gpu, Job, JobRole, Membership, Node, Queue, QueueSample, Quota,
    SchedulerCycle, Task, Team,
)


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


def _service_action(func, label: str, unchanged: str = "unchanged"):
    """A list action calling `func(obj, actor=)` on each selected row: a refusal is a warning naming the row; the
    summary counts the rows changed, and apart those for which `func` returned False (nothing to do: `unchanged`
    words them, "were not spares")."""
    def action(modeladmin, request, queryset):
        done = skipped = 0
        for obj in queryset:
            try:
                if func(obj, actor=request.user) is False:
                    skipped += 1
                else:
                    done += 1
            except services.ValidationError as exc:
                modeladmin.message_user(request, f"{obj}: {exc}", messages.WARNING)
        modeladmin.message_user(request, f"{label}: {done} done" + (f" ({skipped} {unchanged})" if skipped else ""))

    action.__name__ = f"action_{func.__name__}"
    action.short_description = label
    return action


class DeleteRefused(services.ValidationError):
    """The refusals of a "delete selected" action (ServiceDeleteMixin.delete_queryset): `refused`, one
    services.ValidationError per selected row its service refused, of `selected` rows."""

    def __init__(self, refused: list, selected: int):
        super().__init__({"__all__": "; ".join(str(exc) for exc in refused)})
        self.refused, self.selected = refused, selected


class ServiceDeleteMixin:
    """Deletes through `delete_service(obj, actor=)` (audited, its rules checked under its locks), from the delete
    page and the list's "delete selected" action; a refusal (services.ValidationError) is an error message, never a
    500, and nothing is deleted (the delete page's transaction is rolled back). The action deletes all or none, as
    Django's own does when a selected row is protected: every selected row is tried, in the action's transaction,
    and when any is refused none is deleted and the message names every refusal (each its row and its rule: a
    user and the teams it is the last admin of), not only the first (review 19b)."""

    delete_service = None  # staticmethod(obj, *, actor) -> ...

    def delete_model(self, request, obj):
        type(self).delete_service(obj, actor=request.user)

    def delete_queryset(self, request, queryset):
        refused, selected = [], 0
        for obj in queryset:
            selected += 1
            try:
                with transaction.atomic():  # (a refused row's writes undone; the rows after it are still tried)
                    type(self).delete_service(obj, actor=request.user)
            except services.ValidationError as exc:
                refused.append(exc)
        if refused:
            raise DeleteRefused(refused, selected)

    def _url(self, view: str, *args) -> str:
        return reverse(f"admin:{self.model._meta.app_label}_{self.model._meta.model_name}_{view}", args=args)

    def delete_view(self, request, object_id, extra_context=None):
        try:
            return super().delete_view(request, object_id, extra_context)
        except services.ValidationError as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return redirect(self._url("change", object_id))

    def response_action(self, request, queryset):
        try:
            with transaction.atomic():
                return super().response_action(request, queryset)
        except DeleteRefused as exc:
            if len(exc.refused) == 1:
                self.message_user(request, f"nothing deleted: {exc.refused[0]}", messages.ERROR)
            else:
                self.message_user(request, f"nothing deleted: {len(exc.refused)} of the {exc.selected} selected "
                                           f"{self.model._meta.verbose_name_plural} cannot be deleted (each below); "
                                           f"the action deletes all or none", messages.ERROR)
                for refusal in exc.refused:
                    self.message_user(request, str(refusal), messages.ERROR)
            return redirect(self._url("changelist"))
        except services.ValidationError as exc:
            self.message_user(request, f"nothing deleted: {exc}", messages.ERROR)
            return redirect(self._url("changelist"))


class MembershipInline(admin.TabularInline):
    """A team's members, shown; they are added, changed and removed under Memberships, through the services that
    keep the team's last admin (trial 17, F8: the inline demoted and removed a team's last admin)."""

    model = Membership
    extra = 0
    fields = ("user", "role")
    readonly_fields = fields
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False


class NameRuleForm(TextRuleForm, forms.ModelForm):
    """The one name rule (names.py) on an admin form's `name` field; `name_kind` ("team", "node") words its error."""

    name_kind = ""

    def clean_name(self):
        name = self.cleaned_data.get("name")
        message = name_error(self.name_kind, name)
        if message:
            raise forms.ValidationError(message)
        return name


class TeamForm(NameRuleForm):
    """The one name rule (names.py) on the admin's team form too, and the description's limit
    (services.tenancy.team_description_error), shown on their fields; a new team is saved by services.create_team,
    a change by services.update_team, which check them again."""

    name_kind = "team"
    text_rule_exempt = ("description",)  # its own rule in its own words (clean_description)

    class Meta:
        model = Team
        fields = "__all__"
        widgets = {"description": forms.Textarea(attrs={"maxlength": TEAM_DESCRIPTION_MAX})}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if "description" in self.fields:  # checked as sent, then trimmed (clean_description), as the API does
            self.fields["description"].strip = False

    def clean_description(self):
        """The description as typed is checked (a '\\v' or U+2028 at either end is refused, never trimmed away:
        trial 20, F7), then its white space trimmed (api.serializers.tenancy.DescriptionField's rule)."""
        description = self.cleaned_data.get("description")
        message = team_description_error(description)
        if message:
            raise forms.ValidationError(message)
        return description.strip()

    def validate_unique(self):
        """A name (or slug) taken is the service's rule, checked under the name's lock (services.create_team /
        update_team), shown on the field in its one wording (services.tenancy.team_name_taken), not the model
        form's ("Team with this Name already exists.", and an IntegrityError when two saves met)."""


@admin.register(Team)
class TeamAdmin(ServiceDeleteMixin, ServiceAdmin):
    """A team is added through services.create_team (its name and slug rules, audited), renamed or described
    through services.update_team (the same rules, audited as "team_updated"; its slug is read-only here: the API's
    URLs, jobs, memberships, metrics and federated jobs name the team by it) and deleted through
    services.delete_team (audited; refused while it has queues or jobs, under the
    queue tree's lock), from its delete page and from the list's "delete selected" action: a refusal is a
    message, never a 500 (new-user trial 16b, F5)."""

    form = TeamForm
    delete_service = staticmethod(services.delete_team)
    list_display = ("name", "slug", "created_at")
    search_fields = ("name", "slug")
    inlines = [MembershipInline]

    def get_readonly_fields(self, request, obj=None):
        return ("slug",) if obj else ()

    def changelist_view(self, request, extra_context=None):
        _warn_each(self, request, team_clashes())
        return super().changelist_view(request, extra_context)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        team = Team.objects.filter(pk=object_id).first() if str(object_id).isdigit() else None
        if team is not None:
            _warn_each(self, request, team_clashes(team))
        return super().change_view(request, object_id, form_url, extra_context)

    def save_model(self, request, obj, form, change):
        if change:  # a rename and / or a description (the service reads the team's row again, under its locks)
            if services.update_team(obj, name=obj.name, description=obj.description, actor=request.user) is None:
                raise services.ValidationError({"name": "this team was deleted meanwhile"})
            return
        obj.pk = services.create_team(obj.name, slug=obj.slug or None, description=obj.description,
                                      actor=request.user).pk


@admin.register(Membership)
class MembershipAdmin(ServiceDeleteMixin, ServiceAdmin):
    """Through services.add_member (add, or a role change) and remove_member (delete): audited, and refused when it
    would leave a team with no admin (a refusal is a form error, or a message on delete)."""

    list_display = ("user", "team", "role")
    list_filter = ("role", "team")
    delete_service = staticmethod(services.remove_member)

    def get_readonly_fields(self, request, obj=None):
        return ("user", "team") if obj else ()

    def save_model(self, request, obj, form, change):
        saved = services.add_member(obj.team, obj.user, obj.role, actor=request.user, existing=change)
        if saved is None:
            raise services.ValidationError({"role": "this membership was removed meanwhile: add it again"})
        obj.pk = saved.pk


class UserChangeForm(auth_admin.UserChangeForm):
    """Django's user change form, but unticking "Active" on the last active platform admin (staff or superuser) is an
    error on "Active", in delete_user's words for deleting one (set_user_active checks it again under its locks)."""

    def clean(self):
        data = super().clean()
        if "is_active" in self.fields and self.instance.pk is not None and data.get("is_active") is False:
            refused = deactivation_refusal(self.instance)
            if refused:
                self.add_error("is_active", refused)
        return data


class UserAdmin(ServiceDeleteMixin, auth_admin.UserAdmin):
    """Django's UserAdmin (its forms, password change, lists and filters), but an account is deleted through
    services.delete_user, from its delete page and from the list's "delete selected" action: a team's last admin is
    refused as a message naming the team(s), nothing deleted (trial 18a, G13: the delete took the team's last admin
    membership with it); of several users selected, every refused one is named with its teams (ServiceDeleteMixin).
    A user with history (jobs submitted, Events as actor: PROTECT, migration 0034) is refused on the page itself, as a
    protected object naming the history and saying to deactivate the account instead (session 27: the delete emptied
    the job's submitter and the Event's actor, and the page had listed only the token and the membership)."""

    delete_service = staticmethod(services.delete_user)
    form = UserChangeForm

    def save_model(self, request, obj, form, change):
        """A change of "Active" goes through services.tenancy.set_user_active: audited ("user_deactivated" /
        "user_reactivated", the admin as actor; session 27: a deactivation recorded no Event) and refused for the
        last active platform admin; the form's other fields are then saved as Django does."""
        if change and "is_active" in getattr(form, "cleaned_data", {}):
            set_user_active(obj, obj.is_active, actor=request.user)
        super().save_model(request, obj, form, change)

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except services.ValidationError as exc:  # set_user_active's refusal after the form's check (a race): nothing
            self.message_user(request, f"not saved: {exc}", messages.ERROR)  # saved (the page's transaction)
            return redirect(self._url("change", object_id) if object_id else self._url("changelist"))

    def get_deleted_objects(self, objs, request):
        """The delete page's (and "delete selected"'s) list: a user with history is a protected object, named with
        what they did and how to deactivate them, without listing every Event (an admin can name thousands); the
        page then deletes nothing, as for any protected object. Without history: Django's own list."""
        protected = [format_html('{} (<a href="{}">change page</a>)',
                                 services.history_refusal(user.get_username(), history), self._url("change", user.pk))
                     for user in objs if (history := services.user_history(user))]
        if protected:
            return [], {}, set(), protected
        return super().get_deleted_objects(objs, request)


if admin.site.is_registered(get_user_model()):  # (django.contrib.auth's admin, imported above, registered it)
    admin.site.unregister(get_user_model())
admin.site.register(get_user_model(), UserAdmin)


class VersionedForm(TextRuleForm, forms.ModelForm):
    """Optimistic concurrency on an admin change form, as the REST API's If-Match (new-user trial 10, F1: a stale
    quota form silently reverted a REST change). The form carries, hidden, the version of the row it was opened
    with (`version_of`: services.queue_version / quota_version); a save whose row changed since is refused with a
    form error above the form, and the service checks it again under the row lock (expected_version=) so a change
    committed between this check and the save is refused too."""

    version_of = None  # staticmethod(row -> version)
    version = forms.CharField(widget=forms.HiddenInput, required=False)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["version"].initial = type(self).version_of(self.instance)

    def clean(self):
        data = super().clean()
        if self.instance.pk:  # clean() runs before the posted values are put on the instance: it is the row now
            sent = data.get("version")
            if not sent:
                self.add_error(None, "this form carries no version of the row it was opened with; reload the page "
                                     "and make your change again")
            elif sent != type(self).version_of(self.instance):
                self.add_error(None, f"this {self.instance._meta.verbose_name} was changed by someone else since you "
                                     f"opened it; reload the page to see the current values and make your change "
                                     f"again")
        return data


class QueueForm(VersionedForm):
    """Runs the service's tree rule on the form so a refused change shows as a form error."""

    version_of = staticmethod(services.queue_version)

    class Meta:
        model = Queue
        fields = "__all__"

    preemption_grace_seconds = forms.IntegerField(
        initial=30, required=False,
        help_text="seconds a preempted or reclaimed job gets to checkpoint: 0 to 86400 (blank: unchanged, 30 when new)")

    def clean(self):
        data = super().clean()
        parent = data.get("parent")
        if self.instance.pk and parent is not None and quota_rules.makes_cycle(self.instance.pk, parent.pk):
            self.add_error("parent", "this parent would create a cycle in the queue tree")
        elif self.instance.pk:  # the service's quota rules for a move, shown on the field (update_queue checks again)
            for message in quota_rules.check_parent(self.instance, parent).values():
                self.add_error("parent", message)
        weight = data.get("weight")
        if weight is not None and services.queue_weight_error(weight):  # the service's rule, shown on the field
            self.add_error("weight", services.queue_weight_error(weight))
        grace = data.get("preemption_grace_seconds")
        if grace is not None and services.queue_grace_error(grace):  # the service's rule, shown on the field
            self.add_error("preemption_grace_seconds", services.queue_grace_error(grace))
        return data


class QuotaForm(VersionedForm):
    """Runs the quota rules of services.set_quota on the form (the service checks again when saving)."""

    version_of = staticmethod(services.quota_version)

    class Meta:
        model = Quota
        fields = ("queue", "flavor", "guarantee", "quota", "limit", "version")

    def clean(self):
        data = super().clean()
        queue = data.get("queue") or (self.instance.queue if self.instance.queue_id else None)
        flavor = data.get("flavor") or self.instance.flavor
        g, q, lim = data.get("guarantee"), data.get("quota"), data.get("limit")
        if queue is None or not flavor or g is None or q is None:
            return data
        # on a change, a rule between two values is on the one the form changed (check_triple): a limit set below the
        # stored quota is the limit's error, not the untouched quota's (new-user trial 25h, 3)
        changed = set(self.changed_data) & {"guarantee", "quota", "limit"} if self.instance.pk else None
        errors = quota_rules.check_quota(queue, flavor, g, q, lim, changed)
        for field, message in errors.items():
            self.add_error(field if field in self.fields else None, message)
        return data


def _warn_each(model_admin, request, warnings: list[str]) -> None:
    """Each of `warnings` as a WARNING message of the page (rows stored before a rule that now flags them), on a GET
    only (a POST redirects to a GET, which would show them twice)."""
    if request.method != "GET":
        return
    for warning in warnings:
        model_admin.message_user(request, warning, messages.WARNING)


@admin.register(Queue)
class QueueAdmin(ServiceDeleteMixin, ServiceAdmin):
    """Queues are added and changed through create_queue / update_queue and deleted through services.delete_queue
    (the REST API's DELETE /api/v1/queues/<name>/ too): an empty leaf queue only, with its quotas, audited as
    "queue_deleted"; a queue with child queues or jobs is refused as a message naming the rule, nothing deleted."""

    delete_service = staticmethod(services.delete_queue)
    list_display = ("name", "parent", "team", "weight", "state")
    list_filter = ("state", "team")
    search_fields = ("name",)
    form = QueueForm
    fields = ("name", "parent", "team", "weight", "state", "preemption_grace_seconds", "version")

    def get_readonly_fields(self, request, obj=None):
        return ("name", "team") if obj else ()

    def changelist_view(self, request, extra_context=None):
        _warn_each(self, request, quota_rules.case_variant_quotas())  # the queues' quotas: their admin's first page
        _warn_each(self, request, services.queue_clashes())  # queues stored before the queue name rule (trial 21, F9)
        return super().changelist_view(request, extra_context)

    def save_model(self, request, obj, form, change):
        """Through the service (atomic, audited); a refusal becomes form errors (ServiceAdmin)."""
        grace = form.cleaned_data.get("preemption_grace_seconds")  # None: unchanged (a new queue: 30)
        if change:
            saved = services.update_queue(Queue.objects.get(pk=obj.pk), parent=obj.parent, weight=obj.weight,
                                          state=obj.state, preemption_grace_seconds=grace, actor=request.user,
                                          expected_version=form.cleaned_data.get("version") or "")
        else:
            saved = services.create_queue(obj.name, parent=obj.parent, team=obj.team, weight=obj.weight,
                                          state=obj.state, actor=request.user,
                                          preemption_grace_seconds=30 if grace is None else grace)
        obj.pk = saved.pk


@admin.register(Quota)
class QuotaAdmin(ServiceAdmin):
    list_display = ("queue", "flavor", "guarantee", "quota", "limit", "updated_at")
    list_filter = ("flavor",)
    search_fields = ("queue__name",)
    form = QuotaForm

    def get_readonly_fields(self, request, obj=None):
        return ("queue", "flavor") if obj else ()

    def has_delete_permission(self, request, obj=None):
        return False

    def changelist_view(self, request, extra_context=None):
        _warn_each(self, request, quota_rules.case_variant_quotas())
        return super().changelist_view(request, extra_context)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        row = Quota.objects.filter(pk=object_id).select_related("queue").first() if str(object_id).isdigit() else None
        if row is not None:  # this row's warning, if it has one
            prefix = f"quota {row.flavor!r} of queue {row.queue.name} "
            _warn_each(self, request, [w for w in quota_rules.case_variant_quotas() if w.startswith(prefix)])
        return super().change_view(request, object_id, form_url, extra_context)

    def save_model(self, request, obj, form, change):
        """Through the service; a refusal (a race after the form's check) becomes form errors (ServiceAdmin)."""
        saved = services.set_quota(obj.queue, obj.flavor, obj.guarantee, obj.quota, obj.limit, actor=request.user,
                                   expected_version=(form.cleaned_data.get("version") or "") if change else None)
        obj.pk = saved.pk


@admin.register(Domain)
class DomainAdmin(admin.ModelAdmin):
    list_display = ("name", "tier", "parent")
    list_filter = ("tier",)
    search_fields = ("name",)


class GpuInline(admin.TabularInline):
    """A node's GPUs, shown: they are what its agent registers (services.register_node), their sharing mode is set
    through the sharing API (audited, refused while a GPU is in use) and their health by the heartbeats."""

    model = Gpu
    extra = 0
    fields = ("index", "uuid", "numa_node", "sharing", "memory_mib", "health", "health_reason")
    readonly_fields = fields
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False


def _set_spare(node, spare: bool, actor) -> bool:
    """services.set_spare; False when the node already was (or was not) a spare, read under its row lock, which
    set_spare then takes again: it writes nothing then (trial 18a: "Return spares" counted every selected node as
    returned, spares or not)."""
    with transaction.atomic():
        was = Node.objects.select_for_update().filter(pk=node.pk).values_list("spare", flat=True).first()
        services.set_spare(node, spare, actor=actor)
        return was is not None and was != spare


def mark_spare(node, *, actor=None) -> bool:
    return _set_spare(node, True, actor)


def unmark_spare(node, *, actor=None) -> bool:
    return _set_spare(node, False, actor)


NODE_LABELS_RULE = "labels must be a JSON object of name: value, e.g. {\"zone\": \"a\"}"


class NodeForm(NameRuleForm):
    """The one name rule (names.py) on the admin's node form: a node every per-node URL can name (new-user trial
    13, F2). A node registered before the rule under a name that breaks it is renamed here (its agent is then
    started with --node-name NEW)."""

    name_kind = "node"

    class Meta:
        model = Node
        fields = "__all__"

    def clean(self):
        """A rename to another node's name but for letter case is refused on `name` (services.nodes.NODE_NAME_RULE,
        the registration's rule: host names do not differ by case)."""
        data = super().clean()
        name = data.get("name")
        if isinstance(name, str) and "name" not in self.errors:
            from .services.nodes import node_name_clash, node_name_taken

            holder = node_name_clash(name, other_than=self.instance.pk)
            if holder is not None and holder != name:
                self.add_error("name", node_name_taken(holder))
        return data

    def clean_labels(self):
        """The registration's label rule (api.serializers.cluster.NodeRegisterSerializer's `labels`: an object of
        names of 1-200 characters to strings): any other JSON saved here made every later registration of the node
        a 500 (trial 17c, G6: labels [1, 2])."""
        from .api.serializers.cluster import NodeRegisterSerializer

        value = self.cleaned_data.get("labels")
        if not isinstance(value, dict):  # DRF's words ('Expected a dictionary of items but got type "list".')
            raise forms.ValidationError(NODE_LABELS_RULE)  # name the rule of the admin's JSON box instead
        check = NodeRegisterSerializer(data={"labels": value}, partial=True)
        if not check.is_valid() and "labels" in check.errors:
            # plain text, never the repr of DRF's ErrorDetail list (new-user trial 25h, 2)
            raise forms.ValidationError(f"labels: {error_text(check.errors['labels'])}")
        return value


@admin.register(Node)
class NodeAdmin(StoredTitleAdmin):
    form = NodeForm
    list_filter = ("state", "spare", "flavor", "domain__tier")
    search_fields = ("name",)
    readonly_fields = ("state", "spare")  # changed through the actions, which audit the change
    # Only these are edited here. The rest is what the node's registration reports (services.register_node: the
    # GPU rows, their count, the flavor its jobs were charged for, the CPU and memory they were placed against) or
    # what the services keep (its health, heartbeats, validation). Edited here they disagreed with the GPUs and the
    # jobs (trial 17, F7: gpu_count 100 on an 8-GPU node: phantom GPUs in the metrics, a 20-GPU job accepted and
    # planned on GPUs that do not exist, stale every cycle)
    editable_fields = ("name", "domain", "labels")
    inlines = [GpuInline]

    def has_add_permission(self, request):
        return False  # nodes join by registering (their agent) or from a cluster file (load_cluster), GPUs and all

    def save_model(self, request, obj, form, change):
        old = Node.objects.filter(pk=obj.pk).values_list("name", flat=True).first() if change else None
        super().save_model(request, obj, form, change)
        if old is not None and old != obj.name:  # the agent's token scope follows; the agent must be restarted
            services.follow_node_rename(old, obj.name, actor=request.user)
            self.message_user(request, f"{old} is now {obj.name}: restart its agent with --node-name {obj.name}",
                              messages.WARNING)

    def get_readonly_fields(self, request, obj=None):
        return tuple(f.name for f in Node._meta.fields if f.editable and f.name not in self.editable_fields
                     and f.name != "id")
    list_display = ("name", "flavor", "gpu_count", "domain", "state", "spare", "health_reason", "health_since",
                    "last_heartbeat")
    actions = [_service_action(mark_spare, "Mark as hot spares (nodes running nothing or only interruptible jobs)",
                               "already spares"),
               _service_action(unmark_spare, "Return spares to ordinary use", "were not spares"),
               _service_action(services.cordon_node, "Cordon selected nodes"),
               _service_action(services.drain_node, "Drain selected nodes"),
               _service_action(services.uncordon_node, "Uncordon selected nodes"),
               _service_action(services.start_repair, "Start repair (cordoned / draining -> in repair)"),
               _service_action(services.start_validation, "Validate (in repair -> validating)")]


class _RuleAdmin(ServiceAdmin):
    """Rules are saved through their service (validated by the same parser as the shipped table, audited)."""

    service = None

    def save_model(self, request, obj, form, change):
        type(self).service(obj, actor=request.user)

    def get_form(self, request, obj=None, **kwargs):
        form = super().get_form(request, obj, **kwargs)
        service = type(self).service

        class Checked(form):
            def _post_clean(self):
                super()._post_clean()
                from .diagnosis import engine, tables

                check = tables.check_rule if service is services.save_diagnosis_rule else tables.check_health_rule
                try:
                    check(self.instance.as_entry())
                except engine.RuleError as exc:
                    key = exc.field.split(".", 1)[1].split(".")[0] if "." in exc.field else None
                    self.add_error(key if key in self.fields else None, exc.message)

        return Checked


@admin.register(DiagnosisRule)
class DiagnosisRuleAdmin(_RuleAdmin):
    """Diagnosis rules added after gpuplatform/diagnosis/rules.yaml (docs/diagnosis.md)."""

    service = staticmethod(services.save_diagnosis_rule)
    list_display = ("name", "category", "action", "pattern", "enabled", "source")
    list_filter = ("category", "action", "enabled")


@admin.register(HealthRule)
class HealthRuleAdmin(_RuleAdmin):
    """Node health rules added after gpuplatform/diagnosis/health_rules.yaml (docs/diagnosis.md)."""

    service = staticmethod(services.save_health_rule)
    list_display = ("name", "signal", "op", "value", "action", "enabled", "source")
    list_filter = ("signal", "action", "enabled")


@admin.register(Attempt)
class AttemptAdmin(ReadOnlyAdmin):
    list_display = ("job", "number", "outcome", "failed", "category", "ended_at", "recovery_seconds")
    list_filter = ("failed", "category", "outcome")


@admin.register(Gpu)
class GpuAdmin(ReadOnlyAdmin):
    """Read-only (trial 17, F6: its change form set the sharing mode and memory of a GPU in use, which the sharing
    API refuses, and wrote no Event): sharing through POST /api/v1/nodes/<node>/sharing/ or gpuctl set-sharing,
    health through the heartbeats (cordon or drain the node to take it out of service)."""

    list_display = ("__str__", "node", "index", "numa_node", "health")
    list_filter = ("health", "node__flavor")
    search_fields = ("node__name", "uuid")


class JobRoleInline(admin.TabularInline):
    model = JobRole
    extra = 0
    can_delete = False

    def has_change_permission(self, request, obj=None):
        return False

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Job)
class JobAdmin(ReadOnlyAdmin):
    list_display = ("name", "team", "queue", "state", "priority", "never_fits", "placement_domain", "submitted_at")
    list_filter = ("state", "never_fits", "queue", "team", "topology_mode")
    search_fields = ("name", "external_id")
    date_hierarchy = "submitted_at"
    inlines = [JobRoleInline]
    actions = [_service_action(services.cancel_job, "Cancel selected jobs")]


@admin.register(Task)
class TaskAdmin(ReadOnlyAdmin):
    list_display = ("job", "role", "index", "state", "node")
    list_filter = ("state",)


@admin.register(Allocation)
class AllocationAdmin(ReadOnlyAdmin):
    list_display = ("job", "task", "gpu", "created_at", "released_at")
    list_filter = ("released_at",)


@admin.register(Event)
class EventAdmin(ReadOnlyAdmin):
    list_display = ("time", "kind", "message", "actor", "job", "queue", "node", "cycle")
    list_filter = ("kind",)
    search_fields = ("message",)


@admin.register(SchedulerCycle)
class SchedulerCycleAdmin(ReadOnlyAdmin):
    list_display = ("number", "started_at", "clock", "duration_ms", "binds", "pending", "stale_skipped", "error")


@admin.register(ClusterSample)
class ClusterSampleAdmin(ReadOnlyAdmin):
    list_display = ("time", "cycle", "allocation_rate", "fragmentation_rate", "free_gpus", "pending_jobs")


@admin.register(QueueSample)
class QueueSampleAdmin(ReadOnlyAdmin):
    list_display = ("time", "queue", "used", "guarantee", "quota", "limit", "pending_demand")
    list_filter = ("queue",)
from .federation import admin as _federation_admin  # noqa: E402,F401  (member clusters, federated jobs)

"""Admin pages for federation: member clusters (the token is entered, never shown; saved through the
services, so every change is audited) and the federated jobs (read-only)."""
from django import forms
from django.contrib import admin

from ..admin_services import ServiceAdmin
from ..models import FederatedJob, MemberCluster
from . import manager
from .secrets import masked


class MemberClusterForm(forms.ModelForm):
    name = forms.CharField(help_text=manager.CLUSTER_NAME_RULE,
                           error_messages={"required": manager.CLUSTER_NAME_RULE})  # the API's words (clean_name)
    api_url = forms.URLField(max_length=300, assume_scheme="https", help_text="the worker's base address")
    token = forms.CharField(widget=forms.PasswordInput(render_value=False), required=False, max_length=500,
                            help_text="the member's service token (a user in its federation-managers group); "
                                      "stored encrypted; leave blank to keep the current one")

    class Meta:
        model = MemberCluster
        fields = ["name", "api_url", "token", "labels", "cost_per_gpu_hour", "enabled"]

    def clean_name(self):
        """The name's rule in its one wording (manager.cluster_name_error), as the API answers it."""
        error = manager.cluster_name_error(self.cleaned_data["name"])
        if error:
            raise forms.ValidationError(error)
        return self.cleaned_data["name"]

    def clean(self):
        data = super().clean()
        if self.instance.pk is None and not data.get("token"):
            self.add_error("token", "required for a new member cluster")
        return data

    def validate_unique(self):
        """A name taken is the service's rule, checked under the name's lock (manager.register_cluster /
        update_cluster), shown on the field in its one wording (manager.name_taken), not the model form's."""


@admin.register(MemberCluster)
class MemberClusterAdmin(ServiceAdmin):
    form = MemberClusterForm
    list_display = ("name", "api_url", "state", "enabled", "cost_per_gpu_hour", "last_sync_at", "token_status")
    readonly_fields = ("state", "last_sync_at", "last_error", "sync_bytes", "token_status")

    @admin.display(description="token")
    def token_status(self, obj):
        return masked(obj.token_encrypted)

    def save_model(self, request, obj, form, change):
        d = form.cleaned_data
        fields = {k: d[k] for k in ("name", "api_url", "labels", "cost_per_gpu_hour", "enabled")}
        if change:
            if d.get("token"):
                fields["token"] = d["token"]
            saved = manager.update_cluster(MemberCluster.objects.get(pk=obj.pk), actor=request.user, **fields)
        else:
            saved = manager.register_cluster(token=d["token"], actor=request.user, **fields)
        obj.pk = saved.pk


@admin.register(FederatedJob)
class FederatedJobAdmin(admin.ModelAdmin):
    list_display = ("id", "name", "team", "queue", "state", "gpus", "cluster", "remote_id", "generation", "submitted_at")
    list_filter = ("state", "cluster")
    search_fields = ("name",)

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

"""ServiceAdmin: the admin's add and change forms save through a service, and a refusal is a form error.

Every admin write goes through its service (services.create_queue, set_quota, save_diagnosis_rule,
federation.manager.register_cluster ...), which checks the rules again inside its transaction and raises
services.ValidationError. Django's admin does not expect save_model to refuse: a refusal raised there was a
500 with a traceback in the server log, and one caught there showed "not saved" next to "... was added
successfully" (linking to /<model>/None/change/). Here the refusal rolls the admin's transaction back and
the same request's form is shown again with the service's errors on their fields (an error naming no form
field goes above the form, prefixed with its name): nothing is stored, no success message, no LogEntry, and
the server log gets one WARNING line (logger gpuplatform.admin), no traceback.
"""
from __future__ import annotations

import logging

from django.contrib import admin

from .errors import ValidationError
from .inputs import TextRuleForm, error_text

log = logging.getLogger("gpuplatform.admin")

_REFUSAL = "_gpuplatform_service_refusal"


class StoredTitleAdmin(admin.ModelAdmin):
    """A change page shown again with errors names the row as it is stored, not as the refused form left it:
    Django titles the page and its breadcrumb with str() of the form's instance, which the form has already set
    to the values it refuses (new-user trial 25h, 3: a quota 0/14 with limit 5 refused was titled
    "Error: 103959/philly-gpu: 0/14/5", as if the limit had been stored)."""

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        form = context.get("adminform").form if context.get("adminform") is not None else None
        if change and obj is not None and obj.pk is not None and form is not None and form.errors:
            stored = self.model._default_manager.filter(pk=obj.pk).first()
            if stored is not None:
                context["subtitle"], context["original"] = str(stored), stored
        return super().render_change_form(request, context, add=add, change=change, form_url=form_url, obj=obj)


class ServiceAdmin(StoredTitleAdmin):
    """A ModelAdmin whose save_model calls a service that may raise services.ValidationError."""

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except ValidationError as exc:
            if getattr(request, _REFUSAL, None) is not None:
                raise  # the form with the errors refused again: cannot happen (an invalid form saves nothing)
            setattr(request, _REFUSAL, dict(exc.errors))
            what = f"{self.model._meta.verbose_name} {'change' if object_id else 'add'}"
            log.warning("admin %s by %s refused: %s", what, getattr(request.user, "username", "?"),
                        str(exc).replace("\n", " "))
            return super().changeform_view(request, object_id, form_url, extra_context)

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change=change, **kwargs)
        if not issubclass(form, TextRuleForm):  # the API's text rule on every admin form's text (trial 22, F3)
            form = type(form.__name__, (TextRuleForm, form), {"__module__": form.__module__})
        errors = getattr(request, _REFUSAL, None)
        if not errors:
            return form

        class Refused(form):
            def clean(self):
                data = super().clean()
                for field, message in errors.items():
                    message = error_text(message)  # a serializer's ErrorDetail list as its text
                    if field in self.fields and not self.fields[field].widget.is_hidden:  # (a hidden field's
                        # error would not show: the form's `version` goes above the form)
                        self.add_error(field, message)
                    else:
                        self.add_error(None, message if field in ("__all__", "non_field_errors")
                                       else f"{field}: {message}")
                return data

        Refused.__name__ = form.__name__
        return Refused

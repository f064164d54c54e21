"""The job submission form: a job form plus a formset of roles. The browser validates first (HTML5 min /
required / pattern, see job_form.js); the server validates the same rules in `services.submit_job`, whose
ValidationError field names ("queue", "roles[1].min_available", ...) are put back on the form fields here.
"""
from __future__ import annotations

from django import forms
from django.core.validators import RegexValidator

from gpuplatform import job_rules as rules

NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._\-]*"
NAME_HELP = "letters, digits, '.', '_' and '-', starting with a letter or digit"
TOPOLOGY_CHOICES = [("none", "none: anywhere"), ("soft", "soft: prefer the lowest tier"),
                    ("hard", "hard: never cross the highest tier")]
FORM_FIELD = {"time_limit_seconds": "time_limit_minutes", "duration_seconds": "time_limit_minutes"}


def _number(min_value=None, required=True, initial=None, help_text="", label=None, max_value=None):
    return forms.IntegerField(min_value=min_value, max_value=max_value, required=required, initial=initial,
                              help_text=help_text, label=label, widget=forms.NumberInput(attrs={"inputmode": "numeric"}))


class JobForm(forms.Form):
    name = forms.CharField(max_length=200, help_text=NAME_HELP,
                           validators=[RegexValidator(f"^{NAME_PATTERN}$", f"Use {NAME_HELP}.")],
                           widget=forms.TextInput(attrs={"pattern": NAME_PATTERN, "title": f"Use {NAME_HELP}.",
                                                         "autocomplete": "off"}))
    team = forms.ChoiceField()
    queue = forms.ChoiceField(help_text="a leaf queue of the team")
    priority = _number(initial=0, min_value=-rules.MAX_PRIORITY, max_value=rules.MAX_PRIORITY,
                       help_text="higher runs first inside the queue; may preempt lower ones")
    preemptible = forms.BooleanField(required=False, initial=True,
                                     help_text="may be evicted (after a grace period) for higher-priority work")
    time_limit_minutes = _number(min_value=1, max_value=rules.MAX_TIME_LIMIT_SECONDS // 60, required=False,
                                 label="Time limit (minutes)",
                                 help_text="optional; lets the scheduler backfill around this job")
    topology_mode = forms.ChoiceField(choices=TOPOLOGY_CHOICES, initial="none")
    highest_tier = forms.TypedChoiceField(coerce=int, required=False, empty_value=None,
                                          help_text="1 = one NVLink domain, 2 = one leaf switch, ...")
    preferred_tier = forms.TypedChoiceField(coerce=int, required=False, empty_value=None)

    def __init__(self, *args, teams=(), queues=(), tiers=(), **kwargs):
        """teams: names the user may submit for; queues: (name, team name) of open leaf queues."""
        super().__init__(*args, **kwargs)
        self.fields["team"].choices = [("", "choose a team")] + [(t, t) for t in teams]
        self.fields["queue"].choices = [("", "choose a queue")] + [(q, f"{q} ({t})") for q, t in queues]
        self.queue_teams = dict(queues)
        tier_choices = [("", "—")] + [(str(t), f"tier {t}") for t in tiers]
        self.fields["highest_tier"].choices = tier_choices
        self.fields["preferred_tier"].choices = tier_choices

    def clean(self):
        data = super().clean()
        queue, team = data.get("queue"), data.get("team")
        if queue and team and self.queue_teams.get(queue) not in (None, team):
            self.add_error("queue", f"queue {queue} belongs to team {self.queue_teams[queue]}, not {team}")
        return data


class RoleForm(forms.Form):
    name = forms.CharField(max_length=64, initial="worker", label="Role name",
                           validators=[RegexValidator(f"^{NAME_PATTERN}$", f"Use {NAME_HELP}.")],
                           widget=forms.TextInput(attrs={"pattern": NAME_PATTERN, "title": f"Use {NAME_HELP}.",
                                                         "size": 10}))
    tasks = _number(min_value=1, max_value=rules.MAX_TASKS_PER_JOB, initial=1)
    gpus_per_task = _number(min_value=0, max_value=rules.MAX_GPUS_PER_TASK, initial=1, label="GPUs per task")
    cpu_milli = _number(min_value=0, max_value=rules.MAX_CPU_MILLI, initial=0, required=False,
                        label="CPU per task (millicores)")
    memory_mib = _number(min_value=0, max_value=rules.MAX_MEMORY_MIB, initial=0, required=False,
                         label="Memory per task (MiB)")
    min_available = _number(min_value=1, max_value=rules.MAX_TASKS_PER_JOB, required=False, label="Min available",
                            help_text="blank = all tasks (a strict gang)")
    flavor = forms.ChoiceField(required=False, label="GPU flavor")

    def __init__(self, *args, flavors=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["flavor"].choices = [("", "any")] + [(f, f) for f in flavors]
        for f in self.fields.values():
            f.widget.attrs.setdefault("class", "role-input")

    def clean(self):
        data = super().clean()
        tasks, min_av = data.get("tasks"), data.get("min_available")
        if tasks and min_av and min_av > tasks:
            self.add_error("min_available", f"min available ({min_av}) must not exceed tasks ({tasks})")
        return data

    def has_changed(self) -> bool:
        return True  # a role left at its defaults (1 task x 1 GPU) is a real role, not an empty extra form

    def role(self) -> dict:
        d = self.cleaned_data
        return {"name": d["name"], "tasks": d["tasks"], "gpus_per_task": d["gpus_per_task"],
                "cpu_milli": d.get("cpu_milli") or 0, "memory_mib": d.get("memory_mib") or 0,
                "min_available": d.get("min_available") or d["tasks"], "flavor": d.get("flavor") or ""}


RoleFormSet = forms.formset_factory(RoleForm, extra=0, min_num=1, validate_min=True, max_num=16,
                                    validate_max=True)


def apply_service_errors(errors: dict[str, str], form: JobForm, roles) -> None:
    """Put services.ValidationError entries on the matching form or role field (else on the form)."""
    for key, message in errors.items():
        if key.startswith("roles[") and "]" in key:
            index, _, field = key[6:].partition("]")
            field = field.lstrip(".")
            try:
                role_form = roles.forms[int(index)]
            except (ValueError, IndexError):
                form.add_error(None, f"{key}: {message}")
                continue
            role_form.add_error(field if field in role_form.fields else None, message)
        elif key == "roles":
            form.add_error(None, message)
        else:
            field = FORM_FIELD.get(key, key)
            form.add_error(field if field in form.fields else None, message)

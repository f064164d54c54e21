"""The job submission form: a job form plus a formset of roles. The browser validates first (HTML5 min /
required / pattern, see job_form.js); the server validates the same rules in `services.submit_job`, whose
ValidationError field names ("queue", "roles[1].min_available", "env.NAME", ...) are put back on the form
fields here.

What the job runs (docs/execution.md): `command` is one line split with shlex into an argv list (a role may
give its own, else it runs the job's); `env` is a textarea of NAME=value lines.
"""
from __future__ import annotations

import shlex

from django import forms
from django.core.exceptions import ValidationError as FormValidationError

from gpuplatform import job_rules as rules
from gpuplatform.inputs import TextRuleForm
from gpuplatform.names import name_error

NAME_PATTERN, NAME_HELP = rules.NAME_PATTERN, rules.NAME_HELP  # the one name rule (the API checks it too)


def name_validator(kind: str):
    """The one name rule (gpuplatform/names.py) as a form validator: the API's message, word for word."""
    def validate(value):
        message = name_error(kind, value)
        if message:
            raise FormValidationError(message)
    return validate
TOPOLOGY_CHOICES = [("none", "none: anywhere"), ("soft", "soft: prefer the lowest tier"),
                    ("hard", "hard: never cross the highest tier")]
FORM_FIELD = {"time_limit_seconds": "time_limit_minutes", "duration_seconds": "time_limit_minutes",
              "min_run_before_move_seconds": "min_run_before_move_minutes"}
COMMAND_EXAMPLE = "python3 train.py --epochs 3"
ENV_EXAMPLE = "NCCL_DEBUG=INFO\nDATA_DIR=/data/imagenet"


def split_command(value: str) -> list[str]:
    """One command line -> argv with POSIX shell quoting (shlex.split); "" -> []. Raises
    forms.ValidationError naming the quoting problem."""
    if len(value) > rules.MAX_COMMAND_CHARS:
        raise forms.ValidationError(f"The command must be at most {rules.MAX_COMMAND_CHARS} characters.")
    try:
        argv = shlex.split(value)
    except ValueError as exc:  # "No closing quotation", "No escaped character"
        raise forms.ValidationError(f"The command is not a valid shell word list: {exc}.") from None
    if len(argv) > rules.MAX_ARGV:
        raise forms.ValidationError(f"The command may have at most {rules.MAX_ARGV} arguments.")
    return argv


def parse_env(text: str) -> tuple[dict[str, str], dict[str, int]]:
    """NAME=value lines -> ({name: value}, {name: 1-based line number}). Lines are trimmed; blank lines and
    lines starting with '#' are skipped; the value is everything after the first '=' (it may be empty or
    contain '='). Raises forms.ValidationError listing every bad line by number: no '=', a name that is not
    letters / digits / '_' (not starting with a digit), a name the platform sets, a name given twice."""
    env: dict[str, str] = {}
    lines: dict[str, int] = {}
    problems: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, eq, value = line.partition("=")
        name = name.strip()
        shown = line if len(line) <= 40 else line[:37] + "..."
        if not eq:
            problems.append(f"line {number}: expected NAME=value, got {shown!r}")
        elif len(name) > rules.MAX_ENV_NAME_CHARS:
            problems.append(f"line {number}: {rules.env_name_shown(name)!r}: {rules.env_name_too_long(name)}")
        elif not rules.ENV_NAME.match(name):
            problems.append(f"line {number}: {name!r} is not a variable name (letters, digits and _, "
                            f"not starting with a digit)")
        elif name in rules.PLATFORM_ENV or name.startswith(rules.PLATFORM_ENV_PREFIX):
            problems.append(f"line {number}: {name} is set by the platform for every task and cannot be overridden")
        elif name in lines:
            problems.append(f"line {number}: {name} is already set on line {lines[name]}")
        elif len(value) > rules.MAX_ENV_VALUE_CHARS:
            problems.append(f"line {number}: the value of {name} is longer than {rules.MAX_ENV_VALUE_CHARS} characters")
        else:
            env[name], lines[name] = value, number
    if not problems and len(env) > rules.MAX_ENV_VARS:
        problems.append(f"at most {rules.MAX_ENV_VARS} variables")
    if problems:
        raise forms.ValidationError(problems)
    return env, lines


def _number(min_value=None, required=True, initial=None, help_text="", label=None, max_value=None):
    return forms.IntegerField(min_value=min_value, max_value=max_value, required=required, initial=initial,
                              help_text=help_text, label=label, widget=forms.NumberInput(attrs={"inputmode": "numeric"}))


class JobForm(TextRuleForm, forms.Form):
    name = forms.CharField(max_length=200, help_text=NAME_HELP, validators=[name_validator("job")],
                           widget=forms.TextInput(attrs={"pattern": NAME_PATTERN, "title": f"Use {NAME_HELP}.",
                                                         "autocomplete": "off"}))
    team = forms.ChoiceField()
    queue = forms.ChoiceField(help_text="a leaf queue of the team")
    priority = _number(initial=0, min_value=-rules.MAX_PRIORITY, max_value=rules.MAX_PRIORITY,
                       help_text="higher runs first inside the queue; may preempt lower ones; above 0 only for team admins")
    preemptible = forms.BooleanField(required=False, initial=True,
                                     help_text="may be evicted (after a grace period) for higher-priority work")
    interruptible = forms.BooleanField(required=False, initial=False,
                                       help_text="may be stopped at once, without a grace period: it may also run "
                                                 "on hot spare nodes (it must be preemptible)")
    time_limit_minutes = _number(min_value=1, max_value=rules.MAX_TIME_LIMIT_SECONDS // 60, required=False,
                                 label="Time limit (minutes)",
                                 help_text="optional; the job is stopped when it runs longer (and the scheduler "
                                           "can backfill around it)")
    migratable = forms.BooleanField(required=False, initial=False,
                                    help_text="it checkpoints on SIGTERM and resumes when restarted: the scheduler may "
                                              "move it to free a whole domain for a large job")
    min_run_before_move_minutes = _number(min_value=0, max_value=7 * 24 * 60, initial=0, required=False,
                                          label="Minimum run before a move (minutes)",
                                          help_text="it is never moved before running this long")
    checkpoint_grace_seconds = _number(min_value=1, max_value=86400, required=False, label="Checkpoint grace (s)",
                                       help_text="time it gets to write its checkpoint when moved; blank = the "
                                                 "queue's grace period")
    max_restarts = _number(min_value=0, max_value=rules.MAX_RESTARTS, initial=0, required=False,
                           label="Max restarts",
                           help_text="after a task fails, restart the whole gang up to this many times (0 = never)")
    command = forms.CharField(max_length=rules.MAX_COMMAND_CHARS, strip=True,
                              help_text="one line, split like a shell would (quotes work; no pipes or $VARS), "
                                        "run by every task of a role without its own command",
                              widget=forms.TextInput(attrs={"placeholder": COMMAND_EXAMPLE, "autocomplete": "off",
                                                            "spellcheck": "false", "class": "wide"}))
    env = forms.CharField(required=False, strip=False, label="Environment",
                          help_text="one NAME=value per line; the platform sets CUDA_VISIBLE_DEVICES, RANK, "
                                    "WORLD_SIZE, MASTER_ADDR, ... itself",
                          widget=forms.Textarea(attrs={"rows": 3, "placeholder": ENV_EXAMPLE, "spellcheck": "false",
                                                       "class": "wide"}))
    working_dir = forms.CharField(required=False, max_length=rules.MAX_PATH_CHARS, label="Working directory",
                                  help_text="blank = the task's own directory on the node; otherwise an "
                                            "absolute path (starting with /)",
                                  widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"}))
    image = forms.CharField(required=False, max_length=rules.MAX_IMAGE_CHARS, label="Container image",
                            help_text="optional, e.g. nvcr.io/nvidia/pytorch:24.05-py3; blank = a plain process",
                            widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"}))
    completion_role = forms.CharField(required=False, max_length=64, label="Completion role",
                                      help_text="the job succeeds when this role's tasks exit 0; blank = every role")
    topology_mode = forms.ChoiceField(choices=TOPOLOGY_CHOICES, initial="none")
    highest_tier = forms.TypedChoiceField(coerce=int, required=False, empty_value=None,
                                          help_text="1 = one NVLink domain, 2 = one leaf switch, ...")
    preferred_tier = forms.TypedChoiceField(coerce=int, required=False, empty_value=None)
    numa = forms.ChoiceField(choices=[("prefer", "prefer one NUMA node per task"),
                                      ("single", "single NUMA node per task, or wait")],
                             initial="prefer", required=False, label="NUMA",
                             help_text="single: a task whose GPUs no NUMA node of a node holds waits (kubelet's "
                                       "single-numa-node policy)")

    def __init__(self, *args, teams=(), queues=(), tiers=(), **kwargs):
        """teams: names the user may submit for; queues: (name, team name) of open leaf queues."""
        super().__init__(*args, **kwargs)
        self.fields["team"].choices = [("", "choose a team")] + [(t, t) for t in teams]
        self.fields["queue"].choices = [("", "choose a queue")] + [(q, f"{q} ({t})") for q, t in queues]
        self.queue_teams = dict(queues)
        tier_choices = [("", "—")] + [(str(t), f"tier {t}") for t in tiers]
        for name in ("highest_tier", "preferred_tier"):
            self.fields[name].choices = tier_choices
            self.fields[name].error_messages["invalid_choice"] = rules.no_such_tier("%(value)s", tiers)
        self.env_lines: dict[str, int] = {}  # env name -> its line in the textarea (for the service's errors)

    def clean_command(self) -> list[str]:
        argv = split_command(self.cleaned_data["command"])
        if not argv:
            raise forms.ValidationError(f"Give the program to run, e.g. {COMMAND_EXAMPLE}.")
        return argv

    def clean_env(self) -> dict[str, str]:
        env, self.env_lines = parse_env(self.cleaned_data.get("env") or "")
        return env

    def clean(self):
        data = super().clean()
        queue, team = data.get("queue"), data.get("team")
        if queue and team and self.queue_teams.get(queue) not in (None, team):
            self.add_error("queue", f"queue {queue} belongs to team {self.queue_teams[queue]}, not {team}")
        return data


class RoleForm(TextRuleForm, forms.Form):
    name = forms.CharField(max_length=64, initial="worker", label="Role name", validators=[name_validator("role")],
                           widget=forms.TextInput(attrs={"pattern": NAME_PATTERN, "title": f"Use {NAME_HELP}.",
                                                         "size": 10}))
    tasks = _number(min_value=1, max_value=rules.MAX_TASKS_PER_JOB, initial=1)
    # not required: a role asking for a share of a GPU or MIG instances may leave it blank (clean)
    gpus_per_task = _number(min_value=0, max_value=rules.MAX_GPUS_PER_TASK, initial=1, label="GPUs per task",
                            required=False)
    cpu_milli = _number(min_value=0, max_value=rules.MAX_CPU_MILLI, initial=0, required=False,
                        label="CPU per task (millicores)")
    memory_mib = _number(min_value=0, max_value=rules.MAX_MEMORY_MIB, initial=0, required=False,
                         label="Memory per task (MiB)")
    min_available = _number(min_value=1, max_value=rules.MAX_TASKS_PER_JOB, required=False, label="Min available",
                            help_text="blank = all tasks (a strict gang)")
    flavor = forms.ChoiceField(required=False, label="GPU flavor",
                               help_text="roles may run on different flavors (e.g. trainer and rollout workers)")
    gpu_fraction = forms.FloatField(min_value=0.001, max_value=0.999, required=False, label="GPU fraction",
                                    help_text="instead of whole GPUs: a share of one GPU per task, e.g. 0.5")
    gpu_memory_mib = _number(min_value=1, max_value=rules.MAX_MEMORY_MIB, required=False, label="GPU memory (MiB)",
                             help_text="instead of whole GPUs: this much memory of one shared GPU per task")
    mig_profile = forms.CharField(max_length=32, required=False, label="MIG profile",
                                  help_text="instead of whole GPUs: MIG instances of this profile, e.g. 1g.18gb")
    mig_count = _number(min_value=1, max_value=rules.MAX_MIG_INSTANCES, required=False, label="MIG instances",
                        help_text="per task, with a MIG profile (blank = 1)")
    group_size = _number(min_value=1, max_value=rules.MAX_TASKS_PER_JOB, required=False, label="Group size",
                         help_text="sub-group: every this many tasks inside one domain of the group tier (blank = none)")
    group_highest_tier = forms.TypedChoiceField(coerce=int, required=False, empty_value=None, label="Group tier",
                                                help_text="e.g. tier 1 = a tensor-parallel group in one NVLink domain")
    command = forms.CharField(required=False, max_length=rules.MAX_COMMAND_CHARS, label="Role command",
                              help_text="blank = the job's command",
                              widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"}))

    def __init__(self, *args, flavors=(), tiers=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["flavor"].choices = [("", "any")] + [(f, f) for f in flavors]
        self.fields["group_highest_tier"].choices = [("", "—")] + [(str(t), f"tier {t}") for t in tiers]
        self.fields["group_highest_tier"].error_messages["invalid_choice"] = rules.no_such_tier("%(value)s", tiers)
        for f in self.fields.values():
            f.widget.attrs.setdefault("class", "role-input")

    SHARING_FIELDS = ("gpu_fraction", "gpu_memory_mib", "mig_profile", "mig_count")

    def clean(self):
        data = super().clean()
        if data.get("gpus_per_task") is None and "gpus_per_task" not in self.errors:
            # GPUs per task left blank: a role that asks for a GPU fraction, GPU memory or MIG instances
            # ("instead of whole GPUs") is one GPU's share, which the API's rules then judge (a mig_count
            # without a profile: "mig_count needs mig_profile ..."), not "This field is required." (new-user
            # trial 8, F8); a role that asks for none of them needs the number
            if any(data.get(k) not in (None, "") for k in self.SHARING_FIELDS):
                data["gpus_per_task"] = 1
            else:
                self.add_error("gpus_per_task", "enter the GPUs per task (0 or more), or ask for a GPU fraction, "
                                                "GPU memory or MIG instances instead")
        tasks, min_av = data.get("tasks"), data.get("min_available")
        if tasks and min_av and min_av > tasks:
            self.add_error("min_available", f"min available ({min_av}) must not exceed tasks ({tasks})")
        return data

    def clean_command(self) -> list[str]:
        return split_command(self.cleaned_data.get("command") or "")

    def has_changed(self) -> bool:
        return True  # a role left at its defaults (1 task x 1 GPU) is a real role, not an empty extra form

    def role(self) -> dict:
        d = self.cleaned_data
        return {"name": d["name"], "tasks": d["tasks"], "gpus_per_task": d["gpus_per_task"],
                "cpu_milli": d.get("cpu_milli") or 0, "memory_mib": d.get("memory_mib") or 0,
                "min_available": d.get("min_available") or d["tasks"], "flavor": d.get("flavor") or "",
                **({"command": d["command"]} if d.get("command") else {}),
                **{k: d[k] for k in ("gpu_fraction", "gpu_memory_mib", "mig_count") if d.get(k) is not None},
                **({"mig_profile": d["mig_profile"]} if d.get("mig_profile") else {}),
                **({"group_size": d.get("group_size"), "group_highest_tier": d.get("group_highest_tier")}
                   if d.get("group_size") or d.get("group_highest_tier") is not None else {})}


MAX_FORM_ROLES = 16


class BaseRoleFormSet(forms.BaseFormSet):
    """The roles of the submit form, in the API's words: none is job_rules.NO_ROLES (Django's "Please submit at
    least 1 form." named no role); at most MAX_FORM_ROLES forms are ever built (absolute_max: a post with
    roles-TOTAL_FORMS=100000 built 1,016 forms, a 6 MB page, new-user trial 8 F7)."""

    default_error_messages = {
        "too_few_forms": rules.NO_ROLES,
        "too_many_forms": "a job submitted from this form has at most %(num)d roles",
    }


RoleFormSet = forms.formset_factory(RoleForm, formset=BaseRoleFormSet, extra=0, min_num=1, validate_min=True,
                                    max_num=MAX_FORM_ROLES, validate_max=True, absolute_max=MAX_FORM_ROLES)


def apply_service_errors(errors: dict[str, str], form: JobForm, roles) -> None:
    """Put services.ValidationError entries on the matching form or role field (else on the form, or the
    role's box). "env.NAME" lands on the Environment field naming the line NAME was on; a key the form has
    no field for keeps its name in the message."""
    for key, message in errors.items():
        if key.startswith("roles[") and "]" in key:
            index, _, field = key[6:].partition("]")
            field = field.lstrip(".")
            try:
                role_form = roles.forms[int(index)]
            except (ValueError, IndexError):
                form.add_error(None, f"{key}: {message}")
                continue
            base = field.split(".")[0]
            if base in role_form.fields:
                role_form.add_error(base, message)
            else:
                role_form.add_error(None, f"{field}: {message}" if field else message)
        elif key == "roles":
            form.add_error(None, message)
        elif key.startswith("env."):
            name = key[4:]
            line = form.env_lines.get(name)
            form.add_error("env", f"line {line}: {name}: {message}" if line else f"{name}: {message}")
        else:
            field = FORM_FIELD.get(key, key)
            form.add_error(field if field in form.fields else None,
                           message if field in form.fields else f"{key}: {message}")

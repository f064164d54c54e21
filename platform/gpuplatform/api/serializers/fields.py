"""Field helpers shared by the serializers: bounded integers (the database's 32-bit columns must never
see an overflow, which would be a 500, not a 400)."""
import math

from django.http import QueryDict
from rest_framework import serializers

INT32_MAX = 2**31 - 1


class QueryIntegerField(serializers.IntegerField):
    """An integer read from a query parameter by the one number parser (inputs.whole_number): ASCII digits and a
    leading '-' (below min_value: its min_value message), never DRF's '1.0', ' 1', '1_0' or another script's
    digits (trial 20, F4): those are its `invalid` message. For query serializers only: a JSON body's 2.0 stays 2."""

    def to_internal_value(self, data):
        from ...inputs import whole_number

        number = whole_number(data, negative=True) if isinstance(data, str) else None
        if number is None:
            self.fail("invalid")
        return super().to_internal_value(number)


def count_field(rule: str | None = None, low: str | None = None, **kwargs) -> serializers.IntegerField:
    """A whole number of GPUs / tasks / millicores / MiB / seconds; range rules are the services'. `rule` (and
    `low`, for a value below the range; default `rule`): the service's words for its range, said for a value
    beyond the 32-bit column too, whatever its size (new-user trial 22, G11: tasks 10**23 was "less than or equal
    to 2147483647" while the rule is at most 4096). Without them, DRF's words for the column's bounds."""
    kwargs.setdefault("min_value", -INT32_MAX)
    kwargs.setdefault("max_value", INT32_MAX)
    if rule is not None:
        kwargs["error_messages"] = {"max_value": rule, "min_value": low or rule, **kwargs.get("error_messages", {})}
    return serializers.IntegerField(**kwargs)


def quota_field(name: str, **kwargs) -> serializers.IntegerField:
    """A queue's guarantee, quota or limit (`name`), in GPUs: the one quota rule (scheduler.forecast.variants.QUOTA_MAX,
    quota_error) with its message naming the field, for the quota API and the forecast's set_quota alike (new-user
    trial 13: the forecast took 0 to 10,000,000, the quota API -2147483647 to 2147483647, then refused a negative)."""
    from scheduler.forecast.variants import QUOTA_MAX, quota_error

    rule = quota_error(name, None)
    return serializers.IntegerField(min_value=0, max_value=QUOTA_MAX, error_messages={
        "min_value": rule, "max_value": rule, "invalid": rule, "max_string_length": rule},
        help_text=f"GPUs, 0 to {QUOTA_MAX}", **kwargs)


class NamedField(serializers.SlugRelatedField):
    """A SlugRelatedField that takes a string only: DRF looks up `{"queue": 1}` as the name '1' ("unknown queue
    '1'"), where every string field of the API refuses a number (new-user trial 13, F11: POST /quotas/ turned 1
    into '1' while POST /jobs/ answered "Not a valid string."). A form's values are text anyway."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            raise serializers.ValidationError(str(serializers.CharField.default_error_messages["invalid"]),
                                              code="invalid")
        return super().to_internal_value(data)

    def run_validation(self, data=serializers.empty):
        """A name sent empty or only white space in a JSON body is a 400 (NAME_EMPTY), never the field's default
        as DRF's related fields make it (`"team": ""` was taken as no team: trial 21, F13): leave the field out, or
        send null where it may be none. A form's empty field still means none (a form sends every field)."""
        if isinstance(data, str) and not data.strip() and not text_input(self):
            raise serializers.ValidationError(NAME_EMPTY, code="blank")
        return super().run_validation(data)


NAME_EMPTY = ("must not be empty (or only white space): give a name, or leave the field out (null where it may be "
              "none) for its default")


def named_field(what: str, slug_field: str, queryset, **kwargs) -> serializers.SlugRelatedField:
    """A related object given by its name (`slug_field`), a string. An unknown name is "unknown <what> 'nope'",
    the words job submission uses (services.base), not DRF's "Object with name=nope does not exist." (new-user
    trial 8, F14: gpuctl set-quota, queue creation)."""
    kwargs["error_messages"] = {"does_not_exist": f"unknown {what} " + "{value!r}", **kwargs.get("error_messages", {})}
    return NamedField(slug_field=slug_field, queryset=queryset, **kwargs)


class FiniteFloatField(serializers.FloatField):
    """A real number that is finite: 'nan' / 'inf' (form-encoded bodies, query strings) are refused with
    the field's 'invalid' message instead of reaching the database and the fair-share order."""

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        if not math.isfinite(value):
            self.fail("invalid")
        return value


def weight_field(**kwargs) -> FiniteFloatField:
    """A queue weight: the queue service's one range (services.queues.WEIGHT_MIN..WEIGHT_MAX) with its message,
    for the queue API and the what-if's set_weight alike (new-user trial 10, F7)."""
    from ...services.queues import WEIGHT_MAX, WEIGHT_MIN, queue_weight_error

    rule = queue_weight_error(None)
    return FiniteFloatField(min_value=WEIGHT_MIN, max_value=WEIGHT_MAX,
                            error_messages={"min_value": rule, "max_value": rule, "invalid": rule},
                            help_text=f"share of idle capacity against sibling queues: {WEIGHT_MIN} to {WEIGHT_MAX:,}",
                            **kwargs)


def make_strings_strict() -> None:
    """Strings must be strings: DRF's CharField (and its subclasses: slug, regex, e-mail, URL, IP fields)
    turns a JSON number into text (`{"reason": 5}` -> "5"); from here on it refuses anything but a string
    with the field's 'invalid' message ("Not a valid string."), like null and objects already were.
    Called once from the app's ready(); idempotent. Form-encoded bodies and query strings are text anyway."""
    if getattr(serializers.CharField.to_internal_value, "strict_strings", False):
        return
    lenient = serializers.CharField.to_internal_value

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return lenient(self, data)

    to_internal_value.strict_strings = True
    serializers.CharField.to_internal_value = to_internal_value


from ...inputs import BLANK_TEXT, ONE_LINE_FIELDS, TEXT_RULE, text_rule_error  # noqa: E402,F401 (the one rule)


def make_text_fields_strict() -> None:
    """One rule for every text field of the API (DRF's CharField and its subclasses: slug, regex, e-mail, URL
    fields; a list's or a dict's text items), applied to the text as sent, before DRF trims it (trial 21, F13):

    - no control character other than newline and tab (a carriage return only before a newline), no line or
      paragraph separator, no invisible format character (the bidirectional overrides U+202A..U+202E and
      isolates, zero-width spaces, the byte order mark): inputs.text_control_error, the team description's and the
      trace importers' rule, 400 "<field>: must be text without control characters ...: '\\u202e' at character 3".
      A name (inputs.ONE_LINE_FIELDS; a field's `one_line` says it for another) is one line: no newline or tab
      either (inputs.ONE_LINE_RULE; "alpha\\n" was trimmed to "alpha" and taken: trial 22, F3), then its name rule
      (names.py). So are a job's external id, working directory and image and the names a body refers to (also in
      ONE_LINE_FIELDS: "/tmp\\n" was trimmed to "/tmp" before the services' names.control_character_error saw it,
      trial 26, F5); their stricter rules stay on top. The web forms apply the same rule (inputs.TextRuleForm);
    - a value of only white space ("\\n", " ") is a 400 (BLANK_TEXT), never trimmed to "" as if it had been left
      empty (a `working_dir` of "\\n" was stored as the task's own directory). "" stays what the field takes.

    Left out: text a process or its agent produced (ProcessTextField, `user_text = False`: output is stored as it
    was printed), a field that applies the control rule itself in its own words (`own_text_rule`: a team's
    description, whose text of only white space is stored as "", trial 20), passwords, and a NUL (the input guard's
    own 400, NUL_MESSAGE). Called once from the app's ready();
    idempotent."""
    if getattr(serializers.CharField.run_validation, "text_rule", False):
        return
    lenient = serializers.CharField.run_validation

    def run_validation(self, data=serializers.empty):
        if isinstance(data, str) and getattr(self, "user_text", True) and not getattr(self, "own_text_rule", False) \
                and "\x00" not in data \
                and (self.style or {}).get("input_type") != "password":
            refused = text_rule_error(data, one_line=getattr(self, "one_line", self.field_name in ONE_LINE_FIELDS))
            if refused:
                raise serializers.ValidationError(refused[0], code=refused[1])
        return lenient(self, data)

    run_validation.text_rule = True
    serializers.CharField.run_validation = run_validation


def text_input(field) -> bool:
    """Whether the field's serializer reads text-encoded input (a QueryDict: a form post, a multipart body or
    a query string), where every value is a string and "5" / "true" are the only way to write a number or
    a boolean. A JSON body (a dict) carries its own types."""
    return isinstance(getattr(field.root, "initial_data", None), QueryDict)


def make_numbers_and_booleans_strict() -> None:
    """Integers must be integers and booleans booleans, in a JSON body: DRF's IntegerField turns "2" and
    " 5 " into numbers and its BooleanField turns "yes", 0 and 1 into booleans. From here on, in a JSON
    body, an IntegerField (and its subclasses, the ModelSerializer's mapped integer columns, a ListField's
    integer children) takes only a JSON number with no fraction (2 or 2.0, never true), a FloatField only a
    JSON number (never "0.5"), and a BooleanField only true / false; anything else is a 400 naming the field ("must be a whole number ..."). Form posts,
    multipart bodies and query strings (QueryDict input: all text) keep DRF's parsing of text.
    Called once from the app's ready() with make_strings_strict (the same rule for strings); idempotent.
    A global rule rather than field subclasses: it covers every declared field, the ModelSerializer's
    generated ones and third-party serializers alike, so no field can be left lenient by mistake."""
    if getattr(serializers.IntegerField.to_internal_value, "strict_numbers", False):
        return
    lenient_int = serializers.IntegerField.to_internal_value
    lenient_float = serializers.FloatField.to_internal_value
    lenient_bool = serializers.BooleanField.to_internal_value

    def int_value(self, data):
        if not text_input(self):
            if isinstance(data, bool) or not isinstance(data, (int, float)):
                raise serializers.ValidationError(
                    f"must be a whole number, not {_json_kind(data)}", code="invalid")
            # 2.0 and 2e0 are taken as 2 on purpose (a number with no fraction), so the words say "whole number",
            # not "JSON integer" (new-user trial 12, F8)
            if isinstance(data, float) and not (math.isfinite(data) and data.is_integer()):
                raise serializers.ValidationError("must be a whole number (a number with no fraction)", code="invalid")
        return lenient_int(self, data)

    def float_value(self, data):
        if not text_input(self) and (isinstance(data, bool) or not isinstance(data, (int, float))):
            raise serializers.ValidationError(f"must be a JSON number, not {_json_kind(data)}", code="invalid")
        return lenient_float(self, data)

    def bool_value(self, data):
        if not text_input(self) and not isinstance(data, bool) and not (data is None and self.allow_null):
            raise serializers.ValidationError(f"must be a JSON boolean (true or false), not {_json_kind(data)}",
                                              code="invalid")
        return lenient_bool(self, data)

    int_value.strict_numbers = float_value.strict_numbers = bool_value.strict_numbers = True
    serializers.IntegerField.to_internal_value = int_value
    serializers.FloatField.to_internal_value = float_value
    serializers.BooleanField.to_internal_value = bool_value


CHOICES_LISTED = 20  # a choice error lists up to this many choices


def make_choices_listed() -> None:
    """A choice error says what the choices are: DRF's ChoiceField (and MultipleChoiceField, the
    ModelSerializer's fields of a column with choices) answers '"maybe" is not a valid choice.' without them
    (new-user trial 12, F7: numa, sharing, a membership's role, a forecast change's kind). From here on the
    default message goes on '; one of: a, b, c'; a field's own message is kept. Called once from ready()."""
    if getattr(serializers.ChoiceField.to_internal_value, "choices_listed", False):
        return
    lenient = serializers.ChoiceField.to_internal_value
    default = str(serializers.ChoiceField.default_error_messages["invalid_choice"])

    def to_internal_value(self, data):
        try:
            return lenient(self, data)
        except serializers.ValidationError:
            if str(self.error_messages.get("invalid_choice")) != default:
                raise
            choices = [c for c in self.choice_strings_to_values if c != ""]
            listed = ", ".join(choices[:CHOICES_LISTED]) + (", ..." if len(choices) > CHOICES_LISTED else "")
            shown = str(data) if len(str(data)) <= 40 else str(data)[:40] + "..."
            raise serializers.ValidationError(f'"{shown}" is not a valid choice; one of: {listed}',
                                              code="invalid_choice") from None

    to_internal_value.choices_listed = True
    serializers.ChoiceField.to_internal_value = to_internal_value


def _json_kind(value) -> str:
    """A JSON value's kind in words, for an error message."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return f"a string ({value[:20]!r})"
    return "null" if value is None else "a list" if isinstance(value, list) else "an object"

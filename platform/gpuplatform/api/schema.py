"""OpenAPI additions (drf-spectacular): the Idempotency-Key header on creating POSTs, and the API's one
error shape as components `FieldErrors` (400: {"<field path>": ["<rule>", ...]}) and `Error`
({"detail": "<message>"}) on every operation (see api/exceptions.py); the API's token authentication documented as
knox's (PlatformTokenScheme)."""
from __future__ import annotations

from drf_spectacular.contrib.knox_auth_token import KnoxTokenScheme
from drf_spectacular.openapi import AutoSchema as BaseAutoSchema

from .idempotency import IDEMPOTENCY_KEY

FIELD_ERRORS = {
    "type": "object",
    "description": "400 Bad Request: every rule the request broke, by field path. The path is flat and the same "
                   "whether a serializer or a service found the fault: `name`, `roles[0].tasks` (a list item's "
                   "field), `env.NCCL_DEBUG` (a mapping key), `non_field_errors` (the request as a whole), "
                   "`Idempotency-Key` (the header). Unknown body fields are refused here too, at every level, "
                   "never dropped.",
    "additionalProperties": {"type": "array", "items": {"type": "string"}},
    "example": {"roles[0].min_available": ["min_available (3) must not exceed tasks (2)"],
                "roles[0].gpu": ["unknown field (not dropped: the request is refused); accepted fields: name, ..."]},
}
ERROR = {
    "type": "object",
    "description": "Any other error (401, 403, 404, 405, 409, 412, 428, 429): one message.",
    "properties": {"detail": {"type": "string"}},
    "required": ["detail"],
}


class PlatformTokenScheme(KnoxTokenScheme):
    """api/authentication.TokenAuthentication (knox's, a token that is not UTF-8 refused as a wrong one) in the
    schema as knox's own: the same `Authorization: Token <token>` scheme, named knoxApiToken. drf-spectacular
    matches an authenticator's exact class, so without it every operation lost its security entry and `manage.py
    check --deploy` warned (drf_spectacular.W001) for each view."""
    target_class = "gpuplatform.api.authentication.TokenAuthentication"


class AutoSchema(BaseAutoSchema):
    def get_override_parameters(self):
        params = list(super().get_override_parameters())
        view = self.view
        if self.method == "POST" and getattr(view, "action", None) in getattr(view, "idempotent_actions", ()):
            params.append(IDEMPOTENCY_KEY)
        return params


def _ref(name: str) -> dict:
    return {"content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}}}


def add_error_responses(result, generator, request, public):
    """Postprocessing hook: the error components, and on each operation the errors it can answer."""
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    schemas["FieldErrors"] = FIELD_ERRORS
    schemas["Error"] = ERROR
    for item in result.get("paths", {}).values():
        for method, op in item.items():
            if not isinstance(op, dict) or "responses" not in op:
                continue
            responses = op["responses"]
            responses.setdefault("400", {"description": "the request broke a rule (see FieldErrors)",
                                         **_ref("FieldErrors")})
            responses.setdefault("401", {"description": "not authenticated", **_ref("Error")})
            responses.setdefault("403", {"description": "not allowed for this user", **_ref("Error")})
            if any(p.get("name") == "Idempotency-Key" for p in op.get("parameters", [])):
                responses.setdefault("409", {"description": "Idempotency-Key reused with a different request",
                                             **_ref("FieldErrors")})
    return result

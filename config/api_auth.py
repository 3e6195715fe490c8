"""The API's token, as ``Authorization: Token <key>`` (Django REST framework's word) or as
``Authorization: Bearer <key>`` (OAuth's, which most HTTP clients and API tools send): the same
key either way. An integrator who sent ``Bearer`` used to be told "Authentication credentials
were not provided." with a key that was valid."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.plumbing import build_bearer_security_scheme_object
from rest_framework.authentication import TokenAuthentication


class BearerTokenAuthentication(TokenAuthentication):
    """The API token sent as ``Authorization: Bearer <key>``."""

    keyword = "Bearer"


class BearerTokenScheme(OpenApiAuthenticationExtension):
    """The schema names the ``Bearer`` form as HTTP bearer authentication, beside ``Token``."""

    target_class = BearerTokenAuthentication
    name = "bearerAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return build_bearer_security_scheme_object(
            header_name="Authorization",
            token_prefix=BearerTokenAuthentication.keyword,
        )

"""Request-scoped reads of the case desk."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from cases.selectors import team_ids_read_once


class TeamIdsPerRequestMiddleware:
    """Each person's teams are read once per request (``cases.selectors.team_ids_read_once``):
    a page scopes each of its panels to the same person's teams."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        with team_ids_read_once():
            return self.get_response(request)

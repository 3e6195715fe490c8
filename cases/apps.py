from django.apps import AppConfig


class CasesConfig(AppConfig):
    name = "cases"
    verbose_name = "Case desk"

    def ready(self) -> None:
        from django.conf import settings

        from cases import (  # noqa: F401 - registers the checks, actions and lookups
            actions,
            checks,
            kinds,
            lookups,
        )

        kinds.load(settings.HOLDFAST_CHANGE_KINDS)  # the change kinds this desk offers

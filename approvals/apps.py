from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "approvals"
    verbose_name = "Approvals"

    def ready(self) -> None:
        from approvals import (
            actions,  # noqa: F401 - registers its case actions
            extensions,
        )

        extensions.register()  # its queue, home tile, deciders and evidence hook

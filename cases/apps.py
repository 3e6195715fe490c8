from django.apps import AppConfig


class CasesConfig(AppConfig):
    name = "cases"
    verbose_name = "Cases"

    def ready(self) -> None:
        from cases import actions, checks  # noqa: F401 - registers the checks and actions

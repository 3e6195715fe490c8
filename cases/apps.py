from django.apps import AppConfig


class CasesConfig(AppConfig):
    name = "cases"
    verbose_name = "Cases"

    def ready(self) -> None:
        from cases import checks  # noqa: F401 - registers the system checks

from django.apps import AppConfig


class LabConfig(AppConfig):
    name = "lab"
    verbose_name = "Lab"

    def ready(self) -> None:
        # A drill worker (HOLDFAST_DRILL=1, never in production) stops at the apply step's
        # named points; every other process registers nothing here.
        from lab.drills import step_points

        step_points.register()

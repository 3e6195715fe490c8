from django.apps import AppConfig


class OrdersConfig(AppConfig):
    name = "orders"
    verbose_name = "Reference order system"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.core import checks

        from orders.checks import unsafe_switches_check
        from orders.kinds import kinds

        checks.register(unsafe_switches_check)

        # A plug-in kind that cannot be imported, or one that names a kind twice, stops the
        # process at start-up rather than at its first request.
        kinds()

from django.apps import AppConfig


class OrdersConfig(AppConfig):
    name = "orders"
    verbose_name = "Reference order system"
    default_auto_field = "django.db.models.BigAutoField"

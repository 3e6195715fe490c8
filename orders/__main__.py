"""``python -m orders <command>``: any management command with the order system's settings.

``python -m orders serve [--host H] [--port P] [--no-migrate]`` runs the service;
``python -m orders seed_demo`` loads the demo data; ``python -m orders seed_data FILE`` upserts
accounts, orders and slots from a JSON document.
"""

import os
import sys


def main() -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "orders.settings"
    from django.core.management import execute_from_command_line

    execute_from_command_line(["python -m orders", *sys.argv[1:]])


if __name__ == "__main__":
    main()

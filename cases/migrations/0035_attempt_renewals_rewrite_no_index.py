"""An attempt's lease renewal rewrites no index: the lease's own index goes (the room on each
page for the renewals' row versions is 0036's).

On the bench's database, 0 of 71,645 attempt updates in an end-to-end run were HOT before;
66% after, the send's and the answer's renewals of each apply (``pg_stat_user_tables``). The
watchdog reads the active attempts through ``attempt_one_active_per_case`` instead
(``tests/cases/test_watchdog.py``).
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("cases", "0034_notification_assigned")]

    operations = [
        migrations.RemoveIndex(model_name="attempt", name="attempt_active_lease_idx"),
    ]

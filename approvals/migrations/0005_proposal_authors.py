"""Four eyes bound to people: the authors of a proposal's intent, and a trigger refusing an
approval decided by any of them.

The trigger exists on PostgreSQL and on SQLite: raw SQL and the ORM are refused alike. An
update is checked only when it changes who decided, what was decided or on which proposal, so
revoking an existing approval (``revoked_at``) is never refused. Open proposals are backfilled
from their cases' audit events with the rule ``approvals.services`` applies.
"""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models
from django.db.models import Q

POSTGRES_CREATE = """
CREATE OR REPLACE FUNCTION holdfast_approval_not_by_author() RETURNS trigger AS $$
BEGIN
  IF NEW.decision <> 'approved' OR NEW.decided_by_id = NEW.prepared_by_id THEN
    RETURN NEW;  -- the preparer's own approval is the check constraint's refusal
  END IF;
  IF TG_OP = 'UPDATE' AND NEW.decided_by_id = OLD.decided_by_id
     AND NEW.proposal_id = OLD.proposal_id AND NEW.decision = OLD.decision THEN
    RETURN NEW;
  END IF;
  IF EXISTS (
    SELECT 1 FROM approvals_proposalauthor a
    WHERE a.proposal_id = NEW.proposal_id AND a.user_id = NEW.decided_by_id
  ) THEN
    RAISE EXCEPTION 'approval_not_by_author: user % authored proposal %',
      NEW.decided_by_id, NEW.proposal_id
      USING ERRCODE = 'check_violation';
  END IF;
  RETURN NEW;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER approval_not_by_author BEFORE INSERT OR UPDATE ON approvals_approval
  FOR EACH ROW EXECUTE FUNCTION holdfast_approval_not_by_author();
"""

POSTGRES_DROP = """
DROP TRIGGER IF EXISTS approval_not_by_author ON approvals_approval;
DROP FUNCTION IF EXISTS holdfast_approval_not_by_author();
"""

# The preparer deciding is refused by the check constraint ``approval_not_by_preparer``; the
# trigger leaves that row to it so the refusal names the rule that applies.
_AUTHORED = """(NEW.prepared_by_id IS NULL OR NEW.prepared_by_id <> NEW.decided_by_id)
  AND EXISTS (
    SELECT 1 FROM approvals_proposalauthor a
    WHERE a.proposal_id = NEW.proposal_id AND a.user_id = NEW.decided_by_id
  )"""

SQLITE_CREATE = [
    f"""
CREATE TRIGGER approval_not_by_author_insert BEFORE INSERT ON approvals_approval
WHEN NEW.decision = 'approved' AND {_AUTHORED}
BEGIN
  SELECT RAISE(ABORT, 'approval_not_by_author: the decider authored the proposal');
END
""",
    f"""
CREATE TRIGGER approval_not_by_author_update
BEFORE UPDATE OF decided_by_id, proposal_id, decision ON approvals_approval
WHEN NEW.decision = 'approved'
  AND (NEW.decided_by_id <> OLD.decided_by_id OR NEW.proposal_id <> OLD.proposal_id
       OR NEW.decision <> OLD.decision)
  AND {_AUTHORED}
BEGIN
  SELECT RAISE(ABORT, 'approval_not_by_author: the decider authored the proposal');
END
""",
]

SQLITE_DROP = [
    "DROP TRIGGER IF EXISTS approval_not_by_author_insert",
    "DROP TRIGGER IF EXISTS approval_not_by_author_update",
]


def create_trigger(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute(POSTGRES_CREATE, params=None)
    elif vendor == "sqlite":
        for statement in SQLITE_CREATE:
            schema_editor.execute(statement, params=None)


def drop_trigger(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute(POSTGRES_DROP, params=None)
    elif vendor == "sqlite":
        for statement in SQLITE_DROP:
            schema_editor.execute(statement, params=None)


def backfill_authors(apps, schema_editor):
    """Record the authors of every open proposal from its case's audit events."""
    Proposal = apps.get_model("approvals", "Proposal")
    ProposalAuthor = apps.get_model("approvals", "ProposalAuthor")
    CaseEvent = apps.get_model("cases", "CaseEvent")
    authoring = (
        Q(action="cases.case.created")
        | Q(action="cases.case.intent_changed")
        | Q(action="cases.case.transitioned", detail__transition="revise")
        | (
            Q(action="cases.case.transitioned", detail__transition="request_source_check")
            & ~Q(from_status="new")
        )
    )
    open_statuses = ["draft", "awaiting_review", "approved"]
    rows = []
    for proposal in Proposal.objects.filter(status__in=open_statuses).iterator():
        seen = set()
        events = CaseEvent.objects.filter(authoring, case_id=proposal.case_id, actor__isnull=False)
        for event in events.order_by("pk"):
            if event.action == "cases.case.created":
                role = "opened_case"
            elif event.action == "cases.case.intent_changed" or (
                event.detail.get("transition") == "revise"
            ):
                role = "changed_intent"
            else:
                role = "asked_reprepare"
            if (event.actor_id, role) not in seen:
                seen.add((event.actor_id, role))
                rows.append(
                    ProposalAuthor(
                        proposal_id=proposal.pk, user_id=event.actor_id, role=role, event=event
                    )
                )
        if proposal.prepared_by_id is not None:
            rows.append(
                ProposalAuthor(
                    proposal_id=proposal.pk, user_id=proposal.prepared_by_id, role="prepared"
                )
            )
    ProposalAuthor.objects.bulk_create(rows, ignore_conflicts=True)


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0004_operation_retired"),
        ("cases", "0009_queues"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="ProposalAuthor",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "role",
                    models.CharField(
                        choices=[
                            ("opened_case", "Opened the case"),
                            ("changed_intent", "Changed the requested date"),
                            ("prepared", "Prepared the proposal"),
                            ("asked_reprepare", "Asked for the proposal to be prepared again"),
                        ],
                        max_length=20,
                    ),
                ),
                ("recorded_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "event",
                    models.ForeignKey(
                        blank=True,
                        help_text=(
                            "The audit event that made this person an author (none for the "
                            "preparer)."
                        ),
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="cases.caseevent",
                    ),
                ),
                (
                    "proposal",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="authors",
                        to="approvals.proposal",
                    ),
                ),
                (
                    "user",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "ordering": ["proposal", "pk"],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("proposal", "user", "role"), name="proposal_author_once_per_role"
                    )
                ],
            },
        ),
        migrations.RunPython(create_trigger, drop_trigger),
        migrations.RunPython(backfill_authors, migrations.RunPython.noop),
    ]

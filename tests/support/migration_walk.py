"""Walk every migration of Holdfast's apps one at a time on a scratch database, with rows.

Run as ``python -m tests.support.migration_walk REPORT.json`` with ``DATABASE_URL`` naming a
scratch database that holds nothing (``tests/test_migrations.py`` creates and drops it). The
walk, in the order ``manage.py migrate`` would take:

1. forward, one migration at a time (third-party migrations in between are applied as they
   come); after each of the project's migrations, realistic rows are inserted with the
   historical models of that point (users, a team, an account, cases in several statuses with
   their events, evidence, cancellations, proposals, operations, approvals, authors, attempts,
   inbound events, probe profiles; a model it does not know gets generic rows), so the next
   migration runs on data;
2. at the end: ``manage.py check``, every row read back with the current models (counts,
   statuses, keys, every column), the audit hash chains verified, and a case taken in by the
   current ``case_intake``;
3. backward, one migration at a time, as long as each is reversible, reading every remaining
   table at each step (a reversal that loses rows of a table it does not drop fails);
4. forward again the same way, and the end checks again.

On PostgreSQL each forward step also records the relation locks the migration held before its
commit, for the report. The JSON report lists every step.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import sys
import time
import traceback
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from django.db.migrations import Migration
    from django.db.migrations.executor import MigrationExecutor
    from django.db.migrations.state import ProjectState

PROJECT_APPS = ("cases", "approvals", "reconciliation", "lab")
WRITE_BLOCKING = {"ShareLock", "ShareRowExclusiveLock", "ExclusiveLock", "AccessExclusiveLock"}


def setup() -> None:
    root = Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(root))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("DJANGO_ENV", "test")
    import django

    django.setup()


def applied_state(executor: MigrationExecutor) -> ProjectState:
    """The project state of the applied migrations, built the way ``migrate`` builds it."""
    # A private executor method (what ``migrate`` itself calls) that django-stubs do not declare.
    state: ProjectState = executor._create_project_state(with_applied_migrations=True)  # type: ignore[attr-defined]
    return state


# --- rows ---------------------------------------------------------------------------------------


class Seeder:
    """Inserts rows with whatever historical models exist; counts what it made per model."""

    STATUSES = ("waiting_source", "awaiting_review", "ready", "held", "done", "cancelled")

    def __init__(self, tag: str):
        self.tag = tag
        self.number = 100
        self.token = 1000
        self.made: dict[str, int] = {}
        self.cases: dict[str, str] = {}  # reference -> status
        self.operation_keys: set[str] = set()
        self.notes: list[str] = []

    # helpers
    def model(self, apps, label: str):
        try:
            return apps.get_model(label)
        except LookupError:
            return None

    def create(self, model, **values):
        names = {f.name for f in model._meta.get_fields()} | {
            f.attname for f in model._meta.concrete_fields
        }
        values = {k: v for k, v in values.items() if k in names}
        for field in model._meta.concrete_fields:
            if field.name in values or field.attname in values:
                continue
            filled = generic_value(field, self)
            if filled is not _SKIP:
                values[field.attname] = filled
        obj = model.objects.create(**values)
        label = model._meta.label_lower
        self.made[label] = self.made.get(label, 0) + 1
        return obj

    # the rows of one round
    def round(self, apps, step: str) -> None:
        from django.utils import timezone

        r = f"{self.tag}-{step}"
        now = timezone.now()
        User = apps.get_model("auth", "User")
        Group = self.model(apps, "auth.Group")
        users = {}
        for role in ("lead", "backup", "agent", "approver"):
            users[role] = self.create(
                User, username=f"{r}-{role}"[:150], password="!", is_staff=True
            )
            if Group is not None:
                group = Group.objects.filter(name="lead" if role == "backup" else role).first()
                if group is not None:
                    users[role].groups.add(group)
        Team = self.model(apps, "cases.Team")
        if Team is None:
            return
        team = self.create(
            Team,
            name=f"Deliveries {r}",
            # Letters only, one per round (cases 0026: each team has its own prefix).
            case_prefix="W" + "".join(chr(65 + int(d)) for d in str(self.number)),
            default_owner=users["lead"],
            default_backup=users["backup"],
        )
        team.members.add(*users.values())
        if (StaffProfile := self.model(apps, "cases.StaffProfile")) is not None:
            self.create(StaffProfile, user=users["backup"], away_until=None)
        account = self.create(
            apps.get_model("cases", "CustomerAccount"),
            reference=f"ACC-{self.number}",
            name=f"Northwind Bakery {r}",
            team=team,
            verified=True,
            email="orders@northwind.example",
        )
        for status in self.STATUSES:
            self.case(apps, status, account=account, team=team, users=users, now=now)
        if (Counter := self.model(apps, "cases.CounterRow")) is not None:
            _, made = Counter.objects.update_or_create(
                name="case_number", defaults={"value": self.number}
            )
            self.made["cases.counterrow"] = self.made.get("cases.counterrow", 0) + made
        if (Inbound := self.model(apps, "reconciliation.InboundEvent")) is not None:
            for i, processing in enumerate(("processed", "pending", "failed")):
                self.create(
                    Inbound,
                    event_id=f"evt-{r}-{i}",
                    type="order.updated",
                    order_id=f"ORD-{self.number}",
                    order_version=2 + i,
                    occurred_at=now,
                    body={"id": f"evt-{r}-{i}", "order_id": f"ORD-{self.number}"},
                    processing=processing,
                    attempts=i,
                    account_reference=account.reference,
                )
        if (Profile := self.model(apps, "reconciliation.OrderSystemProfile")) is not None:
            self.create(
                Profile,
                base_url="http://orders.internal:8100",
                sandbox_order_id="ORD-PROBE",
                reachable=True,
                idempotent_replay=True,
                fencing_enforced=True,
                autonomy="supervised",
                autonomy_reason="no consistent lookup",
                probed_by=users["lead"],
                probed_by_name=users["lead"].username,
            )
        if (Marker := self.model(apps, "cases.SystemMarker")) is not None:
            _, made = Marker.objects.update_or_create(
                name="database", defaults={"identity": "a" * 32, "epoch": self.number}
            )
            self.made["cases.systemmarker"] = self.made.get("cases.systemmarker", 0) + made
        self.unknown_models(apps)

    def case(self, apps, status, *, account, team, users, now):
        self.number += 1
        n = self.number
        Case = apps.get_model("cases", "Case")
        closed = status in ("done", "cancelled")
        date = now.date() + dt.timedelta(days=9)
        seen = now.date() + dt.timedelta(days=2)
        change = {"kind": "delivery_date", "delivery_date": date.isoformat()}
        case = self.create(
            Case,
            reference=f"D-{n}",
            number=n,
            request_key=f"email-{n}",
            order_id=f"ORD-{n}",
            # Before change kinds a case asked for a date; after, for a change of a kind
            # (``create`` passes the fields the historical model has).
            requested_date=date,
            kind="delivery_date",
            change=change,
            order_seen={"delivery_date": seen.isoformat()},
            note="Please move the delivery to Friday.",
            status=status,
            version=4,
            waiting_on={"held": "owner", "awaiting_review": "approvers"}.get(status, "nobody"),
            waiting_reason="",
            owner=users["lead"],
            backup=users["backup"],
            account=account,
            team=team,
            last_checked_order_version=3,
            closed_at=now if closed else None,
            retention_until=(now + dt.timedelta(days=365)).date() if closed else None,
            legal_hold=status == "done",
            retry_count=1 if status == "held" else 0,
            order_delivery_date_seen=seen,
        )
        self.cases[case.reference] = status
        self.events(apps, case, status, users["lead"], now)
        if (Evidence := self.model(apps, "cases.EvidenceReference")) is not None:
            self.create(
                Evidence,
                case=case,
                source_system="order_system",
                external_reference=f"ORD-{n}@v3",
                kind="order_read",
                permitted_basis="contract",
                summary="Delivery 2 days out, slot free on Friday",
                order_version=3,
                recorded_by="worker",
            )
        if status == "cancelled" and (Cancel := self.model(apps, "cases.CancellationRequest")):
            self.create(
                Cancel,
                case=case,
                reason="Customer withdrew",
                via="api",
                requested_by_label="integration",
                outcome="cancelled",
                settled_at=now,
            )
        if status in ("waiting_source", "cancelled"):
            return
        Proposal = self.model(apps, "approvals.Proposal")
        if Proposal is None:
            return
        operation = None
        if status != "awaiting_review":
            operation = self.create(
                apps.get_model("approvals", "Operation"),
                key=f"DATE-{n}-1",
                sequence=1,
                order_id=case.order_id,
                delivery_date=date,
                change=change,
                change_hash=_change_hash(change),
                case=case,
                confirmed_at=now if status == "done" else None,
                result_order_version=4 if status == "done" else None,
                notified_at=now if status == "done" else None,
            )
            self.operation_keys.add(operation.key)
        proposal = self.create(
            Proposal,
            case=case,
            order_id=case.order_id,
            delivery_date=date,
            change=change,
            evidence_order_version=3,
            evidence_ids=[1],
            content_hash=f"{n:064d}",
            prepared_by_label=users["agent"].username,
            prepared_by=users["agent"],
            status="awaiting_review" if operation is None else "approved",
            submitted_at=now,
            operation=operation,
        )
        if (Author := self.model(apps, "approvals.ProposalAuthor")) is not None:
            self.create(Author, proposal=proposal, user=users["agent"], role="prepared")
            self.create(Author, proposal=proposal, user=users["lead"], role="opened_case")
        if operation is None:
            return
        self.create(
            apps.get_model("approvals", "Approval"),
            reference=f"AP-{n}",
            proposal=proposal,
            proposal_hash=proposal.content_hash,
            decision="approved",
            decided_by=users["approver"],
            prepared_by=users["agent"],
            operation=operation,
            expires_at=now + dt.timedelta(hours=4),
            grant="v1.signed-grant",
        )
        if status in ("held", "done") and (Attempt := self.model(apps, "cases.Attempt")):
            self.token += 1
            self.create(
                Attempt,
                reference=f"D-{n}-a1",
                sequence=1,
                worker="worker-1:4242",
                fencing_token=self.token,
                lease_expires_at=now + dt.timedelta(seconds=60),
                heartbeat_at=now,
                state="effect_unknown" if status == "held" else "succeeded",
                last_confirmed_step="" if status == "held" else "closed",
                submitted_at=now,
                case=case,
                operation=operation,
            )

    def events(self, apps, case, status, actor, now):
        Event = apps.get_model("cases", "CaseEvent")
        chained = "prev_hash" in {f.name for f in Event._meta.concrete_fields}
        path = [("", "new"), ("new", "waiting_source"), ("waiting_source", status)]
        prev = ""
        for version, (before, after) in enumerate(path, start=1):
            event = Event(
                case=case,
                action="cases.case.created" if version == 1 else "cases.case.transitioned",
                from_status=before,
                to_status=after,
                reason="migration walk",
                actor=actor,
                actor_label=actor.username,
                version=version,
                detail={"transition": "step", "n": version, "ratio": 1.5},
                created_at=now.replace(microsecond=version),
            )
            if chained:
                from cases.audit import stored_hash

                event.prev_hash = prev
                event.hash = prev = stored_hash(event, prev_hash=prev)
            event.save()
            label = Event._meta.label_lower
            self.made[label] = self.made.get(label, 0) + 1

    KNOWN = {
        "cases.team",
        "cases.staffprofile",
        "cases.customeraccount",
        "cases.counterrow",
        "cases.case",
        "cases.caseevent",
        "cases.evidencereference",
        "cases.cancellationrequest",
        "cases.attempt",
        "cases.systemmarker",
        "approvals.operation",
        "approvals.proposal",
        "approvals.proposalauthor",
        "approvals.approval",
        "reconciliation.inboundevent",
        "reconciliation.ordersystemprofile",
    }

    def unknown_models(self, apps) -> None:
        """A model added after this walk was written still gets rows (best effort)."""
        from django.db import IntegrityError, transaction

        for label in PROJECT_APPS:
            if label not in apps.app_configs:
                continue
            for model in apps.get_app_config(label).get_models():
                meta = model._meta
                if meta.label_lower in self.KNOWN or meta.proxy or not meta.managed:
                    continue
                try:
                    with transaction.atomic():
                        self.create(model)
                except (IntegrityError, ValueError, TypeError) as exc:
                    note = f"{meta.label_lower}: no generic row ({exc.__class__.__name__}: {exc})"
                    if note not in self.notes:
                        self.notes.append(note)


_SKIP = object()


def _change_hash(change: dict) -> str:
    text = json.dumps(change, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def generic_value(field, seeder: Seeder):
    """A plausible value for a required column nobody named, or _SKIP."""
    from django.db import models
    from django.utils import timezone

    if field.primary_key and isinstance(field, models.AutoField):
        return _SKIP
    if field.has_default() or field.null or getattr(field, "db_default", None) is not None:
        return _SKIP
    if getattr(field, "auto_now", False) or getattr(field, "auto_now_add", False):
        return _SKIP
    if field.choices:
        return field.choices[0][0]
    if field.is_relation:
        related = field.related_model._default_manager.order_by("-pk").first()
        return related.pk if related is not None else _SKIP
    seeder.token += 1
    if isinstance(field, models.BooleanField):
        return False
    if isinstance(field, models.DateTimeField):
        return timezone.now()
    if isinstance(field, models.DateField):
        return timezone.localdate()
    if isinstance(field, (models.IntegerField, models.FloatField, models.DecimalField)):
        return seeder.token
    if isinstance(field, models.JSONField):
        return {}
    if isinstance(field, (models.CharField, models.TextField)):
        value = f"{seeder.tag}-{seeder.token}"
        return value[: field.max_length] if field.max_length else value
    return _SKIP


# --- the walk -----------------------------------------------------------------------------------


def relation_locks(connection) -> list[list[str]]:
    if connection.vendor != "postgresql":
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, l.mode FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
            "WHERE l.pid = pg_backend_pid() AND l.locktype = 'relation' AND c.relkind = 'r' "
            "AND c.relnamespace = 'public'::regnamespace ORDER BY 1, 2"
        )
        return [[name, mode] for name, mode in cursor.fetchall() if mode in WRITE_BLOCKING]


def label(migration) -> str:
    return f"{migration.app_label}.{migration.name}"


def irreversible_reasons(migration) -> list[str]:
    reasons = []
    for op in migration.operations:
        if not op.reversible:
            if op.__class__.__name__ == "RunPython":
                what = f"RunPython({op.code.__name__}) has no reverse_code"
            elif op.__class__.__name__ == "RunSQL":
                what = "RunSQL has no reverse_sql"
            else:
                what = f"{op.describe()} is irreversible"
            reasons.append(what)
    return reasons


def walk_forward(seeder: Seeder, report: dict, key: str) -> None:
    from django.db import connection, transaction
    from django.db.migrations import CreateModel
    from django.db.migrations.executor import MigrationExecutor
    from django.db.migrations.state import ProjectState

    executor = MigrationExecutor(connection)
    executor.loader.check_consistent_history(connection)
    targets = executor.loader.graph.leaf_nodes()
    plan = executor.migration_plan(targets)
    state = applied_state(executor)
    steps = report.setdefault(key, [])
    for migration, backwards in plan:
        assert not backwards
        if "apps" not in state.__dict__:
            state.apps  # noqa: B018 - render the models once, as the executor does
        ours = migration.app_label in PROJECT_APPS
        started = time.monotonic()
        # SQLite's schema editor refuses an outer transaction; on PostgreSQL one keeps the
        # migration's locks until its commit, after the deferred SQL, so they can be read.
        pg = connection.vendor == "postgresql"
        with transaction.atomic() if migration.atomic and pg else nullcontext():
            state = executor.apply_migration(state, migration)
            locks = relation_locks(connection) if ours else []
        seconds = time.monotonic() - started
        if not ours:
            continue
        # Freshly rendered: a state's own registry may keep stale related classes.
        fresh = ProjectState(models=dict(state.models), real_apps=state.real_apps)
        # What the migration itself did to the rows (a backfill adds some, a drop loses a table).
        counts = table_counts(fresh)
        changed = {
            t: [seeder.made.get(t, 0), n] for t, n in counts.items() if seeder.made.get(t, 0) != n
        }
        seeder.made = {k: v for k, v in seeder.made.items() if not k.startswith(PROJECT_APPS)}
        seeder.made.update(counts)
        with transaction.atomic():
            seeder.round(fresh.apps, f"{len(steps)}")
        steps.append(
            {
                "migration": label(migration),
                "seconds": round(seconds, 3),
                "locks": locks,
                "rows_changed": changed,
                "data_ops": [
                    op.describe()
                    for op in migration.operations
                    if op.__class__.__name__ in ("RunPython", "RunSQL")
                ],
                "created": [
                    op.options.get("db_table") or f"{migration.app_label}_{op.name.lower()}"
                    for op in migration.operations
                    if isinstance(op, CreateModel)
                ],
            }
        )


def read_back(seeder: Seeder, report: dict, key: str) -> None:
    """Every row of the project's apps through today's models."""
    from django.apps import apps
    from django.core.management import call_command

    from approvals.models import Operation
    from cases.audit import verify_chains
    from cases.kernel import SYSTEM
    from cases.models import Case
    from cases.services import case_open

    call_command("check", databases=["default"], fail_level="ERROR")
    counts = {}
    for app_label in PROJECT_APPS:
        for model in apps.get_app_config(app_label).get_models():
            if model._meta.proxy:
                continue
            rows = list(model._base_manager.all())
            for row in rows:
                for field in model._meta.concrete_fields:
                    getattr(row, field.attname)
                str(row)
            counts[model._meta.label_lower] = len(rows)
    wrong = {
        label: {"made": made, "read": counts.get(label)}
        for label, made in seeder.made.items()
        if label.split(".")[0] in PROJECT_APPS and counts.get(label) != made
    }
    assert not wrong, f"rows lost or gained: {wrong}"
    statuses = dict(Case.objects.values_list("reference", "status"))
    assert statuses == seeder.cases, "case statuses changed"
    keys = set(Operation.objects.values_list("key", flat=True))
    assert keys == seeder.operation_keys, "operation keys changed"
    chains = verify_chains()
    assert not chains.broken, [link.describe() for link in chains.broken]
    account = Case.objects.get(reference=max(seeder.cases, key=lambda r: int(r[2:]))).account
    date = dt.date.today() + dt.timedelta(days=10)
    case, created = case_open(
        actor=SYSTEM,
        account=account,
        request_key=f"after-{key}",
        order_id=f"ORD-after-{key}",
        kind="delivery_date",
        change={"kind": "delivery_date", "delivery_date": date.isoformat()},
    )
    assert created, "today's case_intake found an existing case"
    report[f"{key}_read"] = {
        "counts": counts,
        "chains": {"cases": chains.cases, "events": chains.events},
        "intake": case.reference,
    }
    seeder.made["cases.case"] += 1
    seeder.cases[case.reference] = case.status
    seeder.made["cases.caseevent"] = seeder.made.get("cases.caseevent", 0) + case.events.count()


def walk_backward(seeder: Seeder, report: dict) -> None:
    """Reverse the project's migrations one at a time, latest first, reading every remaining
    table after each. The state before each migration is built in one pass over the plan, as
    ``migrate()`` builds it for a backward plan (``MigrationExecutor._migrate_all_backwards``),
    and each is unapplied with it; a ``migrate()`` call a step built all of them again each
    time (most of the backward walk's time)."""
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connection)
    graph = executor.loader.graph
    full_plan = [m for m, _ in executor.migration_plan(graph.leaf_nodes(), clean_start=True)]
    ours = [m for m in full_plan if m.app_label in PROJECT_APPS]
    report["irreversible"] = {
        label(m): reasons for m in ours if (reasons := irreversible_reasons(m))
    }
    walked = []
    for migration in reversed(ours):
        if label(migration) in report["irreversible"]:
            report["backward_stopped_at"] = label(migration)
            break
        walked.append(migration)
    states = _states_before(executor, full_plan, set(walked))
    steps = report.setdefault("backward", [])
    unapplied: set[tuple[str, str]] = set()
    before = table_counts(applied_state(executor))
    for migration in walked:
        key = (migration.app_label, migration.name)
        # Reversing it alone leaves nothing applied that depends on it (else migrate() would
        # reverse that too): every migration that depends on it is one reversed before it.
        dependents = {child.key for child in graph.node_map[key].children}
        assert dependents <= unapplied, (label(migration), sorted(dependents - unapplied))
        started = time.monotonic()
        executor.unapply_migration(states[migration], migration)
        seconds = time.monotonic() - started
        unapplied.add(key)
        # The state before it is the state of what stays applied.
        after = table_counts(states.pop(migration))
        lost = {t: (before[t], n) for t, n in after.items() if t in before and before[t] != n}
        data_ops = any(
            op.__class__.__name__ in ("RunPython", "RunSQL") for op in migration.operations
        )
        if lost and not data_ops:
            raise AssertionError(f"reversing {label(migration)} changed row counts: {lost}")
        steps.append(
            {
                "migration": label(migration),
                "seconds": round(seconds, 3),
                "tables": len(after),
                "rows_changed": lost,
            }
        )
        # The rows this step left: nothing writes between two steps.
        before = after
    # What the seeder made now is what survived: the rows the last step left (read on the state
    # of what stays applied), or, when nothing was reversed, the rows read before.
    survived = before
    seeder.made = {k: v for k, v in seeder.made.items() if not k.startswith(PROJECT_APPS)}
    seeder.made.update(survived)
    if "cases.case" not in survived:
        seeder.cases, seeder.operation_keys = {}, set()


def _states_before(
    executor: MigrationExecutor, plan: list[Migration], walked: set[Migration]
) -> dict[Migration, ProjectState]:
    """The project state before each migration of ``walked`` (all applied), in one pass over
    ``plan`` (the full plan from a clean start), as ``migrate()`` builds them to reverse them."""
    applied = set(executor.loader.applied_migrations)
    state = executor._create_project_state()  # type: ignore[attr-defined]
    states: dict[Migration, ProjectState] = {}
    for migration in plan:
        if not walked - states.keys():
            break
        if migration in walked:
            if "apps" not in state.__dict__:
                state.apps  # noqa: B018 - render the models once, as the executor does
            states[migration] = state
            state = migration.mutate_state(state, preserve=True)
        elif (migration.app_label, migration.name) in applied:
            migration.mutate_state(state, preserve=False)
    return states


def table_counts(state) -> dict[str, int]:
    counts = {}
    for app_label in PROJECT_APPS:
        if app_label not in state.apps.app_configs:
            continue
        for model in state.apps.get_app_config(app_label).get_models():
            if model._meta.proxy:
                continue
            # Every column of the historical model, each row's values converted as a read of
            # the model converts them (without building an instance a row).
            columns = [field.attname for field in model._meta.concrete_fields]
            rows = list(model._base_manager.values_list(*columns))
            counts[model._meta.label_lower] = len(rows)
    return counts


def main(argv: list[str]) -> int:
    out = Path(argv[0])
    setup()
    from django.db import connection

    report: dict = {"vendor": connection.vendor, "notes": []}
    started = time.monotonic()
    try:
        seeder = Seeder("p1")
        walk_forward(seeder, report, "forward")
        read_back(seeder, report, "forward")
        walk_backward(seeder, report)
        seeder.tag = "p2"
        walk_forward(seeder, report, "forward_again")
        read_back(seeder, report, "forward_again")
        report["notes"] = seeder.notes
        report["ok"] = True
    except Exception:  # noqa: BLE001 - reported to the test, which fails with it
        report["ok"] = False
        report["error"] = traceback.format_exc()
    report["seconds"] = round(time.monotonic() - started, 2)
    out.write_text(json.dumps(report, indent=1, default=str))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

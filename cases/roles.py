"""Role groups (agent, lead, approver, auditor, operator) and the permissions each holds.

Migrations call ``grant_role_permissions`` with the historical app registry.
"""

from __future__ import annotations

ROLES = ("agent", "lead", "approver", "auditor", "operator")


def grant_role_permissions(apps, mapping: dict[str, list[str]]) -> None:
    """Create the groups if needed and give each the listed ``app_label.codename`` perms."""
    from django.contrib.auth.management import create_permissions

    for app_config in apps.get_app_configs():
        # Permissions are normally created after migrate; make them exist now.
        app_config.models_module = True
        create_permissions(app_config, verbosity=0, apps=apps)
        app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for role, perms in mapping.items():
        group, _ = Group.objects.get_or_create(name=role)
        for perm in perms:
            app_label, codename = perm.split(".")
            group.permissions.add(
                Permission.objects.get(content_type__app_label=app_label, codename=codename)
            )


# What each role may do today (the migrations hold the history of how it got there).
ROLE_PERMISSIONS: dict[str, list[str]] = {
    "agent": [
        "cases.view_case",
        "cases.add_case",
        "cases.work_case",
        "cases.view_caseevent",
        "cases.view_evidencereference",
        "cases.add_evidencereference",
        "cases.view_customeraccount",
        "approvals.view_proposal",
        "approvals.view_approval",
        "approvals.view_operation",
        "reconciliation.view_ordersystemprofile",
    ],
    "lead": [
        "cases.view_case",
        "cases.add_case",
        "cases.change_case",
        "cases.work_case",
        "cases.lead_case",
        "cases.view_caseevent",
        "cases.view_evidencereference",
        "cases.add_evidencereference",
        "cases.view_customeraccount",
        "cases.change_customeraccount",
        "cases.view_team",
        "cases.view_staffprofile",
        "cases.add_staffprofile",
        "cases.change_staffprofile",
        "cases.view_followuppolicy",
        "cases.add_followuppolicy",
        "cases.change_followuppolicy",
        "approvals.view_proposal",
        "approvals.view_approval",
        "approvals.view_operation",
        "reconciliation.view_ordersystemprofile",
        "reconciliation.run_probe",
        "lab.view_drillrun",
    ],
    "approver": [
        "cases.view_case",
        "cases.view_caseevent",
        "cases.view_evidencereference",
        "cases.view_customeraccount",
        "approvals.approve_proposal",
        "approvals.view_proposal",
        "approvals.view_approval",
        "approvals.view_operation",
        "reconciliation.view_ordersystemprofile",
    ],
    "auditor": [
        "cases.view_case",
        "cases.view_caseevent",
        "cases.view_evidencereference",
        "cases.view_customeraccount",
        "cases.view_team",
        "cases.view_followuppolicy",
        "approvals.view_proposal",
        "approvals.view_approval",
        "approvals.view_operation",
        "reconciliation.view_ordersystemprofile",
        # The team's order events, read only (``reconciliation.selectors``).
        "reconciliation.view_inboundevent",
    ],
    # Runs Holdfast, in no team: the inbound events no team owns yet (the webhook backlog
    # alert's), besides any team's it belongs to, and the order system's probe.
    "operator": [
        "reconciliation.view_unowned_inboundevent",
        "reconciliation.view_ordersystemprofile",
        "reconciliation.run_probe",
    ],
}


def ensure_roles() -> None:
    """Make the role groups exist with today's permissions (idempotent).

    Used by ``load_demo`` and by tests whose database was flushed after the migrations ran.
    """
    from django.apps import apps
    from django.contrib.auth.management import create_permissions
    from django.contrib.auth.models import Group, Permission

    if not Permission.objects.filter(codename="lead_case").exists():
        for app_config in apps.get_app_configs():
            create_permissions(app_config, verbosity=0)
    names = {perm for perms in ROLE_PERMISSIONS.values() for perm in perms}
    # One read of every permission the roles name (it was one read per permission and role).
    found = {
        f"{app_label}.{codename}": pk
        for pk, app_label, codename in Permission.objects.filter(
            content_type__app_label__in={name.split(".")[0] for name in names},
            codename__in={name.split(".")[1] for name in names},
        ).values_list("pk", "content_type__app_label", "codename")
    }
    missing = sorted(names - found.keys())
    if missing:
        raise Permission.DoesNotExist(f"Permissions the roles name do not exist: {missing}")
    for role, perms in ROLE_PERMISSIONS.items():
        group, _ = Group.objects.get_or_create(name=role)
        group.permissions.add(*(found[perm] for perm in perms))

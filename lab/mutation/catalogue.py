"""The curated mutations of the safety core, grouped by the rule each one breaks.

Each is one exact edit (the original text occurs once in its file) and names the smallest set
of tests that should kill it. ``tests/lab/test_mutation_catalogue.py`` keeps the list in step
with the code; ``make mutate`` runs it (``lab.mutation.runner``)."""

from __future__ import annotations

from lab.mutation.model import Mutation

CLAIMS = "reconciliation/claims.py"
APPLY = "reconciliation/apply.py"
SETTLE = "reconciliation/settle.py"
DETECT = "reconciliation/restore_detection.py"
RECOVER = "reconciliation/restore_recovery.py"
REVOKE = "reconciliation/revocation.py"
LEASES = "reconciliation/leases.py"
KERNEL = "cases/kernel.py"
FENCING = "cases/fencing.py"
AUDIT = "cases/audit.py"
APPROVALS = "approvals/services.py"

T_CLAIMS = "tests/cases/test_claims.py"
T_GUARDS = "tests/reconciliation/test_own_guards.py"
T_LOOK = "tests/reconciliation/test_look_before_write.py"
T_SETTLE = "tests/reconciliation/test_settle.py"
T_KINDS = "tests/reconciliation/test_change_kinds.py"
T_MANUAL = "tests/reconciliation/test_manual_safety.py"
T_MANUAL_FENCE = "tests/reconciliation/test_manual_settle_fence.py"
T_RESTORE = "tests/reconciliation/test_restore.py"
T_RESTORE_SOURCE = "tests/reconciliation/test_restore_from_source.py"
T_RESTORE_GUARD = "tests/reconciliation/test_restore_guard.py"
T_STALE = "tests/reconciliation/test_reconcile_stale_finding.py"
T_CANCEL = "tests/reconciliation/test_cancellation.py"
T_KERNEL = "tests/cases/test_kernel.py"
T_CHAIN = "tests/cases/test_audit_chain.py"
T_VERSIONS = "tests/cases/test_event_versions.py"
T_WALLS = "tests/cases/test_team_walls.py"
T_WATCHDOG = "tests/cases/test_watchdog.py"
T_KEEP_ALIVE = "tests/reconciliation/test_keep_alive.py"
T_REVOCATION = "tests/cases/test_revocation.py"
T_FOUR_EYES = "tests/approvals/test_four_eyes.py"
T_FOUR_EYES_PEOPLE = "tests/approvals/test_four_eyes_people.py"
T_DECISIONS = "tests/approvals/test_decisions.py"
T_APPLY = "tests/reconciliation/test_apply_flow.py"
T_HOT = "tests/reconciliation/test_hot_path.py"
T_STOP = "tests/reconciliation/test_stop_before_send.py"

MUTATIONS: list[Mutation] = [
    # --- claims: one winner, every guard, the restore check before a write ---------------------
    Mutation(
        "claim-ignores-revocation",
        CLAIMS,
        "        case.revoked_at is not None\n        or not case.account.access_active",
        "        False\n        or not case.account.access_active",
        (T_GUARDS,),
        "a revoked case is claimed",
    ),
    Mutation(
        "claim-ignores-pending-cancellation",
        CLAIMS,
        "        or row.pending_cancel\n",
        "",
        (T_GUARDS,),
        "a case with a pending cancellation is claimed",
    ),
    Mutation(
        "claim-without-live-approval",
        CLAIMS,
        "        row.approval_id is None\n        or row.evidence_order_version",
        "        False\n        or row.evidence_order_version",
        (T_GUARDS, T_CLAIMS),
        "a case whose approval expired or was revoked is claimed",
    ),
    Mutation(
        "claim-on-changed-source",
        CLAIMS,
        "        or row.evidence_order_version != case.last_checked_order_version\n",
        "",
        (T_GUARDS, T_CLAIMS),
        "a proposal whose evidence is older than the order's last check is applied",
    ),
    Mutation(
        "claim-ignores-autonomy",
        CLAIMS,
        "(row.autonomy != Autonomy.AUTONOMOUS and case.apply_authorized_by_id is None)",
        "False",
        (T_APPLY, T_KINDS),
        "a supervised kind is applied without a person starting it",
    ),
    Mutation(
        "claim-ignores-expected-version",
        CLAIMS,
        "(version is not None and case.version != version)",
        "False",
        (T_CLAIMS,),
        "a claim made on a stale view of the case wins",
    ),
    Mutation(
        "claim-ignores-restore-marker",
        CLAIMS,
        "    why = restore_detected_from(row.marker_identity, row.marker_epoch)\n",
        '    why = ""\n',
        (T_RESTORE_GUARD, T_RESTORE),
        "a worker claims on a database restored from an older backup",
    ),
    Mutation(
        "claim-skips-source-check",
        CLAIMS,
        "        and source_check_due_from(row.source_checked_at, now)\n",
        "        and False\n",
        (T_RESTORE_SOURCE,),
        "a write goes without a recent comparison with the order system",
    ),
    # --- leases and heartbeats -----------------------------------------------------------------
    Mutation(
        "heartbeat-renews-expired-lease",
        LEASES,
        "            lease_expires_at__gt=now,\n"
        "        ).update(lease_expires_at=expires, heartbeat_at=now)",
        "        ).update(lease_expires_at=expires, heartbeat_at=now)",
        (T_CLAIMS, T_KEEP_ALIVE, T_WATCHDOG),
        "a worker whose lease ran out renews it and carries on",
    ),
    Mutation(
        "heartbeat-ignores-fencing-token",
        LEASES,
        "            fencing_token=fencing_token,\n            state__in=Attempt.ACTIVE,",
        "            state__in=Attempt.ACTIVE,",
        (T_CLAIMS, T_KEEP_ALIVE, T_WATCHDOG),
        "an attempt renews the lease with a token that is not its own",
    ),
    Mutation(
        "watchdog-resumes-instead-of-holding",
        CLAIMS,
        '            apply_transition(\n                case,\n                "hold",',
        '            apply_transition(\n                case,\n                "retry_later",',
        (T_WATCHDOG,),
        "a lost worker's case is retried instead of held for reconciliation",
    ),
    # --- fencing tokens --------------------------------------------------------------------------
    Mutation(
        "fencing-token-per-case",
        CLAIMS,
        "    token = row.token if row.token is not None else next_fencing_token()",
        "    token = sequence",
        (T_CLAIMS, T_APPLY),
        "a token from a per-case count, not the global sequence",
    ),
    Mutation(
        "fencing-counter-does-not-advance",
        FENCING,
        'update(value=F("value") + 1)',
        'update(value=F("value"))',
        (T_CLAIMS, T_SETTLE),
        "the same fencing token is handed out twice",
    ),
    Mutation(
        "fencing-raise-is-a-no-op",
        FENCING,
        '    counter_raise_to("fencing_token", minimum)',
        "    pass",
        (T_RESTORE,),
        "recovery after a restore does not move the token sequence past what was used",
    ),
    # --- idempotency and the look before writing ---------------------------------------------
    Mutation(
        "no-look-after-an-earlier-submit",
        APPLY,
        "    if earlier is not None:\n",
        "    if False:\n",
        (T_LOOK, T_APPLY),
        "an operation an earlier attempt sent is written again without a look",
    ),
    Mutation(
        "claim-skips-the-look",
        APPLY,
        "    if claimed is not None and not (claimed.earlier_submitted or claimed.restored):",
        "    if claimed is not None:",
        (T_LOOK, T_APPLY),
        "the claim's reads wave the write through although it may have been sent",
    ),
    Mutation(
        "no-look-after-restore",
        APPLY,
        "    if restored.exists():\n",
        "    if False:\n",
        (T_LOOK,),
        "a recovered case writes without a look although its records are older",
    ),
    Mutation(
        "look-accepts-another-change",
        APPLY,
        "    if not intended:\n",
        "    if False:\n",
        (T_LOOK, T_KINDS),
        "the look before writing confirms a key that holds another change",
    ),
    Mutation(
        "submit-after-lease-expired",
        LEASES,
        "            lease_expires_at__gt=now,\n        ).update(submitted_at=now",
        "        ).update(submitted_at=now",
        (T_GUARDS,),
        "a worker whose lease expired still marks the write as leaving",
    ),
    Mutation(
        "submit-without-live-approval",
        LEASES,
        "    live = [] if approval_id is None else [Exists(approval_live(approval_id, now))]",
        "    live = []",
        (T_GUARDS,),
        "the write leaves under an approval that lapsed after the claim",
    ),
    Mutation(
        "unexpected-replay-not-noticed",
        APPLY,
        "        result.replayed\n        and not looked_up",
        "        False\n        and not looked_up",
        (T_KINDS,),
        "a first send answered 'already applied' is not taken as a sign of a restore",
    ),
    # --- settlement: close the door, then look ---------------------------------------------------
    Mutation(
        "settle-confirms-another-change",
        SETTLE,
        "    if not found_as_intended(operation, record):\n",
        "    if False:\n",
        (T_KINDS, T_SETTLE),
        "reconciliation confirms a key that holds another change as this case's change",
    ),
    Mutation(
        "manual-settle-confirms-another-change",
        SETTLE,
        "    if not found_as_intended(operation, lookup):",
        "    if False:",
        (T_KINDS, T_MANUAL),
        "a person's 'applied' is recorded for a key that holds another change",
    ),
    Mutation(
        "found-on-another-order",
        SETTLE,
        "    return record.order_id == operation.order_id and kinds.same_change(",
        "    return kinds.same_change(",
        (T_SETTLE, T_KINDS),
        "a key found on another order is confirmed",
    ),
    Mutation(
        "failed-fence-is-proof",
        SETTLE,
        "        return Unknown(\n"
        '            f"the fence could not be raised: the order system '
        '{plain_failure(exc)}, so an "',
        '        return Absent(f"fence failed ({exc.error})", fence_token=token)\n'
        "        return Unknown(\n"
        '            f"the fence could not be raised: the order system '
        '{plain_failure(exc)}, so an "',
        (T_SETTLE,),
        "an unreachable fence is taken as proof of absence",
    ),
    Mutation(
        "failed-lookup-is-proof",
        SETTLE,
        "        return Unknown(\n"
        '            f"the consistent lookup failed: asked for the operation after the '
        'fence, the "',
        '        return Absent(f"lookup failed ({exc.error})", fence_token=token)\n'
        "        return Unknown(\n"
        '            f"the consistent lookup failed: asked for the operation after the '
        'fence, the "',
        (T_SETTLE,),
        "a failed lookup is taken as proof of absence",
    ),
    Mutation(
        "stale-finding-kept-after-case-changed",
        SETTLE,
        "        if moved or newer_attempt:",
        "        if newer_attempt:",
        (T_STALE,),
        "a finding is acted on although the case changed during the investigation",
    ),
    Mutation(
        "absent-ignores-pending-cancellation",
        SETTLE,
        "    if _pending_cancellations(case).exists():\n",
        "    if False:\n",
        (T_CANCEL, T_SETTLE),
        "a held case proven absent is re-applied although the customer cancelled",
    ),
    Mutation(
        "absent-ignores-expired-approval",
        SETTLE,
        "    if live_approval(case) is None:\n",
        "    if False:\n",
        (T_CANCEL,),
        "a held case proven absent is re-applied under an approval that expired",
    ),
    Mutation(
        "manual-absent-over-applied",
        SETTLE,
        "        if isinstance(finding, Applied):\n",
        "        if False:\n",
        (T_SETTLE,),
        "a person declares absent what the consistent lookup shows applied",
    ),
    Mutation(
        "manual-absent-without-fence",
        SETTLE,
        "        if isinstance(finding, Unknown) and fences:\n",
        "        if False:\n",
        (T_MANUAL, T_MANUAL_FENCE, T_KINDS),
        "a person declares absent while the door could not be closed",
    ),
    Mutation(
        "manual-applied-unknown-to-lookup",
        SETTLE,
        "        if looks_up:\n",
        "        if False:\n",
        (T_MANUAL_FENCE,),
        "a person declares applied what the consistent lookup does not know",
    ),
    Mutation(
        "worker-settles-on-restored-database",
        SETTLE,
        "    if isinstance(actor, Worker) and not recovering and restore_detected():",
        "    if False:",
        (T_RESTORE_GUARD,),
        "a worker settles on a database restored from an older backup",
    ),
    # --- restore: detection and recovery ---------------------------------------------------------
    Mutation(
        "restore-misses-never-sent-but-applied",
        DETECT,
        "        if operation.confirmed_at is None and operation.pk not in sent:\n",
        "        if False:\n",
        (T_RESTORE_SOURCE, T_KINDS),
        "an operation applied at the source that these records show never sent is not a restore",
    ),
    Mutation(
        "restore-misses-unknown-key",
        DETECT,
        "        if operation is None:\n            return (",
        "        if False:\n            return (",
        (T_RESTORE_SOURCE, T_KINDS),
        "an operation key these records lack is not taken as a restore",
    ),
    Mutation(
        "restore-misses-higher-token",
        DETECT,
        "    if seen.max_token > local:\n",
        "    if False:\n",
        (T_RESTORE_SOURCE,),
        "a fencing token above this database's sequence is not taken as a restore",
    ),
    Mutation(
        "restore-misses-older-epoch",
        DETECT,
        "    if seen is not None and epoch is not None and epoch < seen:\n        return (",
        "    if False:\n        return (",
        (T_RESTORE_GUARD, T_RESTORE),
        "a database epoch behind the host's is not taken as a restore",
    ),
    Mutation(
        "recovery-keeps-the-token-sequence",
        RECOVER,
        "    fencing_floor = max(fencing_current(), token) + FENCING_JUMP",
        "    fencing_floor = fencing_current()",
        (T_RESTORE, T_RESTORE_SOURCE),
        "after a restore, tokens already used at the order system are handed out again",
    ),
    Mutation(
        "recovery-skips-unconfirmed-operations",
        RECOVER,
        '.filter(Q(pk__in=unconfirmed.values("case")) | Q(pk__in=active.values("case")))',
        '.filter(Q(pk__in=active.values("case")))',
        (T_RESTORE, T_RESTORE_SOURCE, "tests/reconciliation/test_recovery_interrupted.py"),
        "recovery leaves a case with an unconfirmed operation unreconciled",
    ),
    # --- revocation ------------------------------------------------------------------------------
    Mutation(
        "revocation-guard-removed",
        REVOKE,
        "        if not revocation_possible(case):\n            result.already = True",
        "        if False:\n            result.already = True",
        (T_REVOCATION,),
        "a finished or already revoked case is revoked again",
    ),
    Mutation(
        "revocation-possible-twice",
        REVOKE,
        "    return case.revoked_at is None and not case.is_terminal",
        "    return not case.is_terminal",
        (T_REVOCATION,),
        "a revoked case is offered and recorded as revoked again",
    ),
    Mutation(
        "revocation-without-fence",
        REVOKE,
        "    if fence and (result.cancel_requested or result.uncertain):",
        "    if False:",
        (T_REVOCATION,),
        "a revocation with work in flight raises no fence at the order system",
    ),
    # --- four eyes -------------------------------------------------------------------------------
    Mutation(
        "author-may-approve",
        APPROVALS,
        "    if roles:\n        raise OwnProposal(",
        "    if False:\n        raise OwnProposal(",
        (T_FOUR_EYES,),
        "the author of a proposal approves it",
    ),
    Mutation(
        "authors-not-recorded-before-deciding",
        APPROVALS,
        "    proposal_record_authors(case=case, proposal=proposal)\n"
        "    roles = author_roles_of(proposal, actor)",
        "    roles = author_roles_of(proposal, actor)",
        (T_FOUR_EYES_PEOPLE, T_FOUR_EYES),
        "a person who became an author after preparation approves",
    ),
    Mutation(
        "approver-permission-not-checked",
        APPROVALS,
        'isinstance(actor, Worker) or not actor_may(actor, "approvals.approve_proposal", case)',
        "isinstance(actor, Worker)",
        (T_DECISIONS, T_FOUR_EYES, T_WALLS),
        "someone without the approver role, or outside the team, decides",
    ),
    Mutation(
        "decide-a-proposal-not-in-review",
        APPROVALS,
        "    if not awaits_decision(proposal, case.status):",
        "    if False:",
        (T_DECISIONS, "tests/approvals/test_race.py"),
        "a decided or superseded proposal is decided again",
    ),
    # --- the kernel: versions, transitions, permissions ----------------------------------------
    Mutation(
        "version-check-removed",
        KERNEL,
        "    if expected_version is not None and case.version != expected_version:",
        "    if False:",
        (T_KERNEL, T_MANUAL),
        "a person's change made on a stale view overwrites a newer one",
    ),
    Mutation(
        "version-not-bumped",
        KERNEL,
        "    case.version += 1\n",
        "    case.version += 0\n",
        (T_KERNEL, T_VERSIONS),
        "a change does not move the case's version",
    ),
    Mutation(
        "transition-guard-removed",
        KERNEL,
        "    if not can_proceed(method):\n",
        "    if False:\n",
        (T_KERNEL, "tests/cases/test_transitions.py"),
        "a transition its guards refuse is made",
    ),
    Mutation(
        "team-wall-removed",
        KERNEL,
        "    return case.team.members.filter(pk=actor.pk).exists()",
        "    return True",
        (T_KERNEL,),
        "a person acts on another team's case",
    ),
    # --- the audit chain -------------------------------------------------------------------------
    Mutation(
        "event-not-linked",
        KERNEL,
        '    prev_hash = head or ""\n',
        '    prev_hash = ""\n',
        (T_CHAIN,),
        "an event does not link to the case's previous one",
    ),
    Mutation(
        "hash-omits-the-link",
        AUDIT,
        '        "prev_hash": prev_hash,\n        "reason": reason,\n        "to_status"',
        '        "reason": reason,\n        "to_status"',
        (T_CHAIN,),
        "an event's hash does not cover its link, so the chain can be re-ordered",
    ),
    Mutation(
        "claim-event-not-linked",
        CLAIMS,
        '        head=row.head or "",',
        '        head="",',
        (T_CHAIN,),
        "the claim's event starts a new chain instead of extending the case's",
    ),
    Mutation(
        "replay-taken-for-a-first-application",
        APPLY,
        "first_applied = operation.confirmed_at is None and not result.replayed and not looked_up",
        "first_applied = operation.confirmed_at is None",
        (T_KINDS,),
        "a first send answered 'already applied' skips the look for an earlier notification: "
        "the customer is told again, and the step's events link past the replay's finding",
    ),
    Mutation(
        "answer-links-to-the-head-read-with-the-lock-after-a-finding",
        APPLY,
        "writes_batched(case, head=head if first_applied else None)",
        "writes_batched(case, head=head)",
        (T_KINDS,),
        "the answer's events link to the head read with the lock although a finding was "
        "recorded after it",
    ),
    Mutation(
        "batched-event-not-linked",
        KERNEL,
        "        head = batch.events[-1].hash",
        "        head = None",
        (T_KERNEL, T_CHAIN),
        "events written together link to the stored head, not to each other",
    ),
]

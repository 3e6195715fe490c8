"""Change kinds: the one interface the safety core asks about a change, and their registry.

A case asks for one change of one kind to one order (CONTRACT.md §3). The ``change`` is a JSON
object that always carries its ``kind``; it is the same in the intake, the proposal, the
operation, the approval grant and the order system's records. The safety core -- intake
identities, statuses, claims, leases, fencing, settling, revocation, restore detection, retries,
audit -- never names a field of one change: it asks the change's kind, through this module.

A kind is a subclass of :class:`ChangeKind` (healthchecks' transports, Saleor's plugins: the core
calls the same few methods on every kind and never asks which one it holds). The kinds a
deployment offers are the dotted class paths in ``settings.HOLDFAST_CHANGE_KINDS``, registered
by ``CasesConfig.ready`` (:func:`load`): a fourth kind is a module and a setting, no core edit.

Invariants:

- This module imports no kind module (``pyproject.toml``'s import-linter contract); the
  core imports this module only.
- A change is stored, signed, sent and compared in its kind's canonical form
  (:meth:`ChangeKind.canonical`); two changes are the same when their canonical JSON
  (``sort_keys``, separators ``(",", ":")``) is equal (:func:`same_change`), never when one
  field matches.
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

if TYPE_CHECKING:
    from django import forms
    from rest_framework import serializers


class ErrorClass(enum.StrEnum):
    """What a receiver's refusal of a change means for the case (``refusals``)."""

    # The order's state disagrees with the change (no room for it, an order already shipped):
    # nothing was applied, repeating it changes nothing, a person looks.
    CONFLICT = "conflict"
    # The change itself is refused (a country the order system does not ship to, a kind it
    # does not accept): it needs corrected input.
    INVALID_INPUT = "invalid_input"


# Refusals every kind can get from the receiving contract beyond the generic ones the client
# already knows (version_conflict, stale_fencing_token, the grant's, permission_revoked …).
GENERIC_REFUSALS: Mapping[str, ErrorClass] = {
    "order_not_open": ErrorClass.CONFLICT,
    "unsupported_kind": ErrorClass.INVALID_INPUT,
}


class UnknownKind(LookupError):
    """A change names a kind this deployment does not offer."""


class OrderView(Protocol):
    """What a kind reads of an order (``reconciliation.client.Order`` is one): the generic
    fields, and every field the kinds know in ``fields`` (CONTRACT §1 ``GET /orders/{id}``)."""

    @property
    def order_id(self) -> str: ...

    @property
    def account_id(self) -> str: ...

    @property
    def version(self) -> int: ...

    @property
    def status(self) -> str: ...

    @property
    def fields(self) -> Mapping[str, Any]: ...


class OrderReader(Protocol):
    """The order system's client (``reconciliation.client``) as a kind sees it, outside any
    transaction: a kind's advice and its probe changes. A kind that reads more of the contract
    (a delivery date kind's ``GET /slots``) states that in its own module. The client's errors
    are the caller's to handle."""

    def capabilities(self) -> dict[str, Any]: ...


class ChangeKind:
    """One kind of change. Subclasses set the class attributes and implement the methods the
    base does not; a method the base implements is the default every kind gets.

    ``code`` is the change's ``kind``; ``key_prefix`` names its operation keys
    (``{key_prefix}-{case number}-{sequence}``); ``irreversible`` kinds have no reversal and
    every page says so before anyone approves; ``refusals`` maps the receiver's error codes of
    this kind to what they mean for the case (the generic ones are :data:`GENERIC_REFUSALS`).
    """

    code: ClassVar[str]
    label: ClassVar[str]
    key_prefix: ClassVar[str]
    irreversible: ClassVar[bool] = False
    # Its change names a person or where they live: the audit trail, which outlives the
    # payload, gets only ``audit_words`` and ``audit_detail``, and the change is purged with
    # the case's payload after retention.
    personal: ClassVar[bool] = False
    refusals: ClassVar[Mapping[str, ErrorClass]] = {}
    # The admin form of the kind's own fields and the API serializer of its ``change`` (its
    # fields without ``kind``).
    form: ClassVar[type[forms.Form]]
    serializer: ClassVar[type[serializers.Serializer]]
    # A field of an older intake body that asked for this kind before ``kind`` and ``change``
    # existed (deprecated; ``legacy_intake_field`` and ``from_legacy`` read it), or "".
    legacy_intake: ClassVar[str] = ""

    # --- the request --------------------------------------------------------------------------

    def validate(self, change: Mapping[str, Any]) -> dict[str, list[str]]:
        """Messages per dotted field (``change.address.country``); empty when the change is
        acceptable. Unknown keys are refused (the receiver refuses them too)."""
        raise NotImplementedError

    def canonical(self, change: Mapping[str, Any]) -> dict[str, Any]:
        """The form stored, signed, sent and compared, for a change ``validate`` accepts."""
        raise NotImplementedError

    def recorded(self, found: Mapping[str, Any]) -> Mapping[str, Any]:
        """A change as an order system recorded it, in this kind's shape for comparison. By
        default as found; a kind whose changes were once sent in another shape says so."""
        return found

    def describe(self, change: Mapping[str, Any]) -> str:
        """The change in plain words, for pages, the approval and the customer's mail: a phrase
        that completes "The change: …" (``the delivery moves to Friday …``)."""
        raise NotImplementedError

    def audit_words(self, change: Mapping[str, Any]) -> str:
        """The change in words for the audit trail: ``describe``, unless it is personal."""
        return f"a {self.label.lower()} change" if self.personal else self.describe(change)

    def audit_detail(self, change: Mapping[str, Any]) -> dict[str, Any]:
        """The change for an audit event's detail: whole, unless it is personal."""
        return {"kind": self.code} if self.personal else dict(change)

    # --- the order as evidence ----------------------------------------------------------------

    def seen(self, order: OrderView) -> dict[str, Any]:
        """The order's current value this kind changes, as evidence (JSON)."""
        raise NotImplementedError

    def describe_seen(self, seen: Mapping[str, Any] | None) -> str:
        """The seen value in plain words (``delivery on Thu 2026-12-03``)."""
        raise NotImplementedError

    def holds(self, seen: Mapping[str, Any], change: Mapping[str, Any]) -> bool:
        """Whether the order, as ``seen``, already holds ``change``: applying it would change
        nothing. By default never (a kind that cannot tell says so)."""
        return False

    def advisory(self, client: OrderReader, order: OrderView, change: Mapping[str, Any]) -> str:
        """Advice for the approver before approval, read outside any transaction; never a
        reservation (the receiver checks again when it applies). By default: that the order
        already holds the change (:meth:`holds`), whether the order is still open, and that an
        irreversible change cannot be undone."""
        notes = []
        seen = self.seen(order)
        if self.holds(seen, change):
            notes.append(
                f"The order already has this ({self.describe_seen(seen)}): "
                "approving sends it again and changes nothing; reject it if the request is met"
            )
        if order.status != "open":
            notes.append(f"Order {order.order_id} is {order.status}: the order system refuses it")
        if self.irreversible:
            notes.append(IRREVERSIBLE_WORDS)
        return "; ".join(notes)

    def reversal(self, seen: Mapping[str, Any] | None) -> dict[str, Any] | None:
        """The change that puts the seen value back (a new proposal, its own approval), or
        None: irreversible kinds, or nothing seen to go back to."""
        return None

    # --- the probe ----------------------------------------------------------------------------

    def probe_changes(self, client: OrderReader, order: OrderView) -> list[dict[str, Any]]:
        """Changes the capability probe may send for the sandbox ``order``: for a reversible
        kind two different changes that the order system would apply now (the first is
        applied, then changed back through :meth:`reversal`); for an irreversible kind one,
        only ever sent with a stale token, version or grant. Empty when none can be made now."""
        raise NotImplementedError

    # --- its forms -------------------------------------------------------------------------------

    def json_schema(self) -> dict[str, Any]:
        """The JSON schema of this kind's ``change`` (``GET /api/kinds/``)."""
        raise NotImplementedError

    def from_form(self, cleaned_data: Mapping[str, Any]) -> dict[str, Any]:
        """The change a valid ``form`` holds."""
        raise NotImplementedError

    def form_initial(self, change: Mapping[str, Any] | None) -> dict[str, Any]:
        """``form``'s initial values for ``change`` (None: a blank form)."""
        return {}

    def from_serializer(self, validated: Mapping[str, Any]) -> dict[str, Any]:
        """The change a valid ``serializer`` holds (its ``validated_data``)."""
        return {"kind": self.code, **_plain(validated)}

    def legacy_intake_field(self) -> serializers.Field:
        """The serializer field of ``legacy_intake`` in the older intake body."""
        raise NotImplementedError

    def from_legacy(self, value: Any) -> dict[str, Any]:
        """The change an older intake body's ``legacy_intake`` value (validated) asks for."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<change kind {self.code}>"


IRREVERSIBLE_WORDS = "This cannot be undone: once applied there is no reversal"


def unknown_keys(change: Mapping[str, Any], allowed: Iterable[str]) -> dict[str, list[str]]:
    """A message for each key of ``change`` outside ``allowed`` (and ``kind``)."""
    extra = sorted(set(map(str, change)) - {"kind", *allowed})
    return {f"change.{key}": ["Unknown field: refused."] for key in extra}


def _plain(value: Any) -> Any:
    """Validated data as JSON values (dates as ISO text, nested mappings as dicts)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


# --- the registry -------------------------------------------------------------------------------

_KINDS: dict[str, ChangeKind] = {}


def register(kind: ChangeKind) -> ChangeKind:
    """Offer ``kind``; its code and key prefix must be its own."""
    existing = _KINDS.get(kind.code)
    if existing is not None and type(existing) is type(kind):
        return existing
    if existing is not None:
        raise ValueError(f"Change kind {kind.code!r} is registered twice.")
    clash = next((k for k in _KINDS.values() if k.key_prefix == kind.key_prefix), None)
    if clash is not None:
        raise ValueError(f"{kind.code} and {clash.code} share the key prefix {kind.key_prefix}.")
    _KINDS[kind.code] = kind
    return kind


def unregister(code: str) -> None:
    """Stop offering ``code`` (tests that register a kind of their own)."""
    _KINDS.pop(code, None)


def load(paths: Iterable[str]) -> list[ChangeKind]:
    """Register the kind classes at ``paths`` (``settings.HOLDFAST_CHANGE_KINDS``), in order."""
    from django.utils.module_loading import import_string

    return [register(import_string(path)()) for path in paths]


def kinds() -> list[ChangeKind]:
    """Every kind offered, in the order the setting names them."""
    return list(_KINDS.values())


def codes() -> list[str]:
    return list(_KINDS)


def get(code: object) -> ChangeKind:
    """The kind registered as ``code``; ``UnknownKind`` names the offered ones otherwise."""
    kind = _KINDS.get(code) if isinstance(code, str) else None
    if kind is None:
        raise UnknownKind(f"Unknown change kind {code!r}; this desk offers {', '.join(_KINDS)}.")
    return kind


def find(code: object) -> ChangeKind | None:
    """The kind registered as ``code``, or None (a kind this desk no longer offers)."""
    return _KINDS.get(code) if isinstance(code, str) else None


def label_of(code: str) -> str:
    """The kind's label, or its code when this desk no longer offers it."""
    kind = _KINDS.get(code)
    return kind.label if kind is not None else code


def choices() -> list[tuple[str, str]]:
    return [(kind.code, kind.label) for kind in _KINDS.values()]


def kind_of(change: Mapping[str, Any]) -> ChangeKind:
    return get(change.get("kind"))


def legacy_kind_of(body: Mapping[str, Any]) -> ChangeKind | None:
    """The kind an older intake body asks for through its ``legacy_intake`` field, if any."""
    return next((k for k in _KINDS.values() if k.legacy_intake and k.legacy_intake in body), None)


def key_prefixes() -> list[str]:
    return [kind.key_prefix for kind in _KINDS.values()]


# --- what the core asks of any change --------------------------------------------------------


def validate(code: str, change: object) -> dict[str, list[str]]:
    """Messages per dotted field for ``change`` as a change of kind ``code``."""
    try:
        kind = get(code)
    except UnknownKind as exc:
        return {"kind": [str(exc)]}
    if not isinstance(change, Mapping):
        return {"change": ["Must be an object."]}
    if "kind" in change and change["kind"] != code:
        return {"change.kind": [f"Says {change['kind']!r}, but the request is {code!r}."]}
    return kind.validate(change)


def canonical(change: Mapping[str, Any]) -> dict[str, Any]:
    return kind_of(change).canonical(change)


def canonical_json(change: Mapping[str, Any]) -> str:
    """The bytes equality is decided on (CONTRACT §3)."""
    return json.dumps(change, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def change_hash(change: Mapping[str, Any]) -> str:
    """SHA-256 of the change's canonical JSON: an operation's identity within its case."""
    return hashlib.sha256(canonical_json(canonical(change)).encode("utf-8")).hexdigest()


def same_change(intended: Mapping[str, Any], found: object) -> bool:
    """Whether ``found`` (an order system's record) is exactly the ``intended`` change: the
    whole change, by canonical JSON, never one field. Anything unreadable is not the same."""
    if not isinstance(found, Mapping):
        return False
    kind = kind_of(intended)
    recorded = kind.recorded(found)
    return canonical_json(recorded) == canonical_json(kind.canonical(intended))


def describe(change: Mapping[str, Any]) -> str:
    """The change in plain words, whatever its kind (``describe`` of its kind)."""
    if change.get(PURGED):
        return f"a {label_of(str(change.get('kind'))).lower()} change (purged after retention)"
    try:
        return kind_of(change).describe(change)
    except (UnknownKind, KeyError, TypeError, ValueError):
        return f"a change the desk cannot read ({canonical_json(change)[:120]})"


def audit_words(change: Mapping[str, Any]) -> str:
    """The change in words for the audit trail (personal details left out)."""
    kind = find(change.get("kind"))
    return describe(change) if kind is None else kind.audit_words(change)


def audit_detail(change: Mapping[str, Any]) -> dict[str, Any]:
    """The change for an audit event's detail (personal details left out)."""
    kind = find(change.get("kind"))
    return {"kind": change.get("kind")} if kind is None else kind.audit_detail(change)


# A purged change keeps its kind and says so (``purged``): the rest was personal.
PURGED = "purged"


def purged(change: Mapping[str, Any]) -> dict[str, Any]:
    """``change`` after its case's retention: unchanged unless its kind is personal."""
    kind = find(change.get("kind"))
    if kind is None or not kind.personal:
        return dict(change)
    return {"kind": kind.code, PURGED: True}


def refusal_class(code: str | None, error: str) -> ErrorClass | None:
    """What the receiver's ``error`` means for a change of kind ``code`` (its own refusals,
    then the generic ones), or None when neither names it."""
    kind = _KINDS.get(code) if code else None
    if kind is not None and error in kind.refusals:
        return kind.refusals[error]
    return GENERIC_REFUSALS.get(error)

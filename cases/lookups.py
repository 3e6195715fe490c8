"""``field__among=keys``: ``field IN (keys)`` written for a long list of keys.

The list pages' search narrows a page to a capped set of keys (``cases.search``): up to a
thousand. As ``__in`` each key is a placeholder of its own, and the statement grows past the
4,096 characters below which psycopg keeps its conversion of the placeholders: every request
converted three such statements again, a quarter of the API's three-word search in a profile at
1M cases. On PostgreSQL ``__among`` sends the keys as one array (``field = ANY(%s)``), the
statement's text the same whatever the keys; elsewhere it is ``__in``.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Field, ForeignObject
from django.db.models.lookups import In, Lookup


class Among(Lookup):
    lookup_name = "among"

    def get_prep_lookup(self) -> list[Any]:
        prep = self.lhs.output_field.get_prep_value
        return [prep(value) for value in self.rhs if value is not None]

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, tuple[Any, ...]]:
        if connection.vendor != "postgresql" or not self.rhs:
            # ``__in``'s own SQL (an empty list: ``EmptyResultSet``, as ``__in`` raises).
            return In(self.lhs, self.rhs).as_sql(compiler, connection)
        lhs, params = self.process_lhs(compiler, connection)
        field = self.lhs.output_field
        values = [field.get_db_prep_value(value, connection, prepared=True) for value in self.rhs]
        # Cast to the column's own type: psycopg would send small numbers as ``int2[]``.
        return f"{lhs} = ANY(%s::{field.cast_db_type(connection)}[])", (*params, values)


# A relation keeps lookups of its own (``account__among`` is the account's key).
Field.register_lookup(Among)
ForeignObject.register_lookup(Among)

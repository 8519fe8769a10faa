"""The format seam's two sides: each format's table has the stream's side, and its maintenance facet the rest."""

from __future__ import annotations

import pytest

from ingest.formats import FORMAT_NAMES, LakeTable, format_for
from ingest.formats.table_maintenance import TableMaintenance

REFS = {"delta": "s3a://bucket/tables/orders", "iceberg": "lakeline.events.orders"}


@pytest.mark.parametrize("name", FORMAT_NAMES)
def test_each_format_opens_a_table_whose_maintenance_is_its_facet(name):
    table = format_for(name).open(None, REFS[name], pipeline="orders")  # no Spark: nothing is read yet
    assert isinstance(table, LakeTable) and isinstance(table.maintenance, TableMaintenance)
    assert table.maintenance is table.maintenance  # one facet per table
    maintenance_side = {method for method in dir(TableMaintenance) if not method.startswith("_")}
    assert not maintenance_side & set(dir(table)), "maintenance's methods belong on table.maintenance"

"""Dates and times as every page of the desk writes them: ISO dates and 24-hour times with the
zone they are in ("2026-12-05 16:50 UTC"). Django's English defaults ("Dec. 5, 2026, 4:50
p.m.") stood beside the desk's own "2026-12-05 16:50 UTC" and named no zone."""

DATE_FORMAT = "Y-m-d"
SHORT_DATE_FORMAT = "Y-m-d"
TIME_FORMAT = "H:i T"
DATETIME_FORMAT = "Y-m-d H:i T"
SHORT_DATETIME_FORMAT = "Y-m-d H:i T"

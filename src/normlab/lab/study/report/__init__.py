"""One study's report: each verdict in a sentence, the plots, ``report.md``/``.html`` and
``claims.json``."""

from normlab.lab.study.report.claim_text import unit_of
from normlab.lab.study.report.plots import PLOTS
from normlab.lab.study.report.writer import COLORS, badge, format_table, write_reports

__all__ = ["badge", "COLORS", "format_table", "PLOTS", "unit_of", "write_reports"]

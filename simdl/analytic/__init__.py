"""The analytic engine (``engine``). The cost modules live in simdl.costs; the names
``simdl.analytic.<module>`` are aliases of the same module objects."""

import sys as _sys

from ..costs import measured as _measured
from ..costs import schedule as _schedule
from ..costs import tasks as _tasks

costs, measured, schedule = _tasks, _measured, _schedule
for _name, _module in (("costs", _tasks), ("measured", _measured), ("schedule", _schedule)):
    _sys.modules.setdefault(f"{__name__}.{_name}", _module)

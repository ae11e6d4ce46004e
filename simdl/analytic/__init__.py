"""The analytic engine (``engine``). The cost modules it used to hold live in simdl.costs;
their old names stay importable as aliases of the same module objects."""

import sys as _sys

from ..costs import measured as _measured
from ..costs import schedule as _schedule
from ..costs import tasks as _tasks

costs, measured, schedule = _tasks, _measured, _schedule
for _name, _module in (("costs", _tasks), ("measured", _measured), ("schedule", _schedule)):
    _sys.modules.setdefault(f"{__name__}.{_name}", _module)

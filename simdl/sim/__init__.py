"""The discrete-event simulator: plan -> Result by playing it on a SimPy timeline.

Modules: :mod:`.network` (links, max-min fair flows), :mod:`.collectives` (collectives as
flows over the topology), :mod:`.ranks` (streams executing SPMD plans), :mod:`.ps`
(parameter-server processes), :mod:`.stragglers` (speed factors, seeded jitter),
:mod:`.engine` (``simulate``), :mod:`.trace` (Chrome trace) and
:mod:`.plot` (matplotlib figures, imported only when plotting).
"""

"""The keywords of :func:`simdl.sim.engine.simulate` a prediction passes through, importable
without the simulator (``predict`` refuses them for the analytic engine)."""

SIM_OPTIONS = ("iterations", "warmup", "straggler", "jitter", "seed", "free_comm", "contention")
# Not a model option: ``predict(..., engine="sim", return_run=True)`` returns the SimRun.
RUN_OPTIONS = ("return_run",)

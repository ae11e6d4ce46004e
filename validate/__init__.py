"""Real distributed training experiments of the source studies, and simdl's error against them.

``python -m validate.run --profile smoke|local|paper -o runs/validate/<name>/results.jsonl``
runs the matrix of :mod:`validate.experiments` with torchrun (:mod:`validate.train`),
measures each run (:mod:`validate.measure`), predicts it with simdl from its
configuration only, and appends one JSON line per run. ``simdl report RESULTS.jsonl``
turns the file into the validation report (:mod:`simdl.report.validation`).
"""

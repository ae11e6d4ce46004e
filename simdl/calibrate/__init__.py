"""Calibration: fit simdl's cost-model parameters to measurements.

* :mod:`.records` reads the raw per-rank JSONL files the torchrun scripts in
  ``calibration/`` write;
* :mod:`.collectives`, :mod:`.compute`, :mod:`.overlap`, :mod:`.ps` are the fitters, each
  following scikit-learn's estimator contract (``__init__`` stores settings, ``fit``
  returns ``self``, fitted values end in ``_``, residuals are kept);
* :mod:`.profile` turns fitted values into a cluster profile in the preset format;
* :mod:`.run` is ``simdl calibrate``: it launches the stages, resumes, fits and writes;
* :mod:`.published` fits the same models to published figures for the built-in presets.

Importing this package does not import torch.
"""

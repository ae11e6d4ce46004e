"""The cost library both engines share: what each task of a plan costs on a cluster.

``tasks`` (per-row compute roofline, memory-bound copies, collectives' alpha-beta costs),
``measured`` (compute profiles: measured row times), ``schedule`` (the stream recurrence),
``step`` (input time, bytes sent, the step's split), ``ps`` (the parameter server's closed form),
``gpu_kernels`` / ``gpu_rows`` / ``gpu_profile`` / ``kernel_fit`` (the per-op-class GPU kernel
model, the table rows as kernel shapes, a GPU file's ``kernels:`` block and its fitter).
"""

"""Predict the runs of a results file again with another cluster profile (e.g. a new calibration).

``python -m validate.repredict RESULTS.jsonl --cluster PROFILE.yaml -o NEW.jsonl``

Measurements are kept as they are; only the ``predicted`` side, the profile path and its
checksum change. The predictions still come from each run's configuration alone (its
``spec``), never from its measurements: validate.run.predict_run sees nothing else.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .experiments import RunSpec
from .run import append_result, predict_run, profile_digest, profile_for_ranks, read_results


def repredict(records: list[dict], cluster: str, workdir: Path, engines=("analytic", "sim")) -> list[dict]:
    from simdl.cluster import load_cluster
    from simdl.cluster.host import allocator_mismatch, cpu_label, host_mismatch

    out = []
    for rec in records:
        run = RunSpec.from_dict(rec["spec"])
        path, note = profile_for_ranks(cluster, run.ranks, workdir)
        new = dict(rec)
        new.update(
            predicted=predict_run(run, path, engines),
            cluster_profile=path,
            cluster_profile_sha256=profile_digest(path),
            cluster_profile_note=note,
            repredicted_from=rec.get("cluster_profile"),
        )
        # The processor the run was measured on (model name and caches, recorded since
        # 2026-11-25; older runs do not say, and are not labelled) against the one the profile
        # was calibrated on.
        host = rec.get("host") or {}
        cpu = host.get("cpu_model")
        why = host_mismatch(load_cluster(path), cpu_label(cpu), host.get("cpu_caches") or {}) if cpu else None
        new.pop("host_mismatch", None)
        if why:
            new["host_mismatch"] = why
        # The ranks' malloc settings (recorded since 2026-12-02) against the profile's.
        new.pop("allocator_mismatch", None)
        if "allocator_env" in host:
            malloc = allocator_mismatch(load_cluster(path), host["allocator_env"] or {})
            if malloc:
                new["allocator_mismatch"] = malloc
        out.append(new)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m validate.repredict", description=__doc__.splitlines()[0])
    p.add_argument("results")
    p.add_argument("--cluster", required=True, help="cluster profile (preset name or YAML path)")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--engines", default="analytic,sim")
    a = p.parse_args(argv)
    out = Path(a.output)
    if out.exists():
        print(f"{out} exists; remove it first", file=sys.stderr)
        return 2
    for rec in repredict(read_results(a.results), a.cluster, out.parent, tuple(a.engines.split(","))):
        append_result(out, rec)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

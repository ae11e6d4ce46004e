"""The whole built profile, key by key and string by string, pinned on synthetic run
directories (tests/calibrate/test_profile.py's fixtures), in the order the YAML is written: a refactor of build_profile must
leave every value, kind and source text as it was.

Regenerate, when a change moves the profile on purpose, with
    PYTHONPATH=. SIMDL_REGEN_PROFILE_SNAPSHOT=1 python -m pytest tests/calibrate/test_profile_snapshot.py -q
and say in the commit message which keys moved and why."""

import json
import lzma
import os
from pathlib import Path

import numpy as np
import pytest
from test_profile import _write, make_run_dir

from simdl.calibrate.profile import build_profile
from simdl.calibrate.records import load_stage
from simdl.calibrate.run import make_settings
from simdl.cluster.spec import CLUSTER_DIR

SNAPSHOT = Path(__file__).parent / "data" / "profile_snapshot.json.xz"  # xz: the text is 296 kB


def _canonical(obj, tmp: str):
    """JSON-ready copy: the run's temporary folder as <tmp>, the installed presets' as <clusters>, floats to 12 significant digits
    (the fits' last bits may differ between BLAS builds; the sources' printed figures do not)."""
    if isinstance(obj, dict):
        return {str(k): _canonical(v, tmp) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_canonical(v, tmp) for v in obj]
    if isinstance(obj, (float, np.floating)):
        return float(f"{float(obj):.12g}")
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, str):
        return obj.replace(tmp, "<tmp>").replace(str(CLUSTER_DIR.resolve()), "<clusters>")
    return obj


def _with_local_steps(run):
    rng = np.random.default_rng(0)
    for r in (0, 1):
        recs = []
        for model, t in (("resnet18", 0.12 * (1 + 0.05 * r)), ("convnext_tiny", 0.35)):
            steps = (t * rng.lognormal(0.0, 0.08, 200)).tolist()
            recs.append(
                {
                    "type": "measurement",
                    "key": f"local/{model}/32",
                    "kind": "strategy",
                    "variant": "local",
                    "model": model,
                    "dataset": "cifar10",
                    "batch": 32,
                    "iters": 200,
                    "warmup": 3,
                    "step_times_s": steps,
                    "step_s": float(np.median(steps)),
                    "peak_bytes": 1,
                }
            )
        _write(run / "strategies", r, recs)


def _with_rpc(run):
    sizes = [2**20 * 4**i for i in range(5)]
    rpc = [
        {
            "type": "measurement",
            "key": f"rpc_{kind}/{m}",
            "kind": f"ps_rpc_{kind}",
            "bytes": m,
            "push_s": [900e-6 + m / 3e9] * 3,
            "pull_s": [900e-6 + m / 3e9] * 3,
        }
        for kind in ("alone", "together")
        for m in sizes
    ]
    stage = load_stage(run, "ps")
    for rank, role in ((0, "server"), (1, "worker")):
        old = list(stage.measurements[rank].values())
        _write(run / "ps", rank, old + [dict(r, role=role) for r in rpc])


CASES = {
    "full": (True, None, {}),
    "no_compute": (False, None, {}),
    "local_steps": (True, _with_local_steps, {}),
    "rpc": (True, _with_rpc, {}),
    "collectives_only": (False, None, {"stages": ("collectives",)}),
}


def _built(tmp_path):
    out = {}
    for case, (with_compute, extra, kw) in CASES.items():
        root = tmp_path / case
        run = make_run_dir(root, with_compute=with_compute)
        if extra:
            extra(run)
        settings = make_settings(nproc_per_node=2, quick=False, time_budget=None, output=None, **kw)
        profile, _ = build_profile(run, settings, name="synthetic")
        out[case] = _canonical(profile, str(root))
    return out


def test_built_profiles_match_the_snapshot(tmp_path):
    got = _built(tmp_path)
    if os.environ.get("SIMDL_REGEN_PROFILE_SNAPSHOT"):
        SNAPSHOT.parent.mkdir(exist_ok=True)
        SNAPSHOT.write_bytes(lzma.compress((json.dumps(got, indent=1) + "\n").encode(), preset=9))
        pytest.skip("snapshot regenerated")
    want = json.loads(lzma.decompress(SNAPSHOT.read_bytes()))
    assert sorted(got) == sorted(want)
    for case in want:
        assert json.dumps(got[case], indent=1) == json.dumps(want[case], indent=1), case

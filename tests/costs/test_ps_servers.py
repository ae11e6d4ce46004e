"""costs.ps.ps_servers: the PS section a PS plan is priced on, or a one-line SimdlError."""

from __future__ import annotations

import pytest

from simdl.cluster import allocate
from simdl.costs.ps import ps_servers, ps_transfer_extras
from simdl.errors import SimdlError


def test_a_cluster_with_servers_gives_its_section():
    cluster = allocate("a10g-ps", 4)
    assert ps_servers(cluster) is cluster.spec.ps_servers
    assert ps_servers(cluster).count >= 1


def test_a_cluster_without_servers_is_one_line_naming_it():
    cluster = allocate("a100-80gb-nvlink", 4)
    with pytest.raises(SimdlError) as e:
        ps_servers(cluster)
    message = str(e.value)
    assert "'a100-80gb-nvlink'" in message and "accepted:" in message and "\n" not in message
    with pytest.raises(SimdlError):  # the PS costs reach it through the accessor
        ps_transfer_extras(cluster, None)

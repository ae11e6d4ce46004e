"""simdl.cluster.shapes reads every shipped preset's shape as its full load does."""

from simdl.cluster import allocate
from simdl.cluster.shapes import preset_shapes
from simdl.cluster.spec import cluster_names, load_cluster
from simdl.errors import SimdlError


def test_every_shipped_preset_has_the_shape_of_its_full_load():
    shapes = {s.name: s for s in preset_shapes()}
    loaded = 0
    for name in cluster_names():
        try:
            spec = load_cluster(name)
        except SimdlError:
            assert name not in shapes
            continue
        loaded += 1
        s = shapes[name]
        assert (s.gpu_name, s.inter_node, s.max_nodes, s.ps_servers) == (
            spec.gpu.name,
            spec.inter_node is not None,
            spec.max_nodes,
            spec.ps_servers is not None,
        ), name
    assert loaded == len(shapes) > 10


def test_the_single_node_error_names_multi_node_presets_of_the_same_gpu_first():
    try:
        allocate("a100-80gb-nvlink", 64)
    except SimdlError as e:
        text = str(e)
    assert "use a multi-node preset such as 'dgx-a100'" in text

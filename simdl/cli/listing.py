"""``simdl models`` and ``simdl clusters``: what is installed."""

from __future__ import annotations

import argparse

from ..errors import SimdlError


def _cmd_models(a: argparse.Namespace) -> int:
    from ..workload.library import shipped_tables
    from ..workload.zoo import MODELS

    shipped: dict[str, list[str]] = {}
    for model, dataset in shipped_tables():
        shipped.setdefault(model, []).append(dataset)
    width = max(len(m) for m in MODELS)
    print(f"{'model':<{width}}  shipped tables")
    for m in MODELS:
        print(f"{m:<{width}}  {', '.join(sorted(shipped.get(m, []))) or '-'}")
    print("Any other torchvision classifier or package.module:factory is traced on demand (needs torch).")
    return 0


def _cmd_clusters(a: argparse.Namespace) -> int:
    from ..cluster import cluster_names, load_cluster
    from ..report.text import format_cluster, format_cluster_list

    if a.action == "show":
        if not a.name:
            raise SimdlError("simdl clusters show: which cluster? accepted: " + ", ".join(cluster_names()))
        print(format_cluster(load_cluster(a.name)))
        return 0
    if a.action not in (None, "list"):
        raise SimdlError(f"simdl clusters: unknown action {a.action!r}; accepted: list, show NAME")
    if a.name is not None:
        raise SimdlError(f"simdl clusters list: takes no name (got {a.name!r}); accepted: simdl clusters show {a.name}")
    print(format_cluster_list([load_cluster(n) for n in cluster_names()]))
    return 0


def _cmd_schema(a: argparse.Namespace) -> int:
    from ..cluster.schema import schema_text
    from ..outpaths import check_output_file

    text = schema_text(a.kind)
    if a.output is None:
        print(text, end="")
    else:
        check_output_file(a.output, "-o").write_text(text)
    return 0


def add_listing_parsers(sub) -> None:
    m = sub.add_parser("models", help="list models and shipped workload tables")
    m.set_defaults(func=_cmd_models)
    c = sub.add_parser("clusters", help="list cluster presets, or `clusters show NAME`")
    c.add_argument("action", nargs="?", default=None, help="list | show")
    c.add_argument("name", nargs="?", default=None)
    c.set_defaults(func=_cmd_clusters)
    s = sub.add_parser("schema", help="print the JSON Schema of a data file: cluster, device or profile")
    s.add_argument("kind", help="cluster | device | profile")
    s.add_argument("-o", "--output", default=None, metavar="FILE", help="write it to FILE instead")
    s.set_defaults(func=_cmd_schema)

"""What a prediction can be asked for, from Python: model names, cluster presets, field docs.

``simdl models`` and ``simdl clusters list`` print the same lists. Nothing here imports torch.
"""

from __future__ import annotations

from functools import lru_cache


def list_models() -> list[str]:
    """The zoo names ``simdl.predict(model=...)`` takes, sorted.

    Any ``package.module:factory`` returning a ``torch.nn.Module`` is accepted too (traced on
    first use, needs torch); see :func:`shipped_tables` for the tables that need no torch.
    """
    from .workload.zoo import MODELS

    return sorted(MODELS)


def shipped_tables() -> dict[str, list[str]]:
    """Zoo model -> the datasets its workload table ships for (predicted without torch)."""
    from .workload.library import shipped_tables as pairs

    out: dict[str, list[str]] = {}
    for model, dataset in pairs():
        out.setdefault(model, []).append(dataset)
    return out


def list_clusters() -> list[str]:
    """The cluster preset names ``simdl.predict(cluster=...)`` takes, sorted (a YAML path works too)."""
    from .cluster import cluster_names

    return sorted(cluster_names())


@lru_cache(maxsize=None)
def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of a dataclass (``Result``, ``Staleness``), by field name.

    Read from the source: a string literal right after an annotated field is its docstring
    (the convention Sphinx and pdoc read; PEP 257's "attribute docstrings").
    """
    import ast
    import inspect

    node = ast.parse(inspect.getsource(cls)).body[0]
    body = node.body if isinstance(node, ast.ClassDef) else []
    docs: dict[str, str] = {}
    for node, after in zip(body, body[1:]):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[node.target.id] = inspect.cleandoc(after.value.value)
    return docs

"""Small helpers with no better home."""

from __future__ import annotations

from collections.abc import Mapping


def fixup_module_metadata(module_name: str, namespace: Mapping[str, object]) -> None:
    """Make re-exported names say where users import them from.

    ``letagents_trio.ProcessHolder`` is defined in ``letagents_trio._holder``;
    after this its ``__module__`` is ``letagents_trio``, so reprs, error messages
    and the docs show the public path (trio does the same in ``trio._util``).
    Only names defined in this package's private modules are touched.
    """
    for name, value in namespace.items():
        if name.startswith("_"):
            continue
        module = getattr(value, "__module__", None)
        if not isinstance(module, str) or not module.startswith("letagents_trio"):
            continue
        if not any(part.startswith("_") for part in module.split(".")[1:]):
            continue
        try:
            value.__module__ = module_name
        except (AttributeError, TypeError):
            continue

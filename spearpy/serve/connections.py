"""The name docs/serve.md gave embedders for the service's connection bounds,
which live in spearpy/web/connections.py now (`spearpy mcp serve --http`
uses them too, and mcp/ does not import serve/)."""

from spearpy.web.connections import connection_options

__all__ = ["connection_options"]

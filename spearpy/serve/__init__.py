"""`spearpy serve`: agents as a service (docs/serve.md).

    from spearpy.serve import ServeConfig, create_app
    app = create_app(ServeConfig(modules_dir="agents/", state_dir="state/"))
    # any ASGI server: uvicorn.run(app), hypercorn, ...

The app drives runs through the same `Host` API an embedder uses: it never
reaches into the tool loop. Names load on first use, so `import spearpy.serve`
costs nothing until the service is built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spearpy._lazy import lazy_names

if TYPE_CHECKING:
    from spearpy.serve.app import create_app
    from spearpy.serve.config import ServeConfig
    from spearpy.serve.server import BackgroundServer

_WHERE = {"create_app": "app", "ServeConfig": "config", "BackgroundServer": "server"}
__all__ = ["BackgroundServer", "ServeConfig", "create_app"]

__getattr__ = lazy_names(__name__, _WHERE)

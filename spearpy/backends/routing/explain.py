"""A routing decision spelled out, without building or asking any backend
(`spearpy routes explain`, and embedders checking a config)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from spearpy.backends.routing.table import SessionScan

if TYPE_CHECKING:
    from spearpy.backends.catalog import BackendCatalog
    from spearpy.backends.router import Router


def explain(router: Router, catalog: BackendCatalog, *, model: str | None,
            messages: Sequence[dict[str, Any]], backend: str = "",
            tools: bool = False) -> dict[str, Any]:
    """What the router would do with the first completion of a send that
    asks for `model` (None: the guest sets none) with `messages`, the
    `backend` param and tools offered or not."""
    table = router.table
    fallback_model = catalog.default_model(backend or catalog.default)
    hits = table.scan(messages, SessionScan())
    plan = router.plan(backend, model, fallback_model, messages, tools, SessionScan())
    match = plan.match
    routes = []
    # Routes are listed up to the one that decided: the last matching locked
    # route when locks decided (they come before order), else the first match.
    last = max((i for i, r in enumerate(table.routes) if r.name in match.locks), default=None)
    for index, route in enumerate(table.routes):
        why = table.why_not(index, backend, match.model, tools, hits)
        entry: dict[str, Any] = {"name": route.name, "matches": why is None, "lock": route.lock}
        if why is not None:
            entry["why_not"] = why
        else:
            if route.match.content:
                entry["evidence"] = table.content_evidence(index, messages)
            if match.locks and route.name not in match.locks:
                entry["overridden_by"] = match.locks[0]
        routes.append(entry)
        if index == last or (last is None and why is None):
            break
    models = {name: match.model_for(name, model) or catalog.default_model(name)
              for name in plan.order}
    return {
        "asked": {"model": model, "backend": backend or None, "tools": tools,
                  "messages": len(messages)},
        "alias": ({"model": match.alias, "backend": match.alias_spec.backend,
                   "to_model": match.alias_spec.model} if match.alias_spec else None),
        "matched_model": match.model, "routes": routes, "reason": match.reason,
        "route": match.route.name if plan.by_route and match.route else None,
        "policy": match.policy, "candidates": list(match.targets), "order": plan.order,
        "rejected": plan.rejected, "chosen": plan.order[0] if plan.order else None,
        "models": models, "locks": list(match.locks), "warnings": list(table.warnings),
        "config_notes": list(catalog.notes),
    }  # fmt: skip


def render(report: dict[str, Any]) -> str:
    """The report as the lines `spearpy routes explain` prints."""
    asked = report["asked"]
    lines = [f"asked:      model {asked['model'] or '(none: the backend default)'}, "
             f"backend param {asked['backend'] or '(none)'}, tools "
             f"{'yes' if asked['tools'] else 'no'}, {asked['messages']} message(s)"]
    alias = report["alias"]
    if alias:
        target = alias["backend"] + (f" model {alias['to_model']}" if alias["to_model"] else "")
        lines.append(f"alias:      {alias['model']} -> {target}")
    lines.append(f"model:      {report['matched_model'] or '(none)'} (what routes match)")
    for route in report["routes"]:
        if route["matches"]:
            evidence = f": {route['evidence']}" if route.get("evidence") else ""
            locked = " (locked)" if route["lock"] else ""
            over = (f", overridden by locked route {route['overridden_by']!r} (locks are "
                    "decided before order)") if route.get("overridden_by") else ""
            lines.append(f"route:      {route['name']} matches{locked}{evidence}{over}")
        else:
            lines.append(f"route:      {route['name']} does not match: {route['why_not']}")
    lines.append(f"decided by: {_decider(report)}")
    lines.append(f"candidates: {', '.join(report['candidates'])}")
    for rejected in report["rejected"]:
        lines.append(f"rejected:   {rejected['backend']}: {rejected['reason']}")
    order = [f"{name} (model {report['models'].get(name) or '?'})" for name in report["order"]]
    lines.append(f"order:      {' then '.join(order) if order else '(none usable)'}")
    lines.append(f"chosen:     {report['chosen'] or '(none)'}")
    lines += [f"warning:    {warning}" for warning in report["warnings"]]
    lines += [f"config:     {note}" for note in report.get("config_notes", ())]
    return "\n".join(lines)


def _decider(report: dict[str, Any]) -> str:
    if not report["route"]:
        return str(report["reason"])
    locks = report["locks"]
    if len(locks) > 1:
        return (f"locked routes {', '.join(map(repr, locks))} (the backends all of them "
                f"list), policy {report['policy']}")
    return f"{report['reason']} {report['route']!r}, policy {report['policy']}"

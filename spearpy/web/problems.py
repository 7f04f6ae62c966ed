"""A refusal or an error as an RFC 9457 problem body: type, title, status,
detail (`urn:spearpy:problem:<slug>`), scrubbed of secrets."""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any

from starlette.responses import Response

from spearpy.observe.redact import Redactor

PROBLEM_TYPE = "application/problem+json"


def problem_body(status: int, detail: str, slug: str | None = None,
                 **extra: Any) -> dict[str, Any]:
    return {"type": f"urn:spearpy:problem:{slug}" if slug else "about:blank",
            "title": HTTPStatus(status).phrase, "status": status, "detail": detail, **extra}


def problem_response(redactor: Redactor, status: int, detail: str, slug: str | None = None,
                     headers: dict[str, str] | None = None, **extra: Any) -> Response:
    # A detail may quote a request value or an upstream error: scrub it too.
    body = redactor.value(problem_body(status, detail, slug, **extra))
    return Response(json.dumps(body, ensure_ascii=False), status, headers=headers,
                    media_type=PROBLEM_TYPE)

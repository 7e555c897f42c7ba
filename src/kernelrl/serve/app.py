"""The HTTP face of the reward service (Starlette): routes, bearer-token auth, body limits, JSON errors.

POST /v1/evaluations             {"reference"|"task", "candidate", "policy"?, "name"?, "cache"?} -> 202 {"id", "cached"}
POST /v1/evaluations:batch       {"evaluations": [...]} or [...]                      -> 202 {"ids", "cached"}
GET  /v1/evaluations/{id}        -> {"id", "state", "verdict", ...}
GET  /healthz                    -> {"ok": true, "devices": [...]}   (open, even with a token set)
GET  /metrics                    -> Prometheus text
Every refusal is a 4xx with {"error": ONE LINE}.
"""
from __future__ import annotations

import hmac
import json
import logging

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

from kernelrl.serve.service import RequestError, Service, metrics_text

log = logging.getLogger(__name__)
OPEN_PATHS = ("/healthz",)  # liveness probes need no token; they learn only that the server is up, and its devices


def create_app(service: Service, token: str | None = None, max_body: int = 1_000_000) -> Starlette:
    """The ASGI app over `service`; with `token`, every request outside OPEN_PATHS must carry it as a bearer."""

    async def submit(request: Request):
        body = await _json_body(request, max_body)
        accepted = await run_in_threadpool(service.submit, body)
        return JSONResponse(accepted.to_dict(), status_code=202)

    async def submit_batch(request: Request):
        body = await _json_body(request, max_body)
        items = body.get("evaluations") if isinstance(body, dict) and set(body) == {"evaluations"} else body
        if not isinstance(items, list) or not items:
            raise RequestError(400, "a batch is a non-empty JSON list of evaluations, or {\"evaluations\": [...]}")
        accepted = await run_in_threadpool(service.submit_many, items)
        return JSONResponse({"ids": [a.id for a in accepted], "cached": [a.cached for a in accepted]},
                            status_code=202)

    async def get(request: Request):
        job = await run_in_threadpool(service.get, request.path_params["job_id"])
        return JSONResponse(job.to_dict())

    async def healthz(_: Request):
        return JSONResponse({"ok": True, "devices": list(service.devices)})

    async def metrics(_: Request):
        progress = await run_in_threadpool(service.progress)
        return PlainTextResponse(metrics_text(progress), media_type="text/plain; version=0.0.4")

    async def refused(request: Request, exc: RequestError):
        service.refused()
        log.info("%s %s refused (%d): %s", request.method, request.url.path, exc.status, exc)
        return JSONResponse({"error": str(exc)}, status_code=exc.status)

    async def not_found(request: Request, exc):
        service.refused()
        return JSONResponse({"error": f"no route {request.method} {request.url.path}; see the kernelrl serve docs"},
                            status_code=getattr(exc, "status_code", 404))

    routes = [
        Route("/v1/evaluations", submit, methods=["POST"]),
        Route("/v1/evaluations:batch", submit_batch, methods=["POST"]),
        Route("/v1/evaluations/{job_id}", get, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
    ]
    app = Starlette(routes=routes, exception_handlers={RequestError: refused, 404: not_found, 405: not_found})
    if token:
        app.add_middleware(BearerAuth, token=token, on_refused=service.refused)
    return app


class BearerAuth:
    """ASGI middleware: 401 unless `Authorization: Bearer TOKEN` matches (compared in constant time)."""

    def __init__(self, app, token: str, on_refused=lambda: None):
        self.app, self.expected, self.on_refused = app, f"Bearer {token}".encode(), on_refused

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            return await self.app(scope, receive, send)
        given = dict(scope["headers"]).get(b"authorization", b"")
        if hmac.compare_digest(given, self.expected):
            return await self.app(scope, receive, send)
        self.on_refused()
        why = "no Authorization header" if not given else "wrong token"
        response = JSONResponse({"error": f"{why}: send `Authorization: Bearer $KERNELRL_API_TOKEN`"},
                                status_code=401, headers={"WWW-Authenticate": "Bearer"})
        await response(scope, receive, send)


DRAIN_BYTES = 64 << 20  # an oversized body is read and dropped up to this much, so its client can read the 413


async def _drain(request: Request, size: int) -> None:
    """Read what is left of a refused body, up to `DRAIN_BYTES` in all (beyond that the connection closes)."""
    if size > DRAIN_BYTES:
        return
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > DRAIN_BYTES:
                return
    except ClientDisconnect:  # the client gave up sending: nobody reads the answer
        return


async def _json_body(request: Request, limit: int):
    """The request's JSON, refusing bodies over `limit` bytes without keeping more than `limit` of them.

    A refused body is still read (and dropped) up to `DRAIN_BYTES`: a server that answers and closes while the
    client is still sending leaves that client a broken pipe instead of the 413 and its reason."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        await _drain(request, int(declared))
        raise RequestError(413, f"body of {int(declared)} bytes is over this server's limit of {limit} bytes "
                                "(--max-body); send fewer evaluations per request")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            await _drain(request, size)
            raise RequestError(413, f"body is over this server's limit of {limit} bytes (--max-body); send fewer "
                                    "evaluations per request")
        chunks.append(chunk)
    try:
        return json.loads(b"".join(chunks))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise RequestError(400, f"the body is not valid JSON: {e}") from None

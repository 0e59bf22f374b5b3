"""Airlock and AsyncAirlock: one set of resource classes over a sync or an async transport.

Each resource method builds a `_Call` (method, URL, body, how to read the answer) and hands it to
the client's transport: the sync transport returns the decoded value, the async one a coroutine
of it. Every method names the api/openapi.yaml operationIds it implements with `@operation`;
TestClientsCoverEveryOperation (internal/httpapi/spec_clients_test.go) reads them.
"""

from __future__ import annotations

import json as jsonlib
import math
import os
import re
import time
from datetime import datetime, timezone
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Union
from urllib.parse import quote

import httpx

from ._env import host_of, session_env
from ._errors import AirlockError, WaitTimeout, error_for

__all__ = ["Airlock", "AsyncAirlock", "Session", "Action", "Page", "operation", "FINAL_STATUSES"]

DEFAULT_ADDR = "http://127.0.0.1:8701"
DEFAULT_SANDBOX_ADDR = "http://127.0.0.1:8700"
USER_AGENT = "airlock-python/0.1.0"

# An action in one of these states will not change again.
FINAL_STATUSES = frozenset({"denied", "expired", "executed", "failed"})

# The broker's answer to a gated call: 202, Location: /v1/actions/{id}.
_ACTION_LOCATION = re.compile(r"^/v1/actions/([A-Za-z0-9_-]+)$")


def operation(*operation_ids: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Marks the api/openapi.yaml operations a method implements (read by the contract test)."""

    def mark(f: Callable[..., Any]) -> Callable[..., Any]:
        f.operation_ids = operation_ids  # type: ignore[attr-defined]
        return f

    return mark


def _addr(a: str) -> str:
    a = a.strip()
    if "://" not in a:
        a = "http://" + a
    return a.rstrip("/")


def _time(t: Union[str, datetime, None]) -> Optional[str]:
    if t is None or isinstance(t, str):
        return t
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    return t.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def _params(**kw: Any) -> Dict[str, Any]:
    return {k: v for k, v in kw.items() if v is not None}


class _Call:
    __slots__ = ("method", "url", "params", "json", "content", "headers", "timeout", "decode")

    def __init__(self, method: str, url: str, *, decode: Callable[[httpx.Response], Any], params: Any = None,
                 json: Any = None, content: Any = None, headers: Optional[Dict[str, str]] = None,
                 timeout: Optional[float] = None):
        self.method, self.url, self.decode = method, url, decode
        self.params, self.json, self.content = params, json, content
        self.headers, self.timeout = headers or {}, timeout

    def kwargs(self) -> Dict[str, Any]:
        kw: Dict[str, Any] = {"params": self.params, "headers": self.headers}
        if self.json is not None:
            kw["json"] = self.json
        if self.content is not None:
            kw["content"] = self.content
        if self.timeout is not None:
            kw["timeout"] = self.timeout
        return kw


def _raise_for(r: httpx.Response) -> None:
    if r.status_code >= 400:
        raise error_for(r.status_code, r.headers, r.content)


def _json(r: httpx.Response) -> Any:
    _raise_for(r)
    if r.status_code == 204 or not r.content:
        return None
    return r.json()


def _text(r: httpx.Response) -> str:
    _raise_for(r)
    return r.text


def _bytes(r: httpx.Response) -> bytes:
    _raise_for(r)
    return r.content


def _items(r: httpx.Response) -> List[Any]:
    return list((_json(r) or {}).get("items") or [])


class _SyncTransport:
    is_async = False

    def __init__(self, http: Optional[httpx.Client], timeout: float):
        self.owned = http is None
        self.http = http if http is not None else httpx.Client(timeout=timeout)

    def run(self, call: _Call) -> Any:
        return call.decode(self.http.request(call.method, call.url, **call.kwargs()))

    def lines(self, call: _Call, parse: Callable[[str], Any]) -> Iterable[Any]:
        kw = call.kwargs()
        kw["timeout"] = httpx.Timeout(30.0, read=None)
        with self.http.stream(call.method, call.url, **kw) as r:
            if r.status_code >= 400:
                r.read()
                _raise_for(r)
            for line in r.iter_lines():
                if line:
                    yield parse(line)

    def close(self) -> None:
        if self.owned:
            self.http.close()


class _AsyncTransport:
    is_async = True

    def __init__(self, http: Optional[httpx.AsyncClient], timeout: float):
        self.owned = http is None
        self.http = http if http is not None else httpx.AsyncClient(timeout=timeout)

    async def run(self, call: _Call) -> Any:
        return call.decode(await self.http.request(call.method, call.url, **call.kwargs()))

    async def lines(self, call: _Call, parse: Callable[[str], Any]):  # -> AsyncIterator[Any]
        kw = call.kwargs()
        kw["timeout"] = httpx.Timeout(30.0, read=None)
        async with self.http.stream(call.method, call.url, **kw) as r:
            if r.status_code >= 400:
                await r.aread()
                _raise_for(r)
            async for line in r.aiter_lines():
                if line:
                    yield parse(line)

    async def aclose(self) -> None:
        if self.owned:
            await self.http.aclose()


class Page:
    """A page of sessions: `items`, and `next` (the cursor of the following page, None at the end)."""

    def __init__(self, items: List["Session"], next: Optional[str]):
        self.items, self.next = items, next

    def __iter__(self):
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)


class Session:
    """A session answer (`data`, a dict as api/openapi.yaml's Session) and the sandbox's side of it.

    `token` is only known from the creation answer (or given to `Airlock.attach`).
    """

    def __init__(self, data: Dict[str, Any], client: "_Base", token: Optional[str] = None):
        self.data = data
        self._c = client
        self.token: Optional[str] = data.get("token") or token

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)

    @property
    def id(self) -> str:
        return self.data["id"]

    @property
    def status(self) -> Optional[str]:
        return self.data.get("status")

    def __repr__(self) -> str:
        return f"<Session {self.data.get('id')} {self.status}>"

    @operation("proxyRootGet", "proxyRootHead", "proxyRootOptions", "proxyRootPost", "proxyRootPut",
               "proxyRootPatch", "proxyRootDelete", "proxyGet", "proxyHead", "proxyOptions", "proxyPost",
               "proxyPut", "proxyPatch", "proxyDelete")
    def request(self, upstream: str, method: str, path: str = "", *, json: Any = None, content: Any = None,
                params: Any = None, headers: Optional[Mapping[str, str]] = None, wait: Optional[int] = None,
                timeout: Optional[float] = None) -> Any:
        """The sandbox's call through the REST door (`/v1/proxy/{upstream}{path}` on the sandbox plane).

        Returns the upstream's `httpx.Response` (whatever its status), an `Action` when the call
        waits for a human (202), and raises the problem's class when the broker refused it (the
        answer carries X-Airlock-Code). `wait` (seconds, at most 60) sends `Prefer: wait=N`: an
        approval in time answers with the executed upstream response itself.
        """
        if not self.token:
            raise AirlockError("the session token is unknown (it is shown only at creation; give it to attach())")
        if path and not path.startswith("/"):
            path = "/" + path
        h = dict(headers or {})
        h["Authorization"] = "Bearer " + self.token
        if wait:
            h["Prefer"] = f"wait={int(wait)}"
            timeout = max(timeout or 0.0, float(wait) + 30.0)
        url = f"{self._c.sandbox_addr}/v1/proxy/{quote(upstream, safe='')}{path}"
        return self._c._t.run(_Call(method.upper(), url, params=params, json=json, content=content, headers=h,
                                    timeout=timeout, decode=self._answer))

    def _answer(self, r: httpx.Response) -> Any:
        if "x-airlock-code" in r.headers:
            raise error_for(r.status_code, r.headers, r.content)
        m = _ACTION_LOCATION.match(r.headers.get("location", ""))
        # The broker's pending answer carries X-Airlock-Action-Id; an upstream's own 202 never does.
        if r.status_code == 202 and m and r.headers.get("x-airlock-action-id") == m.group(1):
            try:
                data = r.json()
            except ValueError:
                data = None
            if isinstance(data, dict) and data.get("id") == m.group(1):
                return Action(data, self)
        return r

    def env(self, ca_file: str, *, token: Optional[str] = None) -> Dict[str, str]:
        """What `broker session env ID --format env --ca-path CA_FILE` prints, as a dict (insertion order kept).

        `ca_file` is where the sandbox finds the session CA (write `ca_pem()` there).
        """
        return session_env(self.data, ca_file=ca_file, token=token or self.token, no_proxy=[host_of(self._c.addr)])

    def ca_pem(self) -> Any:
        """The session CA certificate, PEM (GET /v1/sessions/{id}/ca.pem)."""
        return self._c.sessions.ca_pem(self.id)

    @operation("mcpPost", "mcpGet", "mcpDelete")
    def mcp_server(self, upstream: str) -> Dict[str, Any]:
        """What a stock MCP client needs to call the MCP door (`/v1/mcp/{upstream}`) for an upstream of type mcp.

        `{"url": <the Streamable HTTP endpoint>, "headers": {"Authorization": "Bearer <session token>"}}`:
        the shape of an `mcpServers` entry; the client speaks MCP itself (see docs/mcp.md).
        """
        if not self.token:
            raise AirlockError("the session token is unknown (it is shown only at creation; give it to attach())")
        return {"url": f"{self._c.sandbox_addr}/v1/mcp/{quote(upstream, safe='')}",
                "headers": {"Authorization": "Bearer " + self.token}}

    @operation("awsRootGet", "awsRootHead", "awsRootOptions", "awsRootPost", "awsRootPut", "awsRootPatch",
               "awsRootDelete", "awsGet", "awsHead", "awsOptions", "awsPost", "awsPut", "awsPatch", "awsDelete")
    def aws_env(self, upstream: str, region: str = "us-east-1") -> Dict[str, str]:
        """The environment with which the stock AWS SDK or CLI calls the AWS door (`/v1/aws/{upstream}`).

        The AWS SDK signs each request (SigV4) with the session's `aws_credentials`; the broker checks
        it and re-signs with the real credentials. Only in the creation answer of a session with a grant
        on an aws upstream.
        """
        creds = self.data.get("aws_credentials")
        if not creds:
            raise AirlockError("the session answer has no aws_credentials (only the creation answer of a session with an aws grant)")
        return {"AWS_ENDPOINT_URL": f"{self._c.sandbox_addr}/v1/aws/{quote(upstream, safe='')}",
                "AWS_ACCESS_KEY_ID": creds["access_key_id"], "AWS_SECRET_ACCESS_KEY": creds["secret_access_key"],
                "AWS_REGION": region, "AWS_DEFAULT_REGION": region}

    def revoke(self) -> Any:
        """Kills the session (sessions.revoke)."""
        return self._c.sessions.revoke(self.id)


class Action:
    """A gated call waiting for, or past, a human decision (`data` as api/openapi.yaml's ActionStatus)."""

    def __init__(self, data: Dict[str, Any], session: Session):
        self.data = data
        self.session = session

    @property
    def id(self) -> str:
        return self.data["id"]

    @property
    def status(self) -> str:
        return self.data["status"]

    @property
    def done(self) -> bool:
        return self.status in FINAL_STATUSES

    def __repr__(self) -> str:
        return f"<Action {self.id} {self.status}>"

    def _call(self, path: str, decode: Callable[[httpx.Response], Any], wait: Optional[int] = None) -> _Call:
        s = self.session
        h = {"Authorization": "Bearer " + (s.token or "")}
        timeout = None
        if wait:
            h["Prefer"] = f"wait={wait}"
            timeout = float(wait) + 30.0
        return _Call("GET", f"{s._c.sandbox_addr}/v1/actions/{quote(self.id, safe='')}{path}", headers=h,
                     timeout=timeout, decode=decode)

    def _update(self, r: httpx.Response) -> "Action":
        self.data = _json(r)
        return self

    @operation("getAction")
    def refresh(self, wait: Optional[int] = None) -> Any:
        """Reads the action's state again; `wait` (≤ 60 s) long-polls with `Prefer: wait=N`."""
        return self.session._c._t.run(self._call("", self._update, wait))

    def wait(self, timeout: float = 60.0) -> Any:
        """Waits (with `Prefer: wait`, waking on the decision) until the action is final; returns it.

        Final: executed, denied, expired or failed. Raises WaitTimeout when `timeout` seconds pass first.
        """
        if self.session._c._t.is_async:
            return self._wait_async(timeout)
        deadline = time.monotonic() + timeout
        while not self.done:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WaitTimeout(self)
            self.refresh(wait=_wait_seconds(left))
        return self

    async def _wait_async(self, timeout: float) -> "Action":
        deadline = time.monotonic() + timeout
        while not self.done:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WaitTimeout(self)
            await self.refresh(wait=_wait_seconds(left))
        return self

    @operation("getActionResult")
    def result(self) -> Any:
        """The executed upstream answer (`httpx.Response`); a broker refusal raises (409 Conflict: not executed yet)."""
        return self.session._c._t.run(self._call("/result", self.session._answer))


def _wait_seconds(left: float) -> int:
    return max(1, min(60, int(math.ceil(left))))


class _Resource:
    def __init__(self, client: "_Base"):
        self._c = client


class Sessions(_Resource):
    @operation("createSession")
    def create(self, request: Mapping[str, Any]) -> Any:
        """Creates a session from the JSON shape of POST /v1/sessions (a dict); the answer holds its token."""
        return self._c._control("POST", "/v1/sessions", json=dict(request), decode=self._c._session)

    @operation("listSessions")
    def list(self, cursor: Optional[str] = None, limit: Optional[int] = None) -> Any:
        """A page of sessions in creation order (`Page.items`, `Page.next`)."""
        def page(r: httpx.Response) -> Page:
            d = _json(r) or {}
            return Page([Session(s, self._c) for s in d.get("items") or []], d.get("next") or None)
        return self._c._control("GET", "/v1/sessions", params=_params(cursor=cursor, limit=limit), decode=page)

    @operation("getSession")
    def get(self, session_id: str, token: Optional[str] = None) -> Any:
        """A session (its token is not in the answer; `token` attaches a known one)."""
        return self._c._control("GET", "/v1/sessions/" + quote(session_id, safe=""),
                                decode=lambda r: Session(_json(r), self._c, token))

    @operation("killSession")
    def revoke(self, session_id: str) -> Any:
        """Kills a session at once: its token dies, its grants are revoked, in-flight calls cancelled."""
        return self._c._control("DELETE", "/v1/sessions/" + quote(session_id, safe=""), decode=self._c._session)

    @operation("getSessionCA")
    def ca_pem(self, session_id: str) -> Any:
        """The PEM of the session's proxy CA certificate."""
        return self._c._control("GET", "/v1/sessions/" + quote(session_id, safe="") + "/ca.pem", decode=_text)


class Grants(_Resource):
    @operation("addGrant")
    def add(self, session_id: str, grant: Mapping[str, Any]) -> Any:
        """Adds a grant (the JSON shape of GrantRequest) to an active session; returns the Grant dict."""
        return self._c._control("POST", "/v1/sessions/" + quote(session_id, safe="") + "/grants", json=dict(grant),
                                decode=_json)

    @operation("getGrant")
    def get(self, grant_id: str) -> Any:
        return self._c._control("GET", "/v1/grants/" + quote(grant_id, safe=""), decode=_json)

    @operation("revokeGrant")
    def revoke(self, grant_id: str) -> Any:
        return self._c._control("DELETE", "/v1/grants/" + quote(grant_id, safe=""), decode=_json)


class Tokens(_Resource):
    @operation("createToken")
    def create(self, role: str, name: str, ttl: Union[str, float, None] = None) -> Any:
        """Creates an API token (admin); its secret `token` is in this answer only."""
        return self._c._control("POST", "/v1/tokens", json=_params(role=role, name=name, ttl=ttl), decode=_json)

    @operation("listTokens")
    def list(self) -> Any:
        return self._c._control("GET", "/v1/tokens", decode=_items)

    @operation("revokeToken")
    def revoke(self, token_id: str) -> Any:
        return self._c._control("DELETE", "/v1/tokens/" + quote(token_id, safe=""), decode=_json)


class Approvals(_Resource):
    @operation("listApprovals")
    def list(self, status: Optional[str] = None, limit: Optional[int] = None) -> Any:
        """Actions, newest first (reviewer or admin), each a dict as api/openapi.yaml's Action."""
        return self._c._control("GET", "/v1/approvals", params=_params(status=status, limit=limit), decode=_items)

    @operation("getApproval")
    def get(self, action_id: str) -> Any:
        return self._c._control("GET", "/v1/approvals/" + quote(action_id, safe=""), decode=_json)

    @operation("approveAction")
    def approve(self, action_id: str, comment: Optional[str] = None) -> Any:
        return self._c._control("POST", "/v1/approvals/" + quote(action_id, safe="") + "/approve",
                                json=_params(comment=comment), decode=_json)

    @operation("denyAction")
    def deny(self, action_id: str, comment: Optional[str] = None) -> Any:
        return self._c._control("POST", "/v1/approvals/" + quote(action_id, safe="") + "/deny",
                                json=_params(comment=comment), decode=_json)


class Killswitch(_Resource):
    @operation("getKillswitch")
    def status(self) -> Any:
        return self._c._control("GET", "/v1/killswitch", decode=_json)

    @operation("engageKillswitch")
    def engage(self, reason: Optional[str] = None) -> Any:
        """Every sandbox call is refused (503 killswitch_engaged) until an admin releases it."""
        return self._c._control("POST", "/v1/killswitch", json=_params(reason=reason), decode=_json)

    @operation("releaseKillswitch")
    def release(self) -> Any:
        return self._c._control("DELETE", "/v1/killswitch", decode=_json)


class Audit(_Resource):
    @operation("exportAudit")
    def export(self, *, format: str = "jsonl", since: Union[str, datetime, None] = None,
               until: Union[str, datetime, None] = None, session_id: Optional[str] = None,
               task_id: Optional[str] = None, grant_id: Optional[str] = None, type: Optional[str] = None,
               from_seq: Optional[int] = None) -> Any:
        """Streams the audit log: an iterator (async iterator for AsyncAirlock) of records.

        jsonl and ocsf yield one dict per record; csv yields the lines (the header first).
        """
        params = _params(format=format, since=_time(since), until=_time(until), session_id=session_id,
                         task_id=task_id, grant_id=grant_id, type=type, from_seq=from_seq)
        call = self._c._call("GET", "/v1/audit", params=params, decode=_json)
        return self._c._t.lines(call, (lambda line: line) if format == "csv" else jsonlib.loads)

    @operation("pruneAudit")
    def prune(self, before: Union[str, datetime]) -> Any:
        return self._c._control("DELETE", "/v1/audit", params={"before": _time(before)}, decode=_json)

    @operation("verifyAudit")
    def verify(self) -> Any:
        return self._c._control("GET", "/v1/audit/verify", decode=_json)

    @operation("listCheckpoints")
    def checkpoints(self) -> Any:
        return self._c._control("GET", "/v1/audit/checkpoints", decode=_items)

    @operation("getAuditPublicKey")
    def public_key(self) -> Any:
        return self._c._control("GET", "/v1/audit/public-key", decode=_json)


def _readiness(r: httpx.Response) -> Any:
    if r.status_code == 503 and "x-airlock-code" not in r.headers:
        return r.json()
    return _json(r)


class _Base:
    def __init__(self, addr: Optional[str], token: Optional[str], sandbox_addr: Optional[str], transport: Any):
        env = os.environ
        self.addr = _addr(addr or env.get("AIRLOCK_ADDR") or DEFAULT_ADDR)
        self.token = token if token is not None else env.get("AIRLOCK_TOKEN", "")
        self.sandbox_addr = _addr(sandbox_addr or env.get("AIRLOCK_SANDBOX_ADDR") or DEFAULT_SANDBOX_ADDR)
        self._t = transport
        self.sessions = Sessions(self)
        self.grants = Grants(self)
        self.tokens = Tokens(self)
        self.approvals = Approvals(self)
        self.killswitch = Killswitch(self)
        self.audit = Audit(self)

    def _call(self, method: str, path: str, *, decode: Callable[[httpx.Response], Any], **kw: Any) -> _Call:
        h = {"User-Agent": USER_AGENT}
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        return _Call(method, self.addr + path, headers=h, decode=decode, **kw)

    def _control(self, method: str, path: str, *, decode: Callable[[httpx.Response], Any], **kw: Any) -> Any:
        return self._t.run(self._call(method, path, decode=decode, **kw))

    def _session(self, r: httpx.Response) -> Session:
        return Session(_json(r), self)

    def attach(self, token: str, session_id: Optional[str] = None) -> Session:
        """A Session for a sandbox that holds only its token (for `request`; `env` needs a session answer)."""
        return Session({"id": session_id or "", "token": token}, self)

    @operation("getHealth")
    def health(self, plane: str = "control") -> Any:
        """GET /healthz on the control plane, or the sandbox plane with plane="sandbox"."""
        base = self.sandbox_addr if plane == "sandbox" else self.addr
        return self._t.run(_Call("GET", base + "/healthz", decode=_json, headers={"User-Agent": USER_AGENT}))

    @operation("getReadiness")
    def ready(self) -> Any:
        """GET /readyz: {"status": "ready"|"not_ready", "checks": {...}} (a 503 is returned, not raised)."""
        return self._control("GET", "/readyz", decode=_readiness)

    @operation("getMetrics")
    def metrics(self) -> Any:
        """The Prometheus text of /metrics."""
        return self._control("GET", "/metrics", decode=_text)

    @operation("getProfile")
    def profile(self, path: str, **params: Any) -> Any:
        """Go's profiler (`debug: {pprof: true}`, admin): e.g. profile("heap"), profile("profile", seconds=5)."""
        return self._control("GET", "/debug/pprof/" + path.lstrip("/"), params=params or None, decode=_bytes)


class Airlock(_Base):
    """The control plane's client (sync), and the sandbox plane's for `Session.request`.

    Defaults: `addr` from AIRLOCK_ADDR (else http://127.0.0.1:8701), `token` from AIRLOCK_TOKEN,
    `sandbox_addr` from AIRLOCK_SANDBOX_ADDR (else http://127.0.0.1:8700). `http` is an
    `httpx.Client` of yours (its timeouts, proxies, TLS settings); otherwise one is made, with `timeout`.
    """

    def __init__(self, addr: Optional[str] = None, token: Optional[str] = None, *, sandbox_addr: Optional[str] = None,
                 http: Optional[httpx.Client] = None, timeout: float = 30.0):
        super().__init__(addr, token, sandbox_addr, _SyncTransport(http, timeout))

    def close(self) -> None:
        """Closes the httpx.Client this client made (never one you gave it)."""
        self._t.close()

    def __enter__(self) -> "Airlock":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class AsyncAirlock(_Base):
    """Airlock for asyncio: every method that does I/O returns an awaitable; `audit.export` an async iterator."""

    def __init__(self, addr: Optional[str] = None, token: Optional[str] = None, *, sandbox_addr: Optional[str] = None,
                 http: Optional[httpx.AsyncClient] = None, timeout: float = 30.0):
        super().__init__(addr, token, sandbox_addr, _AsyncTransport(http, timeout))

    async def aclose(self) -> None:
        await self._t.aclose()

    async def __aenter__(self) -> "AsyncAirlock":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

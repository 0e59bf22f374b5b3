"""Typed errors: one class per problem code of api/openapi.yaml's Problem schema."""

from __future__ import annotations

import json
from typing import Any, Dict, Mapping, Optional, Type

__all__ = ["AirlockError", "APIError", "WaitTimeout", "NoProxy", "error_for"]


class AirlockError(Exception):
    """Every error this SDK raises."""


class NoProxy(AirlockError):
    """The session has no proxy door (proxy_listen was off when it was created, or its address is unknown)."""


class WaitTimeout(AirlockError):
    """An action was still undecided (or executing) when `Action.wait` gave up; `.action` is its last state."""

    def __init__(self, action: Any):
        super().__init__(f"action {action.id} still {action.status}")
        self.action = action


class APIError(AirlockError):
    """An error the broker itself answered (RFC 9457 problem, its code also in X-Airlock-Code).

    `code` is None when the answer carried no problem (a proxy or load balancer in between).
    """

    CODE: Optional[str] = None

    def __init__(self, status: int, code: Optional[str], detail: str = "", request_id: Optional[str] = None,
                 field: Optional[str] = None, *, param: Optional[str] = None, constraint: Optional[str] = None,
                 problem: Optional[Dict[str, Any]] = None, headers: Optional[Mapping[str, str]] = None):
        super().__init__(f"{status} {code or 'http_error'}: {detail}")
        self.status = status
        self.code = code
        self.detail = detail
        self.request_id = request_id
        self.field = field
        self.param = param
        self.constraint = constraint
        self.problem = problem or {}
        self.headers = dict(headers or {})


class InvalidToken(APIError):
    CODE = "invalid_token"


class SessionExpired(APIError):
    CODE = "session_expired"


class SessionRevoked(APIError):
    CODE = "session_revoked"


class KillswitchEngaged(APIError):
    CODE = "killswitch_engaged"


class BrokerUnavailable(APIError):
    CODE = "broker_unavailable"


class NoMatchingGrant(APIError):
    CODE = "no_matching_grant"


class ConstraintViolated(APIError):
    CODE = "constraint_violated"


class GrantExpired(APIError):
    CODE = "grant_expired"


class GrantRevoked(APIError):
    CODE = "grant_revoked"


class GrantExhausted(APIError):
    CODE = "grant_exhausted"


class BudgetExceeded(APIError):
    CODE = "budget_exceeded"


class ApprovalDenied(APIError):
    CODE = "approval_denied"


class ApprovalExpired(APIError):
    CODE = "approval_expired"


class IsolationTooWeak(APIError):
    CODE = "isolation_too_weak"


class BadRequest(APIError):
    CODE = "bad_request"


class Forbidden(APIError):
    CODE = "forbidden"


class NotFound(APIError):
    CODE = "not_found"


class Conflict(APIError):
    CODE = "conflict"


class CredentialUnavailable(APIError):
    CODE = "credential_unavailable"


class AuditUnavailable(APIError):
    CODE = "audit_unavailable"


class UpstreamError(APIError):
    CODE = "upstream_error"


class UpstreamTimeout(APIError):
    CODE = "upstream_timeout"


class RateLimited(APIError):
    """`retry_after` is the Retry-After header in seconds (None when absent)."""

    CODE = "rate_limited"

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        ra = self.headers.get("retry-after") or self.headers.get("Retry-After")
        try:
            self.retry_after: Optional[float] = float(ra) if ra is not None else None
        except ValueError:
            self.retry_after = None


class TooManyPending(APIError):
    CODE = "too_many_pending"


class Internal(APIError):
    CODE = "internal"


class EgressDenied(APIError):
    CODE = "egress_denied"


class UsageUnavailable(APIError):
    CODE = "usage_unavailable"


class ToolChanged(APIError):
    CODE = "tool_changed"


class ServerRequestBlocked(APIError):
    CODE = "server_request_blocked"


BY_CODE: Dict[str, Type[APIError]] = {c.CODE: c for c in APIError.__subclasses__() if c.CODE}


def error_for(status: int, headers: Mapping[str, str], body: bytes) -> APIError:
    """The typed error of a broker answer: its class from X-Airlock-Code, else the problem's code."""
    problem: Dict[str, Any] = {}
    try:
        parsed = json.loads(body.decode("utf-8")) if body else {}
        if isinstance(parsed, dict):
            problem = parsed
    except (ValueError, UnicodeDecodeError):
        pass
    lower = {k.lower(): v for k, v in headers.items()}
    code = lower.get("x-airlock-code") or problem.get("code") or None
    detail = problem.get("detail") or ("" if problem else body.decode("utf-8", "replace").strip()[:500])
    cls = BY_CODE.get(code or "", APIError)
    return cls(status, code, detail, problem.get("request_id"), problem.get("field"),
               param=problem.get("param"), constraint=problem.get("constraint"), problem=problem, headers=lower)

__all__ += [c.__name__ for c in BY_CODE.values()]

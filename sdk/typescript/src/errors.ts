// Typed errors: one class per problem code of api/openapi.yaml's Problem schema.

/** Every error this SDK throws. */
export class AirlockError extends Error {
  override name = "AirlockError";
}

/** The session has no proxy door (proxy_listen was off when it was created, or its address is unknown). */
export class NoProxy extends AirlockError {
  override name = "NoProxy";
}

/** An action was still undecided (or executing) when `Action.wait` gave up; `action` is its last state. */
export class WaitTimeout extends AirlockError {
  override name = "WaitTimeout";
  constructor(readonly action: { id: string; status: string }) {
    super(`action ${action.id} still ${action.status}`);
  }
}

/** An RFC 9457 problem document. */
export interface Problem {
  type?: string;
  title?: string;
  status?: number;
  detail?: string;
  code?: string;
  request_id?: string;
  field?: string;
  param?: string;
  constraint?: string;
  [key: string]: unknown;
}

/**
 * An error the broker itself answered (its code also in `X-Airlock-Code`). `code` is undefined
 * when the answer carried no problem (a proxy or load balancer in between).
 */
export class APIError extends AirlockError {
  static readonly code: string | undefined = undefined;
  override name = "APIError";
  readonly detail: string;
  readonly requestId?: string;
  readonly field?: string;
  readonly param?: string;
  readonly constraint?: string;
  constructor(
    readonly status: number,
    readonly code: string | undefined,
    readonly problem: Problem,
    readonly headers: Headers,
    detail?: string,
  ) {
    super(`${status} ${code ?? "http_error"}: ${detail ?? problem.detail ?? ""}`);
    this.name = new.target.name;
    this.detail = detail ?? problem.detail ?? "";
    this.requestId = problem.request_id;
    this.field = problem.field;
    this.param = problem.param;
    this.constraint = problem.constraint;
  }
}

export class InvalidToken extends APIError {
  static override readonly code = "invalid_token";
}
export class SessionExpired extends APIError {
  static override readonly code = "session_expired";
}
export class SessionRevoked extends APIError {
  static override readonly code = "session_revoked";
}
export class KillswitchEngaged extends APIError {
  static override readonly code = "killswitch_engaged";
}
export class BrokerUnavailable extends APIError {
  static override readonly code = "broker_unavailable";
}
export class NoMatchingGrant extends APIError {
  static override readonly code = "no_matching_grant";
}
export class ConstraintViolated extends APIError {
  static override readonly code = "constraint_violated";
}
export class GrantExpired extends APIError {
  static override readonly code = "grant_expired";
}
export class GrantRevoked extends APIError {
  static override readonly code = "grant_revoked";
}
export class GrantExhausted extends APIError {
  static override readonly code = "grant_exhausted";
}
export class BudgetExceeded extends APIError {
  static override readonly code = "budget_exceeded";
}
export class ApprovalDenied extends APIError {
  static override readonly code = "approval_denied";
}
export class ApprovalExpired extends APIError {
  static override readonly code = "approval_expired";
}
export class IsolationTooWeak extends APIError {
  static override readonly code = "isolation_too_weak";
}
export class BadRequest extends APIError {
  static override readonly code = "bad_request";
}
export class Forbidden extends APIError {
  static override readonly code = "forbidden";
}
export class NotFound extends APIError {
  static override readonly code = "not_found";
}
export class Conflict extends APIError {
  static override readonly code = "conflict";
}
export class CredentialUnavailable extends APIError {
  static override readonly code = "credential_unavailable";
}
export class AuditUnavailable extends APIError {
  static override readonly code = "audit_unavailable";
}
export class UpstreamError extends APIError {
  static override readonly code = "upstream_error";
}
export class UpstreamTimeout extends APIError {
  static override readonly code = "upstream_timeout";
}
/** `retryAfter` is the Retry-After header in seconds (undefined when absent). */
export class RateLimited extends APIError {
  static override readonly code = "rate_limited";
  get retryAfter(): number | undefined {
    const v = this.headers.get("retry-after");
    const n = v === null ? NaN : Number(v);
    return Number.isFinite(n) ? n : undefined;
  }
}
export class TooManyPending extends APIError {
  static override readonly code = "too_many_pending";
}
export class Internal extends APIError {
  static override readonly code = "internal";
}
export class EgressDenied extends APIError {
  static override readonly code = "egress_denied";
}
export class UsageUnavailable extends APIError {
  static override readonly code = "usage_unavailable";
}
export class ToolChanged extends APIError {
  static override readonly code = "tool_changed";
}
export class ServerRequestBlocked extends APIError {
  static override readonly code = "server_request_blocked";
}

type ErrorClass = new (status: number, code: string | undefined, problem: Problem, headers: Headers, detail?: string) => APIError;

/** The error class of each problem code. */
export const BY_CODE: Readonly<Record<string, ErrorClass>> = Object.freeze(
  Object.fromEntries(
    [
      InvalidToken, SessionExpired, SessionRevoked, KillswitchEngaged, BrokerUnavailable, NoMatchingGrant,
      ConstraintViolated, GrantExpired, GrantRevoked, GrantExhausted, BudgetExceeded, ApprovalDenied,
      ApprovalExpired, IsolationTooWeak, BadRequest, Forbidden, NotFound, Conflict, CredentialUnavailable,
      AuditUnavailable, UpstreamError, UpstreamTimeout, RateLimited, TooManyPending, Internal, EgressDenied,
      UsageUnavailable, ToolChanged, ServerRequestBlocked,
    ].map((c) => [c.code, c]),
  ),
);

/** The typed error of a broker answer: its class from X-Airlock-Code, else the problem's code. */
export function errorFor(status: number, headers: Headers, body: string): APIError {
  let problem: Problem = {};
  try {
    const parsed: unknown = body ? JSON.parse(body) : {};
    if (parsed && typeof parsed === "object" && !Array.isArray(parsed)) problem = parsed as Problem;
  } catch {
    // not a problem document
  }
  const code = headers.get("x-airlock-code") || problem.code || undefined;
  const detail = problem.detail ?? (Object.keys(problem).length ? "" : body.trim().slice(0, 500));
  const Cls: ErrorClass = (code && BY_CODE[code]) || APIError;
  return new Cls(status, code, problem, headers, detail);
}

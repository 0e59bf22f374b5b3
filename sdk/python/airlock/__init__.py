"""Airlock's Python SDK: the orchestrator's client of the broker's control plane, and the sandbox's calls.

    from airlock import Airlock
    with Airlock() as client:                       # AIRLOCK_ADDR, AIRLOCK_TOKEN, AIRLOCK_SANDBOX_ADDR
        session = client.sessions.create({"task_id": "t-42", "grants": [...]})
        env = session.env("/etc/airlock/ca.pem")     # HTTPS_PROXY & co. for the sandbox
"""

from ._client import FINAL_STATUSES, Action, Airlock, AsyncAirlock, Page, Session, operation
from ._env import CA_VARS, TOKEN_PLACEHOLDER, format_env
from ._errors import *  # noqa: F401,F403  (AirlockError, APIError and one class per problem code)
from ._errors import BY_CODE, AirlockError, APIError, NoProxy, WaitTimeout, error_for


__version__ = "0.1.0"
__all__ = ["Airlock", "AsyncAirlock", "Session", "Action", "Page", "operation", "FINAL_STATUSES", "CA_VARS",
           "TOKEN_PLACEHOLDER", "format_env", "AirlockError", "APIError", "NoProxy", "WaitTimeout", "error_for",
           "BY_CODE"] + [c.__name__ for c in BY_CODE.values()]

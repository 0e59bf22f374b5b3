"""The proxy door's environment: what `broker session env --format env` prints (client/env.go)."""

from __future__ import annotations

from typing import Any, Dict, Iterable, Mapping, Optional
from urllib.parse import quote, urlsplit

from ._errors import AirlockError, NoProxy

TOKEN_PLACEHOLDER = "REPLACE_WITH_SESSION_TOKEN"

# The variables that point clients at the session CA, in client.CAVars' order.
CA_VARS = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO", "CURL_CA_BUNDLE", "AWS_CA_BUNDLE")

# Go's url.UserPassword escapes a password as userinfo: unreserved and these sub-delims stay.
_USERINFO_SAFE = "-._~$&+,;="


def host_of(addr: str) -> str:
    """The host of a broker address ("http://127.0.0.1:8701" or "host:port"); "" when it has none."""
    if "://" in addr:
        netloc = urlsplit(addr).netloc.rpartition("@")[2]
        return _hostname(netloc)
    if ":" in addr:
        return _hostname(addr)
    return ""


def _hostname(hostport: str) -> str:
    if hostport.startswith("["):
        return hostport[1:hostport.find("]")] if "]" in hostport else hostport
    host, sep, port = hostport.rpartition(":")
    return host if sep and port.isdigit() else hostport


def session_env(session: Mapping[str, Any], *, ca_file: str, token: Optional[str] = None,
                no_proxy: Iterable[str] = ()) -> Dict[str, str]:
    """The environment a sandbox needs to reach its upstreams through the proxy door with stock clients."""
    proxy = session.get("proxy") or {}
    if not proxy.get("url"):
        raise NoProxy(NoProxy.__doc__)
    if not ca_file:
        raise AirlockError("env: the CA file path is required")
    u = urlsplit(proxy["url"])
    hostport = u.netloc.rpartition("@")[2]
    if u.scheme != "http" or not hostport:
        raise AirlockError("env: the broker answered an unusable proxy URL")
    secret = quote(token or TOKEN_PLACEHOLDER, safe=_USERINFO_SAFE)
    url = f"http://airlock:{secret}@{hostport}{u.path}" + (f"?{u.query}" if u.query else "")
    hosts = ["localhost", "127.0.0.1", "::1"]
    for h in [_hostname(hostport), *no_proxy]:
        h = (h or "").strip()
        if h and h not in hosts:
            hosts.append(h)
    np = ",".join(hosts)
    env = {"HTTPS_PROXY": url, "https_proxy": url, "HTTP_PROXY": url, "http_proxy": url,
           "NO_PROXY": np, "no_proxy": np}
    for name in CA_VARS:
        env[name] = ca_file
    env["NODE_USE_ENV_PROXY"] = "1"
    env["GIT_HTTP_PROXY_AUTHMETHOD"] = "basic"
    placeholders = session.get("placeholders") or {}
    for name in sorted(placeholders):
        env[name] = placeholders[name]
    return env


def format_env(env: Mapping[str, str], fmt: str = "env") -> str:
    """`env`: KEY=VALUE lines (docker run --env-file); `sh`: export K='v' lines for eval."""
    out = []
    for k, v in env.items():
        if "\n" in v or "\r" in v or "\x00" in v:
            raise AirlockError(f"env: the value of {k} holds a line break or NUL")
        if fmt == "env":
            out.append(f"{k}={v}\n")
        elif fmt == "sh":
            out.append(f"export {k}='" + v.replace("'", "'\\''") + "'\n")
        else:
            raise AirlockError(f"env: format {fmt!r} is not sh or env")
    return "".join(out)

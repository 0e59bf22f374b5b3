// The proxy door's environment: what `broker session env --format env` prints (client/env.go).

import { AirlockError, NoProxy } from "./errors.js";

/** Stands in the proxy URL for the session token when it is not known (it is shown only at creation). */
export const TOKEN_PLACEHOLDER = "REPLACE_WITH_SESSION_TOKEN";

/** The variables that point clients at the session CA, in client.CAVars' order. */
export const CA_VARS = ["SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO", "CURL_CA_BUNDLE", "AWS_CA_BUNDLE"] as const;

export interface SessionLike {
  proxy?: { url?: string; ca_pem?: string };
  placeholders?: Record<string, string>;
}

// Go's url.UserPassword keeps letters, digits, -._~ and $&+,;= in a password; the rest is %XX.
function escapeUserinfo(s: string): string {
  let out = "";
  for (const b of new TextEncoder().encode(s)) {
    const c = String.fromCharCode(b);
    out += /[A-Za-z0-9\-._~$&+,;=]/.test(c) ? c : "%" + b.toString(16).toUpperCase().padStart(2, "0");
  }
  return out;
}

function hostname(hostport: string): string {
  if (hostport.startsWith("[")) {
    const end = hostport.indexOf("]");
    return end > 0 ? hostport.slice(1, end) : hostport;
  }
  const i = hostport.lastIndexOf(":");
  return i >= 0 && /^\d+$/.test(hostport.slice(i + 1)) ? hostport.slice(0, i) : hostport;
}

/** The host of a broker address ("http://127.0.0.1:8701" or "host:port"); "" when it has none. */
export function hostOf(addr: string): string {
  const m = /^[a-zA-Z][a-zA-Z0-9+.-]*:\/\/([^/?#]*)/.exec(addr);
  if (m) return hostname(m[1].slice(m[1].lastIndexOf("@") + 1));
  return addr.includes(":") ? hostname(addr) : "";
}

/** The environment a sandbox needs to reach its upstreams through the proxy door with stock clients. */
export function sessionEnv(session: SessionLike, opts: { caFile: string; token?: string; noProxy?: string[] }): Record<string, string> {
  const proxyURL = session.proxy?.url;
  if (!proxyURL) throw new NoProxy("the session has no proxy door (proxy_listen was off when it was created, or its address is unknown)");
  if (!opts.caFile) throw new AirlockError("env: the CA file path is required");
  const m = /^http:\/\/([^/?#]*)(.*)$/.exec(proxyURL);
  const hostport = m ? m[1].slice(m[1].lastIndexOf("@") + 1) : "";
  if (!m || !hostport) throw new AirlockError("env: the broker answered an unusable proxy URL");
  const url = `http://airlock:${escapeUserinfo(opts.token || TOKEN_PLACEHOLDER)}@${hostport}${m[2]}`;
  const hosts = ["localhost", "127.0.0.1", "::1"];
  for (let h of [hostname(hostport), ...(opts.noProxy ?? [])]) {
    h = (h ?? "").trim();
    if (h && !hosts.includes(h)) hosts.push(h);
  }
  const np = hosts.join(",");
  const env: Record<string, string> = {
    HTTPS_PROXY: url, https_proxy: url, HTTP_PROXY: url, http_proxy: url, NO_PROXY: np, no_proxy: np,
  };
  for (const name of CA_VARS) env[name] = opts.caFile;
  env.NODE_USE_ENV_PROXY = "1";
  env.GIT_HTTP_PROXY_AUTHMETHOD = "basic";
  const placeholders = session.placeholders ?? {};
  for (const name of Object.keys(placeholders).sort()) env[name] = placeholders[name];
  return env;
}

/** `env`: KEY=VALUE lines (docker run --env-file); `sh`: export K='v' lines for eval. */
export function formatEnv(env: Record<string, string>, format: "env" | "sh" = "env"): string {
  let out = "";
  for (const [k, v] of Object.entries(env)) {
    if (/[\n\r\0]/.test(v)) throw new AirlockError(`env: the value of ${k} holds a line break or NUL`);
    out += format === "env" ? `${k}=${v}\n` : `export ${k}='${v.replaceAll("'", "'\\''")}'\n`;
  }
  return out;
}

package client

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"sort"
	"strings"
)

// TokenPlaceholder stands in the proxy URL for the session token when Env
// is not given it (the token is shown only once, at creation).
const TokenPlaceholder = "REPLACE_WITH_SESSION_TOKEN"

// EnvVar is one environment variable of a sandbox.
type EnvVar struct{ Name, Value string }

// EnvOptions say what Env cannot learn from the session answer.
type EnvOptions struct {
	// Token is the session token, the proxy password; "" puts
	// TokenPlaceholder in the URL.
	Token string
	// CAFile is where the sandbox finds the session CA's PEM (what the CA
	// variables point at).
	CAFile string
	// NoProxy are further hosts the sandbox reaches directly (the broker's
	// own planes); localhost and the proxy's host are always there.
	NoProxy []string
}

// CAVars are the variables that point clients at the session CA: OpenSSL
// (curl, Python ssl, git with OpenSSL), Python requests, Node, git, curl,
// the AWS CLI and SDKs. SSL_CERT_FILE replaces the system trust store for
// OpenSSL clients: they trust only the session CA, which is intended, as
// the sandbox's egress goes only to granted hosts, through the broker.
var CAVars = []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO", "CURL_CA_BUNDLE", "AWS_CA_BUNDLE"}

// ErrNoProxy means the session has no proxy door: it was created with
// proxy_listen off, or the broker does not know the door's address.
var ErrNoProxy = errors.New("the session has no proxy door (the broker's proxy_listen was off when it was created, or its address is unknown)")

// Env is the environment a sandbox needs to reach its upstreams through
// the proxy door with stock clients (DESIGN §8): the proxy variables (upper
// and lower case: curl reads only http_proxy for plain HTTP), the CA
// variables, NODE_USE_ENV_PROXY, GIT_HTTP_PROXY_AUTHMETHOD, and the session's placeholders, in that
// order (placeholders by name).
func Env(s *Session, o EnvOptions) ([]EnvVar, error) {
	if s.Proxy == nil || s.Proxy.URL == "" {
		return nil, ErrNoProxy
	}
	if o.CAFile == "" {
		return nil, errors.New("env: the CA file path is required")
	}
	u, err := url.Parse(s.Proxy.URL)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return nil, fmt.Errorf("env: the broker answered an unusable proxy URL")
	}
	token := o.Token
	if token == "" {
		token = TokenPlaceholder
	}
	u.User = url.UserPassword("airlock", token)
	proxy := u.String()
	noProxy := []string{"localhost", "127.0.0.1", "::1"}
	for _, h := range append([]string{u.Hostname()}, o.NoProxy...) {
		if h = strings.TrimSpace(h); h != "" && !contains(noProxy, h) {
			noProxy = append(noProxy, h)
		}
	}
	np := strings.Join(noProxy, ",")
	out := []EnvVar{
		{"HTTPS_PROXY", proxy}, {"https_proxy", proxy},
		{"HTTP_PROXY", proxy}, {"http_proxy", proxy},
		{"NO_PROXY", np}, {"no_proxy", np},
	}
	for _, name := range CAVars {
		out = append(out, EnvVar{name, o.CAFile})
	}
	// git (libcurl) would first send CONNECT without credentials to learn
	// the proxy's scheme (anyauth): each connection would cost a 407 and a
	// refused call in the audit log. The door only speaks Basic.
	out = append(out, EnvVar{"NODE_USE_ENV_PROXY", "1"}, EnvVar{"GIT_HTTP_PROXY_AUTHMETHOD", "basic"})
	names := make([]string, 0, len(s.Placeholders))
	for name := range s.Placeholders {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		out = append(out, EnvVar{name, s.Placeholders[name]})
	}
	return out, nil
}

// HostOf is the host of a broker address ("http://127.0.0.1:8701" or
// "host:port"), for EnvOptions.NoProxy; "" when it has none.
func HostOf(addr string) string {
	if u, err := url.Parse(addr); err == nil && u.Host != "" {
		return u.Hostname()
	}
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return ""
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// ShellQuote quotes v for a POSIX shell: in single quotes, each single
// quote in v ends the quoting, is escaped with a backslash, and quoting
// starts again.
func ShellQuote(v string) string {
	return "'" + strings.ReplaceAll(v, "'", `'\''`) + "'"
}

// FormatEnv writes vars as "sh" (export K='v' lines for eval) or "env"
// (KEY=VALUE lines for docker run --env-file, which takes values
// verbatim). A name that is not a variable name, or a value with a line
// break or NUL (which neither format can carry), is an error.
func FormatEnv(vars []EnvVar, format string) (string, error) {
	var b strings.Builder
	for _, v := range vars {
		if !validEnvName(v.Name) {
			return "", fmt.Errorf("env: %q is not a variable name", v.Name)
		}
		if strings.ContainsAny(v.Value, "\n\r\x00") {
			return "", fmt.Errorf("env: the value of %s holds a line break or NUL", v.Name)
		}
		switch format {
		case "sh", "":
			b.WriteString("export " + v.Name + "=" + ShellQuote(v.Value) + "\n")
		case "env":
			b.WriteString(v.Name + "=" + v.Value + "\n")
		default:
			return "", fmt.Errorf("env: format %q is not sh or env", format)
		}
	}
	return b.String(), nil
}

func validEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

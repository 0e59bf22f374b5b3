// Package githubapp mints GitHub App installation tokens per session, each
// narrowed to the repositories and permissions of the session's grants (an
// upstream.Minter).
package githubapp

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/airlock-broker/airlock/internal/grants"

	"github.com/airlock-broker/airlock/internal/upstream"
)

var _ upstream.Minter = (*App)(nil)

// App mints GitHub App installation tokens per session: an app JWT
// (RS256, issued 60 s in the past for clock drift, valid 9 minutes) buys
// POST /app/installations/{id}/access_tokens with the repositories and
// permissions of the session's scope (Narrow); GitHub's tokens live one
// hour and cannot be extended, so Renew mints anew (the broker revokes the
// one replaced); Revoke is DELETE /installation/token, authenticated by the
// token itself.
type App struct {
	AppID          string
	InstallationID string
	Key            *rsa.PrivateKey
	APIURL         *url.URL // https://api.github.com, or GitHub Enterprise's /api/v3
	// Repositories bound every token (names, without the owner; none: every
	// repository of the installation, unless a grant names some).
	Repositories []string
	// Permissions bound every token ({"contents": "read", ...}; none: the
	// installation's).
	Permissions map[string]string
	Client      *http.Client
}

// JWTLife is the app JWT's validity (GitHub allows at most 10 min).
const JWTLife = 9 * time.Minute

// Describe implements upstream.Minter.
func (m *App) Describe() string {
	return "github_app:" + m.AppID + "/installation/" + m.InstallationID
}

// ghScope is what one token is asked for.
type ghScope struct {
	Repositories []string          `json:"repositories,omitempty"`
	Permissions  map[string]string `json:"permissions,omitempty"`
}

// Narrow derives a token's repositories and permissions from the
// rules of the session's grants on the upstream and the upstream's bounds:
//
//   - A rule under /repos/{owner}/{repo}/... names its repositories when the
//     repo segment is a literal, or a variable constrained by pin or one_of
//     (path.<variable>); such a rule with the repo free (unconstrained
//     variable, pattern, glob) names none and covers every repository.
//   - Rules outside /repos/ (/user, /orgs/..., /search/...) need no
//     repository and do not widen the set.
//   - The token's repositories are those named, intersected with the
//     configured ones (a named one outside them: not requested); when some
//     /repos/ rule covers every repository, or no rule names any, they are
//     the configured ones (none configured: the installation's).
//   - Permissions are the configured ones; when every rule is a GET, HEAD
//     or OPTIONS, each "write" or "admin" level is lowered to "read".
//
// It fails when the rules name repositories and none of them is allowed.
func Narrow(rules []grants.Rule, repos []string, perms map[string]string) (repositories []string, permissions map[string]string, err error) {
	named := map[string]bool{}
	anyRepo, readOnly := false, true
	for _, r := range rules {
		switch strings.ToUpper(r.Method) {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
		default:
			readOnly = false
		}
		segs := strings.Split(strings.TrimPrefix(r.Path, "/"), "/")
		if len(segs) < 3 || segs[0] != "repos" {
			continue
		}
		names, ok := segmentValues(segs[2], r.Constraints)
		if !ok {
			anyRepo = true
			continue
		}
		for _, n := range names {
			named[n] = true
		}
	}
	switch {
	case anyRepo || len(named) == 0:
		repositories = slices.Clone(repos)
	case len(repos) == 0:
		repositories = slices.Sorted(maps.Keys(named))
	default:
		for _, n := range repos {
			if named[n] {
				repositories = append(repositories, n)
			}
		}
		if len(repositories) == 0 {
			return nil, nil, errors.New("the grants name no repository the upstream allows")
		}
	}
	if len(perms) > 0 {
		permissions = make(map[string]string, len(perms))
		for k, v := range perms {
			if readOnly && (v == "write" || v == "admin") {
				v = "read"
			}
			permissions[k] = v
		}
	}
	return repositories, permissions, nil
}

// segmentValues are the values a path template segment can take, when it
// is a literal or a variable bounded by pin or one_of; ok false: any.
func segmentValues(seg string, cs map[string]grants.Constraint) ([]string, bool) {
	if !strings.ContainsAny(seg, "{}*") {
		return []string{seg}, seg != ""
	}
	if !strings.HasPrefix(seg, "{") || !strings.HasSuffix(seg, "}") || strings.ContainsAny(seg[1:len(seg)-1], "{}*.") {
		return nil, false
	}
	c, found := cs["path."+seg[1:len(seg)-1]]
	if !found {
		return nil, false
	}
	if s, isStr := c.Pin.(string); isStr && s != "" {
		return []string{s}, true
	}
	if len(c.OneOf) > 0 {
		out := make([]string, 0, len(c.OneOf))
		for _, v := range c.OneOf {
			s, isStr := v.(string)
			if !isStr || s == "" {
				return nil, false
			}
			out = append(out, s)
		}
		return out, true
	}
	return nil, false
}

// appJWT is the app's JWT at now (the broker's clock, which GitHub checks
// against its own).
func (m *App) appJWT(now time.Time) (string, error) {
	t := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.RegisteredClaims{
		Issuer:    m.AppID,
		IssuedAt:  jwt.NewNumericDate(now.Add(-60 * time.Second)),
		ExpiresAt: jwt.NewNumericDate(now.Add(JWTLife)),
	})
	return t.SignedString(m.Key)
}

// Mint implements upstream.Minter.
func (m *App) Mint(ctx context.Context, sc upstream.Scope) (upstream.Lease, error) {
	repos, perms, err := Narrow(sc.Rules, m.Repositories, m.Permissions)
	if err != nil {
		return upstream.Lease{}, err
	}
	tok, err := m.appJWT(sc.Now)
	if err != nil {
		return upstream.Lease{}, upstream.Unavailable("the GitHub App's JWT could not be signed", nil)
	}
	body, _ := json.Marshal(ghScope{Repositories: repos, Permissions: perms})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, m.endpoint("/app/installations/"+url.PathEscape(m.InstallationID)+"/access_tokens"), bytes.NewReader(body))
	if err != nil {
		return upstream.Lease{}, upstream.Unavailable("the token request could not be built", nil)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Accept", "application/vnd.github+json")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Api-Version", "2022-11-28")
	resp, err := m.Client.Do(req)
	if err != nil {
		return upstream.Lease{}, upstream.Unavailable(upstream.NetCause(err, upstream.WhoIssuer), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		return upstream.Lease{}, upstream.Unavailable(issuerAnswered(resp.StatusCode), nil)
	}
	var out struct {
		Token     string    `json:"token"`
		ExpiresAt time.Time `json:"expires_at"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&out); err != nil || out.Token == "" || out.ExpiresAt.IsZero() {
		return upstream.Lease{}, upstream.Unavailable("the issuer's token answer is malformed", nil)
	}
	exp := out.ExpiresAt
	if !sc.Expires.IsZero() && sc.Expires.Before(exp) {
		exp = sc.Expires // revoked at the session's end anyway
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	return upstream.Lease{Secret: upstream.NewSecret(out.Token), ID: "ghs-" + m.InstallationID + "-" + hex.EncodeToString(id[:]), Expires: exp}, nil
}

// Renew implements upstream.Minter: installation tokens cannot be extended, so a
// new one is minted.
func (m *App) Renew(ctx context.Context, sc upstream.Scope, _ upstream.Lease) (upstream.Lease, error) {
	return m.Mint(ctx, sc)
}

// Revoke implements upstream.Minter: DELETE /installation/token with the token. A
// token GitHub no longer knows (401) is already dead.
func (m *App) Revoke(ctx context.Context, l upstream.Lease) error {
	if l.Secret.IsZero() {
		return nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, m.endpoint("/installation/token"), nil)
	if err != nil {
		return errors.New("cannot build the revocation")
	}
	req.Header.Set("Authorization", "Bearer "+l.Secret.Reveal())
	req.Header.Set("Accept", "application/vnd.github+json")
	req.Header.Set("X-GitHub-Api-Version", "2022-11-28")
	resp, err := m.Client.Do(req)
	if err != nil {
		return errors.New("the revocation failed")
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusUnauthorized {
		return errors.New("GitHub answered " + strconv.Itoa(resp.StatusCode) + " to the revocation")
	}
	return nil
}

func (m *App) endpoint(p string) string {
	return m.APIURL.Scheme + "://" + m.APIURL.Host + strings.TrimSuffix(m.APIURL.EscapedPath(), "/") + p
}

// issuerAnswered is the cause of a token request GitHub refused: its
// status, a number (a fixed set of texts whatever GitHub sends).
func issuerAnswered(status int) string {
	if status < 100 || status > 599 {
		return "the issuer answered an invalid status"
	}
	return "the issuer answered " + strconv.Itoa(status)
}

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/airlock-broker/airlock/internal/brokertest"
	"github.com/airlock-broker/airlock/internal/pgtest"
)

// seriesName is a series an expression names (a histogram's _bucket,
// _count and _sum are series of their own on /metrics).
var seriesName = regexp.MustCompile(`\b(?:airlock|go|process)_[A-Za-z0-9_]*[A-Za-z0-9]`)

// pgOnly are the series a broker exports only on PostgreSQL (the change
// feed, the shared audit chain, the connection pool).
var pgOnly = []string{"airlock_change_feed_lag_seconds", "airlock_audit_append_seconds", "airlock_store_pool_"}

// TestDashboardAndAlertsUseExportedSeries: the Grafana dashboard
// (deploy/grafana/airlock-dashboard.json) parses, and so do the alert rules
// of docs/observability.md; the rules cover what an operator must hear
// about; every series their expressions name is on a real broker's
// /metrics (on bbolt after a few calls, failures included, so the vectors
// have series; on PostgreSQL for the series only it has).
func TestDashboardAndAlertsUseExportedSeries(t *testing.T) {
	exprs := map[string]string{} // expression → where it is
	for _, e := range dashboardExprs(t, filepath.Join("..", "..", "deploy", "grafana", "airlock-dashboard.json")) {
		exprs[e] = "the dashboard"
	}
	rules := alertRules(t, filepath.Join("..", "..", "docs", "observability.md"))
	for _, must := range []string{"airlock_killswitch_engaged", `code="audit_unavailable"`, "airlock_change_feed_lag_seconds",
		"airlock_oldest_pending_approval_seconds", "airlock_credential_fetch_failures_total", "credential_unavailable|audit_unavailable"} {
		if !slices.ContainsFunc(rules, func(r alertRule) bool { return strings.Contains(r.Expr, must) }) {
			t.Errorf("no alert rule's expression uses %s", must)
		}
	}
	for _, r := range rules {
		if r.Alert == "" || r.Expr == "" {
			t.Errorf("an alert rule without a name or an expression: %+v", r)
		}
		exprs[r.Expr] = "alert " + r.Alert
	}
	named := map[string]string{} // series → where it is named
	for e, where := range exprs {
		for _, n := range seriesName.FindAllString(e, -1) {
			named[n] = where
		}
	}
	if len(named) < 15 {
		t.Fatalf("the dashboard and the alerts name %d series: %v", len(named), named)
	}

	exported := scrapeNames(t, exercisedBroker(t, false))
	var onPG []string
	for n, where := range named {
		switch {
		case slices.ContainsFunc(pgOnly, func(p string) bool { return strings.HasPrefix(n, p) }):
			onPG = append(onPG, n)
		case !exported[n]:
			t.Errorf("%s names %s, which the broker does not export", where, n)
		}
	}
	if len(onPG) == 0 {
		return
	}
	t.Run("postgres", func(t *testing.T) {
		exported := scrapeNames(t, exercisedBroker(t, true))
		for _, n := range onPG {
			if !exported[n] {
				t.Errorf("%s names %s, which a broker on PostgreSQL does not export", named[n], n)
			}
		}
	})
}

// exercisedBroker is a real broker (on PostgreSQL when pg) after calls
// that give every vector a series: allowed, refused, a limit hit, an
// upstream that refuses the connection, a credential file that is not
// there and an issuer that refuses the client.
func exercisedBroker(t *testing.T, pg bool) *brokertest.Proc {
	t.Helper()
	up := brokertest.NewUpstream(t)
	issuer := newFakeAuthServer(t, brokertest.Canary, time.Minute)
	issuer.revoked = true
	extra := "  - name: gone\n    base_url: http://" + closedPort(t) + "\n    sensitive: false\n    credential: {source: env, name: CANARY_TOKEN}\n    inject: {query: api_key}\n" +
		"  - name: nofile\n    base_url: " + up.URL + "\n    sensitive: false\n    credential: {source: file, path: " + filepath.Join(t.TempDir(), "missing") + "}\n" +
		"  - name: oauth\n    base_url: " + up.URL + "\n    sensitive: false\n    credential:\n      source: oauth2\n      token_url: " + issuer.URL + "/oauth/token\n" +
		"      client_id: airlock-client\n      client_secret: {source: env, name: CANARY_TOKEN}\n"
	o := brokertest.ProcOptions{Upstream: up.URL, ExtraYAML: extra}
	if pg {
		o.ExtraYAML = extra + "store: {driver: postgres, dsn: \"${AIRLOCK_PG_DSN}\"}\n"
		o.Env = map[string]string{"AIRLOCK_PG_DSN": pgtest.DSN(t)}
	}
	b := startBroker(t, o)
	rule := []any{map[string]any{"method": "GET", "path": "/ok"}}
	once := brokertest.APIGrant(rule[0].(map[string]any))
	once["max_uses"] = 1
	s := b.Session(brokertest.TrustedSession(once,
		map[string]any{"upstream": "gone", "rules": rule}, map[string]any{"upstream": "nofile", "rules": rule},
		map[string]any{"upstream": "oauth", "rules": rule}))
	for _, c := range []struct {
		path   string
		status int
	}{{"/api/ok", 200}, {"/api/ok", 403}, {"/api/nope", 403}, {"/gone/ok", 502}, {"/nofile/ok", 503}, {"/oauth/ok", 503}} {
		if r := b.Do("GET", b.Sandbox+"/v1/proxy"+c.path, s.Token, nil); r.Status != c.status {
			t.Fatalf("GET %s: %d %s, want %d", c.path, r.Status, r.Body, c.status)
		}
	}
	return b
}

// scrapeNames are the series names on b's /metrics (text format).
func scrapeNames(t *testing.T, b *brokertest.Proc) map[string]bool {
	t.Helper()
	r := b.Do("GET", b.Control+"/metrics", "", nil)
	if r.Status != 200 {
		t.Fatalf("/metrics: %d", r.Status)
	}
	names := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(r.Body))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			names[line[:i]] = true
		}
	}
	return names
}

// dashboardExprs are the PromQL expressions of a Grafana dashboard's
// panels (rows' panels included) and template variables.
func dashboardExprs(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title      string
		Panels     []dashPanel
		Templating struct {
			List []struct {
				Query any
			}
		}
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if d.Title == "" || len(d.Panels) == 0 {
		t.Fatalf("%s: no title or no panels", path)
	}
	var out []string
	var walk func([]dashPanel)
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			if p.Type != "row" && len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, tg := range p.Targets {
				if tg.Expr == "" {
					t.Errorf("panel %q has a target without an expression", p.Title)
				}
				out = append(out, tg.Expr)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if q, ok := v.Query.(map[string]any); ok {
			if s, ok := q["query"].(string); ok {
				out = append(out, s)
			}
		}
	}
	return out
}

type dashPanel struct {
	Type, Title string
	Targets     []struct{ Expr string }
	Panels      []dashPanel
}

type alertRule struct {
	Alert string `yaml:"alert"`
	Expr  string `yaml:"expr"`
}

// alertRules are the Prometheus alerting rules of the doc's YAML block
// that holds `groups:`.
func alertRules(t *testing.T, path string) []alertRule {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllSubmatch(data, -1)
	for _, b := range blocks {
		if !bytes.HasPrefix(b[1], []byte("groups:")) {
			continue
		}
		var f struct {
			Groups []struct {
				Name  string      `yaml:"name"`
				Rules []alertRule `yaml:"rules"`
			} `yaml:"groups"`
		}
		if err := yaml.Unmarshal(b[1], &f); err != nil {
			t.Fatalf("%s: the alert rules do not parse: %v", path, err)
		}
		var out []alertRule
		for _, g := range f.Groups {
			out = append(out, g.Rules...)
		}
		if len(out) == 0 {
			t.Fatalf("%s: no alert rules", path)
		}
		return out
	}
	t.Fatalf("%s: no YAML block of alert rules (groups:)", path)
	return nil
}

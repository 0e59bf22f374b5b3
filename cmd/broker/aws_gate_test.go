package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/airlock-broker/airlock/internal/brokertest"
)

// A gated call through the AWS door that a reviewer denies is answered in
// the protocol the SDK speaks (an S3 XML error carrying the Airlock code),
// not as a problem document the SDK cannot read.
func TestAWSGatedCallRefusalSpeaksS3(t *testing.T) {
	e := awsAtkStart(t, map[string]any{"upstream": "s3", "approval": "always", "rules": []any{
		map[string]any{"action": "s3:PutObject", "resource": "arn:aws:s3:::reports/t-42/*"},
	}})
	b, c := e.b, e.client(t)
	done := make(chan error, 1)
	go func() {
		_, err := c.PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String("reports"), Key: aws.String("t-42/x.csv"), Body: strings.NewReader("x")})
		done <- err
	}()
	reviewer := b.NewToken("reviewer", "rita")
	var id string
	brokertest.Eventually(t, 20*time.Second, func() bool {
		var list struct {
			Items []struct {
				ID string `json:"id"`
			} `json:"items"`
		}
		_ = json.Unmarshal(b.Do("GET", b.Control+"/v1/approvals?status=pending", reviewer, nil).Body, &list)
		if len(list.Items) == 1 {
			id = list.Items[0].ID
		}
		return id != ""
	})
	if r := b.Do("POST", b.Control+"/v1/approvals/"+id+"/deny", reviewer, map[string]any{"comment": "no"}); r.Status != 200 {
		t.Fatalf("deny: %d %s", r.Status, r.Body)
	}
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the SDK's call was not answered after the denial")
	}
	var api smithy.APIError
	if !errors.As(err, &api) || api.ErrorCode() != "AccessDenied" || !strings.Contains(api.ErrorMessage(), "approval_denied") {
		t.Fatalf("SDK error = %v, want an S3 AccessDenied naming approval_denied", err)
	}
}

// A permission a header implies is decided like the operation itself: a
// header that sets an ACL on an allowed PutObject waits for a reviewer when
// the grant allowing PutObjectAcl says approval: always, and a grant that
// caps its uses (which could not count the header) permits no such header.
func TestAWSImpliedPermissionIsGatedAndLimited(t *testing.T) {
	put := map[string]any{"upstream": "s3", "rules": []any{
		map[string]any{"action": "s3:PutObject", "resource": "arn:aws:s3:::reports/t-42/*"},
	}}
	t.Run("approval always", func(t *testing.T) {
		e := awsAtkStart(t, put, map[string]any{"upstream": "s3", "approval": "always", "rules": []any{
			map[string]any{"action": "s3:PutObjectAcl", "resource": "arn:aws:s3:::reports/t-42/*"},
		}})
		r := e.send(t, "s3", "PUT", e.b.Sandbox+"/v1/aws/s3/reports/t-42/a.csv", http.Header{"X-Amz-Acl": {"public-read"}, "Prefer": {"wait=0"}}, "x")
		if r.Status != http.StatusAccepted {
			t.Fatalf("PutObject with x-amz-acl under an approval: always ACL grant: %d %s, want 202 pending", r.Status, r.Body)
		}
		if n := len(e.s3.received()); n != 0 {
			t.Fatalf("the ACL change reached S3 without a reviewer")
		}
		// Without the header, the PutObject grant alone decides: not gated.
		if r := e.send(t, "s3", "PUT", e.b.Sandbox+"/v1/aws/s3/reports/t-42/b.csv", nil, "x"); r.Status != 200 {
			t.Fatalf("plain PutObject: %d %s", r.Status, r.Body)
		}
	})
	t.Run("max_uses", func(t *testing.T) {
		e := awsAtkStart(t, put, map[string]any{"upstream": "s3", "max_uses": 1, "rules": []any{
			map[string]any{"action": "s3:PutObjectAcl", "resource": "arn:aws:s3:::reports/t-42/*"},
		}})
		c := e.client(t)
		ctx := context.Background()
		if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("reports"), Key: aws.String("t-42/a.csv"), Body: strings.NewReader("x")}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.PutObjectAcl(ctx, &s3.PutObjectAclInput{Bucket: aws.String("reports"), Key: aws.String("t-42/a.csv"), ACL: s3types.ObjectCannedACLPrivate}); err != nil {
			t.Fatalf("the ACL grant's one use: %v", err)
		}
		before := len(e.s3.received())
		_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("reports"), Key: aws.String("t-42/b.csv"), ACL: s3types.ObjectCannedACLPublicRead, Body: strings.NewReader("x")})
		awsAtkRefused(t, "an ACL header permitted by a use-limited grant", err, "grant_exhausted")
		awsAtkNothingSent(t, "an ACL header permitted by a use-limited grant", e.s3.received(), before)
	})
}

// A service that routes by path (REST and Smithy RPC v2 protocols) would run
// the operation the path names and ignore the selector the broker checked:
// non-S3 requests go to "/" only.
func TestAWSOperationNeverNamedByPath(t *testing.T) {
	e := awsAtkStart(t, map[string]any{"upstream": "ddb", "rules": []any{
		map[string]any{"action": "dynamodb:GetItem", "resource": "*"},
	}})
	ddb := e.b.Sandbox + "/v1/aws/ddb"
	target := http.Header{"X-Amz-Target": {"DynamoDB_20120810.GetItem"}, "Content-Type": {"application/x-amz-json-1.0"}}
	for _, path := range []string{"/service/DynamoDB/operation/DeleteTable", "/2015-03-31/functions/f/invocations", "/x"} {
		r := e.send(t, "dynamodb", "POST", ddb+path, target, `{"TableName":"t"}`)
		if r.Status != 400 || r.Header.Get("X-Airlock-Code") != "bad_request" {
			t.Errorf("POST %s with a granted X-Amz-Target: %d %s, want 400 bad_request", path, r.Status, r.Body)
		}
	}
	if n := len(e.other.Requests()); n != 0 {
		t.Fatalf("%d path-routed requests reached the upstream", n)
	}
	if r := e.send(t, "dynamodb", "POST", ddb+"/", target, `{"TableName":"t"}`); r.Status != 200 {
		t.Fatalf("the granted operation at /: %d %s", r.Status, r.Body)
	}
}

// A request that does not verify is refused as the SDK expects
// (SignatureDoesNotMatch) and audited with the same stable code.
func TestAWSBadSignatureAuditedAsInvalidToken(t *testing.T) {
	e := awsAtkStart(t, awsAtkPutOnlyGrant())
	e.secret = strings.Repeat("0", len(e.secret)) // the right access key, the wrong secret
	r := e.send(t, "s3", "GET", e.b.Sandbox+"/v1/aws/s3/reports/t-42/a.csv", nil, "")
	if r.Status != http.StatusForbidden || !strings.Contains(string(r.Body), "SignatureDoesNotMatch") {
		t.Fatalf("a wrong signature: %d %s", r.Status, r.Body)
	}
	reqID := r.Header.Get("X-Airlock-Request-Id")
	for _, rec := range brokertest.ParseAudit(t, e.b.AuditExport()) {
		if rec.RequestID == reqID {
			if rec.Type != "call.denied" || rec.Code != "invalid_token" {
				t.Fatalf("audit of a wrong signature: %s %s, want call.denied invalid_token", rec.Type, rec.Code)
			}
			return
		}
	}
	t.Fatal("the refused request has no audit record")
}

// rt2GrantIDs returns the ids of a session's grants, in creation order.
func rt2GrantIDs(t *testing.T, b *brokertest.Proc, sessionID string) []string {
	t.Helper()
	r := b.Do("GET", b.Control+"/v1/sessions/"+sessionID, brokertest.ProcAdminToken, nil)
	if r.Status != 200 {
		t.Fatalf("session %s: %d %s", sessionID, r.Status, r.Body)
	}
	var s struct {
		Grants []struct {
			ID string `json:"id"`
		} `json:"grants"`
	}
	if err := json.Unmarshal(r.Body, &s); err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(s.Grants))
	for i, g := range s.Grants {
		ids[i] = g.ID
	}
	return ids
}

// rt2AWSAction sends a signed S3 request that must be held for a reviewer
// and returns its action id.
func rt2AWSAction(t *testing.T, e *awsAtkEnv, method, path string, h http.Header, body string) string {
	t.Helper()
	if h == nil {
		h = http.Header{}
	}
	h.Set("Prefer", "wait=0")
	r := e.send(t, "s3", method, e.b.Sandbox+"/v1/aws/s3"+path, h, body)
	if r.Status != http.StatusAccepted {
		t.Fatalf("%s %s: %d %s, want 202 pending", method, path, r.Status, r.Body)
	}
	a := brokertest.DecodeAction(t, r)
	if a.ID == "" {
		t.Fatalf("no action id: %s", r.Body)
	}
	return a.ID
}

// An approved AWS action is executed only while every permission it needs
// still holds: a header that sets an ACL needs s3:PutObjectAcl, a copy
// needs s3:GetObject on its source. When the operator revokes the grant
// that permitted that part while the action waits, it is denied at once
// and no approval can run it (the main grant, which held the action's
// use, is still live).
func TestAWSApprovedActionLosesRevokedPermit(t *testing.T) {
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
			rev := e.b.NewToken("reviewer", "rita")
			ids := rt2GrantIDs(t, e.b, e.key)
			body := "x"
			if tc.header.Get("X-Amz-Copy-Source") != "" {
				body = ""
			}
			id := rt2AWSAction(t, e, "PUT", "/reports/t-42/a.csv", tc.header, body)
			if r := e.b.Do("DELETE", e.b.Control+"/v1/grants/"+ids[1], brokertest.ProcAdminToken, nil); r.Status != 200 {
				t.Fatalf("revoke the permit grant: %d %s", r.Status, r.Body)
			}
			// The revocation denies the action at once (it depends on the
			// permit grant: lifetimes are hard bounds); a reviewer finds it
			// decided.
			if r := e.b.Do("POST", e.b.Control+"/v1/approvals/"+id+"/approve", rev, map[string]any{}); r.Status != http.StatusConflict {
				t.Fatalf("approve after its permit grant was revoked: %d %s, want 409", r.Status, r.Body)
			}
			a := brokertest.DecodeAction(t, e.b.Do("GET", e.b.Control+"/v1/approvals/"+id, rev, nil))
			if got := e.s3.received(); len(got) != 0 {
				t.Fatalf("approved after its permit grant was revoked: S3 received %s %s (%v), action %s", got[0].Method, got[0].RawPath, got[0].Header, a.Status)
			}
			if a.Status != "denied" {
				t.Fatalf("action %s, want denied at the revocation", a.Status)
			}
		})
	}
}

// The reviewer of a gated AWS call sees the real destination (the S3
// endpoint and the path re-encoded from the checked bucket and key) and the
// headers that change what it does (an ACL, a copy's source).
func TestAWSReviewerSeesDestinationAndHeaders(t *testing.T) {
	put := map[string]any{"upstream": "s3", "approval": "always", "rules": []any{
		map[string]any{"action": "s3:PutObject", "resource": "arn:aws:s3:::reports/t-42/*"},
		map[string]any{"action": "s3:PutObjectAcl", "resource": "arn:aws:s3:::reports/t-42/*"},
	}}
	e := awsAtkStart(t, put)
	rev := e.b.NewToken("reviewer", "rita")
	br := attackUILogin(t, e.b, rev)
	id := rt2AWSAction(t, e, "PUT", "/reports/t-42/a%20b.csv", http.Header{"X-Amz-Acl": {"public-read"}}, "x")
	var a struct {
		Request struct {
			URL    string              `json:"url"`
			Header map[string][]string `json:"header"`
		} `json:"request"`
	}
	r := e.b.Do("GET", e.b.Control+"/v1/approvals/"+id, rev, nil)
	if err := json.Unmarshal(r.Body, &a); err != nil {
		t.Fatal(err)
	}
	if want := e.s3.URL + "/reports/t-42/a%20b.csv"; a.Request.URL != want {
		t.Fatalf("approvals API url %q, want %q", a.Request.URL, want)
	}
	if !strings.Contains(string(r.Body), "public-read") {
		t.Fatalf("the approvals API hides the ACL header: %s", r.Body)
	}
	brokertest.AssertNoCanary(t, "approval", r.Body)
	if strings.Contains(string(r.Body), awsCanary) || strings.Contains(string(r.Body), e.secret) {
		t.Fatalf("a secret in the approval: %s", r.Body)
	}
	_, page := br.get("/ui/actions/" + id)
	if !strings.Contains(page, "public-read") || !strings.Contains(page, e.s3.URL+"/reports/t-42/a%20b.csv") {
		t.Fatalf("the action page does not show the ACL header and the destination:\n%s", page)
	}
	if strings.Contains(page, awsCanary) || strings.Contains(page, e.secret) {
		t.Fatalf("a secret on the action page")
	}
}

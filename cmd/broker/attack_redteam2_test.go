package main

import (
	"context"
	"encoding/json"
	"net/http"
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
// that permitted that part while the action waits, approval must not run
// it (the main grant, which held the action's use, is still live).
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
			a := rt2Decided(t, e.b, rev, "", id, "approve")
			if got := e.s3.received(); len(got) != 0 {
				t.Fatalf("approved after its permit grant was revoked: S3 received %s %s (%v), action %s", got[0].Method, got[0].RawPath, got[0].Header, a.Status)
			}
			if a.Status != "failed" {
				t.Fatalf("action %s, want failed", a.Status)
			}
		})
	}
}

// A header that needs another grant's permission (x-amz-acl needs
// s3:PutObjectAcl) is that grant's use: with max_uses 1 on the ACL grant,
// a sandbox sets an ACL once, not once per PutObject it sends.
func TestRedTeam2OpenPermitGrantUsesNotCounted(t *testing.T) {
	put := map[string]any{"upstream": "s3", "rules": []any{
		map[string]any{"action": "s3:PutObject", "resource": "arn:aws:s3:::reports/t-42/*"},
	}}
	acl := map[string]any{"upstream": "s3", "max_uses": 1, "rules": []any{
		map[string]any{"action": "s3:PutObjectAcl", "resource": "arn:aws:s3:::reports/t-42/*"},
	}}
	e := awsAtkStart(t, put, acl)
	c := e.client(t)
	ctx := context.Background()
	n := 0
	var err error
	for i := 0; i < 3 && err == nil; i++ {
		_, err = c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("reports"), Key: aws.String("t-42/a" + itoa(i)), ACL: s3types.ObjectCannedACLPublicRead, Body: strings.NewReader("x")})
		if err == nil {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("the ACL grant allows 1 use; %d PutObject calls setting an ACL reached S3", n)
	}
	awsAtkRefused(t, "a second ACL header", err, "grant_exhausted")
}

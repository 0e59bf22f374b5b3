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
	reviewer := b.newToken("reviewer", "rita")
	var id string
	eventually(t, 20*time.Second, func() bool {
		var list struct {
			Items []struct {
				ID string `json:"id"`
			} `json:"items"`
		}
		_ = json.Unmarshal(b.do("GET", b.control+"/v1/approvals?status=pending", reviewer, nil).body, &list)
		if len(list.Items) == 1 {
			id = list.Items[0].ID
		}
		return id != ""
	})
	if r := b.do("POST", b.control+"/v1/approvals/"+id+"/deny", reviewer, map[string]any{"comment": "no"}); r.status != 200 {
		t.Fatalf("deny: %d %s", r.status, r.body)
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
		r := e.send(t, "s3", "PUT", e.b.sandbox+"/v1/aws/s3/reports/t-42/a.csv", http.Header{"X-Amz-Acl": {"public-read"}, "Prefer": {"wait=0"}}, "x")
		if r.status != http.StatusAccepted {
			t.Fatalf("PutObject with x-amz-acl under an approval: always ACL grant: %d %s, want 202 pending", r.status, r.body)
		}
		if n := len(e.s3.received()); n != 0 {
			t.Fatalf("the ACL change reached S3 without a reviewer")
		}
		// Without the header, the PutObject grant alone decides: not gated.
		if r := e.send(t, "s3", "PUT", e.b.sandbox+"/v1/aws/s3/reports/t-42/b.csv", nil, "x"); r.status != 200 {
			t.Fatalf("plain PutObject: %d %s", r.status, r.body)
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
	ddb := e.b.sandbox + "/v1/aws/ddb"
	target := http.Header{"X-Amz-Target": {"DynamoDB_20120810.GetItem"}, "Content-Type": {"application/x-amz-json-1.0"}}
	for _, path := range []string{"/service/DynamoDB/operation/DeleteTable", "/2015-03-31/functions/f/invocations", "/x"} {
		r := e.send(t, "dynamodb", "POST", ddb+path, target, `{"TableName":"t"}`)
		if r.status != 400 || r.header.Get("X-Airlock-Code") != "bad_request" {
			t.Errorf("POST %s with a granted X-Amz-Target: %d %s, want 400 bad_request", path, r.status, r.body)
		}
	}
	if n := len(e.other.requests()); n != 0 {
		t.Fatalf("%d path-routed requests reached the upstream", n)
	}
	if r := e.send(t, "dynamodb", "POST", ddb+"/", target, `{"TableName":"t"}`); r.status != 200 {
		t.Fatalf("the granted operation at /: %d %s", r.status, r.body)
	}
}

// A request that does not verify is refused as the SDK expects
// (SignatureDoesNotMatch) and audited with the same stable code.
func TestAWSBadSignatureAuditedAsInvalidToken(t *testing.T) {
	e := awsAtkStart(t, awsAtkPutOnlyGrant())
	e.secret = strings.Repeat("0", len(e.secret)) // the right access key, the wrong secret
	r := e.send(t, "s3", "GET", e.b.sandbox+"/v1/aws/s3/reports/t-42/a.csv", nil, "")
	if r.status != http.StatusForbidden || !strings.Contains(string(r.body), "SignatureDoesNotMatch") {
		t.Fatalf("a wrong signature: %d %s", r.status, r.body)
	}
	reqID := r.header.Get("X-Airlock-Request-Id")
	for _, rec := range parseAudit(t, e.b.auditExport()) {
		if rec.RequestID == reqID {
			if rec.Type != "call.denied" || rec.Code != "invalid_token" {
				t.Fatalf("audit of a wrong signature: %s %s, want call.denied invalid_token", rec.Type, rec.Code)
			}
			return
		}
	}
	t.Fatal("the refused request has no audit record")
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"strings"
)

// A gated call through the AWS door that a reviewer denies is answered in
// the protocol the SDK speaks (an S3 XML error carrying the Airlock code),
// not as a problem document the SDK cannot read.
func TestAWSGatedCallRefusalSpeaksS3(t *testing.T) {
	b, _, env := awsSession(t)
	r := b.do("POST", b.control+"/v1/sessions", adminToken, map[string]any{"task_id": "t-42", "untrusted_input": false, "isolation": "container",
		"grants": []any{map[string]any{"upstream": "s3", "approval": "always", "rules": []any{
			map[string]any{"action": "s3:PutObject", "resource": "arn:aws:s3:::reports/t-42/*"},
		}}}})
	var s struct {
		AWSCredentials struct {
			AccessKeyID     string `json:"access_key_id"`
			SecretAccessKey string `json:"secret_access_key"`
		} `json:"aws_credentials"`
	}
	if err := json.Unmarshal(r.body, &s); err != nil || r.status != 201 {
		t.Fatalf("gated aws session: %d %s", r.status, r.body)
	}
	c := s3.New(s3.Options{
		BaseEndpoint: aws.String(env["AWS_ENDPOINT_URL"]), Region: "us-east-1", UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(s.AWSCredentials.AccessKeyID, s.AWSCredentials.SecretAccessKey, ""),
	})
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

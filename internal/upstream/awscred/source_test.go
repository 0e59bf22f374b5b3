package awscred_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/upstream"
	"github.com/airlock-broker/airlock/internal/upstream/awscred"
	"github.com/airlock-broker/airlock/internal/upstream/sourcetest"
)

func TestDefaultChainSourceContract(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "CANARY-aws-chain")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	p, err := awscred.Default(context.Background(), "us-east-1")
	if err != nil {
		t.Fatal(err)
	}
	sourcetest.Run(t, sourcetest.Fixture{Src: upstream.AWSSource(p, "aws:default-chain"), Value: "CANARY-aws-chain"})
}

// TestAssumeRoleOnTopOfAnySource runs STS's AssumeRole against a fake STS on
// loopback (AWS itself cannot be reached here): the call is signed with the
// base keys, names the role, and its temporary keys are what the source serves.
func TestAssumeRoleOnTopOfAnySource(t *testing.T) {
	var gotAuth, gotBody string
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		gotAuth, gotBody = r.Header.Get("Authorization"), string(b)
		w.Header().Set("Content-Type", "text/xml")
		fmt.Fprintf(w, `<AssumeRoleResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><AssumeRoleResult>
<Credentials><AccessKeyId>ASIATEMP</AccessKeyId><SecretAccessKey>CANARY-temporary</SecretAccessKey><SessionToken>CANARY-session-token</SessionToken>
<Expiration>%s</Expiration></Credentials><AssumedRoleUser><Arn>arn:aws:sts::123456789012:assumed-role/r/airlock-broker</Arn><AssumedRoleId>AROA:airlock</AssumedRoleId></AssumedRoleUser>
</AssumeRoleResult><ResponseMetadata><RequestId>1</RequestId></ResponseMetadata></AssumeRoleResponse>`, time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	}))
	defer fake.Close()
	base := upstream.StaticAWSCredentials("AKIABASE", "CANARY-base")
	p := awscred.AssumeRole(base, "us-east-1", "arn:aws:iam::123456789012:role/r", fake.URL)
	sourcetest.Run(t, sourcetest.Fixture{Src: upstream.AWSSource(p, "aws:assume-role"), Value: "CANARY-temporary"})
	if !strings.Contains(gotAuth, "Credential=AKIABASE/") || !strings.Contains(gotBody, "RoleArn=arn%3Aaws%3Aiam%3A%3A123456789012%3Arole%2Fr") {
		t.Fatalf("STS call: auth %q body %q", gotAuth, gotBody)
	}
	c, err := p.Retrieve(context.Background())
	if err != nil || c.SessionToken != "CANARY-session-token" {
		t.Fatalf("temporary credentials: %+v %v", c.AccessKeyID, err)
	}
}

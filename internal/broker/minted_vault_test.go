package broker_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	vaultapi "github.com/hashicorp/vault/api"

	"github.com/airlock-broker/airlock/internal/broker"
	"github.com/airlock-broker/airlock/internal/brokertest"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/testvault"
	"github.com/airlock-broker/airlock/internal/upstream"
	"github.com/airlock-broker/airlock/internal/upstream/vault"
)

// fakeIAM is a loopback IAM and STS (AWS's query protocol) for Vault's AWS
// secrets engine: it keeps users, their keys and inline policies, issues
// keys and STS sessions, and records every action it was asked.
type fakeIAM struct {
	*httptest.Server
	mu      sync.Mutex
	actions []string
	keys    map[string]string // access key id → user
	n       int
}

func newFakeIAM(t *testing.T) *fakeIAM {
	f := &fakeIAM{keys: map[string]string{}}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeIAM) serve(w http.ResponseWriter, r *http.Request) {
	_ = r.ParseForm()
	action := r.PostForm.Get("Action")
	user := r.PostForm.Get("UserName")
	f.mu.Lock()
	defer f.mu.Unlock()
	f.actions = append(f.actions, action+" "+user+" "+r.PostForm.Get("AccessKeyId"))
	result := ""
	switch action {
	case "CreateUser":
		result = fmt.Sprintf(`<User><Path>/</Path><UserName>%s</UserName><UserId>AIDA%d</UserId><Arn>arn:aws:iam::123456789012:user/%s</Arn><CreateDate>2026-01-01T00:00:00Z</CreateDate></User>`, user, f.n, user)
	case "CreateAccessKey":
		f.n++
		id := fmt.Sprintf("AKIAVAULTKEY%08d", f.n) // IAM ids are 16+ characters
		f.keys[id] = user
		result = fmt.Sprintf(`<AccessKey><UserName>%s</UserName><AccessKeyId>%s</AccessKeyId><Status>Active</Status><SecretAccessKey>vault-iam-secret-%d</SecretAccessKey><CreateDate>2026-01-01T00:00:00Z</CreateDate></AccessKey>`, user, id, f.n)
	case "ListAccessKeys":
		result = "<AccessKeyMetadata>"
		for id, u := range f.keys {
			if u == user {
				result += fmt.Sprintf(`<member><UserName>%s</UserName><AccessKeyId>%s</AccessKeyId><Status>Active</Status></member>`, u, id)
			}
		}
		result += "</AccessKeyMetadata><IsTruncated>false</IsTruncated>"
	case "DeleteAccessKey":
		delete(f.keys, r.PostForm.Get("AccessKeyId"))
	case "ListGroupsForUser":
		result = "<Groups></Groups><IsTruncated>false</IsTruncated>"
	case "ListUserPolicies":
		result = "<PolicyNames><member>vault-policy</member></PolicyNames><IsTruncated>false</IsTruncated>"
	case "ListAttachedUserPolicies":
		result = "<AttachedPolicies></AttachedPolicies><IsTruncated>false</IsTruncated>"
	case "AssumeRole":
		f.n++
		secs, _ := strconv.Atoi(r.PostForm.Get("DurationSeconds"))
		result = fmt.Sprintf(`<Credentials><AccessKeyId>ASIAVAULTSTS%08d</AccessKeyId><SecretAccessKey>vault-sts-secret-%d</SecretAccessKey><SessionToken>vault-sts-token-%d</SessionToken><Expiration>%s</Expiration></Credentials><AssumedRoleUser><Arn>arn:aws:sts::123456789012:assumed-role/r/s</Arn><AssumedRoleId>AROA:s</AssumedRoleId></AssumedRoleUser>`,
			f.n, f.n, f.n, time.Now().Add(time.Duration(secs)*time.Second).UTC().Format(time.RFC3339))
	case "PutUserPolicy", "DeleteUserPolicy", "DeleteUser", "TagUser":
	default:
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `<ErrorResponse><Error><Type>Sender</Type><Code>InvalidAction</Code><Message>fake: %s</Message></Error><RequestId>1</RequestId></ErrorResponse>`, action)
		return
	}
	w.Header().Set("Content-Type", "text/xml")
	fmt.Fprintf(w, `<%sResponse><%sResult>%s</%sResult><ResponseMetadata><RequestId>1</RequestId></ResponseMetadata></%sResponse>`, action, action, result, action, action)
}

func (f *fakeIAM) asked(prefix string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range f.actions {
		if strings.HasPrefix(a, prefix) {
			return true
		}
	}
	return false
}

// vaultAWS starts the real Vault dev server with the AWS engine at aws/,
// its IAM and STS endpoints the loopback fake, and a role of credType.
func vaultAWS(t *testing.T, fake *fakeIAM, credType string) (*testvault.Server, *vault.Client) {
	v := testvault.Start(t, "root-token-mint")
	c := v.Client()
	if err := c.Sys().Mount("aws", &vaultapi.MountInput{Type: "aws"}); err != nil {
		t.Skipf("the Vault dev server has no AWS engine (rebuild it: scripts/deps.sh): %v", err)
	}
	write := func(path string, data map[string]any) {
		t.Helper()
		if _, err := c.Logical().Write(path, data); err != nil {
			t.Fatalf("vault write %s: %v", path, err)
		}
	}
	write("aws/config/root", map[string]any{"access_key": "AKIAROOT", "secret_key": "root-secret", "region": "us-east-1",
		"iam_endpoint": fake.URL, "sts_endpoint": fake.URL, "max_retries": 0})
	write("aws/config/lease", map[string]any{"lease": "60s", "lease_max": "10m"})
	policy := `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["s3:GetObject"],"Resource":["arn:aws:s3:::reports/*"]}]}`
	if credType == "sts" {
		write("aws/roles/reports", map[string]any{"credential_type": "assumed_role", "role_arns": "arn:aws:iam::123456789012:role/reports", "max_sts_ttl": "1h"})
	} else {
		write("aws/roles/reports", map[string]any{"credential_type": "iam_user", "policy_document": policy})
	}
	vc, err := vault.New(vault.Config{Address: v.Addr, Auth: vault.Auth{Method: "token", Token: v.Token}}, brokertest.Discard())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(vc.Close)
	return v, vc
}

func s3Contract(m upstream.Minter, gone func(context.Context, upstream.Lease) bool) brokertest.MinterContract {
	return brokertest.MinterContract{
		Minter: m, Start: time.Now(),
		Upstream: func(base *url.URL) *upstream.Upstream {
			return &upstream.Upstream{Name: "s3", Kind: "aws", BaseURL: base, Timeout: 10 * time.Second, RotationGrace: time.Hour,
				AWS: &upstream.AWS{Service: "s3", Region: "us-east-1"}}
		},
		Grant:  grants.Spec{Upstream: "s3", Rules: []grants.Rule{{Action: "s3:GetObject", Resource: "arn:aws:s3:::reports/*"}}},
		Grant2: grants.Spec{Upstream: "s3", Rules: []grants.Rule{{Action: "s3:ListBucket", Resource: "arn:aws:s3:::reports"}}},
		Request: func() *broker.Request {
			return &broker.Request{Call: grants.Call{Method: "GET", Action: "s3:GetObject", Resource: "arn:aws:s3:::reports/q1.csv", Header: http.Header{}},
				AWS: &broker.AWSCall{Path: "/reports/q1.csv"}}
		},
		Gone: gone,
	}
}

// Vault's AWS engine (IAM user keys) in the real Vault dev server runs the
// lifecycle contract: leased keys minted per session, renewed through
// sys/leases/renew, revoked through sys/leases/revoke when the session is
// killed, expires or the kill-switch is engaged, which deletes the keys at
// IAM (the loopback fake saw DeleteAccessKey and DeleteUser).
func TestMinterContractVaultAWSCreds(t *testing.T) {
	fake := newFakeIAM(t)
	v, vc := vaultAWS(t, fake, "creds")
	m, err := vc.AWSEngine("aws", "reports", "creds")
	if err != nil {
		t.Fatal(err)
	}
	root := v.Client()
	s3Contract(m, func(ctx context.Context, l upstream.Lease) bool {
		_, err := root.Logical().WriteWithContext(ctx, "sys/leases/lookup", map[string]any{"lease_id": l.ID})
		return err != nil && fake.asked("DeleteAccessKey") && !fake.hasKey(l.AWS.AccessKeyID)
	}).Run(t)
	for _, a := range []string{"CreateUser", "PutUserPolicy", "CreateAccessKey", "DeleteAccessKey", "DeleteUser"} {
		if !fake.asked(a) {
			t.Errorf("IAM was never asked %s", a)
		}
	}
}

// The engine's STS credentials (not renewable: minted anew) run the same
// contract; their leases are revoked in Vault.
func TestMinterContractVaultAWSSTS(t *testing.T) {
	fake := newFakeIAM(t)
	v, vc := vaultAWS(t, fake, "sts")
	m, err := vc.AWSEngine("aws", "reports", "sts")
	if err != nil {
		t.Fatal(err)
	}
	root := v.Client()
	s3Contract(m, func(ctx context.Context, l upstream.Lease) bool {
		_, err := root.Logical().WriteWithContext(ctx, "sys/leases/lookup", map[string]any{"lease_id": l.ID})
		return err != nil
	}).Run(t)
	if !fake.asked("AssumeRole") {
		t.Error("STS was never asked AssumeRole")
	}
}

func (f *fakeIAM) hasKey(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.keys[id]
	return ok
}

// A vault_aws minter logged in by AppRole whose Vault token is revoked (or
// expired) logs in again on the 403 and mints, renews and revokes as
// before, like the KV source: a lost login does not fail every session's
// credential until some other read happens to log in.
func TestVaultAWSLogsInAgainAfterA403(t *testing.T) {
	fake := newFakeIAM(t)
	v, _ := vaultAWS(t, fake, "creds")
	root := v.Client()
	write := func(path string, data map[string]any) *vaultapi.Secret {
		t.Helper()
		s, err := root.Logical().Write(path, data)
		if err != nil {
			t.Fatalf("vault write %s: %v", path, err)
		}
		return s
	}
	if err := root.Sys().EnableAuthWithOptions("approle", &vaultapi.EnableAuthOptions{Type: "approle"}); err != nil && !strings.Contains(err.Error(), "already in use") {
		t.Fatal(err)
	}
	if err := root.Sys().PutPolicy("minter", `path "aws/creds/reports" { capabilities = ["read"] }
path "sys/leases/renew" { capabilities = ["update"] }
path "sys/leases/revoke" { capabilities = ["update"] }`); err != nil {
		t.Fatal(err)
	}
	write("auth/approle/role/broker", map[string]any{"token_policies": "minter", "token_ttl": "1h"})
	roleID, err := root.Logical().Read("auth/approle/role/broker/role-id")
	if err != nil {
		t.Fatal(err)
	}
	secretID := write("auth/approle/role/broker/secret-id", nil)
	vc, err := vault.New(vault.Config{Address: v.Addr, Auth: vault.Auth{Method: "approle",
		RoleID: roleID.Data["role_id"].(string), SecretID: secretID.Data["secret_id"].(string)}}, brokertest.Discard())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(vc.Close)
	m, err := vc.AWSEngine("aws", "reports", "creds")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sc := upstream.Scope{SessionID: "ses_1", Upstream: "s3", Now: time.Now(), Expires: time.Now().Add(time.Hour),
		Rules: []grants.Rule{{Action: "s3:GetObject", Resource: "arn:aws:s3:::reports/*"}}}
	first, err := m.Mint(ctx, sc)
	if err != nil {
		t.Fatal(err)
	}
	// Every token AppRole issued is revoked: the broker's login is gone.
	if _, err := root.Logical().Write("sys/leases/revoke-prefix/auth/approle/login", nil); err != nil {
		t.Fatal(err)
	}
	second, err := m.Mint(ctx, sc)
	if err != nil {
		t.Fatalf("mint after the login was revoked: %v", err)
	}
	if _, err := m.Renew(ctx, sc, second); err != nil {
		t.Fatalf("renew after a new login: %v", err)
	}
	for _, l := range []upstream.Lease{first, second} {
		if err := m.Revoke(ctx, l); err != nil {
			t.Fatalf("revoke: %v", err)
		}
	}
}

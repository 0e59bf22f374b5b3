package config

import (
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/airlock-broker/airlock/internal/fault"
	"github.com/airlock-broker/airlock/internal/upstream"
)

const awsHead = "admin_token: ${ADMIN}\nvault: {address: http://127.0.0.1:8200, auth: {method: token, token: t}}\nupstreams:\n  - name: s3\n    type: aws\n    service: s3\n    region: us-east-1\n"

// vault_aws and assume_role scope_to_grant make minted upstreams: their
// Minter set, their Source one that never fetches without a session.
func TestMintedSourcesConfig(t *testing.T) {
	getenv := env(map[string]string{"ADMIN": "0123456789abcdef0", "AK": "AKIABASE", "SK": "base-secret"})
	for _, tc := range []struct {
		name, credential, describe string
	}{
		{"vault_aws creds, mount defaulted", "{source: vault_aws, role: reports}", "vault_aws:aws/creds/reports"},
		{"vault_aws sts", "{source: vault_aws, mount: aws-prod, role: reports, type: sts}", "vault_aws:aws-prod/sts/reports"},
		{"assume_role scoped to the grant", "{source: env, access_key_name: AK, secret_key_name: SK, assume_role: {role_arn: 'arn:aws:iam::123456789012:role/r', scope_to_grant: true, max_duration: 2h}}",
			"aws:env assume arn:aws:iam::123456789012:role/r scoped to grant"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(awsHead+"    credential: "+tc.credential+"\n"), getenv)
			if err != nil {
				t.Fatal(err)
			}
			ups, v, err := c.Build(getenv, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err != nil {
				t.Fatal(err)
			}
			if v != nil {
				defer v.Close()
			}
			u := ups["s3"]
			if u.Minter == nil || u.Minter.Describe() != tc.describe || u.Source.Describe() != tc.describe {
				t.Fatalf("minter %v", u.Minter)
			}
			if _, err := u.Source.Fetch(t.Context()); !errors.Is(err, upstream.ErrCredentialUnavailable) {
				t.Fatalf("a minted source fetched without a session: %v", err)
			}
		})
	}
	// Without scope_to_grant, assume_role stays the shared cached credential.
	c, err := Parse([]byte(awsHead+"    credential: {source: env, access_key_name: AK, secret_key_name: SK, assume_role: {role_arn: 'arn:aws:iam::123456789012:role/r'}}\n"), getenv)
	if err != nil {
		t.Fatal(err)
	}
	ups, _, err := c.Build(getenv, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil || ups["s3"].Minter != nil || ups["s3"].AWS.Creds == nil {
		t.Fatalf("plain assume_role: %v", err)
	}
}

func TestMintedSourcesConfigErrors(t *testing.T) {
	admin := env(map[string]string{"ADMIN": "0123456789abcdef0"})
	for _, tc := range []struct{ name, yaml, field string }{
		{"vault_aws without vault", strings.Replace(awsHead, "vault: {address: http://127.0.0.1:8200, auth: {method: token, token: t}}\n", "", 1) + "    credential: {source: vault_aws, role: r}\n", "upstreams[0].credential.source"},
		{"vault_aws without role", awsHead + "    credential: {source: vault_aws}\n", "upstreams[0].credential.role"},
		{"vault_aws bad type", awsHead + "    credential: {source: vault_aws, role: r, type: federation}\n", "upstreams[0].credential.type"},
		{"vault_aws with assume_role", awsHead + "    credential: {source: vault_aws, role: r, assume_role: {role_arn: 'arn:aws:iam::1:role/r'}}\n", "upstreams[0].credential.assume_role"},
		{"scope_to_grant without role", awsHead + "    credential: {source: aws, assume_role: {scope_to_grant: true}}\n", "upstreams[0].credential.assume_role.scope_to_grant"},
		{"max_duration past STS's", awsHead + "    credential: {source: aws, assume_role: {role_arn: 'arn:aws:iam::1:role/r', scope_to_grant: true, max_duration: 13h}}\n", "upstreams[0].credential.assume_role.max_duration"},
		{"vault_aws on an http upstream", "admin_token: ${ADMIN}\nvault: {address: http://127.0.0.1:8200, auth: {method: token, token: t}}\nupstreams:\n  - name: gh\n    base_url: https://api.github.com\n    credential: {source: vault_aws, role: r}\n", "upstreams[0].credential.source"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml), admin)
			var fe *fault.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field {
				t.Fatalf("err = %v, want field %s", err, tc.field)
			}
		})
	}
}

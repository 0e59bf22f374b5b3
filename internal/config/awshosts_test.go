package config

import (
	"io"
	"log/slog"
	"strings"
	"testing"
)

// TestAWSProxyHosts: an aws upstream's hosts default to the AWS names of
// its service and region (not its endpoint's host); explicit hosts replace
// them; two upstreams of one service and region claim the same defaults,
// so neither gets them.
func TestAWSProxyHosts(t *testing.T) {
	getenv := env(map[string]string{"ADMIN": "0123456789abcdef0", "AK": "AKIA0000", "SK": "secret"})
	aws := func(name, service, region, extra string) string {
		return "  - name: " + name + "\n    type: aws\n    service: " + service + "\n    region: " + region +
			"\n    endpoint: http://127.0.0.1:9000\n    credential: {source: env, access_key_name: AK, secret_key_name: SK}\n" + extra
	}
	hostsOf := func(t *testing.T, yaml string) map[string]string {
		t.Helper()
		c, err := Parse([]byte("admin_token: ${ADMIN}\nproxy_listen: 127.0.0.1:0\nupstreams:\n"+yaml), getenv)
		if err != nil {
			t.Fatal(err)
		}
		ups, _, err := c.Build(getenv, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for name, u := range ups {
			var hs []string
			for _, h := range u.Hosts {
				hs = append(hs, h.String())
			}
			out[name] = strings.Join(hs, ",")
		}
		return out
	}
	tests := []struct {
		name string
		yaml string
		want map[string]string
	}{
		{name: "s3 defaults", yaml: aws("reports", "s3", "eu-west-1", ""), want: map[string]string{"reports": "s3.eu-west-1.amazonaws.com,*.s3.eu-west-1.amazonaws.com," +
			"s3.dualstack.eu-west-1.amazonaws.com,*.s3.dualstack.eu-west-1.amazonaws.com,s3-fips.eu-west-1.amazonaws.com,*.s3-fips.eu-west-1.amazonaws.com," +
			"s3-fips.dualstack.eu-west-1.amazonaws.com,*.s3-fips.dualstack.eu-west-1.amazonaws.com"}},
		{name: "dynamodb defaults", yaml: aws("db", "dynamodb", "eu-west-1", ""), want: map[string]string{"db": "dynamodb.eu-west-1.amazonaws.com,dynamodb.eu-west-1.api.aws," +
			"dynamodb-fips.eu-west-1.amazonaws.com,dynamodb-fips.eu-west-1.api.aws"}},
		{name: "explicit hosts", yaml: aws("mail", "ses", "eu-west-1", "    hosts: [email.eu-west-1.amazonaws.com]\n"), want: map[string]string{"mail": "email.eu-west-1.amazonaws.com"}},
		{name: "two upstreams of one service and region", yaml: aws("a", "s3", "eu-west-1", "") + aws("b", "s3", "eu-west-1", ""), want: map[string]string{"a": "", "b": ""}},
		{name: "one of two named explicitly", yaml: aws("a", "s3", "eu-west-1", "") + aws("b", "s3", "eu-west-1", "    hosts: [s3.eu-west-1.amazonaws.com, \"*.s3.eu-west-1.amazonaws.com\"]\n"),
			want: map[string]string{"a": "s3.dualstack.eu-west-1.amazonaws.com,*.s3.dualstack.eu-west-1.amazonaws.com,s3-fips.eu-west-1.amazonaws.com,*.s3-fips.eu-west-1.amazonaws.com," +
				"s3-fips.dualstack.eu-west-1.amazonaws.com,*.s3-fips.dualstack.eu-west-1.amazonaws.com", "b": "s3.eu-west-1.amazonaws.com,*.s3.eu-west-1.amazonaws.com"}},
		{name: "other services do not collide", yaml: aws("a", "s3", "eu-west-1", "") + aws("b", "sqs", "eu-west-1", ""), want: map[string]string{
			"a": "s3.eu-west-1.amazonaws.com,*.s3.eu-west-1.amazonaws.com,s3.dualstack.eu-west-1.amazonaws.com,*.s3.dualstack.eu-west-1.amazonaws.com," +
				"s3-fips.eu-west-1.amazonaws.com,*.s3-fips.eu-west-1.amazonaws.com,s3-fips.dualstack.eu-west-1.amazonaws.com,*.s3-fips.dualstack.eu-west-1.amazonaws.com",
			"b": "sqs.eu-west-1.amazonaws.com,sqs.eu-west-1.api.aws,sqs-fips.eu-west-1.amazonaws.com,sqs-fips.eu-west-1.api.aws"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := hostsOf(t, tt.yaml)
			for name, want := range tt.want {
				if got[name] != want {
					t.Errorf("%s hosts:\n got %s\nwant %s", name, got[name], want)
				}
			}
		})
	}
}

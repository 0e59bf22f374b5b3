package upstream

import (
	"errors"
	"testing"

	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/google/go-cmp/cmp"
)

func TestAWSHosts(t *testing.T) {
	tests := []struct {
		name            string
		service, region string
		want            []string
	}{
		{name: "s3 us-east-1", service: "s3", region: "us-east-1", want: []string{
			"s3.us-east-1.amazonaws.com", "*.s3.us-east-1.amazonaws.com",
			"s3.dualstack.us-east-1.amazonaws.com", "*.s3.dualstack.us-east-1.amazonaws.com",
			"s3-fips.us-east-1.amazonaws.com", "*.s3-fips.us-east-1.amazonaws.com",
			"s3-fips.dualstack.us-east-1.amazonaws.com", "*.s3-fips.dualstack.us-east-1.amazonaws.com",
			"s3.amazonaws.com", "*.s3.amazonaws.com"}},
		{name: "s3 eu-west-1", service: "s3", region: "eu-west-1", want: []string{
			"s3.eu-west-1.amazonaws.com", "*.s3.eu-west-1.amazonaws.com",
			"s3.dualstack.eu-west-1.amazonaws.com", "*.s3.dualstack.eu-west-1.amazonaws.com",
			"s3-fips.eu-west-1.amazonaws.com", "*.s3-fips.eu-west-1.amazonaws.com",
			"s3-fips.dualstack.eu-west-1.amazonaws.com", "*.s3-fips.dualstack.eu-west-1.amazonaws.com"}},
		{name: "s3 china", service: "s3", region: "cn-north-1", want: []string{
			"s3.cn-north-1.amazonaws.com.cn", "*.s3.cn-north-1.amazonaws.com.cn",
			"s3.dualstack.cn-north-1.amazonaws.com.cn", "*.s3.dualstack.cn-north-1.amazonaws.com.cn",
			"s3-fips.cn-north-1.amazonaws.com.cn", "*.s3-fips.cn-north-1.amazonaws.com.cn",
			"s3-fips.dualstack.cn-north-1.amazonaws.com.cn", "*.s3-fips.dualstack.cn-north-1.amazonaws.com.cn"}},
		{name: "sts us-east-1", service: "sts", region: "us-east-1", want: []string{
			"sts.us-east-1.amazonaws.com", "sts.us-east-1.api.aws", "sts-fips.us-east-1.amazonaws.com", "sts-fips.us-east-1.api.aws",
			"sts.amazonaws.com"}},
		{name: "dynamodb china", service: "dynamodb", region: "cn-north-1", want: []string{
			"dynamodb.cn-north-1.amazonaws.com.cn", "dynamodb.cn-north-1.api.amazonwebservices.com.cn",
			"dynamodb-fips.cn-north-1.amazonaws.com.cn", "dynamodb-fips.cn-north-1.api.amazonwebservices.com.cn"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := &AWS{Service: tt.service, Region: tt.region}
			if diff := cmp.Diff(tt.want, a.Hosts()); diff != "" {
				t.Errorf("Hosts() (-want +got):\n%s", diff)
			}
			// Every exact name is matched, and every pattern with a bucket label.
			for _, h := range a.Hosts() {
				if h[0] == '*' {
					h = "reports" + h[1:]
				}
				if !a.MatchHost(h) {
					t.Errorf("MatchHost(%q) = false for a name Hosts lists", h)
				}
			}
		})
	}
}

func TestAWSPathStyle(t *testing.T) {
	s3East := &AWS{Service: "s3", Region: "us-east-1"}
	s3West := &AWS{Service: "s3", Region: "eu-west-1"}
	sts := &AWS{Service: "sts", Region: "eu-west-1"}
	stsEast := &AWS{Service: "sts", Region: "us-east-1"}
	tests := []struct {
		name    string
		aws     *AWS
		host    string
		path    string
		want    string
		wantErr bool
	}{
		// What the SDK sends (see awshost.go).
		{name: "virtual-hosted object", aws: s3East, host: "reports.s3.us-east-1.amazonaws.com", path: "/t-42/a.csv", want: "/reports/t-42/a.csv"},
		{name: "virtual-hosted escaped key", aws: s3East, host: "reports.s3.us-east-1.amazonaws.com", path: "/t-42/a%20b.csv", want: "/reports/t-42/a%20b.csv"},
		{name: "virtual-hosted bucket", aws: s3East, host: "reports.s3.us-east-1.amazonaws.com", path: "/", want: "/reports"},
		{name: "virtual-hosted empty path", aws: s3East, host: "reports.s3.us-east-1.amazonaws.com", path: "", want: "/reports"},
		{name: "virtual-hosted folder key", aws: s3East, host: "reports.s3.us-east-1.amazonaws.com", path: "/t-42/", want: "/reports/t-42/"},
		{name: "virtual-hosted global", aws: s3East, host: "reports.s3.amazonaws.com", path: "/k", want: "/reports/k"},
		{name: "virtual-hosted dualstack", aws: s3East, host: "reports.s3.dualstack.us-east-1.amazonaws.com", path: "/k", want: "/reports/k"},
		{name: "virtual-hosted fips", aws: s3West, host: "reports.s3-fips.eu-west-1.amazonaws.com", path: "/k", want: "/reports/k"},
		{name: "virtual-hosted fips dualstack", aws: s3West, host: "reports.s3-fips.dualstack.eu-west-1.amazonaws.com", path: "/k", want: "/reports/k"},
		{name: "virtual-hosted bucket named like a region", aws: s3East, host: "us-east-1.s3.amazonaws.com", path: "/k", want: "/us-east-1/k"},
		{name: "virtual-hosted bucket named s3", aws: s3West, host: "s3x.s3.eu-west-1.amazonaws.com", path: "/k", want: "/s3x/k"},
		{name: "path-style", aws: s3East, host: "s3.us-east-1.amazonaws.com", path: "/my.dotted.bucket/k", want: "/my.dotted.bucket/k"},
		{name: "path-style legacy bucket", aws: s3East, host: "s3.us-east-1.amazonaws.com", path: "/Upper_Case/k", want: "/Upper_Case/k"},
		{name: "path-style global", aws: s3East, host: "s3.amazonaws.com", path: "/reports/k", want: "/reports/k"},
		{name: "path-style dualstack", aws: s3West, host: "s3.dualstack.eu-west-1.amazonaws.com", path: "/reports", want: "/reports"},
		{name: "path-style list buckets", aws: s3West, host: "s3.eu-west-1.amazonaws.com", path: "/", want: "/"},
		{name: "host case folds", aws: s3East, host: "reports.S3.US-EAST-1.AMAZONAWS.COM", path: "/k", want: "/reports/k"},
		{name: "path-style host case folds", aws: s3East, host: "S3.Us-East-1.AmazonAWS.com", path: "/reports/k", want: "/reports/k"},
		{name: "a path on a virtual host is a key", aws: s3East, host: "reports.s3.us-east-1.amazonaws.com", path: "/other/k", want: "/reports/other/k"},
		{name: "sts regional", aws: sts, host: "sts.eu-west-1.amazonaws.com", path: "/", want: "/"},
		{name: "sts fips", aws: sts, host: "sts-fips.eu-west-1.amazonaws.com", path: "/", want: "/"},
		{name: "sts dualstack", aws: sts, host: "sts.eu-west-1.api.aws", path: "/", want: "/"},
		{name: "sts global", aws: stsEast, host: "sts.amazonaws.com", path: "/", want: "/"},
		{name: "non-s3 keeps its path", aws: sts, host: "sts.eu-west-1.amazonaws.com", path: "/x", want: "/x"},

		// Hostile hosts.
		{name: "fail-suffix-appended", aws: s3East, host: "evil.com.s3.amazonaws.com.attacker", path: "/k", wantErr: true},
		{name: "fail-suffix-appended-regional", aws: s3East, host: "reports.s3.us-east-1.amazonaws.com.evil.com", path: "/k", wantErr: true},
		{name: "fail-dotted-label", aws: s3East, host: "evil.com.s3.amazonaws.com", path: "/k", wantErr: true},
		{name: "fail-dotted-label-regional", aws: s3East, host: "a.reports.s3.us-east-1.amazonaws.com", path: "/k", wantErr: true},
		{name: "fail-uppercase-bucket", aws: s3East, host: "Reports.s3.us-east-1.amazonaws.com", path: "/k", wantErr: true},
		{name: "fail-trailing-dot", aws: s3East, host: "reports.s3.us-east-1.amazonaws.com.", path: "/k", wantErr: true},
		{name: "fail-trailing-dot-path-style", aws: s3East, host: "s3.us-east-1.amazonaws.com.", path: "/reports/k", wantErr: true},
		{name: "fail-dot-dot-label", aws: s3East, host: "..s3.us-east-1.amazonaws.com", path: "/k", wantErr: true},
		{name: "fail-empty-label", aws: s3East, host: ".s3.us-east-1.amazonaws.com", path: "/k", wantErr: true},
		{name: "fail-double-dot", aws: s3East, host: "reports..s3.us-east-1.amazonaws.com", path: "/k", wantErr: true},
		{name: "fail-dot-dot-suffix", aws: s3East, host: "reports.s3..us-east-1.amazonaws.com", path: "/k", wantErr: true},
		{name: "fail-other-region", aws: s3East, host: "reports.s3.eu-west-1.amazonaws.com", path: "/k", wantErr: true},
		{name: "fail-global-outside-us-east-1", aws: s3West, host: "reports.s3.amazonaws.com", path: "/k", wantErr: true},
		{name: "fail-other-service", aws: s3East, host: "sts.us-east-1.amazonaws.com", path: "/", wantErr: true},
		{name: "fail-s3-host-on-sts", aws: sts, host: "s3.eu-west-1.amazonaws.com", path: "/", wantErr: true},
		{name: "fail-bucket-on-sts", aws: sts, host: "reports.sts.eu-west-1.amazonaws.com", path: "/", wantErr: true},
		{name: "fail-accelerate", aws: s3East, host: "reports.s3-accelerate.amazonaws.com", path: "/k", wantErr: true},
		{name: "fail-port", aws: s3East, host: "reports.s3.us-east-1.amazonaws.com:443", path: "/k", wantErr: true},
		{name: "fail-userinfo", aws: s3East, host: "evil@reports.s3.us-east-1.amazonaws.com", path: "/k", wantErr: true},
		{name: "fail-percent", aws: s3East, host: "rep%6Frts.s3.us-east-1.amazonaws.com", path: "/k", wantErr: true},
		{name: "fail-underscore-label", aws: s3East, host: "my_bucket.s3.us-east-1.amazonaws.com", path: "/k", wantErr: true},
		{name: "fail-short-label", aws: s3East, host: "ab.s3.us-east-1.amazonaws.com", path: "/k", wantErr: true},
		{name: "fail-long-label", aws: s3East, host: "a234567890123456789012345678901234567890123456789012345678901234.s3.us-east-1.amazonaws.com", path: "/k", wantErr: true},
		{name: "fail-leading-hyphen", aws: s3East, host: "-reports.s3.us-east-1.amazonaws.com", path: "/k", wantErr: true},
		{name: "fail-trailing-hyphen", aws: s3East, host: "reports-.s3.us-east-1.amazonaws.com", path: "/k", wantErr: true},
		{name: "fail-idn-label", aws: s3East, host: "xn--rports-8ua.s3.us-east-1.amazonaws.com", path: "/k", wantErr: true},
		{name: "fail-nul", aws: s3East, host: "reports\x00.s3.us-east-1.amazonaws.com", path: "/k", wantErr: true},
		{name: "fail-empty-host", aws: s3East, host: "", path: "/k", wantErr: true},
		{name: "fail-bare-suffix", aws: s3East, host: "amazonaws.com", path: "/k", wantErr: true},
		{name: "fail-ip", aws: s3East, host: "169.254.169.254", path: "/", wantErr: true},
		{name: "fail-relative-path", aws: s3East, host: "reports.s3.us-east-1.amazonaws.com", path: "k", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.aws.PathStyle(tt.host, tt.path)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("PathStyle(%q, %q) = %q, want an error", tt.host, tt.path, got)
				}
				if !errors.Is(err, ErrAWSOperation) || !errors.Is(err, grants.ErrBadRequest) {
					t.Errorf("error %v is not an ErrAWSOperation", err)
				}
				if tt.path == "/k" && tt.aws.MatchHost(tt.host) {
					t.Errorf("MatchHost(%q) = true", tt.host)
				}
				return
			}
			if err != nil {
				t.Fatalf("PathStyle(%q, %q): %v", tt.host, tt.path, err)
			}
			if got != tt.want {
				t.Errorf("PathStyle(%q, %q) = %q, want %q", tt.host, tt.path, got, tt.want)
			}
			if !tt.aws.MatchHost(tt.host) {
				t.Errorf("MatchHost(%q) = false", tt.host)
			}
		})
	}
}

// The operation map sees the path-style request: a virtual-hosted request
// names the same action and resource as its path-style twin.
func TestAWSPathStyleOperation(t *testing.T) {
	a := &AWS{Service: "s3", Region: "us-east-1"}
	for _, tt := range []struct{ method, host, path, action, resource string }{
		{"PUT", "reports.s3.us-east-1.amazonaws.com", "/t-42/a.csv", "s3:PutObject", "arn:aws:s3:::reports/t-42/a.csv"},
		{"GET", "reports.s3.us-east-1.amazonaws.com", "/", "s3:ListBucket", "arn:aws:s3:::reports"},
		{"GET", "s3.us-east-1.amazonaws.com", "/", "s3:ListAllMyBuckets", "*"},
	} {
		rest, err := a.PathStyle(tt.host, tt.path)
		if err != nil {
			t.Fatal(err)
		}
		op, err := a.Operation(AWSRequest{Method: tt.method, Path: rest})
		if err != nil {
			t.Fatalf("%s %s%s: %v", tt.method, tt.host, tt.path, err)
		}
		if op.Action != tt.action || op.Resource != tt.resource {
			t.Errorf("%s %s%s = %s %s, want %s %s", tt.method, tt.host, tt.path, op.Action, op.Resource, tt.action, tt.resource)
		}
	}
	// A virtual-hosted key with a dot segment is refused like its path-style twin.
	rest, err := a.PathStyle("reports.s3.us-east-1.amazonaws.com", "/../other/k")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Operation(AWSRequest{Method: "GET", Path: rest}); !errors.Is(err, ErrAWSOperation) {
		t.Errorf("dot segment through a virtual host: %v, want ErrAWSOperation", err)
	}
}

func BenchmarkAWSPathStyle(b *testing.B) {
	a := &AWS{Service: "s3", Region: "us-east-1"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.PathStyle("s3.us-east-1.amazonaws.com", "/reports/t-42/a.csv"); err != nil {
			b.Fatal(err)
		}
	}
}

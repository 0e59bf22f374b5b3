package grants

import (
	"errors"
	"net/http"
	"testing"
	"time"
)

func awsKind(name string) (string, bool) { return "aws", name == "s3" }

func mustAWSLive(tb testing.TB, spec Spec, exp time.Time) *Live {
	tb.Helper()
	if err := Validate("grant", &spec, awsKind, time.Hour); err != nil {
		tb.Fatalf("Validate: %v", err)
	}
	l, err := Compile(Grant{ID: "g1", SessionID: "s1", Spec: spec, CreatedAt: t0, ExpiresAt: exp}, Usage{})
	if err != nil {
		tb.Fatalf("Compile: %v", err)
	}
	return l
}

func TestPermit(t *testing.T) {
	spec := Spec{Upstream: "s3", MaxUses: 1, Rules: []Rule{
		{Action: "s3:PutObject", Resource: "arn:aws:s3:::reports/t-42/*"},
		{Action: "s3:PutObjectAcl", Resource: "arn:aws:s3:::reports/t-42/*", Constraints: map[string]Constraint{
			"header.x-amz-acl": {OneOf: []any{"private"}}}},
		{Action: "s3:PutObjectTagging", Resource: "arn:aws:s3:::reports/t-42/*", Constraints: map[string]Constraint{
			"header.x-amz-storage-class": {Pin: "STANDARD"}}},
	}}
	live := mustAWSLive(t, spec, t0.Add(time.Hour))
	call := func(action, resource string, h http.Header) *Call {
		return &Call{Method: "PUT", Action: action, Resource: resource, Header: h}
	}
	obj := "arn:aws:s3:::reports/t-42/a.csv"
	// The grant's one use is taken by the call itself: Permit must not need it.
	d, err := Evaluate(t0, []*Live{live}, "s3", call("s3:PutObject", obj, http.Header{}))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Release()
	tests := []struct {
		name string
		c    *Call
		live []*Live
		want error
	}{
		{"allowed, constraint met", call("s3:PutObjectAcl", obj, http.Header{"X-Amz-Acl": {"private"}}), []*Live{live}, nil},
		{"constraint broken", call("s3:PutObjectAcl", obj, http.Header{"X-Amz-Acl": {"public-read"}}), []*Live{live}, ErrConstraintViolated},
		{"pin present", call("s3:PutObjectTagging", obj, http.Header{"X-Amz-Storage-Class": {"STANDARD"}}), []*Live{live}, nil},
		{"pin absent is never filled", call("s3:PutObjectTagging", obj, http.Header{}), []*Live{live}, ErrConstraintViolated},
		{"other resource", call("s3:PutObjectAcl", "arn:aws:s3:::secret/a.csv", http.Header{"X-Amz-Acl": {"private"}}), []*Live{live}, ErrNoMatchingGrant},
		{"other action", call("s3:PutObjectRetention", obj, http.Header{}), []*Live{live}, ErrNoMatchingGrant},
		{"expired grant", call("s3:PutObjectAcl", obj, http.Header{"X-Amz-Acl": {"private"}}), []*Live{mustAWSLive(t, spec, t0)}, ErrGrantExpired},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Permit(t0, tt.live, "s3", tt.c, live)
			if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("Permit = %v, want %v", err, tt.want)
			}
		})
	}
	if u := live.Usage(); u.Uses != 1 {
		t.Fatalf("Permit changed the grant's uses: %d, want 1", u.Uses)
	}
	revoked := mustAWSLive(t, spec, t0.Add(time.Hour))
	revoked.Revoke()
	if _, err := Permit(t0, []*Live{revoked}, "s3", call("s3:PutObjectAcl", obj, http.Header{"X-Amz-Acl": {"private"}}), nil); !errors.Is(err, ErrNoMatchingGrant) {
		t.Fatalf("a revoked grant: %v", err)
	}
	// Another grant that limits its uses permits nothing (it could not count
	// the call), even with uses left.
	fresh := mustAWSLive(t, spec, t0.Add(time.Hour))
	if _, err := Permit(t0, []*Live{fresh}, "s3", call("s3:PutObjectAcl", obj, http.Header{"X-Amz-Acl": {"private"}}), live); !errors.Is(err, ErrGrantExhausted) {
		t.Fatalf("a use-limited grant that does not hold the call: %v", err)
	}
	// An unlimited one does; the permitting decision carries its rule for the
	// gate, and releasing it gives nothing back.
	unlimited := spec
	unlimited.MaxUses = 0
	other := mustAWSLive(t, unlimited, t0.Add(time.Hour))
	pd, err := Permit(t0, []*Live{other}, "s3", call("s3:PutObjectAcl", obj, http.Header{"X-Amz-Acl": {"private"}}), live)
	if err != nil || pd.Grant != other || !pd.Irreversible {
		t.Fatalf("Permit = %+v, %v", pd, err)
	}
	pd.Release()
	if u := other.Usage(); u.Uses != 0 {
		t.Fatalf("releasing a permit changed the grant's uses: %d", u.Uses)
	}
}

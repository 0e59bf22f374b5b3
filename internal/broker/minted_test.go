package broker_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/broker"
	"github.com/airlock-broker/airlock/internal/brokertest"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/sessions"
	"github.com/airlock-broker/airlock/internal/upstream"
	"github.com/airlock-broker/airlock/internal/upstream/awscred"
	"github.com/airlock-broker/airlock/internal/upstream/sourcetest"
)

func httpUpstream(name string) func(*url.URL) *upstream.Upstream {
	return func(base *url.URL) *upstream.Upstream {
		return &upstream.Upstream{Name: name, Kind: "http", BaseURL: base, Timeout: 10 * time.Second,
			Inject: upstream.Injection{Header: "Authorization", Format: "Bearer {secret}"}, RotationGrace: time.Hour}
	}
}

func TestMinterContractFake(t *testing.T) {
	f := &sourcetest.FakeMinter{}
	brokertest.MinterContract{
		Minter: f, Start: t0, Upstream: httpUpstream("api"),
		Grant:  grants.Spec{Upstream: "api", Rules: []grants.Rule{{Method: "GET", Path: "/items"}}},
		Grant2: grants.Spec{Upstream: "api", Rules: []grants.Rule{{Method: "GET", Path: "/other"}}},
		Request: func() *broker.Request {
			return &broker.Request{Call: grants.Call{Method: "GET", Segments: []string{"items"}, Header: http.Header{}}}
		},
		Gone: func(_ context.Context, l upstream.Lease) bool { return f.Revoked(l.ID) },
	}.Run(t)
}

// A credential that cannot be minted fails the call closed: nothing sent,
// the use given back, the failure audited without the error's secret.
func TestMintFailureFailsClosed(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer srv.Close()
	base, _ := url.Parse(srv.URL)
	f := &sourcetest.FakeMinter{Fail: errors.New("issuer down")}
	u := httpUpstream("api")(base)
	u.Minter, u.Source = f, upstream.MintedSource(f)
	u.SetTransport(upstream.NewTransport())
	k := brokertest.MustOpenBroker(t, brokertest.WithFakeClock(t0), brokertest.WithUpstream(u))
	b := k.Broker
	v, err := b.CreateSession(context.Background(), operator, sessions.SessionRequest{TaskID: "t", Isolation: "microvm", UntrustedInput: ptr(false),
		Grants: []grants.Spec{{Upstream: "api", MaxUses: 1, Rules: []grants.Rule{{Method: "GET", Path: "/items"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // the use is given back: the second call is refused for the credential too, not the grant
		c := b.NewCall("api", "GET")
		if err := c.Admit(broker.BearerCaller(v.Token, netip.MustParseAddr("127.0.0.1"))); err != nil {
			t.Fatal(err)
		}
		if err := c.Authorize(&broker.Request{Call: grants.Call{Method: "GET", Segments: []string{"items"}, Header: http.Header{}}}); err != nil {
			t.Fatal(err)
		}
		c.Gated()
		_, err := c.Send(context.Background())
		if !errors.Is(err, broker.ErrNoCredential) || !errors.Is(err, upstream.ErrCredentialUnavailable) {
			t.Fatalf("a failed mint: %v", err)
		}
	}
	if hits.Load() != 0 {
		t.Fatal("a call without its credential reached the upstream")
	}
	if _, err := u.Credential(context.Background()); !errors.Is(err, upstream.ErrCredentialUnavailable) {
		t.Fatalf("a minted upstream's credential fetched without a session: %v", err)
	}
}

// The STS minter scoped to the grant runs the lifecycle contract on an aws
// upstream: each session's calls are SigV4-signed with its own STS keys,
// minted with the session's policy, re-minted when a grant is added.
func TestMinterContractSTSScoped(t *testing.T) {
	var mu sync.Mutex
	var forms []url.Values
	sts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		mu.Lock()
		forms = append(forms, r.PostForm)
		n := len(forms)
		mu.Unlock()
		w.Header().Set("Content-Type", "text/xml")
		fmt.Fprintf(w, `<AssumeRoleResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><AssumeRoleResult>
<Credentials><AccessKeyId>ASIASCOPED%d</AccessKeyId><SecretAccessKey>scoped-secret-%d</SecretAccessKey><SessionToken>scoped-token-%d</SessionToken>
<Expiration>%s</Expiration></Credentials><AssumedRoleUser><Arn>arn:aws:sts::123456789012:assumed-role/r/s</Arn><AssumedRoleId>AROA:s</AssumedRoleId></AssumedRoleUser>
</AssumeRoleResult></AssumeRoleResponse>`, n, n, n, time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	}))
	defer sts.Close()
	m := awscred.NewSTSScoped(upstream.StaticAWSCredentials("AKIABASE", "base-secret"), "us-east-1", "arn:aws:iam::123456789012:role/r", sts.URL, 0, "aws:env")
	get := grants.Rule{Action: "s3:GetObject", Resource: "arn:aws:s3:::reports/*"}
	list := grants.Rule{Action: "s3:ListBucket", Resource: "arn:aws:s3:::reports"}
	brokertest.MinterContract{
		Minter: m, Start: t0,
		Upstream: func(base *url.URL) *upstream.Upstream {
			return &upstream.Upstream{Name: "s3", Kind: "aws", BaseURL: base, Timeout: 10 * time.Second, RotationGrace: time.Hour,
				AWS: &upstream.AWS{Service: "s3", Region: "us-east-1"}}
		},
		Grant:  grants.Spec{Upstream: "s3", Rules: []grants.Rule{get}},
		Grant2: grants.Spec{Upstream: "s3", Rules: []grants.Rule{list}},
		Request: func() *broker.Request {
			return &broker.Request{Call: grants.Call{Method: "GET", Action: "s3:GetObject", Resource: "arn:aws:s3:::reports/q1.csv", Header: http.Header{}},
				AWS: &broker.AWSCall{Path: "/reports/q1.csv"}}
		},
	}.Run(t)
	mu.Lock()
	defer mu.Unlock()
	one, _ := awscred.SessionPolicy([]grants.Rule{get})
	two, _ := awscred.SessionPolicy([]grants.Rule{get, list})
	if forms[0].Get("Policy") != one || forms[0].Get("DurationSeconds") != "1800" {
		t.Fatalf("first AssumeRole: policy %s duration %s", forms[0].Get("Policy"), forms[0].Get("DurationSeconds"))
	}
	var sawTwo bool
	for _, f := range forms {
		sawTwo = sawTwo || f.Get("Policy") == two
	}
	if !sawTwo {
		t.Fatal("the grant added did not widen the session policy")
	}
}

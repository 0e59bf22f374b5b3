package broker_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/brokertest"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/sessions"
)

// BenchmarkBoundTo is a call's attachment to its grant's standing and the
// kill-switch (BoundTo, then stop), under a request's own cancellable
// context as a door's call has; in parallel, as concurrent calls of one
// session attach to the same standing.
func BenchmarkBoundTo(b *testing.B) {
	br := payBroker(b, brokertest.WithNow(func() time.Time { return t0 })).Broker
	v, err := br.CreateSession(context.Background(), operator, sessions.SessionRequest{TaskID: "t", Isolation: "microvm",
		UntrustedInput: ptr(false), Grants: []grants.Spec{paymentGrant()}})
	if err != nil {
		b.Fatal(err)
	}
	l, err := br.Check(v.Token, netip.MustParseAddr("127.0.0.1"))
	if err != nil {
		b.Fatal(err)
	}
	g := l.Grants()[0]
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, cancel := context.WithCancel(context.Background())
			ctx, stop := br.BoundTo(req, l, g)
			_ = ctx.Done() // made, as a transport makes it
			stop()
			cancel()
		}
	})
}

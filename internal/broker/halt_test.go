package broker_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/auth"
	"github.com/airlock-broker/airlock/internal/broker"
	"github.com/airlock-broker/airlock/internal/brokertest"
	"github.com/airlock-broker/airlock/internal/killswitch"
	"github.com/airlock-broker/airlock/internal/sessions"
)

// Engaging and releasing the kill-switch concurrently never leaves the
// broker refusing nothing while the stored state says engaged, nor cutting
// calls while it says released: each change is whole.
func TestKillswitchChangesAreWhole(t *testing.T) {
	k := payBroker(t, brokertest.WithFakeClock(time.Now()))
	b, st := k.Broker, k.Store
	admin := auth.Principal{ID: "admin", Role: auth.RoleAdmin}
	ctx := context.Background()
	v, err := b.CreateSession(ctx, operator, sessions.SessionRequest{TaskID: "t", Isolation: "microvm", UntrustedInput: ptr(false)})
	if err != nil {
		t.Fatal(err)
	}
	loopback := netip.MustParseAddr("127.0.0.1")
	admitted := b.NewCall("pay", "GET")
	if err := admitted.Admit(broker.BearerCaller(v.Token, loopback)); err != nil {
		t.Fatal(err)
	}
	l := admitted.Live()
	for round := 0; round < 50; round++ {
		var wg sync.WaitGroup
		for i := 0; i < 4; i++ {
			wg.Add(1)
			go func(engage bool) {
				defer wg.Done()
				if _, err := b.SetKillswitch(ctx, admin, engage, "drill"); err != nil {
					t.Error(err)
				}
			}(i%2 == 0)
		}
		wg.Wait()
		data, err := st.Meta(ctx, "killswitch")
		if err != nil {
			t.Fatal(err)
		}
		var stored struct{ Engaged bool }
		if err := json.Unmarshal(data, &stored); err != nil {
			t.Fatal(err)
		}
		_, refused := b.Check(v.Token, loopback)
		engaged := errors.Is(refused, killswitch.ErrEngaged)
		if stored.Engaged != engaged {
			t.Fatalf("round %d: stored engaged=%v but calls refused=%v", round, stored.Engaged, engaged)
		}
		// A call's context is cut exactly while the switch is engaged.
		cctx, stop := b.Bound(ctx, l)
		cut := broker.Interrupted(cctx) != nil
		stop()
		if cut != stored.Engaged {
			t.Fatalf("round %d: stored engaged=%v but a new call's context cut=%v", round, stored.Engaged, cut)
		}
	}
}

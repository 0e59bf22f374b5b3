package killswitch_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/brokertest"
	"github.com/airlock-broker/airlock/internal/killswitch"
	"github.com/airlock-broker/airlock/internal/store"
	"github.com/airlock-broker/airlock/internal/store/boltstore"
)

type unreadable struct{ *boltstore.Bolt }

var errDown = errors.New("meta read failed")

func (unreadable) Meta(context.Context, string) ([]byte, error) { return nil, errDown }

func mustWriter(t *testing.T, st *boltstore.Bolt) *audit.Writer {
	t.Helper()
	w, err := audit.NewWriter(context.Background(), st, time.Now, brokertest.Discard())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w
}

// New fails closed: an unreadable state is an error, an unparsable one
// starts engaged with its period already cut.
func TestNewFailsClosed(t *testing.T) {
	ctx := context.Background()
	st := brokertest.MustOpenStore(t, store.DurabilityBuffered)
	w := mustWriter(t, st)
	if _, err := killswitch.New(ctx, unreadable{st}, w, time.Now, nil); !errors.Is(err, errDown) {
		t.Fatalf("New on an unreadable store = %v, want %v", err, errDown)
	}
	if err := st.PutMeta(ctx, killswitch.MetaKey, []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	k, err := killswitch.New(ctx, st, w, time.Now, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !k.Engaged() || !errors.Is(context.Cause(k.Period()), killswitch.ErrEngaged) {
		t.Fatalf("corrupt state: Engaged=%v, period cause %v; want engaged and cut", k.Engaged(), context.Cause(k.Period()))
	}
}

// Engaging cuts the current period (and runs onEngage); releasing starts a
// new one; the stored state follows.
func TestSetCutsThePeriod(t *testing.T) {
	ctx := context.Background()
	st := brokertest.MustOpenStore(t, store.DurabilityBuffered)
	engaged := 0
	k, err := killswitch.New(ctx, st, mustWriter(t, st), time.Now, func() { engaged++ })
	if err != nil {
		t.Fatal(err)
	}
	before := k.Period()
	if k.Engaged() || before.Err() != nil {
		t.Fatal("a fresh store starts engaged")
	}
	if _, err := k.Set(ctx, audit.Actor{Kind: "admin", ID: "admin"}, "admin", true, "drill"); err != nil {
		t.Fatal(err)
	}
	if stored, err := k.Stored(ctx); err != nil || !stored || !k.Engaged() || engaged != 1 {
		t.Fatalf("after engage: stored %v (%v), engaged %v, onEngage ran %d times", stored, err, k.Engaged(), engaged)
	}
	if !errors.Is(context.Cause(before), killswitch.ErrEngaged) {
		t.Fatalf("the period's cause = %v, want %v", context.Cause(before), killswitch.ErrEngaged)
	}
	if _, err := k.Set(ctx, audit.Actor{Kind: "admin", ID: "admin"}, "admin", false, "done"); err != nil {
		t.Fatal(err)
	}
	if k.Engaged() || k.Period().Err() != nil {
		t.Fatal("released, yet engaged or its period cut")
	}
}

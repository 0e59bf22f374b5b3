package broker_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/broker"
	"github.com/airlock-broker/airlock/internal/brokertest"
	"github.com/airlock-broker/airlock/internal/killswitch"
	"github.com/airlock-broker/airlock/internal/sessions"
	"github.com/airlock-broker/airlock/internal/store"
	"github.com/airlock-broker/airlock/internal/store/boltstore"
)

// killswitchUnreadable is a store whose kill-switch state cannot be read
// (a database that times out at start).
type killswitchUnreadable struct{ *boltstore.Bolt }

var errMetaDown = errors.New("meta read failed")

func (s killswitchUnreadable) Meta(ctx context.Context, key string) ([]byte, error) {
	if key == killswitch.MetaKey {
		return nil, errMetaDown
	}
	return s.Bolt.Meta(ctx, key)
}

// TestKillswitchLoadFailsClosed: a broker that cannot read the stored
// kill-switch does not start (it would serve released while the switch may
// be engaged, and the change feed would never tell it otherwise); a stored
// state it cannot parse starts it engaged, as the feed's apply reads it.
func TestKillswitchLoadFailsClosed(t *testing.T) {
	ctx := context.Background()
	st := brokertest.MustOpenStore(t, store.DurabilityBuffered)
	o := broker.Options{Ports: brokertest.Ports(st), AdminToken: brokertest.AdminToken, MaxSessionTTL: time.Hour, DefaultTTL: 10 * time.Minute,
		Log: brokertest.Discard()}
	o.Killswitch = killswitchUnreadable{st}
	if b, err := broker.New(ctx, o); !errors.Is(err, errMetaDown) {
		if b != nil {
			b.Close()
		}
		t.Fatalf("New with an unreadable kill-switch = %v, want %v", err, errMetaDown)
	}

	if err := st.PutMeta(ctx, killswitch.MetaKey, []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	b := brokertest.MustOpenBroker(t, brokertest.WithStore(st)).Broker
	v, err := b.CreateSession(ctx, operator, sessions.SessionRequest{TaskID: "t", Isolation: "microvm", UntrustedInput: ptr(false)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Check(v.Token, netip.MustParseAddr("127.0.0.1")); !errors.Is(err, killswitch.ErrEngaged) {
		t.Fatalf("a call with a corrupt stored kill-switch = %v, want %v", err, killswitch.ErrEngaged)
	}
}

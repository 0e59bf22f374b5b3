package broker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/broker"
	"github.com/airlock-broker/airlock/internal/brokertest"
	"github.com/airlock-broker/airlock/internal/changefeed"
	"github.com/airlock-broker/airlock/internal/store"
)

// A broker wired port by port serves; one missing port is refused at New.
func TestPortsWiredExplicitly(t *testing.T) {
	st := brokertest.MustOpenStore(t, store.DurabilityBuffered)
	k := brokertest.MustOpenBroker(t, brokertest.WithStore(st), brokertest.WithOptions(func(o *broker.Options) {
		o.Ports = broker.Ports{Sessions: st, Audit: st, Actions: st, Tokens: st, Killswitch: st, Meta: st, Health: st}
	}))
	if got := k.Broker.Ready(context.Background()); got["store"] != nil || got["audit"] != nil {
		t.Fatalf("Ready = %v", got)
	}
	o := broker.Options{Ports: broker.Ports{Sessions: st, Audit: st, Actions: st, Tokens: st, Killswitch: st, Health: st}, Log: brokertest.Discard()}
	if b, err := broker.New(context.Background(), o); err == nil {
		b.Close()
		t.Fatal("New without a Meta port succeeded")
	}
}

// noFeed is a change feed New must refuse before it reads it.
type noFeed struct{}

func (noFeed) ChangePosition(context.Context) (int64, error) { panic("read") }
func (noFeed) FollowChanges(context.Context, int64, func(changefeed.Change) error, func(time.Time)) error {
	panic("read")
}

// A store shared by several brokers (a change feed) without its Usage
// port is refused: limits counted in memory would be per replica.
func TestSharedStoreNeedsUsage(t *testing.T) {
	st := brokertest.MustOpenStore(t, store.DurabilityBuffered)
	o := broker.Options{Ports: brokertest.Ports(st), Changes: noFeed{}, Log: brokertest.Discard()}
	o.Usage = nil
	b, err := broker.New(context.Background(), o)
	if err == nil {
		b.Close()
		t.Fatal("New with a change feed and no Usage port succeeded")
	}
	if !strings.Contains(err.Error(), "Usage") {
		t.Fatalf("err = %v, want it to name the Usage port", err)
	}
}

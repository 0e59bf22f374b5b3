package broker_test

import (
	"context"
	"testing"

	"github.com/airlock-broker/airlock/internal/broker"
	"github.com/airlock-broker/airlock/internal/brokertest"
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

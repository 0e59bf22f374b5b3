package broker

import (
	"context"
	"errors"

	"github.com/airlock-broker/airlock/internal/usage"
)

// HealthCheck reports whether the storage behind the ports can serve; its
// error is shown by Broker.Ready as "store".
type HealthCheck interface {
	Ready(ctx context.Context) error
}

// fillPorts fills the ports left nil from Store and requires every one.
func (o *Options) fillPorts() error {
	if o.Store != nil {
		if o.Sessions == nil {
			o.Sessions = o.Store
		}
		if o.Audit == nil {
			o.Audit = o.Store
		}
		if o.Actions == nil {
			o.Actions = o.Store
		}
		if o.Tokens == nil {
			o.Tokens = o.Store
		}
		if o.Killswitch == nil {
			o.Killswitch = o.Store
		}
		if o.Meta == nil {
			o.Meta = o.Store
		}
		if o.Health == nil {
			o.Health = o.Store
		}
		if u, ok := o.Store.(usage.Store); ok && o.Usage == nil {
			o.Usage = u
		}
	}
	if o.Sessions == nil || o.Audit == nil || o.Actions == nil || o.Tokens == nil ||
		o.Killswitch == nil || o.Meta == nil || o.Health == nil {
		return errors.New("broker: every store port (Sessions, Audit, Actions, Tokens, Killswitch, Meta, Health) is required, or Store")
	}
	return nil
}

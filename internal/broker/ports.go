package broker

import (
	"context"
	"errors"
)

// HealthCheck reports whether the storage behind the ports can serve; its
// error is shown by Broker.Ready as "store".
type HealthCheck interface {
	Ready(ctx context.Context) error
}

// check requires every port but Usage.
func (p Ports) check() error {
	if p.Sessions == nil || p.Audit == nil || p.Actions == nil || p.Tokens == nil ||
		p.Killswitch == nil || p.Meta == nil || p.Health == nil {
		return errors.New("broker: every store port (Sessions, Audit, Actions, Tokens, Killswitch, Meta, Health) is required")
	}
	return nil
}

package brokertest

import (
	"context"
	"io"
	"net/http"

	"github.com/airlock-broker/airlock/internal/approval"
	"github.com/airlock-broker/airlock/internal/broker"
)

// Result is what a door would write of a call's outcome (broker.Outcome).
type Result struct {
	RequestID string
	Status    int // the upstream's status; 0 for an error, a pending action or a stored result
	Header    http.Header
	Body      string
	Err       error            // refused or failed
	Action    *approval.Action // pending
	Stored    *approval.Result // approved and executed while it waited
	Held      bool             // held for a human
}

// Do runs one call through b's pipeline as a door would (broker.Do) and
// returns what the door would write. A relayed WebSocket is closed at
// once.
func Do(ctx context.Context, b *broker.Broker, in broker.Inbound) Result {
	var res Result
	b.Do(ctx, in, func(o *broker.Outcome) broker.Written {
		res = Result{RequestID: o.RequestID, Err: o.Err, Action: o.Action, Stored: o.Result, Held: o.Held}
		a := o.Answer
		if a == nil {
			return broker.Written{}
		}
		res.Status, res.Header = a.Status, http.Header{}
		a.CopyHeader(res.Header)
		switch {
		case a.Relay != nil:
			a.Relay.Conn.Close()
			return broker.Written{}
		case a.Stream != nil:
			body, err := io.ReadAll(a.Stream)
			res.Body = string(body)
			return broker.Written{Bytes: int64(len(body)), Err: err}
		}
		res.Body = string(a.Body)
		return broker.Written{Bytes: int64(len(a.Body))}
	})
	return res
}

// Request is a door's parse that hands the pipeline req as it is.
func Request(req *broker.Request) func(*broker.Admitted) (*broker.Request, error) {
	return func(*broker.Admitted) (*broker.Request, error) { return req, nil }
}

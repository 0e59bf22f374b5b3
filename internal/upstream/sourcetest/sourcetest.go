// Package sourcetest is the contract suite of credential sources
// (upstream.Source): every source, in the core or in a subpackage, runs it.
package sourcetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/upstream"
)

// Fixture is one credential source under the contract, with the means to
// rotate its value and to make it unavailable.
type Fixture struct {
	Src     upstream.Source
	Value   string
	Rotate  func(t *testing.T, v string) // nil: the source cannot rotate
	Outage  func(t *testing.T)           // nil: the source cannot fail
	Recover func(t *testing.T, v string)
	Bound   time.Duration // how long a rotation may take to show
}

// Run is what every credential source must do: serve its value and never
// show it (formatting, Describe); when it can, show a rotation within its
// bound, fail closed (ErrCredentialUnavailable, the value not in the error)
// during an outage past its bound, and recover by itself.
func Run(t *testing.T, f Fixture) {
	t.Helper()
	ctx := context.Background()
	got, err := f.Src.Fetch(ctx)
	if err != nil || got.Reveal() != f.Value {
		t.Fatalf("Fetch = %v, %v; want the planted value", got, err)
	}
	for _, s := range []string{fmt.Sprint(got), fmt.Sprintf("%v %+v %#v %s", got, got, got, got), f.Src.Describe()} {
		if strings.Contains(s, f.Value) {
			t.Fatalf("the secret shows in %q", s)
		}
	}
	if f.Rotate != nil {
		next := f.Value + "-rotated"
		f.Rotate(t, next)
		deadline := time.Now().Add(f.Bound + 5*time.Second)
		for {
			got, err := f.Src.Fetch(ctx)
			if err == nil && got.Reveal() == next {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("rotation did not reach the source within its bound (%v): %v", f.Bound, err)
			}
			<-time.After(f.Bound / 10)
		}
		f.Value = next
	}
	if f.Outage != nil {
		f.Outage(t)
		deadline := time.Now().Add(f.Bound + 5*time.Second)
		var err error
		for {
			// Past its bound a cached value is never served: the fetch fails closed.
			_, err = f.Src.Fetch(ctx)
			if err != nil || time.Now().After(deadline) {
				break
			}
			<-time.After(f.Bound / 10)
		}
		if !errors.Is(err, upstream.ErrCredentialUnavailable) {
			t.Fatalf("during the outage Fetch = %v, want ErrCredentialUnavailable", err)
		}
		if strings.Contains(err.Error(), f.Value) {
			t.Fatalf("the error carries the secret: %v", err)
		}
		f.Recover(t, f.Value)
		deadline = time.Now().Add(10 * time.Second)
		for {
			got, err := f.Src.Fetch(ctx)
			if err == nil && got.Reveal() == f.Value {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the source did not recover by itself: %v", err)
			}
			<-time.After(50 * time.Millisecond)
		}
	}
}

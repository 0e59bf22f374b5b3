package pgstore_test

import (
	"testing"

	"github.com/airlock-broker/airlock/internal/store"
	"github.com/airlock-broker/airlock/internal/store/storetest"
)

// TestContract runs the store ports' contract suite against PostgreSQL,
// in both durability modes: the same suite as bbolt's.
func TestContract(t *testing.T) {
	for _, d := range []string{store.DurabilityFsync, store.DurabilityBuffered} {
		t.Run(d, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) storetest.Ports { return storetest.All(MustOpen(t, d)) })
		})
	}
}

package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/airlock-broker/airlock/internal/fault"
)

// TestStoreSelection: bbolt by default; postgres with a DSN expanded from
// the environment; every wrong combination names its field and never
// echoes the DSN.
func TestStoreSelection(t *testing.T) {
	const dsn = "postgres://airlock:CANARY-db-password@db:5432/airlock"
	getenv := env(map[string]string{"ADMIN": "0123456789abcdef0", "AIRLOCK_PG_DSN": dsn})
	c, err := Parse([]byte(base), getenv)
	if err != nil {
		t.Fatal(err)
	}
	if c.Store.Driver != StoreBolt || c.Store.DSN != "" {
		t.Errorf("default store = %+v, want bbolt", c.Store)
	}
	c, err = Parse([]byte(base+"store: {driver: postgres, dsn: \"${AIRLOCK_PG_DSN}\"}\n"), getenv)
	if err != nil {
		t.Fatal(err)
	}
	if c.Store.Driver != StorePostgres || c.Store.DSN != dsn {
		t.Errorf("postgres store = %+v", c.Store)
	}
	for _, tt := range []struct {
		name, yaml, field string
	}{
		{"unknown driver", "store: {driver: mysql}\n", "store.driver"},
		{"postgres without dsn", "store: {driver: postgres}\n", "store.dsn"},
		{"dsn with bbolt", "store: {dsn: \"${AIRLOCK_PG_DSN}\"}\n", "store.dsn"},
		{"unset variable", "store: {driver: postgres, dsn: \"${NOT_SET}\"}\n", "store.dsn"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(base+tt.yaml), getenv)
			var fe *fault.FieldError
			if !errors.As(err, &fe) || fe.Field != tt.field {
				t.Fatalf("err = %v, want field %s", err, tt.field)
			}
			if strings.Contains(err.Error(), "CANARY") {
				t.Errorf("the error echoes the DSN: %v", err)
			}
		})
	}
}

package credentials

import (
	"bytes"
	"context"
	"sync"
	"testing"

	"github.com/airlock-broker/airlock/internal/upstream"
)

// mapMeta is a StateStore in memory.
type mapMeta struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (s *mapMeta) LoadState(_ context.Context, k string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[k]
	if !ok {
		return nil, nil
	}
	return bytes.Clone(v), nil
}

func (s *mapMeta) SaveState(_ context.Context, k string, v []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[k] = bytes.Clone(v)
	return nil
}

// stateMinter is a StatefulMinter that only keeps what it was bound.
type stateMinter struct {
	upstream.Minter
	st upstream.MintState
}

func (m *stateMinter) BindState(s upstream.MintState) { m.st = s }

// A minter's state is stored sealed, bound to its upstream and to the
// installation key: not in the clear, not opened under another upstream's
// key or another installation's, nor after a byte is changed.
func TestMintStateSealed(t *testing.T) {
	ctx := context.Background()
	meta := &mapMeta{m: map[string][]byte{}}
	a, b := &stateMinter{}, &stateMinter{}
	key := bytes.Repeat([]byte{7}, 32)
	if err := bindMintStates(map[string]*upstream.Upstream{"a": {Minter: a}, "b": {Minter: b}, "plain": {}}, meta, key); err != nil {
		t.Fatal(err)
	}
	if v, err := a.st.Load(ctx); err != nil || v != nil {
		t.Fatalf("nothing saved: %q %v", v, err)
	}
	secret := []byte("rt-CANARY-sealed-refresh-token")
	if err := a.st.Save(ctx, secret); err != nil {
		t.Fatal(err)
	}
	if v, err := a.st.Load(ctx); err != nil || !bytes.Equal(v, secret) {
		t.Fatalf("load: %q %v", v, err)
	}
	stored := meta.m[mintStatePrefix+"a"]
	if bytes.Contains(stored, secret) {
		t.Fatal("the state is stored in the clear")
	}
	// Moved to another upstream's key.
	meta.m[mintStatePrefix+"b"] = bytes.Clone(stored)
	if _, err := b.st.Load(ctx); err == nil {
		t.Fatal("a value moved to another upstream opened")
	}
	// Tampered.
	bad := bytes.Clone(stored)
	bad[len(bad)-1] ^= 1
	meta.m[mintStatePrefix+"a"] = bad
	if _, err := a.st.Load(ctx); err == nil {
		t.Fatal("a tampered value opened")
	}
	// Another installation's key.
	meta.m[mintStatePrefix+"a"] = stored
	other := &stateMinter{}
	if err := bindMintStates(map[string]*upstream.Upstream{"a": {Minter: other}}, meta, bytes.Repeat([]byte{8}, 32)); err != nil {
		t.Fatal(err)
	}
	if _, err := other.st.Load(ctx); err == nil {
		t.Fatal("a value opened under another installation's key")
	}
}

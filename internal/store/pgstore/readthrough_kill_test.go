package pgstore_test

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/airlock-broker/airlock/internal/broker"
	"github.com/airlock-broker/airlock/internal/brokertest"
	"github.com/airlock-broker/airlock/internal/pgtest"
	"github.com/airlock-broker/airlock/internal/session"
	"github.com/airlock-broker/airlock/internal/sessions"
	"github.com/airlock-broker/airlock/internal/store"
	"github.com/airlock-broker/airlock/internal/store/pgstore"
)

// pausedSessions is a sessions.Store whose Session read of one id, once
// armed, returns what it read only after the test lets it: the window in
// which a kill can commit and be applied while a read-through is under way.
type pausedSessions struct {
	sessions.Store
	mu      sync.Mutex
	id      string
	read    chan struct{} // closed once the armed read has its answer
	release chan struct{} // closed by the test to return it
}

func (p *pausedSessions) arm(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.id, p.read, p.release = id, make(chan struct{}), make(chan struct{})
}

func (p *pausedSessions) Session(ctx context.Context, id string) (session.Session, error) {
	s, err := p.Store.Session(ctx, id)
	p.mu.Lock()
	armed := p.id != "" && p.id == id
	read, release := p.read, p.release
	if armed {
		p.id = "" // only the first read pauses
	}
	p.mu.Unlock()
	if armed {
		close(read)
		<-release
	}
	return s, err
}

func replica(t *testing.T, st *pgstore.PG, ss sessions.Store) *broker.Broker {
	t.Helper()
	ports := brokertest.Ports(st)
	if ss != nil {
		ports.Sessions = ss
	}
	b, err := broker.New(context.Background(), broker.Options{Ports: ports, Changes: st,
		AdminToken: brokertest.AdminToken, MaxSessionTTL: time.Hour, DefaultTTL: 10 * time.Minute, Log: brokertest.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// TestReadThroughRacingKill: replica B reads a session it does not hold
// from the store (alive), and before it puts it in memory the session is
// killed on A and B's change feed applies the kill (a no-op then: B does
// not hold it). The session must still never become live on B: the call
// that read it and every later one are refused as revoked.
func TestReadThroughRacingKill(t *testing.T) {
	dsn := pgtest.DSN(t)
	stA, stB := MustOpenDSN(t, dsn, store.DurabilityFsync), MustOpenDSN(t, dsn, store.DurabilityFsync)
	paused := &pausedSessions{Store: stB}
	a, b := replica(t, stA, nil), replica(t, stB, paused)
	ctx := context.Background()
	ip := netip.MustParseAddr("127.0.0.1")
	req := sessions.SessionRequest{TaskID: "t", TTL: time.Hour, Isolation: "microvm"}
	victim, err := a.CreateSession(ctx, admin, req)
	if err != nil {
		t.Fatal(err)
	}
	marker, err := a.CreateSession(ctx, admin, req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Check(marker.Token, ip); err != nil { // B holds the marker in memory
		t.Fatal(err)
	}

	paused.arm(victim.Session.ID)
	first := make(chan error, 1)
	go func() {
		_, err := b.Check(victim.Token, ip) // reads the session through: alive
		first <- err
	}()
	<-paused.read
	if _, err := a.KillSession(ctx, admin, victim.Session.ID); err != nil {
		t.Fatal(err)
	}
	// The marker's kill comes after the victim's in the feed: once B
	// refuses the marker from memory, it applied the victim's kill too.
	if _, err := a.KillSession(ctx, admin, marker.Session.ID); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := b.Check(marker.Token, ip); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("B never applied the kills")
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
		}
	}
	close(paused.release)
	if err := <-first; !errors.Is(err, session.ErrRevoked) {
		t.Errorf("the call whose read-through raced the kill: %v, want %v", err, session.ErrRevoked)
	}
	if _, err := b.Check(victim.Token, ip); !errors.Is(err, session.ErrRevoked) {
		t.Errorf("a later call of the killed session on B: %v, want %v (it became live in memory)", err, session.ErrRevoked)
	}
}

package approval

import (
	"errors"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func pending(required int) *Action {
	return &Action{ID: "act_1", Status: Pending, SessionCreatedBy: "op", ExpiresAt: t0.Add(time.Minute), ApprovalsRequired: required}
}

func TestDecide(t *testing.T) {
	alice, bob, op := Reviewer{ID: "alice", Name: "Alice"}, Reviewer{ID: "bob", Name: "Bob"}, Reviewer{ID: "op", Name: "Op"}
	type step struct {
		r       Reviewer
		verdict string
		at      time.Time
		execute bool
		err     error
	}
	tests := []struct {
		name     string
		required int
		steps    []step
		want     Status
	}{
		{name: "one approval executes", required: 1, steps: []step{{alice, "approve", t0, true, nil}}, want: Executing},
		{name: "deny ends it", required: 1, steps: []step{{alice, "deny", t0, false, nil}, {bob, "approve", t0, false, ErrDecided}}, want: Denied},
		{name: "quorum of two", required: 2, steps: []step{{alice, "approve", t0, false, nil}, {bob, "approve", t0, true, nil}}, want: Executing},
		{name: "fail-same reviewer twice", required: 2, steps: []step{{alice, "approve", t0, false, nil}, {alice, "approve", t0, false, ErrAlreadyDecided}}, want: Pending},
		{name: "fail-creator approves", required: 1, steps: []step{{op, "approve", t0, false, ErrSelfApproval}}, want: Pending},
		{name: "creator may deny", required: 1, steps: []step{{op, "deny", t0, false, nil}}, want: Denied},
		{name: "fail-expired", required: 1, steps: []step{{alice, "approve", t0.Add(time.Minute), false, ErrExpired}}, want: Pending},
		{name: "fail-decided after execution", required: 1, steps: []step{{alice, "approve", t0, true, nil}, {bob, "approve", t0, false, ErrDecided}}, want: Executing},
		{name: "fail-bad verdict", required: 1, steps: []step{{alice, "maybe", t0, false, ErrInvalidDecision}}, want: Pending},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := pending(tt.required)
			for i, s := range tt.steps {
				exec, err := Decide(a, s.r, s.verdict, "", s.at)
				if !errors.Is(err, s.err) || exec != s.execute {
					t.Fatalf("step %d: execute=%v err=%v, want %v %v", i, exec, err, s.execute, s.err)
				}
			}
			if a.Status != tt.want {
				t.Fatalf("status %s, want %s", a.Status, tt.want)
			}
		})
	}
}

func TestNotifierWakesWithoutLoss(t *testing.T) {
	n := NewNotifier()
	c := n.Changed("a")
	other := n.Changed("b")
	any := n.Any()
	n.Notify("a")
	select {
	case <-c:
	default:
		t.Fatal("waiter of a not woken")
	}
	select {
	case <-any:
	default:
		t.Fatal("page waiter not woken")
	}
	select {
	case <-other:
		t.Fatal("waiter of b woken by a change of a")
	default:
	}
}

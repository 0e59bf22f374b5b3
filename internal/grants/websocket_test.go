package grants

import (
	"errors"
	"testing"
	"time"
)

func TestWebSocketRuleMatching(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	kind := func(string) (string, bool) { return "http", true }
	compile := func(ws bool) *Live {
		s := Spec{Upstream: "u", TTL: time.Hour, Rules: []Rule{{Method: "GET", Path: "/chat/{room}", WebSocket: ws}}}
		if err := Validate("g", &s, kind, time.Hour); err != nil {
			t.Fatal(err)
		}
		l, err := Compile(Grant{ID: "g", Spec: s, ExpiresAt: now.Add(time.Hour)}, Usage{})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	for _, tc := range []struct {
		name    string
		rule    bool // the rule says websocket: true
		upgrade bool // the call is an upgrade
		want    error
	}{
		{"upgrade, websocket rule", true, true, nil},
		{"plain GET, websocket rule", true, false, nil},
		{"plain GET, plain rule", false, false, nil},
		{"upgrade, plain rule", false, true, ErrNoMatchingGrant},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Call{Method: "GET", Segments: []string{"chat", "lobby"}, WebSocket: tc.upgrade}
			d, err := Evaluate(now, []*Live{compile(tc.rule)}, "u", c)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
			if d != nil && d.Irreversible {
				t.Fatal("a websocket rule's decision is irreversible")
			}
		})
	}
}

package broker

import (
	"strings"
	"testing"
	"time"
)

func TestMCPSessionIDs(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	m := mcpSessionIDs{key: []byte("k1"), now: func() time.Time { return now }}
	id := m.open("ses_a", "issues", "2025-11-25")
	if v, exp, ok := m.read(id, "ses_a", "issues"); !ok || v != "2025-11-25" || !exp.Equal(now.Add(mcpSessionLife)) {
		t.Fatalf("read own id: %q %v %v", v, exp, ok)
	}
	if m.open("ses_a", "issues", "2025-11-25") == id {
		t.Error("two opens gave one id")
	}
	other := mcpSessionIDs{key: []byte("k2"), now: m.now}
	body := strings.TrimPrefix(id, mcpSessionPrefix)
	p, s, _ := strings.Cut(body, ".")
	for name, tc := range map[string]struct {
		m               mcpSessionIDs
		id, ses, upname string
	}{
		"another session":      {m, id, "ses_b", "issues"},
		"another upstream":     {m, id, "ses_a", "github"},
		"another installation": {other, id, "ses_a", "issues"},
		"a payload changed":    {m, mcpSessionPrefix + p + "A." + s, "ses_a", "issues"},
		"no mac":               {m, mcpSessionPrefix + p, "ses_a", "issues"},
		"no prefix":            {m, body, "ses_a", "issues"},
		"empty":                {m, "", "ses_a", "issues"},
		"too long":             {m, id + strings.Repeat("A", 300), "ses_a", "issues"},
		"split names":          {m, m.open("ses_ai", "ssues", "v"), "ses_a", "issues"},
	} {
		if _, _, ok := tc.m.read(tc.id, tc.ses, tc.upname); ok {
			t.Errorf("%s: accepted", name)
		}
	}
	now = now.Add(mcpSessionLife)
	if _, _, ok := m.read(id, "ses_a", "issues"); ok {
		t.Error("an expired id was accepted")
	}
}

// An id has one spelling: line breaks (which the decoder would skip) and
// a changed unused bit of the last character are refused.
func TestMCPSessionIDsOneSpelling(t *testing.T) {
	m := mcpSessionIDs{key: []byte("k1"), now: func() time.Time { return time.Unix(1_800_000_000, 0) }}
	id := m.open("ses_a", "issues", "2025-11-25")
	last := id[len(id)-1]
	flipped := []byte(id)
	flipped[len(flipped)-1] = map[bool]byte{true: last + 1, false: last - 1}[last != 'z' && last != '_']
	for name, v := range map[string]string{"CRLF": id[:10] + "\r\n" + id[10:], "LF in the mac": id[:len(id)-4] + "\n" + id[len(id)-4:], "last character": string(flipped)} {
		if _, _, ok := m.read(v, "ses_a", "issues"); ok {
			t.Errorf("%s: another spelling of the id was accepted", name)
		}
	}
}

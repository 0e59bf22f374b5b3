package grants

import "testing"

func TestQueryKeyReaches(t *testing.T) {
	for _, c := range []struct {
		key, name string
		want      bool
	}{
		{"to", "to", true}, {"TO", "to", true}, {"to[]", "to", true}, {"to[0]", "to", true}, {"to[k]", "to", true},
		{"To[]", "to", true}, {" to", "to", true}, {"account.id", "account_id", true}, {"account id", "account_id", true},
		{"account[id", "account_id", true}, {"account_id[]", "account_id", true}, {"account_id", "account.id", true},
		{"filter[status]", "filter[status]", true}, {"FILTER[status]", "filter[status]", true}, {"filter[status][]", "filter[status]", true},
		{"filter[other]", "filter[status]", false}, {"filter", "filter[status]", false},
		{"toto", "to", false}, {"t", "to", false}, {"page[size]", "to", false}, {"[to]", "to", false}, {"account", "account_id", false},
	} {
		if got := QueryKeyReaches(c.key, c.name); got != c.want {
			t.Errorf("QueryKeyReaches(%q, %q) = %v, want %v", c.key, c.name, got, c.want)
		}
	}
}

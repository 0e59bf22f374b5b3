package grants

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// fuzzBodySpec constrains several body fields of one rule: a pin on a
// string, a number range, a pattern, a pin below an object, a pattern below
// an array, and a budget.
func fuzzBodySpec() Spec {
	return Spec{Upstream: "pay", Budget: map[string]float64{"body.fee": 10}, Rules: []Rule{{
		Method: "POST", Path: "/pay",
		Constraints: map[string]Constraint{
			"body.to":          {Pin: "acme"},
			"body.amount":      {Min: ptr(0.0), Max: ptr(100.0)},
			"body.memo":        {Pattern: `[a-z]{0,8}`},
			"body.meta.label":  {Pin: "ok"},
			"body.items.0.sku": {Pattern: `[A-Z]-[0-9]`},
		},
	}}}
}

// fuzzPayment is how a Go upstream reads the payment: encoding/json
// matches keys to fields case-insensitively (Unicode simple folding).
type fuzzPayment struct {
	To     any `json:"to"`
	Amount any `json:"amount"`
	Memo   any `json:"memo"`
	Fee    any `json:"fee"`
	Meta   *struct {
		Label any `json:"label"`
	} `json:"meta"`
	Items []struct {
		Sku any `json:"sku"`
	} `json:"items"`
}

var (
	fuzzMemoRE = regexp.MustCompile(`^[a-z]{0,8}$`)
	fuzzSkuRE  = regexp.MustCompile(`^[A-Z]-[0-9]$`)
)

// fuzzKeyReaders are the ways upstreams match a JSON key to a field name:
// exactly, Go's simple folding, .NET's upper-casing, Java's lower-casing.
var fuzzKeyReaders = map[string]func(k, name string) bool{
	"exact": func(k, name string) bool { return k == name },
	"go":    strings.EqualFold,
	"upper": func(k, name string) bool {
		return strings.Map(unicode.ToUpper, k) == strings.Map(unicode.ToUpper, name)
	},
	"lower": func(k, name string) bool {
		return strings.Map(unicode.ToLower, k) == strings.Map(unicode.ToLower, name)
	},
	"title": func(k, name string) bool {
		return strings.Map(unicode.ToTitle, k) == strings.Map(unicode.ToTitle, name)
	},
	"folded": func(k, name string) bool { return foldKey(k) == foldKey(name) },
}

// FuzzBodyDecodesAsChecked is differential: for every body the broker
// allows, the bytes it would forward, decoded by encoding/json into a Go
// struct (as a Go upstream would), satisfy the grant's constraints; and
// along every constrained path, no key is one that any common reader
// (exact, Go, .NET, Java) would take for the constrained name unless it is
// spelled exactly so, so every reader sees the value that was checked.
func FuzzBodyDecodesAsChecked(f *testing.F) {
	for _, s := range []string{
		`{}`, `null`, `{"amount": 5}`,
		`{"to": "acme", "amount": 5, "memo": "rent", "meta": {"label": "ok"}, "items": [{"sku": "A-1"}], "fee": 3}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		body, err := ParseJSON(in)
		if err != nil {
			return
		}
		g := mustLive(t, fuzzBodySpec())
		c := &Call{Method: "POST", Segments: []string{"pay"}, Header: map[string][]string{}, Body: body, BodyJSON: true, HasBody: true}
		d, err := Evaluate(t0, []*Live{g}, "pay", c)
		if err != nil {
			return
		}
		out, err := d.BodyBytes(in)
		if err != nil {
			t.Fatalf("BodyBytes: %v", err)
		}
		if !d.BodyChanged && !bytes.Equal(out, in) {
			t.Fatalf("an unchanged body is forwarded as %q, not as checked %q", out, in)
		}
		// The forwarded bytes pass the broker's own parser: no object in them
		// holds two keys that differ only in case.
		if _, err := ParseJSON(out); err != nil {
			t.Fatalf("the forwarded body %q does not parse: %v", out, err)
		}

		var p fuzzPayment
		dec := json.NewDecoder(bytes.NewReader(out))
		dec.UseNumber()
		_ = dec.Decode(&p) // a type error leaves the other fields decoded
		if p.To != "acme" {
			t.Fatalf("allowed %q: a Go upstream reads to = %#v, not the pin", in, p.To)
		}
		if p.Meta == nil || p.Meta.Label != "ok" {
			t.Fatalf("allowed %q: a Go upstream reads meta = %#v, not the pin", in, p.Meta)
		}
		if p.Amount != nil {
			if n, ok := fuzzNumber(p.Amount); !ok || n < 0 || n > 100 {
				t.Fatalf("allowed %q: a Go upstream reads amount = %#v, outside [0, 100]", in, p.Amount)
			}
		}
		if p.Fee != nil {
			if n, ok := fuzzNumber(p.Fee); !ok || n < 0 || n > 10 {
				t.Fatalf("allowed %q: a Go upstream reads fee = %#v, over the budget", in, p.Fee)
			}
		}
		if p.Memo != nil {
			if s, ok := p.Memo.(string); !ok || !fuzzMemoRE.MatchString(s) {
				t.Fatalf("allowed %q: a Go upstream reads memo = %#v, outside the pattern", in, p.Memo)
			}
		}
		if len(p.Items) > 0 && p.Items[0].Sku != nil {
			if s, ok := p.Items[0].Sku.(string); !ok || !fuzzSkuRE.MatchString(s) {
				t.Fatalf("allowed %q: a Go upstream reads items[0].sku = %#v, outside the pattern", in, p.Items[0].Sku)
			}
		}

		var doc any
		dec = json.NewDecoder(bytes.NewReader(out))
		dec.UseNumber()
		if err := dec.Decode(&doc); err != nil {
			t.Fatal(err)
		}
		for _, path := range [][]string{{"to"}, {"amount"}, {"memo"}, {"fee"}, {"meta", "label"}, {"items", "0", "sku"}} {
			fuzzExactAlongPath(t, in, doc, path)
		}
	})
}

// fuzzExactAlongPath fails when an object on path holds a key that some
// reader would match to the path's name while it is not spelled exactly so.
func fuzzExactAlongPath(t *testing.T, in []byte, doc any, path []string) {
	t.Helper()
	cur := doc
	for _, name := range path {
		switch x := cur.(type) {
		case map[string]any:
			for k := range x {
				for reader, match := range fuzzKeyReaders {
					if k != name && match(k, name) {
						t.Fatalf("allowed %q: the forwarded body holds %q, which a %s reader takes for %q", in, k, reader, name)
					}
				}
			}
			cur = x[name]
		case []any:
			if name != "0" || len(x) == 0 {
				return
			}
			cur = x[0]
		default:
			return
		}
	}
}

func fuzzNumber(v any) (float64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	f, err := n.Float64()
	return f, err == nil
}

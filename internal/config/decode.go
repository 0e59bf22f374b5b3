package config

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"
)

// decoder fills a value from a YAML node tree, walking it against the
// value's type (by yaml tags) so that every unknown key and every value of
// the wrong kind is reported with its field path, in YAML words, never Go's.
type decoder struct {
	errs []error
	// failed are the paths whose value did not decode: a validator's
	// complaint about one of them (it is still zero) would repeat the error.
	failed []string
	// original is the text of scalars before ${VAR} expansion: an error
	// quotes that, never an expanded value (it may be a secret).
	original map[*yaml.Node]string
}

// nodeDecoder is a type that decodes its own node (Credential).
type nodeDecoder interface {
	decodeYAML(d *decoder, n *yaml.Node, path string)
}

// fail records that the value at path did not decode.
func (d *decoder) fail(path, format string, args ...any) {
	d.errs = append(d.errs, fieldErr(path, format, args...))
	d.failed = append(d.failed, path)
}

// covers says whether an error at path concerns a value that did not
// decode (the value itself or one inside it).
func (d *decoder) covers(path string) bool {
	for _, f := range d.failed {
		if path == f || strings.HasPrefix(path, f+".") || strings.HasPrefix(path, f+"[") {
			return true
		}
	}
	return false
}

var durationType = reflect.TypeFor[time.Duration]()

// decode stores n into v (settable).
func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias // an alias holding itself ends: no type of the config holds itself
	}
	if v.CanAddr() {
		if nd, ok := v.Addr().Interface().(nodeDecoder); ok {
			nd.decodeYAML(d, n, path)
			return
		}
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		v.Set(reflect.Zero(v.Type()))
		return
	}
	switch {
	case v.Type() == durationType:
		d.scalar(n, v, path)
	case v.Kind() == reflect.Pointer:
		e := reflect.New(v.Type().Elem())
		d.decode(n, e.Elem(), path)
		v.Set(e)
	case v.Kind() == reflect.Struct:
		d.mapping(n, v, path, nil, "")
	case v.Kind() == reflect.Slice:
		d.sequence(n, v, path)
	case v.Kind() == reflect.Map:
		d.dict(n, v, path)
	default:
		d.scalar(n, v, path)
	}
}

// pair is one key and value of a mapping.
type pair struct{ key, value *yaml.Node }

// maxMerge bounds nested merges (<<: *anchor), which may hold themselves.
const maxMerge = 16

// pairs lists a mapping's keys and values, merged mappings (<<: *anchor)
// first so that the mapping's own keys win; explicit says which are its
// own. ok is false when a merge is not of mappings, or nests too deep.
func pairs(n *yaml.Node, depth int) (ps []pair, explicit []bool, ok bool) {
	if depth > maxMerge {
		return nil, nil, false
	}
	ok = true
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.ShortTag() != "!!merge" {
			continue
		}
		merged := []*yaml.Node{v}
		if v.Kind == yaml.SequenceNode {
			merged = v.Content
		}
		for _, m := range merged {
			if m.Kind == yaml.AliasNode && m.Alias != nil {
				m = m.Alias
			}
			if m.Kind != yaml.MappingNode {
				ok = false
				continue
			}
			mp, _, mok := pairs(m, depth+1)
			ps = append(ps, mp...)
			explicit = append(explicit, make([]bool, len(mp))...)
			ok = ok && mok
		}
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i]; k.ShortTag() != "!!merge" {
			ps = append(ps, pair{k, n.Content[i+1]})
			explicit = append(explicit, true)
		}
	}
	return ps, explicit, ok
}

// badMerge records a merge key (<<) in the mapping at path that pairs refused.
func (d *decoder) badMerge(path string) {
	f := "<<"
	if path != "" {
		f = path + ".<<"
	}
	d.fail(f, "merges mappings only (<<: *anchor or <<: [*a, *b]), at most %d deep", maxMerge)
}

// mapping decodes a mapping node into the struct v, skipping the keys in
// skip; hint follows "unknown field" (which source a credential key is
// unknown to).
func (d *decoder) mapping(n *yaml.Node, v reflect.Value, path string, skip []string, hint string) {
	if n.Kind != yaml.MappingNode {
		d.fail(path, "must be a mapping (key: value), not %s", d.describe(n))
		return
	}
	fields := yamlFields(v.Type())
	ps, explicit, ok := pairs(n, 0)
	if !ok {
		d.badMerge(path)
	}
	seen := map[string]bool{}
	for i, p := range ps {
		key := p.key.Value
		f := keyPath(path, key)
		if explicit[i] {
			if seen[key] {
				d.fail(f, "is set twice")
				continue
			}
			seen[key] = true
		}
		if slices.Contains(skip, key) {
			continue
		}
		idx, ok := fields[key]
		if !ok {
			d.errs = append(d.errs, fieldErr(f, "unknown field%s%s", hint, suggest(key, fields)))
			continue
		}
		d.decode(p.value, v.FieldByIndex(idx), f)
	}
}

func (d *decoder) sequence(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.SequenceNode {
		d.fail(path, "must be a list, not %s", d.describe(n))
		return
	}
	s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, c := range n.Content {
		d.decode(c, s.Index(i), fmt.Sprintf("%s[%d]", path, i))
	}
	v.Set(s)
}

// dict decodes a mapping into a map keyed by strings.
func (d *decoder) dict(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.fail(path, "must be a mapping (key: value), not %s", d.describe(n))
		return
	}
	m := reflect.MakeMap(v.Type())
	ps, _, ok := pairs(n, 0)
	if !ok {
		d.badMerge(path)
	}
	for _, p := range ps {
		f := keyPath(path, p.key.Value)
		if p.key.Kind != yaml.ScalarNode {
			d.fail(f, "a key must be a plain value")
			continue
		}
		e := reflect.New(v.Type().Elem()).Elem()
		d.decode(p.value, e, f)
		m.SetMapIndex(reflect.ValueOf(p.key.Value).Convert(v.Type().Key()), e)
	}
	v.Set(m)
}

// scalar decodes a plain value (string, number, boolean, duration).
func (d *decoder) scalar(n *yaml.Node, v reflect.Value, path string) {
	want := kindName(v.Type())
	if n.Kind != yaml.ScalarNode {
		d.fail(path, "must be %s, not %s", want, d.describe(n))
		return
	}
	val, tag := d.text(n), n.ShortTag()
	isInt := v.Kind() >= reflect.Int && v.Kind() <= reflect.Uint64 && v.Type() != durationType
	if isInt && tag == "!!float" {
		if f, err := strconv.ParseFloat(n.Value, 64); err != nil || f != math.Trunc(f) {
			d.fail(path, "not a whole number: %q", val) // yaml would cut it silently
			return
		}
	}
	if err := n.Decode(v.Addr().Interface()); err == nil {
		return
	}
	switch {
	case isInt && tag == "!!int" && strings.HasPrefix(n.Value, "-") && v.Kind() >= reflect.Uint:
		d.fail(path, "must not be negative: %q", val)
	case isInt && (tag == "!!int" || tag == "!!float"):
		d.fail(path, "out of range: %q", val)
	default:
		d.fail(path, "not %s: %q", want, val)
	}
}

// kindName is how a user calls what a field of type t holds.
func kindName(t reflect.Type) string {
	switch {
	case t == durationType:
		return "a duration"
	case t.Kind() == reflect.Bool:
		return "a boolean"
	case t.Kind() == reflect.String:
		return "a string"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Float64:
		return "a number"
	}
	return "a value"
}

// describe names what the user wrote, for "must be X, not Y".
func (d *decoder) describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	}
	return fmt.Sprintf("%q", d.text(n))
}

// text is a scalar as the user wrote it (before ${VAR} expansion).
func (d *decoder) text(n *yaml.Node) string {
	if o, ok := d.original[n]; ok {
		return truncateField(o)
	}
	return truncateField(n.Value)
}

var fieldCache sync.Map // reflect.Type → map[string][]int

// yamlFields maps the yaml keys of struct type t to its fields.
func yamlFields(t reflect.Type) map[string][]int {
	if m, ok := fieldCache.Load(t); ok {
		return m.(map[string][]int)
	}
	m := map[string][]int{}
	for _, f := range reflect.VisibleFields(t) {
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if !f.IsExported() || name == "" || name == "-" {
			continue
		}
		m[name] = f.Index
	}
	fieldCache.Store(t, m)
	return m
}

// suggest is ", did you mean x?" when a known key is close to key.
func suggest(key string, fields map[string][]int) string {
	best, bestD := "", 3
	for k := range fields {
		if dist := editDistance(key, k); dist < bestD || dist == bestD && k < best {
			best, bestD = k, dist
		}
	}
	if best == "" || bestD > len(key)/3+1 {
		return ""
	}
	return fmt.Sprintf(" (did you mean %s?)", best)
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

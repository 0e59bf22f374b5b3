package grants

import (
	"encoding/json"
	"fmt"
	"math"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Call is a canonical sandbox request, as produced by CanonicalPath,
// ParseQuery and ParseJSON.
//
// A tool call (an MCP tools/call) sets Tool to the tool's name and Body to
// its arguments (params.arguments, from ParseJSON: a map[string]any; nil
// when absent), with BodyJSON and HasBody true; it sets nothing else. Only
// a rule naming that tool matches it, and a tool rule matches nothing else.
type Call struct {
	Method   string
	Action   string // aws calls: the IAM action (s3:PutObject)
	Resource string // aws calls: the resource ARN
	Tool     string // tool calls: the tool's name
	Segments []string
	Query    []Param
	Header   http.Header // as sent by the sandbox; forbidden headers are never read
	Body     any         // the parsed body when BodyJSON, from ParseJSON: no two keys of an object share a fold key
	BodyJSON bool
	HasBody  bool
	// WebSocket is a request to upgrade to a WebSocket: only a rule with
	// WebSocket matches it.
	WebSocket bool
}

// Violation says which parameter broke which constraint. It never carries
// the value itself.
type Violation struct {
	Param      string
	Constraint string
	Msg        string
}

func (v *Violation) Error() string {
	return fmt.Sprintf("parameter %s violates %s: %s", v.Param, v.Constraint, v.Msg)
}

// Unwrap makes errors.Is(v, ErrConstraintViolated) true.
func (v *Violation) Unwrap() error { return ErrConstraintViolated }

// Decision is an allowed call: which grant and rule allowed it and what to
// forward. It holds a reservation of the grant's uses and budget until
// Release is called (when the call did not happen after all).
type Decision struct {
	Grant        *Live
	Rule         int
	Irreversible bool
	Query        []Param     // checked query, pins filled in
	Header       http.Header // headers named by the rule's constraints, checked or pinned
	Body         any         // checked body (a tool call's arguments), pins filled in (when BodyJSON)
	BodyChanged  bool        // the body must be re-serialized
	Pinned       []string    // parameters whose value the operator fixed
	Filled       []string    // pinned parameters the broker filled in
	amounts      []amount
	released     bool
	rule         *compiledRule // the rule that allowed the call (Constrained)
	segments     []string      // the call's path segments (Constrained)
}

type amount struct {
	key string
	v   float64
}

type fill struct {
	p param
	v any
}

// Evaluate finds the first grant rule of upstream that allows the call and
// reserves one use (and any budget) of its grant. Errors: ErrNoMatchingGrant,
// a *Violation (ErrConstraintViolated), ErrGrantExpired, ErrGrantExhausted,
// ErrBudgetExceeded. The most specific failure wins.
func Evaluate(now time.Time, live []*Live, upstream string, c *Call) (*Decision, error) {
	return firstRule(now, live, upstream, c, func(g *Live, r *compiledRule, d *Decision) (int, error) {
		if err := d.amountsFor(g, c); err != nil {
			return rankViolation, err
		}
		if err := g.reserve(d.amounts); err != nil {
			return rankExhausted, err
		}
		d.Grant = g
		d.Rule = r.index
		d.Irreversible = r.irreversible
		return 0, nil
	})
}

// The ranks of a refusal: the most specific one found is returned.
const (
	rankExpired = 1 + iota
	rankViolation
	rankExhausted // max_uses or budget
)

// firstRule walks the live, unrevoked grants of upstream for the first rule
// that matches c, whose constraints c satisfies, and that take accepts
// (take returns the rank of its refusal). Without one it returns the most
// specific refusal seen, or ErrNoMatchingGrant.
func firstRule(now time.Time, live []*Live, upstream string, c *Call, take func(*Live, *compiledRule, *Decision) (int, error)) (*Decision, error) {
	var firstErr error
	rank := 0
	note := func(r int, err error) {
		if r > rank {
			rank, firstErr = r, err
		}
	}
	for _, g := range live {
		if g.Grant.Upstream != upstream || g.Revoked() {
			continue
		}
		expired := !now.Before(g.Grant.ExpiresAt)
		for _, r := range g.rules {
			if !r.matches(c) {
				continue
			}
			if expired {
				note(rankExpired, ErrGrantExpired)
				break
			}
			d, err := r.evaluate(c)
			if err != nil {
				note(rankViolation, err)
				continue
			}
			if rk, err := take(g, r, d); err != nil {
				note(rk, err)
				continue
			}
			return d, nil
		}
	}
	if firstErr != nil {
		return nil, firstErr
	}
	return nil, ErrNoMatchingGrant
}

func (r *compiledRule) matches(c *Call) bool {
	if r.tool != "" || c.Tool != "" {
		return r.tool == c.Tool
	}
	if r.action != "" || c.Action != "" {
		return r.action != "" && c.Action != "" && Glob(strings.ToLower(r.action), strings.ToLower(c.Action)) && Glob(r.resource, c.Resource)
	}
	if r.method != c.Method || len(r.tmpl) != len(c.Segments) || c.WebSocket && !r.websocket {
		return false
	}
	for i, s := range r.tmpl {
		if s.param == "" && s.lit != c.Segments[i] {
			return false
		}
	}
	return true
}

func (r *compiledRule) pathValue(name string, segments []string) (string, bool) {
	for i, s := range r.tmpl {
		if s.param == name && i < len(segments) {
			return segments[i], true
		}
	}
	return "", false
}

func (r *compiledRule) evaluate(c *Call) (*Decision, error) {
	d := &Decision{Query: c.Query, Body: c.Body, rule: r, segments: c.Segments}
	if c.HasBody && !c.BodyJSON && (r.hasBody || r.denyUnknown) {
		return nil, &Violation{Param: "body", Constraint: "type", Msg: "this rule only accepts a JSON body"}
	}
	if _, isObject := c.Body.(map[string]any); r.tool != "" && c.Body != nil && !isObject {
		return nil, &Violation{Param: "args", Constraint: "type", Msg: "a tool's arguments must be an object"}
	}
	if err := r.crossCheck(c); err != nil {
		return nil, err
	}
	var fills []fill
	for i := range r.checks {
		ch := &r.checks[i]
		if ch.p.wild {
			if err := ch.checkEach(c.Body); err != nil {
				return nil, err
			}
			continue
		}
		var (
			v       any
			present bool
			err     error
		)
		if ch.p.json() {
			v, present, err = ch.jsonValue(c.Body)
		} else {
			var s string
			s, present, err = r.textValue(ch, c)
			v = s
		}
		if err != nil {
			return nil, err
		}
		if !present {
			switch {
			case ch.c.Pin != nil:
				fills = append(fills, fill{p: ch.p, v: ch.c.Pin})
				d.Pinned = append(d.Pinned, ch.p.key)
				d.Filled = append(d.Filled, ch.p.key)
			case ch.c.Required:
				return nil, &Violation{Param: ch.p.key, Constraint: "required", Msg: "is required"}
			}
			continue
		}
		if err := ch.check(v); err != nil {
			return nil, err
		}
		if ch.c.Pin != nil {
			d.Pinned = append(d.Pinned, ch.p.key)
		}
		if ch.p.loc == locHeader {
			if d.Header == nil {
				d.Header = http.Header{}
			}
			d.Header[ch.p.name] = []string{v.(string)}
		}
	}
	if err := r.unknown(c); err != nil {
		return nil, err
	}
	for _, f := range fills {
		if err := d.apply(f, c); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// textValue reads the path, query or header parameter ch constrains from
// c: its value and whether it is present. A query key that a server reads
// as the parameter but spelled otherwise is refused.
func (r *compiledRule) textValue(ch *check, c *Call) (v string, present bool, err error) {
	switch ch.p.loc {
	case locPath:
		v, present = r.pathValue(ch.p.name, c.Segments)
	case locQuery:
		n := 0
		for _, q := range c.Query {
			if !QueryKeyReaches(q.Key, ch.p.name) {
				continue
			}
			if q.Key != ch.p.name {
				// Read as this parameter by a case-insensitive upstream (ASP.NET, many
				// frameworks) or one that parses key names ("to[]" is "to" to PHP,
				// Rails, qs): never checked under one name and read under another.
				return "", false, misspelled(ch.p.key)
			}
			v, present = q.Value, true
			n++
		}
		if n > 1 {
			return "", false, &Violation{Param: ch.p.key, Constraint: "single", Msg: "a constrained query parameter may appear only once"}
		}
	case locHeader:
		vals := c.Header.Values(ch.p.name)
		if len(vals) > 1 {
			return "", false, &Violation{Param: ch.p.key, Constraint: "single", Msg: "a constrained header may appear only once"}
		}
		if len(vals) == 1 {
			v, present = vals[0], true
		}
	}
	return v, present, nil
}

// jsonValue reads the body (or arguments) parameter ch constrains from
// doc: its value and whether it is present.
func (ch *check) jsonValue(doc any) (v any, present bool, err error) {
	v, present, exact := lookup(doc, ch.p.body)
	if !exact {
		// A key on the path is a case variant of the grant's name: the
		// same field to a case-insensitive upstream, another field to a
		// case-sensitive one. Refused, after the value's own check (so a
		// differing pin is reported as such).
		if present {
			if err := ch.check(v); err != nil {
				return nil, false, err
			}
		}
		return nil, false, misspelled(ch.p.key)
	}
	return v, present, nil
}

// unknown applies the rule's deny_unknown: a body leaf no constraint
// names, or (a tool rule) an argument no constraint names.
func (r *compiledRule) unknown(c *Call) error {
	if !r.denyUnknown || !c.BodyJSON {
		return nil
	}
	if r.tool != "" {
		if arg, ok := unknownArg(c.Body, r.argsNamed); ok {
			return &Violation{Param: "args." + arg, Constraint: "deny_unknown", Msg: "argument is not named by any constraint"}
		}
		return nil
	}
	if leaf, ok := unknownLeaf(c.Body, "", r.bodyNamed); ok {
		return &Violation{Param: "body." + leaf, Constraint: "deny_unknown", Msg: "field is not named by any constraint"}
	}
	return nil
}

// crossCheck refuses a call that carries a parameter constrained in the
// query also in the body, or one constrained in the body also in the query
// (see compiledRule.queryOnly): a server that merges the two would read
// the unchecked one. A query key counts by its name before any "[" (Rails
// and PHP read "to[x]" as "to"); a body counts by its top-level keys, and a
// form (or multipart) body, whose fields the broker does not read, is
// refused beside constrained query parameters. Names compare by fold key
// (query keys as QueryKeyReaches reads them).
func (r *compiledRule) crossCheck(c *Call) error {
	if len(r.bodyOnly) > 0 {
		for _, q := range c.Query {
			for _, n := range r.bodyOnly {
				if QueryKeyReaches(q.Key, n.name) {
					return crossed(n.key, "query")
				}
			}
		}
	}
	if len(r.queryOnly) == 0 || !c.HasBody {
		return nil
	}
	if !c.BodyJSON {
		if formLike(c.Header.Get("Content-Type")) {
			return &Violation{Param: "body", Constraint: "type", Msg: "a form body is not accepted beside constrained query parameters (many servers read its fields as query parameters)"}
		}
		return nil
	}
	if m, ok := c.Body.(map[string]any); ok {
		for k := range m {
			for _, n := range r.queryOnly {
				if foldEqual(k, n.name) {
					return crossed(n.key, "body")
				}
			}
		}
	}
	return nil
}

func crossed(key, where string) error {
	return &Violation{Param: key, Constraint: "location", Msg: "the parameter is also sent in the " + where + ", where a server that merges query and body parameters could read it instead"}
}

// formLike reports whether a body of this Content-Type may be parsed as
// form fields: a form, multipart, or a type the broker cannot parse.
func formLike(ct string) bool {
	if ct == "" {
		return false
	}
	mt, _, err := mime.ParseMediaType(ct)
	return err != nil || mt == "application/x-www-form-urlencoded" || strings.HasPrefix(mt, "multipart/")
}

func (d *Decision) apply(f fill, c *Call) error {
	switch f.p.loc {
	case locQuery:
		q := make([]Param, len(d.Query), len(d.Query)+1)
		copy(q, d.Query)
		d.Query = append(q, Param{Key: f.p.name, Value: scalarText(f.v)})
	case locHeader:
		if d.Header == nil {
			d.Header = http.Header{}
		}
		d.Header[f.p.name] = []string{scalarText(f.v)}
	case locBody, locArgs:
		if c.HasBody && !c.BodyJSON {
			return &Violation{Param: f.p.key, Constraint: "pin", Msg: "cannot be filled into a non-JSON body"}
		}
		if !d.BodyChanged {
			d.Body = deepCopy(d.Body)
			d.BodyChanged = true
		}
		if d.Body == nil {
			d.Body = map[string]any{}
		}
		if !set(d.Body, f.p.body, pinValue(f.v)) {
			return &Violation{Param: f.p.key, Constraint: "pin", Msg: "cannot be filled in: a parent is not an object, or a key on the way differs from the grant's spelling only in case"}
		}
	}
	return nil
}

func (d *Decision) amountsFor(g *Live, c *Call) error {
	for _, p := range g.budget {
		key := p.key
		var (
			v       any
			present bool
		)
		switch p.loc {
		case locQuery:
			for _, q := range d.Query {
				if !QueryKeyReaches(q.Key, p.name) {
					continue
				}
				if q.Key != p.name {
					return misspelled(key)
				}
				if present {
					return &Violation{Param: key, Constraint: "budget", Msg: "a budgeted parameter may appear only once"}
				}
				v, present = q.Value, true
			}
		case locBody, locArgs:
			var exact bool
			v, present, exact = lookup(d.Body, p.body)
			if !exact {
				return misspelled(key)
			}
		}
		if !present {
			continue
		}
		f, ok := number(v)
		if _, isString := v.(string); isString && p.json() {
			ok = false
		}
		if !ok || f < 0 {
			return &Violation{Param: key, Constraint: "budget", Msg: "a budgeted parameter must be a non-negative number"}
		}
		d.amounts = append(d.amounts, amount{key: key, v: f})
	}
	return nil
}

// Release gives back the reservation of a call that did not happen.
// It is safe to call more than once.
func (d *Decision) Release() {
	if d == nil || d.released || d.Grant == nil {
		return
	}
	d.released = true
	d.Grant.Refund(d.Amounts())
}

func (ch *check) check(v any) error {
	c := &ch.c
	viol := func(name, msg string) error {
		return &Violation{Param: ch.p.key, Constraint: name, Msg: msg}
	}
	text := !ch.p.json()
	if c.Pin != nil {
		if text && v.(string) != ch.pinStr || !text && !equalJSON(v, c.Pin) {
			return viol("pin", "differs from the value fixed by the grant")
		}
	}
	if len(c.OneOf) > 0 {
		ok := false
		for i, o := range c.OneOf {
			if text && v.(string) == ch.oneOfStr[i] || !text && equalJSON(v, o) {
				ok = true
				break
			}
		}
		if !ok {
			return viol("one_of", "is not one of the allowed values")
		}
	}
	if ch.re != nil {
		s, ok := v.(string)
		if !ok {
			return viol("pattern", "must be a string")
		}
		if !ch.re.MatchString(s) {
			return viol("pattern", "does not match the allowed pattern")
		}
	}
	if c.Min != nil || c.Max != nil {
		f, ok := number(v)
		if _, isString := v.(string); isString && !text {
			ok = false // a JSON body must carry a number, not a string an upstream may read differently
		}
		if !ok {
			return viol("min/max", "must be a number, written with no more precision than a 64-bit float holds")
		}
		if c.Min != nil && f < *c.Min {
			return viol("min", fmt.Sprintf("is below the minimum %v", *c.Min))
		}
		if c.Max != nil && f > *c.Max {
			return viol("max", fmt.Sprintf("is above the maximum %v", *c.Max))
		}
	}
	if c.MaxLength != nil {
		switch x := v.(type) {
		case string:
			if utf8.RuneCountInString(x) > *c.MaxLength {
				return viol("max_length", fmt.Sprintf("is longer than %d", *c.MaxLength))
			}
		case []any:
			if len(x) > *c.MaxLength {
				return viol("max_length", fmt.Sprintf("has more than %d items", *c.MaxLength))
			}
		default:
			return viol("max_length", "must be a string or an array")
		}
	}
	return nil
}

// number reads a finite number from a JSON number or a decimal string,
// one whose value a float64 holds exactly (see exactNumber): a number
// written with more precision is not one the broker can check as every
// reader reads it.
func number(v any) (float64, bool) {
	var s string
	switch x := v.(type) {
	case json.Number:
		s = string(x)
	case string:
		s = x
	case float64:
		return x, !math.IsNaN(x) && !math.IsInf(x, 0)
	default:
		return 0, false
	}
	f, ok := parseDecimal(s)
	if !ok || math.IsInf(f, 0) || !exactNumber(s, f) {
		return 0, false
	}
	return f, true
}

func equalJSON(a, b any) bool {
	fa, aNum := numberOnly(a)
	fb, bNum := numberOnly(b)
	if aNum || bNum {
		return aNum && bNum && fa == fb
	}
	switch x := a.(type) {
	case string:
		y, ok := b.(string)
		return ok && x == y
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	}
	return false
}

func numberOnly(v any) (float64, bool) {
	switch v.(type) {
	case json.Number, float64:
		return number(v)
	}
	return 0, false
}

func pinValue(v any) any {
	if f, ok := v.(float64); ok {
		return json.Number(strconv.FormatFloat(f, 'f', -1, 64))
	}
	return v
}

// misspelled is the violation of a body reaching a constrained parameter
// through a key spelled differently from the grant.
func misspelled(key string) error {
	return &Violation{Param: key, Constraint: "name", Msg: "a key on this path differs from the grant's spelling only in case; send it as the grant spells it"}
}

// lookup finds the value at path in a parsed body. Object keys match by
// fold key (see foldKey), as a case-insensitive upstream would read them;
// exact is false when a key on the way matched only so (spelled
// differently from path), whether or not the value was then found.
func lookup(doc any, path []string) (v any, found, exact bool) {
	cur := doc
	exact = true
	for _, seg := range path {
		switch x := cur.(type) {
		case map[string]any:
			next, ok := x[seg]
			if !ok {
				// ParseJSON lets no other key share seg's fold key when seg
				// itself is present; otherwise at most one key does.
				var k string
				if k, ok = foldFind(x, seg); !ok {
					return nil, false, exact
				}
				next, exact = x[k], false
			}
			cur = next
		case []any:
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || i >= len(x) {
				return nil, false, exact
			}
			cur = x[i]
		default:
			return nil, false, exact
		}
	}
	return cur, true, exact
}

// foldFind finds the key of m with seg's fold key.
func foldFind(m map[string]any, seg string) (string, bool) {
	for k := range m {
		if foldEqual(k, seg) {
			return k, true
		}
	}
	return "", false
}

// set puts v at path, creating missing objects on the way. It never makes
// two keys of an object share a fold key: it fails when a key on the way
// (or at the end) is a case variant of path's.
func set(doc any, path []string, v any) bool {
	cur := doc
	for i, seg := range path {
		last := i == len(path)-1
		switch x := cur.(type) {
		case map[string]any:
			next, ok := x[seg]
			if !ok {
				if _, variant := foldFind(x, seg); variant {
					return false
				}
			}
			if last {
				x[seg] = v
				return true
			}
			if !ok {
				next = map[string]any{}
				x[seg] = next
			}
			cur = next
		case []any:
			idx, err := strconv.Atoi(seg)
			if err != nil || idx < 0 || idx >= len(x) {
				return false
			}
			if last {
				x[idx] = v
				return true
			}
			cur = x[idx]
		default:
			return false
		}
	}
	return false
}

func deepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = deepCopy(e)
		}
		return m
	case []any:
		a := make([]any, len(x))
		for i, e := range x {
			a[i] = deepCopy(e)
		}
		return a
	}
	return v
}

// unknownLeaf finds a leaf of doc that no named path covers (a named path
// covers itself and everything below it). Paths are compared by fold key:
// named holds the fold keys of the grant's paths, and the leaf is reported
// by fold key too.
func unknownLeaf(doc any, prefix string, named map[string]bool) (string, bool) {
	if prefix != "" && named[prefix] {
		return "", false
	}
	join := func(k string) string {
		if prefix == "" {
			return k
		}
		return prefix + "." + k
	}
	switch x := doc.(type) {
	case map[string]any:
		if len(x) == 0 && prefix != "" {
			return prefix, true
		}
		for k, v := range x {
			k = foldKey(k)
			if strings.Contains(k, ".") {
				return join(k), true
			}
			if leaf, ok := unknownLeaf(v, join(k), named); ok {
				return leaf, true
			}
		}
		return "", false
	case []any:
		if len(x) == 0 {
			return prefix, prefix != ""
		}
		for i, v := range x {
			if leaf, ok := unknownLeaf(v, join(strconv.Itoa(i)), named); ok {
				return leaf, true
			}
		}
		return "", false
	}
	if prefix == "" {
		return "(document)", true
	}
	return prefix, true
}

// BodyBytes is the body to forward for a call that sent raw: the checked
// body re-serialized when the broker changed it (a pin filled in), else raw,
// the very bytes that were checked. Either way no object in it holds two
// keys that differ only in case.
func (d *Decision) BodyBytes(raw []byte) ([]byte, error) {
	if !d.BodyChanged {
		return raw, nil
	}
	b, err := json.Marshal(d.Body)
	if err != nil {
		return nil, badRequest("could not encode the body")
	}
	return b, nil
}

// Amounts returns the budgeted amounts the decision reserved, by parameter.
func (d *Decision) Amounts() map[string]float64 {
	if len(d.amounts) == 0 {
		return nil
	}
	m := make(map[string]float64, len(d.amounts))
	for _, a := range d.amounts {
		m[a.key] = a.v
	}
	return m
}

// Glob matches IAM-style patterns: "*" is any run of characters (slashes
// included), "?" any one character.
func Glob(pattern, s string) bool {
	px, sx := 0, 0
	nextP, nextS := -1, -1
	for px < len(pattern) || sx < len(s) {
		if px < len(pattern) {
			switch c := pattern[px]; c {
			case '*':
				nextP, nextS = px, sx+1
				px++
				continue
			case '?':
				if sx < len(s) {
					px++
					sx++
					continue
				}
			default:
				if sx < len(s) && s[sx] == c {
					px++
					sx++
					continue
				}
			}
		}
		if nextS > 0 && nextS <= len(s) {
			px, sx = nextP, nextS
			continue
		}
		return false
	}
	return true
}

// Package grants holds the grant model (a session's permission to call one
// upstream under rules), its validation, request canonicalization and the
// evaluation of a canonical request against rules and constraints.
package grants

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-broker/airlock/internal/fault"
)

// Errors returned by Evaluate and Reserve. Each maps to one problem code.
var (
	ErrNoMatchingGrant    = fault.New(fault.NoMatchingGrant, "no grant rule allows this call")
	ErrConstraintViolated = fault.New(fault.ConstraintViolated, "constraint violated")
	ErrGrantExpired       = fault.New(fault.GrantExpired, "grant expired")
	ErrGrantExhausted     = fault.New(fault.GrantExhausted, "grant exhausted")
	ErrBudgetExceeded     = fault.New(fault.BudgetExceeded, "budget exceeded")
	// ErrGrantRevoked is why work in flight on a grant ended when the
	// grant was revoked (see Live.Standing); a call that starts after the
	// revocation finds no usable grant (ErrNoMatchingGrant).
	ErrGrantRevoked = fault.New(fault.GrantRevoked, "grant revoked")
)

// Approval modes of a grant.
const (
	ApprovalAuto   = "auto"
	ApprovalAlways = "always"
)

// Spec is what an operator asks for: one upstream, a lifetime and rules.
type Spec struct {
	Upstream          string
	TTL               time.Duration
	MaxUses           int64
	Approval          string
	ApprovalsRequired int
	Budget            map[string]float64
	Rules             []Rule
}

// Rule allows one operation. For http upstreams Method and Path (a template
// such as /repos/{owner}/{repo}/issues); for aws upstreams Action and
// Resource; for mcp upstreams Tool (a tools/call of that tool, whose
// arguments the constraints address as args.PATH).
type Rule struct {
	Method       string
	Path         string
	Action       string
	Resource     string
	Tool         string
	Irreversible *bool
	DenyUnknown  bool
	// WebSocket lets a request carrying Upgrade: websocket through (a GET
	// rule only, never irreversible nor gated: an upgrade cannot be held
	// for a human).
	WebSocket   bool
	Constraints map[string]Constraint
}

// IsIrreversible reports the rule's effective irreversibility: explicit, or
// true for every method other than GET, HEAD and OPTIONS, for every aws
// action but Get*, List*, Head* and Describe*, and for every tool (a
// server's annotations are its claims, never the grant's).
func (r Rule) IsIrreversible() bool {
	if r.Irreversible != nil {
		return *r.Irreversible
	}
	if r.Tool != "" {
		return true
	}
	if r.Action != "" {
		_, op, _ := strings.Cut(r.Action, ":")
		for _, p := range []string{"Get", "List", "Head", "Describe"} {
			if strings.HasPrefix(op, p) {
				return false
			}
		}
		return true
	}
	switch strings.ToUpper(r.Method) {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}

// Constraint restricts one parameter. Pin fixes the value outside the model:
// absent, the broker fills it in; different, the call is denied.
type Constraint struct {
	Pin       any
	OneOf     []any
	Pattern   string
	Min       *float64
	Max       *float64
	MaxLength *int
	Required  bool
}

// Grant is a Spec bound to a session, with its identity and lifetime.
type Grant struct {
	ID        string
	SessionID string
	TaskID    string
	Spec
	CreatedAt time.Time
	ExpiresAt time.Time
	RevokedAt time.Time
	CreatedBy string
}

// Usage is how much of a grant has been consumed.
type Usage struct {
	Uses  int64
	Spent map[string]float64
	// Version orders snapshots of one grant's usage: it grows with every
	// change, under the grant's lock. A store keeps the snapshot with the
	// highest Version, whatever order snapshots reach it in.
	Version uint64
}

// UsageUpdate is a snapshot of one grant's usage that a store persists in the
// same transaction as the audit record of the call it counts (audit.Entry.Side).
type UsageUpdate struct {
	GrantID string
	Usage   Usage
}

// UpstreamKind answers the type ("http", "aws" or "mcp") of a configured
// upstream.
type UpstreamKind func(name string) (kind string, ok bool)

// forbiddenHeaders never reach an upstream from a sandbox, nor may a rule
// constrain or pin them.
var forbiddenHeaders = map[string]bool{
	"Authorization": true, "Proxy-Authorization": true, "Cookie": true, "Host": true,
	"X-Http-Method-Override": true, "X-Http-Method": true, "X-Method-Override": true,
	"Connection": true, "Transfer-Encoding": true, "Content-Length": true, "Te": true,
	"Upgrade": true, "Forwarded": true,
	// Trace context: a sandbox's could spoof ids or force sampling
	// downstream; the broker sends its own only to an upstream that
	// asks (propagate_trace).
	"Traceparent": true, "Tracestate": true, "Baggage": true,
}

// ForbiddenHeader reports whether a header may never be forwarded from a
// sandbox: credentials, hop-by-hop, proxy, forwarding and method-override headers.
func ForbiddenHeader(name string) bool {
	c := http.CanonicalHeaderKey(name)
	return forbiddenHeaders[c] || strings.HasPrefix(c, "Proxy-") || strings.HasPrefix(c, "X-Forwarded-")
}

// Validate checks a Spec at creation; the error is a *fault.FieldError whose field
// is prefixed with prefix (e.g. "grants[0]").
func Validate(prefix string, s *Spec, kind UpstreamKind, maxTTL time.Duration) error {
	fe := func(field, format string, args ...any) error {
		return &fault.FieldError{Field: prefix + field, Msg: fmt.Sprintf(format, args...)}
	}
	k, ok := kind(s.Upstream)
	if s.Upstream == "" {
		return fe(".upstream", "is required")
	}
	if !ok {
		return fe(".upstream", "no upstream named %q is configured", truncate(s.Upstream, 64))
	}
	if s.TTL < 0 {
		return fe(".ttl", "must be positive")
	}
	if s.TTL > maxTTL {
		return fe(".ttl", "exceeds the session's ttl (%s)", maxTTL)
	}
	if s.MaxUses < 0 {
		return fe(".max_uses", "must not be negative")
	}
	switch s.Approval {
	case "":
		s.Approval = ApprovalAuto
	case ApprovalAuto, ApprovalAlways:
	default:
		return fe(".approval", "must be auto or always")
	}
	switch {
	case s.ApprovalsRequired == 0:
		s.ApprovalsRequired = 1
	case s.ApprovalsRequired < 0 || s.ApprovalsRequired > 10:
		return fe(".approvals_required", "must be between 1 and 10")
	}
	if len(s.Rules) == 0 {
		return fe(".rules", "at least one rule is required")
	}
	budgetKeys, err := validateBudget(prefix, s.Budget, k)
	if err != nil {
		return err
	}
	for i := range s.Rules {
		if s.Rules[i].WebSocket && s.Approval == ApprovalAlways {
			return fe(fmt.Sprintf(".rules[%d].websocket", i), "a websocket rule cannot be in a grant with approval always: an upgrade cannot be held for a human")
		}
		if err := validateRule(fmt.Sprintf("%s.rules[%d]", prefix, i), &s.Rules[i], k, budgetKeys); err != nil {
			return err
		}
	}
	return nil
}

// fieldAt makes the FieldErrors of fields below prefix.
func fieldAt(prefix string) func(field, format string, args ...any) error {
	return func(field, format string, args ...any) error {
		return &fault.FieldError{Field: prefix + field, Msg: fmt.Sprintf(format, args...)}
	}
}

// validateBudget checks a grant's budget on an upstream of kind: it caps
// args.PATH parameters on an mcp upstream, body.PATH and query.NAME ones
// on the others. It returns the budgeted keys, sorted.
func validateBudget(prefix string, budget map[string]float64, kind string) ([]string, error) {
	fe := fieldAt(prefix)
	keys := slices.Sorted(maps.Keys(budget))
	spelling := bodySpelling{}
	for _, key := range keys {
		field := ".budget." + key
		switch {
		case kind == "mcp" && !strings.HasPrefix(key, "args."):
			return nil, fe(field, "a budget on an mcp upstream caps an args.* parameter (a tool's argument)")
		case kind != "mcp" && strings.HasPrefix(key, "args."):
			return nil, fe(field, "args.* addresses a tool's arguments, only in a grant on an mcp upstream; a budget here caps a body.* or query.* parameter")
		case kind != "mcp" && !strings.HasPrefix(key, "body.") && !strings.HasPrefix(key, "query."):
			return nil, fe(field, "a budget caps a body.* or query.* parameter")
		}
		p, err := splitParam(key)
		if err != nil {
			return nil, fe(field, "%v", err)
		}
		if p.wild {
			return nil, fe(field, "a budget adds up one number per call: its path cannot hold *")
		}
		if other := spelling.add(p); other != "" {
			return nil, fe(field, "spells a %s differently from %s only in case (JSON keys are matched case-insensitively)", p.what(), other)
		}
		if limit := budget[key]; !(limit > 0) || math.IsInf(limit, 0) {
			return nil, fe(field, "must be a positive number")
		}
	}
	return keys, nil
}

// bodySpelling holds, by fold key, each body path (and every prefix of it)
// of a grant as spelled, to refuse two spellings of one field.
type bodySpelling map[string]string

// add records p's body (or arguments) path and its prefixes, and returns
// the parameter whose spelling of one of them differs from p's only in
// case ("" if none).
func (b bodySpelling) add(p param) string {
	if !p.json() {
		return ""
	}
	loc, _, _ := strings.Cut(p.key, ".")
	loc += "."
	for i := range p.body {
		spelled := strings.Join(p.body[:i+1], ".")
		fk := loc + foldKey(spelled)
		if other, ok := b[fk]; ok && other != spelled {
			return loc + other
		}
		b[fk] = spelled
	}
	return ""
}

// validateRule checks one rule; budgetKeys are the grant's budgeted
// parameters, which must spell body fields as the rule's constraints do.
func validateRule(prefix string, r *Rule, kind string, budgetKeys []string) error {
	params, err := validateShape(prefix, r, kind)
	if err != nil {
		return err
	}
	return validateConstraints(prefix, r, kind, params, budgetKeys)
}

// validateShape checks what a rule allows, as its upstream's kind names
// it, and returns the parameters of its path template.
func validateShape(prefix string, r *Rule, kind string) ([]string, error) {
	fe := fieldAt(prefix)
	if kind == "mcp" {
		return nil, validateToolShape(fe, r)
	}
	if r.Tool != "" {
		return nil, fe(".tool", "names a tool: only a rule in a grant on an mcp upstream takes it")
	}
	if kind == "aws" {
		if r.Action == "" || r.Resource == "" {
			return nil, fe("", "an aws rule needs action and resource")
		}
		if svc, op, ok := strings.Cut(r.Action, ":"); !ok || svc == "" || op == "" {
			return nil, fe(".action", "must be service:Operation, e.g. s3:PutObject (globs allowed)")
		}
		if r.Method != "" || r.Path != "" {
			return nil, fe("", "an aws rule takes action and resource, not method and path")
		}
		if r.WebSocket {
			return nil, fe(".websocket", "an aws rule cannot allow a WebSocket upgrade")
		}
		return nil, nil
	}
	if r.Action != "" || r.Resource != "" {
		return nil, fe("", "an http rule takes method and path, not action and resource")
	}
	r.Method = strings.ToUpper(r.Method)
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodPost,
		http.MethodPut, http.MethodPatch, http.MethodDelete:
	case "":
		return nil, fe(".method", "is required")
	default:
		return nil, fe(".method", "%q is not an allowed method", truncate(r.Method, 16))
	}
	tmpl, err := parseTemplate(r.Path)
	if err != nil {
		return nil, fe(".path", "%v", err)
	}
	if r.WebSocket {
		if r.Method != http.MethodGet {
			return nil, fe(".websocket", "only a GET rule may allow a WebSocket upgrade")
		}
		if r.IsIrreversible() {
			return nil, fe(".websocket", "a websocket rule cannot be irreversible: an upgrade cannot be held for a human")
		}
	}
	var params []string
	for _, s := range tmpl {
		if s.param != "" {
			params = append(params, s.param)
		}
	}
	return params, nil
}

// validateConstraints checks a rule's constraints: params are its path
// template's parameters, budgetKeys the grant's budgeted parameters, which
// must spell JSON keys as the constraints do.
func validateConstraints(prefix string, r *Rule, kind string, params, budgetKeys []string) error {
	fe := fieldAt(prefix)
	spelling := bodySpelling{}
	for _, key := range budgetKeys {
		if p, err := splitParam(key); err == nil {
			spelling.add(p)
		}
	}
	for _, key := range slices.Sorted(maps.Keys(r.Constraints)) {
		c := r.Constraints[key]
		field := ".constraints." + key
		p, err := splitParam(key)
		if err != nil {
			return fe(field, "%v", err)
		}
		if err := placeFor(p, kind); err != nil {
			return fe(field, "%v", err)
		}
		if other := spelling.add(p); other != "" {
			return fe(field, "spells a %s differently from %s only in case (JSON keys are matched case-insensitively)", p.what(), other)
		}
		switch p.loc {
		case locPath:
			if !slices.Contains(params, p.name) {
				return fe(field, "the path template has no parameter {%s}", p.name)
			}
		case locHeader:
			if ForbiddenHeader(p.name) {
				return fe(field, "header %s cannot be constrained", p.name)
			}
		}
		if err := validateConstraint(p, c); err != nil {
			return fe(field, "%v", err)
		}
	}
	return nil
}

func validateConstraint(p param, c Constraint) error {
	if c.Pin == nil && len(c.OneOf) == 0 && c.Pattern == "" && c.Min == nil && c.Max == nil && c.MaxLength == nil && !c.Required {
		return errors.New("constraint sets nothing (pin, one_of, pattern, min, max, max_length, required)")
	}
	if p.wild && c.Pin != nil {
		return errors.New("a pin cannot be filled into every element (*): pin a path without *")
	}
	if p.wild && c.Required {
		return errors.New("required cannot apply to every element (*): require a path without *")
	}
	if c.Pin != nil {
		if err := validScalar(p, c.Pin); err != nil {
			return fmt.Errorf("pin: %v", err)
		}
	}
	for _, v := range c.OneOf {
		if err := validScalar(p, v); err != nil {
			return fmt.Errorf("one_of: %v", err)
		}
	}
	if c.Pattern != "" {
		if _, err := regexp.Compile(c.Pattern); err != nil {
			return errors.New("pattern is not a valid RE2 expression")
		}
	}
	for _, b := range []*float64{c.Min, c.Max} {
		if b != nil && (math.IsNaN(*b) || math.IsInf(*b, 0)) {
			return errors.New("min and max must be finite numbers")
		}
	}
	if c.Min != nil && c.Max != nil && *c.Min > *c.Max {
		return errors.New("min is greater than max")
	}
	if c.MaxLength != nil && *c.MaxLength < 0 {
		return errors.New("max_length must not be negative")
	}
	return nil
}

func validScalar(p param, v any) error {
	switch x := v.(type) {
	case string:
		if p.loc == locHeader || p.loc == locQuery {
			if !validText(x) {
				return errors.New("value is not valid text")
			}
		}
		return nil
	case bool:
		return nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return errors.New("value must be finite")
		}
		return nil
	case interface{ String() string }: // json.Number
		if _, ok := parseDecimal(x.String()); !ok {
			return errors.New("value is not a number")
		}
		return nil
	}
	return errors.New("value must be a string, number or boolean")
}

// Parameter locations.
const (
	locPath = iota + 1
	locQuery
	locHeader
	locBody
	locArgs // a tool call's arguments (params.arguments)
)

type param struct {
	loc  int
	name string   // path/query/header name (header canonicalized)
	body []string // body (or arguments) path segments
	key  string   // the full key as written
	wild bool     // an arguments path with a * segment (every element of an array)
}

// json reports whether p addresses a parsed JSON document: the body, or a
// tool call's arguments.
func (p param) json() bool { return p.loc == locBody || p.loc == locArgs }

// what is what p's JSON keys name, for messages.
func (p param) what() string {
	if p.loc == locArgs {
		return "tool argument"
	}
	return "body field"
}

func splitParam(key string) (param, error) {
	loc, name, ok := strings.Cut(key, ".")
	if !ok || name == "" {
		return param{}, errors.New("parameter must be path.NAME, query.NAME, header.NAME, body.PATH or args.PATH")
	}
	switch loc {
	case "path":
		return param{loc: locPath, name: name, key: key}, nil
	case "query":
		return param{loc: locQuery, name: name, key: key}, nil
	case "header":
		return param{loc: locHeader, name: http.CanonicalHeaderKey(name), key: key}, nil
	case "body":
		segs := strings.Split(name, ".")
		if slices.Contains(segs, "") {
			return param{}, errors.New("body path has an empty segment")
		}
		return param{loc: locBody, body: segs, key: key}, nil
	case "args":
		segs := strings.Split(name, ".")
		if slices.Contains(segs, "") {
			return param{}, errors.New("args path has an empty segment")
		}
		return param{loc: locArgs, body: segs, key: key, wild: slices.Contains(segs, "*")}, nil
	}
	return param{}, errors.New("parameter must start with path, query, header, body or args")
}

type tmplSeg struct {
	lit   string
	param string
}

func parseTemplate(t string) ([]tmplSeg, error) {
	if !strings.HasPrefix(t, "/") {
		return nil, errors.New("must start with /")
	}
	if t == "/" {
		return nil, nil
	}
	var out []tmplSeg
	seen := map[string]bool{}
	for s := range strings.SplitSeq(t[1:], "/") {
		if strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}") {
			name := s[1 : len(s)-1]
			if !validIdent(name) {
				return nil, fmt.Errorf("invalid parameter name %q", truncate(name, 32))
			}
			if seen[name] {
				return nil, fmt.Errorf("parameter {%s} appears twice", name)
			}
			seen[name] = true
			out = append(out, tmplSeg{param: name})
			continue
		}
		if strings.ContainsAny(s, "{}") {
			return nil, errors.New("a parameter must be a whole segment")
		}
		// Literal segments are the operator's: ";" may appear (such a rule
		// only matches on an upstream that allows path parameters).
		segs, err := CanonicalPath("/"+s, PathOptions{AllowSemicolons: true})
		if err != nil || len(segs) != 1 {
			return nil, fmt.Errorf("segment %q is not canonical", truncate(s, 32))
		}
		out = append(out, tmplSeg{lit: segs[0]})
	}
	return out, nil
}

func validIdent(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		if c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9' {
			continue
		}
		return false
	}
	return true
}

// Live is a grant compiled for the hot path, with its usage counters.
type Live struct {
	Grant  Grant
	rules  []*compiledRule
	budget []param // the budgeted parameters, by key

	revoked atomic.Bool
	mu      sync.Mutex
	usage   Usage
	pending Usage   // held by pending actions (Version unused); see usage.go
	counter Counter // where the limits are counted when shared (SetCounter), or nil: here

	endMu sync.Mutex              // guards the standing's set-up against Revoke and Expire
	end   context.Context         // the grant's standing (Bind), or nil before
	endFn context.CancelCauseFunc // ends it
}

type compiledRule struct {
	index        int
	method       string
	action       string
	resource     string
	tool         string
	tmpl         []tmplSeg
	irreversible bool
	denyUnknown  bool
	websocket    bool
	checks       []check
	bodyNamed    map[string]bool // dotted body paths named by a constraint, by fold key
	argsNamed    map[string]bool // a tool rule's arguments named by a constraint (first segment), by fold key
	hasBody      bool            // a constraint or the grant's budget reads a body.* field
	// A parameter constrained (or budgeted) in the query but not the body,
	// or in the body but not the query, must not also be sent in the other
	// place: many servers merge query and body parameters into one map,
	// where one place overrides the other (Rails: the query wins over a
	// JSON body; Laravel: a JSON body wins over the query; PHP's $_REQUEST:
	// a form wins). queryOnly and bodyOnly hold such names (a body path's
	// first segment) and the parameter keys that name them.
	queryOnly []crossName
	bodyOnly  []crossName
}

// crossName is a constrained parameter's name as the other place would
// carry it, and the constraint's key.
type crossName struct{ name, key string }

type check struct {
	p        param
	c        Constraint
	re       *regexp.Regexp
	pinStr   string // the pin as text, for path/query/header
	oneOfStr []string
}

// Compile turns a validated grant into its hot-path form.
func Compile(g Grant, u Usage) (*Live, error) {
	l := &Live{Grant: g, usage: u}
	if l.usage.Spent == nil {
		l.usage.Spent = map[string]float64{}
	}
	for key := range g.Budget {
		p, err := splitParam(key)
		if err != nil {
			return nil, fmt.Errorf("budget: %w", err)
		}
		l.budget = append(l.budget, p)
	}
	sort.Slice(l.budget, func(i, j int) bool { return l.budget[i].key < l.budget[j].key })
	for i, r := range g.Rules {
		cr := &compiledRule{index: i, method: r.Method, action: r.Action, resource: r.Resource, tool: r.Tool, irreversible: r.IsIrreversible(), denyUnknown: r.DenyUnknown, websocket: r.WebSocket, bodyNamed: map[string]bool{}}
		if r.Path != "" {
			t, err := parseTemplate(r.Path)
			if err != nil {
				return nil, fmt.Errorf("rule %d: %w", i, err)
			}
			cr.tmpl = t
		}
		keys := make([]string, 0, len(r.Constraints))
		for k := range r.Constraints {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			c := r.Constraints[k]
			p, err := splitParam(k)
			if err != nil {
				return nil, fmt.Errorf("rule %d: %w", i, err)
			}
			ch := check{p: p, c: c}
			if c.Pattern != "" {
				ch.re, err = regexp.Compile(`^(?:` + c.Pattern + `)$`)
				if err != nil {
					return nil, fmt.Errorf("rule %d: %w", i, err)
				}
			}
			if c.Pin != nil {
				ch.pinStr = scalarText(c.Pin)
			}
			for _, v := range c.OneOf {
				ch.oneOfStr = append(ch.oneOfStr, scalarText(v))
			}
			switch p.loc {
			case locBody:
				cr.hasBody = true
				cr.bodyNamed[foldKey(strings.Join(p.body, "."))] = true
			case locArgs:
				if cr.argsNamed == nil {
					cr.argsNamed = map[string]bool{}
				}
				cr.argsNamed[foldKey(p.body[0])] = true
			}
			cr.checks = append(cr.checks, ch)
		}
		for _, p := range l.budget {
			if p.loc == locBody {
				// A budget reads the body: one the broker cannot read as JSON
				// (an upstream may decode it whatever its type) is not counted.
				cr.hasBody = true
			}
		}
		cr.crossNames(l.budget)
		l.rules = append(l.rules, cr)
	}
	return l, nil
}

// crossNames fills queryOnly and bodyOnly from the rule's checks and the
// grant's budgeted parameters.
func (r *compiledRule) crossNames(budget []param) {
	ps := make([]param, 0, len(r.checks)+len(budget))
	for _, ch := range r.checks {
		ps = append(ps, ch.p)
	}
	ps = append(ps, budget...)
	in := func(loc int, name string) bool {
		for _, p := range ps {
			if p.loc == loc && (loc == locQuery && foldEqual(p.name, name) || loc == locBody && foldEqual(p.body[0], name)) {
				return true
			}
		}
		return false
	}
	for _, p := range ps {
		switch {
		case p.loc == locQuery && !in(locBody, p.name):
			r.queryOnly = append(r.queryOnly, crossName{name: p.name, key: p.key})
		case p.loc == locBody && !in(locQuery, p.body[0]):
			r.bodyOnly = append(r.bodyOnly, crossName{name: p.body[0], key: p.key})
		}
	}
}

// Revoke marks the grant unusable at once and ends its standing (cause
// ErrGrantRevoked): work in flight on it stops.
func (l *Live) Revoke() {
	l.revoked.Store(true)
	l.endMu.Lock()
	if l.endFn != nil {
		l.endFn(ErrGrantRevoked)
	}
	l.endMu.Unlock()
}

// Expire ends the grant's standing at its expiry (cause ErrGrantExpired):
// the broker's timer calls it when the grant's ExpiresAt comes.
func (l *Live) Expire() {
	l.endMu.Lock()
	if l.endFn != nil {
		l.endFn(ErrGrantExpired)
	}
	l.endMu.Unlock()
}

// Bind makes the grant's standing a child of parent (its session's): it
// ends when parent does (with parent's cause), when the grant is revoked
// (ErrGrantRevoked) or when it expires (Expire, ErrGrantExpired). Only the
// first Bind counts; a grant revoked before it is bound starts ended.
func (l *Live) Bind(parent context.Context) {
	l.endMu.Lock()
	defer l.endMu.Unlock()
	if l.end != nil {
		return
	}
	l.end, l.endFn = context.WithCancelCause(parent)
	if l.revoked.Load() {
		l.endFn(ErrGrantRevoked)
	}
}

// Standing is a context that ends when the grant stops standing (see
// Bind): work in flight on the grant derives from it. It is nil for a
// grant never bound (one read only to be shown).
func (l *Live) Standing() context.Context {
	l.endMu.Lock()
	defer l.endMu.Unlock()
	return l.end
}

// Revoked reports whether Revoke was called.
func (l *Live) Revoked() bool { return l.revoked.Load() }

// HasIrreversible reports whether any rule of the grant is irreversible.
func (l *Live) HasIrreversible() bool {
	for _, r := range l.rules {
		if r.irreversible {
			return true
		}
	}
	return false
}

func scalarText(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case bool:
		return strconv.FormatBool(x)
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case interface{ String() string }:
		return x.String()
	}
	return fmt.Sprint(v)
}

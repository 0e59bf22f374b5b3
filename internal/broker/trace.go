package broker

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/airlock-broker/airlock/internal/fault"
)

// Traces of the call pipeline (docs/observability.md, "Traces"). Each
// sandbox call, whatever its door, is one server span started by Do, Open
// or runAction: always a new root (a sandbox's traceparent, tracestate or
// baggage never parents it, and never reaches an upstream: they are
// forbidden headers), linked to the operator's trace given at the
// session's creation. Its children: the credential (fetch or mint), the
// durable "allowed" record, the wait for a human, and one client span per
// upstream attempt, whose URL is the checked one before injection (a query
// credential is the placeholder). The span's trace and span ids go in each
// audit record of the call (trace_id, span_id), and the "allowed" record's
// sequence number in the span (airlock.audit.seq).
//
// With no tracer, or a no-op one (tracing off), none of this runs: every
// helper returns at once on a nil span, and no attribute is built.

// Span attribute keys of the broker's own.
const (
	attrSessionID = attribute.Key("airlock.session_id")
	attrTaskID    = attribute.Key("airlock.task_id")
	attrGrantID   = attribute.Key("airlock.grant_id")
	attrActionID  = attribute.Key("airlock.action_id")
	attrUpstream  = attribute.Key("airlock.upstream")
	attrRequestID = attribute.Key("airlock.request_id")
	attrDecision  = attribute.Key("airlock.decision")
	attrCode      = attribute.Key("airlock.code")
	attrAuditSeq  = attribute.Key("airlock.audit.seq")
	attrMinted    = attribute.Key("airlock.credential.minted")
)

// tracerOf is the pipeline's tracer: nil for none or a no-op tracer, so
// that tracing off costs nothing.
func tracerOf(t trace.Tracer) trace.Tracer {
	switch t.(type) {
	case nil, noop.Tracer, *noop.Tracer:
		return nil
	}
	return t
}

// callTrace is a call's server span and what it says at its end; its zero
// value is a call not traced.
type callTrace struct {
	span   trace.Span
	seq    uint64 // the "allowed" record's sequence number
	status int    // the status the sandbox got, once the call completed
	code   string // the completion's code
	denied bool   // the call's refusal was recorded
}

// startTrace starts the call's server span as a new root and returns ctx
// carrying it; a sampled span's ids go in the call's audit records.
func (c *call) startTrace(ctx context.Context) context.Context {
	t := c.b.tracer
	if t == nil {
		return ctx
	}
	ctx, span := t.Start(ctx, "airlock.call", trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attrRequestID.String(c.rec.RequestID), semconv.HTTPRequestMethodKey.String(c.rec.Method)))
	c.tr.span = span
	if sc := span.SpanContext(); sc.IsSampled() {
		c.rec.TraceID, c.rec.SpanID = sc.TraceID().String(), sc.SpanID().String()
	}
	return ctx
}

// endTrace names the call's span after what matched (see spanName), sets
// what the call became (decision, code, status; Error on a 5xx) and ends it.
func (c *call) endTrace() {
	s := c.tr.span
	if s == nil {
		return
	}
	s.SetName(c.spanName())
	attrs := make([]attribute.KeyValue, 0, 12)
	attrs = append(attrs, attrUpstream.String(c.rec.Upstream))
	if c.l != nil {
		attrs = append(attrs, attrSessionID.String(c.l.Session.ID), attrTaskID.String(c.l.Session.TaskID))
		if sc, ok := ParseTraceparent(c.l.Session.Traceparent); ok {
			s.AddLink(trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{attribute.String("airlock.link", "session")}})
		}
	} else if c.action != nil {
		attrs = append(attrs, attrSessionID.String(c.action.SessionID), attrTaskID.String(c.action.TaskID))
	}
	if c.grant != nil {
		attrs = append(attrs, attrGrantID.String(c.grant.Grant.ID))
	}
	if c.actionID != "" {
		attrs = append(attrs, attrActionID.String(c.actionID))
	}
	if c.out != nil {
		attrs = append(attrs, semconv.URLPath(c.out.Path))
	}
	if c.u != nil && c.u.BaseURL != nil {
		attrs = append(attrs, semconv.ServerAddress(c.u.BaseURL.Hostname()))
	}
	decision, code, status := c.traceOutcome()
	attrs = append(attrs, attrDecision.String(decision))
	if code != "" {
		attrs = append(attrs, attrCode.String(code))
	}
	if status != 0 {
		attrs = append(attrs, semconv.HTTPResponseStatusCode(status))
	}
	if c.tr.seq != 0 {
		attrs = append(attrs, attrAuditSeq.Int64(int64(c.tr.seq)))
	}
	s.SetAttributes(attrs...)
	if status >= 500 {
		s.SetStatus(codes.Error, code)
	}
	s.End()
}

// traceOutcome is what the call became, as its span says it: the decision
// (allow, deny, hold, error), the problem or completion code and the status
// the sandbox got.
func (c *call) traceOutcome() (decision, code string, status int) {
	o := &c.outcome
	status, code = c.tr.status, c.tr.code
	switch {
	case o.Err != nil:
		f := fault.Of(o.Err)
		code, status = f.Code(), f.Status()
	case o.Action != nil:
		status = 202
	case o.Result != nil:
		status = o.Result.Status
	case o.Answer != nil && status == 0:
		status = o.Answer.Status
	}
	switch {
	case c.tr.denied:
		decision = "deny"
	case o.Held:
		decision = "hold"
	case o.Err != nil || status >= 500 && code != "":
		decision = "error"
	default:
		decision = "allow"
	}
	return decision, code, status
}

// spanName names a call's span after what the grants matched, never the
// path the sandbox sent: the AWS action, or the method and the rule's path
// template ("GET /repos/{owner}/{repo}"); an approved action's execution,
// or a call refused before a rule matched, by its method and upstream.
func (c *call) spanName() string {
	switch {
	case c.d != nil && c.d.Rule < len(c.d.Grant.Grant.Rules):
		r := &c.d.Grant.Grant.Rules[c.d.Rule]
		if r.Action != "" {
			return r.Action
		}
		if r.Path != "" {
			return c.rec.Method + " " + r.Path
		}
	case c.actionID != "":
		return "execute " + c.rec.Method + " " + c.rec.Upstream
	}
	if c.rec.Upstream == "" {
		return c.rec.Method
	}
	return c.rec.Method + " " + c.rec.Upstream
}

// childSpan starts a span of the call under ctx's (nil when not traced).
func (c *call) childSpan(ctx context.Context, name string, kind trace.SpanKind, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if c.tr.span == nil {
		return ctx, nil
	}
	return c.b.tracer.Start(ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
}

// endSpan ends a child span, in error when err is not nil.
func endSpan(s trace.Span, err error) {
	if s == nil {
		return
	}
	if err != nil {
		s.SetStatus(codes.Error, fault.Of(err).Code())
	}
	s.End()
}

// startCredential starts the span of the credential's fetch or mint.
func (c *call) startCredential(ctx context.Context) (context.Context, trace.Span) {
	if c.tr.span == nil {
		return ctx, nil
	}
	return c.childSpan(ctx, "airlock.credential", trace.SpanKindInternal, attrUpstream.String(c.u.Name), attrMinted.Bool(c.u.Minter != nil))
}

// startUpstream starts the client span of the upstream attempt: the URL
// is the checked one before injection. An upstream configured to
// propagate the broker's trace (propagate_trace) gets this span's
// traceparent; no other does.
func (c *call) startUpstream(ctx context.Context) (context.Context, trace.Span) {
	if c.tr.span == nil {
		return ctx, nil
	}
	attrs := []attribute.KeyValue{attrUpstream.String(c.u.Name), semconv.HTTPRequestMethodKey.String(c.out.Method), semconv.URLPath(c.out.Path)}
	if c.u.BaseURL != nil {
		attrs = append(attrs, semconv.ServerAddress(c.u.BaseURL.Hostname()), semconv.URLFull(c.u.URL(c.out.Path, c.out.Query)))
	}
	ctx, s := c.childSpan(ctx, c.out.Method, trace.SpanKindClient, attrs...)
	if c.u.PropagateTrace {
		propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(c.out.Header))
	}
	return ctx, s
}

// endUpstream ends the client span of an attempt with the upstream's
// status, or its error.
func endUpstream(s trace.Span, status int, err error) {
	if s == nil {
		return
	}
	if status != 0 {
		s.SetAttributes(semconv.HTTPResponseStatusCode(status))
	}
	if err != nil || status >= 500 {
		code := ""
		if err != nil {
			code = fault.Of(err).Code()
		}
		s.SetStatus(codes.Error, code)
	}
	s.End()
}

// ParseTraceparent parses a W3C traceparent header (version 00, or a later
// version read as 00) into a remote span context; ok is false for anything
// invalid, which is then ignored, as W3C Trace Context says.
func ParseTraceparent(v string) (trace.SpanContext, bool) {
	v = strings.TrimSpace(v)
	if len(v) < 55 || v[2] != '-' || v[35] != '-' || v[52] != '-' || (len(v) > 55 && (v[:2] == "00" || v[55] != '-')) {
		return trace.SpanContext{}, false
	}
	ver, flags := v[:2], v[53:55]
	if ver == "ff" || !lowerHex(ver) || !lowerHex(flags) || !lowerHex(v[3:35]) || !lowerHex(v[36:52]) {
		return trace.SpanContext{}, false
	}
	tid, err := trace.TraceIDFromHex(v[3:35])
	if err != nil {
		return trace.SpanContext{}, false
	}
	sid, err := trace.SpanIDFromHex(v[36:52])
	if err != nil {
		return trace.SpanContext{}, false
	}
	var tf trace.TraceFlags
	if strings.IndexByte("13579bdf", flags[1]) >= 0 { // the sampled bit
		tf = trace.FlagsSampled
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: tf, Remote: true})
	return sc, sc.IsValid()
}

// FormatTraceparent is sc as a version-00 traceparent.
func FormatTraceparent(sc trace.SpanContext) string {
	flags := "00"
	if sc.IsSampled() {
		flags = "01"
	}
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + flags
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// operatorTrace is the operator's traceparent, normalized, or "" when it
// is not a valid one.
func operatorTrace(v string) string {
	sc, ok := ParseTraceparent(v)
	if !ok {
		return ""
	}
	return FormatTraceparent(sc)
}

package httpapi

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/auth"
	"github.com/airlock-broker/airlock/internal/printable"
)

// auditFilter selects records for export.
type auditFilter struct {
	since, until                    time.Time
	sessionID, taskID, grantID, typ string
	traceID                         string
	from                            uint64
	format                          string
}

func parseAuditFilter(r *http.Request) (auditFilter, error) {
	q := r.URL.Query()
	f := auditFilter{sessionID: q.Get("session_id"), taskID: q.Get("task_id"), grantID: q.Get("grant_id"), typ: q.Get("type"),
		traceID: q.Get("trace_id"), format: q.Get("format")}
	if f.traceID != "" && !traceIDHex(f.traceID) {
		return f, fmt.Errorf("%w: trace_id must be 32 lowercase hex digits (W3C trace context)", errBadRequestJSON)
	}
	for _, t := range []struct {
		name string
		dst  *time.Time
	}{{"since", &f.since}, {"until", &f.until}} {
		if v := q.Get(t.name); v != "" {
			ts, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return f, fmt.Errorf("%w: %s must be an RFC 3339 time", errBadRequestJSON, t.name)
			}
			*t.dst = ts
		}
	}
	if v := q.Get("from_seq"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return f, fmt.Errorf("%w: from_seq must be a sequence number", errBadRequestJSON)
		}
		f.from = n
	}
	switch f.format {
	case "":
		f.format = "jsonl"
	case "jsonl", "csv", "ocsf":
	default:
		return f, fmt.Errorf("%w: format must be jsonl, csv or ocsf", errBadRequestJSON)
	}
	return f, nil
}

func (f *auditFilter) any() bool {
	return !f.since.IsZero() || !f.until.IsZero() || f.sessionID != "" || f.taskID != "" || f.grantID != "" || f.typ != "" || f.traceID != ""
}

func (f *auditFilter) match(e *audit.Event) bool {
	return (f.since.IsZero() || !e.Time.Before(f.since)) && (f.until.IsZero() || e.Time.Before(f.until)) &&
		(f.sessionID == "" || e.SessionID == f.sessionID) && (f.taskID == "" || e.TaskID == f.taskID) &&
		(f.grantID == "" || e.GrantID == f.grantID) && (f.typ == "" || e.Type == f.typ) &&
		(f.traceID == "" || e.TraceID == f.traceID)
}

// traceIDHex reports whether s is a W3C trace id: 32 lowercase hex digits,
// not all zero.
func traceIDHex(s string) bool {
	if len(s) != 32 || s == strings.Repeat("0", 32) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// exportAudit streams matching records as JSON lines (the stored, hashed
// bytes), CSV or OCSF API Activity, in constant memory.
func (s *Server) exportAudit(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	f, err := parseAuditFilter(r)
	if err != nil {
		return err
	}
	ct := map[string]string{"jsonl": "application/x-ndjson", "csv": "text/csv; charset=utf-8", "ocsf": "application/x-ndjson"}[f.format]
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Cache-Control", "no-store")
	bw := bufio.NewWriterSize(w, 64<<10)
	enc := newAuditEncoder(f.format, bw)
	decode := f.format != "jsonl" || f.any()
	var e audit.Event
	// A session's records come from the store's index by session, the
	// whole log otherwise; the filter below applies either way.
	err = s.b.ScanAudit(r.Context(), f.sessionID, f.from, func(seq uint64, data []byte) error {
		if decode {
			e = audit.Event{}
			if err := json.Unmarshal(data, &e); err != nil {
				return fmt.Errorf("record %d: %w", seq, err)
			}
			if !f.match(&e) {
				return nil
			}
		}
		return enc(data, &e)
	})
	if err != nil {
		// The status is sent; a truncated stream (no final flush) is the signal.
		s.log.Error("audit export interrupted", "err", err)
		return nil
	}
	return bw.Flush()
}

// newAuditEncoder returns a function writing one record in format.
func newAuditEncoder(format string, w io.Writer) func(raw []byte, e *audit.Event) error {
	switch format {
	case "csv":
		buf := appendCSVHeader(make([]byte, 0, 1024))
		return func(_ []byte, e *audit.Event) error {
			buf = appendCSVRow(buf, e)
			_, err := w.Write(buf)
			buf = buf[:0]
			return err
		}
	case "ocsf":
		je := json.NewEncoder(w)
		return func(_ []byte, e *audit.Event) error { return je.Encode(toOCSF(e)) }
	}
	return func(raw []byte, _ *audit.Event) error {
		if _, err := w.Write(raw); err != nil {
			return err
		}
		_, err := w.Write([]byte{'\n'})
		return err
	}
}

var csvHeader = []string{"seq", "time", "type", "actor_kind", "actor_id", "request_id", "session_id", "task_id", "grant_id",
	"action_id", "trace_id", "span_id", "upstream", "method", "path", "decision", "code", "reason", "status", "latency_us", "bytes_in", "bytes_out", "prev_hash", "hash"}

// The CSV export is made to be opened in a spreadsheet, and much of what it
// holds was chosen by a hostile sandbox (the upstream name in the URL, the
// method, the path) or by people (task ids, comments, reasons). Every text
// cell therefore goes through one writer, appendCSVText, which follows
// OWASP's CSV injection guidance: each non-empty text cell is wrapped in
// double quotes with inner quotes doubled (RFC 4180 §2.6-2.7), so no
// separator, ',' or a locale's ';', inside a value can start a new cell; and
// a cell a spreadsheet could evaluate as a formula is prefixed with a single
// quote (see csvFormulaLike). The numeric columns (seq, status, latency_us,
// bytes_in, bytes_out) are written by strconv from integers, unquoted and
// never prefixed: a spreadsheet reads them as numbers, and a negative one
// ("-5") is a number, not a formula. JSONL (the hashed form) and OCSF carry
// every value exactly.

func appendCSVHeader(b []byte) []byte {
	for i, h := range csvHeader {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendCSVText(b, h)
	}
	return append(b, '\n')
}

func appendCSVRow(b []byte, e *audit.Event) []byte {
	b = strconv.AppendUint(b, e.Seq, 10)
	b = append(b, ',', '"')
	b = e.Time.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, '"')
	for _, s := range [...]string{e.Type, e.Actor.Kind, e.Actor.ID, e.RequestID, e.SessionID, e.TaskID, e.GrantID,
		e.ActionID, e.TraceID, e.SpanID, e.Upstream, e.Method, e.Path, e.Decision, e.Code, e.Reason} {
		b = appendCSVText(append(b, ','), s)
	}
	for _, n := range [...]int64{int64(e.Status), e.LatencyUS, e.BytesIn, e.BytesOut} {
		b = append(b, ',')
		if n != 0 {
			b = strconv.AppendInt(b, n, 10)
		}
	}
	b = appendCSVText(append(b, ','), e.PrevHash)
	b = appendCSVText(append(b, ','), e.Hash)
	return append(b, '\n')
}

// appendCSVText appends s as one quoted CSV cell (nothing for ""), with a
// leading single quote when a spreadsheet would run it as a formula.
func appendCSVText(b []byte, s string) []byte {
	if s == "" {
		return b
	}
	b = append(b, '"')
	if csvFormulaLike(s) {
		b = append(b, '\'')
	}
	s = printable.String(s) // no control character reaches an auditor's terminal or sheet
	for {
		i := strings.IndexByte(s, '"')
		if i < 0 {
			break
		}
		b = append(append(b, s[:i+1]...), '"')
		s = s[i+1:]
	}
	b = append(b, s...)
	return append(b, '"')
}

// csvFormulaLike reports whether a spreadsheet could treat s as a formula
// (OWASP "CSV Injection"): it starts with a tab, CR, LF or NUL, or its
// first character after any white space is '=', '+', '-' or '@' (or their
// full-width forms, which some spreadsheets fold to the ASCII ones).
// Spreadsheets trim leading blanks on import, so " =1+1" counts too.
func csvFormulaLike(s string) bool {
	for _, r := range s {
		switch r {
		case '\t', '\r', '\n', 0, '=', '+', '-', '@', '\uFF1D', '\uFF0B', '\uFF0D', '\uFF20':
			return true
		}
		if !unicode.IsSpace(r) {
			return false
		}
	}
	return false
}

// ocsfEvent is an OCSF 1.1 API Activity (class 6003) event (structs, not
// maps: the encoder is on the export's hot loop).
type ocsfEvent struct {
	ClassUID     int           `json:"class_uid"`
	ClassName    string        `json:"class_name"`
	CategoryUID  int           `json:"category_uid"`
	CategoryName string        `json:"category_name"`
	ActivityID   int           `json:"activity_id"`
	ActivityName string        `json:"activity_name"`
	TypeUID      int           `json:"type_uid"`
	Time         int64         `json:"time"`
	SeverityID   int           `json:"severity_id"`
	Severity     string        `json:"severity"`
	StatusID     int           `json:"status_id"`
	Status       string        `json:"status"`
	StatusCode   string        `json:"status_code,omitempty"`
	StatusDetail string        `json:"status_detail,omitempty"`
	Message      string        `json:"message"`
	Metadata     ocsfMetadata  `json:"metadata"`
	Actor        ocsfActor     `json:"actor"`
	API          ocsfAPI       `json:"api"`
	HTTPRequest  *ocsfRequest  `json:"http_request,omitempty"`
	HTTPResponse *ocsfResponse `json:"http_response,omitempty"`
	Unmapped     ocsfUnmapped  `json:"unmapped"`
}

type ocsfMetadata struct {
	Version        string      `json:"version"`
	UID            string      `json:"uid"`
	LogName        string      `json:"log_name"`
	CorrelationUID string      `json:"correlation_uid,omitempty"`
	Product        ocsfProduct `json:"product"`
}

type ocsfProduct struct {
	Name       string `json:"name"`
	VendorName string `json:"vendor_name"`
}

type ocsfActor struct {
	User    ocsfUser `json:"user"`
	Session ocsfUID  `json:"session"`
}

type ocsfUser struct {
	UID  string `json:"uid,omitempty"`
	Type string `json:"type"`
}

type ocsfUID struct {
	UID string `json:"uid,omitempty"`
}

type ocsfAPI struct {
	Operation string      `json:"operation"`
	Service   ocsfService `json:"service"`
	Request   ocsfUID     `json:"request"`
}

type ocsfService struct {
	Name string `json:"name,omitempty"`
}

type ocsfRequest struct {
	HTTPMethod string  `json:"http_method"`
	URL        ocsfURL `json:"url"`
}

type ocsfURL struct {
	Path string `json:"path"`
}

type ocsfResponse struct {
	Code int `json:"code"`
}

type ocsfUnmapped struct {
	Seq       uint64 `json:"seq"`
	TaskID    string `json:"task_id,omitempty"`
	GrantID   string `json:"grant_id,omitempty"`
	ActionID  string `json:"action_id,omitempty"`
	TraceID   string `json:"trace_id,omitempty"`
	SpanID    string `json:"span_id,omitempty"`
	Decision  string `json:"decision,omitempty"`
	LatencyUS int64  `json:"latency_us,omitempty"`
	BytesIn   int64  `json:"bytes_in,omitempty"`
	BytesOut  int64  `json:"bytes_out,omitempty"`
	PrevHash  string `json:"prev_hash"`
	Hash      string `json:"hash"`
}

func toOCSF(e *audit.Event) ocsfEvent {
	activity, name := 99, "Other"
	switch {
	case e.Method == http.MethodGet || e.Method == http.MethodHead || e.Method == http.MethodOptions:
		activity, name = 2, "Read"
	case e.Method == http.MethodPost || strings.HasSuffix(e.Type, ".created"):
		activity, name = 1, "Create"
	case e.Method == http.MethodPut || e.Method == http.MethodPatch:
		activity, name = 3, "Update"
	case e.Method == http.MethodDelete || strings.HasSuffix(e.Type, ".revoked"):
		activity, name = 4, "Delete"
	}
	status, statusName := 1, "Success"
	if e.Decision == "deny" || e.Code != "" {
		status, statusName = 2, "Failure"
	}
	o := ocsfEvent{
		ClassUID: 6003, ClassName: "API Activity", CategoryUID: 6, CategoryName: "Application Activity",
		ActivityID: activity, ActivityName: name, TypeUID: 6003*100 + activity, Time: e.Time.UnixMilli(),
		SeverityID: 1, Severity: "Informational", StatusID: status, Status: statusName, StatusCode: e.Code, StatusDetail: e.Reason,
		Message: e.Type,
		Metadata: ocsfMetadata{Version: "1.1.0", UID: strconv.FormatUint(e.Seq, 10), LogName: "airlock-audit",
			CorrelationUID: e.RequestID, Product: ocsfProduct{Name: "Airlock", VendorName: "Airlock"}},
		Actor: ocsfActor{User: ocsfUser{UID: e.Actor.ID, Type: e.Actor.Kind}, Session: ocsfUID{UID: e.SessionID}},
		API:   ocsfAPI{Operation: e.Type, Service: ocsfService{Name: e.Upstream}, Request: ocsfUID{UID: e.RequestID}},
		Unmapped: ocsfUnmapped{Seq: e.Seq, TaskID: e.TaskID, GrantID: e.GrantID, ActionID: e.ActionID, TraceID: e.TraceID, SpanID: e.SpanID, Decision: e.Decision,
			LatencyUS: e.LatencyUS, BytesIn: e.BytesIn, BytesOut: e.BytesOut, PrevHash: e.PrevHash, Hash: e.Hash},
	}
	if e.Method != "" {
		o.HTTPRequest = &ocsfRequest{HTTPMethod: e.Method, URL: ocsfURL{Path: e.Path}}
	}
	if e.Status != 0 {
		o.HTTPResponse = &ocsfResponse{Code: e.Status}
	}
	return o
}

// verifyAudit walks the whole chain with its signed checkpoints.
func (s *Server) verifyAudit(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	rep, err := s.b.VerifyAudit(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, rep)
	return nil
}

func (s *Server) auditCheckpoints(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	cps, err := s.b.Checkpoints(r.Context())
	if err != nil {
		return err
	}
	out := listJSON[audit.Checkpoint]{Items: cps}
	if out.Items == nil {
		out.Items = []audit.Checkpoint{}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) auditPublicKey(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, map[string]string{"algorithm": "ed25519", "public_key": s.b.PublicKey()})
	return nil
}

// pruneAudit is DELETE /v1/audit?before=T (admin).
func (s *Server) pruneAudit(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	before, err := time.Parse(time.RFC3339Nano, r.URL.Query().Get("before"))
	if err != nil {
		return fmt.Errorf("%w: before must be an RFC 3339 time", errBadRequestJSON)
	}
	n, anchor, err := s.b.PruneAudit(r.Context(), p, before)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"deleted": n, "anchor": anchor})
	return nil
}

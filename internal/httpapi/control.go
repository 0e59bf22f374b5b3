package httpapi

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/auth"
	"github.com/airlock-broker/airlock/internal/broker"
)

func (s *Server) createSession(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	var req sessionRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	br := broker.SessionRequest{
		TaskID: req.TaskID, TTL: time.Duration(req.TTL), UntrustedInput: req.UntrustedInput,
		Isolation: req.Isolation, BindCIDR: req.BindCIDR, Labels: req.Labels,
	}
	for i, g := range req.Grants {
		spec, err := g.spec(fmt.Sprintf("grants[%d].", i))
		if err != nil {
			return err
		}
		br.Grants = append(br.Grants, spec)
	}
	v, err := s.b.CreateSession(r.Context(), p, br)
	if err != nil {
		return err
	}
	s.metrics.sessionsCreated.Inc()
	w.Header().Set("Location", "/v1/sessions/"+v.Session.ID)
	writeJSON(w, http.StatusCreated, toSessionJSON(v))
	return nil
}

func (s *Server) listSessions(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	limit, err := queryLimit(r)
	if err != nil {
		return err
	}
	vs, next, err := s.b.Sessions(r.Context(), r.URL.Query().Get("cursor"), limit)
	if err != nil {
		return err
	}
	out := listJSON[sessionJSON]{Items: []sessionJSON{}, Next: next}
	for _, v := range vs {
		out.Items = append(out.Items, toSessionJSON(v))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) getSession(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	v, err := s.b.Session(r.Context(), chi.URLParam(r, "id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toSessionJSON(v))
	return nil
}

func (s *Server) killSession(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	v, err := s.b.KillSession(r.Context(), p, chi.URLParam(r, "id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toSessionJSON(v))
	return nil
}

func (s *Server) addGrant(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	var req grantRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	spec, err := req.spec("")
	if err != nil {
		return err
	}
	v, err := s.b.AddGrant(r.Context(), p, chi.URLParam(r, "id"), spec)
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/grants/"+v.Grant.ID)
	writeJSON(w, http.StatusCreated, toGrantJSON(v))
	return nil
}

func (s *Server) getGrant(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	v, err := s.b.Grant(r.Context(), chi.URLParam(r, "id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toGrantJSON(v))
	return nil
}

func (s *Server) revokeGrant(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	v, err := s.b.RevokeGrant(r.Context(), p, chi.URLParam(r, "id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toGrantJSON(v))
	return nil
}

func (s *Server) getKillswitch(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	st, err := s.b.Killswitch(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

type killswitchRequest struct {
	Reason string `json:"reason"`
}

func (s *Server) engageKillswitch(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	var req killswitchRequest
	if r.ContentLength != 0 {
		if err := decodeJSON(r, &req); err != nil {
			return err
		}
	}
	st, err := s.b.SetKillswitch(r.Context(), p, true, req.Reason)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

func (s *Server) releaseKillswitch(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	st, err := s.b.SetKillswitch(r.Context(), p, false, "")
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

type tokenRequest struct {
	Role string   `json:"role"`
	Name string   `json:"name"`
	TTL  Duration `json:"ttl"`
}

type tokenJSON struct {
	ID        string     `json:"id"`
	Token     string     `json:"token,omitempty"`
	Role      string     `json:"role"`
	Name      string     `json:"name"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	CreatedBy string     `json:"created_by"`
}

func toTokenJSON(t auth.Token, secret string) tokenJSON {
	return tokenJSON{ID: t.ID, Token: secret, Role: t.Role, Name: t.Name, CreatedAt: t.CreatedAt, ExpiresAt: timePtr(t.ExpiresAt), CreatedBy: t.CreatedBy}
}

func (s *Server) createToken(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	var req tokenRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	t, secret, err := s.b.CreateToken(r.Context(), p, req.Role, req.Name, time.Duration(req.TTL))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, toTokenJSON(t, secret))
	return nil
}

func (s *Server) listTokens(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	out := listJSON[tokenJSON]{Items: []tokenJSON{}}
	for _, t := range s.b.Tokens() {
		out.Items = append(out.Items, toTokenJSON(t, ""))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) revokeToken(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	if err := s.b.RevokeToken(r.Context(), p, chi.URLParam(r, "id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// auditFilter selects records for export.
type auditFilter struct {
	since, until                    time.Time
	sessionID, taskID, grantID, typ string
	from                            uint64
}

func parseAuditFilter(r *http.Request) (auditFilter, error) {
	q := r.URL.Query()
	f := auditFilter{sessionID: q.Get("session_id"), taskID: q.Get("task_id"), grantID: q.Get("grant_id"), typ: q.Get("type")}
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
	switch q.Get("format") {
	case "", "jsonl":
	default:
		return f, fmt.Errorf("%w: format must be jsonl", errBadRequestJSON)
	}
	return f, nil
}

// match reports whether a record passes the filter; it decodes only the
// few fields it needs.
func (f *auditFilter) match(data []byte) bool {
	if f.since.IsZero() && f.until.IsZero() && f.sessionID == "" && f.taskID == "" && f.grantID == "" && f.typ == "" {
		return true
	}
	var e struct {
		Time      time.Time `json:"time"`
		Type      string    `json:"type"`
		SessionID string    `json:"session_id"`
		TaskID    string    `json:"task_id"`
		GrantID   string    `json:"grant_id"`
	}
	if json.Unmarshal(data, &e) != nil {
		return false
	}
	return (f.since.IsZero() || !e.Time.Before(f.since)) && (f.until.IsZero() || e.Time.Before(f.until)) &&
		(f.sessionID == "" || e.SessionID == f.sessionID) && (f.taskID == "" || e.TaskID == f.taskID) &&
		(f.grantID == "" || e.GrantID == f.grantID) && (f.typ == "" || e.Type == f.typ)
}

// exportAudit streams matching records as JSON lines, in constant memory.
func (s *Server) exportAudit(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	f, err := parseAuditFilter(r)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	bw := bufio.NewWriterSize(w, 64<<10)
	err = s.b.Store().ScanAudit(r.Context(), f.from, func(seq uint64, data []byte) error {
		if !f.match(data) {
			return nil
		}
		if _, err := bw.Write(data); err != nil {
			return err
		}
		return bw.WriteByte('\n')
	})
	if err != nil {
		// Headers are gone; the truncated stream (no final newline flush) is the signal.
		s.log.Error("audit export interrupted", "err", err)
		return nil
	}
	return bw.Flush()
}

type verifyJSON struct {
	OK         bool   `json:"ok"`
	Records    uint64 `json:"records"`
	Head       string `json:"head,omitempty"`
	BrokenAt   uint64 `json:"broken_at,omitempty"`
	Reason     string `json:"reason,omitempty"`
	VerifiedAt string `json:"verified_at"`
}

// verifyAudit walks the whole chain and reports the first break.
func (s *Server) verifyAudit(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	var v audit.Verifier
	err := s.b.Store().ScanAudit(r.Context(), 0, func(seq uint64, data []byte) error { return v.Next(data) })
	out := verifyJSON{OK: err == nil, Records: v.Count(), Head: v.Head(), VerifiedAt: time.Now().UTC().Format(time.RFC3339)}
	if ve, ok := err.(*audit.VerifyError); ok {
		out.BrokenAt, out.Reason = ve.Seq, ve.Reason
	} else if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

package httpapi

import (
	"fmt"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/airlock-broker/airlock/internal/auth"
	"github.com/airlock-broker/airlock/internal/sessions"
)

func (s *Server) createSession(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	var req sessionRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	br := sessions.SessionRequest{
		TaskID: req.TaskID, TTL: time.Duration(req.TTL), UntrustedInput: req.UntrustedInput,
		Isolation: req.Isolation, BindCIDR: req.BindCIDR, Labels: req.Labels,
		Traceparent: r.Header.Get("Traceparent"), // the operator's trace: the session's calls link to it
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
	writeJSON(w, http.StatusCreated, s.sessionJSON(v))
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
		out.Items = append(out.Items, s.sessionJSON(v))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) getSession(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	v, err := s.b.Session(r.Context(), chi.URLParam(r, "id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.sessionJSON(v))
	return nil
}

// sessionCA serves the session's CA certificate (public), which the
// sandbox trusts for the proxy door; 404 when the session has none.
func (s *Server) sessionCA(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	pem, err := s.b.SessionCA(r.Context(), chi.URLParam(r, "id"))
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/x-pem-file")
	w.Header().Set("Content-Disposition", `attachment; filename="ca.pem"`)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(pem)
	return nil
}

func (s *Server) killSession(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	v, err := s.b.KillSession(r.Context(), p, chi.URLParam(r, "id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.sessionJSON(v))
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
	AuditID   string     `json:"audit_id"` // how the audit log names this token
}

func (s *Server) toTokenJSON(t auth.Token, secret string) tokenJSON {
	return tokenJSON{ID: t.ID, Token: secret, Role: t.Role, Name: t.Name, CreatedAt: t.CreatedAt, ExpiresAt: timePtr(t.ExpiresAt),
		CreatedBy: t.CreatedBy, AuditID: s.b.AuditID(t.ID)}
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
	writeJSON(w, http.StatusCreated, s.toTokenJSON(t, secret))
	return nil
}

func (s *Server) listTokens(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	out := listJSON[tokenJSON]{Items: []tokenJSON{}}
	for _, t := range s.b.Tokens() {
		out.Items = append(out.Items, s.toTokenJSON(t, ""))
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

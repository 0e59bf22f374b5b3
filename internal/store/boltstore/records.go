package boltstore

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/airlock-broker/airlock/internal/approval"
	"github.com/airlock-broker/airlock/internal/audit"
	"github.com/airlock-broker/airlock/internal/auth"
	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/session"
)

// The stored form of every value is a record type of this file: explicit
// field names, a schema version, and a conversion to and from the domain
// type. Renaming a domain field changes a conversion, never the stored
// names, so no data is orphaned.
//
// Schema 1 is the format the store wrote before it had record types: the
// JSON encoding of the domain structs, whose field names (Go names, no tags)
// the records keep. Records written before had no schema field and decode
// as schema 1. A record from a newer broker (a higher schema) is refused
// rather than half read.
const schemaVersion = 1

// checkSchema accepts records of a schema this store reads.
func checkSchema(kind string, v int) error {
	if v > schemaVersion {
		return fmt.Errorf("%s record has schema %d; this broker reads up to %d", kind, v, schemaVersion)
	}
	return nil
}

// sessionRecord is the stored session (bucket sessions, key its id).
type sessionRecord struct {
	Schema         int               `json:"schema,omitempty"`
	ID             string            `json:"ID"`
	TaskID         string            `json:"TaskID"`
	TokenID        string            `json:"TokenID"`
	CreatedAt      time.Time         `json:"CreatedAt"`
	ExpiresAt      time.Time         `json:"ExpiresAt"`
	RevokedAt      time.Time         `json:"RevokedAt"`
	UntrustedInput bool              `json:"UntrustedInput"`
	Isolation      int               `json:"Isolation"`
	BindCIDR       string            `json:"BindCIDR"`
	Labels         map[string]string `json:"Labels"`
	CreatedBy      string            `json:"CreatedBy"`
	// Added with issue 14; records without them (older files) load with
	// neither, as sessions created without the proxy door.
	ProxyCA      *proxyCARecord    `json:"ProxyCA"`
	Placeholders map[string]string `json:"Placeholders"`
	// Added with issue 24 (the operator's trace context); records without
	// it load with none, and an older broker reading a newer record ignores it.
	Traceparent string `json:"Traceparent"`
}

// proxyCARecord is a session's CA at rest: the certificate and the sealed
// private key (never the key itself).
type proxyCARecord struct {
	CertDER   []byte `json:"CertDER"`
	SealedKey []byte `json:"SealedKey"`
}

func encodeSession(s *session.Session) ([]byte, error) {
	r := sessionRecord{
		Schema: schemaVersion, ID: s.ID, TaskID: s.TaskID, TokenID: s.TokenID,
		CreatedAt: s.CreatedAt, ExpiresAt: s.ExpiresAt, RevokedAt: s.RevokedAt,
		UntrustedInput: s.UntrustedInput, Isolation: int(s.Isolation), BindCIDR: s.BindCIDR,
		Labels: s.Labels, CreatedBy: s.CreatedBy, Placeholders: s.Placeholders, Traceparent: s.Traceparent,
	}
	if s.ProxyCA != nil {
		r.ProxyCA = &proxyCARecord{CertDER: s.ProxyCA.CertDER, SealedKey: s.ProxyCA.SealedKey}
	}
	return json.Marshal(r)
}

func decodeSession(data []byte) (session.Session, error) {
	var r sessionRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return session.Session{}, fmt.Errorf("decode session: %w", err)
	}
	if err := checkSchema("session", r.Schema); err != nil {
		return session.Session{}, err
	}
	s := session.Session{
		ID: r.ID, TaskID: r.TaskID, TokenID: r.TokenID,
		CreatedAt: r.CreatedAt, ExpiresAt: r.ExpiresAt, RevokedAt: r.RevokedAt,
		UntrustedInput: r.UntrustedInput, Isolation: session.Isolation(r.Isolation), BindCIDR: r.BindCIDR,
		Labels: r.Labels, CreatedBy: r.CreatedBy, Placeholders: r.Placeholders, Traceparent: r.Traceparent,
	}
	if r.ProxyCA != nil {
		s.ProxyCA = &session.ProxyCA{CertDER: r.ProxyCA.CertDER, SealedKey: r.ProxyCA.SealedKey}
	}
	return s, nil
}

// grantRecord is the stored grant (bucket grants, key its id); its usage is
// stored apart (usageRecord). The fields of grants.Spec are inline, as the
// embedded struct's were.
type grantRecord struct {
	Schema            int                `json:"schema,omitempty"`
	ID                string             `json:"ID"`
	SessionID         string             `json:"SessionID"`
	TaskID            string             `json:"TaskID"`
	Upstream          string             `json:"Upstream"`
	TTL               int64              `json:"TTL"` // nanoseconds
	MaxUses           int64              `json:"MaxUses"`
	Approval          string             `json:"Approval"`
	ApprovalsRequired int                `json:"ApprovalsRequired"`
	Budget            map[string]float64 `json:"Budget"`
	Rules             []ruleRecord       `json:"Rules"`
	CreatedAt         time.Time          `json:"CreatedAt"`
	ExpiresAt         time.Time          `json:"ExpiresAt"`
	RevokedAt         time.Time          `json:"RevokedAt"`
	CreatedBy         string             `json:"CreatedBy"`
}

type ruleRecord struct {
	Method       string                      `json:"Method"`
	Path         string                      `json:"Path"`
	Action       string                      `json:"Action"`
	Resource     string                      `json:"Resource"`
	Irreversible *bool                       `json:"Irreversible"`
	DenyUnknown  bool                        `json:"DenyUnknown"`
	WebSocket    bool                        `json:"WebSocket"`
	Tool         string                      `json:"Tool"`
	Constraints  map[string]constraintRecord `json:"Constraints"`
}

type constraintRecord struct {
	Pin       any      `json:"Pin"` // a JSON value; numbers decode as float64
	OneOf     []any    `json:"OneOf"`
	Pattern   string   `json:"Pattern"`
	Min       *float64 `json:"Min"`
	Max       *float64 `json:"Max"`
	MaxLength *int     `json:"MaxLength"`
	Required  bool     `json:"Required"`
}

func encodeGrant(g *grants.Grant) ([]byte, error) {
	r := grantRecord{
		Schema: schemaVersion, ID: g.ID, SessionID: g.SessionID, TaskID: g.TaskID,
		Upstream: g.Upstream, TTL: int64(g.TTL), MaxUses: g.MaxUses, Approval: g.Approval,
		ApprovalsRequired: g.ApprovalsRequired, Budget: g.Budget,
		CreatedAt: g.CreatedAt, ExpiresAt: g.ExpiresAt, RevokedAt: g.RevokedAt, CreatedBy: g.CreatedBy,
	}
	if g.Rules != nil {
		r.Rules = make([]ruleRecord, len(g.Rules))
	}
	for i, ru := range g.Rules {
		r.Rules[i] = ruleRecord{Method: ru.Method, Path: ru.Path, Action: ru.Action, Resource: ru.Resource,
			Irreversible: ru.Irreversible, DenyUnknown: ru.DenyUnknown, WebSocket: ru.WebSocket, Tool: ru.Tool}
		if ru.Constraints != nil {
			r.Rules[i].Constraints = make(map[string]constraintRecord, len(ru.Constraints))
		}
		for k, c := range ru.Constraints {
			r.Rules[i].Constraints[k] = constraintRecord{Pin: c.Pin, OneOf: c.OneOf, Pattern: c.Pattern,
				Min: c.Min, Max: c.Max, MaxLength: c.MaxLength, Required: c.Required}
		}
	}
	return json.Marshal(r)
}

func decodeGrant(data []byte) (grants.Grant, error) {
	var r grantRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return grants.Grant{}, fmt.Errorf("decode grant: %w", err)
	}
	if err := checkSchema("grant", r.Schema); err != nil {
		return grants.Grant{}, err
	}
	g := grants.Grant{
		ID: r.ID, SessionID: r.SessionID, TaskID: r.TaskID,
		Spec: grants.Spec{Upstream: r.Upstream, TTL: time.Duration(r.TTL), MaxUses: r.MaxUses, Approval: r.Approval,
			ApprovalsRequired: r.ApprovalsRequired, Budget: r.Budget},
		CreatedAt: r.CreatedAt, ExpiresAt: r.ExpiresAt, RevokedAt: r.RevokedAt, CreatedBy: r.CreatedBy,
	}
	if r.Rules != nil {
		g.Rules = make([]grants.Rule, len(r.Rules))
	}
	for i, ru := range r.Rules {
		g.Rules[i] = grants.Rule{Method: ru.Method, Path: ru.Path, Action: ru.Action, Resource: ru.Resource,
			Irreversible: ru.Irreversible, DenyUnknown: ru.DenyUnknown, WebSocket: ru.WebSocket, Tool: ru.Tool}
		if ru.Constraints != nil {
			g.Rules[i].Constraints = make(map[string]grants.Constraint, len(ru.Constraints))
		}
		for k, c := range ru.Constraints {
			g.Rules[i].Constraints[k] = grants.Constraint{Pin: c.Pin, OneOf: c.OneOf, Pattern: c.Pattern,
				Min: c.Min, Max: c.Max, MaxLength: c.MaxLength, Required: c.Required}
		}
	}
	return g, nil
}

// usageRecord is a grant's stored usage (bucket usage, key the grant id),
// and the usage inside a journaled usageUpdateRecord.
type usageRecord struct {
	Schema  int                `json:"schema,omitempty"`
	Uses    int64              `json:"Uses"`
	Spent   map[string]float64 `json:"Spent"`
	Version uint64             `json:"Version"`
}

func toUsageRecord(u grants.Usage) usageRecord {
	return usageRecord{Schema: schemaVersion, Uses: u.Uses, Spent: u.Spent, Version: u.Version}
}

func (r usageRecord) usage() (grants.Usage, error) {
	if err := checkSchema("usage", r.Schema); err != nil {
		return grants.Usage{}, err
	}
	return grants.Usage{Uses: r.Uses, Spent: r.Spent, Version: r.Version}, nil
}

func encodeUsage(u grants.Usage) ([]byte, error) { return json.Marshal(toUsageRecord(u)) }

func decodeUsage(data []byte) (grants.Usage, error) {
	var r usageRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return grants.Usage{}, fmt.Errorf("decode usage: %w", err)
	}
	return r.usage()
}

// usageUpdateRecord is the side of a journaled audit record (UsageUpdate).
type usageUpdateRecord struct {
	Schema  int         `json:"schema,omitempty"`
	GrantID string      `json:"GrantID"`
	Usage   usageRecord `json:"Usage"`
}

// encodeSide is the journal's encoding of an audit.Entry's side: a
// *UsageUpdate, or nothing.
func encodeSide(u *grants.UsageUpdate) ([]byte, error) {
	if u == nil {
		return nil, nil
	}
	return json.Marshal(usageUpdateRecord{Schema: schemaVersion, GrantID: u.GrantID, Usage: toUsageRecord(u.Usage)})
}

// decodeSide reverses encodeSide.
func decodeSide(data []byte) (*grants.UsageUpdate, error) {
	var r usageUpdateRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("decode usage update: %w", err)
	}
	if err := checkSchema("usage update", r.Schema); err != nil {
		return nil, err
	}
	u, err := r.Usage.usage()
	if err != nil {
		return nil, err
	}
	return &grants.UsageUpdate{GrantID: r.GrantID, Usage: u}, nil
}

// tokenRecord is a stored API token (bucket tokens, key its id).
type tokenRecord struct {
	Schema    int       `json:"schema,omitempty"`
	ID        string    `json:"ID"`
	Name      string    `json:"Name"`
	Role      string    `json:"Role"`
	Digest    []byte    `json:"Digest"`
	CreatedAt time.Time `json:"CreatedAt"`
	ExpiresAt time.Time `json:"ExpiresAt"`
	CreatedBy string    `json:"CreatedBy"`
}

func encodeToken(t auth.Token) ([]byte, error) {
	return json.Marshal(tokenRecord{Schema: schemaVersion, ID: t.ID, Name: t.Name, Role: t.Role, Digest: t.Digest,
		CreatedAt: t.CreatedAt, ExpiresAt: t.ExpiresAt, CreatedBy: t.CreatedBy})
}

func decodeToken(data []byte) (auth.Token, error) {
	var r tokenRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return auth.Token{}, fmt.Errorf("decode token: %w", err)
	}
	if err := checkSchema("token", r.Schema); err != nil {
		return auth.Token{}, err
	}
	return auth.Token{ID: r.ID, Name: r.Name, Role: r.Role, Digest: r.Digest,
		CreatedAt: r.CreatedAt, ExpiresAt: r.ExpiresAt, CreatedBy: r.CreatedBy}, nil
}

// actionRecord is a stored approval action (bucket actions, key its id).
type actionRecord struct {
	Schema            int                `json:"schema,omitempty"`
	ID                string             `json:"ID"`
	SessionID         string             `json:"SessionID"`
	TaskID            string             `json:"TaskID"`
	GrantID           string             `json:"GrantID"`
	Upstream          string             `json:"Upstream"`
	RequestID         string             `json:"RequestID"`
	SessionCreatedBy  string             `json:"SessionCreatedBy"`
	CreatedAt         time.Time          `json:"CreatedAt"`
	ExpiresAt         time.Time          `json:"ExpiresAt"`
	Status            string             `json:"Status"`
	Reason            string             `json:"Reason"`
	Request           requestRecord      `json:"Request"`
	Pinned            []string           `json:"Pinned"`
	Filled            []string           `json:"Filled"`
	Standing          standingRecord     `json:"Standing"`
	ApprovalsRequired int                `json:"ApprovalsRequired"`
	Amounts           map[string]float64 `json:"Amounts"`
	PermitGrants      []string           `json:"PermitGrants"`
	Decisions         []decisionRecord   `json:"Decisions"`
	Result            *resultRecord      `json:"Result"`
	MCP               *mcpCallRecord     `json:"MCP"`
}

type mcpCallRecord struct {
	Tool        string            `json:"Tool"`
	Digest      string            `json:"Digest"`
	Description string            `json:"Description"`
	Annotations string            `json:"Annotations"`
	Join        string            `json:"Join"`
	Constrained map[string]string `json:"Constrained,omitempty"`
}

type requestRecord struct {
	Method string              `json:"Method"`
	Path   string              `json:"Path"`
	Query  string              `json:"Query"`
	Header map[string][]string `json:"Header"`
	Body   []byte              `json:"Body"`
}

type standingRecord struct {
	UntrustedInput  bool `json:"UntrustedInput"`
	SensitiveAccess bool `json:"SensitiveAccess"`
	ExternalAction  bool `json:"ExternalAction"`
}

type decisionRecord struct {
	Reviewer string    `json:"Reviewer"`
	Name     string    `json:"Name"`
	Verdict  string    `json:"Verdict"`
	Comment  string    `json:"Comment"`
	At       time.Time `json:"At"`
}

type resultRecord struct {
	Status     int                 `json:"Status"`
	Header     map[string][]string `json:"Header"`
	Body       []byte              `json:"Body"`
	Truncated  bool                `json:"Truncated"`
	Code       string              `json:"Code"`
	ExecutedAt time.Time           `json:"ExecutedAt"`
	LatencyUS  int64               `json:"LatencyUS"`
}

func encodeAction(a *approval.Action) ([]byte, error) {
	r := actionRecord{
		Schema: schemaVersion, ID: a.ID, SessionID: a.SessionID, TaskID: a.TaskID, GrantID: a.GrantID,
		Upstream: a.Upstream, RequestID: a.RequestID, SessionCreatedBy: a.SessionCreatedBy,
		CreatedAt: a.CreatedAt, ExpiresAt: a.ExpiresAt, Status: string(a.Status), Reason: a.Reason,
		Request: requestRecord{Method: a.Request.Method, Path: a.Request.Path, Query: a.Request.Query,
			Header: a.Request.Header, Body: a.Request.Body},
		Pinned: a.Pinned, Filled: a.Filled,
		Standing: standingRecord{UntrustedInput: a.Standing.UntrustedInput, SensitiveAccess: a.Standing.SensitiveAccess,
			ExternalAction: a.Standing.ExternalAction},
		ApprovalsRequired: a.ApprovalsRequired, Amounts: a.Amounts, PermitGrants: a.PermitGrants,
	}
	if a.Decisions != nil {
		r.Decisions = make([]decisionRecord, len(a.Decisions))
	}
	for i, d := range a.Decisions {
		r.Decisions[i] = decisionRecord{Reviewer: d.Reviewer, Name: d.Name, Verdict: d.Verdict, Comment: d.Comment, At: d.At}
	}
	if m := a.MCP; m != nil {
		r.MCP = &mcpCallRecord{Tool: m.Tool, Digest: m.Digest, Description: m.Description, Annotations: m.Annotations, Join: m.Join, Constrained: m.Constrained}
	}
	if x := a.Result; x != nil {
		r.Result = &resultRecord{Status: x.Status, Header: x.Header, Body: x.Body, Truncated: x.Truncated,
			Code: x.Code, ExecutedAt: x.ExecutedAt, LatencyUS: x.LatencyUS}
	}
	return json.Marshal(r)
}

func decodeAction(data []byte) (approval.Action, error) {
	var r actionRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return approval.Action{}, fmt.Errorf("decode action: %w", err)
	}
	if err := checkSchema("action", r.Schema); err != nil {
		return approval.Action{}, err
	}
	a := approval.Action{
		ID: r.ID, SessionID: r.SessionID, TaskID: r.TaskID, GrantID: r.GrantID,
		Upstream: r.Upstream, RequestID: r.RequestID, SessionCreatedBy: r.SessionCreatedBy,
		CreatedAt: r.CreatedAt, ExpiresAt: r.ExpiresAt, Status: approval.Status(r.Status), Reason: r.Reason,
		Request: approval.HeldRequest{Method: r.Request.Method, Path: r.Request.Path, Query: r.Request.Query,
			Header: http.Header(r.Request.Header), Body: r.Request.Body},
		Pinned: r.Pinned, Filled: r.Filled,
		Standing: approval.Standing{UntrustedInput: r.Standing.UntrustedInput, SensitiveAccess: r.Standing.SensitiveAccess,
			ExternalAction: r.Standing.ExternalAction},
		ApprovalsRequired: r.ApprovalsRequired, Amounts: r.Amounts, PermitGrants: r.PermitGrants,
	}
	if r.Decisions != nil {
		a.Decisions = make([]approval.Review, len(r.Decisions))
	}
	for i, d := range r.Decisions {
		a.Decisions[i] = approval.Review{Reviewer: d.Reviewer, Name: d.Name, Verdict: d.Verdict, Comment: d.Comment, At: d.At}
	}
	if m := r.MCP; m != nil {
		a.MCP = &approval.MCPCall{Tool: m.Tool, Digest: m.Digest, Description: m.Description, Annotations: m.Annotations, Join: m.Join, Constrained: m.Constrained}
	}
	if x := r.Result; x != nil {
		a.Result = &approval.Result{Status: x.Status, Header: http.Header(x.Header), Body: x.Body, Truncated: x.Truncated,
			Code: x.Code, ExecutedAt: x.ExecutedAt, LatencyUS: x.LatencyUS}
	}
	return a, nil
}

// checkpointRecord is a stored signed checkpoint (bucket audit_checkpoints,
// key its seq). Its names are those of audit.Checkpoint's wire form.
type checkpointRecord struct {
	Schema    int       `json:"schema,omitempty"`
	Seq       uint64    `json:"seq"`
	Hash      string    `json:"hash"`
	Time      time.Time `json:"time"`
	Anchor    bool      `json:"anchor,omitempty"`
	Signature string    `json:"signature"`
}

func encodeCheckpoint(c audit.Checkpoint) ([]byte, error) {
	return json.Marshal(checkpointRecord{Schema: schemaVersion, Seq: c.Seq, Hash: c.Hash, Time: c.Time, Anchor: c.Anchor, Signature: c.Signature})
}

func decodeCheckpoint(data []byte) (audit.Checkpoint, error) {
	var r checkpointRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return audit.Checkpoint{}, fmt.Errorf("decode checkpoint: %w", err)
	}
	if err := checkSchema("checkpoint", r.Schema); err != nil {
		return audit.Checkpoint{}, err
	}
	return audit.Checkpoint{Seq: r.Seq, Hash: r.Hash, Time: r.Time, Anchor: r.Anchor, Signature: r.Signature}, nil
}

package pgstore

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/airlock-broker/airlock/internal/approval"
	"github.com/airlock-broker/airlock/internal/grants"
)

// Most of a value is in columns of its own (migrations/). What nests (a
// grant's rules, an action's decisions and result) is a json column holding
// a record type of this file: explicit field names, a schema version, and a
// conversion to and from the domain type, so renaming a domain field never
// orphans stored data. A record of a newer schema is refused rather than
// half read. Maps of plain values (labels, budgets, headers) are json
// objects as they are.
const recordSchema = 1

func checkSchema(kind string, v int) error {
	if v > recordSchema {
		return fmt.Errorf("%s record has schema %d; this broker reads up to %d", kind, v, recordSchema)
	}
	return nil
}

// rulesRecord is a grant's rules (column grants.rules).
type rulesRecord struct {
	Schema int          `json:"schema"`
	Rules  []ruleRecord `json:"rules"`
}

type ruleRecord struct {
	Method       string                      `json:"method,omitempty"`
	Path         string                      `json:"path,omitempty"`
	Action       string                      `json:"action,omitempty"`
	Resource     string                      `json:"resource,omitempty"`
	Irreversible *bool                       `json:"irreversible,omitempty"`
	DenyUnknown  bool                        `json:"deny_unknown,omitempty"`
	WebSocket    bool                        `json:"websocket,omitempty"`
	Tool         string                      `json:"tool,omitempty"`
	Constraints  map[string]constraintRecord `json:"constraints,omitempty"`
	// HasConstraints keeps an empty (not nil) constraint map apart.
	HasConstraints bool `json:"has_constraints,omitempty"`
}

type constraintRecord struct {
	Pin       any      `json:"pin,omitempty"` // a JSON value; numbers decode as float64
	OneOf     []any    `json:"one_of,omitempty"`
	Pattern   string   `json:"pattern,omitempty"`
	Min       *float64 `json:"min,omitempty"`
	Max       *float64 `json:"max,omitempty"`
	MaxLength *int     `json:"max_length,omitempty"`
	Required  bool     `json:"required,omitempty"`
}

func encodeRules(rs []grants.Rule) ([]byte, error) {
	if rs == nil {
		return nil, nil
	}
	r := rulesRecord{Schema: recordSchema, Rules: make([]ruleRecord, len(rs))}
	for i, ru := range rs {
		r.Rules[i] = ruleRecord{Method: ru.Method, Path: ru.Path, Action: ru.Action, Resource: ru.Resource,
			Irreversible: ru.Irreversible, DenyUnknown: ru.DenyUnknown, WebSocket: ru.WebSocket, Tool: ru.Tool, HasConstraints: ru.Constraints != nil}
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

func decodeRules(data []byte) ([]grants.Rule, error) {
	if data == nil {
		return nil, nil
	}
	var r rulesRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("decode rules: %w", err)
	}
	if err := checkSchema("rules", r.Schema); err != nil {
		return nil, err
	}
	out := make([]grants.Rule, len(r.Rules))
	for i, ru := range r.Rules {
		out[i] = grants.Rule{Method: ru.Method, Path: ru.Path, Action: ru.Action, Resource: ru.Resource,
			Irreversible: ru.Irreversible, DenyUnknown: ru.DenyUnknown, WebSocket: ru.WebSocket, Tool: ru.Tool}
		if ru.HasConstraints || ru.Constraints != nil {
			out[i].Constraints = make(map[string]grants.Constraint, len(ru.Constraints))
		}
		for k, c := range ru.Constraints {
			out[i].Constraints[k] = grants.Constraint{Pin: c.Pin, OneOf: c.OneOf, Pattern: c.Pattern,
				Min: c.Min, Max: c.Max, MaxLength: c.MaxLength, Required: c.Required}
		}
	}
	return out, nil
}

// decisionsRecord is an action's decisions (column actions.decisions).
type decisionsRecord struct {
	Schema    int              `json:"schema"`
	Decisions []decisionRecord `json:"decisions"`
}

type decisionRecord struct {
	Reviewer string    `json:"reviewer"`
	Name     string    `json:"name"`
	Verdict  string    `json:"verdict"`
	Comment  string    `json:"comment"`
	At       time.Time `json:"at"`
}

func encodeDecisions(ds []approval.Review) ([]byte, error) {
	if ds == nil {
		return nil, nil
	}
	r := decisionsRecord{Schema: recordSchema, Decisions: make([]decisionRecord, len(ds))}
	for i, d := range ds {
		r.Decisions[i] = decisionRecord{Reviewer: d.Reviewer, Name: d.Name, Verdict: d.Verdict, Comment: d.Comment, At: d.At}
	}
	return json.Marshal(r)
}

func decodeDecisions(data []byte) ([]approval.Review, error) {
	if data == nil {
		return nil, nil
	}
	var r decisionsRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("decode decisions: %w", err)
	}
	if err := checkSchema("decisions", r.Schema); err != nil {
		return nil, err
	}
	out := make([]approval.Review, len(r.Decisions))
	for i, d := range r.Decisions {
		out[i] = approval.Review{Reviewer: d.Reviewer, Name: d.Name, Verdict: d.Verdict, Comment: d.Comment, At: d.At}
	}
	return out, nil
}

// resultRecord is an executed action's answer (column actions.result).
type resultRecord struct {
	Schema     int                 `json:"schema"`
	Status     int                 `json:"status"`
	Header     map[string][]string `json:"header"`
	Body       []byte              `json:"body"` // base64
	Truncated  bool                `json:"truncated"`
	Code       string              `json:"code"`
	ExecutedAt time.Time           `json:"executed_at"`
	LatencyUS  int64               `json:"latency_us"`
}

func encodeResult(x *approval.Result) ([]byte, error) {
	if x == nil {
		return nil, nil
	}
	return json.Marshal(resultRecord{Schema: recordSchema, Status: x.Status, Header: x.Header, Body: x.Body,
		Truncated: x.Truncated, Code: x.Code, ExecutedAt: x.ExecutedAt, LatencyUS: x.LatencyUS})
}

func decodeResult(data []byte) (*approval.Result, error) {
	if data == nil {
		return nil, nil
	}
	var r resultRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("decode result: %w", err)
	}
	if err := checkSchema("result", r.Schema); err != nil {
		return nil, err
	}
	return &approval.Result{Status: r.Status, Header: http.Header(r.Header), Body: r.Body, Truncated: r.Truncated,
		Code: r.Code, ExecutedAt: r.ExecutedAt, LatencyUS: r.LatencyUS}, nil
}

// jsonValue encodes a plain value (a map of strings or numbers, a header)
// for a json column: nil stays SQL NULL, so it reads back nil.
func jsonValue[T any](v T, isNil bool) ([]byte, error) {
	if isNil {
		return nil, nil
	}
	return json.Marshal(v)
}

// fromJSON decodes a json column into a plain value; NULL leaves it zero.
func fromJSON[T any](data []byte, what string) (T, error) {
	var v T
	if data == nil {
		return v, nil
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return v, fmt.Errorf("decode %s: %w", what, err)
	}
	return v, nil
}

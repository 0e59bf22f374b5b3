package httpapi

import (
	"encoding/json"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"

	"github.com/airlock-broker/airlock/internal/approval"
)

// heldToolCall is a held create_issue call: repo pinned by the grant (and
// filled in), labels.* constrained but not pinned, the rest the model's.
func heldToolCall() approval.Action {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	body := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"create_issue",` +
		`"arguments":{"title":"Bump deps","repo":"acme/web","labels":["bug"],"amount":12.50}}}`
	return approval.Action{ID: "act_1", SessionID: "ses_1", TaskID: "t", GrantID: "grt_1", Upstream: "issues",
		CreatedAt: t0, ExpiresAt: t0.Add(time.Hour), Status: approval.Pending,
		Request: approval.HeldRequest{Method: "POST", Body: []byte(body)},
		Pinned:  []string{"args.repo"}, Filled: []string{"args.repo"},
		MCP: &approval.MCPCall{Tool: "create_issue", Digest: "sha256:00ff", Description: "Create an issue. <script>x</script>",
			Annotations: `{"readOnlyHint":true,"destructiveHint":false}`, Join: "issues\x00create_issue\x00abc"}}
}

// TestActionJSONShowsMCPCall: a reviewer's view of a held tool call has
// the tool, its digest, the arguments as sent (numbers exactly), which the
// grant pinned and which the model chose, and the server's claims; the
// sandbox's view and a REST action have no mcp object.
func TestActionJSONShowsMCPCall(t *testing.T) {
	tests := []struct {
		name string
		a    approval.Action
		full bool
		want string // the mcp object, "" for none
	}{
		{"reviewer", heldToolCall(), true, `{"tool":"create_issue","digest":"sha256:00ff",` +
			`"arguments":{"amount":12.50,"labels":["bug"],"repo":"acme/web","title":"Bump deps"},` +
			`"pinned_arguments":["repo"],"model_arguments":["amount","labels","title"],` +
			`"server_description":"Create an issue. \u003cscript\u003ex\u003c/script\u003e",` +
			`"server_annotations":{"readOnlyHint":true,"destructiveHint":false}}`},
		{"reviewer-no-arguments-no-annotations", func() approval.Action {
			a := heldToolCall()
			a.Request.Body = []byte(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"create_issue"}}`)
			a.Pinned, a.Filled, a.MCP.Annotations, a.MCP.Description = nil, nil, "", ""
			return a
		}(), true, `{"tool":"create_issue","digest":"sha256:00ff","arguments":{},"pinned_arguments":[],"model_arguments":[]}`},
		{"fail-sandbox-view", heldToolCall(), false, ""},
		{"fail-rest-action", func() approval.Action { a := heldToolCall(); a.MCP = nil; return a }(), true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(toActionJSON(tt.a, tt.full))
			if err != nil {
				t.Fatal(err)
			}
			var out map[string]json.RawMessage
			if err := json.Unmarshal(b, &out); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, string(out["mcp"])); diff != "" {
				t.Errorf("mcp (-want +got):\n%s", diff)
			}
		})
	}
}

// TestActionMCPMatchesSpec: the mcp object's fields are the ones
// api/openapi.yaml's Action schema documents, each with a description.
func TestActionMCPMatchesSpec(t *testing.T) {
	data, err := os.ReadFile("../../api/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Components struct {
			Schemas struct {
				Action struct {
					AllOf []struct {
						Properties map[string]struct {
							Required   []string `yaml:"required"`
							Properties map[string]struct {
								Description string `yaml:"description"`
							} `yaml:"properties"`
						} `yaml:"properties"`
					} `yaml:"allOf"`
				} `yaml:"Action"`
			} `yaml:"schemas"`
		} `yaml:"components"`
	}
	if err := yaml.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	var documented, required []string
	for _, part := range spec.Components.Schemas.Action.AllOf {
		m, ok := part.Properties["mcp"]
		if !ok {
			continue
		}
		required = m.Required
		for name, p := range m.Properties {
			documented = append(documented, name)
			if p.Description == "" {
				t.Errorf("Action.mcp.%s has no description", name)
			}
		}
	}
	b, _ := json.Marshal(toActionJSON(heldToolCall(), true))
	var out struct {
		MCP map[string]json.RawMessage `json:"mcp"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	var sent []string
	for k := range out.MCP {
		sent = append(sent, k)
	}
	sort.Strings(documented)
	sort.Strings(sent)
	if diff := cmp.Diff(documented, sent); diff != "" {
		t.Errorf("Action.mcp in api/openapi.yaml and the JSON disagree (-spec +json):\n%s", diff)
	}
	for _, r := range required {
		if _, ok := out.MCP[r]; !ok {
			t.Errorf("Action.mcp.%s is required by the spec but not sent", r)
		}
	}
}

package httpapi

import (
	"net/http/httptest"
	"net/url"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"

	"github.com/airlock-broker/airlock/internal/audit"
)

// auditSpec is what api/openapi.yaml says of the audit export: the query
// parameters of GET /v1/audit and the properties of AuditEvent, in order.
func auditSpec(t *testing.T) (params []string, fields []string) {
	t.Helper()
	data, err := os.ReadFile("../../api/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Paths      map[string]map[string]yaml.Node `yaml:"paths"`
		Components struct {
			Schemas map[string]yaml.Node `yaml:"schemas"`
		} `yaml:"components"`
	}
	if err := yaml.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	var get struct {
		Parameters []struct {
			Name string `yaml:"name"`
			In   string `yaml:"in"`
		} `yaml:"parameters"`
	}
	node := spec.Paths["/v1/audit"]["get"]
	if err := node.Decode(&get); err != nil {
		t.Fatal(err)
	}
	for _, p := range get.Parameters {
		if p.In == "query" {
			params = append(params, p.Name)
		}
	}
	ev := spec.Components.Schemas["AuditEvent"]
	for i := 0; i+1 < len(ev.Content); i += 2 {
		if ev.Content[i].Value != "properties" {
			continue
		}
		props := ev.Content[i+1]
		for j := 0; j+1 < len(props.Content); j += 2 {
			fields = append(fields, props.Content[j].Value)
		}
	}
	return params, fields
}

// TestAuditExportMatchesSpec: every query parameter the spec documents for
// GET /v1/audit (trace_id among them) is one the export reads, and none it
// reads is undocumented; AuditEvent lists audit.Event's fields in their
// order (the order the hash covers), trace_id and span_id included.
func TestAuditExportMatchesSpec(t *testing.T) {
	params, fields := auditSpec(t)
	examples := map[string]string{
		"since": "2026-01-01T00:00:00Z", "until": "2026-01-02T00:00:00Z", "session_id": "ses_1", "task_id": "t",
		"grant_id": "grt_1", "type": "call.allowed", "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736", "from_seq": "7", "format": "csv",
	}
	base, err := parseAuditFilter(httptest.NewRequest("GET", "/v1/audit", nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range params {
		v, ok := examples[name]
		if !ok {
			t.Errorf("the spec documents %s, which this test has no example of", name)
			continue
		}
		f, err := parseAuditFilter(httptest.NewRequest("GET", "/v1/audit?"+url.Values{name: {v}}.Encode(), nil))
		if err != nil || f == base {
			t.Errorf("%s=%s is documented but not read by the export (err %v)", name, v, err)
		}
	}
	var documented []string
	documented = append(documented, params...)
	sort.Strings(documented)
	var read []string
	for name := range examples {
		read = append(read, name)
	}
	sort.Strings(read)
	if diff := cmp.Diff(read, documented); diff != "" {
		t.Errorf("export parameters (-read +documented):\n%s", diff)
	}

	var want []string
	ty := reflect.TypeFor[audit.Event]()
	for i := range ty.NumField() {
		name, _, _ := strings.Cut(ty.Field(i).Tag.Get("json"), ",")
		want = append(want, name)
	}
	if diff := cmp.Diff(want, fields); diff != "" {
		t.Errorf("AuditEvent's properties and audit.Event's fields (-Event +spec):\n%s", diff)
	}
}

package mcp

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-broker/airlock/internal/fault"
)

const canary = "sk-live-CANARY1234"

func redact(s string) string { return strings.ReplaceAll(s, canary, "[REDACTED]") }

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func TestScrubResult(t *testing.T) {
	pixels := "\x89PNG\r\n\x1a\x00binary"
	tests := []struct {
		name  string
		in    string
		want  map[string]any
		wantN int
	}{
		{name: "text content", in: `{"content":[{"type":"text","text":"token ` + canary + ` twice ` + canary + `"}]}`,
			want: map[string]any{"content": []any{map[string]any{"type": "text", "text": "token [REDACTED] twice [REDACTED]"}}}, wantN: 1},
		{name: "structured content and keys", in: `{"structuredContent":{"` + canary + `":{"deep":["x","` + canary + `"]}},"content":[]}`,
			want: map[string]any{"structuredContent": map[string]any{"[REDACTED]": map[string]any{"deep": []any{"x", "[REDACTED]"}}}, "content": []any{}}, wantN: 2},
		{name: "image data", in: `{"content":[{"type":"image","mimeType":"image/png","data":"` + b64("exif:"+canary) + `"}]}`,
			want: map[string]any{"content": []any{map[string]any{"type": "image", "mimeType": "image/png", "data": b64("exif:[REDACTED]")}}}, wantN: 1},
		{name: "clean image left as it was", in: `{"content":[{"type":"image","mimeType":"image/png","data":"` + b64(pixels) + `"}]}`,
			want: map[string]any{"content": []any{map[string]any{"type": "image", "mimeType": "image/png", "data": b64(pixels)}}}},
		{name: "resource blob", in: `{"content":[{"type":"resource","resource":{"uri":"file:///k","blob":"` + b64(canary) + `"}}]}`,
			want: map[string]any{"content": []any{map[string]any{"type": "resource", "resource": map[string]any{"uri": "file:///k", "blob": b64("[REDACTED]")}}}}, wantN: 1},
		{name: "unpadded base64", in: `{"content":[{"type":"audio","data":"` + base64.RawStdEncoding.EncodeToString([]byte(canary+"!")) + `"}]}`,
			want: map[string]any{"content": []any{map[string]any{"type": "audio", "data": base64.RawStdEncoding.EncodeToString([]byte("[REDACTED]!"))}}}, wantN: 1},
		{name: "MIME-wrapped base64", in: `{"content":[{"type":"image","data":"` + wrap(b64(strings.Repeat("x", 60)+canary)) + `"}]}`,
			want: map[string]any{"content": []any{map[string]any{"type": "image", "data": b64(strings.Repeat("x", 60) + "[REDACTED]")}}}, wantN: 1},
		{name: "data that is not base64 is text", in: `{"content":[{"type":"image","data":"not base64 ` + canary + `"}]}`,
			want: map[string]any{"content": []any{map[string]any{"type": "image", "data": "not base64 [REDACTED]"}}}, wantN: 1},
		{name: "base64 of nothing secret is left alone", in: `{"content":[{"type":"image","data":"AAAAsklive"}]}`,
			want: map[string]any{"content": []any{map[string]any{"type": "image", "data": "AAAAsklive"}}}},
		{name: "error text", in: `{"isError":true,"content":[{"type":"text","text":"401: bad key ` + canary + `"}]}`,
			want: map[string]any{"isError": true, "content": []any{map[string]any{"type": "text", "text": "401: bad key [REDACTED]"}}}, wantN: 1},
		{name: "keys that collide after scrubbing", in: `{"a` + canary + `":1,"a[REDACTED]":2}`,
			want: map[string]any{"a[REDACTED]": json.Number("2"), "a[REDACTED] (2)": json.Number("1")}, wantN: 1},
		{name: "numbers, booleans and null pass", in: `{"n":1.5,"b":false,"z":null}`,
			want: map[string]any{"n": json.Number("1.5"), "b": false, "z": nil}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Parse([]byte(`{"jsonrpc":"2.0","id":1,"result":` + tt.in + `}`))
			if err != nil {
				t.Fatal(err)
			}
			before, _ := Canonical(m.Result)
			got, n := ScrubResult(m.Result, redact)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ScrubResult (-want +got):\n%s", diff)
			}
			if n != tt.wantN {
				t.Errorf("replacements = %d, want %d", n, tt.wantN)
			}
			if after, _ := Canonical(m.Result); string(after) != string(before) {
				t.Error("ScrubResult changed its input")
			}
			// ScrubOwned gives the same, scrubbing its own input.
			owned, _ := Parse([]byte(`{"jsonrpc":"2.0","id":1,"result":` + tt.in + `}`))
			gotOwned, nOwned := ScrubOwned(owned.Result, redact)
			if diff := cmp.Diff(tt.want, gotOwned); diff != "" || nOwned != tt.wantN {
				t.Errorf("ScrubOwned (-want +got), %d replacements:\n%s", nOwned, diff)
			}
			out, err := EncodeResult(m.ID, got)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(out), canary) || strings.Contains(string(out), b64(canary)) {
				t.Errorf("the canary survived: %s", out)
			}
		})
	}
	if got, n := ScrubResult(nil, redact); got != nil || n != 0 {
		t.Errorf("ScrubResult(nil) = %v, %d", got, n)
	}
}

// wrap breaks base64 text into MIME's 76-character lines.
func wrap(s string) string {
	var b strings.Builder
	for len(s) > 76 {
		b.WriteString(s[:76] + `\r\n`)
		s = s[76:]
	}
	return b.String() + s
}

func TestResultType(t *testing.T) {
	tests := []struct {
		name    string
		result  map[string]any
		want    string
		wantErr error
	}{
		{name: "absent", result: map[string]any{"content": []any{}}, want: ResultComplete},
		{name: "complete", result: map[string]any{"resultType": "complete"}, want: ResultComplete},
		{name: "input required", result: map[string]any{"resultType": "input_required", "inputRequests": map[string]any{}}, want: ResultInputRequired, wantErr: ErrInputRequired},
		{name: "unknown", result: map[string]any{"resultType": "partial"}, want: "partial", wantErr: ErrUnknownResultType},
		{name: "case variant", result: map[string]any{"resultType": "Complete"}, want: "Complete", wantErr: ErrUnknownResultType},
		{name: "not a string", result: map[string]any{"resultType": true}, wantErr: ErrUnknownResultType},
		{name: "null", result: map[string]any{"resultType": nil}, wantErr: ErrUnknownResultType},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ResultType(tt.result)
			if got != tt.want || !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Errorf("ResultType = %q, %v; want %q, %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
	if fault.Of(ErrUnknownResultType) != fault.UpstreamError {
		t.Error("an unknown resultType is not an upstream error")
	}
}

func TestIsError(t *testing.T) {
	for _, tt := range []struct {
		result map[string]any
		want   bool
	}{
		{map[string]any{"isError": true}, true}, {map[string]any{"isError": false}, false},
		{map[string]any{"isError": "true"}, false}, {map[string]any{}, false}, {nil, false},
	} {
		if got := IsError(tt.result); got != tt.want {
			t.Errorf("IsError(%v) = %v", tt.result, got)
		}
	}
}

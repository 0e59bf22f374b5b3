package mcp

import (
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestSSEReader(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []Event
		wantErr error
	}{
		{name: "one message", in: "event: message\ndata: {\"a\":1}\n\n", want: []Event{{Name: "message", Data: []byte(`{"a":1}`)}}},
		{name: "default name", in: "data: x\n\n", want: []Event{{Name: "message", Data: []byte("x")}}},
		{name: "multi-line data", in: "data: a\ndata:b\ndata:  c\n\n", want: []Event{{Name: "message", Data: []byte("a\nb\n c")}}},
		{name: "CRLF", in: "data: a\r\ndata: b\r\n\r\n", want: []Event{{Name: "message", Data: []byte("a\nb")}}},
		{name: "CR", in: "data: a\rdata: b\r\r", want: []Event{{Name: "message", Data: []byte("a\nb")}}},
		{name: "comments and keep-alives", in: ": ok\n\n: ping\ndata: x\n: mid\n\n", want: []Event{{Name: "message", Data: []byte("x")}}},
		{name: "id and retry carry over", in: "id: 7\nretry: 1500\ndata: a\n\ndata: b\n\n", want: []Event{
			{Name: "message", Data: []byte("a"), ID: "7", Retry: 1500 * time.Millisecond}, {Name: "message", Data: []byte("b"), ID: "7", Retry: 1500 * time.Millisecond}}},
		{name: "id with NUL ignored, bad retry ignored", in: "id: a\x00b\nretry: 1s\ndata: a\n\n", want: []Event{{Name: "message", Data: []byte("a")}}},
		{name: "named event", in: "event: ping\ndata: x\n\ndata: y\n\n", want: []Event{{Name: "ping", Data: []byte("x")}, {Name: "message", Data: []byte("y")}}},
		{name: "no data: not dispatched", in: "event: message\n\nid: 1\n\n", want: nil},
		{name: "empty data is dispatched", in: "data\n\n", want: []Event{{Name: "message", Data: []byte{}}}},
		{name: "field without colon", in: "data\ndata: x\n\n", want: []Event{{Name: "message", Data: []byte("\nx")}}},
		{name: "unknown field", in: "foo: bar\ndata: x\n\n", want: []Event{{Name: "message", Data: []byte("x")}}},
		{name: "byte-order mark", in: "\uFEFFdata: x\n\n", want: []Event{{Name: "message", Data: []byte("x")}}},
		{name: "unfinished event dropped", in: "data: x\n\ndata: y\n", want: []Event{{Name: "message", Data: []byte("x")}}},
		{name: "unfinished line dropped", in: "data: x", want: nil},
		{name: "data too large", in: "data: " + strings.Repeat("a", 40) + "\ndata: " + strings.Repeat("a", 40) + "\n\n", wantErr: ErrEventTooLarge},
		{name: "line too large", in: strings.Repeat(":", 100) + "\n", wantErr: ErrEventTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewSSEReader(strings.NewReader(tt.in), 64)
			var got []Event
			for {
				ev, err := r.Next()
				if err != nil {
					if tt.wantErr == nil && err != io.EOF || tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
						t.Fatalf("Next: %v, want %v", err, tt.wantErr)
					}
					break
				}
				got = append(got, ev)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSSEReaderCRDoesNotStall: an event ended by CR CR is dispatched at
// once, not when the next byte (a possible LF) arrives.
func TestSSEReaderCRDoesNotStall(t *testing.T) {
	pr, pw := io.Pipe()
	go func() { _, _ = pw.Write([]byte("data: x\r\r")) }() // and then nothing, for now
	done := make(chan Event)
	go func() {
		ev, _ := NewSSEReader(pr, 1024).Next()
		done <- ev
	}()
	ev := <-done
	if string(ev.Data) != "x" {
		t.Errorf("event = %+v", ev)
	}
	pw.Close()
}

func TestSSEWriter(t *testing.T) {
	rec := httptest.NewRecorder()
	w := NewSSEWriter(rec)
	if err := w.Event([]byte(`{"jsonrpc":"2.0","id":1,"result":{}}`)); err != nil {
		t.Fatal(err)
	}
	if err := w.Comment("keep-alive"); err != nil {
		t.Fatal(err)
	}
	if err := w.Event([]byte("a\nb\r\nc\rd")); err != nil {
		t.Fatal(err)
	}
	if err := w.Comment("two\nlines"); err != nil {
		t.Fatal(err)
	}
	want := "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n" +
		": keep-alive\n\n" +
		"event: message\ndata: a\ndata: b\ndata: c\ndata: d\n\n" +
		": two\n: lines\n\n"
	if diff := cmp.Diff(want, rec.Body.String()); diff != "" {
		t.Errorf("stream (-want +got):\n%s", diff)
	}
	if !rec.Flushed {
		t.Error("the writer did not flush")
	}
	// What the writer writes, the reader reads back.
	r := NewSSEReader(strings.NewReader(rec.Body.String()), 1024)
	for _, data := range []string{`{"jsonrpc":"2.0","id":1,"result":{}}`, "a\nb\nc\nd"} {
		ev, err := r.Next()
		if err != nil || string(ev.Data) != data || ev.Name != "message" {
			t.Errorf("read back %+v, %v; want %q", ev, err, data)
		}
	}
	if _, err := r.Next(); err != io.EOF {
		t.Errorf("after the events: %v, want EOF", err)
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("gone") }

func TestSSEWriterError(t *testing.T) {
	if err := NewSSEWriter(failWriter{}).Event([]byte("x")); err == nil {
		t.Error("a failed write did not fail")
	}
}

package mcp

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ErrEventTooLarge is an SSE line or event's data past the reader's limit.
var ErrEventTooLarge = errors.New("mcp: server-sent event too large")

// Event is one server-sent event: its type ("message" when the stream
// named none), its data (the data lines joined with "\n"), the stream's
// last event id at its dispatch, and the reconnection time the stream last
// set (0 when none).
type Event struct {
	Name  string
	Data  []byte
	ID    string
	Retry time.Duration
}

// SSEReader reads a text/event-stream as the WHATWG HTML standard's
// event-stream interpretation does: lines ended by CRLF, LF or CR; ':'
// starts a comment; "field: value" with one leading space of the value
// dropped; a line without a colon is a field with an empty value; an
// empty line dispatches the event (one with no data is skipped); unknown
// fields are ignored; an event unfinished at the end of the stream is
// dropped. It is not safe for concurrent use.
type SSEReader struct {
	r         *bufio.Reader
	max       int
	started   bool // the byte-order mark is checked
	skipLF    bool // the last line ended with CR: a following LF is that line end's
	lastID    string
	retry     time.Duration
	line      []byte
	data      []byte
	eventName string
}

// NewSSEReader reads events from r; a line, or an event's data, longer
// than maxEvent bytes is ErrEventTooLarge.
func NewSSEReader(r io.Reader, maxEvent int) *SSEReader {
	return &SSEReader{r: bufio.NewReader(r), max: maxEvent}
}

// Next is the next event. At the end of the stream it is io.EOF (an
// unfinished event is dropped); a read error is returned as it is.
func (s *SSEReader) Next() (Event, error) {
	for {
		line, err := s.readLine()
		if err != nil {
			return Event{}, err
		}
		if len(line) == 0 {
			if ev, ok := s.dispatch(); ok {
				return ev, nil
			}
			continue
		}
		if err := s.field(line); err != nil {
			return Event{}, err
		}
	}
}

func (s *SSEReader) dispatch() (Event, bool) {
	data, name := s.data, s.eventName
	s.data, s.eventName = nil, ""
	if data == nil {
		return Event{}, false
	}
	if name == "" {
		name = "message"
	}
	return Event{Name: name, Data: bytes.TrimSuffix(data, []byte("\n")), ID: s.lastID, Retry: s.retry}, true
}

func (s *SSEReader) field(line []byte) error {
	if line[0] == ':' {
		return nil // a comment
	}
	name, value := line, []byte(nil)
	if i := bytes.IndexByte(line, ':'); i >= 0 {
		name, value = line[:i], line[i+1:]
		value = bytes.TrimPrefix(value, []byte(" "))
	}
	switch string(name) {
	case "data":
		if len(s.data)+len(value)+1 > s.max {
			return fmt.Errorf("%w: more than %d bytes of data", ErrEventTooLarge, s.max)
		}
		s.data = append(append(s.data, value...), '\n')
	case "event":
		s.eventName = string(value)
	case "id":
		if bytes.IndexByte(value, 0) < 0 {
			s.lastID = string(value)
		}
	case "retry":
		if ms, err := strconv.ParseUint(string(value), 10, 31); err == nil && isDigits(value) {
			s.retry = time.Duration(ms) * time.Millisecond
		}
	}
	return nil
}

func isDigits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return len(b) > 0
}

// readLine is the next line without its end. It ends a line at CR at once
// (waiting for a possible LF would stall a live stream) and drops an LF
// that follows.
func (s *SSEReader) readLine() ([]byte, error) {
	s.line = s.line[:0]
	for {
		c, err := s.r.ReadByte()
		if err != nil {
			return nil, err // at io.EOF an unfinished line and event are dropped
		}
		if s.skipLF {
			s.skipLF = false
			if c == '\n' {
				continue
			}
		}
		if !s.started {
			s.started = true
			if c == 0xEF && s.skipBOM() {
				continue
			}
		}
		switch c {
		case '\r':
			s.skipLF = true
			return s.line, nil
		case '\n':
			return s.line, nil
		}
		if len(s.line) >= s.max {
			return nil, fmt.Errorf("%w: a line of more than %d bytes", ErrEventTooLarge, s.max)
		}
		s.line = append(s.line, c)
	}
}

// skipBOM drops the rest of a UTF-8 byte-order mark (EF BB BF) at the
// start of the stream, its first byte read.
func (s *SSEReader) skipBOM() bool {
	b, err := s.r.Peek(2)
	if err != nil || b[0] != 0xBB || b[1] != 0xBF {
		return false
	}
	_, _ = s.r.Discard(2)
	return true
}

// SSEWriter writes a text/event-stream: each message as an event of type
// "message" (data with line breaks is written as several data lines,
// which a reader joins again with "\n"), and comments for keep-alives.
// Each write is flushed through the writer's http.Flusher when it has one.
// It is safe for concurrent use: events and comments never interleave.
type SSEWriter struct {
	mu sync.Mutex
	w  io.Writer
}

// NewSSEWriter writes events to w (an http.ResponseWriter, usually).
func NewSSEWriter(w io.Writer) *SSEWriter { return &SSEWriter{w: w} }

// Event writes one "message" event carrying data.
func (s *SSEWriter) Event(data []byte) error {
	var b bytes.Buffer
	b.WriteString("event: message\n")
	for _, line := range splitLines(string(data)) {
		b.WriteString("data: ")
		b.WriteString(line)
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	return s.write(b.Bytes())
}

// Comment writes a comment (": text"), which readers ignore: a keep-alive.
func (s *SSEWriter) Comment(text string) error {
	var b bytes.Buffer
	for _, line := range splitLines(text) {
		b.WriteString(": ")
		b.WriteString(line)
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	return s.write(b.Bytes())
}

func (s *SSEWriter) write(b []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.w.Write(b); err != nil {
		return err
	}
	switch w := s.w.(type) {
	case http.Flusher:
		w.Flush()
	case http.ResponseWriter:
		if err := http.NewResponseController(w).Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return err
		}
	}
	return nil
}

// splitLines splits s at CRLF, LF and CR, as an SSE reader ends lines.
func splitLines(s string) []string {
	s = strings.ReplaceAll(s, "\r\n", "\n")
	s = strings.ReplaceAll(s, "\r", "\n")
	return strings.Split(s, "\n")
}

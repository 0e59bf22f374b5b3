package broker

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// TestReadAnswer: a small answer is read as io.ReadAll(io.LimitReader(r,
// n+1)) reads it (at most one byte past the announced length, the reader's
// error passed on), into one buffer of the announced size.
func TestReadAnswer(t *testing.T) {
	boom := errors.New("boom")
	cases := []struct {
		name string
		r    func() io.Reader
		n    int64
	}{
		{"exact", func() io.Reader { return strings.NewReader("hello") }, 5},
		{"empty", func() io.Reader { return strings.NewReader("") }, 0},
		{"shorter than announced", func() io.Reader { return strings.NewReader("hel") }, 5},
		{"longer than announced", func() io.Reader { return strings.NewReader("hello, world") }, 5},
		{"one byte at a time", func() io.Reader { return iotest.OneByteReader(strings.NewReader("hello")) }, 5},
		{"data and EOF together", func() io.Reader { return iotest.DataErrReader(strings.NewReader("hello")) }, 5},
		{"error midway", func() io.Reader { return io.MultiReader(strings.NewReader("he"), iotest.ErrReader(boom)) }, 5},
	}
	for _, c := range cases {
		want, wantErr := io.ReadAll(io.LimitReader(c.r(), c.n+1))
		got, err := readAnswer(c.r(), c.n)
		if !bytes.Equal(got, want) || !errors.Is(err, wantErr) && err != wantErr {
			t.Errorf("%s: %q, %v; io.ReadAll: %q, %v", c.name, got, err, want, wantErr)
		}
	}
	body := bytes.Repeat([]byte("x"), 100<<10)
	r := bytes.NewReader(body)
	if n := testing.AllocsPerRun(20, func() { r.Reset(body); _, _ = readAnswer(r, int64(len(body))) }); n != 1 {
		t.Errorf("a 100 KB answer: %v allocations, want 1", n)
	}
}

package httpapi_test

import (
	"crypto/tls"
	"net/http"
	"sync"
	"testing"
)

// ticketLog is a client session cache that records the tickets it is given.
type ticketLog struct {
	mu   sync.Mutex
	puts int
}

func (l *ticketLog) Get(string) (*tls.ClientSessionState, bool) { return nil, false }

func (l *ticketLog) Put(_ string, cs *tls.ClientSessionState) {
	if cs != nil {
		l.mu.Lock()
		l.puts++
		l.mu.Unlock()
	}
}

// TestProxyDoorIssuesNoSessionTickets: a tunnel's TLS server mints no
// session ticket (each tunnel's config is its own, so one could never be
// redeemed: sealing and sending it was waste on every handshake), and a
// client that asks to resume does not (a resumed handshake would skip the
// SNI check of GetCertificate).
func TestProxyDoorIssuesNoSessionTickets(t *testing.T) {
	d := newDoorBench(t)
	tickets := &ticketLog{}
	tr := d.proxyTr.Clone()
	tr.DisableKeepAlives = true // a tunnel per request
	tr.TLSClientConfig.ClientSessionCache = tickets
	t.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr}
	for i := range 2 {
		req, _ := http.NewRequest("GET", "https://"+benchHost+"/items", nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.TLS == nil {
			t.Fatalf("tunnel %d: %d, TLS %v", i, resp.StatusCode, resp.TLS != nil)
		}
		if resp.TLS.DidResume {
			t.Errorf("tunnel %d resumed a TLS session", i)
		}
	}
	tickets.mu.Lock()
	defer tickets.mu.Unlock()
	if tickets.puts != 0 {
		t.Errorf("the door sent %d session tickets", tickets.puts)
	}
}

package approval

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"
)

// Webhook announces new pending actions and decisions to a URL (chat
// integrations), signed with HMAC-SHA256 over "<timestamp>.<body>" in
// X-Airlock-Signature: sha256=<hex>, the timestamp in X-Airlock-Timestamp.
type Webhook struct {
	URL    string
	Secret []byte
	Client *http.Client
	Log    *slog.Logger
	Now    func() time.Time
}

// WebhookEvent is the JSON body.
type WebhookEvent struct {
	Event     string    `json:"event"` // action.pending, action.denied, action.expired, action.executed, action.failed, action.approved
	ActionID  string    `json:"action_id"`
	SessionID string    `json:"session_id"`
	TaskID    string    `json:"task_id"`
	Upstream  string    `json:"upstream"`
	Method    string    `json:"method"`
	Path      string    `json:"path"`
	Status    string    `json:"status"`
	ExpiresAt time.Time `json:"expires_at"`
	Reviewer  string    `json:"reviewer,omitempty"`
	At        time.Time `json:"at"`
}

// Sign computes the signature header value for body sent at ts.
func Sign(secret []byte, ts string, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte("."))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// Send delivers ev in the background, retrying a few times.
func (w *Webhook) Send(ev WebhookEvent) {
	if w == nil || w.URL == "" {
		return
	}
	go func() {
		body, err := json.Marshal(ev)
		if err != nil {
			return
		}
		for attempt := 0; attempt < 3; attempt++ {
			if err = w.post(body); err == nil {
				return
			}
			time.Sleep(time.Duration(attempt+1) * 500 * time.Millisecond)
		}
		w.Log.Warn("webhook delivery failed", "event", ev.Event, "action_id", ev.ActionID, "err", err)
	}()
}

func (w *Webhook) post(body []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("bad webhook request")
	}
	ts := strconv.FormatInt(w.Now().Unix(), 10)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "airlock-webhook/1")
	req.Header.Set("X-Airlock-Timestamp", ts)
	req.Header.Set("X-Airlock-Signature", Sign(w.Secret, ts, body))
	resp, err := w.Client.Do(req)
	if err != nil {
		// Not err itself: it carries the URL, which for chat webhooks is a secret.
		return fmt.Errorf("post failed")
	}
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

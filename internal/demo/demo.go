// Package demo is the small upstream API that `broker dev` runs on loopback
// so the quickstart works offline. It requires a demo key, as a real API
// would, and echoes what it received so a user can see the key never
// reached the sandbox.
package demo

import (
	"crypto/subtle"
	"encoding/json"
	"io"
	"net/http"
	"sync"
)

// Handler is the demo API. Every route needs "Authorization: Bearer <key>".
//
//	GET  /hello          a greeting
//	GET  /whoami         echoes the Authorization header it received (the broker scrubs it)
//	POST /payments       {"to": "...", "amount": N}: records a payment
//	GET  /payments       lists the recorded payments
//	/mcp                 the demo MCP server (MCPHandler)
func Handler(key string) http.Handler {
	var (
		mu       sync.Mutex
		payments []map[string]any
	)
	authorized := func(w http.ResponseWriter, r *http.Request) bool {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte("Bearer "+key)) != 1 {
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "missing or wrong demo key"})
			return false
		}
		return true
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, r *http.Request) {
		if authorized(w, r) {
			writeJSON(w, http.StatusOK, map[string]string{"message": "hello from the demo API: the broker sent the key, the sandbox never had it"})
		}
	})
	mux.HandleFunc("GET /whoami", func(w http.ResponseWriter, r *http.Request) {
		if authorized(w, r) {
			writeJSON(w, http.StatusOK, map[string]string{"authorization_received": r.Header.Get("Authorization")})
		}
	})
	mux.HandleFunc("POST /payments", func(w http.ResponseWriter, r *http.Request) {
		if !authorized(w, r) {
			return
		}
		var p map[string]any
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&p); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "body must be JSON"})
			return
		}
		mu.Lock()
		payments = append(payments, p)
		n := len(payments)
		mu.Unlock()
		writeJSON(w, http.StatusCreated, map[string]any{"payment": n, "received": p})
	})
	mcpHandler := MCPHandler(key)
	mux.Handle("/mcp", mcpHandler)
	mux.HandleFunc("GET /payments", func(w http.ResponseWriter, r *http.Request) {
		if !authorized(w, r) {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]any{"items": payments})
	})
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

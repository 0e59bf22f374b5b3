package credentials

// ForgetMinted drops the session's leases without revoking them (a
// benchmark's cache miss on the next call).
func ForgetMinted(s *Service, sessionID string) {
	s.mu.Lock()
	delete(s.entries, sessionID)
	s.mu.Unlock()
}

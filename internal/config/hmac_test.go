package config

import (
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/airlock-broker/airlock/internal/fault"
)

func TestInjectHMAC(t *testing.T) {
	admin := env(map[string]string{"ADMIN": "0123456789abcdef0", "GITHUB_TOKEN": "x"})
	c, err := Parse([]byte(base+"    inject: {hmac: {header: X-Signature, algorithm: sha512}}\n"), admin)
	if err != nil {
		t.Fatal(err)
	}
	ups, _, err := c.Build(admin, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	h := ups["github"].Inject.HMAC
	if h == nil || h.Header != "X-Signature" || h.Algorithm != "sha512" || h.Encoding != "hex" ||
		h.Format != "t={timestamp},v1={signature}" || h.Over != "{method}\n{path}\n{query}\n{timestamp}\n{body_sha256}" {
		t.Fatalf("hmac = %+v", h)
	}
	if in := ups["github"].Inject; in.Header != "" || in.Format != "" {
		t.Fatalf("an hmac upstream also injects a header: %+v", in)
	}
	for name, yaml := range map[string]string{
		"with header":     "    inject: {header: X-Key, hmac: {header: X-Signature}}\n",
		"no header":       "    inject: {hmac: {algorithm: sha256}}\n",
		"bad algorithm":   "    inject: {hmac: {header: X-Sig, algorithm: md5}}\n",
		"with format":     "    inject: {format: \"{secret}\", hmac: {header: X-Sig}}\n",
		"unknown in over": "    inject: {hmac: {header: X-Sig, over: \"{method}{path}{secret}\"}}\n",
	} {
		_, err := Parse([]byte(base+yaml), admin)
		var fe *fault.FieldError
		if !errors.As(err, &fe) || (fe.Field != "upstreams[0].inject.hmac" && fe.Field != "upstreams[0].inject" && fe.Field != "upstreams[0].inject.format") {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}

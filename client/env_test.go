package client

import (
	"errors"
	"strings"
	"testing"
)

func TestEnv(t *testing.T) {
	s := &Session{ID: "ses_1", Proxy: &Proxy{URL: "http://10.0.0.5:8702", CAPEM: "PEM"}, Placeholders: map[string]string{"B_TOKEN": "b", "A_TOKEN": "a"}}
	vars, err := Env(s, EnvOptions{Token: "tok.en", CAFile: "/ca.pem", NoProxy: []string{"10.0.0.5", "ctl.internal"}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	var order []string
	for _, v := range vars {
		got[v.Name] = v.Value
		order = append(order, v.Name)
	}
	if got["HTTPS_PROXY"] != "http://airlock:tok.en@10.0.0.5:8702" || got["http_proxy"] != got["HTTPS_PROXY"] {
		t.Errorf("proxy vars: %v", got)
	}
	if got["NO_PROXY"] != "localhost,127.0.0.1,::1,10.0.0.5,ctl.internal" {
		t.Errorf("NO_PROXY %q", got["NO_PROXY"])
	}
	if strings.Join(order[len(order)-2:], ",") != "A_TOKEN,B_TOKEN" {
		t.Errorf("placeholders not last, by name: %v", order)
	}
	noTok, _ := Env(s, EnvOptions{CAFile: "/ca.pem"})
	if noTok[0].Value != "http://airlock:"+TokenPlaceholder+"@10.0.0.5:8702" {
		t.Errorf("without a token: %q", noTok[0].Value)
	}
	if _, err := Env(&Session{ID: "x"}, EnvOptions{CAFile: "/c"}); !errors.Is(err, ErrNoProxy) {
		t.Errorf("no proxy: %v", err)
	}
}

func TestFormatEnv(t *testing.T) {
	vars := []EnvVar{{"A", "it's"}, {"B", "$(x) `y`"}}
	sh, err := FormatEnv(vars, "sh")
	if err != nil || sh != "export A='it'\\''s'\nexport B='$(x) `y`'\n" {
		t.Errorf("sh: %q %v", sh, err)
	}
	env, err := FormatEnv(vars, "env")
	if err != nil || env != "A=it's\nB=$(x) `y`\n" {
		t.Errorf("env: %q %v", env, err)
	}
	for _, bad := range [][]EnvVar{{{"A", "x\ny=1"}}, {{"A", "x\r"}}, {{"A B", "x"}}, {{"1A", "x"}}, {{"", "x"}}, {{"A", "x\x00"}}} {
		if _, err := FormatEnv(bad, "sh"); err == nil {
			t.Errorf("FormatEnv(%q) accepted", bad)
		}
	}
	if _, err := FormatEnv(vars, "json"); err == nil {
		t.Error("an unknown format was accepted")
	}
}

package upstream

import (
	"regexp"
	"strings"
	"testing"
)

func TestParsePlaceholder(t *testing.T) {
	for _, tc := range []struct {
		name, env, format string
		want              string // regexp the minted value matches; "" = refused
	}{
		{"github", "GITHUB_TOKEN", "ghp_{random:36}", `^ghp_[A-Za-z0-9]{36}$`},
		{"two randoms", "K", "sk-{random:4}.{random:8}", `^sk-[A-Za-z0-9]{4}\.[A-Za-z0-9]{8}$`},
		{"literal only", "K", "dummy-token", `^dummy-token$`},
		{"bad env", "1X", "a", ""},
		{"env with dash", "GITHUB-TOKEN", "a", ""},
		{"reserved env", "HTTPS_PROXY", "a", ""},
		{"reserved env lower case", "https_proxy", "a", ""},
		{"loader env", "LD_PRELOAD", "a", ""},
		{"empty format", "K", "", ""},
		{"zero random", "K", "{random:0}", ""},
		{"huge random", "K", "{random:257}", ""},
		{"unknown token", "K", "{env:HOME}", ""},
		{"unclosed", "K", "ghp_{random:36", ""},
		{"quote", "K", "a'b", ""},
		{"dollar", "K", "a$(id)", ""},
		{"space", "K", "a b", ""},
		{"newline", "K", "a\nB=1", ""},
		{"too long", "K", strings.Repeat("{random:256}", 5), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ParsePlaceholder(tc.env, tc.format)
			if tc.want == "" {
				if err == nil {
					t.Fatalf("accepted")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			a, err := p.Mint()
			if err != nil {
				t.Fatal(err)
			}
			if !regexp.MustCompile(tc.want).MatchString(a) {
				t.Errorf("minted %q, want %s", a, tc.want)
			}
			if b, _ := p.Mint(); b == a && strings.Contains(tc.format, "{random") {
				t.Errorf("two mints gave %q", a)
			}
		})
	}
}

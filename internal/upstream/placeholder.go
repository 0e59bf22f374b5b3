package upstream

import (
	"crypto/rand"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Placeholder is what clients that refuse to run without a token get
// through the proxy door (DESIGN §8): a value shaped like the upstream's
// real credential ("ghp_" and 36 random characters), worth nothing
// anywhere, in environment variable Env. The door drops it (it drops the
// sandbox's Authorization) and injects the real credential.
type Placeholder struct {
	Env    string
	format string
	parts  []placeholderPart
}

// placeholderPart is literal text, or n random characters when n > 0.
type placeholderPart struct {
	text string
	n    int
}

// Bounds of a placeholder.
const (
	maxPlaceholderRandom = 256  // characters of one {random:N}
	maxPlaceholderLen    = 1024 // characters of a minted value
)

var (
	envNameRE      = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
	placeholderTok = regexp.MustCompile(`^\{random:([0-9]{1,4})\}`)
)

// ReservedEnv reports whether an environment variable name is one the
// sandbox's proxy environment sets (or a shell or loader reads), so no
// placeholder may take it. Names are compared case-insensitively
// (clients read http_proxy as well as HTTP_PROXY).
func ReservedEnv(name string) bool {
	n := strings.ToUpper(name)
	switch n {
	case "HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "ALL_PROXY", "SSL_CERT_FILE", "SSL_CERT_DIR",
		"REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "NODE_USE_ENV_PROXY", "GIT_SSL_CAINFO",
		"CURL_CA_BUNDLE", "AWS_CA_BUNDLE", "PATH", "HOME", "IFS", "ENV", "BASH_ENV", "SHELL", "PS4":
		return true
	}
	return strings.HasPrefix(n, "LD_") || strings.HasPrefix(n, "DYLD_") || strings.HasPrefix(n, "AIRLOCK_")
}

// literalChar is what a placeholder's literal text may hold: what real
// tokens hold, and nothing a shell or an env file reads specially.
func literalChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-_.:+=/~@%", c) >= 0
}

// ParsePlaceholder checks a placeholder's environment variable name and
// format: literal text (letters, digits, "-_.:+=/~@%") and {random:N}
// (N characters of [A-Za-z0-9] from crypto/rand, 1 ≤ N ≤ 256); at most
// 1024 characters in all.
func ParsePlaceholder(env, format string) (*Placeholder, error) {
	if !envNameRE.MatchString(env) {
		return nil, errors.New("env must be an environment variable name ([A-Za-z_][A-Za-z0-9_]*, at most 128)")
	}
	if ReservedEnv(env) {
		return nil, fmt.Errorf("env %s is set by the proxy environment or read by the shell; choose another name", env)
	}
	p := &Placeholder{Env: env, format: format}
	total := 0
	for rest := format; rest != ""; {
		if m := placeholderTok.FindStringSubmatch(rest); m != nil {
			n, _ := strconv.Atoi(m[1])
			if n < 1 || n > maxPlaceholderRandom {
				return nil, fmt.Errorf("format: {random:N} needs 1 ≤ N ≤ %d", maxPlaceholderRandom)
			}
			p.parts = append(p.parts, placeholderPart{n: n})
			total += n
			rest = rest[len(m[0]):]
			continue
		}
		i := 0
		for i < len(rest) && literalChar(rest[i]) {
			i++
		}
		if i == 0 {
			if rest[0] == '{' {
				return nil, errors.New("format: the only placeholder is {random:N}")
			}
			return nil, fmt.Errorf("format: character %q is not allowed (letters, digits, -_.:+=/~@%% and {random:N})", rest[0])
		}
		p.parts = append(p.parts, placeholderPart{text: rest[:i]})
		total += i
		rest = rest[i:]
	}
	if total == 0 {
		return nil, errors.New("format is required")
	}
	if total > maxPlaceholderLen {
		return nil, fmt.Errorf("format: a placeholder is at most %d characters", maxPlaceholderLen)
	}
	return p, nil
}

// Format is the placeholder's format as configured.
func (p *Placeholder) Format() string { return p.format }

const alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

// Mint makes a fresh value of the format.
func (p *Placeholder) Mint() (string, error) {
	var b strings.Builder
	for _, part := range p.parts {
		if part.n == 0 {
			b.WriteString(part.text)
			continue
		}
		buf := make([]byte, part.n)
		for i := range buf {
			c, err := randIndex(len(alnum))
			if err != nil {
				return "", err
			}
			buf[i] = alnum[c]
		}
		b.Write(buf)
	}
	return b.String(), nil
}

// randIndex is a uniform index below n (n ≤ 256) from crypto/rand, by
// rejection so no character is likelier than another.
func randIndex(n int) (int, error) {
	limit := 256 - 256%n
	var one [1]byte
	for {
		if _, err := rand.Read(one[:]); err != nil {
			return 0, err
		}
		if int(one[0]) < limit {
			return int(one[0]) % n, nil
		}
	}
}

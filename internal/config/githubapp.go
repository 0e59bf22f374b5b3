package config

import (
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
)

// GitHubAppCredential (source: github_app) mints an installation token
// per session (githubapp.App).
type GitHubAppCredential struct {
	AppID          string            `yaml:"app_id"`
	InstallationID string            `yaml:"installation_id"`
	PrivateKeyFile string            `yaml:"private_key_file"` // the app's PEM key (PKCS#1 or PKCS#8)
	APIURL         string            `yaml:"api_url"`          // default https://api.github.com
	Repositories   []string          `yaml:"repositories"`     // bound every token (names, without the owner)
	Permissions    map[string]string `yaml:"permissions"`      // bound every token ({contents: read, ...})
}

func (*GitHubAppCredential) Source() string { return "github_app" }

var (
	ghIDRE    = regexp.MustCompile(`^[0-9]{1,20}$`)
	ghRepoRE  = regexp.MustCompile(`^[A-Za-z0-9._-]{1,100}$`)
	ghPermRE  = regexp.MustCompile(`^[a-z_]{1,64}$`)
	ghLevelRE = regexp.MustCompile(`^(read|write|admin)$`)
)

func (c *GitHubAppCredential) validate(f string, _ bool) error {
	var e errs
	if !ghIDRE.MatchString(c.AppID) {
		e.add(f+".app_id", "is required (the app's numeric id)")
	}
	if !ghIDRE.MatchString(c.InstallationID) {
		e.add(f+".installation_id", "is required (the installation's numeric id)")
	}
	if c.PrivateKeyFile == "" {
		e.add(f+".private_key_file", "is required (the app's PEM private key)")
	}
	if !httpURL(c.APIURL, false) {
		e.add(f+".api_url", "must be an absolute http(s) URL without query, fragment or user info")
	}
	for i, r := range c.Repositories {
		if !ghRepoRE.MatchString(r) || r == "." || r == ".." {
			e.add(fmt.Sprintf("%s.repositories[%d]", f, i), "must be a repository name without its owner")
		}
	}
	for _, k := range slices.Sorted(maps.Keys(c.Permissions)) {
		if v := c.Permissions[k]; !ghPermRE.MatchString(k) || !ghLevelRE.MatchString(v) {
			e.add(keyPath(f+".permissions", k), "%q must be a permission name and read, write or admin", v)
		}
	}
	return e.err()
}

// httpURL says whether s is an absolute http(s) URL without fragment or
// user info, and without a query unless query.
func httpURL(s string, query bool) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" &&
		(query || u.RawQuery == "") && u.Fragment == "" && u.User == nil
}

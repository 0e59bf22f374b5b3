package config

import (
	"crypto/tls"
	"fmt"
	"net/url"
	"os"
	"regexp"

	"github.com/golang-jwt/jwt/v5"

	"github.com/airlock-broker/airlock/internal/upstream/githubapp"
)

// DefaultGitHubAPIURL is github_app's api_url by default.
const DefaultGitHubAPIURL = "https://api.github.com"

var (
	ghIDRE    = regexp.MustCompile(`^[0-9]{1,20}$`)
	ghRepoRE  = regexp.MustCompile(`^[A-Za-z0-9._-]{1,100}$`)
	ghPermRE  = regexp.MustCompile(`^[a-z_]{1,64}$`)
	ghLevelRE = regexp.MustCompile(`^(read|write|admin)$`)
)

func (c *Credential) validateGitHubApp(f string) error {
	if !ghIDRE.MatchString(c.AppID) {
		return fieldErr(f+".app_id", "is required (the app's numeric id)")
	}
	if !ghIDRE.MatchString(c.InstallationID) {
		return fieldErr(f+".installation_id", "is required (the installation's numeric id)")
	}
	if c.PrivateKeyFile == "" {
		return fieldErr(f+".private_key_file", "is required (the app's PEM private key)")
	}
	if c.APIURL == "" {
		c.APIURL = DefaultGitHubAPIURL
	}
	au, err := url.Parse(c.APIURL)
	if err != nil || (au.Scheme != "http" && au.Scheme != "https") || au.Host == "" || au.RawQuery != "" || au.Fragment != "" || au.User != nil {
		return fieldErr(f+".api_url", "must be an absolute http(s) URL without query, fragment or user info")
	}
	for i, r := range c.Repositories {
		if !ghRepoRE.MatchString(r) || r == "." || r == ".." {
			return fieldErr(fmt.Sprintf("%s.repositories[%d]", f, i), "must be a repository name without its owner")
		}
	}
	for k, v := range c.Permissions {
		if !ghPermRE.MatchString(k) || !ghLevelRE.MatchString(v) {
			return fieldErr(f+".permissions", "%q: %q must be a permission name and read, write or admin", k, v)
		}
	}
	return nil
}

func (c *Credential) buildGitHubApp(f string, tlsConf *tls.Config) (*githubapp.Minter, error) {
	pem, err := os.ReadFile(c.PrivateKeyFile)
	if err != nil {
		return nil, fieldErr(f+".private_key_file", "cannot read the key file")
	}
	key, err := jwt.ParseRSAPrivateKeyFromPEM(pem)
	if err != nil {
		return nil, fieldErr(f+".private_key_file", "is not an RSA private key in PEM")
	}
	au, _ := url.Parse(c.APIURL)
	return &githubapp.Minter{
		AppID: c.AppID, InstallationID: c.InstallationID, Key: key, APIURL: au,
		Repositories: c.Repositories, Permissions: c.Permissions,
		Client: tokenClient(tlsConf),
	}, nil
}

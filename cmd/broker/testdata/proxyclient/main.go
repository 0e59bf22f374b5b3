// Command proxyclient is a stock Go HTTP client for the proxy door tests:
// http.DefaultClient, so the proxy comes from HTTPS_PROXY/HTTP_PROXY
// (http.ProxyFromEnvironment) and the trusted CAs from SSL_CERT_FILE,
// nothing else. It prints the answer as JSON.
//
//	proxyclient METHOD URL [BODY]
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: proxyclient METHOD URL [BODY]")
		os.Exit(2)
	}
	var body io.Reader
	if len(os.Args) > 3 {
		body = strings.NewReader(os.Args[3])
	}
	req, err := http.NewRequest(os.Args[1], os.Args[2], body)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	_ = json.NewEncoder(os.Stdout).Encode(map[string]any{"status": resp.StatusCode, "header": resp.Header, "body": string(data)})
}

// Package deploy_test checks the deploy files: they cannot be run here (no
// container engine), so their security properties are read and asserted.
package deploy_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/airlock-broker/airlock/internal/config"
)

func TestDockerfile(t *testing.T) {
	data, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var froms, users []string
	exposed := map[string]bool{}
	static := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		switch strings.ToUpper(f[0]) {
		case "FROM":
			froms = append(froms, f[1])
		case "USER":
			users = append(users, f[1])
		case "EXPOSE":
			for _, p := range f[1:] {
				exposed[strings.TrimSuffix(p, "/tcp")] = true
			}
		case "RUN":
			if strings.Contains(sc.Text(), "CGO_ENABLED=0") {
				static = true
			}
		}
	}
	for _, port := range []string{"8700", "8701", "8702"} { // sandbox plane, control plane, proxy door
		if !exposed[port] {
			t.Errorf("the image does not expose port %s", port)
		}
	}
	if len(froms) < 2 {
		t.Errorf("not a multi-stage build: %v", froms)
	}
	if !static {
		t.Error("the binary is not built static (CGO_ENABLED=0)")
	}
	if len(users) == 0 || users[len(users)-1] == "root" || strings.HasPrefix(users[len(users)-1], "0") {
		t.Errorf("the final image does not run as non-root: %v", users)
	}
	if !strings.Contains(froms[len(froms)-1], "nonroot") && !strings.Contains(froms[len(froms)-1], "scratch") {
		t.Errorf("final base %s is not a minimal non-root image", froms[len(froms)-1])
	}
}

func TestSystemdUnitIsHardened(t *testing.T) {
	data, err := os.ReadFile("systemd/airlock.service")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok && !strings.HasPrefix(k, "#") {
			got[k] = v
		}
	}
	want := map[string]string{
		"NoNewPrivileges": "yes", "ProtectSystem": "strict", "PrivateTmp": "yes", "CapabilityBoundingSet": "",
		"ProtectHome": "yes", "PrivateDevices": "yes", "StateDirectory": "airlock", "DynamicUser": "yes",
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s=%q, want %q", k, g, v)
		}
	}
}

type object struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name      string `yaml:"name"`
		Namespace string `yaml:"namespace"`
	} `yaml:"metadata"`
	Spec map[string]any    `yaml:"spec"`
	Data map[string]string `yaml:"data"`
}

func objects(t *testing.T) []object {
	t.Helper()
	f, err := os.Open("kubernetes/airlock.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	var out []object
	for {
		var o object
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, o)
	}
}

// at walks nested maps and lists: at(m, "template", "spec", "containers", 0).
func at(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func TestKubernetesManifests(t *testing.T) {
	var deploy *object
	services := map[string]int{}
	policies := map[string]object{}
	for _, o := range objects(t) {
		o := o
		switch o.Kind {
		case "Deployment":
			deploy = &o
		case "Service":
			services[o.Metadata.Name] = at(o.Spec, "ports", 0, "port").(int)
		case "NetworkPolicy":
			policies[o.Metadata.Name] = o
		case "ConfigMap":
			// The shipped config must be one the broker accepts.
			env := map[string]string{"AIRLOCK_ADMIN_TOKEN": "a-long-enough-admin-token", "GITHUB_TOKEN": "x"}
			if _, err := config.Parse([]byte(o.Data["airlock.yaml"]), func(k string) string { return env[k] }); err != nil {
				t.Errorf("ConfigMap airlock.yaml: %v", err)
			}
		}
	}
	if deploy == nil {
		t.Fatal("no Deployment")
	}
	pod := at(deploy.Spec, "template", "spec")
	if at(pod, "securityContext", "runAsNonRoot") != true || at(pod, "automountServiceAccountToken") != false {
		t.Errorf("pod security context: %v", at(pod, "securityContext"))
	}
	c := at(pod, "containers", 0, "securityContext")
	if at(c, "readOnlyRootFilesystem") != true || at(c, "allowPrivilegeEscalation") != false || at(c, "capabilities", "drop", 0) != "ALL" {
		t.Errorf("container security context: %v", c)
	}
	if services["airlock-sandbox"] != 8700 || services["airlock-control"] != 8701 {
		t.Errorf("one Service per plane: %v", services)
	}
	// Sandboxes may reach only the sandbox plane (and DNS).
	sp, ok := policies["sandbox-egress-only-broker"]
	if !ok {
		t.Fatal("no NetworkPolicy for sandbox pods")
	}
	egress, _ := at(sp.Spec, "egress").([]any)
	for _, rule := range egress {
		for _, p := range at(rule, "ports").([]any) {
			port := at(p, "port").(int)
			if port != 8700 && port != 53 {
				t.Errorf("sandboxes may reach port %d", port)
			}
			if port == 8700 && at(rule, "to", 0, "podSelector", "matchLabels", "app.kubernetes.io/name") != "airlock" {
				t.Error("port 8700 egress is not limited to the broker's pods")
			}
		}
		if at(rule, "to") == nil {
			t.Error("a sandbox egress rule has no destination selector (would allow anywhere)")
		}
	}
	// The broker: its control plane only from the orchestrator.
	bp, ok := policies["airlock-broker"]
	if !ok {
		t.Fatal("no NetworkPolicy for the broker")
	}
	for _, rule := range at(bp.Spec, "ingress").([]any) {
		port := at(rule, "ports", 0, "port").(int)
		switch port {
		case 8700:
			if at(rule, "from", 0, "podSelector", "matchLabels", "airlock.dev/sandbox") != "true" {
				t.Error("sandbox plane open beyond sandbox pods")
			}
		case 8701:
			if at(rule, "from", 0, "namespaceSelector", "matchLabels", "kubernetes.io/metadata.name") != "orchestrator" {
				t.Error("control plane open beyond the orchestrator")
			}
		default:
			t.Errorf("broker ingress on unexpected port %d", port)
		}
	}
}

// TestKubernetesReplicated: the replicated Deployment (docs/ha.md): three
// replicas on PostgreSQL, the DSN from a Secret (never in the ConfigMap),
// readiness on /readyz, the same hardening as the single broker, and a
// PodDisruptionBudget over the same pods that keeps a majority up.
func TestKubernetesReplicated(t *testing.T) {
	data, err := os.ReadFile("kubernetes/airlock-replicated.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var deploy, pdb *object
	configs := 0
	for {
		var o object
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch o.Kind {
		case "Deployment":
			deploy = &o
		case "PodDisruptionBudget":
			pdb = &o
		case "ConfigMap":
			configs++
			env := map[string]string{"AIRLOCK_ADMIN_TOKEN": "a-long-enough-admin-token", "GITHUB_TOKEN": "x",
				"AIRLOCK_PG_DSN": "postgres://airlock@pg/airlock", "POD_NAME": "airlock-7d9-abc"}
			cfg, err := config.Parse([]byte(o.Data["airlock.yaml"]), func(k string) string { return env[k] })
			if err != nil {
				t.Fatalf("ConfigMap airlock.yaml: %v", err)
			}
			if cfg.Store.Driver != config.StorePostgres || cfg.Store.DSN != env["AIRLOCK_PG_DSN"] || cfg.Store.ReplicaID != env["POD_NAME"] {
				t.Errorf("store = %+v, want postgres with the DSN and replica id from the environment", cfg.Store)
			}
			if strings.Contains(o.Data["airlock.yaml"], "postgres://") {
				t.Error("the ConfigMap holds a DSN: it belongs in the Secret")
			}
		}
	}
	if deploy == nil || pdb == nil || configs != 1 {
		t.Fatalf("want a Deployment, a PodDisruptionBudget and a ConfigMap; got deployment %v, pdb %v, %d configs", deploy != nil, pdb != nil, configs)
	}
	if r := at(deploy.Spec, "replicas"); r != 3 {
		t.Errorf("replicas = %v, want 3", r)
	}
	pod := at(deploy.Spec, "template", "spec")
	if at(pod, "securityContext", "runAsNonRoot") != true || at(pod, "automountServiceAccountToken") != false {
		t.Errorf("pod security context: %v", at(pod, "securityContext"))
	}
	c := at(pod, "containers", 0)
	if sc := at(c, "securityContext"); at(sc, "readOnlyRootFilesystem") != true || at(sc, "allowPrivilegeEscalation") != false || at(sc, "capabilities", "drop", 0) != "ALL" {
		t.Errorf("container security context: %v", sc)
	}
	if at(c, "readinessProbe", "httpGet", "path") != "/readyz" {
		t.Errorf("readiness probe: %v", at(c, "readinessProbe"))
	}
	dsnFromSecret := false
	env, _ := at(c, "env").([]any)
	for _, e := range env {
		if at(e, "name") == "AIRLOCK_PG_DSN" {
			dsnFromSecret = at(e, "valueFrom", "secretKeyRef", "key") != nil && at(e, "value") == nil
		}
	}
	if !dsnFromSecret {
		t.Error("AIRLOCK_PG_DSN is not read from a Secret")
	}
	for _, v := range at(pod, "volumes").([]any) {
		if at(v, "persistentVolumeClaim") != nil {
			t.Error("a replica mounts a PersistentVolumeClaim: the state is the database's")
		}
	}
	sel := at(deploy.Spec, "selector", "matchLabels", "app.kubernetes.io/name")
	if at(pdb.Spec, "selector", "matchLabels", "app.kubernetes.io/name") != sel {
		t.Error("the PodDisruptionBudget does not select the Deployment's pods")
	}
	if m, ok := at(pdb.Spec, "minAvailable").(int); !ok || m < 2 || m >= 3 {
		t.Errorf("PodDisruptionBudget minAvailable = %v, want a majority of 3 that still allows a drain", at(pdb.Spec, "minAvailable"))
	}
}

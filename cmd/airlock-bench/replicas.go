// --store postgres: clusters of brokers on one PostgreSQL database each,
// measured beside the bare proxy and the broker on bbolt in the same run,
// alternated round by round; the load spread round-robin over a cluster's
// replicas with one session (created on the first, read through by the
// others).

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"
)

// cluster is n broker processes sharing one database.
type cluster struct {
	replicas []*brokerProc
}

func (c *cluster) target() string {
	if len(c.replicas) == 1 {
		return "postgres, 1 replica"
	}
	return fmt.Sprintf("postgres, %d replicas", len(c.replicas))
}

// cpu is the brokers' CPU so far, summed.
func (c *cluster) cpu() time.Duration {
	var t time.Duration
	for _, b := range c.replicas {
		t += cpuTime(b.cmd.Process.Pid)
	}
	return t
}

func (c *cluster) Close() {
	for _, b := range c.replicas {
		b.Close()
	}
}

// startCluster starts n brokers on dsn, one after the other (the first
// migrates the schema and creates the installation secret).
func startCluster(ctx context.Context, o options, durability, upstreamURL, dsn string, n int, stderr io.Writer) (*cluster, error) {
	c := &cluster{}
	for i := range n {
		store := fmt.Sprintf("store: {driver: postgres, dsn: \"${AIRLOCK_PG_DSN}\", replica_id: bench-%d}", i)
		b, err := startBroker(ctx, o.broker, durability, upstreamURL, false, store, stderr, "AIRLOCK_PG_DSN="+dsn)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("replica %d of %d: %w", i+1, n, err)
		}
		c.replicas = append(c.replicas, b)
	}
	return c, nil
}

// sandboxURLs is path on every replica's sandbox plane.
func (c *cluster) sandboxURLs(path string) []string {
	var out []string
	for _, b := range c.replicas {
		out = append(out, b.sandbox+path)
	}
	return out
}

// measureReplicas measures one durability mode: the bare proxy, the broker
// on bbolt and each cluster on PostgreSQL, at every variant and concurrency.
func measureReplicas(ctx context.Context, o options, durability string, up *upstream, bare *bareProxy, pg *pgServer, rep *report, stderr io.Writer) error {
	bolt, err := startBroker(ctx, o.broker, durability, up.URL(), false, "", stderr)
	if err != nil {
		return err
	}
	defer bolt.Close()
	var clusters []*cluster
	defer func() {
		for _, c := range clusters {
			c.Close()
		}
	}()
	for _, n := range o.replicas {
		dsn := o.pgDSN
		if pg != nil { // a fresh database per cluster and mode
			if dsn, err = pg.createDatabase(ctx, fmt.Sprintf("bench_%s_%d", durability, n)); err != nil {
				return err
			}
		}
		c, err := startCluster(ctx, o, durability, up.URL(), dsn, n, stderr)
		if err != nil {
			return err
		}
		clusters = append(clusters, c)
	}
	var dbCPU func() time.Duration
	if pg != nil {
		dbCPU = pg.cpu
	}

	type target struct {
		name  string
		urls  []string // sandbox planes
		token string
		cpu   func() time.Duration
		db    func() time.Duration
	}
	var targets []target
	var s struct{ Token string }
	if _, err := post(bolt.control+"/v1/sessions", bolt.admin, sessionRequest(false), &s); err != nil {
		return err
	}
	targets = append(targets, target{"broker", []string{bolt.sandbox}, s.Token, func() time.Duration { return cpuTime(bolt.cmd.Process.Pid) }, nil})
	for _, c := range clusters {
		var s struct{ Token string }
		first := c.replicas[0]
		if _, err := post(first.control+"/v1/sessions", first.admin, sessionRequest(false), &s); err != nil {
			return err
		}
		targets = append(targets, target{c.target(), c.sandboxURLs(""), s.Token, c.cpu, dbCPU})
	}

	order := `{"sku":"ABC-1234","qty":3}`
	variants := []struct {
		name, method, path, body string
		want                     int
		bare                     bool
	}{
		{"allowed GET", "GET", "/items", "", 200, true},
		{"allowed POST, JSON constraints", "POST", "/orders", order, 200, true},
		{"denied (no matching grant)", "DELETE", "/items", "", 403, false},
	}
	for _, v := range variants {
		if !o.wants(v.name) {
			continue
		}
		for _, n := range o.concurrency {
			fmt.Fprintf(stderr, "%s: %s x%d (bare, bbolt, %d clusters on PostgreSQL)\n", durability, v.name, n, len(clusters))
			round := o.duration / time.Duration(o.rounds)
			var bt tally
			ts := make([]tally, len(targets))
			for range o.rounds {
				if v.bare {
					bt.run(n, round, request{method: v.method, url: bare.URL() + v.path, body: v.body, want: v.want}, bare.cmd.Process.Pid)
				}
				for i, t := range targets {
					rq := request{method: v.method, token: t.token, body: v.body, want: v.want}
					for _, u := range t.urls {
						rq.urls = append(rq.urls, u+"/v1/proxy/api"+v.path)
					}
					ts[i].runCPU(n, round, rq, t.cpu, t.db)
				}
			}
			rep.sampleLoad()
			if v.bare {
				r := bt.result(n)
				r.Target, r.Variant, r.Durability = "bare proxy", v.name, durability
				rep.add(r)
			}
			for i, t := range targets {
				r := ts[i].result(n)
				r.Target, r.Variant, r.Durability = t.name, v.name, durability
				rep.add(r)
			}
		}
	}
	return nil
}

// runReplicas is the --store postgres run.
func runReplicas(ctx context.Context, o options, up *upstream, bare *bareProxy, rep *report, stderr io.Writer) error {
	var pg *pgServer
	if o.pgDSN == "" {
		var err error
		if pg, err = startPostgres(stderr); err != nil {
			return err
		}
		defer pg.Close()
		rep.database = "PostgreSQL " + pg.version + " of the bench's own on the same machine (unix socket, server defaults: fsync on, synchronous_commit on; a fresh database per cluster and mode)"
	} else {
		rep.database = "the database of --pg-dsn (every cluster on it, one after the other; its CPU is not measured)"
	}
	rep.sampleLoad()
	for _, d := range o.durabilities {
		if err := measureReplicas(ctx, o, d, up, bare, pg, rep, stderr); err != nil {
			return err
		}
	}
	return nil
}

// sampleLoad records the 1-minute load average now.
func (r *report) sampleLoad() {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return
	}
	var l float64
	if _, err := fmt.Sscan(string(data), &l); err == nil {
		r.loads = append(r.loads, l)
	}
}

// haMarkdown is the report of a --store postgres run.
func (r *report) haMarkdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Replicas on PostgreSQL\n\n## This run\n\nMeasured %s on %d cores, %s per point in %d alternated rounds, closed-loop callers on loopback; %s.\n",
		r.started.UTC().Format("2006-01-02 15:04 UTC"), runtime.NumCPU(), r.opts.duration, r.opts.rounds, r.database)
	if len(r.loads) > 0 {
		lo, hi := r.loads[0], r.loads[0]
		for _, l := range r.loads {
			lo, hi = min(lo, l), max(hi, l)
		}
		fmt.Fprintf(&b, "Load average (1 min) sampled between points: %.2f–%.2f.\n", lo, hi)
	}
	b.WriteString("Regenerate with `make perf-ha`. One session per target, created on its first replica; each caller sends its calls round-robin over the replicas. ")
	b.WriteString("CPU/call: the proxies' own (all replicas summed); PostgreSQL's beside it. Ratios: req/s against the bare proxy and against the broker on bbolt of the same point.\n\n")
	b.WriteString("| durability | variant | callers | target | req/s | × bare | × bbolt | p50 | p99 | CPU/call | PostgreSQL CPU/call | errors |\n")
	b.WriteString("| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, x := range r.results {
		bare, hasBare := r.find("bare proxy", x.Variant, x.Durability, x.Concurrency)
		bolt, _ := r.find("broker", x.Variant, x.Durability, x.Concurrency)
		name := x.Target
		switch x.Target {
		case "broker":
			name = "broker, bbolt"
		case "bare proxy":
			name = "bare reverse proxy"
		}
		xBare, xBolt := "—", "—"
		if hasBare && bare.RPS > 0 {
			xBare = fmt.Sprintf("%.2f", x.RPS/bare.RPS)
		}
		if x.Target != "bare proxy" && bolt.RPS > 0 {
			xBolt = fmt.Sprintf("%.2f", x.RPS/bolt.RPS)
		}
		dbc := "—"
		if x.DBCPU > 0 && x.Requests > 0 {
			dbc = fmt.Sprintf("%.0f µs", float64(x.DBCPU.Microseconds())/float64(x.Requests))
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %.0f | %s | %s | %s | %s | %s | %s | %d |\n",
			x.Durability, x.Variant, x.Concurrency, name, x.RPS, xBare, xBolt, ms(x.P50), ms(x.P99), x.cpuPerCall(), dbc, x.Errors)
	}
	return b.String()
}

// errReplicasOnly: options only the postgres mode takes.
var errReplicasOnly = errors.New("--store postgres measures the REST door's GET, POST and denied variants only (no --profile)")

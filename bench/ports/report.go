package main

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"text/tabwriter"

	"github.com/space-sandbox/space/bench/internal/stats"
)

// figures are one setup's (or one replica's) summary; as a ratio, each is
// cluster ÷ single node.
type figures struct {
	DownloadMiBPerS float64 `json:"download_mib_per_s"`
	FreshP50Ms      float64 `json:"fresh_p50_ms"`
	FreshP90Ms      float64 `json:"fresh_p90_ms"`
	KeptP50Ms       float64 `json:"kept_alive_p50_ms"`
	KeptP90Ms       float64 `json:"kept_alive_p90_ms"`
}

// result is the -json object.
type result struct {
	Mode     string   `json:"mode"`
	Bytes    int64    `json:"bytes"`
	Runs     int      `json:"runs"`
	Requests int      `json:"requests"`
	CPUs     int      `json:"cpus"`
	Single   *figures `json:"single,omitempty"`
	// Cluster pools both replicas' samples; Replicas has each alone.
	Cluster  *figures  `json:"cluster,omitempty"`
	Replicas []figures `json:"cluster_replicas,omitempty"`
	// Ratio is cluster ÷ single node, figure by figure (mode both).
	Ratio *figures `json:"cluster_over_single,omitempty"`
}

// summarize makes the figures of the samples of eps together.
func summarize(eps []*endpoint) figures {
	var dl, fresh, kept []float64
	for _, ep := range eps {
		dl = append(dl, ep.download.Samples...)
		fresh = append(fresh, ep.fresh.Samples...)
		kept = append(kept, ep.kept.Samples...)
	}
	return figures{
		DownloadMiBPerS: stats.Percentile(dl, 50),
		FreshP50Ms:      stats.Percentile(fresh, 50), FreshP90Ms: stats.Percentile(fresh, 90),
		KeptP50Ms: stats.Percentile(kept, 50), KeptP90Ms: stats.Percentile(kept, 90),
	}
}

func ratio(cluster, single figures) figures {
	div := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return a / b
	}
	return figures{
		DownloadMiBPerS: div(cluster.DownloadMiBPerS, single.DownloadMiBPerS),
		FreshP50Ms:      div(cluster.FreshP50Ms, single.FreshP50Ms), FreshP90Ms: div(cluster.FreshP90Ms, single.FreshP90Ms),
		KeptP50Ms: div(cluster.KeptP50Ms, single.KeptP50Ms), KeptP90Ms: div(cluster.KeptP90Ms, single.KeptP90Ms),
	}
}

// makeResult sums eps up as cfg ran them.
func makeResult(cfg config, eps []*endpoint) result {
	r := result{Mode: cfg.mode, Bytes: cfg.bytes, Runs: cfg.runs, Requests: cfg.requests, CPUs: runtime.NumCPU()}
	var cluster []*endpoint
	for _, ep := range eps {
		switch ep.setup {
		case "single":
			f := summarize([]*endpoint{ep})
			r.Single = &f
		case "cluster":
			cluster = append(cluster, ep)
			r.Replicas = append(r.Replicas, summarize([]*endpoint{ep}))
		}
	}
	if len(cluster) > 0 {
		f := summarize(cluster)
		r.Cluster = &f
	}
	if r.Single != nil && r.Cluster != nil {
		f := ratio(*r.Cluster, *r.Single)
		r.Ratio = &f
	}
	return r
}

// report prints every series in the benches' table, then the figures side
// by side (each replica, the cluster's pooled samples, and the ratio), and
// with -json the object.
func report(out io.Writer, cfg config, eps []*endpoint) error {
	r := makeResult(cfg, eps)
	fmt.Fprintf(out, "\nbench/ports: a private preview URL to the port server in a base sandbox (1 vCPU / 256 MiB), %d CPUs here; "+
		"cluster: 2 control replicas and 1 worker\n", r.CPUs)
	var all []stats.Series
	for _, ep := range eps {
		all = append(all, ep.download, ep.fresh, ep.kept)
	}
	stats.Print(out, all...)
	for _, ep := range eps {
		if ep.keptDials != 1 {
			fmt.Fprintf(out, "note: the kept-alive client of %s dialled %d times (its connection did not last)\n", ep.name, ep.keptDials)
		}
	}

	cols := []string{}
	vals := []figures{}
	for _, ep := range eps {
		cols, vals = append(cols, ep.name), append(vals, summarize([]*endpoint{ep}))
	}
	if r.Cluster != nil && len(r.Replicas) > 1 {
		cols, vals = append(cols, "cluster, both"), append(vals, *r.Cluster)
	}
	if r.Ratio != nil {
		cols, vals = append(cols, "cluster ÷ single"), append(vals, *r.Ratio)
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "measure\t")
	for _, c := range cols {
		fmt.Fprintf(tw, "%s\t", c)
	}
	fmt.Fprintln(tw)
	rows := []struct {
		name string
		get  func(figures) float64
	}{
		{fmt.Sprintf("download of %s, median MiB/s", mib(cfg.bytes)), func(f figures) float64 { return f.DownloadMiBPerS }},
		{"GET / fresh connection, median ms", func(f figures) float64 { return f.FreshP50Ms }},
		{"GET / fresh connection, p90 ms", func(f figures) float64 { return f.FreshP90Ms }},
		{"GET / kept-alive connection, median ms", func(f figures) float64 { return f.KeptP50Ms }},
		{"GET / kept-alive connection, p90 ms", func(f figures) float64 { return f.KeptP90Ms }},
	}
	for _, row := range rows {
		fmt.Fprintf(tw, "%s\t", row.name)
		for i, v := range vals {
			if r.Ratio != nil && i == len(vals)-1 {
				fmt.Fprintf(tw, "%.2f×\t", row.get(v))
			} else {
				fmt.Fprintf(tw, "%.2f\t", row.get(v))
			}
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	if cfg.json {
		return json.NewEncoder(out).Encode(r)
	}
	return nil
}

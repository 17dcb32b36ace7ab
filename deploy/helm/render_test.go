package helm

import (
	"bytes"
	"fmt"
	"sort"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/releaseutil"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

const (
	chartDir    = "space"
	release     = "space"
	namespace   = "space-system"
	kubeVersion = "v1.34.4"
)

// required are the values no install works without: the external
// PostgreSQL and object store.
func required() map[string]any {
	return map[string]any{
		"store":       map[string]any{"postgres": map[string]any{"dsn": "postgres://space:pw@db.example.internal:5432/space?sslmode=verify-full"}},
		"objectStore": map[string]any{"url": "s3://space-snapshots/prod?endpoint=s3.example.internal:443", "accessKey": "AKIDEXAMPLE", "secretKey": "wJalrXUtnFEMI"},
	}
}

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	c, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	return c
}

// render is `helm template`: an install in client-only dry-run mode.
func render(t *testing.T, vals map[string]any) (string, error) {
	t.Helper()
	return renderRelease(t, release, namespace, vals)
}

// renderRelease renders the chart as release name in namespace ns.
func renderRelease(t *testing.T, name, ns string, vals map[string]any) (string, error) {
	t.Helper()
	install := action.NewInstall(&action.Configuration{})
	install.ClientOnly, install.DryRun, install.Replace = true, true, true
	install.ReleaseName, install.Namespace = name, ns
	kv, err := chartutil.ParseKubeVersion(kubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	install.KubeVersion = kv
	install.APIVersions = chartutil.VersionSet{"monitoring.coreos.com/v1", "monitoring.coreos.com/v1/ServiceMonitor"}
	rel, err := install.Run(loadChart(t), vals)
	if err != nil {
		return "", err
	}
	return rel.Manifest, nil
}

// objects is a rendered release decoded object by object, strictly (an
// unknown field is an error), into the types of client-go's scheme and the
// Prometheus Operator's.
type objects []runtime.Object

var decoder = func() runtime.Decoder {
	s := runtime.NewScheme()
	if err := scheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := monitoringv1.AddToScheme(s); err != nil {
		panic(err)
	}
	return json.NewSerializerWithOptions(json.DefaultMetaFactory, s, s, json.SerializerOptions{Yaml: true, Strict: true})
}()

func mustRender(t *testing.T, vals map[string]any) objects {
	t.Helper()
	manifest, err := render(t, vals)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	return decodeAll(t, manifest)
}

func decodeAll(t *testing.T, manifest string) objects {
	t.Helper()
	files := releaseutil.SplitManifests(manifest)
	keys := make([]string, 0, len(files))
	for k := range files {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out objects
	for _, k := range keys {
		doc := strings.TrimSpace(files[k])
		if doc == "" {
			continue
		}
		obj, gvk, err := decoder.Decode([]byte(doc), nil, nil)
		if err != nil {
			t.Fatalf("decode %s as a known kind: %v\n%s", k, err, doc)
		}
		if gvk.Kind == "" {
			t.Fatalf("%s has no kind", k)
		}
		out = append(out, obj)
	}
	if len(out) == 0 {
		t.Fatal("the chart rendered no object")
	}
	return out
}

// get returns the one object of type T named name, failing when absent.
func get[T runtime.Object](t *testing.T, objs objects, name string) T {
	t.Helper()
	var found []T
	for _, o := range objs {
		if v, ok := o.(T); ok && nameOf(o) == name {
			found = append(found, v)
		}
	}
	if len(found) != 1 {
		var zero T
		t.Fatalf("want one %T named %s, found %d (rendered: %s)", zero, name, len(found), objs.summary())
	}
	return found[0]
}

func all[T runtime.Object](objs objects) []T {
	var out []T
	for _, o := range objs {
		if v, ok := o.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

func nameOf(o runtime.Object) string {
	if m, ok := o.(interface{ GetName() string }); ok {
		return m.GetName()
	}
	return ""
}

func (objs objects) summary() string {
	var b bytes.Buffer
	for _, o := range objs {
		fmt.Fprintf(&b, "%T/%s ", o, nameOf(o))
	}
	return b.String()
}

// merge returns base with over laid on top (maps merged, other values replaced).
func merge(base, over map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		if bm, ok := out[k].(map[string]any); ok {
			if om, ok := v.(map[string]any); ok {
				out[k] = merge(bm, om)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// valuesYAML parses values written as YAML, for readable tests.
func valuesYAML(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

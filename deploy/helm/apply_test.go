package helm

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/releaseutil"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/space-sandbox/space/internal/testenv"
	"github.com/space-sandbox/space/internal/testenv/kuberig"
)

// fieldManager owns every field the tests apply, as `helm install
// --server-side`-style tooling would under its own name.
const fieldManager = "space-chart-test"

func TestMain(m *testing.M) {
	code := m.Run()
	kuberig.StopShared(code != 0)
	os.Exit(code)
}

// applied is one release of the chart applied to the rig.
type applied struct {
	rig  *kuberig.Cluster
	ns   string  // the release namespace
	objs objects // the rendered objects, decoded strictly
	docs []*unstructured.Unstructured
}

// applyRelease renders the chart as release name in namespace ns and applies
// every object with server-side apply (strict field validation) to the
// test binary's real kube-apiserver, in helm's install order (namespaces
// and CRDs first); it fails the test on the first object the API server
// refuses.
func applyRelease(t *testing.T, name, ns string, vals map[string]any) applied {
	t.Helper()
	rig := kuberig.Shared(t, kuberig.Options{})
	manifest, err := renderRelease(t, name, ns, vals)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	if err := rig.Namespace(bounded(t, time.Minute), ns); err != nil {
		t.Fatal(err)
	}
	a := applied{rig: rig, ns: ns, objs: decodeAll(t, manifest), docs: unstructuredDocs(t, manifest)}
	a.apply(t)
	return a
}

// apply applies a's objects (again).
func (a applied) apply(t *testing.T) {
	t.Helper()
	ctx := bounded(t, 2*time.Minute)
	dyn := dynamic.NewForConfigOrDie(a.rig.Config)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(discovery.NewDiscoveryClientForConfigOrDie(a.rig.Config)))
	for _, u := range a.docs {
		if err := apply(ctx, dyn, mapper, a.ns, u); err != nil {
			t.Fatalf("server-side apply of %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
}

// unstructuredDocs splits a manifest into its objects, namespaces and
// CustomResourceDefinitions first (what the others may need), then in
// file order.
func unstructuredDocs(t *testing.T, manifest string) []*unstructured.Unstructured {
	t.Helper()
	files := releaseutil.SplitManifests(manifest)
	keys := make([]string, 0, len(files))
	for k := range files {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []*unstructured.Unstructured
	for _, k := range keys {
		doc := strings.TrimSpace(files[k])
		if doc == "" {
			continue
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatalf("parse %s: %v", k, err)
		}
		out = append(out, u)
	}
	rank := func(u *unstructured.Unstructured) int {
		if i := slices.Index(releaseutil.InstallOrder, u.GetKind()); i >= 0 {
			return i
		}
		return len(releaseutil.InstallOrder)
	}
	sort.SliceStable(out, func(i, j int) bool { return rank(out[i]) < rank(out[j]) })
	return out
}

// apply is one server-side apply: the object as the chart renders it,
// field manager fieldManager, unknown or duplicate fields refused.
func apply(ctx context.Context, dyn dynamic.Interface, mapper *restmapper.DeferredDiscoveryRESTMapper, releaseNS string, u *unstructured.Unstructured) error {
	gvk := u.GroupVersionKind()
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		mapper.Reset() // a CRD applied just before
		m, err = mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if err != nil {
		return fmt.Errorf("the API server serves no %s: %w", gvk, err)
	}
	body, err := u.MarshalJSON()
	if err != nil {
		return err
	}
	var res dynamic.ResourceInterface = dyn.Resource(m.Resource)
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		ns := u.GetNamespace()
		if ns == "" {
			ns = releaseNS // as helm does for objects that name none
		}
		res = dyn.Resource(m.Resource).Namespace(ns)
	}
	_, err = res.Patch(ctx, u.GetName(), types.ApplyPatchType, body, metav1.PatchOptions{
		FieldManager: fieldManager, FieldValidation: metav1.FieldValidationStrict,
	})
	return err
}

// serviceMonitorCRD stands in for the Prometheus Operator's CRD, which
// the rig does not have and no Go module we fetch ships as YAML: it has
// the real group, version, kind, names and scope, so the API server
// serves the kind and applies the chart's object, but its schema keeps
// unknown fields. The fields themselves are checked against the
// operator's own Go types (render_test.go decodes strictly into them).
func serviceMonitorCRD() *apiextensionsv1.CustomResourceDefinition {
	preserve := true
	return &apiextensionsv1.CustomResourceDefinition{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition"},
		ObjectMeta: metav1.ObjectMeta{Name: "servicemonitors.monitoring.coreos.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "monitoring.coreos.com",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "servicemonitors", Singular: "servicemonitor", Kind: "ServiceMonitor", ListKind: "ServiceMonitorList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {Type: "object", XPreserveUnknownFields: &preserve},
					},
				}},
			}},
		},
	}
}

// installServiceMonitorCRD applies serviceMonitorCRD and waits until the
// API server serves the kind.
func installServiceMonitorCRD(t *testing.T, rig *kuberig.Cluster) {
	t.Helper()
	obj, err := toUnstructured(serviceMonitorCRD())
	if err != nil {
		t.Fatal(err)
	}
	ctx := bounded(t, time.Minute)
	dyn := dynamic.NewForConfigOrDie(rig.Config)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(discovery.NewDiscoveryClientForConfigOrDie(rig.Config)))
	if err := apply(ctx, dyn, mapper, "", obj); err != nil {
		t.Fatalf("apply the ServiceMonitor CRD: %v", err)
	}
	disc := discovery.NewDiscoveryClientForConfigOrDie(rig.Config)
	testenv.Eventually(t, 30*time.Second, func() error {
		_, err := disc.ServerResourcesForGroupVersion("monitoring.coreos.com/v1")
		return err
	})
}

func toUnstructured(v any) (*unstructured.Unstructured, error) {
	b, err := yaml.Marshal(v)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{}
	return u, yaml.Unmarshal(b, &u.Object)
}

// TestServerSideApply applies the chart to a real kube-apiserver for the
// required values and for the values that turn every switch, twice each:
// every object is accepted with strict field validation, applying the same
// objects again changes none (no field the server defaults differently on
// each apply), and every object exists afterwards with the test's field
// manager as an owner.
func TestServerSideApply(t *testing.T) {
	for _, tc := range []struct {
		name, release, ns string
		vals              func(t *testing.T) map[string]any
		before            func(t *testing.T, rig *kuberig.Cluster)
	}{
		{name: "required values", release: release, ns: namespace, vals: func(*testing.T) map[string]any { return required() }},
		{
			name: "other values", release: "other", ns: "other-system",
			vals: func(t *testing.T) map[string]any { return merge(required(), otherValues(t)) },
			// otherValues uses a sandbox namespace of its own
			// (createNamespace false) and turns the ServiceMonitor on.
			before: func(t *testing.T, rig *kuberig.Cluster) {
				if err := rig.Namespace(bounded(t, time.Minute), "agents"); err != nil {
					t.Fatal(err)
				}
				installServiceMonitorCRD(t, rig)
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rig := kuberig.Shared(t, kuberig.Options{})
			if tc.before != nil {
				tc.before(t, rig)
			}
			first := applyRelease(t, tc.release, tc.ns, tc.vals(t))
			versions := generations(t, first)
			first.apply(t)
			again := generations(t, first)
			for key, v := range versions {
				if again[key] != v {
					t.Errorf("%s changed on a second identical apply (%s -> %s)", key, v, again[key])
				}
			}
			t.Logf("%d objects applied: %s", len(first.docs), first.objs.summary())
		})
	}
}

// generations reads every applied object back and returns what changes
// when its content does, by kind/namespace/name: metadata.generation for
// the kinds that have one (their status, which controllers write, does not
// move it), else resourceVersion. It fails when an object is missing or
// not managed by fieldManager.
func generations(t *testing.T, a applied) map[string]string {
	t.Helper()
	ctx := bounded(t, time.Minute)
	dyn := dynamic.NewForConfigOrDie(a.rig.Config)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(discovery.NewDiscoveryClientForConfigOrDie(a.rig.Config)))
	out := map[string]string{}
	for _, u := range a.docs {
		gvk := u.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatal(err)
		}
		var res dynamic.ResourceInterface = dyn.Resource(m.Resource)
		ns := ""
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			ns = u.GetNamespace()
			if ns == "" {
				ns = a.ns
			}
			res = dyn.Resource(m.Resource).Namespace(ns)
		}
		got, err := res.Get(ctx, u.GetName(), metav1.GetOptions{})
		if err != nil {
			t.Fatalf("read back %s %s/%s: %v", u.GetKind(), ns, u.GetName(), err)
		}
		managed := false
		for _, f := range got.GetManagedFields() {
			managed = managed || (f.Manager == fieldManager && f.Operation == metav1.ManagedFieldsOperationApply)
		}
		if !managed {
			t.Errorf("%s %s: no apply entry of %s in managedFields", u.GetKind(), u.GetName(), fieldManager)
		}
		version := got.GetResourceVersion()
		if g := got.GetGeneration(); g != 0 {
			version = fmt.Sprintf("generation %d", g)
		}
		out[u.GetKind()+"/"+ns+"/"+u.GetName()] = version
	}
	return out
}

func bounded(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

package helm

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/releaseutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/space-sandbox/space/internal/server"
	"github.com/space-sandbox/space/internal/testenv"
	"github.com/space-sandbox/space/internal/testenv/kuberig"
	"github.com/space-sandbox/space/internal/worker/remote"
)

// tlsFiles writes the rendered TLS Secret's keys into a directory and
// rewrites the chart's /etc/space/tls/ paths in args to it.
func tlsFiles(t *testing.T, objs objects, args []string) []string {
	t.Helper()
	var sec *corev1.Secret
	for _, s := range all[*corev1.Secret](objs) {
		if s.Name == "space-tls" {
			sec = s
		}
	}
	if sec == nil {
		t.Fatalf("the chart renders no TLS Secret space-tls by default: %s", objs.summary())
	}
	dir := t.TempDir()
	for _, k := range []string{"tls.crt", "tls.key", "ca.crt"} {
		if len(sec.Data[k]) == 0 {
			t.Fatalf("TLS Secret has no %s", k)
		}
		if err := os.WriteFile(filepath.Join(dir, k), sec.Data[k], 0o600); err != nil {
			t.Fatal(err)
		}
	}
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = strings.ReplaceAll(a, "/etc/space/tls/", dir+"/")
	}
	return out
}

// TestWorkerProtocolTLS runs a worker and a control plane's dialer as the
// chart configures them by default (their rendered args through spaced's
// own parsers, the chart's own certificate): the TLS handshake succeeds
// at an address the certificate does not hold (a node's), a plaintext
// client is refused, and the worker's https:// --control URL is a name
// the same certificate holds under the same CA.
func TestWorkerProtocolTLS(t *testing.T) {
	objs := mustRender(t, required())
	d := get[*appsv1.Deployment](t, objs, "space-control")
	ds := get[*appsv1.DaemonSet](t, objs, "space-worker")
	cArgs := containerArgs(t, objs, container(t, d.Spec.Template.Spec, "control"), "control")
	ccfg, err := server.ParseControlFlags(tlsFiles(t, objs, cArgs))
	if err != nil {
		t.Fatal(err)
	}
	wArgs := containerArgs(t, objs, container(t, ds.Spec.Template.Spec, "worker"), "worker")
	wcfg, err := server.ParseWorkerFlags(tlsFiles(t, objs, wArgs))
	if err != nil {
		t.Fatal(err)
	}
	serverTLS, err := server.WorkerServerTLS(wcfg)
	if err != nil || serverTLS == nil {
		t.Fatalf("the chart's worker serves no TLS (%v): args %q", err, wArgs)
	}
	clientTLS, err := server.WorkerClientTLS(ccfg)
	if err != nil || clientTLS == nil {
		t.Fatalf("the chart's control plane checks no worker certificate (%v): args %q", err, cArgs)
	}
	tok, err := remote.NewToken(strings.Repeat("a1", 24))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- server.ServeWorker(ctx, newMemWorker(newMemSnapshots()), ln, server.WorkerServing{Token: tok, TLS: serverTLS})
	}()
	defer func() { stop(); <-served }()
	call := func(cfg remote.ClientConfig) error {
		c, err := remote.NewClient(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err = c.Sandboxes(cctx)
		return err
	}
	if err := call(remote.ClientConfig{Address: ln.Addr().String(), Token: tok, TLS: clientTLS}); err != nil {
		t.Errorf("control plane to worker over the chart's TLS: %v", err)
	}
	if err := call(remote.ClientConfig{Address: "http://" + ln.Addr().String(), Token: tok}); err == nil {
		t.Error("a plaintext (h2c) dial was served by the chart's worker")
	}

	// The worker's calls to the API: https, a name of the certificate.
	u, err := url.Parse(wcfg.Node.Control)
	if err != nil || u.Scheme != "https" || wcfg.Node.ControlCAFile == "" {
		t.Fatalf("worker --control %q (CA %q): want https with the chart's CA", wcfg.Node.Control, wcfg.Node.ControlCAFile)
	}
	if ccfg.APITLSCertFile == "" {
		t.Fatal("the control plane's API serves no TLS, so the workers' https --control fails")
	}
	verify(t, ccfg.APITLSCertFile, wcfg.Node.ControlCAFile, u.Hostname())
	verify(t, wcfg.TLSCertFile, ccfg.WorkerCAFile, ccfg.WorkerServerName)
}

func verify(t *testing.T, certFile, caFile, name string) {
	t.Helper()
	certPEM, _ := os.ReadFile(certFile)
	caPEM, _ := os.ReadFile(caFile)
	block, _ := pem.Decode(certPEM)
	if block == nil {
		t.Fatalf("%s: no PEM", certFile)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: name, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("certificate for %s: %v", name, err)
	}
}

// rawDocs is a manifest's documents as maps (kinds the decoder does not know).
func rawDocs(t *testing.T, manifest string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, doc := range releaseutil.SplitManifests(manifest) {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			t.Fatal(err)
		}
		if m != nil {
			out = append(out, m)
		}
	}
	return out
}

// TestTLSSources: cert-manager issues the certificate when an issuer is
// named (no generated Secret), tls.existingSecret is used as is, and
// with every secret the user's own two renders are identical (`helm
// template` and Argo CD render without lookup).
func TestTLSSources(t *testing.T) {
	manifest, err := render(t, merge(required(), valuesYAML(t, `tls: {certManager: {issuerRef: {name: space-ca, kind: ClusterIssuer}}}`)))
	if err != nil {
		t.Fatal(err)
	}
	var cert map[string]any
	for _, m := range rawDocs(t, manifest) {
		if m["kind"] == "Certificate" {
			cert = m
		}
		if m["kind"] == "Secret" && m["metadata"].(map[string]any)["name"] == "space-tls" {
			t.Error("a TLS Secret rendered although cert-manager issues it")
		}
	}
	if cert == nil {
		t.Fatal("no cert-manager Certificate rendered for tls.certManager.issuerRef")
	}
	spec := cert["spec"].(map[string]any)
	names := spec["dnsNames"].([]any)
	if spec["secretName"] != "space-tls" || spec["issuerRef"].(map[string]any)["kind"] != "ClusterIssuer" ||
		!slices.Contains(names, any("space-worker.space-system.svc")) || !slices.Contains(names, any("space-control.space-system.svc")) {
		t.Errorf("Certificate spec %v", spec)
	}

	own := merge(required(), valuesYAML(t, `
secrets: {existingSecret: keys}
store: {postgres: {dsn: "", existingSecret: pg}}
objectStore: {existingSecret: s3, accessKey: "", secretKey: ""}
tls: {existingSecret: my-tls}`))
	objs := mustRender(t, own)
	if s := all[*corev1.Secret](objs); len(s) != 0 {
		t.Errorf("secrets rendered although all are the user's own: %v", s[0].Name)
	}
	for _, name := range []string{"space-control", "space-worker"} {
		var spec corev1.PodSpec
		if name == "space-control" {
			spec = get[*appsv1.Deployment](t, objs, name).Spec.Template.Spec
		} else {
			spec = get[*appsv1.DaemonSet](t, objs, name).Spec.Template.Spec
		}
		if !slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Secret != nil && v.Secret.SecretName == "my-tls" }) {
			t.Errorf("%s does not mount tls.existingSecret", name)
		}
	}
	a, _ := render(t, own)
	b, _ := render(t, own)
	if a != b {
		t.Error("two renders with every secret the user's own differ: an Argo CD sync would roll the Pods")
	}
}

// TestIngress: an optional Ingress with TLS to the API's Service, HTTPS
// to the backend when the API serves TLS.
func TestIngress(t *testing.T) {
	if n := len(all[*networkingv1.Ingress](mustRender(t, required()))); n != 0 {
		t.Errorf("%d Ingress by default", n)
	}
	objs := mustRender(t, merge(required(), valuesYAML(t, `
ingress: {enabled: true, className: nginx, hosts: [{host: space.example.com}], tls: [{secretName: api-tls, hosts: [space.example.com]}]}`)))
	ing := get[*networkingv1.Ingress](t, objs, "space-control")
	if *ing.Spec.IngressClassName != "nginx" || ing.Spec.TLS[0].SecretName != "api-tls" || ing.Spec.Rules[0].Host != "space.example.com" {
		t.Errorf("ingress %+v", ing.Spec)
	}
	be := ing.Spec.Rules[0].HTTP.Paths[0].Backend.Service
	if be.Name != "space-control" || be.Port.Name != "http" || ing.Annotations["nginx.ingress.kubernetes.io/backend-protocol"] != "HTTPS" {
		t.Errorf("backend %+v annotations %v", be, ing.Annotations)
	}
}

// testHooks renders the chart's `helm test` hooks.
func testHooks(t *testing.T, vals map[string]any) string {
	t.Helper()
	install := action.NewInstall(&action.Configuration{})
	install.ClientOnly, install.DryRun, install.Replace = true, true, true
	install.ReleaseName, install.Namespace = release, namespace
	kv, _ := chartutil.ParseKubeVersion(kubeVersion)
	install.KubeVersion = kv
	rel, err := install.Run(loadChart(t), vals)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, h := range rel.Hooks {
		for _, e := range h.Events {
			if e == "test" {
				out = append(out, h.Manifest)
			}
		}
	}
	return strings.Join(out, "\n---\n")
}

// TestHelmTest: `helm test` runs a Pod calling /readyz and /v1/version
// over the API's TLS; it is accepted by a real API server.
func TestHelmTest(t *testing.T) {
	manifest := testHooks(t, required())
	objs := decodeAll(t, manifest)
	pod := get[*corev1.Pod](t, objs, "space-test-api")
	script := strings.Join(pod.Spec.Containers[0].Args, " ")
	for _, want := range []string{"https://space-control.space-system.svc:80/readyz", "/v1/version", "--cacert /etc/space/tls/ca.crt"} {
		if !strings.Contains(script, want) {
			t.Errorf("test Pod script %q lacks %s", script, want)
		}
	}
	mounted(t, pod.Spec, pod.Spec.Containers[0], "/etc/space/tls/ca.crt")

	a := applyRelease(t, "hooks", "hooks-system", required())
	dyn := dynamic.NewForConfigOrDie(a.rig.Config)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(discovery.NewDiscoveryClientForConfigOrDie(a.rig.Config)))
	for _, u := range unstructuredDocs(t, manifest) {
		u.SetNamespace("hooks-system")
		if err := apply(bounded(t, time.Minute), dyn, mapper, "hooks-system", u); err != nil {
			t.Errorf("server-side apply of the test hook %s: %v", u.GetName(), err)
		}
	}
}

// TestWorkerPod: no /dev/kvm under tcg (a CharDevice under kvm), a
// startupProbe with minutes of budget, never on space-<host> nodes.
func TestWorkerPod(t *testing.T) {
	for _, tc := range []struct {
		accel string
		want  bool
	}{{"tcg", false}, {"auto", false}, {"kvm", true}} {
		accel, want := tc.accel, tc.want
		objs := mustRender(t, merge(required(), map[string]any{"worker": map[string]any{"accel": accel}}))
		pod := get[*appsv1.DaemonSet](t, objs, "space-worker").Spec.Template.Spec
		c := container(t, pod, "worker")
		has := slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool { return v.HostPath != nil && v.HostPath.Path == "/dev/kvm" })
		mnt := slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/dev/kvm" })
		if has != want || mnt != want {
			t.Errorf("accel %s: /dev/kvm volume %v mount %v, want %v", accel, has, mnt, want)
		}
		if accel != "kvm" {
			continue
		}
		sp := c.StartupProbe
		if sp == nil || sp.TCPSocket == nil || sp.PeriodSeconds*sp.FailureThreshold < 300 {
			t.Errorf("startupProbe %+v: want a TCP probe of the worker port with 5 minutes or more", sp)
		}
		aff := pod.Affinity
		if aff == nil || aff.NodeAffinity == nil || aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
			t.Fatal("worker DaemonSet has no node affinity keeping it off space-<host> nodes")
		}
		e := aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[0]
		if e.Key != "space.dev/worker" || e.Operator != corev1.NodeSelectorOpNotIn || !slices.Equal(e.Values, []string{"true"}) {
			t.Errorf("node affinity %+v", e)
		}
	}
	objs := mustRender(t, merge(required(), otherValues(t)))
	w := container(t, get[*appsv1.DaemonSet](t, objs, "space-worker").Spec.Template.Spec, "worker")
	c := container(t, get[*appsv1.Deployment](t, objs, "space-control").Spec.Template.Spec, "control")
	if !slices.ContainsFunc(w.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "scratch" }) ||
		!slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "db-ca" }) {
		t.Error("extraVolumeMounts not applied")
	}
	if w.StartupProbe.FailureThreshold != 240 {
		t.Errorf("worker.startupProbe not applied: %+v", w.StartupProbe)
	}
}

// TestServiceAccounts: rbac.create=false keeps the ServiceAccounts the
// Pods run as; serviceAccount.create=false drops them.
func TestServiceAccounts(t *testing.T) {
	for _, tc := range []struct {
		vals string
		want int
	}{{`rbac: {create: false}`, 2}, {`serviceAccount: {create: false}`, 0}, {`{}`, 2}} {
		objs := mustRender(t, merge(required(), valuesYAML(t, tc.vals)))
		if n := len(all[*corev1.ServiceAccount](objs)); n != tc.want {
			t.Errorf("%s: %d ServiceAccounts, want %d", tc.vals, n, tc.want)
		}
	}
}

// TestMetricsPort: /metrics on a port of its own, not the API's.
func TestMetricsPort(t *testing.T) {
	objs := mustRender(t, required())
	c := container(t, get[*appsv1.Deployment](t, objs, "space-control").Spec.Template.Spec, "control")
	cfg, err := server.ParseControlFlags(containerArgs(t, objs, c, "control"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MetricsListen != "0.0.0.0:9090" {
		t.Errorf("control --metrics-listen %q: /metrics is on the API's port", cfg.MetricsListen)
	}
	svc := get[*corev1.Service](t, objs, "space-control")
	if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "metrics" && p.Port == 9090 }) {
		t.Errorf("service ports %+v lack metrics", svc.Spec.Ports)
	}
}

// TestValuesNameRenderedSecrets: the Secrets values.yaml tells people to
// read (kubectl get secret NAME) are the ones the chart makes.
func TestValuesNameRenderedSecrets(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	objs := mustRender(t, required())
	refs := regexp.MustCompile(`get secret (\S+)`).FindAllStringSubmatch(string(raw), -1)
	if len(refs) == 0 {
		t.Fatal("values.yaml names no Secret to read")
	}
	for _, m := range refs {
		name := strings.ReplaceAll(m[1], "<release>", release)
		name = strings.Replace(name, release+"-space", "space", 1) // the release holds the chart's name
		if !slices.ContainsFunc(all[*corev1.Secret](objs), func(s *corev1.Secret) bool { return s.Name == name }) {
			t.Errorf("values.yaml names Secret %s (%s), which the chart does not make", m[1], name)
		}
	}
}

// TestSchema: values.schema.json refuses what spaced would, at render.
func TestSchema(t *testing.T) {
	if _, err := os.Stat(filepath.Join(chartDir, "values.schema.json")); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{`worker: {accel: fast}`, `drain: {policy: later}`, `workers: {}`, `control: {replicas: 0}`, `tls: {enabled: "yes"}`} {
		if _, err := render(t, merge(required(), valuesYAML(t, bad))); err == nil || !strings.Contains(err.Error(), "schema") {
			t.Errorf("%s: render %v, want a schema error", bad, err)
		}
	}
}

// certificateCRD stands in for cert-manager's Certificate CRD as
// serviceMonitorCRD does for the Prometheus Operator's: real group,
// version, kind and scope, fields kept unchecked.
func certificateCRD() *apiextensionsv1.CustomResourceDefinition {
	preserve := true
	return &apiextensionsv1.CustomResourceDefinition{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition"},
		ObjectMeta: metav1.ObjectMeta{Name: "certificates.cert-manager.io"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "cert-manager.io",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "certificates", Singular: "certificate", Kind: "Certificate", ListKind: "CertificateList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type:       "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": {Type: "object", XPreserveUnknownFields: &preserve}},
				}},
			}},
		},
	}
}

// TestCertManagerApplies applies a release whose certificate cert-manager
// issues (and with rbac.create=false, ServiceAccounts alone) to the rig.
func TestCertManagerApplies(t *testing.T) {
	rig := kuberig.Shared(t, kuberig.Options{})
	dyn := dynamic.NewForConfigOrDie(rig.Config)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(discovery.NewDiscoveryClientForConfigOrDie(rig.Config)))
	crd, err := toUnstructured(certificateCRD())
	if err != nil {
		t.Fatal(err)
	}
	if err := apply(bounded(t, time.Minute), dyn, mapper, "", crd); err != nil {
		t.Fatalf("apply the Certificate CRD: %v", err)
	}
	disc := discovery.NewDiscoveryClientForConfigOrDie(rig.Config)
	testenv.Eventually(t, 30*time.Second, func() error {
		_, err := disc.ServerResourcesForGroupVersion("cert-manager.io/v1")
		return err
	})
	const ns = "cm-system"
	manifest, err := renderRelease(t, "cm", ns, merge(required(), valuesYAML(t, `
tls: {certManager: {issuerRef: {name: space-ca, kind: ClusterIssuer}}}
rbac: {create: false}
sandboxes: {namespace: cm-sandboxes}`)))
	if err != nil {
		t.Fatal(err)
	}
	if err := rig.Namespace(bounded(t, time.Minute), ns); err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	for _, u := range unstructuredDocs(t, manifest) {
		if err := apply(bounded(t, time.Minute), dyn, mapper, ns, u); err != nil {
			t.Fatalf("server-side apply of %s %s: %v", u.GetKind(), u.GetName(), err)
		}
		kinds[u.GetKind()] = true
	}
	if !kinds["Certificate"] || !kinds["ServiceAccount"] || kinds["Role"] {
		t.Errorf("applied kinds %v: want a Certificate and ServiceAccounts, no Roles", kinds)
	}
}

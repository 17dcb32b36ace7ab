package helm

import (
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint/support"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
)

// The defaults name no PostgreSQL and no object store, which the chart
// does not run: rendering says which value is missing instead of
// installing a control plane that cannot start.
func TestDefaultsAskForExternalServices(t *testing.T) {
	for _, tc := range []struct {
		name string
		vals map[string]any
		want string
	}{
		{"defaults", nil, "store.postgres: set dsn"},
		{"no object store", map[string]any{"store": required()["store"]}, "objectStore.url"},
		{"no credentials", merge(required(), map[string]any{"objectStore": map[string]any{"accessKey": ""}}), "objectStore: set accessKey and secretKey"},
		{"no capacity", merge(required(), map[string]any{"worker": map[string]any{"capacity": map[string]any{"vcpus": 0}}}), "/worker/capacity/vcpus"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := render(t, tc.vals)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("render: %v, want an error naming %q", err, tc.want)
			}
		})
	}
}

func TestLint(t *testing.T) {
	kv, err := chartutil.ParseKubeVersion(kubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		vals map[string]any
	}{{"required values", required()}, {"other values", merge(required(), otherValues(t))}} {
		t.Run(tc.name, func(t *testing.T) {
			l := action.NewLint()
			l.Strict, l.Namespace, l.KubeVersion = true, namespace, kv
			res := l.Run([]string{chartDir}, tc.vals)
			if res.TotalChartsLinted != 1 {
				t.Fatalf("linted %d charts", res.TotalChartsLinted)
			}
			for _, m := range res.Messages {
				if m.Severity >= support.WarningSev {
					t.Errorf("lint: %s", m)
				}
			}
			for _, err := range res.Errors {
				t.Errorf("lint: %v", err)
			}
		})
	}
	// Helm lints in lint mode, where fail and required only log: the
	// defaults' missing services are TestDefaultsAskForExternalServices'.
}

func TestControlPlane(t *testing.T) {
	objs := mustRender(t, required())
	d := get[*appsv1.Deployment](t, objs, "space-control")
	if *d.Spec.Replicas != 2 {
		t.Errorf("replicas %d, want 2", *d.Spec.Replicas)
	}
	pod := d.Spec.Template.Spec
	c := container(t, pod, "control")
	if c.Image != "localhost/space-control:0.1.0" {
		t.Errorf("image %q: want what `make images` names it", c.Image)
	}
	if c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("probes %s and %s, want /readyz and /healthz", c.ReadinessProbe.HTTPGet.Path, c.LivenessProbe.HTTPGet.Path)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Errorf("no resource requests: %v", c.Resources.Requests)
	}
	sc := c.SecurityContext
	if pod.SecurityContext.RunAsUser == nil || *pod.SecurityContext.RunAsUser != 65532 || !*sc.RunAsNonRoot || *sc.AllowPrivilegeEscalation || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("control plane is not a restricted nonroot container: %+v", sc)
	}
	if c.Args[0] != "control" || !slices.Contains(c.Args, "--namespace=space-sandboxes") {
		t.Errorf("args %q", c.Args)
	}
	// The DSN and the S3 keys come from Secrets, never from the command line.
	for _, a := range c.Args {
		if strings.Contains(a, "postgres://") || strings.Contains(a, "wJalrXUtnFEMI") {
			t.Errorf("secret on the command line: %q", a)
		}
	}
	store := env(t, c, "SPACE_STORE")
	sec := get[*corev1.Secret](t, objs, store.ValueFrom.SecretKeyRef.Name)
	if sec.StringData[store.ValueFrom.SecretKeyRef.Key] != required()["store"].(map[string]any)["postgres"].(map[string]any)["dsn"] {
		t.Errorf("SPACE_STORE's secret does not hold the DSN")
	}
	boot := get[*corev1.Secret](t, objs, "space-bootstrap")
	if len(boot.Data["worker-token"]) < 32 || !strings.HasPrefix(string(boot.Data["admin-key"]), "space_admin_") {
		t.Errorf("bootstrap secret: worker-token %d bytes, admin-key %q…", len(boot.Data["worker-token"]), string(boot.Data["admin-key"])[:6])
	}
	if len(boot.Data["secrets-key"]) != 32 || !slices.Contains(c.Args, "--secrets-key-file=/etc/space/bootstrap/secrets-key") {
		t.Errorf("bootstrap secret: secrets-key %d bytes (want 32), or the control plane is not given it", len(boot.Data["secrets-key"]))
	}
	pdb := get[*policyv1.PodDisruptionBudget](t, objs, "space-control")
	if pdb.Spec.MinAvailable.IntValue() != 1 || !selects(t, pdb.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
		t.Errorf("PDB minAvailable %s selector %v", pdb.Spec.MinAvailable, pdb.Spec.Selector.MatchLabels)
	}
	svc := get[*corev1.Service](t, objs, "space-control")
	if !selects(t, svc.Spec.Selector, d.Spec.Template.Labels) || svc.Spec.Ports[0].TargetPort.StrVal != "http" {
		t.Errorf("service %v does not reach the control plane's http port", svc.Spec)
	}
}

func TestWorker(t *testing.T) {
	objs := mustRender(t, required())
	ds := get[*appsv1.DaemonSet](t, objs, "space-worker")
	pod := ds.Spec.Template.Spec
	c := container(t, pod, "worker")
	if c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged {
		t.Error("worker is not privileged")
	}
	if pod.NodeSelector["space.dev/kvm"] != "true" {
		t.Errorf("node selector %v, want the KVM hosts", pod.NodeSelector)
	}
	want := map[string]struct {
		path string
		typ  corev1.HostPathType
	}{
		"data": {"/var/lib/space", corev1.HostPathDirectoryOrCreate},
		"kvm":  {"/dev/kvm", corev1.HostPathCharDev},
		"tun":  {"/dev/net/tun", corev1.HostPathCharDev},
	}
	for _, v := range pod.Volumes {
		if w, ok := want[v.Name]; ok {
			if v.HostPath == nil || v.HostPath.Path != w.path || *v.HostPath.Type != w.typ {
				t.Errorf("volume %s: %+v, want hostPath %s (%s)", v.Name, v.HostPath, w.path, w.typ)
			}
			delete(want, v.Name)
		}
	}
	if len(want) > 0 {
		t.Errorf("volumes missing: %v", want)
	}
	for _, m := range []string{"/var/lib/space", "/dev/kvm", "/dev/net/tun"} {
		if !slices.ContainsFunc(c.VolumeMounts, func(vm corev1.VolumeMount) bool { return vm.MountPath == m }) {
			t.Errorf("%s not mounted", m)
		}
	}
	// Capacity advertised = what the Pod takes from its host, plus overhead.
	// The defaults fit a laptop's Kind cluster.
	checkCapacity(t, c, 1, 2048, 4, resource.MustParse("1250m"), resource.MustParse("2560Mi"))
	if c.Resources.Limits.Memory() != nil && !c.Resources.Limits.Memory().IsZero() {
		t.Errorf("memory limit %s by default: it would OOM-kill sandboxes", c.Resources.Limits.Memory())
	}
	if ds.Spec.UpdateStrategy.Type != appsv1.OnDeleteDaemonSetStrategyType {
		t.Errorf("update strategy %s, want OnDelete (drain first)", ds.Spec.UpdateStrategy.Type)
	}
	if !slices.Contains(c.Args, "--node-name=space-$(NODE_NAME)") || env(t, c, "NODE_NAME").ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("node name is not space-<host>: %q", c.Args)
	}

	np := get[*networkingv1.NetworkPolicy](t, objs, "space-worker")
	ctl := get[*appsv1.Deployment](t, objs, "space-control")
	if !selects(t, np.Spec.PodSelector.MatchLabels, ds.Spec.Template.Labels) {
		t.Fatalf("network policy selects %v, not the workers", np.Spec.PodSelector.MatchLabels)
	}
	if len(np.Spec.Ingress) != 1 || len(np.Spec.Ingress[0].From) != 1 || len(np.Spec.Ingress[0].Ports) != 1 {
		t.Fatalf("network policy ingress %+v: want one rule, from the control plane, to one port", np.Spec.Ingress)
	}
	rule := np.Spec.Ingress[0]
	if !selects(t, rule.From[0].PodSelector.MatchLabels, ctl.Spec.Template.Labels) || selects(t, rule.From[0].PodSelector.MatchLabels, ds.Spec.Template.Labels) {
		t.Errorf("ingress from %v: want the control plane's Pods only", rule.From[0].PodSelector.MatchLabels)
	}
	if rule.Ports[0].Port.IntValue() != 7070 || c.Ports[0].ContainerPort != 7070 {
		t.Errorf("ingress port %s, worker port %d, want 7070", rule.Ports[0].Port, c.Ports[0].ContainerPort)
	}
	// Where workers connect is bounded too (TestWorkerEgressPolicy).
	if eg := get[*networkingv1.NetworkPolicy](t, objs, "space-worker-egress"); !selects(t, eg.Spec.PodSelector.MatchLabels, ds.Spec.Template.Labels) {
		t.Errorf("egress policy selects %v, not the workers", eg.Spec.PodSelector.MatchLabels)
	}
	if len(all[*admissionv1.ValidatingAdmissionPolicy](objs)) != 1 {
		t.Error("no admission policy keeping workers to their own node")
	}
}

func checkCapacity(t *testing.T, c corev1.Container, vcpus, mem, sandboxes int, cpu, memory resource.Quantity) {
	t.Helper()
	for _, a := range []string{"--vcpus=" + itoa(vcpus), "--memory-mib=" + itoa(mem), "--sandboxes=" + itoa(sandboxes)} {
		if !slices.Contains(c.Args, a) {
			t.Errorf("args %q lack %s", c.Args, a)
		}
	}
	if c.Resources.Requests.Cpu().Cmp(cpu) != 0 || c.Resources.Requests.Memory().Cmp(memory) != 0 {
		t.Errorf("requests cpu %s memory %s, want %s and %s", c.Resources.Requests.Cpu(), c.Resources.Requests.Memory(), &cpu, &memory)
	}
}

// otherValues turns on, off or changes every switch the chart has.
func otherValues(t *testing.T) map[string]any {
	return valuesYAML(t, `
image: {registry: registry.example.internal/platform, pullPolicy: Always, pullSecrets: [regcred]}
sandboxes: {namespace: agents, createNamespace: false}
store: {postgres: {dsn: "", existingSecret: pg-dsn, existingSecretKey: url}}
objectStore: {existingSecret: s3-keys, accessKey: "", secretKey: ""}
secrets: {existingSecret: space-keys}
tls: {existingSecret: space-tls-own}
ingress: {enabled: true, className: nginx, hosts: [{host: space.example.com}], tls: [{secretName: space-api-tls, hosts: [space.example.com]}]}
control:
  image: {digest: "sha256:1111111111111111111111111111111111111111111111111111111111111111"}
  replicas: 3
  previewDomain: preview.example.com
  features: [e2b]
  extraArgs: [--quota-sandboxes=50]
  extraVolumes: [{name: db-ca, configMap: {name: db-ca}}]
  extraVolumeMounts: [{name: db-ca, mountPath: /etc/db-ca, readOnly: true}]
  podDisruptionBudget: {minAvailable: 2}
  service: {type: LoadBalancer, port: 443}
  affinity: {podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: [{topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app.kubernetes.io/component: control}}}]}}
worker:
  image: {tag: "9.9.9"}
  nodeSelector: {node.example.com/pool: kvm}
  tolerations: [{key: dedicated, value: kvm, effect: NoSchedule}]
  port: 9443
  dataDir: /srv/space
  capacity: {vcpus: 30, memoryMiB: 122880, sandboxes: 60}
  overhead: {cpu: "2", memoryMiB: 4096}
  memoryLimit: true
  cacheBytes: 17179869184
  accel: tcg
  startupProbe: {periodSeconds: 5, failureThreshold: 240}
  extraVolumes: [{name: scratch, emptyDir: {}}]
  extraVolumeMounts: [{name: scratch, mountPath: /scratch}]
  updateStrategy: {type: RollingUpdate, rollingUpdate: {maxUnavailable: 1}}
cluster: {podCIDRs: [10.244.0.0/16], serviceCIDRs: [10.96.0.0/12]}
egress: {allowPrivate: [10.50.0.0/16, 169.254.169.254/32], deny: [10.0.0.0/24]}
rbac: {restrictWorkersToOwnNode: false}
networkPolicy: {enabled: false}
serviceMonitor: {enabled: true, labels: {release: prometheus}}
`)
}

func TestOtherValues(t *testing.T) {
	objs := mustRender(t, merge(required(), otherValues(t)))
	for _, s := range all[*corev1.Secret](objs) {
		t.Errorf("secret %s rendered although every secret is the user's own", s.Name)
	}
	if len(all[*corev1.Namespace](objs)) != 0 || len(all[*networkingv1.NetworkPolicy](objs)) != 0 || len(all[*admissionv1.ValidatingAdmissionPolicy](objs)) != 0 {
		t.Errorf("namespace, network policy or admission policy rendered although turned off: %s", objs.summary())
	}
	d := get[*appsv1.Deployment](t, objs, "space-control")
	c := container(t, d.Spec.Template.Spec, "control")
	if *d.Spec.Replicas != 3 || c.Image != "registry.example.internal/platform/space-control@sha256:1111111111111111111111111111111111111111111111111111111111111111" {
		t.Errorf("replicas %d image %s", *d.Spec.Replicas, c.Image)
	}
	if ref := env(t, c, "SPACE_STORE").ValueFrom.SecretKeyRef; ref.Name != "pg-dsn" || ref.Key != "url" {
		t.Errorf("SPACE_STORE from %s/%s, want pg-dsn/url", ref.Name, ref.Key)
	}
	if env(t, c, "SPACE_S3_SECRET_KEY").ValueFrom.SecretKeyRef.Name != "s3-keys" || d.Spec.Template.Spec.Volumes[2].Secret.SecretName != "space-keys" {
		t.Error("existing secrets not used")
	}
	for _, a := range []string{"--feature=e2b", "--quota-sandboxes=50", "--namespace=agents"} {
		if !slices.Contains(c.Args, a) {
			t.Errorf("control args %q lack %s", c.Args, a)
		}
	}
	if d.Spec.Template.Spec.Affinity == nil || d.Spec.Template.Spec.TopologySpreadConstraints != nil {
		t.Error("affinity not replacing the default spread")
	}
	ds := get[*appsv1.DaemonSet](t, objs, "space-worker")
	w := container(t, ds.Spec.Template.Spec, "worker")
	if w.Image != "registry.example.internal/platform/space-worker:9.9.9" || w.ImagePullPolicy != corev1.PullAlways {
		t.Errorf("worker image %s %s", w.Image, w.ImagePullPolicy)
	}
	checkCapacity(t, w, 30, 122880, 60, resource.MustParse("32"), resource.MustParse("126976Mi"))
	if w.Resources.Limits.Memory().Cmp(resource.MustParse("126976Mi")) != 0 {
		t.Errorf("memory limit %s, want the request", w.Resources.Limits.Memory())
	}
	if ds.Spec.Template.Spec.Volumes[0].HostPath.Path != "/srv/space" || w.Ports[0].ContainerPort != 9443 {
		t.Errorf("data dir %s port %d", ds.Spec.Template.Spec.Volumes[0].HostPath.Path, w.Ports[0].ContainerPort)
	}
	for _, a := range []string{"--egress-deny=10.244.0.0/16,10.96.0.0/12,10.0.0.0/24", "--egress-allow-private=10.50.0.0/16,169.254.169.254/32"} {
		if !slices.Contains(w.Args, a) {
			t.Errorf("worker args %q lack %s", w.Args, a)
		}
	}
	if ds.Spec.Template.Spec.Tolerations[0].Key != "dedicated" || ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType {
		t.Error("tolerations or update strategy not applied")
	}
	sm := get[*monitoringv1.ServiceMonitor](t, objs, "space-control")
	svc := get[*corev1.Service](t, objs, "space-control")
	if sm.Labels["release"] != "prometheus" || !selects(t, sm.Spec.Selector.MatchLabels, svc.Labels) || sm.Spec.Endpoints[0].Port != "metrics" {
		t.Errorf("service monitor %+v does not scrape the control service", sm.Spec)
	}
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || svc.Spec.Ports[0].Port != 443 {
		t.Errorf("service %s:%d", svc.Spec.Type, svc.Spec.Ports[0].Port)
	}
	if pdb := get[*policyv1.PodDisruptionBudget](t, objs, "space-control"); pdb.Spec.MinAvailable.IntValue() != 2 {
		t.Errorf("PDB minAvailable %s", pdb.Spec.MinAvailable)
	}
}

func container(t *testing.T, pod corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	for _, c := range pod.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %s", name)
	return corev1.Container{}
}

func env(t *testing.T, c corev1.Container, name string) corev1.EnvVar {
	t.Helper()
	for _, e := range c.Env {
		if e.Name == name {
			return e
		}
	}
	t.Fatalf("container %s has no $%s", c.Name, name)
	return corev1.EnvVar{}
}

// selects reports whether selector matches the labels; an empty selector
// (which matches everything) is an error here.
func selects(t *testing.T, selector, lbls map[string]string) bool {
	t.Helper()
	if len(selector) == 0 {
		t.Error("empty selector")
		return false
	}
	return labels.SelectorFromSet(selector).Matches(labels.Set(lbls))
}

func itoa(n int) string { return resource.NewQuantity(int64(n), resource.DecimalSI).String() }
